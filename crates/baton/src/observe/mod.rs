//! Watching runs: per-node callbacks, run-level observers that receive every event as it
//! happens, and orchestrator-wide statistics. The contract's rules
//! [10](crate::contract#10-callbacks-and-observers) and [16](crate::contract#16-stats) say
//! what each promises.
//!
//! # Callbacks
//! [`NodeBuilder::on_success`](crate::NodeBuilder::on_success),
//! [`on_failure`](crate::NodeBuilder::on_failure) and
//! [`on_complete`](crate::NodeBuilder::on_complete) stack: several per node, kept in
//! registration order. Each fires exactly once per run per node, on the thread that ends the
//! node, right after its outcome is recorded. First comes `on_success`, with the value, or
//! `on_failure`, for `Failed` and `Skipped`, with the node's report entry, which names the
//! error or the skip's cause. Then comes `on_complete`, for every outcome. A panicking
//! callback is caught and logged with the node's name; it changes no outcome and no other
//! callback.
//!
//! # Events
//! An [`Observer`] given to [`Orchestrator::builder`](crate::Orchestrator::builder) receives
//! every [`Event`] of every run of that orchestrator, synchronously, on the thread where it
//! happens. Per node the order is:
//!
//! 1. `NodeStarted`;
//! 2. `BreakerRejected` if its breaker rejected it, or else for each attempt:
//!    `AttemptStarted`, `RateLimitWaited` with a rate limiter, `BulkheadWaited` with a
//!    bulkhead and, if it failed, `Timeout` when it was cut and `AttemptFailed`, then
//!    `RetryScheduled` before the next attempt;
//! 3. `FallbackUsed` when the fallback ran;
//! 4. `NodeFinished` last.
//!
//! Nodes that never start, because they were skipped, not taken or cancelled while
//! pending, get only `NodeFinished`. When a run's compensations run, each has
//! `CompensationStarted` and `CompensationFinished`, after every node's `NodeFinished` and
//! before the run's `RunFinished`.
//!
//! A run of a graph that is a node of another, through
//! [`NodeBuilder::subgraph`](crate::NodeBuilder::subgraph), reports to the outer run's
//! observers too. Its events reach them with the outer run's id and graph name, and its
//! nodes are named after the outer node, a slash and their own name: `profile/name`, or
//! for an item `profile/prices[3]`. Its `RunStarted` and `RunFinished` do not reach them:
//! the outer node's `NodeStarted` and `NodeFinished` frame it. Its own graph's
//! orchestrator's observers get its events as those of a run of its own, unless they are
//! the outer run's observers because both graphs were built from one orchestrator. Each
//! observer receives each event once.
//!
//! Observers must be quick and must not block: they run on the scheduler's threads.
//!
//! # Tracing
//! With the `tracing` feature and a subscriber installed, a run is a `run` span, a child of
//! the span current where the run is first polled unless
//! [`RunOptions::detached_span`](crate::RunOptions::detached_span) makes it a root, with a
//! `node` span per node and an `attempt` span per attempt, entered around the futures they
//! describe. A failed attempt's span and a `Failed` node's end with `otel.status_code`
//! `ERROR`, `otel.status_message` and `error.type`, the [`NodeError::kind`]. An attempt or
//! a node that produced a value, a `Recovered` one included, ends `OK`.
//!
//! With or without the feature, failures are logged as `tracing` events: `attempt failed`
//! and `attempt timed out` at DEBUG, `node recovered` at INFO, `node failed` at WARN, each
//! with `node`, `error.type` and `error`. A circuit breaker's transitions are logged too,
//! with `breaker`, `from`, `to` and `reason`: to open at WARN, and to half-open,
//! recovering or closed at INFO.

mod callbacks;
mod change;
pub(crate) mod diagram;
mod display;
mod event_subject;
pub(crate) mod log;
#[cfg(feature = "metrics")]
mod metrics;
pub(crate) mod stats;

pub(crate) mod trace;

use std::time::Duration;

pub(crate) use callbacks::NodeCallbacks;
pub use change::{ConfigAction, ConfigChange};
#[cfg(feature = "metrics")]
pub use metrics::MetricsObserver;
pub use stats::{RuntimeStats, Stats};

use crate::error::NodeError;
use crate::id::RunId;
use crate::policy::breaker::{BreakerState, BreakerTransition};
use crate::report::{Outcome, Report};

