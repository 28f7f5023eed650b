//! The orchestrator: the long-lived owner of what outlives a run. That is the registries of
//! circuit breakers, bulkheads and retry budgets shared by name, the observers, the
//! statistics, and the runs in flight, for `cancel_all` and `shutdown`.
//!
//! Names identify downstreams: every node, in any graph built from one orchestrator and in
//! any run, that names the breaker `inventory` uses the same breaker, so its state reflects
//! every call to the inventory service: one guard per downstream.

#[cfg(feature = "serde")]
pub mod config;
mod registry;
mod runs;

use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

pub use registry::NameTaken;
use registry::Registry;
pub(crate) use runs::RunKey;
pub use runs::ShutdownReport;
use runs::{SHARDS, Shard};

use crate::error::CancelReason;
use crate::observe::stats::Counters;
use crate::observe::{Event, Observer, Stats};
use crate::policy::Bulkhead;
use crate::util::striped::Padded;

/// A run in flight, as the orchestrator holds it: something it can cancel. The engine
/// implements it.
pub(crate) trait InFlight: Send + Sync + 'static {
    /// Cancels the run for `reason`; nothing happens if it ended.
    fn cancel(&self, reason: CancelReason);
}

/// Owns the breaker, bulkhead and retry-budget registries, the observers, the statistics
/// and the lifecycle of its runs. Cheap to clone: it is an `Arc`.
///
/// Build graphs from it with [`Orchestrator::graph`] so that they share all of that.
/// [`Graph::builder`](crate::Graph::builder) uses a fresh orchestrator of its own.
///
/// ```
/// use baton_graph::{BoxError, BuildError, CircuitBreaker, Orchestrator};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let orch = Orchestrator::new();
/// orch.add_breaker(&CircuitBreaker::builder("inventory").consecutive_failures(1).build()?)?;
/// let mut g = orch.graph::<()>();
/// g.node("stock")
///     .breaker("inventory") // by name: every graph of `orch` shares it
///     .task(|_ctx, ()| async { Err::<u32, BoxError>("503".into()) });
/// g.build()?.run(()).await?;
/// assert!(orch.breaker("inventory").is_some_and(|b| b.is_open()));
///
/// let mut other = orch.graph::<()>();
/// other.node("promo").breaker("promos").task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
/// let err = other.build().unwrap_err();
/// assert!(matches!(err, BuildError::UnknownPolicy { name, .. } if name == "promos"));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Orchestrator {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Mutex<Registry>,
    observers: Box<[Arc<dyn Observer>]>,
    counters: Counters,
    accepting: AtomicBool,
    /// The runs in flight, in shards picked by their sequence number, each on cache lines
    /// of its own.
    runs: [Padded<Shard>; SHARDS],
    /// Admitted runs that ended while the orchestrator refused new runs, in the low
    /// 32 bits, and those of them that a shutdown cancelled, in the high 32 bits: what
    /// [`ShutdownReport`] counts, as the difference over one shutdown. One word, so that a
    /// shutdown reads both counts at once; counted only then, so that a run's end costs no
    /// shared write otherwise.
    ended_in_shutdown: AtomicU64,
    idle: Notify,
    /// Bumped by `apply` each time it changes a named policy set: graphs and pipelines
    /// built before compare it with the one they resolved against.
    policy_sets_changed: AtomicU64,
    /// Runs in flight that hold a timer floor: see [`Orchestrator::take_timer_floor`]. On
    /// a line of its own, apart from what every run reads.
    timer_floors: Padded<AtomicUsize>,
}

impl Default for Orchestrator {
    fn default() -> Self {
        Orchestrator::builder().build()
    }
}

impl fmt::Debug for Orchestrator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.registry();
        f.debug_struct("Orchestrator")
            .field("breakers", &r.breakers.keys().collect::<Vec<_>>())
            .field("bulkheads", &r.bulkheads.keys().collect::<Vec<_>>())
            .field("retry_budgets", &r.budgets.keys().collect::<Vec<_>>())
            .field("rate_limiters", &r.limiters.keys().collect::<Vec<_>>())
            .field("observers", &self.inner.observers.len())
            .field("runs_in_flight", &self.runs_in_flight())
            .field("accepting", &self.inner.accepting.load(Ordering::Relaxed))
            .finish()
    }
}

/// Configures an [`Orchestrator`]; from [`Orchestrator::builder`].
///
/// # Defaults
/// - observers: none.
#[derive(Default)]
#[must_use = "call `.build()` to get the orchestrator"]
pub struct OrchestratorBuilder {
    observers: Vec<Arc<dyn Observer>>,
}

