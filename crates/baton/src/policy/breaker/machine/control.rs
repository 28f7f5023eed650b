//! Manual control, that is isolate, force closed and reset; rules changed in place; and
//! the read-only snapshot.
//!
//! A manual transition is a transition like any other: made under the mutex, numbered,
//! queued and delivered outside the lock; it bumps the generation, so results of calls
//! admitted before it are ignored.

use tokio::time::Instant;

use super::super::events::TransitionReason;
use super::super::snapshot::{BreakerSnapshot, ManualControl, WindowCounts};
use super::super::word::{CLOSED, FORCED_CLOSED, GEN_MASK, HALF_OPEN, ISOLATED, OPEN, state_of};
use super::{Core, Machine, rule_bits};
use crate::policy::breaker::config::Config;
use crate::util::sync::{Atomic, Lock, SyncFamily};

impl<S: SyncFamily> Machine<S> {
    /// Replaces the rules in place, under the mutex; whether they changed. The state, its
    /// generation and the counts stay; a window of another kind or size starts empty. A
    /// half-open period keeps its probe count and a recovery its ramp; the new ones apply
    /// from the next period. The next result is judged by the new rules, though a call in
    /// flight on a lock-free path may still be judged by the old ones.
    pub(crate) fn reconfigure(&self, config: Config) -> bool {
        self.core.with(|c| {
            if c.config == config {
                return false;
            }
            if c.config.rates.map(|r| r.window) != config.rates.map(|r| r.window) {
                c.window = config.new_window();
            }
            self.rules
                .store(rule_bits(&config), std::sync::atomic::Ordering::Release);
            c.config = config;
            true
        })
    }

    /// Makes the manual transition `op` at `now`. Isolating an isolated breaker, or forcing
    /// a forced-closed one closed, does nothing. A reset always transitions: it clears the
    /// counts even of a closed breaker. Returns whether it transitioned.
    pub(crate) fn control(&self, op: ManualControl, now: Instant) -> bool {
        let transitioned = self.core.with(|c| self.control_locked(c, op, now));
        if transitioned {
            self.deliver();
        }
        transitioned
    }

    /// [`control`](Self::control) under the lock, without delivering.
    pub(super) fn control_locked(&self, c: &mut Core, op: ManualControl, now: Instant) -> bool {
        let (to, reason) = match op {
            ManualControl::Isolate => (ISOLATED, TransitionReason::Isolated),
            ManualControl::ForceClosed => (FORCED_CLOSED, TransitionReason::ForcedClosed),
            ManualControl::Reset => (CLOSED, TransitionReason::Reset),
        };
        if to == c.kind && to != CLOSED {
            return false;
        }
        self.transition(c, to, reason, now);
        true
    }

    /// The state and counts at `now`; changes nothing.
    pub(crate) fn snapshot(&self, now: Instant) -> BreakerSnapshot {
        self.core.with(|c| {
            let window = c.window.as_ref().map(|w| {
                let t = w.totals(self.nanos(now));
                WindowCounts {
                    calls: t.calls,
                    failures: t.failures,
                    slow: t.slow,
                }
            });
            let half_open = c.kind == HALF_OPEN;
            BreakerSnapshot {
                state: state_of(c.kind),
                generation: c.seq & GEN_MASK,
                consecutive_failures: c.consecutive,
                window,
                retry_after: (c.kind == OPEN).then(|| c.open_until.saturating_duration_since(now)),
                probes_free: if half_open { c.free } else { 0 },
                probes_in_flight: if half_open { c.outstanding } else { 0 },
                trips: c.trips,
                trips_total: c.trips_total,
            }
        })
    }
}
