//! The state machine: one atomic state word read lock-free, one mutex for everything that
//! changes it.
//!
//! # Invariants
//! 1. Every transition happens under `core`'s mutex and increments the generation (`seq`)
//!    by exactly one; the transition is appended to the outbox in the same critical
//!    section (so the outbox is in `seq` order, see [`events`](super::events)).
//! 2. `word` = `generation (46 bits) | kind (2 bits) | free probe slots (16 bits)` is only
//!    stored under the mutex, after the fields it summarizes (and after `deadline`), with
//!    `Release`; lock-free readers `Acquire` it. So a reader that sees a state also sees
//!    that state's deadline and consecutive-failure count.
//! 3. A permit remembers the generation it was issued in. Its result is applied only if
//!    the generation is unchanged; otherwise it belongs to a state that no longer exists
//!    and is ignored (Polly #217/#218's "overhanging" calls).
//! 4. Half-open: `free + outstanding + succeeded == half_open_probes`. Slots are taken and
//!    given back only under the mutex, so at most `half_open_probes` permits exist per
//!    half-open period, whatever the concurrency. The caller that moves open → half-open
//!    takes the first slot in the same critical section.
//! 5. No user code (listeners, tracing subscribers) runs under the mutex.
//!
//! # Fast paths (no lock, no shared write)
//! - closed `try_acquire`: one load of `word`;
//! - closed success with no rate rule: one load of `word` (generation check) and one of
//!   `consecutive` (nonzero → the lock, to reset it);
//! - cancelled or ignored closed call: nothing at all;
//! - rejection while open before the cooldown, or while half-open with no free slot before
//!   the probe deadline: loads of `word` and `deadline` (a `(µs since origin) << 16 |
//!   generation & 0xFFFF` pair; a tag mismatch falls back to the lock). These only ever
//!   reject, and only when the locked path would reject too.
//!
//! Time is a parameter (`now`), called at most once and only off the closed fast path, so
//! tests drive it explicitly and the closed path never reads a clock.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::time::Duration;

use tokio::time::Instant;

use super::config::Config;
use super::error::BreakerOpen;
use super::events::{BreakerState, BreakerTransition, Listener, TransitionReason, notify};
use super::permit::{Outcome, Permit, Ticket};
use super::window::Window;
use crate::util::sync::{Atomic, Lock, SyncFamily};

use super::word::{
    CLOSED, FREE_MASK, GEN_MASK, HALF_OPEN, LazyNow, MAX_MICROS, OPEN, TAG_MASK, add, gen_of,
    kind_of, pack, state_of,
};

/// The fields behind the mutex.
struct Core {
    kind: u64,
    /// The generation: number of transitions so far (not masked).
    seq: u64,
    consecutive: u32,
    window: Option<Window>,
    /// Trips since the last close (for the growing cooldown).
    trips: u32,
    open_until: Instant,
    free: u32,
    outstanding: u32,
    succeeded: u32,
    slow_probes: u32,
    probe_deadline: Instant,
    outbox: VecDeque<BreakerTransition>,
    delivering: bool,
    listeners: Vec<Listener>,
}