impl fmt::Debug for OrchestratorBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OrchestratorBuilder")
            .field("observers", &self.observers.len())
            .finish()
    }
}

impl OrchestratorBuilder {
    /// Adds an observer that receives every event of every run; see
    /// [`observe`](crate::observe). Observers are called in the order they were added.
    /// Observers are not deduplicated: one added twice receives every event twice.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use baton_graph::{BoxError, Orchestrator, observe::Event};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let finished = Arc::new(AtomicUsize::new(0));
    /// let count = {
    ///     let finished = Arc::clone(&finished);
    ///     move |e: &Event<'_>| {
    ///         if matches!(e, Event::RunFinished { .. }) {
    ///             finished.fetch_add(1, Ordering::Relaxed);
    ///         }
    ///     }
    /// };
    /// let orch = Orchestrator::builder().observer(count.clone()).observer(count).build();
    /// let mut g = orch.graph::<()>();
    /// g.node("price").task(|_ctx, ()| async { Ok::<_, BoxError>(1_u64) });
    /// g.build()?.run(()).await?;
    /// assert_eq!(finished.load(Ordering::Relaxed), 2); // added twice: every event twice
    /// # Ok(())
    /// # }
    /// ```
    pub fn observer(mut self, observer: impl Observer) -> Self {
        self.observers.push(Arc::new(observer));
        self
    }

    /// Builds the orchestrator.
    #[must_use]
    pub fn build(self) -> Orchestrator {
        Orchestrator {
            inner: Arc::new(Inner {
                registry: Mutex::default(),
                observers: self.observers.into_boxed_slice(),
                counters: Counters::default(),
                accepting: AtomicBool::new(true),
                runs: std::array::from_fn(|_| Padded::default()),
                ended_in_shutdown: AtomicU64::new(0),
                idle: Notify::new(),
                policy_sets_changed: AtomicU64::new(0),
                timer_floors: Padded::default(),
            }),
        }
    }
}

impl Orchestrator {
    /// How many times a named policy set changed: a graph or pipeline that names one
    /// re-resolves its policies when this moved since it last did.
    pub(crate) fn policy_sets_changed(&self) -> u64 {
        self.inner.policy_sets_changed.load(Ordering::Acquire)
    }

    /// An orchestrator with empty registries and no observers.
    #[must_use]
    pub fn new() -> Self {
        Orchestrator::default()
    }

    /// Configures an orchestrator's observers.
    pub fn builder() -> OrchestratorBuilder {
        OrchestratorBuilder::default()
    }

    /// A snapshot of the statistics: counters since creation or the last
    /// [`reset_stats`](Self::reset_stats), gauges now, and the current tokio runtime's
    /// metrics when called inside one. `Display` prints the one-line panel.
    ///
    /// ```
    /// use baton_graph::{BoxError, Orchestrator, Retry};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let orch = Orchestrator::new();
    /// let mut g = orch.graph::<()>();
    /// g.node("stock").retry(Retry::new(3)).task(|ctx, ()| async move {
    ///     if ctx.attempt() < 2 { Err("503".into()) } else { Ok::<_, BoxError>(7_u32) }
    /// });
    /// g.build()?.run(()).await?;
    /// let stats = orch.stats();
    /// assert_eq!((stats.runs_finished, stats.attempts, stats.retries), (1, 2, 1));
    /// orch.reset_stats();
    /// assert_eq!(orch.stats().attempts, 0);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn stats(&self) -> Stats {
        let waiters = self
            .registry()
            .bulkheads
            .values()
            .map(Bulkhead::waiting)
            .sum();
        self.inner.counters.snapshot(waiters)
    }

    /// Sets every counter back to zero. Gauges are live values and are kept.
    pub fn reset_stats(&self) {
        self.inner.counters.reset();
    }

    /// Whether `self` and `other` are the same orchestrator, as clones of one are.
    pub(crate) fn same(&self, other: &Orchestrator) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    pub(crate) fn observers(&self) -> &[Arc<dyn Observer>] {
        &self.inner.observers
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.inner.counters
    }
}

/// Delivers `event` to each observer in order; a panicking observer is caught and logged.
pub(crate) fn deliver(observers: &[Arc<dyn Observer>], event: &Event<'_>) {
    for observer in observers {
        if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(|| observer.on_event(event)))
        {
            let message = crate::error::panic_message(panic.as_ref());
            tracing::error!(%message, "observer panicked; event dropped for it");
        }
    }
}
