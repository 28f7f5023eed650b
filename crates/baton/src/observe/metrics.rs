//! `MetricsObserver`: run events as counters, gauges and histograms through the `metrics`
//! facade, with feature `metrics`. See the observer's docs for the metrics it records.

use metrics::{Label, counter, gauge, histogram};

use super::{ConfigAction, ConfigChange, Event, Observer};
use crate::policy::breaker::{BreakerState, BreakerTransition, TransitionReason};

/// Records run events as `metrics` counters, gauges and histograms, with feature `metrics`.
/// Install any `metrics` recorder, such as a Prometheus exporter or statsd, and give the
/// observer to [`Orchestrator::builder`](crate::Orchestrator::builder).
///
/// # Metric names
/// Names follow Prometheus's conventions: snake case, a `baton_` prefix, base units such
/// as seconds, `_total` for counters, a unit suffix for histograms.
///
/// | name | kind | labels | what |
/// |---|---|---|---|
/// | `baton_runs_started_total` | counter | `graph` | runs started |
/// | `baton_runs_finished_total` | counter | `graph`, `clean` = `true`/`false` | runs finished |
/// | `baton_run_makespan_seconds` | histogram | `graph` | a run's makespan |
/// | `baton_nodes_finished_total` | counter | `graph`, `node`, `outcome` | nodes ended, by outcome |
/// | `baton_node_duration_seconds` | histogram | `graph`, `node`, `outcome` | a node's start to end |
/// | `baton_attempts_total` | counter | `graph`, `node` | attempts started |
/// | `baton_attempt_failures_total` | counter | `graph`, `node` | attempts that failed |
/// | `baton_timeouts_total` | counter | `graph`, `node` | attempts cut by a timeout or deadline |
/// | `baton_retries_total` | counter | `graph`, `node` | retries scheduled |
/// | `baton_retry_delay_seconds` | histogram | `graph`, `node` | backoff before a retry |
/// | `baton_fallbacks_total` | counter | `graph`, `node` | fallbacks run |
/// | `baton_bulkhead_wait_seconds` | histogram | `graph`, `node`, `bulkhead` | an attempt's wait for a bulkhead permit, whether it got one or gave up |
/// | `baton_rate_limit_wait_seconds` | histogram | `graph`, `node`, `limiter` | an attempt's wait for a rate-limit permit it got |
/// | `baton_rate_limit_rejections_total` | counter | `graph`, `node`, `limiter` | attempts a rate limiter refused |
/// | `baton_hedges_total` | counter | `graph`, `node` | hedges started |
/// | `baton_faults_injected_total` | counter | `graph`, `node` | attempts fault injection changed |
/// | `baton_breaker_rejections_total` | counter | `graph`, `node`, `breaker` | series a circuit breaker rejected |
/// | `baton_compensations_total` | counter | `graph`, `node`, `outcome` = `succeeded`/`failed` | compensations ended, by outcome |
/// | `baton_breaker_transitions_total` | counter | `breaker`, `from`, `to` | breaker state changes |
/// | `baton_breaker_state` | gauge | `breaker` | the breaker's state: 0 closed, 1 half-open, 2 open, 3 recovering, 4 isolated, 5 forced closed |
/// | `baton_breaker_shared_state_reached` | gauge | `breaker` | a shared breaker: 0 while its store cannot be reached and it judges alone, 1 once it follows the shared state again |
/// | `baton_config_changes_total` | counter | `kind` | policies a configuration added or updated with `Orchestrator::apply` |
///
/// `graph` is the graph's name, set by [`GraphBuilder::name`](crate::GraphBuilder::name).
/// A graph without one has no `graph` label, and neither has a
/// [`Pipeline`](crate::Pipeline) call, whose `node` is the pipeline's name. A breaker is
/// shared by graphs, so its transitions and state have none either. `baton_breaker_state`
/// is set at each transition: a breaker that never changed state has no value, and is
/// closed.
///
/// Label values are graph, node, bulkhead, rate limiter and breaker names and fixed words,
/// so their number is bounded by the graphs' definitions; no label carries a run's id. The
/// events of a map node's items name the item, as `prices[3]` with its index in `item`.
/// Their metrics carry the node's name, as `node="prices"`, however long the list. A node
/// whose name ends in brackets, such as `x[3]`, keeps it whole.
///
/// ```
/// # #[cfg(feature = "metrics")] {
/// # use std::sync::{Arc, Mutex};
/// # use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder};
/// # use metrics::{SharedString, Unit};
/// # #[derive(Default)]
/// # struct Names(Arc<Mutex<Vec<String>>>);
/// # impl Recorder for Names {
/// #     fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
/// #     fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
/// #     fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
/// #     fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
/// #         self.0.lock().unwrap().push(key.name().to_owned());
/// #         Counter::noop()
/// #     }
/// #     fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge { Gauge::noop() }
/// #     fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram { Histogram::noop() }
/// # }
/// use baton_graph::{BoxError, Orchestrator, observe::MetricsObserver};
///
/// let orch = Orchestrator::builder().observer(MetricsObserver::new()).build();
/// let mut g = orch.graph::<()>();
/// g.name("checkout");
/// g.node("price").task(|_ctx, ()| async { Ok::<_, BoxError>(59_900_u64) });
/// let graph = g.build()?;
///
/// let recorder = Names::default(); // in a service: a Prometheus exporter's recorder
/// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// metrics::with_local_recorder(&recorder, || rt.block_on(graph.run(())))?;
/// let names = recorder.0.lock().unwrap();
/// assert!(names.iter().any(|n| n == "baton_runs_finished_total"));
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct MetricsObserver;

