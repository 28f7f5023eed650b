//! Build (a): the order flow as a baton graph. One [`Orchestrator`] holds a breaker per
//! downstream (by the service's name); the graph is built once, and the handler awaits
//! `graph.run_with(order, options)` for every request.

use std::sync::Arc;

use baton_graph::{
    Backoff, BoxError, CircuitBreaker, Ctx, Graph, Node, Orchestrator, Outcome, Retry, RunOptions,
};

use crate::front::Place;
use crate::policy::{
    ATTEMPT_TIMEOUT, ATTEMPTS, BACKOFF, BACKOFF_FACTOR, BREAKER_FAILURES, BREAKER_OPEN, DEADLINE,
    IN_APP,
};
use baton_stand_in::{CallError, Dispatch, DispatchRequest, OrderApi, OrderRequest, Service};

use crate::answer::OrderResult;

/// The graph and the handles the answer reads.
#[derive(Debug)]
pub(crate) struct Flow {
    graph: Graph<OrderRequest>,
    stock: Node<u64>,
    dispatch: Node<Dispatch>,
    notify: Node<String>,
    options: RunOptions,
}

fn retry() -> Retry {
    Retry::new(ATTEMPTS).backoff(Backoff::exponential(BACKOFF).multiplier(BACKOFF_FACTOR))
}

/// The orchestrator, with a breaker per downstream under the service's name.
fn orchestrator() -> Result<Orchestrator, BoxError> {
    let orch = Orchestrator::builder().build();
    for service in Service::ORDER_FLOW {
        let breaker = CircuitBreaker::builder(service.name())
            .consecutive_failures(BREAKER_FAILURES)
            .open_duration(BREAKER_OPEN)
            .build()?;
        orch.add_breaker(&breaker)?;
    }
    Ok(orch)
}

impl Flow {
    /// Registers the breakers and builds the graph.
    pub(crate) fn new(api: &OrderApi) -> Result<Flow, BoxError> {
        let mut g = orchestrator()?.graph::<OrderRequest>();
        let user = g
            .node("user")
            .timeout(ATTEMPT_TIMEOUT)
            .retry(retry())
            .breaker("user")
            .task({
                let api = api.clone();
                move |ctx, ()| {
                    let api = api.clone();
                    async move { api.user(ctx.input().user_id).await }
                }
            });
        let sku = g
            .node("sku")
            .timeout(ATTEMPT_TIMEOUT)
            .retry(retry())
            .breaker("sku")
            .task({
                let api = api.clone();
                move |ctx, ()| {
                    let api = api.clone();
                    async move { api.sku(ctx.input().sku_id).await }
                }
            });
        let stock = g
            .node("stock")
            .after((user, sku))
            .timeout(ATTEMPT_TIMEOUT)
            .retry(retry())
            .breaker("stock")
            .fallback(0_u64)
            .task({
                let api = api.clone();
                move |_ctx, (user, sku)| {
                    let api = api.clone();
                    async move { Ok::<_, CallError>(api.deduct_stock(&user, &sku).await?.quantity) }
                }
            });
        // The task of the `ship` and the `shortage` branch: `api.dispatch` picks the
        // endpoint from the quantity.
        let branch = |api: &OrderApi| {
            let api = api.clone();
            move |ctx: Ctx<OrderRequest>, quantity: Arc<u64>| {
                let api = api.clone();
                let req = DispatchRequest {
                    user_id: ctx.input().user_id,
                    sku_id: ctx.input().sku_id,
                    quantity: *quantity,
                };
                async move { api.dispatch(&req).await }
            }
        };
        let dispatch = g
            .router("dispatch")
            .after(stock)
            .select(|_order, quantity| if **quantity > 0 { "ship" } else { "shortage" })
            .branch("ship", |b| {
                b.timeout(ATTEMPT_TIMEOUT)
                    .retry(retry())
                    .breaker("ship")
                    .task(branch(api))
            })
            .branch("shortage", |b| {
                b.timeout(ATTEMPT_TIMEOUT)
                    .retry(retry())
                    .breaker("shortage")
                    .task(branch(api))
            })
            .finish();
        let notify = g
            .node("notify")
            .after(dispatch)
            .timeout(ATTEMPT_TIMEOUT)
            .retry(retry())
            .breaker("notify")
            .fallback(IN_APP.to_owned())
            .task({
                let api = api.clone();
                move |_ctx, dispatch| {
                    let api = api.clone();
                    async move { Ok::<_, CallError>(api.notify(&dispatch).await?.message) }
                }
            });
        Ok(Flow {
            graph: g.build()?,
            stock,
            dispatch,
            notify,
            options: RunOptions::new().timeout(DEADLINE),
        })
    }
}

impl Place for Flow {
    async fn place(&self, order: OrderRequest) -> Result<OrderResult, String> {
        let report = self
            .graph
            .run_with(order, self.options.clone())
            .await
            .map_err(|e| e.to_string())?;
        match (
            report.get(self.stock),
            report.get(self.dispatch),
            report.get(self.notify),
        ) {
            (Some(quantity), Some(dispatch), Some(message)) => {
                Ok(OrderResult::new(*quantity, dispatch, message.clone()))
            }
            _ => Err(report
                .nodes()
                .find(|n| n.outcome() == Outcome::Failed)
                .and_then(|n| n.message())
                .unwrap_or_else(|| "the order flow produced no answer".to_owned())),
        }
    }
}
