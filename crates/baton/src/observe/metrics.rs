//! `MetricsObserver`: run events as counters and histograms through the `metrics` facade
//! (feature `metrics`). Install any `metrics` recorder (Prometheus exporter, statsd, …) and
//! add the observer to the orchestrator.
//!
//! # Metric names
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `baton_runs_started_total` | counter | | runs started |
//! | `baton_runs_finished_total` | counter | `clean` (`true`/`false`) | runs finished |
//! | `baton_run_makespan_seconds` | histogram | | a run's makespan |
//! | `baton_nodes_finished_total` | counter | `node`, `outcome` | nodes ended, by outcome |
//! | `baton_node_duration_seconds` | histogram | `node`, `outcome` | a node's start to end |
//! | `baton_attempts_total` | counter | `node` | attempts started |
//! | `baton_attempt_failures_total` | counter | `node` | attempts that failed |
//! | `baton_timeouts_total` | counter | `node` | attempts cut by a timeout or deadline |
//! | `baton_retries_total` | counter | `node` | retries scheduled |
//! | `baton_retry_delay_seconds` | histogram | `node` | backoff before a retry |
//! | `baton_fallbacks_total` | counter | `node` | fallbacks run |
//! | `baton_breaker_transitions_total` | counter | `breaker`, `from`, `to` | breaker state changes |
//!
//! Label values are node and breaker names, so their number is bounded by the graphs'
//! definitions.

use metrics::{counter, histogram};

use super::{Event, Observer};

/// Records run events as `metrics` counters and histograms (feature `metrics`). Install any
/// `metrics` recorder (Prometheus exporter, statsd, …) and give the observer to
/// [`Orchestrator::builder`](crate::Orchestrator::builder).
///
/// # Metric names
/// | name | kind | labels | what |
/// |---|---|---|---|
/// | `baton_runs_started_total` | counter | | runs started |
/// | `baton_runs_finished_total` | counter | `clean` (`true`/`false`) | runs finished |
/// | `baton_run_makespan_seconds` | histogram | | a run's makespan |
/// | `baton_nodes_finished_total` | counter | `node`, `outcome` | nodes ended, by outcome |
/// | `baton_node_duration_seconds` | histogram | `node`, `outcome` | a node's start to end |
/// | `baton_attempts_total` | counter | `node` | attempts started |
/// | `baton_attempt_failures_total` | counter | `node` | attempts that failed |
/// | `baton_timeouts_total` | counter | `node` | attempts cut by a timeout or deadline |
/// | `baton_retries_total` | counter | `node` | retries scheduled |
/// | `baton_retry_delay_seconds` | histogram | `node` | backoff before a retry |
/// | `baton_fallbacks_total` | counter | `node` | fallbacks run |
/// | `baton_breaker_transitions_total` | counter | `breaker`, `from`, `to` | breaker state changes |
///
/// Label values are node and breaker names, so their number is bounded by the graphs'
/// definitions.
#[derive(Debug, Clone, Copy, Default)]
pub struct MetricsObserver;

impl MetricsObserver {
    /// The observer. It holds no state: the metrics go to the globally installed recorder.
    #[must_use]
    pub fn new() -> Self {
        MetricsObserver
    }
}

impl Observer for MetricsObserver {
    fn on_event(&self, event: &Event<'_>) {
        match *event {
            Event::RunStarted { .. } => counter!("baton_runs_started_total").increment(1),
            Event::RunFinished { report, .. } => {
                let clean = if report.is_clean() { "true" } else { "false" };
                counter!("baton_runs_finished_total", "clean" => clean).increment(1);
                histogram!("baton_run_makespan_seconds").record(report.makespan().as_secs_f64());
            }
            Event::NodeStarted { .. } => {}
            Event::AttemptStarted { node, .. } => {
                counter!("baton_attempts_total", "node" => node.to_owned()).increment(1);
            }
            Event::AttemptFailed { node, .. } => {
                counter!("baton_attempt_failures_total", "node" => node.to_owned()).increment(1);
            }
            Event::Timeout { node, .. } => {
                counter!("baton_timeouts_total", "node" => node.to_owned()).increment(1);
            }
            Event::RetryScheduled { node, delay, .. } => {
                counter!("baton_retries_total", "node" => node.to_owned()).increment(1);
                histogram!("baton_retry_delay_seconds", "node" => node.to_owned())
                    .record(delay.as_secs_f64());
            }
            Event::FallbackUsed { node, .. } => {
                counter!("baton_fallbacks_total", "node" => node.to_owned()).increment(1);
            }
            Event::BreakerTransition(t) => {
                counter!(
                    "baton_breaker_transitions_total",
                    "breaker" => t.breaker().to_owned(),
                    "from" => t.from().as_str(),
                    "to" => t.to().as_str()
                )
                .increment(1);
            }
            Event::NodeFinished {
                node,
                outcome,
                duration,
                ..
            } => {
                let labels = [
                    ("node", node.to_owned()),
                    ("outcome", outcome.as_str().to_owned()),
                ];
                counter!("baton_nodes_finished_total", &labels).increment(1);
                histogram!("baton_node_duration_seconds", &labels).record(duration.as_secs_f64());
            }
        }
    }
}
