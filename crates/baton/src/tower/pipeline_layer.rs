//! [`PipelineLayer`]: the single-call pipeline as a `tower::Layer`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::time::Instant;
use tower_layer::Layer;
use tower_service::Service;

use super::{NoBudget, ReadBudget, Shared, ready_call};
use crate::error::{BoxError, NodeError};
use crate::onion::Pipeline;

/// A [`Pipeline`] as a [`tower::Layer`](tower_layer::Layer), with feature `tower`. The
/// service it wraps is called through the pipeline's policies, with the pipeline's errors,
/// events and statistics. From the inside out these are: the attempt with its bulkhead
/// permit and per-attempt timeout, then retry inside the budget, then the circuit
/// breaker, then the fallback. `T` is the inner service's response.
///
/// Each attempt calls a clone of the inner service with a clone of the request, after
/// waiting until that clone is ready, inside the attempt's timeout. So the request must be
/// `Clone`, as for tower's own `Retry`, even when the pipeline does not retry. A request
/// that cannot be cloned, such as a streaming body, is buffered into one that can by a
/// layer outside this one.
///
/// One policy alone is a pipeline with only that policy. For example,
/// `Pipeline::builder("inventory").breaker(&breaker).build()?.layer()` is a circuit breaker
/// layer, asked once per call and told one result, shared with every graph and pipeline
/// that holds the same breaker.
///
/// ```
/// use std::time::Duration;
/// use baton_graph::{Backoff, BoxError, CircuitBreaker, Pipeline, Retry};
/// use tower::{Service, ServiceBuilder, ServiceExt, service_fn};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), BoxError> {
/// let inventory = CircuitBreaker::builder("inventory").consecutive_failures(5).build()?;
/// let stock = Pipeline::<u32>::builder("stock")
///     .timeout(Duration::from_millis(300))
///     .retry(Retry::new(3).backoff(Backoff::constant(Duration::from_millis(50))))
///     .breaker(&inventory)
///     .build()?;
/// let calls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
/// let seen = calls.clone();
/// let mut svc = ServiceBuilder::new().layer(stock.layer()).service(service_fn(move |sku: u64| {
///     let n = seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
///     async move {
///         if n == 0 {
///             return Err::<u32, BoxError>("503".into()); // the first attempt fails
///         }
///         Ok(sku as u32 % 10)
///     }
/// }));
/// assert_eq!(svc.ready().await?.call(42).await?, 2);
/// assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 2);
/// # Ok(())
/// # }
/// ```
pub struct PipelineLayer<T, D = NoBudget> {
    pipeline: Pipeline<T>,
    budget: D,
}

impl<T, D: Clone> Clone for PipelineLayer<T, D> {
    fn clone(&self) -> Self {
        PipelineLayer {
            pipeline: self.pipeline.clone(),
            budget: self.budget.clone(),
        }
    }
}

impl<T, D> fmt::Debug for PipelineLayer<T, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PipelineLayer")
            .field("pipeline", &self.pipeline)
            .finish_non_exhaustive()
    }
}

impl<T> PipelineLayer<T> {
    /// A layer that calls its service through `pipeline`.
    #[must_use]
    pub fn new(pipeline: Pipeline<T>) -> Self {
        PipelineLayer {
            pipeline,
            budget: NoBudget,
        }
    }
}

impl<T, D> PipelineLayer<T, D> {
    /// Reads the caller's remaining budget from each request with `budget`, for example
    /// [`DeadlineHeaders`](crate::tower::DeadlineHeaders) for `http::Request`s with feature
    /// `http`. The call's deadline is the earlier of the pipeline's budget and the caller's. A
    /// request whose caller has no time left fails at once with
    /// [`NodeError::DeadlineExceeded`], without calling the inner service.
    #[must_use]
    pub fn budget_from<D2>(self, budget: D2) -> PipelineLayer<T, D2> {
        PipelineLayer {
            pipeline: self.pipeline,
            budget,
        }
    }
}

impl<T: Send + Sync + 'static> Pipeline<T> {
    /// The pipeline as a [`tower::Layer`](tower_layer::Layer), with feature `tower`; see
    /// [`PipelineLayer`].
    #[must_use]
    pub fn layer(&self) -> PipelineLayer<T> {
        PipelineLayer::new(self.clone())
    }
}

impl<S, T, D: Clone> Layer<S> for PipelineLayer<T, D> {
    type Service = PipelineService<S, T, D>;

    fn layer(&self, inner: S) -> Self::Service {
        PipelineService {
            inner,
            pipeline: self.pipeline.clone(),
            budget: self.budget.clone(),
        }
    }
}

/// A service called through a [`Pipeline`]; from [`PipelineLayer`].
///
/// Its response is the inner service's or the fallback's. Its error is the pipeline's
/// final [`NodeError`], shared in an `Arc`. [`NodeError::GaveUp`], [`NodeError::Timeout`],
/// [`NodeError::BreakerOpen`] and the rest name the pipeline as the node. The inner
/// service's own error, when no policy wrapped it, is [`NodeError::Task`] as it is.
/// `Arc<NodeError>` is an error, so it converts into [`BoxError`] for the layers outside.
/// Downcast it to `Arc<NodeError>` there, not to `NodeError`.
///
/// Always ready: `poll_ready` returns `Ready(Ok(()))`, and the inner service's readiness is
/// awaited in each attempt, on a clone of it.
pub struct PipelineService<S, T, D = NoBudget> {
    inner: S,
    pipeline: Pipeline<T>,
    budget: D,
}

impl<S: Clone, T, D: Clone> Clone for PipelineService<S, T, D> {
    fn clone(&self) -> Self {
        PipelineService {
            inner: self.inner.clone(),
            pipeline: self.pipeline.clone(),
            budget: self.budget.clone(),
        }
    }
}

impl<S: fmt::Debug, T, D> fmt::Debug for PipelineService<S, T, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PipelineService")
            .field("inner", &self.inner)
            .field("pipeline", &self.pipeline)
            .finish_non_exhaustive()
    }
}

/// The future of one [`PipelineService`] call.
type CallFuture<T> = Pin<Box<dyn Future<Output = Result<T, Arc<NodeError>>> + Send>>;

impl<S, T, D, Req> Service<Req> for PipelineService<S, T, D>
where
    D: ReadBudget<Req>,
    S: Service<Req, Response = T> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    Req: Clone + Send + 'static,
    T: Send + Sync + 'static,
{
    type Response = T;
    type Error = Arc<NodeError>;
    type Future = CallFuture<T>;

    /// Always ready; each attempt waits for a clone of the inner service instead.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Req) -> Self::Future {
        let pipeline = self.pipeline.clone();
        let deadline = self
            .budget
            .budget(&request)
            .and_then(|left| Instant::now().checked_add(left));
        let this = Shared::new((self.inner.clone(), request));
        Box::pin(async move {
            pipeline
                .call_until(deadline, |_attempt| {
                    let (service, request) = this.get();
                    ready_call(service, request)
                })
                .await
        })
    }
}
