//! Circuit breaker: closed → open → half-open, shared by every node and run that calls one
//! downstream.
//!
//! The handle, [`CircuitBreaker`], documents the semantics; this page records the design
//! decisions.
//!
//! # The pitfalls other breakers fell into, and how this one avoids them
//! Every item is a public bug report or, for the two Rust crates, their current source.
//!
//! 1. **Too many half-open probes.** resilience4j admitted more calls than
//!    `permittedNumberOfCallsInHalfOpenState` while switching from open to half-open:
//!    [#1432](https://github.com/resilience4j/resilience4j/issues/1432),
//!    [#1090](https://github.com/resilience4j/resilience4j/issues/1090). Polly's half-open
//!    let every call through until the first trial returned:
//!    [#216](https://github.com/App-vNext/Polly/issues/216). Failsafe's standalone breaker
//!    did not limit half-open executions at all,
//!    [#135](https://github.com/failsafe-lib/failsafe/issues/135), and its permit release
//!    can raise the limit above the configured one,
//!    [#391](https://github.com/failsafe-lib/failsafe/issues/391). tower has no breaker of
//!    its own, as [tower#855](https://github.com/tower-rs/tower/pull/855) is still open, and
//!    the tower-resilience crate checked completed probes instead of reserving slots:
//!    [#407](https://github.com/joshrotenberg/tower-resilience/pull/407). `failsafe` 1.3's
//!    `StateMachine::is_call_permitted` and `recloser` 1.4's `call_permitted` return
//!    `true` for *every* call while half-open; recloser's callers that lose the open →
//!    half-open CAS are admitted too. **Here** slots are counted under the mutex with the
//!    invariant `free + outstanding + succeeded == half_open_probes`, the caller that opens
//!    the half-open period takes the first slot in the same critical section, and a slot
//!    given back by a permit of an earlier period is not counted; loom checks it for every
//!    interleaving of 2–3 racing callers.
//! 2. **Permits leaked by cancelled or ignored calls, stuck half-open.** resilience4j got
//!    stuck in half-open when a probe ended with an ignored exception,
//!    [#544](https://github.com/resilience4j/resilience4j/issues/544), or a result
//!    predicate threw, [#2488](https://github.com/resilience4j/resilience4j/pull/2488), and
//!    needs callers to `releasePermission()` on cancellation themselves:
//!    [#1633](https://github.com/resilience4j/resilience4j/pull/1633). Polly v8 stayed
//!    half-open forever after a probe threw an unhandled exception:
//!    [#1979](https://github.com/App-vNext/Polly/issues/1979). A hung probe wedges
//!    half-open without a max wait:
//!    [resilience4j#935](https://github.com/resilience4j/resilience4j/issues/935). **Here**
//!    a [`BreakerPermit`] is a drop guard: [`ignore`](BreakerPermit::ignore) and dropping it,
//!    as a cancelled future does, both give a probe's slot back, a closed permit costs
//!    nothing to drop, and `half_open_max_wait` re-opens the breaker when probes never
//!    answer.
//! 3. **Stale results counted after a transition.** Polly's "overhanging" calls, started
//!    while closed and finished while open or half-open, re-closed the breaker or fired
//!    `onBreak` again: [#217](https://github.com/App-vNext/Polly/issues/217),
//!    [#218](https://github.com/App-vNext/Polly/issues/218),
//!    [#219](https://github.com/App-vNext/Polly/issues/219). `failsafe` and `recloser`
//!    apply a result to whatever state is current, so a slow success from the closed era
//!    closes a half-open breaker. **Here** every permit carries the breaker's generation and
//!    its result is dropped unless the generation is still current.
//! 4. **Duplicate, lost or reordered transition events.** resilience4j published an event
//!    twice when two thresholds were exceeded at once,
//!    [#1437](https://github.com/resilience4j/resilience4j/issues/1437), and raced two
//!    threads into an illegal transition,
//!    [#562](https://github.com/resilience4j/resilience4j/issues/562). Polly fired `onBreak`
//!    once per late failure: [#219](https://github.com/App-vNext/Polly/issues/219).
//!    `failsafe` calls its instrument while holding its lock in `reset()`. **Here** one
//!    transition has one reason, gets a gap-free number `seq`, is queued in the critical
//!    section that makes it, and is delivered by a single deliverer outside the lock; see
//!    `events.rs`.
//! 5. **A lock on every call.** `failsafe` takes a mutex twice per call; `recloser` spins on
//!    its ring buffer's lock and writes it on every success. **Here** the closed path,
//!    acquire and success, only loads one or two atomics and writes nothing shared when no
//!    rate window is configured. `machine.rs` lists the fast paths.
//!
//! # Files
//! - `config`: the builder, defaults and validation.
//! - `machine`: the state machine and its invariants.
//! - `results`: how reported results move it.
//! - `control`: the manual transitions and the snapshot.
//! - `snapshot`: what an operator reads and does.
//! - `permit`: the drop guard a granted call holds.
//! - `window`: count and time windows.
//! - `word`: the packed state word.
//! - `events`: states, transitions, delivery.
//! - `error`: rejection and configuration errors.

