//! Feature `axum`: run errors as HTTP responses, and a graph serving a route.
//!
//! The status says whose fault it was, read from the error of the node that failed: 504
//! Gateway Timeout when time ran out (a per-attempt timeout, the node's or the run's
//! deadline), 503 Service Unavailable when baton refused to call (a circuit breaker open, a
//! bulkhead full, a rate limiter's refusal, the orchestrator shutting down), 502 Bad Gateway when the downstream call
//! itself failed (the task's error), 500 Internal Server Error otherwise (a panic, a
//! router's unknown branch, a run that could not start). A retry series that gave up takes
//! the status of its last attempt's error; a failed fallback, that of its own error.
//!
//! The body is a small JSON object: `{"error": KIND, "node": NAME, "message": TEXT}`, where
//! `KIND` is [`NodeError::kind`] (or the run error's kind: `cancelled`, `shutting_down`,
//! `no_runtime`, `no_timers`), `NAME` the failing node (`null` when none failed) and `TEXT`
//! what failed, in baton's words: the error's own text (a downstream's answer, a panic's
//! message) is not sent to the client, it is in the report and the logs. A rate limiter's
//! refusal is a 503 too, and when the error knows when to try again (a rate limiter, an
//! open breaker), the response has a `Retry-After` header, in whole seconds.

use std::convert::Infallible;
use std::fmt;
use std::fmt::Write as _;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum_core::body::Body;
use axum_core::extract::FromRequest;
use axum_core::response::{IntoResponse, Response};
use http::{HeaderValue, Request, StatusCode, header};
use tower_service::Service;

use super::graph::GraphService;
use crate::engine::RunError;
use crate::error::{CancelReason, NodeError, StopReason};
use crate::report::{MissingValue, Outcome};

