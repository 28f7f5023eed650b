//! The state machine: one atomic state word read lock-free, one mutex for everything that
//! changes it.
//!
//! # Invariants
//! 1. Every transition happens under `core`'s mutex and increments the generation, `seq`,
//!    by exactly one. The transition is appended to the outbox in the same critical
//!    section, so the outbox is in `seq` order; see [`events`](super::events).
//! 2. `word` = `generation (45 bits) | kind (3 bits) | free probe slots (16 bits)` is only
//!    stored under the mutex, with `Release`, after the fields it summarizes and after
//!    `deadline`. Lock-free readers `Acquire` it. So a reader that sees a state also sees
//!    that state's deadline and consecutive-failure count.
//! 3. A permit remembers the generation it was issued in. Its result is applied only if
//!    the generation is unchanged; otherwise it belongs to a state that no longer exists
//!    and is ignored. These are the "overhanging" calls of Polly #217 and #218.
//! 4. Half-open: `free + outstanding + succeeded == half_open_probes`. Slots are taken and
//!    given back only under the mutex, so at most `half_open_probes` permits exist per
//!    half-open period, whatever the concurrency. The caller that moves open → half-open
//!    takes the first slot in the same critical section.
//! 5. No user code, such as listeners or tracing subscribers, runs under the mutex.
//!
//! # Fast paths
//! These take no lock and make no shared write.
//! - closed `try_acquire`, forced closed too since the kind's class is tested: one load of
//!   `word`;
//! - closed success with no rate rule: one load of `word` to check the generation, and one
//!   of `consecutive`. A nonzero count takes the lock, to reset it;
//! - cancelled or ignored closed call: nothing at all;
//! - rejection while open before the cooldown, or while half-open with no free slot before
//!   the probe deadline: loads of `word` and `deadline`. `deadline` is a
//!   `(µs since origin) << 16 | generation & 0xFFFF` pair; a tag mismatch falls back to
//!   the lock. These only ever reject, and only when the locked path would reject too;
//! - rejection while isolated: one load of `word`. Only a manual transition leaves it.
//!
//! Time is a parameter, `now`, called at most once and only off the closed fast path, so
//! tests drive it explicitly and the closed path never reads a clock.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::time::Duration;

use tokio::time::Instant;

use super::breaker_error::BreakerOpen;
use super::config::Config;
use super::events::{BreakerState, BreakerTransition, Listener, TransitionReason};
use super::permit::{Outcome, Permit, Ticket};
use super::window::Window;
use crate::util::sync::{Atomic, Lock, SyncFamily};

use super::word::{
    CLOSED, FORCED_CLOSED, FREE_MASK, GEN_MASK, HALF_OPEN, ISOLATED, LazyNow, MAX_MICROS, OPEN,
    RECOVERING, TAG_MASK, add, class_of, gen_of, kind_of, pack, state_of,
};

/// The fields behind the mutex.
struct Core {
    kind: u64,
    /// The generation: the number of transitions so far, not masked.
    seq: u64,
    consecutive: u32,
    window: Option<Window>,
    /// Trips since the last close, for the growing cooldown.
    trips: u32,
    /// Trips in the breaker's lifetime: never reset.
    trips_total: u64,
    open_until: Instant,
    free: u32,
    outstanding: u32,
    succeeded: u32,
    slow_probes: u32,
    probe_deadline: Instant,
    /// Recovering: when the ramp began, and the admission credit. Each call adds the ramp's
    /// current share; a call is admitted when the credit reaches 1, which it spends.
    ramp_start: Instant,
    ramp_credit: f64,
    outbox: VecDeque<BreakerTransition>,
    delivering: bool,
    listeners: Vec<Listener>,
    /// Shared, quorum mode: it tripped by its own counts and judges alone; and whether
    /// the backend is yet to hear of the trip.
    alone: bool,
    report_trip: bool,
    /// The rules; replaced in place by [`Machine::reconfigure`].
    config: Config,
    /// The probes of the current half-open period, and the ramp of the current recovery:
    /// fixed when the period begins, so a reconfiguration applies from the next one.
    probes: u32,
    ramp: Duration,
}

/// Why a call is rejected: the state and, when open, how long until the next probe.
type Rejected = (BreakerState, Option<Duration>);