/// The breaker's state machine, generic over its sync primitives (std or loom).
pub(crate) struct Machine<S: SyncFamily> {
    name: Arc<str>,
    config: Config,
    origin: Instant,
    word: S::Atomic,
    consecutive: S::Atomic,
    deadline: S::Atomic,
    core: S::Lock<Core>,
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
            open_until: origin,
            free: 0,
            outstanding: 0,
            succeeded: 0,
            slow_probes: 0,
            probe_deadline: origin,
            outbox: VecDeque::new(),
            delivering: false,
            listeners: Vec::new(),
        };
        Machine {
            name,
            config,
            origin,
            word: S::Atomic::new(pack(CLOSED, 0, 0)),
            consecutive: S::Atomic::new(0),
            deadline: S::Atomic::new(0),
            core: S::Lock::new(core),
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Whether a call's duration matters to this breaker (a slow-call rule is configured);
    /// when it does not, callers may skip measuring it.
    pub(crate) fn times_calls(&self) -> bool {
        self.config.rates.is_some_and(|r| r.slow.is_some())
    }

    /// The current state; never moves time-based transitions forward.
    #[inline]
    pub(crate) fn state(&self) -> BreakerState {
        state_of(kind_of(self.word.load(Acquire)))
    }

    #[inline]
    pub(crate) fn is_open(&self) -> bool {
        kind_of(self.word.load(Acquire)) == OPEN
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

    /// [`acquire`](Self::acquire)'s ticket, without the permit around it.
    #[inline]
    pub(crate) fn try_acquire(&self, now: impl FnOnce() -> Instant) -> Result<Ticket, BreakerOpen> {
        let word = self.word.load(Acquire);
        if kind_of(word) == CLOSED {
            return Ok(Ticket {
                generation: gen_of(word),
                probe: false,
            });
        }
        self.acquire_slow(word, now())
    }

    #[cold]
    fn acquire_slow(&self, word: u64, now: Instant) -> Result<Ticket, BreakerOpen> {
        let kind = kind_of(word);
        if kind == OPEN || (word & FREE_MASK) == 0 {
            let tagged = self.deadline.load(Acquire);
            let now_us = self.micros(now);
            let until_us = tagged >> 16;
            if tagged & TAG_MASK == gen_of(word) & TAG_MASK && now_us < until_us {
                let retry_after = (kind == OPEN).then(|| Duration::from_micros(until_us - now_us));
                return Err(self.rejection(state_of(kind), retry_after));
            }
        }
        let (result, transitioned) = self.core.with(|c| match c.kind {
            CLOSED => (Ok(self.ticket(c, false)), false),
            OPEN if now >= c.open_until => {
                self.transition(c, HALF_OPEN, TransitionReason::CooldownElapsed, now);
                (Ok(self.issue_probe(c, now)), true)
            }
            OPEN => {
                let retry = c.open_until.saturating_duration_since(now);
                (Err((BreakerState::Open, Some(retry))), false)
            }
            _ if c.outstanding > 0 && now >= c.probe_deadline => {
                let waited = self.config.half_open_max_wait;
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
        result.map_err(|(state, retry)| self.rejection(state, retry))
    }

    /// Reports how a permitted call ended.
    #[inline]
    pub(crate) fn complete(&self, t: Ticket, outcome: Outcome, now: impl FnOnce() -> Instant) {
        if !t.probe {
            let word = self.word.load(Acquire);
            if kind_of(word) != CLOSED || gen_of(word) != t.generation {
                return; // stale: the closed state it belonged to is gone
            }
            match outcome {
                Outcome::Released => return,
                Outcome::Success(_)
                    if self.config.rates.is_none() && self.consecutive.load(Acquire) == 0 =>
                {
                    return;
                }
                _ => {}
            }
        }
        self.complete_slow(t, outcome, now);
    }

    #[cold]
    fn complete_slow(&self, t: Ticket, outcome: Outcome, now: impl FnOnce() -> Instant) {
        let now = &mut LazyNow::new(now);
        let transitioned = self.core.with(|c| {
            if c.seq & GEN_MASK != t.generation {
                return false;
            }
            match outcome {
                // A probe given back (cancelled or ignored): another caller may probe.
                Outcome::Released if t.probe => {
                    c.outstanding -= 1;
                    c.free += 1;
                    self.publish(c);
                    false
                }
                Outcome::Released => false,
                _ if t.probe => self.record_probe(c, outcome, now),
                _ => self.record_closed(c, outcome, now),
            }
        });
        if transitioned {
            self.deliver();
        }
    }

    fn record_closed<F: FnOnce() -> Instant>(
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
        // Only a time window needs the clock (a count window's success reads none).
        let now_ns = match c.window {
            Some(Window::Time(_)) => self.nanos(now.get()),
            _ => 0,
        };
        let slow = self.config.is_slow(elapsed);
        if let Some(w) = c.window.as_mut() {
            w.record(now_ns, failed, slow);
        }
        let reason = self.trip_reason(c, now_ns);
        if let Some(reason) = reason {
            self.transition(c, OPEN, reason, now.get());
        }
        reason.is_some()
    }

    fn trip_reason(&self, c: &Core, now_ns: u64) -> Option<TransitionReason> {
        // (No `let` chains: the crate's minimum Rust is 1.86.)
        if let Some(n) = self
            .config
            .consecutive_failures
            .filter(|&n| c.consecutive >= n)
        {
            return Some(TransitionReason::ConsecutiveFailures { count: n });
        }
        let rules = self.config.rates?;
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

    fn record_probe<F: FnOnce() -> Instant>(
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
        let probes = self.config.half_open_probes;
        c.outstanding -= 1;
        if let Some(slow) = self
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
            self.transition(c, CLOSED, reason, now.get());
            return true;
        }
        false
    }

    /// Takes a free half-open slot (caller checked `c.free > 0`).
    fn issue_probe(&self, c: &mut Core, now: Instant) -> Ticket {
        if c.outstanding == 0 {
            c.probe_deadline = add(now, self.config.half_open_max_wait);
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

    /// Moves to `to`, resetting that state's bookkeeping, publishes, and queues the event.
    fn transition(&self, c: &mut Core, to: u64, reason: TransitionReason, now: Instant) {
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
                c.open_until = add(now, self.config.cooldown(c.trips));
                c.trips = c.trips.saturating_add(1);
            }
            HALF_OPEN => c.free = self.config.half_open_probes,
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

    /// Stores the deadline and then the word (invariant 2).
    fn publish(&self, c: &Core) {
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
    /// [`events`](super::events) for the protocol.
    fn deliver(&self) {
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

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "loom_tests.rs"]
mod loom_tests;
