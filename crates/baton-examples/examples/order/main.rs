//! The order placement of the classic order flow, as a baton graph against real HTTP
//! services on `127.0.0.1`:
//!
//! ```text
//! user ─┐
//!       ├─> stock ─> dispatch ─┬─ ship      (stock > 0) ─┐
//! sku  ─┘                      └─ shortage  (stock = 0) ─┴─> notify
//! ```
//!
//! `stock` wears the whole onion (timeout, retry with backoff, the `inventory` circuit
//! breaker, a fallback of 0) and is compensated when `ship` fails; `dispatch` routes to
//! `ship` or `shortage`; `notify` falls back to an in-app message. The comments in
//! `order_graph` give each node's latency and policies.
//!
//! ```text
//! cargo run --release -p baton-examples --example order
//! cargo run --release -p baton-examples --example order -- --fail ship
//! ```
//!
//! The flags and more commands are `args.rs` (`--help` lists them), the runs `session.rs`,
//! and what the example prints, with the wording of a report, `output.rs`.

mod args;
mod output;
mod session;

use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use baton_examples::{
    CallError, Dispatch, DispatchRequest, OrderApi, OrderRequest, OrderServer, Service, ms,
};
use baton_graph::{
    Backoff, BuildError, CircuitBreaker, Fallback, Graph, Node, Orchestrator, Retry, RunOptions,
    compensate::CompensationTrigger,
};
use clap::Parser;

use crate::args::Args;
use crate::session::{Session, Transitions};

/// The order graph, on `orch` (which has the `inventory` breaker); `stock`
/// deducts from `count`, and its compensation puts it back when `ship` fails.
fn order_graph(
    orch: &Orchestrator,
    api: &OrderApi,
    count: &Arc<AtomicU64>,
) -> Result<(Graph<OrderRequest>, Nodes), BuildError> {
    let mut g = orch.graph::<OrderRequest>();
    // When `ship` fails, the graph runs `stock`'s compensation: `--fail ship` shows it in
    // the timeline, and the stock count back at 100.
    g.compensate_when(CompensationTrigger::nodes_failed(["ship"]));
    // Every task calls through `api.within(ctx.remaining())`: the service is told the time
    // this attempt has left (its per-attempt timeout and the run's deadline) in a header and
    // stops there; the HTTP request times out on its own shortly after, as a backstop.
    // The whole run has a 2 s timeout (`RunOptions::timeout` in `main`).
    //
    // `user` and `sku` (200 ms each) have no upstream: they run at the same time.
    let user = g.node("user").task({
        let api = api.clone();
        move |ctx, ()| {
            let api = api.within(ctx.remaining());
            async move { api.user(ctx.input().user_id).await }
        }
    });
    let sku = g.node("sku").task({
        let api = api.clone();
        move |ctx, ()| {
            let api = api.within(ctx.remaining());
            async move { api.sku(ctx.input().sku_id).await }
        }
    });
    // `stock` (150 ms) wears the whole onion: a 300 ms per-attempt timeout, `Retry::new(3)`
    // (two retries) with an exponential backoff of 100 ms ×2, the circuit breaker
    // `inventory` (opens after 5 consecutive failed requests, for 3 s or `--open-ms`), and
    // `Fallback::value(0)`: when it cannot get the stock, it says 0. It deducts one from a
    // stand-in stock count (100 at the start) when it succeeds, and its compensation puts
    // it back.
    let stock = g
        .node("stock")
        .after((user, sku))
        .timeout(ms(300))
        .retry(Retry::new(3).backoff(Backoff::exponential(ms(100)).multiplier(2.0)))
        .breaker("inventory")
        .fallback(Fallback::value(0))
        .compensate({
            let count = Arc::clone(count);
            move |_ctx, _quantity: Arc<u64>| {
                let count = Arc::clone(&count);
                // The stand-in stock service takes back the unit this order deducted.
                async move {
                    count.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, CallError>(())
                }
            }
        })
        .task({
            let api = api.clone();
            let count = Arc::clone(count);
            move |ctx, (user, sku)| {
                let api = api.within(ctx.remaining());
                let count = Arc::clone(&count);
                async move {
                    let quantity = api.deduct_stock(&user, &sku).await?.quantity;
                    count.fetch_sub(1, Ordering::SeqCst);
                    Ok::<_, CallError>(quantity)
                }
            }
        });
    let branch = |api: &OrderApi, service: Service| {
        let api = api.clone();
        move |ctx: baton_graph::Ctx<OrderRequest>, quantity: Arc<u64>| {
            let api = api.within(ctx.remaining());
            let req = DispatchRequest {
                user_id: ctx.input().user_id,
                sku_id: ctx.input().sku_id,
                quantity: *quantity,
            };
            async move {
                if service == Service::Ship {
                    api.ship(&req).await
                } else {
                    api.shortage(&req).await
                }
            }
        }
    };
    // `dispatch` is a router: branch `ship` when the stock is above 0, else `shortage` (each
    // an 80 ms call); the other branch ends `not_taken`.
    let dispatch = g
        .router("dispatch")
        .after(stock)
        .select(|_order, quantity| if **quantity > 0 { "ship" } else { "shortage" })
        .branch("ship", |b| b.task(branch(api, Service::Ship)))
        .branch("shortage", |b| b.task(branch(api, Service::Shortage)))
        .finish();
    // `notify` (50 ms) falls back to "sent by in-app message" when the notify service fails.
    let notify = g
        .node("notify")
        .after(dispatch)
        .fallback(Fallback::value(IN_APP.to_owned()))
        .task({
            let api = api.clone();
            move |ctx, dispatch| {
                let api = api.within(ctx.remaining());
                async move { Ok::<_, CallError>(api.notify(&dispatch).await?.message) }
            }
        });
    let graph = g.build()?;
    Ok((
        graph,
        Nodes {
            stock,
            dispatch,
            notify,
        },
    ))
}

