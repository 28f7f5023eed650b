//! Feature `axum`: run errors as HTTP responses.
//!
//! The status says whose fault it was, read from the error of the node that failed:
//!
//! - 504 Gateway Timeout when time ran out: a per-attempt timeout, the node's or the run's
//!   deadline, or a downstream's [`DownstreamDeadlineExceeded`].
//! - 503 Service Unavailable when baton refused to call: a circuit breaker open, a
//!   bulkhead full, a rate limiter's refusal, or the orchestrator shutting down.
//! - 502 Bad Gateway when the downstream call itself failed with the task's error.
//! - 500 Internal Server Error otherwise: a panic, a router's unknown branch, or a run that
//!   could not start.
//!
//! An error that wraps another answers as the error under it, found by one walk of the
//! chain. Such errors are a retry series that gave up, a failed fallback and a router's
//! failed branch.
//!
//! The body is a small JSON object: `{"error": KIND, "node": NAME, "message": TEXT,
//! "cause": {"node": ROOT, "error": ROOT_KIND}}`, where:
//!
//! - `KIND` is [`NodeError::kind`], or the run error's kind: `cancelled`,
//!   `shutting_down`, `no_runtime` or `no_timers`.
//! - `NAME` is the node the answer is about: the failing node, or the node a handler
//!   required. It is `null` when there is none.
//! - `TEXT` says what failed, in baton's words.
//! - `cause` is the root cause: the node whose error started it, such as an upstream that
//!   failed or a router's branch, and the kind of the error at the end of the chain. It is
//!   `null` when there is none.
//!
//! The error's own text, such as a downstream's answer or a panic's message, is not sent
//! to the client; it is in the report and the logs. When the error knows when to try
//! again, the response has a `Retry-After` header, in whole seconds. Rate limiters and open
//! breakers know, even under a retry, a fallback or a router.

use std::fmt::Write as _;

use axum_core::body::Body;
use axum_core::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};

use crate::engine::RunError;
use crate::error::{CancelReason, NodeError, StopReason};
use crate::policy::DownstreamDeadlineExceeded;
use crate::report::{MissingValue, Outcome};