/// The share of calls a recovering breaker admits `elapsed` into its `ramp`: from
/// [`RAMP_START`] rising linearly to 1.
fn ramp_share(elapsed: Duration, ramp: Duration) -> f64 {
    let progress = elapsed.as_secs_f64() / ramp.as_secs_f64();
    (RAMP_START + (1.0 - RAMP_START) * progress).min(1.0)
}

/// The share of calls admitted when a recovery ramp begins.
const RAMP_START: f64 = 0.1;

/// Rule bits the lock-free paths read: a slow-call rule, every attempt counted, a rate
/// window.
const RULE_TIMES_CALLS: u64 = 1;
const RULE_EVERY_ATTEMPT: u64 = 2;
const RULE_RATES: u64 = 4;

fn rule_bits(c: &Config) -> u64 {
    let mut bits = 0;
    if c.rates.is_some_and(|r| r.slow.is_some()) {
        bits |= RULE_TIMES_CALLS;
    }
    if c.count_every_attempt {
        bits |= RULE_EVERY_ATTEMPT;
    }
    if c.rates.is_some() {
        bits |= RULE_RATES;
    }
    bits
}

/// The breaker's state machine, generic over its sync primitives: std's or loom's.
pub(crate) struct Machine<S: SyncFamily> {
    name: Arc<str>,
    /// What the lock-free paths need of the rules, as the `RULE_*` bits. Kept in step with
    /// `Core::config`.
    rules: S::Atomic,
    origin: Instant,
    word: S::Atomic,
    consecutive: S::Atomic,
    deadline: S::Atomic,
    core: S::Lock<Core>,
    /// The shared state's backend, for a shared breaker; see `mirror.rs`.
    shared: Option<Link>,
}

impl<S: SyncFamily> std::fmt::Debug for Machine<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("name", &self.name)
            .field("state", &self.state())
            .field("generation", &gen_of(self.word.load(Acquire)))
            .finish_non_exhaustive()
    }
}

