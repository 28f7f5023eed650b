//! The order placement of the classic order flow, as a baton graph against real HTTP
//! services on `127.0.0.1`:
//!
//! ```text
//! user ─┐
//!       ├─> stock ─> dispatch ─┬─ ship      (stock > 0) ─┐
//! sku  ─┘                      └─ shortage  (stock = 0) ─┴─> notify
//! ```
//!
//! - `user` and `sku` (200 ms each) run at the same time;
//! - `stock` (150 ms) wears the whole onion: a 300 ms per-attempt timeout, `Retry::new(3)`
//!   (two retries) with an exponential backoff of 100 ms ×2, the circuit breaker
//!   `inventory` (opens after 5 consecutive failed requests, for 3 s), and
//!   `Fallback::value(0)`: when it cannot get the stock, it says 0;
//! - `dispatch` is a router: branch `ship` when the stock is above 0, else `shortage` (each
//!   an 80 ms call); the other branch ends `not_taken`;
//! - `notify` (50 ms) falls back to "sent by in-app message" when the notify service fails;
//! - `stock` deducts one from a stand-in stock count (100 at the start) when it succeeds,
//!   and has a compensation that puts it back; the graph compensates when `ship` fails
//!   (`CompensationTrigger::nodes_failed(["ship"])`), so `--fail ship` shows the
//!   compensation in the timeline and the count back at 100;
//! - the whole run has a 2 s timeout (`RunOptions::timeout`), and every task passes the
//!   time it has left (`ctx.remaining()`) to the service as the request's timeout and in
//!   the `x-budget-ms` header.
//!
//! The graph is built from an `Orchestrator`, which owns the `inventory` breaker, so the
//! breaker's state carries over from run to run; an observer given to the orchestrator
//! prints every breaker transition as it happens. After the runs the example prints the
//! last run's timeline (the report's `Display`), the attempts of nodes that retried with
//! their backoffs, which branch ran and which was not taken, and the orchestrator's stats
//! panel.
//!
//! In the default happy path it also makes the same calls one after another, as the seed's
//! original handler does (user 200 + sku 200 + stock 150 + ship 80 + notify 50 = 680 ms),
//! and prints both figures; with any failure flag that comparison is dropped (the serial
//! code has no retry, breaker or fallback, so its figure would compare different work).
//!
//! # Flags
//! - `--flaky-stock K`: stock answers 503 to its first K calls, then recovers: retries with
//!   their backoffs, then success (K = 2 recovers on the last attempt; K = 3 exhausts the
//!   attempts and uses the fallback).
//! - `--slow-stock MS`: stock answers MS ms later (150 + MS); past 150 the 300 ms timeout cuts
//!   every attempt: timeouts, retries, then the fallback 0 and the `shortage` branch.
//! - `--stock-down`: stock always answers 503: fallback 0 → `shortage`. With `--runs 12`
//!   the breaker opens after the 5th failed run, and later runs are rejected at once by the
//!   open breaker (no call is made) and served by the fallback.
//! - `--recover-after RUNS` (with `--stock-down`): stock is back after that many runs. With
//!   enough runs and `--pause-ms` the breaker goes closed → open → half-open → closed.
//! - `--out-of-stock`: stock answers 0: `shortage` runs, `ship` is not taken.
//! - `--open-ms MS`: how long the `inventory` breaker stays open (default 3000, the seed's).
//! - `--pause-ms MS`: a pause between runs (default 0).
//! - `--fail NODE` (repeatable): that service (user, sku, stock, ship, shortage, notify)
//!   answers 503; `--fail notify` shows the notify fallback.
//! - `--slow NODE=MS` (repeatable): that service answers MS ms later.
//! - `--mode preserve-partial|fail-all|fail-fast`: the run's failure mode (default
//!   `preserve-partial`).
//! - `--runs N` (default 1): run the graph N times through the same orchestrator. With
//!   N > 1 each run prints one line (start time, makespan, how `stock` ended, the branch
//!   taken, the breaker's state), and the full timeline is printed for runs in which the
//!   breaker changed state and for the last run.
//! - `--json PATH`: write the last report as JSON.
//! - `--trace PATH`: write the last run as a Chrome trace, to open in Perfetto
//!   (ui.perfetto.dev, "Open trace file") or `chrome://tracing`.
//! - `--user ID`, `--sku ID`: the order request (defaults 7 and 42).
//!
//! Exit status: 0 when the last run returned its report (in `preserve-partial` mode also
//! when nodes failed, which the output says), 1 when it was an error (`fail-all` or
//! `fail-fast` with a failure).
//!
//! # Examples
//! ```text
//! cargo run --release --example order
//! cargo run --release --example order -- --flaky-stock 2
//! cargo run --release --example order -- --slow-stock 400
//! cargo run --release --example order -- --out-of-stock --fail notify
//! cargo run --release --example order -- --stock-down --runs 12
//! cargo run --release --example order -- --stock-down --runs 8 --recover-after 5 --open-ms 1000 --pause-ms 200
//! cargo run --release --example order -- --fail user --mode fail-all --json report.json
//! cargo run --release --example order -- --flaky-stock 2 --trace order-trace.json
//! cargo run --release --example order -- --fail ship
//! ```
//! `RUST_LOG=debug` shows every call the server answers.
//!
//! The graph is this file; the flags are `args.rs`, the runs and what they print
//! `session.rs`, and the wording of a report `output.rs`.

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

/// The stand-in stock count's value before any order.
const STOCK_START: u64 = 100;

/// The graph of the final chapter, on `orch` (which has the `inventory` breaker); `stock`
/// deducts from `count`, and its compensation puts it back when `ship` fails.
fn order_graph(
    orch: &Orchestrator,
    api: &OrderApi,
    count: &Arc<AtomicU64>,
) -> Result<(Graph<OrderRequest>, Nodes), BuildError> {
    let mut g = orch.graph::<OrderRequest>();
    g.compensate_when(CompensationTrigger::nodes_failed(["ship"]));
    // Every task calls through `api.within(ctx.remaining())`: the service is told the time
    // this attempt has left (its per-attempt timeout and the run's deadline) in a header and
    // stops there; the HTTP request times out on its own shortly after, as a backstop.
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
    let dispatch = g
        .router("dispatch")
        .after(stock)
        .select(|_order, quantity| if **quantity > 0 { "ship" } else { "shortage" })
        .branch("ship", |b| b.task(branch(api, Service::Ship)))
        .branch("shortage", |b| b.task(branch(api, Service::Shortage)))
        .finish();
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

/// What `notify` says when the notify service fails (the seed's "通知失败，已转站内信").
const IN_APP: &str = "sent by in-app message";

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

    // The orchestrator owns the `inventory` breaker; its observer prints every transition.
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