mod breaker_error;
mod config;
mod events;
mod machine;
mod permit;
mod shared;
mod snapshot;
mod window;
mod word;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

pub use breaker_error::{BreakerConfigError, BreakerOpen};
pub use config::{BreakerWindow, CircuitBreakerBuilder};
pub use events::{BreakerState, BreakerTransition, TransitionReason};
pub use shared::{
    BreakerMirror, SharedBreakerState, SharedFuture, SharedOutcome, SharedRecord, SharedRules,
    SharedView, Unreachable,
};
pub use snapshot::{BreakerSnapshot, ManualControl};

use crate::util::sync::StdSync;
use machine::Machine;
pub(crate) use permit::Ticket;
use permit::{Outcome, Permit};

/// A named circuit breaker guarding one downstream. It is a cheap handle around an `Arc`,
/// `Clone` and `Send + Sync`.
///
/// Built with [`CircuitBreaker::builder`]. Time is read from
/// [`tokio::time::Instant::now`], so on a paused tokio clock the breaker follows the paused
/// time.
///
/// ```
/// use std::time::Duration;
/// use baton_graph::{CircuitBreaker, breaker::BreakerState};
///
/// let breaker = CircuitBreaker::builder("inventory")
///     .consecutive_failures(3)
///     .open_duration(Duration::from_millis(200))
///     .build()?;
/// breaker.on_transition(|t, _breaker| eprintln!("{t}"));
/// for _ in 0..3 {
///     let permit = breaker.try_acquire()?;
///     // ... call the downstream; it fails:
///     permit.failure(Duration::from_millis(12));
/// }
/// assert_eq!(breaker.state(), BreakerState::Open);
/// let err = breaker.try_acquire().unwrap_err();
/// assert!(err.to_string().starts_with("circuit breaker `inventory` is open (retry in"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Semantics
/// - **Closed → open** on `n` consecutive failures, or when the failure rate or
///   the slow-call rate over a sliding window reaches its threshold once the window holds
///   `min_calls` calls, as in resilience4j.
/// - **Open → half-open** when the open duration has elapsed, decided lazily by the next
///   [`try_acquire`](Self::try_acquire), as Polly and resilience4j do by
///   default. A mere [`state`](Self::state) query never moves time forward. The
///   caller that makes this transition holds the first probe.
/// - **Half-open** admits exactly `half_open_probes` permits, whatever the concurrency. All
///   of them succeeding closes the breaker. Any failing re-opens it with a fresh cooldown,
///   optionally growing, so that a broken downstream is not probed at a fixed rate forever;
///   a probe dropped without a result gives its slot back; probes left unanswered for
///   `half_open_max_wait` count as a failure.
/// - **Half-open → recovering**, only with a
///   [`recovery_ramp`](CircuitBreakerBuilder::recovery_ramp), when the probes succeed: a
///   share of calls rising over the ramp passes, the rest are rejected; failures count as
///   when closed; **recovering → closed** when the ramp ends.
/// - A result reported for a permit taken before the breaker's latest transition is
///   ignored: it describes a state that no longer exists.
/// - Every transition is made by exactly one caller and reaches each listener exactly once,
///   in order, outside any lock.
///
#[derive(Clone)]
pub struct CircuitBreaker {
    machine: Arc<Machine<StdSync>>,
}

