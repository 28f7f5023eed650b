//! Permits: what a granted call holds until it reports its outcome.

use std::time::Duration;

use tokio::time::Instant;

use super::machine::Machine;
use crate::util::sync::SyncFamily;

/// What a permit needs to report its result: its generation and whether it is a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ticket {
    /// The generation the permit was issued in, masked to 45 bits.
    pub(crate) generation: u64,
    pub(crate) probe: bool,
}

/// How a permitted call ended.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Outcome {
    Success(Duration),
    Failure(Duration),
    /// Neither counted nor failed: an ignored error, or a call cancelled by a drop.
    Released,
}

/// A permit: reports its call's outcome once, or gives a probe slot back when dropped.
pub(crate) struct Permit<'a, S: SyncFamily> {
    machine: &'a Machine<S>,
    ticket: Ticket,
    done: bool,
}

impl<'a, S: SyncFamily> Permit<'a, S> {
    pub(crate) fn new(machine: &'a Machine<S>, ticket: Ticket) -> Self {
        Permit {
            machine,
            ticket,
            done: false,
        }
    }
}

impl<S: SyncFamily> std::fmt::Debug for Permit<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("ticket", &self.ticket)
            .field("done", &self.done)
            .finish()
    }
}

impl<S: SyncFamily> Permit<'_, S> {
    pub(crate) fn ticket(&self) -> Ticket {
        self.ticket
    }

    /// Gives up the borrow without reporting: the ticket, to make the permit again later
    /// with [`Permit::new`]. That must happen, or a probe's slot is never given back.
    pub(crate) fn detach(mut self) -> Ticket {
        self.done = true;
        self.ticket
    }

    #[inline]
    pub(crate) fn is_current(&self) -> bool {
        self.machine.is_current(self.ticket)
    }

    /// Reports the outcome; `now` is called only off the fast path.
    #[inline]
    pub(crate) fn finish(mut self, outcome: Outcome, now: impl FnOnce() -> Instant) {
        self.done = true;
        self.machine.complete(self.ticket, outcome, now);
    }
}

impl<S: SyncFamily> Drop for Permit<'_, S> {
    #[inline]
    fn drop(&mut self) {
        // A closed-state permit owns nothing: dropping it is free. A probe gives its slot
        // back, as resilience4j's `releasePermission` does, without being asked.
        if !self.done && self.ticket.probe {
            self.machine
                .complete(self.ticket, Outcome::Released, Instant::now);
        }
    }
}
