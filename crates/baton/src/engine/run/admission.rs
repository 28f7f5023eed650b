//! A run's standing with its orchestrator: not admitted yet, admitted, or ended.
//!
//! A run is admitted when its future first polls it, and ends when its last node and
//! driver are done; a cancel can end it while it is being admitted. Whichever of "admitted"
//! and "ended" comes second tells the orchestrator the run ended, so it is told exactly
//! once. Only [`Admission`]'s methods touch its atomic.

use std::sync::atomic::{AtomicU8, Ordering};

const NOT_ADMITTED: u8 = 0;
const ADMITTED: u8 = 1;
const ENDED: u8 = 2;

/// See the module docs.
#[derive(Debug)]
pub(in crate::engine) struct Admission(AtomicU8);

/// What [`Admission::admit`] found.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::engine) enum Admit {
    /// The run is admitted; its end will tell the orchestrator.
    Admitted,
    /// The run ended while it was being admitted, as a cancel swept it: the caller tells the
    /// orchestrator now.
    AlreadyEnded,
}

/// What [`Admission::end`] found.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::engine) enum End {
    /// The run was admitted: the caller tells the orchestrator it ended.
    WasAdmitted,
    /// Not admitted yet: whoever admits it will find it ended.
    NotAdmitted,
}

impl Admission {
    pub(in crate::engine) const fn new() -> Self {
        Admission(AtomicU8::new(NOT_ADMITTED))
    }

    /// Marks the run admitted by its orchestrator.
    pub(in crate::engine) fn admit(&self) -> Admit {
        // AcqRel: the side that comes second sees what the first published: the key the
        // orchestrator keeps the run at, and the records of nodes swept meanwhile.
        match self
            .0
            .compare_exchange(NOT_ADMITTED, ADMITTED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Admit::Admitted,
            Err(_) => Admit::AlreadyEnded,
        }
    }

    /// The run ended: every node is finalized and every driver gone.
    pub(in crate::engine) fn end(&self) -> End {
        match self.0.swap(ENDED, Ordering::AcqRel) {
            ADMITTED => End::WasAdmitted,
            _ => End::NotAdmitted,
        }
    }

    /// Whether a node's outcome recorded now is counted at once: the run was admitted, or
    /// ended, which it can only be after its nodes were recorded.
    #[inline]
    pub(in crate::engine) fn counts_outcomes(&self) -> bool {
        self.0.load(Ordering::Acquire) != NOT_ADMITTED
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whichever_comes_second_tells_the_orchestrator() {
        let normal = Admission::new();
        assert!(!normal.counts_outcomes());
        assert_eq!(normal.admit(), Admit::Admitted);
        assert!(normal.counts_outcomes());
        assert_eq!(normal.end(), End::WasAdmitted);
        let swept = Admission::new();
        assert_eq!(swept.end(), End::NotAdmitted);
        assert_eq!(swept.admit(), Admit::AlreadyEnded);
    }
}