impl fmt::Debug for CircuitBreaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.machine.fmt(f)
    }
}

impl CircuitBreaker {
    /// A builder for a breaker named `name`, which must not be empty: the name is how nodes
    /// and runs share a breaker. See [`CircuitBreakerBuilder`] for the settings and their
    /// defaults.
    pub fn builder(name: impl Into<String>) -> CircuitBreakerBuilder {
        CircuitBreakerBuilder::new(name.into())
    }

    fn from_machine(machine: Machine<StdSync>) -> Self {
        let machine = Arc::new(machine);
        if let Some(backend) = machine.backend() {
            backend.attach(BreakerMirror::new(&machine));
        }
        CircuitBreaker { machine }
    }

    /// Whether the breaker's state is shared with other processes, as set by
    /// [`CircuitBreakerBuilder::shared`].
    #[must_use]
    pub fn is_shared(&self) -> bool {
        self.machine.backend().is_some()
    }

    /// Whether the breaker follows its shared state now: `false` for a breaker of this
    /// process alone, and for a shared one whose store could not be reached. Such a breaker
    /// judges alone meanwhile; see [`Unreachable`].
    #[must_use]
    pub fn follows_shared_state(&self) -> bool {
        self.machine.follows()
    }

    /// Whether `self` and `other` are the same breaker, that is clones of one handle, as
    /// opposed to two breakers with equal settings.
    #[must_use]
    pub fn same_as(&self, other: &CircuitBreaker) -> bool {
        Arc::ptr_eq(&self.machine, &other.machine)
    }

    /// The breaker's name.
    #[must_use]
    pub fn name(&self) -> &str {
        self.machine.name()
    }

    /// Whether the breaker is told every attempt's result, not one per series, as set by
    /// [`count_every_attempt`](CircuitBreakerBuilder::count_every_attempt).
    pub(crate) fn counts_every_attempt(&self) -> bool {
        self.machine.counts_every_attempt()
    }

    /// The current state. A query never makes a time-based transition: an open breaker
    /// whose cooldown has elapsed reads `Open` until the next
    /// [`try_acquire`](Self::try_acquire). One atomic load; never blocks.
    #[must_use]
    pub fn state(&self) -> BreakerState {
        self.machine.state()
    }

    /// Whether the breaker is open, rejecting everything until its cooldown ends, or
    /// isolated. One atomic load, meant for a retry series to stop early when its breaker
    /// opened meanwhile. `false` when half-open.
    #[must_use]
    #[inline]
    pub fn is_open(&self) -> bool {
        self.machine.is_open()
    }

    /// The state and counts now, read without changing anything: no time-based transition
    /// and no call counted. An open breaker whose cooldown has elapsed reads `Open`, with a
    /// zero `retry_after`. Takes the breaker's lock for a moment; never waits on anything else.
    #[must_use]
    pub fn snapshot(&self) -> BreakerSnapshot {
        self.machine.snapshot(Instant::now())
    }