/// The status for a node that failed with `error`.
fn status_of(error: &NodeError) -> StatusCode {
    match error {
        NodeError::Timeout { .. } | NodeError::DeadlineExceeded { .. } => {
            StatusCode::GATEWAY_TIMEOUT
        }
        NodeError::BreakerOpen { .. }
        | NodeError::BulkheadFull { .. }
        | NodeError::RateLimited { .. } => StatusCode::SERVICE_UNAVAILABLE,
        NodeError::GaveUp {
            reason: StopReason::BreakerOpened,
            ..
        } => StatusCode::SERVICE_UNAVAILABLE,
        NodeError::GaveUp { last, .. } => status_of(last),
        NodeError::FallbackFailed { error, .. } => status_of(error),
        NodeError::BranchFailed {
            error: Some(error), ..
        } => status_of(error),
        NodeError::Task(_) | NodeError::BranchFailed { error: None, .. } => StatusCode::BAD_GATEWAY,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// A JSON error body.
fn body(kind: &str, node: Option<&str>, message: &str) -> String {
    let mut out = String::with_capacity(64 + message.len());
    out.push_str("{\"error\":");
    json_string(&mut out, kind);
    out.push_str(",\"node\":");
    match node {
        Some(node) => json_string(&mut out, node),
        None => out.push_str("null"),
    }
    out.push_str(",\"message\":");
    json_string(&mut out, message);
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

/// A JSON response; with a `Retry-After` header (whole seconds, rounded up) when the
/// error that failed the node knows when to try again.
fn respond(status: StatusCode, body: String, error: Option<&NodeError>) -> Response {
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

/// The response for a run that failed (feature `axum`): its status from the error of the
/// node that failed first (see [`RunError::status`]), its body a JSON object naming that
/// node and the error's kind and message.
impl IntoResponse for RunError {
    fn into_response(self) -> Response {
        let status = self.status();
        let failed = match &self {
            RunError::Failed { node, report, .. } => report
                .by_name(node)
                .and_then(|n| n.error().map(|e| (n.name(), e))),
            _ => None,
        };
        // The error's own text (a downstream's answer, a panic's message) stays in the
        // server's logs and the report: it is not for the client.
        let message = self.to_string();
        let (node, kind) = match (&self, failed) {
            (_, Some((node, error))) => (Some(node), error.kind()),
            (RunError::Failed { node, .. }, None) => (Some(node.as_str()), "failed"),
            (RunError::Cancelled { .. }, _) => (None, "cancelled"),
            (RunError::ShuttingDown, _) => (None, "shutting_down"),
            (RunError::NoTimers, _) => (None, "no_timers"),
            (_, _) => (None, "no_runtime"),
        };
        respond(status, body(kind, node, &message), failed.map(|(_, e)| e))
    }
}

impl RunError {
    /// The HTTP status that says whose fault the failure was (feature `axum`): the status
    /// of the error of the node that failed first (504 for a timeout or an exhausted
    /// deadline, 503 for an open breaker, a full bulkhead or a rate limiter's refusal, 502
    /// for the task's own error, 500 otherwise), 503 for a run refused or cancelled by a
    /// shutdown or by [`Orchestrator::cancel_all`](crate::Orchestrator::cancel_all), 500 for
    /// the rest.
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

/// The response for a value that a handler required and a node did not produce (feature
/// `axum`): the status of the error behind it, as for a [`RunError`] (500 for a branch not
/// taken or a cancelled node), and a JSON body naming the node.
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
        respond(
            status,
            body(kind, Some(self.node()), &message),
            self.cause(),
        )
    }
}

/// A [`GraphService`] serving HTTP (feature `axum`): each request is extracted into `X`
/// with axum's [`FromRequest`] (`Json<Order>`, `Query<..>`, `String`, …), turned into the
/// run input by the closure given to [`GraphService::http`], and run; the response is the
/// mapped report's, a run error's ([`RunError`]'s `IntoResponse`), or the extractor's
/// rejection.
///
/// `Clone + Send + Sync`, with `Error = Infallible`: what `axum::Router::route_service`
/// takes.
///
/// ```
/// use axum::{Json, Router};
/// use baton_graph::{BoxError, Graph};
///
/// # fn main() -> Result<(), BoxError> {
/// let mut g = Graph::<u64>::builder();
/// let double = g.node("double").task(|ctx, ()| async move { Ok::<_, BoxError>(ctx.input() * 2) });
/// let svc = g
///     .build()?
///     .into_service()
///     .map_report(move |report| report.require(double).map(|v| Json(*v)))
///     .http(|Json(n): Json<u64>| n);
/// let app: Router = Router::new().route_service("/double", svc);
/// # drop(app);
/// # Ok(())
/// # }
/// ```
pub struct HttpService<I, R, X, M, F> {
    inner: GraphService<I, R>,
    extract: F,
    _from: PhantomData<fn() -> (X, M)>,
}

impl<I, R, X, M, F: Clone> Clone for HttpService<I, R, X, M, F> {
    fn clone(&self) -> Self {
        HttpService {
            inner: self.inner.clone(),
            extract: self.extract.clone(),
            _from: PhantomData,
        }
    }
}

impl<I, R, X, M, F> fmt::Debug for HttpService<I, R, X, M, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpService")
            .field("inner", &self.inner)
            .field("extract", &std::any::type_name::<X>())
            .finish_non_exhaustive()
    }
}

impl<I: Send + Sync + 'static, R: 'static> GraphService<I, R> {
    /// Serves HTTP (feature `axum`): each request is extracted into `X` (any axum
    /// extractor with state `()`), `extract` makes the run input of it, and the response
    /// is the mapped report's `IntoResponse`. See [`HttpService`].
    #[must_use]
    pub fn http<X, M, F>(self, extract: F) -> HttpService<I, R, X, M, F>
    where
        X: FromRequest<(), M>,
        F: Fn(X) -> I + Clone + Send + Sync + 'static,
    {
        HttpService {
            inner: self,
            extract,
            _from: PhantomData,
        }
    }
}

/// The future of one [`HttpService`] call.
type HttpFuture = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

impl<I, R, X, M, F> Service<Request<Body>> for HttpService<I, R, X, M, F>
where
    I: Send + Sync + 'static,
    R: IntoResponse + 'static,
    X: FromRequest<(), M> + Send + 'static,
    M: 'static,
    F: Fn(X) -> I + Clone + Send + Sync + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = HttpFuture;

    /// Always ready, as the graph service is.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let inner = self.inner.clone();
        let extract = self.extract.clone();
        Box::pin(async move {
            let from = match X::from_request(request, &()).await {
                Ok(from) => from,
                Err(rejection) => return Ok(rejection.into_response()),
            };
            let run = inner.start(extract(from));
            Ok(match run.await {
                Ok(response) => response.into_response(),
                Err(error) => error.into_response(),
            })
        })
    }
}