/// The handles the output reads.
struct Nodes {
    stock: Node<u64>,
    dispatch: Node<Dispatch>,
    notify: Node<String>,
}

/// What `notify` says when the notify service fails.
const IN_APP: &str = "sent by in-app message";

/// The stand-in stock count's value before any order.
const STOCK_START: u64 = 100;

#[tokio::main]
async fn main() -> Result<ExitCode, Box<dyn Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    args.check()?;
    let downstreams = args.downstreams();
    let server = OrderServer::start(downstreams.clone()).await?;
    let http = reqwest::Client::builder().no_proxy().build()?;
    let api = OrderApi::new(http, server.base_url());
    api.warm_up(2).await?;

    // The orchestrator owns the `inventory` breaker, so the breaker's state carries over
    // from run to run; its observer prints every transition as it happens.
    let transitions = Transitions::new();
    let orch = Orchestrator::builder()
        .observer(transitions.observer())
        .build();
    let inventory = CircuitBreaker::builder("inventory")
        .consecutive_failures(5)
        .open_duration(ms(args.open_ms))
        .build()?;
    orch.add_breaker(&inventory)?;
    let count = Arc::new(AtomicU64::new(STOCK_START));
    let (graph, nodes) = order_graph(&orch, &api, &count)?;

    let order = OrderRequest {
        user_id: args.user,
        sku_id: args.sku,
    };
    let options = RunOptions::new()
        .failure_mode(args.mode)
        .timeout(Duration::from_secs(2));
    let session = Session {
        args: &args,
        downstreams: &downstreams,
        nodes: &nodes,
        inventory: &inventory,
        transitions: &transitions,
    };
    let (result, makespans) = session.run_all(&graph, order, &options).await?;
    session.print_last(&result);
    println!("breaker `inventory`: {}", inventory.state());
    session.print_services(STOCK_START, count.load(Ordering::SeqCst));
    println!("stats: {}", orch.stats());
    if args.happy_path() {
        session.compare_serially(&api, &order, makespans).await?;
    }
    session.finish(&result)?;

    drop(graph);
    drop(api);
    server.shutdown().await?;
    Ok(if result.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
