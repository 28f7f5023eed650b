//! The order placement as an HTTP service: a baton graph served by axum through
//! `axum::routing::post_service` (see `baton_examples::serve`), in front of the stand-in
//! services, both on `127.0.0.1`.
//!
//! It sends `POST /orders` with a real HTTP client in four situations and prints each
//! answer: all services healthy (200), stock down (200 with the fallback's 0 units, after
//! the retries), user down (502 naming `user`), user slower than the run's 2 s budget (504
//! naming `user`), then a body that is not an order (axum's rejection).
//!
//! The body is read before the run, outside its 2 s budget, so slow clients are bounded in
//! front of the graph (`serve::Limits`): tower-http's `TimeoutLayer` and
//! `RequestBodyTimeoutLayer` on the router, and a header read timeout on hyper's server,
//! which `axum::serve` does not set. A caller's `grpc-timeout` (or
//! `x-envoy-expected-rq-timeout-ms`) header shortens the run's budget to the caller's.
//!
//! ```text
//! cargo run --release -p baton-examples --example axum_orders
//! cargo run --release -p baton-examples --example axum_orders -- --serve
//! ```
//! With `--serve` it then keeps serving until Ctrl-C, for
//! `curl -d '{"user_id":7,"sku_id":42}' -H 'content-type: application/json' URL`.

use std::time::Duration;

use baton_examples::serve::{self, Config, HttpServer};
use baton_examples::{Behavior, Downstreams, OrderApi, OrderRequest, OrderServer, Service};
use baton_graph::BoxError;

/// A situation: its name and how the downstreams behave in it.
type Case = (&'static str, fn(&Downstreams));

const CASES: [Case; 4] = [
    ("healthy", |_| {}),
    ("stock down", |d| d.update(Service::Stock, Behavior::fail)),
    ("user down", |d| d.update(Service::User, Behavior::fail)),
    ("user slower than the budget", |d| {
        d.update(Service::User, |b| b.slow_by(Duration::from_millis(2_500)));
    }),
];

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let keep_serving = std::env::args().any(|a| a == "--serve");
    let downstreams = Downstreams::new();
    let services = OrderServer::start(downstreams.clone()).await?;
    let api = OrderApi::new(reqwest::Client::new(), services.base_url());
    let orders = HttpServer::start(serve::router(&api, &Config::new()?)?).await?;
    println!("serving POST {}", orders.url_of("/orders"));

    let client = reqwest::Client::new();
    let order = OrderRequest {
        user_id: 7,
        sku_id: 42,
    };
    for (name, set_up) in CASES {
        downstreams.reset();
        set_up(&downstreams);
        let response = client
            .post(orders.url_of("/orders"))
            .json(&order)
            .send()
            .await?;
        let status = response.status();
        println!("{name:<28} {status}  {}", response.text().await?);
    }
    downstreams.reset();
    let response = client
        .post(orders.url_of("/orders"))
        .header("content-type", "application/json")
        .body("{\"user\": 7}")
        .send()
        .await?;
    let status = response.status();
    println!(
        "{:<28} {status}  {}",
        "not an order",
        response.text().await?
    );

    if keep_serving {
        println!("serving until Ctrl-C");
        tokio::signal::ctrl_c().await?;
    }
    orders.shutdown().await?;
    services.shutdown().await?;
    Ok(())
}
