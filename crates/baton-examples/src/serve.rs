//! The order placement served over HTTP: a baton graph as an axum route, through
//! `axum::routing::post_service`.
//!
//! `POST /orders` with an [`OrderRequest`] as JSON runs the graph
//!
//! ```text
//! user ─┐
//!       ├─> stock
//! sku  ─┘
//! ```
//!
//! against the stand-in services ([`OrderServer`](crate::OrderServer)) and answers a
//! [`Placed`] as JSON. `sku` is a `tower` service (a concurrency limit around the client),
//! plugged in with `.service(..)`; `stock` has a timeout, retries, the `inventory` circuit
//! breaker and a fallback of 0 units.
//!
//! The run fails fast: when `user` or `sku` fails, the answer is the run error's response,
//! naming the node: 502 when the service failed, 504 when the run's time ran out, 503 when
//! a breaker or a bulkhead refused. A body that is not an order is axum's rejection (400 or
//! 422).
//!
//! Slow clients: the body is read by the extractor before the run starts, so the run's
//! budget does not bound it. The router bounds it ([`Limits`]): tower-http's `TimeoutLayer`
//! (408 when the whole request, body and run, takes longer than `request`) and
//! `RequestBodyTimeoutLayer` (the body fails when it pauses longer than `body_idle`), and
//! the server ([`HttpServer`]) is hyper's with a header read timeout, which `axum::serve`
//! does not set: a client that sends its head one byte at a time is disconnected.

use std::time::Duration;

use axum::{Json, Router};
use baton_graph::{
    Backoff, BuildError, CircuitBreaker, FailureMode, Fallback, Graph, Report, Retry, RunOptions,
    breaker::BreakerConfigError, report::MissingValue, tower::GraphService,
};
use serde::{Deserialize, Serialize};
use tower::{ServiceBuilder, service_fn};

use crate::{OrderApi, OrderRequest};

pub use baton_stand_in::{HttpServer, Limits};

/// The order graph as a service whose response is a [`Placed`], or the [`MissingValue`]
/// of the first node without a value.
///
/// # Errors
/// [`BuildError`] if the graph does not validate.
pub fn orders(
    api: &OrderApi,
    config: &Config,
) -> Result<GraphService<OrderRequest, Result<Json<Placed>, MissingValue>>, BuildError> {
    let mut g = Graph::<OrderRequest>::builder();
    g.name("orders");
    let users = api.clone();
    let user = g.node("user").task(move |ctx, ()| {
        let api = users.clone();
        let id = ctx.input().user_id;
        async move { api.user(id).await }
    });
    // A tower service as the task: each attempt waits for a permit of the limit
    // (`poll_ready`), inside the attempt's timeout.
    let skus = api.clone();
    let sku_service = ServiceBuilder::new()
        .concurrency_limit(config.sku_concurrency)
        .service(service_fn(move |id: u64| {
            let api = skus.clone();
            async move { api.sku(id).await }
        }));
    let sku = g
        .node("sku")
        .timeout(Duration::from_millis(500))
        .service(sku_service, |ctx, ()| ctx.input().sku_id);
    let stocks = api.clone();
    let stock = g
        .node("stock")
        .after((user, sku))
        .timeout(Duration::from_millis(300))
        .retry(Retry::new(3).backoff(Backoff::exponential(Duration::from_millis(50))))
        .breaker(&config.inventory)
        .fallback(Fallback::value(0))
        .task(move |_ctx, (user, sku)| {
            let api = stocks.clone();
            async move { api.deduct_stock(&user, &sku).await.map(|s| s.quantity) }
        });
    let options = RunOptions::new()
        .timeout(config.run_timeout)
        .failure_mode(FailureMode::FailFast);
    let service = g.build()?.into_service().options(options);
    Ok(service.map_report(move |report: Report| {
        let (user, sku) = (report.require(user)?, report.require(sku)?);
        Ok(Json(Placed {
            user: user.name.clone(),
            sku: sku.title.clone(),
            price_cents: sku.price_cents,
            quantity: *report.require(stock)?,
        }))
    }))
}

/// What `POST /orders` answers when the order went through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placed {
    /// The user's display name.
    pub user: String,
    /// The product's title.
    pub sku: String,
    /// Its unit price in cents.
    pub price_cents: u64,
    /// Units in stock when the order was placed; 0 when stock could not be reached (the
    /// fallback) or is out.
    pub quantity: u64,
}

/// How the order service runs its graph.
#[derive(Debug, Clone)]
pub struct Config {
    /// The whole run's time budget, counted from each request's start.
    pub run_timeout: Duration,
    /// The most `sku` calls in flight at once (the tower concurrency limit).
    pub sku_concurrency: usize,
    /// The `inventory` breaker `stock` calls through: shared by every request.
    pub inventory: CircuitBreaker,
}

impl Config {
    /// A 2 s run budget, 64 `sku` calls at once, and an `inventory` breaker that opens after
    /// 5 consecutive failed requests, for 3 s.
    ///
    /// # Errors
    /// Never in practice: the breaker's settings are valid.
    pub fn new() -> Result<Config, BreakerConfigError> {
        Ok(Config {
            run_timeout: Duration::from_secs(2),
            sku_concurrency: 64,
            inventory: CircuitBreaker::builder("inventory")
                .consecutive_failures(5)
                .open_duration(Duration::from_secs(3))
                .build()?,
        })
    }
}

/// The router: `POST /orders`, served by the graph through `post_service` (other methods
/// get 405; `Router::route_service` would serve every method), bounded by `limits`.
///
/// # Errors
/// [`BuildError`] if the graph does not validate.
pub fn router(api: &OrderApi, config: &Config) -> Result<Router, BuildError> {
    router_with(api, config, Limits::default())
}

/// [`router`], with its body and whole request bounded by `limits`.
///
/// # Errors
/// [`BuildError`] if the graph does not validate.
pub fn router_with(api: &OrderApi, config: &Config, limits: Limits) -> Result<Router, BuildError> {
    let orders = orders(api, config)?.http(|Json(order): Json<OrderRequest>| order);
    Ok(limits.bound(Router::new().route("/orders", axum::routing::post_service(orders))))
}