    /// Opens the breaker by hand until [`reset`](Self::reset) or
    /// [`force_closed`](Self::force_closed). It is [`BreakerState::Isolated`] and rejects
    /// every call with [`BreakerOpen`], with that state and no `retry_after`. No cooldown
    /// ends it. A transition with [`TransitionReason::Isolated`], delivered to the listeners;
    /// results of calls admitted before it are ignored. Isolating an isolated breaker does
    /// nothing.
    ///
    /// Async, as every manual transition, so that a breaker whose state is shared by other
    /// processes can wait for the shared store; a breaker of this process alone completes at
    /// once, without waiting.
    ///
    /// ```
    /// use baton_graph::{CircuitBreaker, breaker::{BreakerState, TransitionReason}};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let breaker = CircuitBreaker::builder("payments").build()?;
    /// breaker.isolate().await; // a deploy of the payment provider is under way
    /// assert_eq!(breaker.state(), BreakerState::Isolated);
    /// assert!(breaker.try_acquire().is_err());
    /// breaker.reset().await; // it is over
    /// assert_eq!(breaker.state(), BreakerState::Closed);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn isolate(&self) {
        self.control(ManualControl::Isolate).await;
    }

    /// Closes the breaker by hand until [`reset`](Self::reset) or
    /// [`isolate`](Self::isolate). It is [`BreakerState::ForcedClosed`], admits every call
    /// and counts no result, so nothing trips it. A transition with
    /// [`TransitionReason::ForcedClosed`]; forcing a forced-closed breaker closed does
    /// nothing. Completes at once on a breaker of this process alone; see
    /// [`isolate`](Self::isolate).
    pub async fn force_closed(&self) {
        self.control(ManualControl::ForceClosed).await;
    }

    /// Closes the breaker and clears what it counted: consecutive failures, the sliding
    /// window, half-open probes, the trips that grow the open duration. From any state,
    /// isolated and forced closed included. Always a transition, with
    /// [`TransitionReason::Reset`], even from closed, where it only clears the counts.
    /// Completes at once on a breaker of this process alone; see [`isolate`](Self::isolate).
    pub async fn reset(&self) {
        self.control(ManualControl::Reset).await;
    }

    /// Changes the breaker's rules in place to `settings`, so that every node, graph and run
    /// that holds it sees them. Their name is not used: the breaker keeps its own.
    /// Returns whether anything changed. Not a transition: the state, its generation and
    /// the counts stay, and no event is sent. A window of another kind or size starts
    /// empty; an open breaker keeps the cooldown it has, and the new open duration applies
    /// from the next trip; a half-open period keeps its probe count and a recovery its
    /// ramp. The next result is judged by the new rules.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{CircuitBreaker, breaker::BreakerState};
    ///
    /// let ms = Duration::from_millis;
    /// let breaker = CircuitBreaker::builder("inventory").consecutive_failures(5).build()?;
    /// breaker.try_acquire()?.failure(ms(5));
    /// assert!(breaker.reconfigure(CircuitBreaker::builder("inventory").consecutive_failures(2))?);
    /// breaker.try_acquire()?.failure(ms(5)); // the second in a row, by the new rule
    /// assert_eq!(breaker.state(), BreakerState::Open);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// What [`CircuitBreakerBuilder::build`] rejects, and
    /// [`BreakerConfigError::SharedRules`] for a breaker whose state is shared, or for
    /// `settings` with a shared backend. The breaker is then unchanged.
    pub fn reconfigure(&self, settings: CircuitBreakerBuilder) -> Result<bool, BreakerConfigError> {
        if self.is_shared() || settings.is_shared() {
            return Err(BreakerConfigError::SharedRules {
                breaker: self.name().to_owned(),
            });
        }
        let config = settings.named(self.name()).validate()?;
        Ok(self.machine.reconfigure(config))
    }

    /// Makes the manual transition `op`: in the shared state if there is one and it can
    /// be reached, else locally.
    async fn control(&self, op: ManualControl) {
        if let Some(backend) = self.machine.backend() {
            if backend.control(op).await {
                return;
            }
        }
        self.machine.control(op, Instant::now());
    }

    /// Asks to make one call. For a node, a call is one retry series.
    ///
    /// Closed: always granted, lock-free, without reading the clock. Open: rejected until
    /// the open duration has elapsed; the first caller after it moves the breaker to
    /// half-open and receives the first probe permit. Half-open: granted while probe slots
    /// are free, `half_open_probes` in total, and rejected otherwise.
    ///
    /// Report the call's outcome on the permit; dropping it means the call was cancelled.
    ///
    /// # Errors
    /// [`BreakerOpen`] when the call must not be made. It names the breaker, its state and,
    /// when open, how long until the next probe.
    #[inline]
    pub fn try_acquire(&self) -> Result<BreakerPermit<'_>, BreakerOpen> {
        self.machine
            .acquire(Instant::now)
            .map(|inner| BreakerPermit { inner })
    }

    /// [`try_acquire`](Self::try_acquire) for a caller whose attempt stops at `until()`,
    /// read only when the breaker is not closed. A shared breaker's probe request is
    /// bounded by it.
    #[inline]
    pub(crate) fn try_acquire_until(
        &self,
        until: impl FnOnce() -> Option<Instant>,
    ) -> Result<BreakerPermit<'_>, BreakerOpen> {
        self.machine
            .try_acquire_until(Instant::now, until)
            .map(|ticket| BreakerPermit {
                inner: Permit::new(&self.machine, ticket),
            })
    }

    /// Whether it is shared and judges alone now: its store cannot be reached, or, in a
    /// quorum mode, it tripped by its own counts.
    pub(crate) fn judges_alone(&self) -> bool {
        self.is_shared() && !self.follows_shared_state()
    }

    /// A permit as a bare ticket when the breaker is closed, in one atomic load.
    /// [`resume`](Self::resume) makes the ticket a permit again. `None` in any other state,
    /// without asking, and for a shared breaker judging alone, which the full path reports.
    /// The caller then asks [`try_acquire`](Self::try_acquire) once, so that a recovering
    /// breaker counts the call once.
    #[inline]
    pub(crate) fn closed_ticket(&self) -> Option<Ticket> {
        self.machine.closed_ticket()
    }

    /// The permit of a ticket [`closed_ticket`](Self::closed_ticket) gave, again.
    pub(crate) fn resume(&self, ticket: Ticket) -> BreakerPermit<'_> {
        BreakerPermit {
            inner: Permit::new(&self.machine, ticket),
        }
    }

    /// Reports that the call admitted by a ticket of [`closed_ticket`](Self::closed_ticket)
    /// succeeded after `elapsed()`, which is called only when a slow-call rule needs it.
    #[inline]
    pub(crate) fn closed_success(&self, ticket: Ticket, elapsed: impl FnOnce() -> Duration) {
        self.machine.closed_success(ticket, elapsed);
    }

    /// Registers a listener called once for every transition from now on, in transition
    /// order, with `seq` increasing without gaps. It runs on the thread that made the
    /// transition or the one already delivering, never under the breaker's lock. A listener
    /// may call the breaker: it is given the breaker as its second argument. Several
    /// listeners run in registration order; one that panics is caught and logged with
    /// `tracing::error!` and changes nothing.
    ///
    /// Listeners live as long as the breaker and hold it only weakly: use the breaker they
    /// are given, and the breaker is dropped with its last handle. A listener that captures
    /// a clone of its own breaker instead keeps it alive forever.
    ///
    /// ```
    /// use std::sync::mpsc;
    /// use std::time::Duration;
    /// use baton_graph::CircuitBreaker;
    ///
    /// let breaker = CircuitBreaker::builder("inventory").consecutive_failures(1).build()?;
    /// let (tx, rx) = mpsc::channel();
    /// breaker.on_transition(move |t, breaker| {
    ///     // e.g. log it, or alert, with what the breaker says now
    ///     let _ = tx.send(format!("{t}; {} trips in all", breaker.snapshot().trips_total));
    /// });
    /// breaker.try_acquire()?.failure(Duration::from_millis(5));
    /// assert_eq!(
    ///     rx.try_recv()?,
    ///     "circuit breaker `inventory` #1: closed -> open (1 consecutive failures); 1 trips in all"
    /// );
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn on_transition(
        &self,
        f: impl Fn(&BreakerTransition, &CircuitBreaker) + Send + Sync + 'static,
    ) {
        // Weak: the listener lives in the machine, which must not keep itself alive.
        let machine = Arc::downgrade(&self.machine);
        self.machine.add_listener(Arc::new(move |t| {
            if let Some(machine) = machine.upgrade() {
                f(t, &CircuitBreaker { machine });
            }
        }));
    }
}

