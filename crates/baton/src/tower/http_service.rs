//! Feature `axum`: [`HttpService`], a graph serving a route, under its caller's deadline.

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum_core::body::Body;
use axum_core::extract::FromRequest;
use axum_core::response::{IntoResponse, Response};
use http::request::Parts;
use http::{HeaderName, Request, StatusCode};
use tokio::time::Instant;
use tower_service::Service;

use super::axum::{body, respond};
use super::deadline_headers::DeadlineHeaders;
use super::graph_service::{GraphService, inbound};
use crate::engine::RunOptions;

/// The header whose value becomes the run's idempotency key.
const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// What makes a request's run options of its head and the options read so far.
type OptionsHook = Arc<dyn Fn(&Parts, RunOptions) -> RunOptions + Send + Sync>;

/// A [`GraphService`] serving HTTP, with feature `axum`. Each request is extracted into
/// `X` with axum's [`FromRequest`], such as `Json<Order>`, `Query<..>` or `String`. The
/// closure given to [`GraphService::http`] turns it into the run input, and the graph
/// runs. The response is the mapped report's, a run error's through
/// [`RunError`](crate::RunError)'s `IntoResponse`, or the extractor's rejection.
///
/// `Clone + Send + Sync`, with `Error = Infallible`. It answers every method: serve it
/// with `axum::routing::post_service`, `get_service` and the like, so that other methods get
/// 405 Method Not Allowed, not the extractor's rejection.
///
/// Each request's run options are the service's, then:
/// - the caller's deadline: the budget in `grpc-timeout` or the millisecond header makes
///   the run's deadline the earlier of its own and the caller's. [`DeadlineHeaders`] reads
///   it; see [`deadline_headers`](Self::deadline_headers). A request whose caller has no
///   time left is answered at once with 504 Gateway Timeout, or with
///   [`expired_status`](Self::expired_status): its body is not read and no user code
///   runs. A malformed budget header is answered 400 Bad Request, naming the header;
/// - the `Idempotency-Key` header, when present, as the run's
///   [idempotency key](RunOptions::idempotency_key);
/// - what [`run_options`](Self::run_options)' hook makes of them.
///
/// The extractor runs before the run, so the run's own timeout does not cover reading
/// the body. Only the caller's deadline cuts it, answered as an expired request. Bound
/// slow clients in front of the service with a request timeout layer, such as
/// tower-http's `TimeoutLayer` or `RequestBodyTimeoutLayer`, and a header read timeout on
/// the server.
///
/// ```
/// use axum::{Json, Router, routing::post_service};
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
/// let app: Router = Router::new().route("/double", post_service(svc)); // GET: 405
/// # drop(app);
/// # Ok(())
/// # }
/// ```
pub struct HttpService<I, R, X, M, F> {
    inner: GraphService<I, R>,
    extract: F,
    deadline: Option<DeadlineHeaders>,
    expired: StatusCode,
    hook: Option<OptionsHook>,
    _from: PhantomData<fn() -> (X, M)>,
}

impl<I, R, X, M, F: Clone> Clone for HttpService<I, R, X, M, F> {
    fn clone(&self) -> Self {
        HttpService {
            inner: self.inner.clone(),
            extract: self.extract.clone(),
            deadline: self.deadline.clone(),
            expired: self.expired,
            hook: self.hook.clone(),
            _from: PhantomData,
        }
    }
}

impl<I, R, X, M, F> fmt::Debug for HttpService<I, R, X, M, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpService")
            .field("inner", &self.inner)
            .field("extract", &std::any::type_name::<X>())
            .field("deadline", &self.deadline)
            .field("expired", &self.expired)
            .finish_non_exhaustive()
    }
}

impl<I: Send + Sync + 'static, R: 'static> GraphService<I, R> {
    /// Serves HTTP, with feature `axum`. Each request is extracted into `X`, which may be any
    /// axum extractor with state `()`. `extract` makes the run input of it, and the response
    /// is the mapped report's `IntoResponse`. The caller's deadline is read from the
    /// default [`DeadlineHeaders`]. See [`HttpService`].
    #[must_use]
    pub fn http<X, M, F>(self, extract: F) -> HttpService<I, R, X, M, F>
    where
        X: FromRequest<(), M>,
        F: Fn(X) -> I + Clone + Send + Sync + 'static,
    {
        HttpService {
            inner: self,
            extract,
            deadline: Some(DeadlineHeaders::new()),
            expired: StatusCode::GATEWAY_TIMEOUT,
            hook: None,
            _from: PhantomData,
        }
    }
}