/// The status for a node that failed with `error`: walks the chain of wrapped errors
/// once with [`NodeError::wrapped`], as [`NodeError::retry_after`] does, so that a retry
/// series, a failed fallback and a router's failed branch answer as the error under them.
/// A series stopped because its breaker opened is 503 whatever its last attempt's error.
fn status_of(error: &NodeError) -> StatusCode {
    let mut error = error;
    loop {
        if let NodeError::GaveUp {
            reason: StopReason::BreakerOpened,
            ..
        } = error
        {
            return StatusCode::SERVICE_UNAVAILABLE;
        }
        match error.wrapped() {
            Some(inner) => error = inner,
            None => break,
        }
    }
    match error {
        NodeError::Timeout { .. } | NodeError::DeadlineExceeded { .. } => {
            StatusCode::GATEWAY_TIMEOUT
        }
        NodeError::BreakerOpen { .. }
        | NodeError::BulkheadFull { .. }
        | NodeError::RateLimited { .. } => StatusCode::SERVICE_UNAVAILABLE,
        // A downstream that answered its deadline passed: time ran out, as here.
        NodeError::Task(e) if DownstreamDeadlineExceeded::is_in(e.as_ref()) => {
            StatusCode::GATEWAY_TIMEOUT
        }
        NodeError::Task(_) | NodeError::BranchFailed { .. } => StatusCode::BAD_GATEWAY,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The root cause of `error`, failed at `node`: the node whose error is at the end of the
/// chain, and that error's kind. That node is a router's chosen branch, or `node` itself.
fn cause_of<'a>(node: &'a str, error: &'a NodeError) -> (&'a str, &'static str) {
    let mut node = node;
    let mut error = error;
    loop {
        if let NodeError::BranchFailed { branch, .. } = error {
            node = branch;
        }
        match error.wrapped() {
            Some(inner) => error = inner,
            None => return (node, error.kind()),
        }
    }
}

/// A JSON error body; `cause` is the root cause's node and error kind.
pub(super) fn body(
    kind: &str,
    node: Option<&str>,
    message: &str,
    cause: Option<(&str, &str)>,
) -> String {
    let mut out = String::with_capacity(96 + message.len());
    out.push_str("{\"error\":");
    json_string(&mut out, kind);
    out.push_str(",\"node\":");
    match node {
        Some(node) => json_string(&mut out, node),
        None => out.push_str("null"),
    }
    out.push_str(",\"message\":");
    json_string(&mut out, message);
    out.push_str(",\"cause\":");
    match cause {
        Some((node, kind)) => {
            out.push_str("{\"node\":");
            json_string(&mut out, node);
            out.push_str(",\"error\":");
            json_string(&mut out, kind);
            out.push('}');
        }
        None => out.push_str("null"),
    }
    out.push('}');
    out
}

/// Appends `s` to `out` as a JSON string.
fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A JSON response. It has a `Retry-After` header, in whole seconds rounded up, when the
/// error that failed the node knows when to try again.
pub(super) fn respond(status: StatusCode, body: String, error: Option<&NodeError>) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(after) = error.and_then(NodeError::retry_after) {
        let seconds = after.as_secs() + u64::from(after.subsec_nanos() > 0);
        headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// The response for a run that failed, with feature `axum`. Its status comes from the
/// error of the node that failed first, as [`RunError::status`] says. Its body is a JSON
/// object naming that node and the error's kind and message.
impl IntoResponse for RunError {
    fn into_response(self) -> Response {
        let status = self.status();
        let failed = match &self {
            RunError::Failed { node, report, .. } => report
                .by_name(node)
                .and_then(|n| n.error().map(|e| (n.name(), e))),
            _ => None,
        };
        // The error's own text, such as a downstream's answer or a panic's message, stays
        // in the server's logs and the report: it is not for the client.
        let message = self.to_string();
        let (node, kind) = match (&self, failed) {
            (_, Some((node, error))) => (Some(node), error.kind()),
            (RunError::Failed { node, .. }, None) => (Some(node.as_str()), "failed"),
            (RunError::Cancelled { .. }, _) => (None, "cancelled"),
            (RunError::ShuttingDown, _) => (None, "shutting_down"),
            (RunError::NoTimers, _) => (None, "no_timers"),
            (_, _) => (None, "no_runtime"),
        };
        let cause = failed.map(|(node, error)| cause_of(node, error));
        respond(
            status,
            body(kind, node, &message, cause),
            failed.map(|(_, e)| e),
        )
    }
}

impl RunError {
    /// The HTTP status that says whose fault the failure was, with feature `axum`.
    ///
    /// For a failed node it is the status of the error of the node that failed first: 504
    /// for a timeout or an exhausted deadline, 503 for an open breaker, a full bulkhead or a
    /// rate limiter's refusal, 502 for the task's own error, and 500 otherwise. It is 503 for
    /// a run refused or cancelled by a shutdown or by
    /// [`Orchestrator::cancel_all`](crate::Orchestrator::cancel_all), and 500 for the rest.
    #[must_use]
    pub fn status(&self) -> StatusCode {
        match self {
            RunError::Failed { node, report, .. } => report
                .by_name(node)
                .and_then(|n| n.error())
                .map_or(StatusCode::INTERNAL_SERVER_ERROR, status_of),
            RunError::Cancelled {
                reason:
                    CancelReason::Shutdown | CancelReason::CancelAll | CancelReason::RuntimeShutdown,
                ..
            }
            | RunError::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// The response for a value that a handler required and a node did not produce, with
/// feature `axum`. Its status is that of the error behind it, as for a [`RunError`]; a
/// branch not taken or a cancelled node gives 500. Its body is a JSON object naming the
/// node.
impl IntoResponse for MissingValue {
    fn into_response(self) -> Response {
        let status = match (self.outcome(), self.cause()) {
            (Some(Outcome::Failed | Outcome::Skipped), Some(cause)) => status_of(cause),
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let kind = match (self.cause(), self.outcome()) {
            (Some(cause), _) => cause.kind(),
            (None, Some(outcome)) => outcome.as_str(),
            (None, None) => "unknown_node",
        };
        let message = self.to_string();
        let cause = match (self.cause_node(), self.cause()) {
            (Some(node), Some(error)) => Some(cause_of(node, error)),
            _ => None,
        };
        respond(
            status,
            body(kind, Some(self.node()), &message, cause),
            self.cause(),
        )
    }
}
