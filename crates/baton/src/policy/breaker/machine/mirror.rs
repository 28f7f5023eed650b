//! A shared breaker's local machine: forwarding outcomes to the backend, and the changes
//! the backend makes through [`BreakerMirror`](super::super::BreakerMirror).
//!
//! While the breaker *follows* the shared state, the local machine still counts, so that
//! it can judge alone at once when the store is lost. But it never trips, never moves open
//! → half-open and never times a probe out by itself: the backend does, and adopts the
//! result. Probe permits come from the backend through
//! [`grant_probes`](Machine::grant_probes), so that a half-open period admits its probes
//! fleet-wide.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::time::Duration;

use tokio::time::Instant;

use super::super::breaker_error::BreakerConfigError;
use super::super::config::{BreakerWindow, Config, MAX_PROBES};
use super::super::events::{BreakerState, TransitionReason};
use super::super::permit::{Outcome, Ticket};
use super::super::shared::{
    SharedBreakerState, SharedOutcome, SharedRecord, SharedRules, SharedView, Unreachable,
};
use super::super::word::{
    CLOSED, FORCED_CLOSED, GEN_MASK, HALF_OPEN, ISOLATED, OPEN, RECOVERING, add, gen_of, kind_of,
    state_of,
};
use super::{Core, Machine, Rejected};
use crate::util::sync::{Atomic, Lock, SyncFamily};

/// A shared breaker's backend, and whether the breaker follows the shared state.
pub(crate) struct Link {
    pub(crate) backend: Arc<dyn SharedBreakerState>,
    following: AtomicBool,
    /// Whether the backend has neither adopted a shared state nor lost it yet.
    fresh: AtomicBool,
    /// The backend's [`trips_locally`](SharedBreakerState::trips_locally).
    pub(crate) trips_locally: bool,
}

impl<S: SyncFamily> Machine<S> {
    /// Makes this a shared breaker, before it is shared itself. It judges alone until the
    /// backend first adopts the shared state.
    ///
    /// # Errors
    /// [`BreakerConfigError::NotShareable`] for a rule the backend cannot keep.
    pub(crate) fn set_shared(
        &mut self,
        backend: Arc<dyn SharedBreakerState>,
    ) -> Result<(), BreakerConfigError> {
        let rules = self.shared_rules();
        backend
            .check(&rules)
            .map_err(|setting| BreakerConfigError::NotShareable {
                breaker: self.name.to_string(),
                setting,
            })?;
        let trips_locally = backend.trips_locally();
        self.shared = Some(Link {
            backend,
            following: AtomicBool::new(false),
            fresh: AtomicBool::new(true),
            trips_locally,
        });
        Ok(())
    }

    /// The rules, as a backend sees them.
    pub(crate) fn shared_rules(&self) -> SharedRules {
        self.core.with(|c| shared_rules(&c.config))
    }

    pub(crate) fn backend(&self) -> Option<&Arc<dyn SharedBreakerState>> {
        self.shared.as_ref().map(|l| &l.backend)
    }

    /// Whether the breaker follows a shared state.
    #[inline]
    pub(crate) fn follows(&self) -> bool {
        self.shared
            .as_ref()
            .is_some_and(|l| l.following.load(Acquire))
    }

    /// Tells the backend how a call admitted while following ended.
    #[inline]
    pub(super) fn forward(&self, link: &Link, t: Ticket, outcome: Outcome) {
        if !link.following.load(Acquire) {
            return;
        }
        let word = self.word.load(Acquire);
        if gen_of(word) != t.generation || kind_of(word) == FORCED_CLOSED {
            return;
        }
        let outcome = match outcome {
            Outcome::Success(d) => SharedOutcome::Success(d),
            Outcome::Failure(d) => SharedOutcome::Failure(d),
            Outcome::Released if t.probe => SharedOutcome::Released,
            Outcome::Released => return,
        };
        link.backend.record(SharedRecord {
            generation: t.generation,
            probe: t.probe,
            outcome,
        });
    }

    /// A call while open or half-open, following: a probe permit if one is held here,
    /// else a rejection, and the backend is then asked for a permit.
    pub(super) fn acquire_following(&self, c: &mut Core, now: Instant) -> Result<Ticket, Rejected> {
        if c.kind == HALF_OPEN && c.free > 0 {
            return Ok(self.issue_probe(c, now));
        }
        if c.kind == HALF_OPEN {
            return Err((BreakerState::HalfOpen, None));
        }
        let retry = c.open_until.saturating_duration_since(now);
        Err((BreakerState::Open, Some(retry)))
    }

    /// After a rejection while following: asks the backend for a probe permit when one
    /// could be admitted, that is when half-open, or open past its cooldown.
    pub(super) fn ask_for_probe(
        &self,
        state: BreakerState,
        retry: Option<Duration>,
        until: Option<Instant>,
    ) {
        let wanted = match state {
            BreakerState::HalfOpen => true,
            BreakerState::Open => retry == Some(Duration::ZERO),
            _ => false,
        };
        if let (true, Some(link)) = (wanted, &self.shared) {
            link.backend.wants_probe(until);
        }
    }

