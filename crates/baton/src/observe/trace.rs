//! `tracing` spans: one per run, one per node as a child of the run, and one per attempt as
//! a child of the node, with the fields the events carry. Behind the `tracing` feature,
//! which is on by default.
//!
//! Spans are entered around the futures they describe, so whatever the task itself logs is
//! attributed to its attempt, its node and its run. That is why they are made by the
//! scheduler rather than by an [`Observer`](super::Observer): an observer sees events, but
//! cannot enter a span around a future it does not own.
//!
//! The run's span is a child of the span current where the run is first polled, such as
//! the awaiting request handler's span, unless the run's options detach it.
//! Node and attempt spans say how they ended in the fields that OpenTelemetry bridges such
//! as `tracing-opentelemetry` read. `otel.status_code` is `OK` for an attempt that produced
//! a value and for a node that ended `Succeeded` or `Recovered`: a failure that a retry or
//! a fallback handled is not the node's. It is `ERROR` for a failed attempt and a `Failed`
//! node, which also get `otel.status_message`, the error and its sources, and
//! `error.type`, the [`NodeError::kind`]. A `Cancelled` node's span has no status.

use std::time::Duration;

use tracing::Span;
use tracing::field::{Empty, display};

use crate::error::{Chain, NodeError};
use crate::id::RunId;
use crate::report::Outcome;

/// Whether spans are worth making: the feature is on and a subscriber was ever installed,
/// globally or for a scope. One atomic load; without it, even a disabled span costs a
/// callsite check per node.
#[inline]
fn on() -> bool {
    cfg!(feature = "tracing") && tracing::dispatcher::has_been_set()
}

/// The span of a run: `run{run_id, nodes, graph}`, with `graph` only when the graph has a
/// name. It is a child of the current span, or of none when `detached`.
pub(crate) fn run_span(run: RunId, nodes: usize, graph: Option<&str>, detached: bool) -> Span {
    if !on() {
        Span::none()
    } else if detached {
        tracing::info_span!(parent: None, "run", run_id = %run, nodes, graph)
    } else {
        tracing::info_span!("run", run_id = %run, nodes, graph)
    }
}

/// The span of a node: `node{node, outcome, attempts}` and its status, as the module docs
/// say. It is a child of its run's span `run`, which is `None` before the run started.
/// Inlined: without a subscriber it is one load on every node's path.
#[inline]
pub(crate) fn node_span<'a>(
    run: impl FnOnce() -> Option<&'a Span>,
    node: impl FnOnce() -> &'a str,
) -> Span {
    if !on() {
        return Span::none();
    }
    make_node_span(run(), node())
}

/// [`node_span`], unless it would be disabled: then `None`, which costs nothing to drop,
/// where dropping even a disabled `Span` checks whether `log` records its lifecycle.
#[inline]
pub(crate) fn enabled_node_span<'a>(
    run: impl FnOnce() -> Option<&'a Span>,
    node: impl FnOnce() -> &'a str,
) -> Option<Span> {
    if !on() {
        return None;
    }
    Some(make_node_span(run(), node())).filter(|span| !span.is_disabled())
}

/// `span`, unless it is disabled: as [`enabled_node_span`], for a run's span.
pub(crate) fn enabled(span: Span) -> Option<Span> {
    Some(span).filter(|span| !span.is_disabled())
}

#[inline(never)]
fn make_node_span(run: Option<&Span>, node: &str) -> Span {
    match run {
        Some(run) => tracing::info_span!(
            parent: run,
            "node",
            node,
            outcome = Empty,
            attempts = Empty,
            otel.status_code = Empty,
            otel.status_message = Empty,
            error.type = Empty,
        ),
        None => Span::none(),
    }
}

/// The span of an attempt: `attempt{node, attempt, budget_ms}` and its status, as the
/// module docs say. It is a child of the current span, the node's. It covers the attempt
/// from the moment it asks for its bulkhead permit.
pub(crate) fn attempt_span(node: &str, attempt: u32, budget: Option<Duration>) -> Span {
    if !on() {
        return Span::none();
    }
    let budget_ms = budget.map(|b| b.as_secs_f64() * 1000.0);
    tracing::info_span!(
        "attempt",
        node,
        attempt,
        budget_ms,
        otel.status_code = Empty,
        otel.status_message = Empty,
        error.type = Empty,
    )
}

/// Records how the node ended on its span: its outcome, how many attempts its log has, at
/// least one, and its status, with `error` when it failed.
pub(crate) fn record_outcome(
    span: &Span,
    outcome: Outcome,
    logged: usize,
    error: Option<&NodeError>,
) {
    if span.is_disabled() {
        return;
    }
    span.record("outcome", outcome.as_str());
    span.record("attempts", logged.max(1));
    match outcome {
        Outcome::Succeeded | Outcome::Recovered => record_status(span, Ok(())),
        Outcome::Failed => record_status(span, Err(error)),
        Outcome::Skipped | Outcome::NotTaken | Outcome::Cancelled => {}
    }
}

/// Records how an attempt ended on its span: `OK`, or `ERROR` with `error`.
pub(crate) fn record_attempt(span: &Span, error: Option<&NodeError>) {
    if !span.is_disabled() {
        record_status(span, error.map_or(Ok(()), |e| Err(Some(e))));
    }
}

/// `OK`, or `ERROR` with the error when there is one.
fn record_status(span: &Span, status: Result<(), Option<&NodeError>>) {
    match status {
        Ok(()) => {
            span.record("otel.status_code", "OK");
        }
        Err(error) => {
            span.record("otel.status_code", "ERROR");
            if let Some(error) = error {
                span.record("otel.status_message", display(Chain(error)));
                span.record("error.type", error.kind());
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// `fut` polled inside a span, or plainly when the span is disabled because no subscriber
    /// wants it or the `tracing` feature is off. The wrapper then costs one branch. A combinator
    /// rather than an `async fn`, so that the future is stored once, not twice.
    #[project = WithinProj]
    pub(crate) enum Within<F> {
        Plain { #[pin] fut: F },
        Traced { #[pin] fut: tracing::instrument::Instrumented<F> },
    }
}

/// Polls `fut` inside `span`; see [`Within`].
pub(crate) fn within<F: std::future::Future>(span: Span, fut: F) -> Within<F> {
    use tracing::Instrument;
    if span.is_disabled() {
        Within::Plain { fut }
    } else {
        Within::Traced {
            fut: fut.instrument(span),
        }
    }
}

impl<F: std::future::Future> std::future::Future for Within<F> {
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        match self.project() {
            WithinProj::Plain { fut } => fut.poll(cx),
            WithinProj::Traced { fut } => fut.poll(cx),
        }
    }
}