impl MetricsObserver {
    /// The observer. It holds no state: the metrics go to the installed recorder.
    #[must_use]
    pub fn new() -> Self {
        MetricsObserver
    }
}

/// `graph` for a named graph, then `rest`.
fn labels<const N: usize>(graph: Option<&str>, rest: [Label; N]) -> Vec<Label> {
    let mut labels = Vec::with_capacity(N + 1);
    if let Some(graph) = graph {
        labels.push(Label::new("graph", graph.to_owned()));
    }
    labels.extend(rest);
    labels
}

/// `graph` for a named graph, and `node`.
/// Records a `RateLimitWaited` event: the wait of an admitted attempt, or a refusal.
fn rate_limit_waited(
    graph: Option<&str>,
    (node, item): (&str, Option<usize>),
    limiter: &str,
    wait: std::time::Duration,
    admitted: bool,
) {
    let at = [
        node_label(node, item),
        Label::new("limiter", limiter.to_owned()),
    ];
    if admitted {
        histogram!("baton_rate_limit_wait_seconds", labels(graph, at)).record(wait.as_secs_f64());
    } else {
        counter!("baton_rate_limit_rejections_total", labels(graph, at)).increment(1);
    }
}

/// The `node` label of an event about `node`: its node's name. An item of a map node,
/// such as `prices[3]` with `item` 3, is labelled with its node's name, `prices`, so the
/// label's values stay as many as the graph's nodes however long the list.
fn node_label(node: &str, item: Option<usize>) -> Label {
    Label::new("node", node_of(node, item).to_owned())
}

/// The node's name in an event about `name`: for an item, `name` without its `[index]`.
fn node_of(name: &str, item: Option<usize>) -> &str {
    match item {
        Some(index) => name
            .strip_suffix(format!("[{index}]").as_str())
            .unwrap_or(name),
        None => name,
    }
}

fn node_labels(graph: Option<&str>, node: &str, item: Option<usize>) -> Vec<Label> {
    labels(graph, [node_label(node, item)])
}

/// Records a breaker's transition and its state.
fn breaker_transition(t: &BreakerTransition) {
    counter!(
        "baton_breaker_transitions_total",
        "breaker" => t.breaker().to_owned(),
        "from" => t.from().as_str(),
        "to" => t.to().as_str()
    )
    .increment(1);
    gauge!("baton_breaker_state", "breaker" => t.breaker().to_owned()).set(state_value(t.to()));
    let reached = match t.reason() {
        TransitionReason::SharedStateLost => Some(0.0),
        TransitionReason::SharedStateResynced => Some(1.0),
        _ => None,
    };
    if let Some(v) = reached {
        let breaker = t.breaker().to_owned();
        gauge!("baton_breaker_shared_state_reached", "breaker" => breaker).set(v);
    }
}