/// A [`BreakerPermit`] that owns a handle to its breaker instead of borrowing it: how a
/// permit taken on the scheduler's fast path is handed to the full path when the first
/// attempt failed, panicked or was cut. Dropped without being taken, it releases the permit
/// uncounted, like a dropped `BreakerPermit`.
pub(crate) struct OwnedPermit {
    breaker: CircuitBreaker,
    ticket: Option<Ticket>,
}

impl OwnedPermit {
    /// The permit's ticket, to [`resume`](CircuitBreaker::resume) on the same breaker;
    /// `None` when it was taken.
    pub(crate) fn into_ticket(mut self) -> Option<Ticket> {
        self.ticket.take()
    }

    /// The permit again, borrowing this handle; `None` after the first call.
    pub(crate) fn take(&mut self) -> Option<BreakerPermit<'_>> {
        let ticket = self.ticket.take()?;
        Some(BreakerPermit {
            inner: Permit::new(&self.breaker.machine, ticket),
        })
    }
}

impl Drop for OwnedPermit {
    fn drop(&mut self) {
        drop(self.take());
    }
}

/// Permission to make one call through a [`CircuitBreaker`]; report how it ended with
/// [`success`](Self::success), [`failure`](Self::failure) or [`ignore`](Self::ignore).
///
/// Dropping the permit without a report means the call was cancelled: it is released and
/// not counted, and a half-open probe's slot goes back so that another caller can probe.
/// A result reported after the breaker changed state since the permit was issued is
/// ignored. The permit borrows the breaker, so that taking and completing one never
/// touches a reference count.
#[must_use = "report the call's outcome with success(), failure() or ignore(); dropping the permit releases it as cancelled"]
pub struct BreakerPermit<'a> {
    inner: Permit<'a, StdSync>,
}

