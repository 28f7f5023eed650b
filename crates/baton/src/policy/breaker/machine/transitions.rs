//! Transitions: a move to a new state under the mutex, its publication to the lock-free
//! readers, and the delivery of queued transition events to the listeners, outside the
//! lock.

use std::sync::Arc;
use std::sync::atomic::Ordering::{Relaxed, Release};

use tokio::time::Instant;

use super::super::events::{BreakerTransition, TransitionReason, notify};
use super::super::word::{HALF_OPEN, OPEN, RECOVERING, TAG_MASK, add, pack, state_of};
use super::{Core, Machine};
use crate::util::sync::{Atomic, Lock, SyncFamily};

impl<S: SyncFamily> Machine<S> {
    /// Moves to `to`, resetting that state's bookkeeping, publishes, and queues the event.
    pub(super) fn transition(&self, c: &mut Core, to: u64, reason: TransitionReason, now: Instant) {
        let from = c.kind;
        c.kind = to;
        c.seq += 1;
        c.consecutive = 0;
        self.consecutive.store(0, Relaxed);
        if let Some(w) = c.window.as_mut() {
            w.clear();
        }
        c.free = 0;
        c.outstanding = 0;
        c.succeeded = 0;
        c.slow_probes = 0;
        match to {
            OPEN => {
                c.open_until = add(now, c.config.cooldown(c.trips));
                c.trips = c.trips.saturating_add(1);
                c.trips_total = c.trips_total.saturating_add(1);
            }
            HALF_OPEN => {
                c.probes = c.config.half_open_probes;
                c.free = c.probes;
            }
            RECOVERING => {
                c.ramp = c.config.recovery_ramp.unwrap_or_default();
                c.ramp_start = now;
                // The first call of the ramp is admitted.
                c.ramp_credit = 1.0;
            }
            _ => c.trips = 0,
        }
        self.publish(c);
        c.outbox.push_back(BreakerTransition {
            breaker: Arc::clone(&self.name),
            from: state_of(from),
            to: state_of(to),
            at: now,
            reason,
            seq: c.seq,
        });
    }

    /// Stores the deadline and then the word, as invariant 2 requires.
    pub(super) fn publish(&self, c: &Core) {
        let deadline = match c.kind {
            OPEN => Some(c.open_until),
            HALF_OPEN if c.outstanding > 0 => Some(c.probe_deadline),
            _ => None,
        };
        if let Some(d) = deadline {
            let tagged = (self.micros(d) << 16) | (c.seq & TAG_MASK);
            self.deadline.store(tagged, Relaxed);
        }
        self.word.store(pack(c.kind, c.seq, c.free), Release);
    }

    /// Delivers queued transitions to the listeners, outside the lock; see
    /// [`events`](super::super::events) for the protocol.
    pub(super) fn deliver(&self) {
        loop {
            let batch = self.core.with(|c| {
                if c.delivering || c.outbox.is_empty() {
                    None
                } else {
                    c.delivering = true;
                    Some((std::mem::take(&mut c.outbox), c.listeners.clone()))
                }
            });
            let Some((batch, listeners)) = batch else {
                return;
            };
            for t in &batch {
                notify(&listeners, t);
            }
            let more = self.core.with(|c| {
                c.delivering = false;
                !c.outbox.is_empty()
            });
            if !more {
                return;
            }
        }
    }
}