impl<I, R, X, M, F> HttpService<I, R, X, M, F> {
    /// Reads the caller's budget with `headers`, for example another millisecond header's
    /// name. With `None`, reads no budget from requests.
    #[must_use]
    pub fn deadline_headers(mut self, headers: Option<DeadlineHeaders>) -> Self {
        self.deadline = headers;
        self
    }

    /// The status for a request whose caller has no time left. 504 by default.
    #[must_use]
    pub fn expired_status(mut self, status: StatusCode) -> Self {
        self.expired = status;
        self
    }

    /// Makes each request's run options with `f`, for example a failure mode from a header.
    /// `f` is given the request's head, that is its method, URI and headers, and the options
    /// read so far: the service's, with the caller's deadline and idempotency key. Runs
    /// before the body is read.
    ///
    /// ```
    /// use axum::{Json, http::request::Parts};
    /// use baton_graph::{BoxError, FailureMode, Graph, RunOptions};
    ///
    /// # fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<u64>::builder();
    /// let double = g.node("double").task(|ctx, ()| async move { Ok::<_, BoxError>(ctx.input() * 2) });
    /// let svc = g
    ///     .build()?
    ///     .into_service()
    ///     .map_report(move |report| report.require(double).map(|v| Json(*v)))
    ///     .http(|Json(n): Json<u64>| n)
    ///     .run_options(|head: &Parts, options: RunOptions| match head.headers.get("x-partial") {
    ///         Some(_) => options.failure_mode(FailureMode::PreservePartial),
    ///         None => options.failure_mode(FailureMode::FailFast),
    ///     });
    /// # drop(svc);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn run_options<H>(mut self, f: H) -> Self
    where
        H: Fn(&Parts, RunOptions) -> RunOptions + Send + Sync + 'static,
    {
        self.hook = Some(Arc::new(f));
        self
    }
}

/// A JSON answer to a request that is refused before its run.
fn refuse(status: StatusCode, kind: &str, message: &str) -> Response {
    respond(status, body(kind, None, message, None), None)
}

impl<I, R, X, M, F> HttpService<I, R, X, M, F>
where
    I: Send + Sync + 'static,
    R: 'static,
{
    /// The request's run options and the caller's deadline; the answer instead when the
    /// request is refused before its run.
    fn options_for(&self, head: &Parts) -> Result<(RunOptions, Option<Instant>), Box<Response>> {
        let mut options = self.inner.run_options().clone();
        let mut caller = None;
        if let Some(headers) = &self.deadline {
            match headers.read(&head.headers) {
                Err(bad) => {
                    let answer = refuse(StatusCode::BAD_REQUEST, "bad_budget", &bad.to_string());
                    return Err(Box::new(answer));
                }
                Ok(Some(left)) if left.is_zero() => {
                    let message = "the caller's deadline passed before the request was served";
                    return Err(Box::new(refuse(self.expired, "deadline_exceeded", message)));
                }
                Ok(Some(left)) => {
                    caller = Instant::now().checked_add(left);
                    options = inbound(options, left);
                }
                Ok(None) => {}
            }
        }
        if let Some(key) = head.headers.get(IDEMPOTENCY_KEY)
            && let Ok(key) = key.to_str()
            && !key.is_empty()
        {
            options = options.idempotency_key(key);
        }
        if let Some(hook) = &self.hook {
            options = hook(head, options);
        }
        Ok((options, caller))
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
        let (head, body) = request.into_parts();
        let planned = self.options_for(&head);
        let inner = self.inner.clone();
        let extract = self.extract.clone();
        let expired = self.expired;
        Box::pin(async move {
            let (options, caller) = match planned {
                Ok(planned) => planned,
                Err(refused) => return Ok(*refused),
            };
            // The rejection need not be `Send`: it is answered before the run's await.
            let extracting = async {
                X::from_request(Request::from_parts(head, body), &())
                    .await
                    .map_err(|rejection| Box::new(rejection.into_response()))
            };
            let extracted = match caller {
                None => extracting.await,
                Some(deadline) => tokio::time::timeout_at(deadline, extracting)
                    .await
                    .unwrap_or_else(|_| {
                        let message = "the caller's deadline passed while the request was read";
                        Err(Box::new(refuse(expired, "deadline_exceeded", message)))
                    }),
            };
            let from = match extracted {
                Ok(from) => from,
                Err(answer) => return Ok(*answer),
            };
            let run = inner.start_with(extract(from), options);
            Ok(match run.await {
                Ok(response) => response.into_response(),
                Err(error) => error.into_response(),
            })
        })
    }
}
