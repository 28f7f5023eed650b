//! A breaker whose state is shared by several processes: the backend trait a shared store
//! implements, and the handle through which it drives the breaker's local machine.
//!
//! The local machine always runs. For a breaker of this process alone it *is* the state:
//! there is no backend, and nothing else is consulted. For a shared breaker it is the cache the
//! closed path reads, lock-free as ever, and the fallback that judges alone while the
//! shared store is unreachable; the backend moves it with [`BreakerMirror`] when the shared
//! state changes, so listeners and observers see the same transitions either way.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::events::{BreakerState, TransitionReason};
use super::machine::Machine;
use super::snapshot::ManualControl;
use crate::util::sync::StdSync;

/// A future a [`SharedBreakerState`] returns, boxed so that the trait is object safe.
pub type SharedFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where a shared breaker's state lives: a store every replica reaches, such as Redis.
///
/// Given to [`CircuitBreakerBuilder::shared`](super::CircuitBreakerBuilder::shared). The
/// breaker calls [`check`](Self::check) and then [`attach`](Self::attach) once when it is
/// built; from then on it reports each counted outcome with [`record`](Self::record), asks
/// for probe permits with [`wants_probe`](Self::wants_probe), and routes manual transitions
/// through [`control`](Self::control). The backend answers by moving the breaker's local
/// state through the [`BreakerMirror`] it was given.
///
/// `record` and `wants_probe` are called on the caller's path: they must not block or
/// wait on the store. Queue the work instead, for example batch outcomes and flush them
/// from a task.
pub trait SharedBreakerState: Send + Sync + fmt::Debug + 'static {
    /// Whether the backend can share a breaker with these rules.
    ///
    /// # Errors
    /// The name of the first setting it cannot share, such as `"slow_calls"`; the builder
    /// turns it into [`BreakerConfigError::NotShareable`](super::BreakerConfigError).
    fn check(&self, rules: &SharedRules) -> Result<(), &'static str> {
        let _ = rules;
        Ok(())
    }

    /// Called once, when the breaker is built: the handle that moves its local state.
    fn attach(&self, mirror: BreakerMirror);

    /// A call admitted while the breaker followed the shared state ended: count it.
    fn record(&self, record: SharedRecord);

    /// A caller was rejected by the local cache because the breaker is open past its
    /// cooldown, or half-open with no probe permit held here: claim one if the shared
    /// state allows, with [`BreakerMirror::grant_probes`].
    ///
    /// `until` is the caller's attempt deadline, the earlier of its per-attempt timeout
    /// and its run's deadline, or `None` when nothing bounds it. A slot claimed for it
    /// should expire then, as nobody waits for the probe after it.
    fn wants_probe(&self, until: Option<Instant>);

    /// Whether the breaker's own trips open it at once while it follows the shared state.
    /// This is a quorum mode: the shared state opens only once enough replicas tripped. When
    /// `true`, a trip by the breaker's own counts makes it judge alone, with its own cooldown
    /// and probes, and calls [`tripped`](Self::tripped); the backend has it follow again
    /// with [`BreakerMirror::adopt`] once the shared state opens, or once the local breaker
    /// closed again. Asked once, when the breaker is built. Default `false`: only the
    /// shared state trips the breaker.
    fn trips_locally(&self) -> bool {
        false
    }

    /// With [`trips_locally`](Self::trips_locally): the breaker tripped by its own counts
    /// and judges alone; report the trip to the store. Called on the caller's path, never
    /// under the breaker's lock: must not block.
    fn tripped(&self) {}

    /// Makes the manual transition `op` in the shared state and adopts it locally.
    /// Resolves to `false` when the store could not be reached; the breaker then makes the
    /// transition locally.
    fn control(&self, op: ManualControl) -> SharedFuture<'_, bool>;
}

/// One outcome a shared breaker reports to its backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SharedRecord {
    /// The local generation the call was admitted in, as [`BreakerMirror::adopt`] returned
    /// it. The backend maps it to the shared generation, or drops the record as stale.
    pub generation: u64,
    /// Whether the call was a half-open probe.
    pub probe: bool,
    /// How it ended.
    pub outcome: SharedOutcome,
}

/// How a call of a shared breaker ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SharedOutcome {
    /// It succeeded after this long.
    Success(Duration),
    /// It failed after this long.
    Failure(Duration),
    /// A probe was cancelled or ignored: its permit goes back to the fleet.
    Released,
}

/// The rules a shared breaker was built with, for its backend to apply fleet-wide.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SharedRules {
    /// Trip on this many failures in a row, if set.
    pub consecutive_failures: Option<u32>,
    /// Trip when the failure rate reaches `threshold` over the window, once it holds
    /// `min_calls` calls: `(threshold, window, min_calls)`. `window` is `None` for a count
    /// window of the last N calls, which a shared store cannot keep cheaply.
    pub failure_rate: Option<(f64, Option<Duration>, u32)>,
    /// Whether a slow-call rule is set.
    pub slow_calls: bool,
    /// Whether a recovery ramp is set.
    pub recovery_ramp: bool,
    /// The open duration of the first trip.
    pub open_duration: Duration,
    /// The open duration's growth on repeated trips: `(multiplier, cap)`.
    pub growth: Option<(f64, Duration)>,
    /// Probes admitted per half-open period, fleet-wide.
    pub half_open_probes: u32,
    /// How long a probe may stay unanswered.
    pub half_open_max_wait: Duration,
}

