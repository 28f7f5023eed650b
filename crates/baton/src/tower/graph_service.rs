//! [`GraphService`]: a built graph as a `tower::Service` of its run input.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tower_service::Service;

use crate::engine::{Graph, Run, RunError, RunOptions};
use crate::report::Report;

/// What turns a run's report into the service's response.
type MapReport<R> = Arc<dyn Fn(Report) -> R + Send + Sync>;

/// What makes a call's run options of its input and the service's options.
type PerCall<I> = Arc<dyn Fn(&I, RunOptions) -> RunOptions + Send + Sync>;

/// A built [`Graph`] as a [`tower::Service`](tower_service::Service) of its run input,
/// with feature `tower`. Each call is one run, and its response is the run's [`Report`],
/// or what [`map_report`](Self::map_report) makes of it. From [`Graph::into_service`].
///
/// Cheap to clone, as two `Arc`s and the run options, and `Send + Sync`: clone it into
/// every connection, or serve it with `axum::routing::post_service` through
/// [`http`](Self::http), with feature `axum`. It is always ready: `poll_ready` returns
/// `Ready(Ok(()))`, and each call starts a run of its own, as [`Graph::run`] does.
///
/// The error is the run's [`RunError`]. In the graph's default failure mode,
/// [`PreservePartial`](crate::FailureMode::PreservePartial), a run whose nodes failed is
/// still `Ok(report)`; use [`Report::require`] in the mapping, or
/// [`FailAll`](crate::FailureMode::FailAll), to make a missing value an error.
///
/// ```
/// use baton_graph::{BoxError, Graph};
/// use tower::{Service, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), BoxError> {
/// let mut g = Graph::<u64>::builder();
/// let double = g.node("double").task(|ctx, ()| async move { Ok::<_, BoxError>(ctx.input() * 2) });
/// let mut svc = g.build()?.into_service().map_report(move |report| report.get(double).copied());
/// let answer = svc.ready().await?.call(21).await?;
/// assert_eq!(answer, Some(42));
/// # Ok(())
/// # }
/// ```
pub struct GraphService<I, R = Report> {
    graph: Graph<I>,
    options: RunOptions,
    per_call: Option<PerCall<I>>,
    map: MapReport<R>,
}

impl<I, R> Clone for GraphService<I, R> {
    fn clone(&self) -> Self {
        GraphService {
            graph: self.graph.clone(),
            options: self.options.clone(),
            per_call: self.per_call.clone(),
            map: Arc::clone(&self.map),
        }
    }
}

impl<I, R> fmt::Debug for GraphService<I, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GraphService")
            .field("graph", &self.graph)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<I: Send + Sync + 'static> Graph<I> {
    /// The graph as a [`tower::Service`](tower_service::Service) of its run input, whose
    /// response is the run's [`Report`], with feature `tower`. See [`GraphService`].
    #[must_use]
    pub fn into_service(self) -> GraphService<I> {
        GraphService {
            graph: self,
            options: RunOptions::new(),
            per_call: None,
            map: Arc::new(|report| report),
        }
    }
}

impl<I: Send + Sync + 'static, R: 'static> GraphService<I, R> {
    /// Runs every call with `options`, cloned for each run, for example a
    /// [`timeout`](RunOptions::timeout) counted from each run's start. An absolute
    /// [`deadline`](RunOptions::deadline) or an
    /// [`idempotency_key`](RunOptions::idempotency_key) given here applies to every run
    /// alike, which is rarely what a service wants.
    #[must_use]
    pub fn options(mut self, options: RunOptions) -> Self {
        self.options = options;
        self
    }

    /// Makes each call's run options with `f`, such as a deadline, an idempotency key or a
    /// failure mode read from the request. `f` is given the call's input and the options it
    /// would run with: the service's, changed by any `options_from` set before.
    ///
    /// ```
    /// use baton_graph::{BoxError, FailureMode, Graph, RunOptions};
    /// use tower::{Service, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<(String, u64)>::builder(); // (idempotency key, order)
    /// let key = g.node("charge").task(|ctx, ()| async move {
    ///     Ok::<_, BoxError>(ctx.idempotency_key().to_string())
    /// });
    /// let mut svc = g
    ///     .build()?
    ///     .into_service()
    ///     .options_from(|(key, _): &(String, u64), options: RunOptions| {
    ///         options.idempotency_key(key.as_str()).failure_mode(FailureMode::FailFast)
    ///     })
    ///     .map_report(move |report| report.get(key).cloned());
    /// let answer = svc.ready().await?.call(("order-7".to_owned(), 7)).await?;
    /// assert_eq!(answer.as_deref(), Some("order-7-0"));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn options_from<F>(mut self, f: F) -> Self
    where
        F: Fn(&I, RunOptions) -> RunOptions + Send + Sync + 'static,
    {
        self.per_call = Some(match self.per_call.take() {
            None => Arc::new(f),
            Some(before) => Arc::new(move |input, options| f(input, before(input, options))),
        });
        self
    }

