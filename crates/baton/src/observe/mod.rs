//! Watching runs: per-node callbacks, run-level observers that receive every event as it
//! happens, and orchestrator-wide statistics (`docs/contract.md`, rules 10 and 16).
//!
//! # Callbacks
//! [`NodeBuilder::on_success`](crate::NodeBuilder::on_success),
//! [`on_failure`](crate::NodeBuilder::on_failure) and
//! [`on_complete`](crate::NodeBuilder::on_complete) stack: several per node, kept in
//! registration order. Each fires exactly once per run per node, on the thread that ends the
//! node, right after its outcome is recorded: `on_success` (with the value) or `on_failure`
//! (for `Failed` and `Skipped`, with the node's report entry, which names the error or the
//! skip's cause) first, then `on_complete` (every outcome). A panicking callback is caught
//! and logged with the node's name; it changes no outcome and no other callback.
//!
//! # Events
//! An [`Observer`] given to [`Orchestrator::builder`](crate::Orchestrator::builder) receives
//! every [`Event`] of every run of that orchestrator, synchronously, on the thread where it
//! happens. Per node the order is: `NodeStarted`, then `BreakerRejected` if its breaker
//! rejected it, or for each attempt `AttemptStarted`, `BulkheadWaited` (with a bulkhead)
//! and, if it failed, `Timeout` (when it was cut) and `AttemptFailed`, then
//! `RetryScheduled` before the next attempt; `FallbackUsed` when the fallback ran, and
//! `NodeFinished` last. Nodes that never start (skipped, not taken, cancelled while
//! pending) get only `NodeFinished`.
//! Observers must be quick and must not block: they run on the scheduler's threads.
//!
//! # Tracing
//! With the `tracing` feature and a subscriber installed, a run is a `run` span, a child of
//! the span current where the run is first polled unless
//! [`RunOptions::detached_span`](crate::RunOptions::detached_span) makes it a root, with a
//! `node` span per node and an `attempt` span per attempt, entered around the futures they
//! describe. A failed attempt's span and a `Failed` node's end with `otel.status_code`
//! `ERROR`, `otel.status_message` and `error.type` ([`NodeError::kind`]); an attempt or a
//! node that produced a value (a `Recovered` one included) ends `OK`.
//!
//! With or without the feature, failures are logged as `tracing` events: `attempt failed`
//! and `attempt timed out` at DEBUG, `node recovered` at INFO, `node failed` at WARN (each
//! with `node`, `error.type` and `error`), and a circuit breaker's transitions: to open at
//! WARN, to half-open, recovering or closed at INFO (with `breaker`, `from`, `to`, `reason`).

mod callbacks;
pub(crate) mod log;
#[cfg(feature = "metrics")]
mod metrics;
pub(crate) mod stats;

pub(crate) mod trace;

use std::fmt;
use std::time::Duration;

pub(crate) use callbacks::NodeCallbacks;
#[cfg(feature = "metrics")]
pub use metrics::MetricsObserver;
pub use stats::{RuntimeStats, Stats};

use crate::error::NodeError;
use crate::id::RunId;
use crate::policy::breaker::{BreakerState, BreakerTransition};
use crate::report::{Outcome, Report};
use crate::util::human::Human;