impl<S: SyncFamily> Machine<S> {
    /// A closed breaker. `origin` anchors the microsecond deadlines of the fast path.
    pub(crate) fn new(name: Arc<str>, config: Config, origin: Instant) -> Self {
        let core = Core {
            kind: CLOSED,
            seq: 0,
            consecutive: 0,
            window: config.new_window(),
            trips: 0,
            trips_total: 0,
            open_until: origin,
            free: 0,
            outstanding: 0,
            succeeded: 0,
            slow_probes: 0,
            probe_deadline: origin,
            ramp_start: origin,
            ramp_credit: 0.0,
            outbox: VecDeque::new(),
            delivering: false,
            listeners: Vec::new(),
            alone: false,
            report_trip: false,
            probes: config.half_open_probes,
            ramp: config.recovery_ramp.unwrap_or_default(),
            config,
        };
        Machine {
            name,
            rules: S::Atomic::new(rule_bits(&core.config)),
            origin,
            word: S::Atomic::new(pack(CLOSED, 0, 0)),
            consecutive: S::Atomic::new(0),
            deadline: S::Atomic::new(0),
            core: S::Lock::new(core),
            shared: None,
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Whether a call's duration matters to this breaker, because a slow-call rule is
    /// configured. When it does not, callers may skip measuring it.
    #[cfg(test)]
    pub(crate) fn times_calls(&self) -> bool {
        self.rules.load(Relaxed) & RULE_TIMES_CALLS != 0
    }

    pub(crate) fn counts_every_attempt(&self) -> bool {
        self.rules.load(Relaxed) & RULE_EVERY_ATTEMPT != 0
    }

    /// The current state; never moves time-based transitions forward.
    #[inline]
    pub(crate) fn state(&self) -> BreakerState {
        state_of(kind_of(self.word.load(Acquire)))
    }

    /// Open or isolated.
    #[inline]
    pub(crate) fn is_open(&self) -> bool {
        class_of(self.word.load(Acquire)) == OPEN
    }

    /// Whether `t`'s generation is still the current one.
    #[inline]
    pub(crate) fn is_current(&self, t: Ticket) -> bool {
        gen_of(self.word.load(Acquire)) == t.generation
    }

    pub(crate) fn add_listener(&self, l: Listener) {
        self.core.with(|c| c.listeners.push(l));
    }

    /// Asks for a permit; see the module docs for which paths take the lock.
    #[inline]
    pub(crate) fn acquire(
        &self,
        now: impl FnOnce() -> Instant,
    ) -> Result<Permit<'_, S>, BreakerOpen> {
        self.try_acquire(now)
            .map(|ticket| Permit::new(self, ticket))
    }

    /// A ticket when closed or forced closed, without the lock or the clock. `None` in any
    /// other state, and for a shared breaker judging alone, which the full path reports.
    #[inline]
    pub(crate) fn closed_ticket(&self) -> Option<Ticket> {
        let word = self.word.load(Acquire);
        let fast = class_of(word) == CLOSED && (self.shared.is_none() || self.follows());
        fast.then(|| Ticket {
            generation: gen_of(word),
            probe: false,
        })
    }

    /// [`acquire`](Self::acquire)'s ticket, without the permit around it.
    #[inline]
    pub(crate) fn try_acquire(&self, now: impl FnOnce() -> Instant) -> Result<Ticket, BreakerOpen> {
        self.try_acquire_until(now, || None)
    }

    /// [`try_acquire`](Self::try_acquire) for a caller that stops waiting at `until()`, its
    /// attempt deadline, read only when not closed. A shared breaker's backend is told that
    /// deadline with a probe request.
    #[inline]
    pub(crate) fn try_acquire_until(
        &self,
        now: impl FnOnce() -> Instant,
        until: impl FnOnce() -> Option<Instant>,
    ) -> Result<Ticket, BreakerOpen> {
        let word = self.word.load(Acquire);
        if class_of(word) == CLOSED {
            return Ok(Ticket {
                generation: gen_of(word),
                probe: false,
            });
        }
        self.acquire_slow(word, now(), until())
    }

    #[cold]
    fn acquire_slow(
        &self,
        word: u64,
        now: Instant,
        until: Option<Instant>,
    ) -> Result<Ticket, BreakerOpen> {
        let kind = kind_of(word);
        if kind == ISOLATED {
            return Err(self.rejection(BreakerState::Isolated, None));
        }
        if kind == OPEN || (kind == HALF_OPEN && (word & FREE_MASK) == 0) {
            let tagged = self.deadline.load(Acquire);
            let now_us = self.micros(now);
            let until_us = tagged >> 16;
            if tagged & TAG_MASK == gen_of(word) & TAG_MASK && now_us < until_us {
                let retry_after = (kind == OPEN).then(|| Duration::from_micros(until_us - now_us));
                return Err(self.rejection(state_of(kind), retry_after));
            }
        }
        let follows = self.follows();
        let (result, transitioned) = self.core.with(|c| match c.kind {
            CLOSED | FORCED_CLOSED => (Ok(self.ticket(c, false)), false),
            ISOLATED => (Err((BreakerState::Isolated, None)), false),
            OPEN | HALF_OPEN if follows => (self.acquire_following(c, now), false),
            OPEN if now >= c.open_until => {
                self.transition(c, HALF_OPEN, TransitionReason::CooldownElapsed, now);
                (Ok(self.issue_probe(c, now)), true)
            }
            OPEN => {
                let retry = c.open_until.saturating_duration_since(now);
                (Err((BreakerState::Open, Some(retry))), false)
            }
            RECOVERING => self.admit_recovering(c, now),
            _ if c.outstanding > 0 && now >= c.probe_deadline => {
                let waited = c.config.half_open_max_wait;
                self.transition(c, OPEN, TransitionReason::ProbeTimedOut { waited }, now);
                let retry = c.open_until.saturating_duration_since(now);
                (Err((BreakerState::Open, Some(retry))), true)
            }
            _ if c.free > 0 => (Ok(self.issue_probe(c, now)), false),
            _ => (Err((BreakerState::HalfOpen, None)), false),
        });
        if transitioned {
            self.deliver();
        }
        result.map_err(|(state, retry)| {
            if follows {
                self.ask_for_probe(state, retry, until);
            }
            self.rejection(state, retry)
        })
    }

    /// A call while recovering: closes the breaker once the ramp has elapsed, else admits
    /// the ramp's share of calls.
    fn admit_recovering(&self, c: &mut Core, now: Instant) -> (Result<Ticket, Rejected>, bool) {
        let ramp = c.ramp;
        let elapsed = now.saturating_duration_since(c.ramp_start);
        if elapsed >= ramp {
            self.transition(c, CLOSED, TransitionReason::RampCompleted { ramp }, now);
            return (Ok(self.ticket(c, false)), true);
        }
        c.ramp_credit += ramp_share(elapsed, ramp);
        if c.ramp_credit >= 1.0 {
            c.ramp_credit -= 1.0;
            (Ok(self.ticket(c, false)), false)
        } else {
            (Err((BreakerState::Recovering, None)), false)
        }
    }

    /// Reports how a permitted call ended.
    #[inline]
    pub(crate) fn complete(&self, t: Ticket, outcome: Outcome, now: impl FnOnce() -> Instant) {
        if let Some(link) = &self.shared {
            self.forward(link, t, outcome);
        }
        if !t.probe {
            // A call admitted while closed or recovering.
            let word = self.word.load(Acquire);
            if gen_of(word) != t.generation {
                return; // stale: the state it belonged to is gone
            }
            match outcome {
                Outcome::Released => return,
                Outcome::Success(_)
                    if class_of(word) == CLOSED
                        && self.rules.load(Relaxed) & RULE_RATES == 0
                        && self.consecutive.load(Acquire) == 0 =>
                {
                    return;
                }
                // Forced closed counts nothing, so a failure need not take the lock.
                _ if kind_of(word) == FORCED_CLOSED => return,
                _ => {}
            }
        }
        self.complete_slow(t, outcome, now);
    }

    /// Reports the success of a call admitted by [`closed_ticket`](Self::closed_ticket),
    /// which took `elapsed()` (read only when a slow-call rule needs it). With no rate rule
    /// and no failure counted since the last success, a success changes nothing, whether
    /// the ticket's state is still the current one or gone: that case reads neither the
    /// state word nor the clock, and takes no lock.
    #[inline]
    pub(crate) fn closed_success(&self, t: Ticket, elapsed: impl FnOnce() -> Duration) {
        debug_assert!(!t.probe, "a closed ticket is no probe");
        let rules = self.rules.load(Relaxed);
        if self.shared.is_none() && rules & RULE_RATES == 0 && self.consecutive.load(Acquire) == 0 {
            return;
        }
        let elapsed = if rules & RULE_TIMES_CALLS != 0 {
            elapsed()
        } else {
            Duration::ZERO
        };
        self.complete(t, Outcome::Success(elapsed), Instant::now);
    }

    #[cold]
    fn complete_slow(&self, t: Ticket, outcome: Outcome, now: impl FnOnce() -> Instant) {
        let now = &mut LazyNow::new(now);
        let mut report_trip = false;
        let transitioned = self.core.with(|c| {
            if c.seq & GEN_MASK != t.generation {
                return false;
            }
            let transitioned = match outcome {
                // A probe given back, cancelled or ignored: another caller may probe.
                Outcome::Released if t.probe => {
                    c.outstanding -= 1;
                    // A shared probe's permit goes back to the fleet, not to this process.
                    if !self.follows() {
                        c.free += 1;
                    }
                    self.publish(c);
                    false
                }
                Outcome::Released => false,
                // Following the shared state: the backend decides what the probe means.
                _ if t.probe && self.follows() => {
                    c.outstanding = c.outstanding.saturating_sub(1);
                    false
                }
                _ if t.probe => self.record_probe(c, outcome, now),
                // Forced closed: nothing is counted.
                _ if c.kind == FORCED_CLOSED => false,
                _ => self.record_closed(c, outcome, now),
            };
            report_trip = std::mem::take(&mut c.report_trip);
            transitioned
        });
        if transitioned {
            self.deliver();
        }
        if report_trip {
            self.report_trip();
        }
    }

    /// Takes a free half-open slot. The caller checked `c.free > 0`.
    fn issue_probe(&self, c: &mut Core, now: Instant) -> Ticket {
        if c.outstanding == 0 {
            c.probe_deadline = add(now, c.config.half_open_max_wait);
        }
        c.free -= 1;
        c.outstanding += 1;
        self.publish(c);
        self.ticket(c, true)
    }

    fn ticket(&self, c: &Core, probe: bool) -> Ticket {
        Ticket {
            generation: c.seq & GEN_MASK,
            probe,
        }
    }

    fn rejection(&self, state: BreakerState, retry_after: Option<Duration>) -> BreakerOpen {
        BreakerOpen {
            breaker: Arc::clone(&self.name),
            state,
            retry_after,
        }
    }

    fn nanos(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Whole microseconds since the origin, saturating at 48 bits.
    fn micros(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.origin).as_micros())
            .unwrap_or(u64::MAX)
            .min(MAX_MICROS)
    }
}

mod results;

mod control;

mod transitions;

mod mirror;
use mirror::Link;

#[cfg(test)]
mod machine_tests;

#[cfg(test)]
mod breaker_loom_tests;
