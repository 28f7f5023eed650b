//! How reported results move the machine. When closed or recovering, results count
//! against the trip rules. When half-open, they decide between open and closed or
//! recovering.

use std::sync::atomic::Ordering::Release;

use tokio::time::Instant;

use super::super::events::TransitionReason;
use super::super::permit::Outcome;
use super::super::window::Window;
use super::super::word::{CLOSED, LazyNow, OPEN, RECOVERING};
use super::{Core, Machine};
use crate::util::sync::{Atomic, SyncFamily};

impl<S: SyncFamily> Machine<S> {
    pub(super) fn record_closed<F: FnOnce() -> Instant>(
        &self,
        c: &mut Core,
        outcome: Outcome,
        now: &mut LazyNow<F>,
    ) -> bool {
        let (failed, elapsed) = match outcome {
            Outcome::Success(d) => (false, d),
            Outcome::Failure(d) => (true, d),
            Outcome::Released => return false,
        };
        c.consecutive = if failed {
            c.consecutive.saturating_add(1)
        } else {
            0
        };
        self.consecutive.store(u64::from(c.consecutive), Release);
        // Only a time window needs the clock; a count window's success reads none.
        let now_ns = match c.window {
            Some(Window::Time(_)) => self.nanos(now.get()),
            _ => 0,
        };
        let slow = c.config.is_slow(elapsed);
        if let Some(w) = c.window.as_mut() {
            w.record(now_ns, failed, slow);
        }
        let Some(reason) = self.trip_reason(c, now_ns) else {
            return false;
        };
        // Following the shared state, the backend trips the breaker, unless its own trips
        // count, as in quorum mode. The local counts are kept for when it judges alone again.
        let (trips, report) = self.local_trip(c);
        if trips {
            c.report_trip |= report;
            self.transition(c, OPEN, reason, now.get());
        }
        trips
    }

    fn trip_reason(&self, c: &Core, now_ns: u64) -> Option<TransitionReason> {
        // No `let` chains: the crate's minimum Rust is 1.86.
        if let Some(n) = c
            .config
            .consecutive_failures
            .filter(|&n| c.consecutive >= n)
        {
            return Some(TransitionReason::ConsecutiveFailures { count: n });
        }
        let rules = c.config.rates?;
        let totals = c.window.as_ref()?.totals(now_ns);
        if totals.calls < rules.min_calls || totals.calls == 0 {
            return None;
        }
        let calls = f64::from(totals.calls);
        if let Some(threshold) = rules.failure_rate {
            let rate = f64::from(totals.failures) / calls;
            if rate >= threshold {
                return Some(TransitionReason::FailureRate {
                    rate,
                    calls: totals.calls,
                });
            }
        }
        if let Some(slow) = rules.slow {
            let rate = f64::from(totals.slow) / calls;
            if rate >= slow.rate {
                return Some(TransitionReason::SlowCallRate {
                    rate,
                    calls: totals.calls,
                });
            }
        }
        None
    }

    pub(super) fn record_probe<F: FnOnce() -> Instant>(
        &self,
        c: &mut Core,
        outcome: Outcome,
        now: &mut LazyNow<F>,
    ) -> bool {
        let elapsed = match outcome {
            Outcome::Failure(_) => {
                self.transition(c, OPEN, TransitionReason::ProbeFailed, now.get());
                return true;
            }
            Outcome::Success(d) => d,
            Outcome::Released => return false,
        };
        let probes = c.probes;
        c.outstanding -= 1;
        if let Some(slow) = c
            .config
            .rates
            .and_then(|r| r.slow)
            .filter(|slow| elapsed >= slow.slower_than)
        {
            c.slow_probes += 1;
            let rate = f64::from(c.slow_probes) / f64::from(probes);
            if rate >= slow.rate {
                let reason = TransitionReason::SlowCallRate {
                    rate,
                    calls: probes,
                };
                self.transition(c, OPEN, reason, now.get());
                return true;
            }
        }
        c.succeeded += 1;
        if c.succeeded == probes {
            let reason = TransitionReason::ProbesSucceeded { probes };
            let to = match c.config.recovery_ramp {
                Some(_) => RECOVERING,
                None => CLOSED,
            };
            self.transition(c, to, reason, now.get());
            return true;
        }
        false
    }
}