    /// Turns each run's response into `f`'s value: the value of the node the caller needs,
    /// a summary, an HTTP response. Runs after any mapping set before. A panic in `f`
    /// reaches the caller that awaits the call.
    #[must_use]
    pub fn map_report<R2, F>(self, f: F) -> GraphService<I, R2>
    where
        F: Fn(R) -> R2 + Send + Sync + 'static,
    {
        let before = self.map;
        GraphService {
            graph: self.graph,
            options: self.options,
            per_call: self.per_call,
            map: Arc::new(move |report| f(before(report))),
        }
    }

    /// The graph each call runs.
    #[must_use]
    pub fn graph(&self) -> &Graph<I> {
        &self.graph
    }

    /// The options each call starts from.
    #[cfg(feature = "axum")]
    pub(super) fn run_options(&self) -> &RunOptions {
        &self.options
    }

    /// One run with `input`, as a call of the service makes it.
    pub(super) fn start(&self, input: I) -> GraphFuture<I, R> {
        self.start_with(input, self.options.clone())
    }

    /// One run with `input` and `options`, as [`options_from`](Self::options_from)'s hook
    /// changes them.
    pub(super) fn start_with(&self, input: I, options: RunOptions) -> GraphFuture<I, R> {
        let options = match &self.per_call {
            None => options,
            Some(f) => f(&input, options),
        };
        GraphFuture {
            run: self.graph.run_with(input, options),
            map: Arc::clone(&self.map),
        }
    }
}

#[cfg(feature = "http")]
impl<B: Send + Sync + 'static, R: 'static> GraphService<http::Request<B>, R> {
    /// Runs each request under its caller's deadline too, with feature `http`: `headers`
    /// reads the budget from the request, in `grpc-timeout` or the millisecond header, so
    /// the run's deadline is the earlier of the service's own and the caller's. A request
    /// whose caller has no time left runs with a deadline that has passed: every node
    /// ends `DeadlineExceeded` at once and no task runs. A malformed header is logged and
    /// read as absent.
    #[must_use]
    pub fn deadline_headers(self, headers: crate::tower::DeadlineHeaders) -> Self {
        self.options_from(move |request, options| {
            use super::ReadBudget as _;
            match headers.budget(request) {
                Some(left) => inbound(options, left),
                None => options,
            }
        })
    }
}

/// `options` with a deadline no later than `left` from now.
#[cfg(feature = "http")]
pub(super) fn inbound(options: RunOptions, left: std::time::Duration) -> RunOptions {
    let now = tokio::time::Instant::now();
    match now.checked_add(left) {
        Some(deadline) => options.deadline_at_most(deadline),
        None => options,
    }
}

impl<I: Send + Sync + 'static, R: 'static> Service<I> for GraphService<I, R> {
    type Response = R;
    type Error = RunError;
    type Future = GraphFuture<I, R>;

    /// Always ready: every call is a run of its own.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, input: I) -> Self::Future {
        self.start(input)
    }
}

/// The future of one [`GraphService`] call: the [`Run`], then the mapping of its report.
///
/// Dropping it cancels the run, as dropping a [`Run`] does.
#[must_use = "a run does nothing until it is awaited"]
pub struct GraphFuture<I: Send + Sync + 'static, R> {
    run: Run<I>,
    map: MapReport<R>,
}

impl<I: Send + Sync + 'static, R> fmt::Debug for GraphFuture<I, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GraphFuture")
            .field("run", &self.run)
            .finish_non_exhaustive()
    }
}

impl<I: Send + Sync + 'static, R> Future for GraphFuture<I, R> {
    type Output = Result<R, RunError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        match Pin::new(&mut this.run).poll(cx) {
            Poll::Ready(Ok(report)) => Poll::Ready(Ok((this.map)(report))),
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Pending => Poll::Pending,
        }
    }
}
