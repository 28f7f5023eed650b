//! `tracing` spans: one per run, per node (child of the run) and per attempt (child of the
//! node), with the fields the events carry. Behind the `tracing` feature (on by default).
//!
//! Spans are entered around the futures they describe, so whatever the task itself logs is
//! attributed to its attempt, its node and its run. That is why they are made by the
//! scheduler rather than by an [`Observer`](super::Observer): an observer sees events, but
//! cannot enter a span around a future it does not own.

use std::time::Duration;

use tracing::Span;

use crate::run::{Record, RunCore, RunId};

/// The span of a run: `run{run_id, nodes}`.
pub(crate) fn run_span(run: RunId, nodes: usize) -> Span {
    if cfg!(feature = "tracing") {
        tracing::info_span!(parent: None, "run", run_id = %run, nodes)
    } else {
        Span::none()
    }
}

/// The span of a node: `node{node, outcome, attempts}`, child of its run's span.
pub(crate) fn node_span(core: &RunCore, node: &str) -> Span {
    if !cfg!(feature = "tracing") {
        return Span::none();
    }
    match core.span() {
        Some(run) => tracing::info_span!(
            parent: run,
            "node",
            node,
            outcome = tracing::field::Empty,
            attempts = tracing::field::Empty
        ),
        None => Span::none(),
    }
}

/// The span of an attempt: `attempt{node, attempt, budget_ms}`, child of the current (node)
/// span.
pub(crate) fn attempt_span(node: &str, attempt: u32, budget: Option<Duration>) -> Span {
    if !cfg!(feature = "tracing") {
        return Span::none();
    }
    match budget {
        Some(b) => tracing::info_span!(
            "attempt",
            node,
            attempt,
            budget_ms = b.as_secs_f64() * 1000.0
        ),
        None => tracing::info_span!("attempt", node, attempt),
    }
}

/// Records how the node ended on its span.
pub(crate) fn record_outcome(span: &Span, record: &Record) {
    if !span.is_disabled() {
        span.record("outcome", record.outcome.as_str());
        span.record("attempts", record.attempt_log.len().max(1));
    }
}

/// Polls `fut` inside `span`, or plainly when the span is disabled (no subscriber wants it,
/// or the `tracing` feature is off): the wrapper costs nothing then.
pub(crate) async fn within<F: std::future::Future>(span: Span, fut: F) -> F::Output {
    use tracing::Instrument;
    if span.is_disabled() {
        fut.await
    } else {
        fut.instrument(span).await
    }
}