/// Receives every [`Event`] of the runs of an orchestrator; see the [module docs](crate::observe).
///
/// Implemented for every `Fn(&Event<'_>) + Send + Sync + 'static`.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::time::Duration;
/// use baton_graph::{BoxError, Orchestrator, observe::{Event, Observer}};
///
/// struct Timeouts(Arc<AtomicUsize>);
///
/// impl Observer for Timeouts {
///     fn on_event(&self, event: &Event<'_>) {
///         if let Event::Timeout { .. } = event {
///             self.0.fetch_add(1, Ordering::Relaxed);
///         }
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), BoxError> {
/// let timeouts = Arc::new(AtomicUsize::new(0));
/// let orch = Orchestrator::builder().observer(Timeouts(Arc::clone(&timeouts))).build();
/// let mut g = orch.graph::<()>();
/// g.node("slow").timeout(Duration::from_millis(10)).task(|_ctx, ()| async {
///     tokio::time::sleep(Duration::from_secs(1)).await;
///     Ok::<_, BoxError>(())
/// });
/// g.build()?.run(()).await?;
/// assert_eq!(timeouts.load(Ordering::Relaxed), 1);
/// # Ok(())
/// # }
/// ```
pub trait Observer: Send + Sync + 'static {
    /// Called once per event, on the thread where it happened. A panic is caught and logged.
    fn on_event(&self, event: &Event<'_>);
}

impl<F: Fn(&Event<'_>) + Send + Sync + 'static> Observer for F {
    fn on_event(&self, event: &Event<'_>) {
        self(event);
    }
}

/// Something that happened in a run; see the [module docs](crate::observe) for the order.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use baton_graph::{BoxError, Orchestrator, Retry, observe::Event};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), BoxError> {
/// let failed = Arc::new(Mutex::new(Vec::new()));
/// let log = Arc::clone(&failed);
/// let orch = Orchestrator::builder()
///     .observer(move |e: &Event<'_>| {
///         if let Event::AttemptFailed { node, attempt, .. } = e {
///             log.lock().unwrap().push(format!("{node} #{attempt}"));
///         }
///     })
///     .build();
/// let mut g = orch.graph::<()>();
/// g.node("stock")
///     .retry(Retry::new(3))
///     .task(|_ctx, ()| async { Err::<u32, BoxError>("503".into()) });
/// g.build()?.run(()).await?;
/// assert_eq!(*failed.lock().unwrap(), ["stock #1", "stock #2", "stock #3"]);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Event<'a> {
    /// A run started: it was first polled and the orchestrator accepted it. Comes before
    /// the run's `RunFinished`, once per admitted run.
    RunStarted {
        /// The run.
        run: RunId,
        /// Its graph's name, if the graph has one; `None` for a pipeline's call.
        graph: Option<&'a str>,
        /// How many nodes its graph has.
        nodes: usize,
    },
    /// Every node of a run ended and its tasks exited. Delivered, and the run counted in the
    /// stats, before the run's future resolves.
    RunFinished {
        /// The run.
        run: RunId,
        /// Its graph's name, if the graph has one; `None` for a pipeline's call.
        graph: Option<&'a str>,
        /// Its report, with outcome counts, makespan and every node.
        report: &'a Report,
    },
    /// A node's upstreams all produced values and its execution began.
    NodeStarted {
        /// The run.
        run: RunId,
        /// Its graph's name, if the graph has one; `None` for a pipeline's call.
        graph: Option<&'a str>,
        /// The node.
        node: &'a str,
    },
    /// An attempt of a node's task started.
    AttemptStarted {
        /// The run.
        run: RunId,
        /// Its graph's name, if the graph has one; `None` for a pipeline's call.
        graph: Option<&'a str>,
        /// The node.
        node: &'a str,
        /// The item's index when the event is a map item's, whose `node` names the item as
        /// `node[index]`; `None` for a node's.
        item: Option<usize>,
        /// The attempt, from 1.
        attempt: u32,
        /// The time the attempt has before it is cut by its timeout or deadline, if any.
        budget: Option<Duration>,
    },
    /// An attempt ended with an error.
    AttemptFailed {
        /// The run.
        run: RunId,
        /// Its graph's name, if the graph has one; `None` for a pipeline's call.
        graph: Option<&'a str>,
        /// The node.
        node: &'a str,
        /// The item's index when the event is a map item's, whose `node` names the item as
        /// `node[index]`; `None` for a node's.
        item: Option<usize>,
        /// The attempt, from 1.
        attempt: u32,
        /// Its error.
        error: &'a NodeError,
    },
    /// An attempt was cut by its per-attempt timeout or by the deadline.
    Timeout {
        /// The run.
        run: RunId,
        /// Its graph's name, if the graph has one; `None` for a pipeline's call.
        graph: Option<&'a str>,
        /// The node.
        node: &'a str,
        /// The item's index when the event is a map item's, whose `node` names the item as
        /// `node[index]`; `None` for a node's.
        item: Option<usize>,
        /// The attempt, from 1.
        attempt: u32,
        /// How long it had.
        limit: Duration,
    },
    /// A retry is scheduled after a backoff.
    RetryScheduled {
        /// The run.
        run: RunId,
        /// Its graph's name, if the graph has one; `None` for a pipeline's call.
        graph: Option<&'a str>,
        /// The node.
        node: &'a str,
        /// The item's index when the event is a map item's, whose `node` names the item as
        /// `node[index]`; `None` for a node's.
        item: Option<usize>,
        /// The attempt that will run after the delay.
        attempt: u32,
        /// The backoff, after jitter and clipping to the deadline.
        delay: Duration,
        /// The time left before the node's deadline when the retry was scheduled, before
        /// the backoff, if the node has a deadline.
        remaining: Option<Duration>,
    },
    /// An attempt of a node with a bulkhead got its permit, or gave up waiting for one when
    /// its maximum wait or its cut came first. Comes after the attempt's `AttemptStarted`.
    BulkheadWaited {
        /// The run.
        run: RunId,
        /// Its graph's name, if the graph has one; `None` for a pipeline's call.
        graph: Option<&'a str>,
        /// The node.
        node: &'a str,
        /// The item's index when the event is a map item's, whose `node` names the item as
        /// `node[index]`; `None` for a node's.
        item: Option<usize>,
        /// The attempt, from 1.
        attempt: u32,
        /// The bulkhead's name.
        bulkhead: &'a str,
        /// How long the attempt waited; zero when a permit was free.
        waited: Duration,
        /// Whether it got a permit.
        acquired: bool,
    },
    /// An attempt of a node with a rate limiter got its permit after waiting `wait`, or
    /// was refused one that would have come only after `wait`, past the limiter's maximum
    /// wait or the attempt's cut. Comes after the attempt's `AttemptStarted`, before its
    /// `BulkheadWaited`.
    RateLimitWaited {
        /// The run.
        run: RunId,
        /// Its graph's name, if the graph has one; `None` for a pipeline's call.
        graph: Option<&'a str>,
        /// The node.
        node: &'a str,
        /// The item's index when the event is a map item's, whose `node` names the item as
        /// `node[index]`; `None` for a node's.
        item: Option<usize>,
        /// The attempt, from 1.
        attempt: u32,
        /// The rate limiter's name.
        limiter: &'a str,
        /// How long the attempt waited, zero when a permit was free. When refused, how long
        /// until a permit would have been free.
        wait: Duration,
        /// Whether it got a permit.
        admitted: bool,
    },
    /// Fault injection, [`Chaos`](crate::chaos::Chaos), drew faults for an attempt, after its
    /// permits and before its task: a latency it sleeps first, and an error that replaces
    /// the task's run.
    FaultInjected {
        /// The run.
        run: RunId,
        /// Its graph's name, if the graph has one; `None` for a pipeline's call.
        graph: Option<&'a str>,
        /// The node.
        node: &'a str,
        /// The item's index when the event is a map item's, whose `node` names the item as
        /// `node[index]`; `None` for a node's.
        item: Option<usize>,
        /// The attempt, from 1.
        attempt: u32,
        /// The injected latency; zero for none.
        latency: Duration,
        /// Whether an error replaces the task's run.
        error: bool,
    },
    /// A hedge started: attempt `attempt` of a node with a hedge policy, in parallel with
    /// the attempts still running, `after` the one before it began; its own
    /// `AttemptStarted` follows.
    HedgeStarted {
        /// The run.
        run: RunId,
        /// Its graph's name, if the graph has one; `None` for a pipeline's call.
        graph: Option<&'a str>,
        /// The node.
        node: &'a str,
        /// The item's index when the event is a map item's, whose `node` names the item as
        /// `node[index]`; `None` for a node's.
        item: Option<usize>,
        /// The hedge's attempt number.
        attempt: u32,
        /// The hedge delay it waited.
        after: Duration,
    },
    /// A node's circuit breaker rejected its series: no attempt ran. It comes after
    /// `NodeStarted`, and before `FallbackUsed` if the node has a fallback.
    BreakerRejected {
        /// The run.
        run: RunId,
        /// Its graph's name, if the graph has one; `None` for a pipeline's call.
        graph: Option<&'a str>,
        /// The node.
        node: &'a str,
        /// The item's index when the event is a map item's, whose `node` names the item as
        /// `node[index]`; `None` for a node's.
        item: Option<usize>,
        /// The breaker's name.
        breaker: &'a str,
        /// Its state: open, half-open with every probe taken, or recovering.
        state: BreakerState,
    },
    /// A circuit breaker changed state, from any node, graph or run of the orchestrator.
    BreakerTransition(&'a BreakerTransition),
    /// The orchestrator applied a configuration with `Orchestrator::apply`, with feature
    /// `serde`: every policy it named, and what it did to each, in the configuration's order.
    ConfigApplied {
        /// The policies, and what happened to each.
        changes: &'a [ConfigChange],
    },
    /// A node's fallback ran because its inner layers failed with `error`.
    FallbackUsed {
        /// The run.
        run: RunId,
        /// Its graph's name, if the graph has one; `None` for a pipeline's call.
        graph: Option<&'a str>,
        /// The node.
        node: &'a str,
        /// The item's index when the event is a map item's, whose `node` names the item as
        /// `node[index]`; `None` for a node's.
        item: Option<usize>,
        /// What it recovered from, or tried to.
        error: &'a NodeError,
    },
    /// A node's compensation started: the run's nodes all ended and its compensation
    /// trigger fired; see [`NodeBuilder::compensate`](crate::NodeBuilder::compensate).
    /// Comes after the run's last `NodeFinished` and before its `RunFinished`.
    CompensationStarted {
        /// The run.
        run: RunId,
        /// Its graph's name, if the graph has one.
        graph: Option<&'a str>,
        /// The node whose value is being compensated.
        node: &'a str,
    },
    /// A node's compensation ended: `Succeeded`, or `Failed` once its attempts were spent.
    /// The report's compensation section has its error.
    CompensationFinished {
        /// The run.
        run: RunId,
        /// Its graph's name, if the graph has one.
        graph: Option<&'a str>,
        /// The node whose value was compensated.
        node: &'a str,
        /// `Succeeded` or `Failed`.
        outcome: Outcome,
        /// How many attempts it made.
        attempts: u32,
        /// From its start to its end.
        duration: Duration,
    },
    /// A node ended.
    NodeFinished {
        /// The run.
        run: RunId,
        /// Its graph's name, if the graph has one; `None` for a pipeline's call.
        graph: Option<&'a str>,
        /// The node.
        node: &'a str,
        /// How.
        outcome: Outcome,
        /// From its start to its end; zero if it never started.
        duration: Duration,
    },
}

impl<'a> Event<'a> {
    /// The name of the graph whose run the event belongs to, if the graph has one through
    /// [`GraphBuilder::name`](crate::GraphBuilder::name). `None` for a pipeline's call,
    /// and for a breaker's transition and an applied configuration, which belong to no run.
    #[must_use]
    pub fn graph(&self) -> Option<&'a str> {
        match *self {
            Event::RunStarted { graph, .. }
            | Event::RunFinished { graph, .. }
            | Event::NodeStarted { graph, .. }
            | Event::AttemptStarted { graph, .. }
            | Event::AttemptFailed { graph, .. }
            | Event::Timeout { graph, .. }
            | Event::RetryScheduled { graph, .. }
            | Event::BulkheadWaited { graph, .. }
            | Event::RateLimitWaited { graph, .. }
            | Event::HedgeStarted { graph, .. }
            | Event::FaultInjected { graph, .. }
            | Event::BreakerRejected { graph, .. }
            | Event::FallbackUsed { graph, .. }
            | Event::CompensationStarted { graph, .. }
            | Event::CompensationFinished { graph, .. }
            | Event::NodeFinished { graph, .. } => graph,
            Event::BreakerTransition(_) | Event::ConfigApplied { .. } => None,
        }
    }
}