/// Receives every [`Event`] of the runs of an orchestrator; see the [module docs](crate::observe).
///
/// Implemented for every `Fn(&Event<'_>) + Send + Sync + 'static`.
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
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Event<'a> {
    /// A run started (it was first polled and the orchestrator accepted it). Comes before
    /// the run's `RunFinished`, once per admitted run.
    RunStarted {
        /// The run.
        run: RunId,
        /// Its graph's name, if the graph has one; `None` for a pipeline's call.
        graph: Option<&'a str>,
        /// How many nodes its graph has.
        nodes: usize,
    },
    /// Every node of a run ended and its tasks exited. Delivered (and the run counted in the
    /// stats) before the run's future resolves.
    RunFinished {
        /// The run.
        run: RunId,
        /// Its graph's name, if the graph has one; `None` for a pipeline's call.
        graph: Option<&'a str>,
        /// Its report (outcome counts, makespan, every node).
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
        /// The attempt, from 1.
        attempt: u32,
        /// The time the attempt has before it is cut (its timeout or deadline), if any.
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
        /// The attempt that will run after the delay.
        attempt: u32,
        /// The backoff (after jitter and clipping to the deadline).
        delay: Duration,
        /// The time left before the node's deadline when the retry was scheduled (before
        /// the backoff), if the node has a deadline.
        remaining: Option<Duration>,
    },
    /// An attempt of a node with a bulkhead got its permit, or gave up waiting for one (its
    /// maximum wait or its cut came first); comes after the attempt's `AttemptStarted`.
    BulkheadWaited {
        /// The run.
        run: RunId,
        /// Its graph's name, if the graph has one; `None` for a pipeline's call.
        graph: Option<&'a str>,
        /// The node.
        node: &'a str,
        /// The attempt, from 1.
        attempt: u32,
        /// The bulkhead's name.
        bulkhead: &'a str,
        /// How long the attempt waited (zero when a permit was free).
        waited: Duration,
        /// Whether it got a permit.
        acquired: bool,
    },
    /// A node's circuit breaker rejected its series: no attempt ran (it comes after
    /// `NodeStarted`, and before `FallbackUsed` if the node has a fallback).
    BreakerRejected {
        /// The run.
        run: RunId,
        /// Its graph's name, if the graph has one; `None` for a pipeline's call.
        graph: Option<&'a str>,
        /// The node.
        node: &'a str,
        /// The breaker's name.
        breaker: &'a str,
        /// Its state: open, half-open with every probe taken, or recovering.
        state: BreakerState,
    },
    /// A circuit breaker changed state (from any node, graph or run of the orchestrator).
    BreakerTransition(&'a BreakerTransition),
    /// A node's fallback ran because its inner layers failed with `error`.
    FallbackUsed {
        /// The run.
        run: RunId,
        /// Its graph's name, if the graph has one; `None` for a pipeline's call.
        graph: Option<&'a str>,
        /// The node.
        node: &'a str,
        /// What it recovered from (or tried to).
        error: &'a NodeError,
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
        /// From its start to its end (zero if it never started).
        duration: Duration,
    },
}

impl<'a> Event<'a> {
    /// The name of the graph whose run the event belongs to, if the graph has one
    /// ([`GraphBuilder::name`](crate::GraphBuilder::name)); `None` for a pipeline's call
    /// and for a breaker's transition, which belongs to no run.
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
            | Event::BreakerRejected { graph, .. }
            | Event::FallbackUsed { graph, .. }
            | Event::NodeFinished { graph, .. } => graph,
            Event::BreakerTransition(_) => None,
        }
    }
}

impl fmt::Display for Event<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::RunStarted { run, graph, nodes } => {
                write!(f, "run {run}{} started ({nodes} nodes)", Of(*graph))
            }
            Event::RunFinished { run, graph, report } => write!(
                f,
                "run {run}{} finished in {}: {}",
                Of(*graph),
                Human(report.makespan()),
                report.counts()
            ),
            Event::NodeStarted { node, .. } => write!(f, "`{node}` started"),
            Event::AttemptStarted {
                node,
                attempt,
                budget,
                ..
            } => match budget {
                Some(b) => write!(
                    f,
                    "`{node}` attempt {attempt} started (budget {})",
                    Human(*b)
                ),
                None => write!(f, "`{node}` attempt {attempt} started"),
            },
            Event::AttemptFailed {
                node,
                attempt,
                error,
                ..
            } => write!(f, "`{node}` attempt {attempt} failed: {error}"),
            Event::Timeout {
                node,
                attempt,
                limit,
                ..
            } => write!(f, "`{node}` attempt {attempt} cut after {}", Human(*limit)),
            Event::RetryScheduled {
                node,
                attempt,
                delay,
                remaining,
                ..
            } => match remaining {
                Some(r) => write!(
                    f,
                    "`{node}` attempt {attempt} in {} ({} of budget left)",
                    Human(*delay),
                    Human(*r)
                ),
                None => write!(f, "`{node}` attempt {attempt} in {}", Human(*delay)),
            },
            Event::BulkheadWaited {
                node,
                attempt,
                bulkhead,
                waited,
                acquired,
                ..
            } => {
                let got = if *acquired { "got" } else { "gave up on" };
                let waited = Human(*waited);
                write!(
                    f,
                    "`{node}` attempt {attempt} {got} bulkhead `{bulkhead}` after {waited}"
                )
            }
            Event::BreakerRejected {
                node,
                breaker,
                state,
                ..
            } => write!(f, "`{node}` rejected by breaker `{breaker}` ({state})"),
            Event::BreakerTransition(t) => write!(f, "{t}"),
            Event::FallbackUsed { node, error, .. } => {
                write!(f, "`{node}` fell back after: {error}")
            }
            Event::NodeFinished {
                node,
                outcome,
                duration,
                ..
            } => write!(f, "`{node}` {outcome} after {}", Human(*duration)),
        }
    }
}

/// ` of `name`` for a named graph, nothing otherwise.
struct Of<'a>(Option<&'a str>);

impl fmt::Display for Of<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(graph) => write!(f, " of `{graph}`"),
            None => Ok(()),
        }
    }
}
