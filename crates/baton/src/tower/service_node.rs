//! [`NodeBuilder::service`]: a `tower::Service` as a node's task.

use tower_service::Service;

use super::{Shared, ready_call};
use crate::builder::NodeBuilder;
use crate::engine::{Ctx, Upstreams};
use crate::error::BoxError;
use crate::id::Node;

impl<I, U, T> NodeBuilder<'_, I, U, T>
where
    I: Send + Sync + 'static,
    U: Upstreams,
    T: Send + Sync + 'static,
{
    /// Sets a [`tower::Service`](tower_service::Service) as the node's task, adds the node
    /// and returns its handle; the node's value is the service's response. Needs feature
    /// `tower`.
    ///
    /// Each attempt builds its request with `request`, given the attempt's [`Ctx`] and the
    /// upstreams' values as a task receives them. The [`Ctx`] holds the run input, the
    /// [`remaining`](Ctx::remaining) time and the [idempotency key](Ctx::idempotency_key).
    /// It then calls a clone of `service`, as tower recommends: it waits until the clone is
    /// ready with `poll_ready`, then calls it. The wait for readiness is part of the attempt,
    /// so the per-attempt timeout and the deadline cut it, and a retry clones the service
    /// afresh.
    ///
    /// An error of the service, from `poll_ready` or from the call, fails the attempt with
    /// [`NodeError::Task`](crate::NodeError::Task), the service's error kept as its source:
    /// retry predicates, breaker filters and
    /// [`NodeError::task_error`](crate::NodeError::task_error) can downcast it.
    ///
    /// The service need only be `Send`: the node keeps it behind a lock, held while it is
    /// cloned. Shape its response with tower's combinators, such as `map_response` and
    /// `map_err`, before handing it over.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use baton_graph::{BoxError, Graph, Retry};
    /// use tower::service_fn;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), BoxError> {
    /// // A priced SKU: stands in for a tower-wrapped HTTP or gRPC client.
    /// let prices = service_fn(|sku: u64| async move { Ok::<_, BoxError>(sku * 100) });
    ///
    /// let mut g = Graph::<u64>::builder(); // the run input: a SKU
    /// let sku = g.node("sku").task(|ctx, ()| async move { Ok::<_, BoxError>(*ctx.input()) });
    /// let price = g
    ///     .node("price")
    ///     .after(sku)
    ///     .retry(Retry::new(2))
    ///     .service(prices, |_ctx, sku: Arc<u64>| *sku);
    /// let report = g.build()?.run(42).await?;
    /// assert_eq!(report.get(price), Some(&4_200));
    /// # Ok(())
    /// # }
    /// ```
    pub fn service<S, Req, B>(self, service: S, request: B) -> Node<T>
    where
        S: Service<Req, Response = T> + Clone + Send + 'static,
        S::Error: Into<BoxError>,
        S::Future: Send + 'static,
        Req: Send + 'static,
        B: Fn(&Ctx<I>, U::Values) -> Req + Send + Sync + 'static,
    {
        let service = Shared::new(service);
        self.task(move |ctx, values| {
            let request = request(&ctx, values);
            ready_call(service.get(), request)
        })
    }
}
