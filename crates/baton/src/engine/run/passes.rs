//! Where an inline run's future is in one poll's passes over its drivers, and what the
//! passes after the first have spent: read by the drivers it polls, which start nodes
//! there on the passes' budget ([`REPOLL_MAX`]) rather than tokio's coop budget, and give
//! the task's turn back when it is spent.

use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};

use super::joined::REPOLL_MAX;

const _: () = assert!(
    REPOLL_MAX < u16::MAX as usize,
    "node starts are counted in a u16"
);

/// See the module docs. Written and read only by code the run's future polls, in its
/// poll, hence `Relaxed`.
#[derive(Debug)]
pub(in crate::engine) struct PassBudget {
    /// The future is polling its drivers again, in passes after the first of its poll: a
    /// spent budget there gives the task's turn back and spreads nothing.
    repolling: AtomicBool,
    /// Nodes started in passes after the first of this poll.
    starts: AtomicU16,
    /// A driver the future polls gave the task's turn back in this poll: no other pass
    /// follows.
    turn_given_back: AtomicBool,
}

impl PassBudget {
    /// The first pass of no poll yet.
    pub(super) fn new() -> Self {
        PassBudget {
            repolling: AtomicBool::new(false),
            starts: AtomicU16::new(0),
            turn_given_back: AtomicBool::new(false),
        }
    }

    /// A driver the run's future polls gives the task's turn back: its budget is spent.
    #[inline]
    pub(in crate::engine) fn give_turn_back(&self) {
        self.turn_given_back.store(true, Ordering::Relaxed);
    }

    /// Whether the run's future is in a pass after the first of its poll.
    #[inline]
    pub(in crate::engine) fn is_repolling(&self) -> bool {
        self.repolling.load(Ordering::Relaxed)
    }

    /// A driver the run's future polls starts a node in a pass after the first: whether the
    /// passes' budget, [`REPOLL_MAX`] nodes per poll of the future, allows it.
    #[inline]
    pub(in crate::engine) fn start_in_repoll(&self) -> bool {
        let started = self.starts.load(Ordering::Relaxed);
        if usize::from(started) >= REPOLL_MAX {
            return false;
        }
        self.starts.store(started + 1, Ordering::Relaxed);
        true
    }

    /// A pass after the first is to begin: whether it may (no driver gave the task's turn
    /// back in this poll). If it may, the future is repolling from now.
    #[inline]
    pub(super) fn again(&self) -> bool {
        if self.turn_given_back.load(Ordering::Relaxed) {
            return false;
        }
        self.repolling.store(true, Ordering::Relaxed);
        true
    }

    /// The poll's passes are over: the next poll's budget is whole.
    #[inline]
    pub(super) fn over(&self) {
        self.repolling.store(false, Ordering::Relaxed);
        self.starts.store(0, Ordering::Relaxed);
        self.turn_given_back.store(false, Ordering::Relaxed);
    }
}