impl fmt::Debug for BreakerPermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerPermit")
            .field("generation", &self.generation())
            .field("probe", &self.is_probe())
            .finish()
    }
}

impl BreakerPermit<'_> {
    /// The same permit, owning a handle to `breaker` instead of borrowing it. `breaker` must
    /// be the breaker that issued it.
    pub(crate) fn into_owned(self, breaker: &CircuitBreaker) -> OwnedPermit {
        OwnedPermit {
            breaker: breaker.clone(),
            ticket: Some(self.inner.detach()),
        }
    }

    /// The call succeeded after `elapsed`, which only the slow-call rule uses. Resets the
    /// consecutive-failure count; closes a half-open breaker once every probe succeeded.
    #[inline]
    pub fn success(self, elapsed: Duration) {
        self.inner.finish(Outcome::Success(elapsed), Instant::now);
    }

    /// The call failed after `elapsed`. Counts toward the trip rules; re-opens a half-open
    /// breaker with a fresh cooldown.
    #[inline]
    pub fn failure(self, elapsed: Duration) {
        self.inner.finish(Outcome::Failure(elapsed), Instant::now);
    }

    /// The call ended with an error the breaker is told to ignore, such as a 404 or a
    /// validation error: released without counting, exactly like a cancelled call.
    #[inline]
    pub fn ignore(self) {
        self.inner.finish(Outcome::Released, Instant::now);
    }

    /// Whether the breaker is still in the state this permit was issued in. `false` once it
    /// has transitioned, say because a concurrent series tripped it: this permit's result will
    /// then be ignored, so a retry series may stop early. One atomic load.
    #[must_use]
    #[inline]
    pub fn is_current(&self) -> bool {
        self.inner.is_current()
    }

    /// Whether this permit is a half-open probe.
    #[must_use]
    pub fn is_probe(&self) -> bool {
        self.inner.ticket().probe
    }

    /// The breaker's generation when the permit was issued: the
    /// [`seq`](BreakerTransition::seq) of the last transition before it, or 0 before any,
    /// masked to 45 bits.
    #[must_use]
    pub fn generation(&self) -> u64 {
        self.inner.ticket().generation
    }
}