    /// The local state and generation.
    pub(crate) fn local_view(&self) -> (BreakerState, u64) {
        let word = self.word.load(Acquire);
        (state_of(kind_of(word)), gen_of(word))
    }

    /// Follows `view` from now on; see [`BreakerMirror::adopt`](super::super::BreakerMirror).
    pub(crate) fn adopt(&self, view: SharedView, now: Instant) -> u64 {
        let to = kind(view.state);
        let (generation, transitioned) = self.core.with(|c| {
            let following = self.follows();
            if let Some(link) = &self.shared {
                link.following.store(true, Release);
                link.fresh.store(false, Release);
            }
            // A fresh breaker already in the shared state makes no transition to follow it,
            // nor does one that tripped alone in quorum mode and is already where it goes.
            let same = c.kind == to && (following || c.seq == 0 || c.alone);
            c.alone = false;
            if !same {
                self.transition(c, to, view.reason, now);
            }
            match to {
                OPEN => c.open_until = add(now, view.open_for),
                HALF_OPEN if !same => c.free = view.probes,
                _ => {}
            }
            self.publish(c);
            (c.seq & GEN_MASK, !same)
        });
        if transitioned {
            self.deliver();
        }
        generation
    }

    /// Adds `n` probe permits to a half-open period of local `generation`.
    pub(crate) fn grant_probes(&self, generation: u64, n: u32, now: Instant) -> bool {
        self.core.with(|c| {
            if c.kind != HALF_OPEN || c.seq & GEN_MASK != generation {
                return false;
            }
            // The free slots must fit the state word: a grant that would overflow them is
            // refused whole, and the backend gives the permits back.
            let free = c.free.saturating_add(n);
            if free > MAX_PROBES {
                return false;
            }
            if c.outstanding == 0 {
                c.probe_deadline = add(now, c.config.half_open_max_wait);
            }
            c.free = free;
            self.publish(c);
            true
        })
    }

    /// Whether a trip by the breaker's own counts may open it now, in quorum mode or when
    /// not following, and whether the backend must hear of it. A following breaker that
    /// trips alone stops following until the backend adopts again.
    pub(super) fn local_trip(&self, c: &mut Core) -> (bool, bool) {
        let Some(link) = &self.shared else {
            return (true, false);
        };
        let following = link.following.load(Acquire);
        if !link.trips_locally {
            return (!following, false);
        }
        if following {
            link.following.store(false, Release);
            c.alone = true;
        }
        (true, c.alone)
    }

    /// Tells the backend of a trip [`local_trip`](Self::local_trip) asked to report.
    pub(super) fn report_trip(&self) {
        if let Some(link) = &self.shared {
            link.backend.tripped();
        }
    }

    /// Stops following the shared state; see [`BreakerMirror::lose`](super::super::BreakerMirror).
    pub(crate) fn lose(&self, mode: Unreachable, now: Instant) {
        let Some(link) = &self.shared else { return };
        let transitioned = self.core.with(|c| {
            // A breaker whose backend never reached the store loses it too: the loss is
            // a transition, where `mode` applies, once, like any.
            let fresh = link.fresh.swap(false, Release);
            if !link.following.swap(false, Release) && !fresh {
                return false;
            }
            let to = match mode {
                Unreachable::Admit => FORCED_CLOSED,
                Unreachable::Reject => ISOLATED,
                _ => c.kind,
            };
            let open_until = c.open_until;
            self.transition(c, to, TransitionReason::SharedStateLost, now);
            if to == OPEN {
                // Keep the cooldown the shared state had set.
                c.open_until = open_until;
                self.publish(c);
            }
            true
        });
        if transitioned {
            self.deliver();
        }
    }
}

/// The kind of `state`.
fn kind(state: BreakerState) -> u64 {
    match state {
        BreakerState::Closed => CLOSED,
        BreakerState::Open => OPEN,
        BreakerState::HalfOpen => HALF_OPEN,
        BreakerState::Recovering => RECOVERING,
        BreakerState::ForcedClosed => FORCED_CLOSED,
        BreakerState::Isolated => ISOLATED,
    }
}

/// The rules `c`, as a backend sees them.
fn shared_rules(c: &Config) -> SharedRules {
    SharedRules {
        consecutive_failures: c.consecutive_failures,
        failure_rate: c.rates.and_then(|r| {
            let window = match r.window {
                BreakerWindow::Time(d) => Some(d),
                BreakerWindow::Count(_) => None,
            };
            r.failure_rate.map(|t| (t, window, r.min_calls))
        }),
        slow_calls: c.rates.is_some_and(|r| r.slow.is_some()),
        recovery_ramp: c.recovery_ramp.is_some(),
        open_duration: c.open_duration,
        growth: c.growth,
        half_open_probes: c.half_open_probes,
        half_open_max_wait: c.half_open_max_wait,
    }
}
