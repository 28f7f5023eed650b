//! `tracing` events for what went wrong in a run, logged with or without the `tracing`
//! feature, which only adds spans. Without a subscriber each is one atomic load, and they
//! sit on failure paths only.
//!
//! | message | level | fields |
//! |---|---|---|
//! | `attempt failed`, `attempt timed out` | DEBUG | `node`, `attempt`, `error.type`, `error` |
//! | `retry scheduled` | DEBUG | `node`, `attempt` that failed, `delay`, `error` |
//! | `node recovered` | INFO | `node`, `error.type`, `error` that the fallback recovered from |
//! | `node failed` | WARN | `node`, `error.type`, `error` |
//!
//! Circuit breakers log their transitions themselves, in `policy::breaker`: WARN when one
//! opens, INFO otherwise. `error` is the error's message followed by its sources;
//! `error.type` is [`NodeError::kind`]. Inside spans, each event lands in the span of its
//! attempt or node. No event is logged at ERROR: OpenTelemetry bridges mark a span failed
//! on an ERROR event, and a failure that a retry or a fallback handled must not.

use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::error::{Chain, NodeError};
use crate::report::Outcome;

/// Runs `log`, catching a panic: a subscriber is user code too.
fn guarded(log: impl FnOnce()) {
    let _ = catch_unwind(AssertUnwindSafe(log));
}

/// Attempt `attempt` of `node` failed with `error`, at DEBUG. Next comes either
/// `retry scheduled` or the node's end.
#[cold]
pub(crate) fn attempt_failed(node: &str, attempt: u32, error: &NodeError) {
    guarded(|| {
        let kind = error.kind();
        let error = Chain(error);
        if matches!(kind, "timeout" | "deadline_exceeded") {
            tracing::debug!(node, attempt, error.type = kind, %error, "attempt timed out");
        } else {
            tracing::debug!(node, attempt, error.type = kind, %error, "attempt failed");
        }
    });
}

/// `node` ended with `outcome`: logs a failure at WARN or a recovery by the fallback at
/// INFO, with its error. Logs nothing for the other outcomes.
#[inline]
pub(crate) fn node_ended(node: &str, outcome: Outcome, error: Option<&NodeError>) {
    if let (Outcome::Failed | Outcome::Recovered, Some(error)) = (outcome, error) {
        node_failed(node, outcome == Outcome::Failed, error);
    }
}

#[cold]
fn node_failed(node: &str, failed: bool, error: &NodeError) {
    guarded(|| {
        let kind = error.kind();
        let error = Chain(error);
        if failed {
            tracing::warn!(node, error.type = kind, %error, "node failed");
        } else {
            tracing::info!(node, error.type = kind, %error, "node recovered");
        }
    });
}