/// What the local breaker does while the shared state cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Unreachable {
    /// The local machine judges alone, from the last state it knew. This is the default.
    #[default]
    Local,
    /// Fail open: every call passes, as the breaker is forced closed.
    Admit,
    /// Fail closed: every call is rejected, as the breaker is isolated.
    Reject,
}

/// The shared state of a breaker, as its backend last read it.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct SharedView {
    /// The state.
    pub state: BreakerState,
    /// Why the shared state is in it: the reason of its last transition.
    pub reason: TransitionReason,
    /// Open: how long until the cooldown ends.
    pub open_for: Duration,
    /// Half-open: probe permits claimed by this process.
    pub probes: u32,
}

impl SharedView {
    /// A view of `state` for `reason`, with no time left open and no probe held.
    #[must_use]
    pub fn new(state: BreakerState, reason: TransitionReason) -> Self {
        SharedView {
            state,
            reason,
            open_for: Duration::ZERO,
            probes: 0,
        }
    }
}

impl super::CircuitBreakerBuilder {
    /// Shares the breaker's state with every process whose breaker uses the same store,
    /// such as a Redis backend from the `baton-redis` crate: the same API and events, with
    /// trips, cooldowns and half-open probes decided fleet-wide. The local machine stays
    /// the cache the closed path reads and the fallback while the store is unreachable.
    /// Without it, by default, the breaker is this process's alone.
    pub fn shared(mut self, backend: impl SharedBreakerState) -> Self {
        self.shared = Some(Arc::new(backend));
        self
    }
}

/// The handle a [`SharedBreakerState`] moves its breaker's local state with. Holds the
/// breaker weakly: once every handle of the breaker is dropped, its methods do nothing
/// and [`is_alive`](Self::is_alive) is `false`.
#[derive(Clone)]
pub struct BreakerMirror {
    machine: Weak<Machine<StdSync>>,
}

impl fmt::Debug for BreakerMirror {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.machine.upgrade() {
            Some(m) => f.debug_tuple("BreakerMirror").field(&m.name()).finish(),
            None => f.write_str("BreakerMirror(dropped)"),
        }
    }
}

impl BreakerMirror {
    pub(crate) fn new(machine: &Arc<Machine<StdSync>>) -> Self {
        BreakerMirror {
            machine: Arc::downgrade(machine),
        }
    }

    /// Whether the breaker still exists.
    #[must_use]
    pub fn is_alive(&self) -> bool {
        self.machine.strong_count() > 0
    }

    /// The breaker's name; `None` once it was dropped.
    #[must_use]
    pub fn name(&self) -> Option<String> {
        self.machine.upgrade().map(|m| m.name().to_owned())
    }

    /// The local state and generation.
    #[must_use]
    pub fn local(&self) -> Option<(BreakerState, u64)> {
        self.machine.upgrade().map(|m| m.local_view())
    }

    /// Makes the local state `view` with its reason, a transition delivered to the
    /// listeners, unless the local state already is `view.state` and the breaker follows
    /// the shared state. From now on the breaker follows the shared state: its own trip
    /// rules, cooldown and probe timeout wait for the backend. Returns the local generation
    /// to map [`SharedRecord::generation`] with; `None` once the breaker was dropped.
    #[must_use = "the local generation maps the records of calls admitted from now on"]
    pub fn adopt(&self, view: SharedView) -> Option<u64> {
        self.machine
            .upgrade()
            .map(|m| m.adopt(view, Instant::now()))
    }

    /// Adds `n` probe permits to a half-open breaker still in local `generation`, and says
    /// whether it was. If not, the permits were not added: give them back to the store.
    #[must_use = "permits not added must go back to the store"]
    pub fn grant_probes(&self, generation: u64, n: u32) -> bool {
        self.machine
            .upgrade()
            .is_some_and(|m| m.grant_probes(generation, n, Instant::now()))
    }

    /// The shared state cannot be reached: the breaker stops following it and does what
    /// `mode` says, a transition with [`TransitionReason::SharedStateLost`]. Its `to` may
    /// equal its `from`: the state is kept, now judged locally. A breaker that never
    /// followed the shared state, because its backend never reached the store, makes the same
    /// transition the first time. Does nothing if the breaker already judges alone after
    /// a loss.
    pub fn lose(&self, mode: Unreachable) {
        if let Some(m) = self.machine.upgrade() {
            m.lose(mode, Instant::now());
        }
    }
}
