//! The order placement as an HTTP service: a baton graph served by axum as `POST /orders`,
//! in front of the stand-in services, both on `127.0.0.1`.
//!
//! ```text
//! user ─┐
//!       ├─> stock
//! sku  ─┘
//! ```
//!
//! It posts an order in four situations and prints each answer (see `cases.rs`), then a
//! body that is not an order. The configuration is `config.rs`, the flags `args.rs`, the
//! tests `tests.rs`.
//!
//! ```text
//! cargo run --release -p baton-examples --example axum_orders
//! cargo run --release -p baton-examples --example axum_orders -- --serve
//! ```

mod args;
mod cases;
mod config;
#[cfg(test)]
mod tests;

use axum::{Json, Router};
use baton_examples::{HttpServer, Limits, OrderApi, OrderRequest, OrderServer, ms};
use baton_graph::{
    Backoff, BoxError, BuildError, FailureMode, Fallback, Graph, Report, Retry, RunOptions,
    report::MissingValue, tower::GraphService,
};
use clap::Parser;
use serde::{Deserialize, Serialize};
use tower::{ServiceBuilder, service_fn};

use crate::config::Config;

/// The order graph as a service whose response is a [`Placed`], or the [`MissingValue`]
/// of the first node without a value. The run fails fast when `user` or `sku` fails.
fn orders(
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
        .timeout(ms(500))
        .service(sku_service, |ctx, ()| ctx.input().sku_id);
    let stocks = api.clone();
    let stock = g
        .node("stock")
        .after((user, sku))
        .timeout(ms(300))
        .retry(Retry::new(3).backoff(Backoff::exponential(ms(50))))
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

/// The router: `POST /orders`, served by the graph through `post_service` (other methods
/// get 405), bounded by `limits`.
///
/// The answer to a failed run is the run error's response, naming the node: 502 when the
/// service failed, 504 when the run's time ran out, 503 when a breaker or a bulkhead
/// refused. A body that is not an order is axum's rejection (400 or 422).
///
/// The body is read by the extractor before the run starts, so the run's budget does not
/// bound it; `limits` does: tower-http's `TimeoutLayer` (408 when the whole request, body
/// and run, takes longer than `request`) and `RequestBodyTimeoutLayer` (the body fails when
/// it pauses longer than `body_idle`). The server ([`HttpServer::start_with`]) adds a
/// header read timeout, which `axum::serve` does not set. A caller's `grpc-timeout` (or
/// `x-envoy-expected-rq-timeout-ms`) header shortens the run's budget to the caller's.
fn router(api: &OrderApi, config: &Config, limits: Limits) -> Result<Router, BuildError> {
    let orders = orders(api, config)?.http(|Json(order): Json<OrderRequest>| order);
    Ok(limits.bound(Router::new().route("/orders", axum::routing::post_service(orders))))
}

/// What `POST /orders` answers when the order went through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Placed {
    /// The user's display name.
    user: String,
    /// The product's title.
    sku: String,
    /// Its unit price in cents.
    price_cents: u64,
    /// Units in stock when the order was placed; 0 when stock could not be reached (the
    /// fallback) or is out.
    quantity: u64,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = args::Args::parse();
    let downstreams = baton_examples::Downstreams::new();
    let services = OrderServer::start(downstreams.clone()).await?;
    let api = OrderApi::new(reqwest::Client::new(), services.base_url());
    let limits = Limits::default();
    let orders = HttpServer::start_with(router(&api, &Config::new()?, limits)?, limits).await?;
    println!("serving POST {}", orders.url_of("/orders"));

    cases::post_each(&downstreams, &orders.url_of("/orders")).await?;

    if args.serve {
        println!("serving until Ctrl-C");
        tokio::signal::ctrl_c().await?;
    }
    orders.shutdown().await?;
    services.shutdown().await?;
    Ok(())
}