/// The value of `baton_breaker_state`.
fn state_value(state: BreakerState) -> f64 {
    match state {
        BreakerState::Closed => 0.0,
        BreakerState::HalfOpen => 1.0,
        BreakerState::Open => 2.0,
        BreakerState::Recovering => 3.0,
        BreakerState::Isolated => 4.0,
        BreakerState::ForcedClosed => 5.0,
    }
}

impl Observer for MetricsObserver {
    fn on_event(&self, event: &Event<'_>) {
        let (graph, item) = (event.graph(), event.item());
        match *event {
            Event::RunStarted { .. } => {
                counter!("baton_runs_started_total", labels(graph, [])).increment(1)
            }
            Event::RunFinished { report, .. } => {
                let clean = if report.is_clean() { "true" } else { "false" };
                let finished = labels(graph, [Label::new("clean", clean)]);
                counter!("baton_runs_finished_total", finished).increment(1);
                histogram!("baton_run_makespan_seconds", labels(graph, []))
                    .record(report.makespan().as_secs_f64());
            }
            Event::NodeStarted { .. } => {}
            Event::AttemptStarted { node, .. } => {
                counter!("baton_attempts_total", node_labels(graph, node, item)).increment(1);
            }
            Event::AttemptFailed { node, .. } => {
                counter!(
                    "baton_attempt_failures_total",
                    node_labels(graph, node, item)
                )
                .increment(1);
            }
            Event::Timeout { node, .. } => {
                counter!("baton_timeouts_total", node_labels(graph, node, item)).increment(1);
            }
            Event::RetryScheduled { node, delay, .. } => {
                counter!("baton_retries_total", node_labels(graph, node, item)).increment(1);
                histogram!("baton_retry_delay_seconds", node_labels(graph, node, item))
                    .record(delay.as_secs_f64());
            }
            Event::FallbackUsed { node, .. } => {
                counter!("baton_fallbacks_total", node_labels(graph, node, item)).increment(1);
            }
            Event::BulkheadWaited {
                node,
                bulkhead,
                waited,
                ..
            } => {
                let at = [
                    node_label(node, item),
                    Label::new("bulkhead", bulkhead.to_owned()),
                ];
                histogram!("baton_bulkhead_wait_seconds", labels(graph, at))
                    .record(waited.as_secs_f64());
            }
            Event::RateLimitWaited {
                node,
                limiter,
                wait,
                admitted,
                ..
            } => rate_limit_waited(graph, (node, item), limiter, wait, admitted),
            Event::FaultInjected { node, .. } => {
                counter!(
                    "baton_faults_injected_total",
                    node_labels(graph, node, item)
                )
                .increment(1);
            }
            Event::HedgeStarted { node, .. } => {
                counter!("baton_hedges_total", node_labels(graph, node, item)).increment(1);
            }
            Event::BreakerRejected { node, breaker, .. } => {
                let at = [
                    node_label(node, item),
                    Label::new("breaker", breaker.to_owned()),
                ];
                counter!("baton_breaker_rejections_total", labels(graph, at)).increment(1);
            }
            Event::BreakerTransition(t) => breaker_transition(t),
            Event::CompensationStarted { .. } => {}
            Event::CompensationFinished { node, outcome, .. } => {
                let at = [
                    node_label(node, None),
                    Label::new("outcome", outcome.as_str()),
                ];
                counter!("baton_compensations_total", labels(graph, at)).increment(1);
            }
            Event::ConfigApplied { changes } => config_applied(changes),
            Event::NodeFinished {
                node,
                outcome,
                duration,
                ..
            } => {
                let at = [
                    node_label(node, item),
                    Label::new("outcome", outcome.as_str()),
                ];
                let at = labels(graph, at);
                counter!("baton_nodes_finished_total", at.iter()).increment(1);
                histogram!("baton_node_duration_seconds", at).record(duration.as_secs_f64());
            }
        }
    }
}

/// Counts the policies a configuration added or updated, by kind.
fn config_applied(changes: &[ConfigChange]) {
    for c in changes
        .iter()
        .filter(|c| c.action != ConfigAction::Unchanged)
    {
        counter!("baton_config_changes_total", "kind" => c.kind).increment(1);
    }
}
