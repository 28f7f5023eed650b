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

use std::error::Error;
use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use baton_examples::{
    Behavior, CallError, Dispatch, DispatchRequest, Downstreams, OrderApi, OrderRequest,
    OrderServer, Service,
};
use baton_graph::{
    Backoff, BuildError, CircuitBreaker, FailureMode, Fallback, Graph, Node, NodeError, NodeReport,
    Orchestrator, Outcome, Report, Retry, RunOptions, compensate::CompensationTrigger,
    observe::Event,
};
use clap::Parser;
use tokio::time::Instant;

/// The services of the order flow (the others belong to the notification fan-out).
const ORDER_SERVICES: [Service; 6] = [
    Service::User,
    Service::Sku,
    Service::Stock,
    Service::Ship,
    Service::Shortage,
    Service::Notify,
];

/// What `notify` says when the notify service fails (the seed's "通知失败，已转站内信").
const IN_APP: &str = "sent by in-app message";

/// The order flow as a baton graph, against HTTP services on 127.0.0.1.
#[derive(Debug, Parser)]
#[command(name = "order")]
struct Args {
    /// Stock answers 503 to its first K calls, then recovers.
    #[arg(long, value_name = "K")]
    flaky_stock: Option<u64>,

    /// Stock answers MS milliseconds later (past its 300 ms timeout when MS > 150).
    #[arg(long, value_name = "MS")]
    slow_stock: Option<u64>,

    /// Stock always answers 503.
    #[arg(long)]
    stock_down: bool,

    /// With --stock-down: stock is back after this many runs.
    #[arg(long, value_name = "RUNS", requires = "stock_down")]
    recover_after: Option<u32>,

    /// Stock answers that it has 0 units.
    #[arg(long)]
    out_of_stock: bool,

    /// How long the `inventory` breaker stays open, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 3000)]
    open_ms: u64,

    /// Pause between runs, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pause_ms: u64,

    /// Make this service answer 503 Service Unavailable (repeatable).
    #[arg(long, value_name = "NODE")]
    fail: Vec<Service>,

    /// Add latency to a service, in milliseconds (repeatable).
    #[arg(long, value_name = "NODE=MS", value_parser = parse_slow)]
    slow: Vec<(Service, u64)>,

    /// What the run does when a node fails: preserve-partial, fail-all or fail-fast.
    #[arg(long, value_name = "MODE", default_value_t = FailureMode::PreservePartial)]
    mode: FailureMode,

    /// How many times to run the graph, through the same orchestrator and breaker.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,

    /// Write the last run's report as JSON to this file.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,

    /// Write the last run as a Chrome trace (open it in Perfetto or chrome://tracing).
    #[arg(long, value_name = "PATH")]
    trace: Option<PathBuf>,

    /// The ordering user's id.
    #[arg(long, value_name = "ID", default_value_t = 7)]
    user: u64,

    /// The ordered sku's id.
    #[arg(long, value_name = "ID", default_value_t = 42)]
    sku: u64,
}

impl Args {
    /// Whether no flag changes how the services answer (the serial comparison is fair).
    fn happy_path(&self) -> bool {
        self.flaky_stock.is_none()
            && self.slow_stock.is_none()
            && !self.stock_down
            && !self.out_of_stock
            && self.fail.is_empty()
            && self.slow.is_empty()
    }
}

fn parse_slow(s: &str) -> Result<(Service, u64), String> {
    let (node, ms) = s
        .split_once('=')
        .ok_or_else(|| format!("expected NODE=MS, e.g. sku=300, got `{s}`"))?;
    let service = node.parse::<Service>().map_err(|e| e.to_string())?;
    let ms = ms
        .trim()
        .parse::<u64>()
        .map_err(|e| format!("`{ms}` is not a number of milliseconds: {e}"))?;
    Ok((service, ms))
}

/// The handles the output reads.
struct Nodes {
    stock: Node<u64>,
    dispatch: Node<Dispatch>,
    notify: Node<String>,
}

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
        .timeout(Duration::from_millis(300))
        .retry(
            Retry::new(3).backoff(Backoff::exponential(Duration::from_millis(100)).multiplier(2.0)),
        )
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

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort_unstable();
    match xs.len() {
        0 => Duration::ZERO,
        n if n % 2 == 1 => xs[n / 2],
        n => (xs[n / 2 - 1] + xs[n / 2]) / 2,
    }
}

/// The last attempt's error, short: `timed out after 300 ms`, `503 Service Unavailable`.
fn short(error: &NodeError) -> String {
    // The task's own error is kept typed: downcast it to the client's error.
    let call = error
        .task_error()
        .and_then(|e| e.downcast_ref::<CallError>());
    if let Some(CallError::Status { status, .. }) = call {
        return status.to_string();
    }
    match error.last_attempt() {
        NodeError::Timeout { limit, .. } => format!("timed out after {:.0} ms", ms(*limit)),
        NodeError::DeadlineExceeded { .. } => "cut by the run's deadline".to_owned(),
        NodeError::BreakerOpen { breaker, .. } => {
            format!("breaker `{breaker}` open, no call made")
        }
        other => other.to_string(),
    }
}

/// How `stock` ended, in a few words.
fn stock_summary(node: &NodeReport<'_>, value: Option<u64>) -> String {
    let qty = value.map_or_else(String::new, |q| format!(" {q}"));
    match (node.outcome(), node.error()) {
        (Outcome::Succeeded, _) if node.attempts() > 1 => {
            format!("succeeded{qty} on attempt {}", node.attempts())
        }
        (Outcome::Succeeded, _) => format!("succeeded{qty}"),
        (Outcome::Recovered, Some(e @ NodeError::GaveUp { attempts, .. })) => format!(
            "fallback{qty} after {attempts} failed attempts ({})",
            short(e)
        ),
        (Outcome::Recovered, Some(e)) => format!("fallback{qty}: {}", short(e)),
        (outcome, _) => format!(
            "{outcome}: {}",
            node.message().unwrap_or_else(|| "-".to_owned())
        ),
    }
}

/// Which branch of `dispatch` ran.
fn branch_taken(report: &Report) -> &'static str {
    ["ship", "shortage"]
        .into_iter()
        .find(|b| {
            report
                .by_name(b)
                .is_some_and(|n| n.outcome() != Outcome::NotTaken)
        })
        .unwrap_or("no branch")
}

/// Each attempt of the nodes that made more than one, with the backoff before it:
///
/// ```text
/// stock  #1   202.4 →  354.1 ms  stock answered 503 Service Unavailable
///        backoff 100 ms
/// stock  #2   455.4 →  607.4 ms  ok
/// ```
fn attempt_lines(report: &Report) -> Vec<String> {
    let width = report.nodes().map(|n| n.name().len()).max().unwrap_or(0);
    let mut lines = Vec::new();
    for node in report.nodes() {
        let log = node.attempt_log();
        if log.len() < 2 {
            continue;
        }
        for (i, a) in log.iter().enumerate() {
            if i > 0 {
                lines.push(format!(
                    "{:width$}  backoff {:.0} ms",
                    "",
                    ms(a.delay_before)
                ));
            }
            let what = match &a.error {
                // The attempt's error is text; drop its "node `x` attempt n " prefix.
                Some(e) => {
                    let prefix = format!("node `{}` attempt {} ", node.name(), a.number);
                    e.strip_prefix(&prefix).unwrap_or(e).to_owned()
                }
                None => "ok".to_owned(),
            };
            let name = if i == 0 { node.name() } else { "" };
            lines.push(format!(
                "{name:width$}  #{} {:>7.1} → {:>7.1} ms  {what}",
                a.number,
                ms(a.start),
                ms(a.end)
            ));
        }
    }
    lines
}

/// The full account of one run: timeline, attempts, branch, fallbacks.
fn print_details(report: &Report, nodes: &Nodes) {
    print!("{report}");
    let attempts = attempt_lines(report);
    if !attempts.is_empty() {
        println!("attempts (from the run's start):");
        for line in attempts {
            println!("  {line}");
        }
    }
    if let Some(stock) = report.node(nodes.stock) {
        let qty = report.get(nodes.stock).copied();
        println!("stock: {}", stock_summary(&stock, qty));
    }
    if let Some(dispatch) = report.node(nodes.dispatch) {
        match report.get(nodes.dispatch) {
            Some(d) => {
                let taken = branch_taken(report);
                let other = if taken == "ship" { "shortage" } else { "ship" };
                println!(
                    "dispatch: chose `{taken}` ({} {}); `{other}` not taken",
                    d.status, d.reference
                );
            }
            None => println!(
                "dispatch: {} ({})",
                dispatch.outcome(),
                dispatch.message().unwrap_or_default()
            ),
        }
    }
    if let Some(notify) = report.node(nodes.notify) {
        match (notify.outcome(), report.get(nodes.notify)) {
            (Outcome::Recovered, Some(msg)) => println!(
                "notify: fallback \"{msg}\" (after: {})",
                notify.error().map(short).unwrap_or_default()
            ),
            (_, Some(msg)) => println!("notify: \"{msg}\""),
            (outcome, None) => println!(
                "notify: {outcome} ({})",
                notify.message().unwrap_or_default()
            ),
        }
    }
}

#[tokio::main]
async fn main() -> Result<ExitCode, Box<dyn Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    if let Some(s) = args
        .fail
        .iter()
        .chain(args.slow.iter().map(|(s, _)| s))
        .find(|s| !ORDER_SERVICES.contains(s))
    {
        return Err(format!(
            "`{s}` is not part of the order flow (user, sku, stock, ship, shortage, notify)"
        )
        .into());
    }

    // The services, configured before they start.
    let downstreams = Downstreams::new();
    for &service in &args.fail {
        downstreams.update(service, Behavior::fail);
    }
    for &(service, extra) in &args.slow {
        downstreams.update(service, |b| b.slow_by(Duration::from_millis(extra)));
    }
    if let Some(k) = args.flaky_stock {
        downstreams.update(Service::Stock, |b| b.fail_first(k));
    }
    if let Some(extra) = args.slow_stock {
        downstreams.update(Service::Stock, |b| b.slow_by(Duration::from_millis(extra)));
    }
    if args.stock_down {
        downstreams.update(Service::Stock, Behavior::fail);
    }
    if args.out_of_stock {
        downstreams.update(Service::Stock, |b| b.stock(0));
    }
    let server = OrderServer::start(downstreams.clone()).await?;
    let http = reqwest::Client::builder().no_proxy().build()?;
    let api = OrderApi::new(http, server.base_url());
    api.warm_up(2).await?;

    // The orchestrator: its observer prints breaker transitions as they happen.
    let started = Instant::now();
    let current_run = Arc::new(AtomicU32::new(0));
    let transitioned = Arc::new(AtomicBool::new(false));
    let orch = Orchestrator::builder()
        .observer({
            let current_run = Arc::clone(&current_run);
            let transitioned = Arc::clone(&transitioned);
            move |event: &Event<'_>| {
                if let Event::BreakerTransition(t) = event {
                    transitioned.store(true, Ordering::Relaxed);
                    println!(
                        "[{:>8.1} ms] run {}: {t}",
                        ms(t.at().saturating_duration_since(started)),
                        current_run.load(Ordering::Relaxed)
                    );
                }
            }
        })
        .build();
    let inventory = CircuitBreaker::builder("inventory")
        .consecutive_failures(5)
        .open_duration(Duration::from_millis(args.open_ms))
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

    let mut makespans = Vec::new();
    let mut last = None;
    if args.runs > 1 {
        println!("run  at (ms)  makespan  branch     inventory  stock");
    }
    for n in 1..=args.runs {
        if args.recover_after == Some(n - 1) {
            downstreams.update(Service::Stock, Behavior::succeed);
            println!("-- the stock service is back (after {} runs) --", n - 1);
        }
        current_run.store(n, Ordering::Relaxed);
        transitioned.store(false, Ordering::Relaxed);
        let at = started.elapsed();
        let result = graph.run_with(order, options.clone()).await;
        let report = match &result {
            Ok(report) => Some(report),
            Err(e) => e.report(),
        };
        if let Some(report) = report {
            makespans.push(report.makespan());
            if args.runs > 1 {
                let stock = report
                    .node(nodes.stock)
                    .map(|s| stock_summary(&s, report.get(nodes.stock).copied()))
                    .unwrap_or_default();
                println!(
                    "{n:>3}  {:>7.1}  {:>8.1}  {:9}  {:9}  {stock}",
                    ms(at),
                    ms(report.makespan()),
                    branch_taken(report),
                    inventory.state().as_str(),
                );
                if transitioned.load(Ordering::Relaxed) && n < args.runs {
                    print_details(report, &nodes);
                    println!();
                }
            }
        }
        if let Err(e) = &result {
            if args.runs > 1 {
                println!("run {n:>2}  error: {e}");
            }
        }
        last = Some(result);
        if n < args.runs && args.pause_ms > 0 {
            tokio::time::sleep(Duration::from_millis(args.pause_ms)).await;
        }
    }
    let Some(result) = last else {
        return Err("no run was made".into());
    };

    if args.runs > 1 {
        println!("\nlast run:");
    }
    let report: Option<&Report> = match &result {
        Ok(report) => Some(report),
        Err(e) => {
            println!("error: {e}");
            e.report()
        }
    };
    if let Some(report) = report {
        print_details(report, &nodes);
    }
    println!();

    println!("breaker `inventory`: {}", inventory.state());
    println!(
        "stock service: {} calls received, {} stopped at the caller's deadline",
        downstreams.calls(Service::Stock),
        downstreams.stopped_early(Service::Stock)
    );
    println!(
        "stand-in stock count: {} at the start, {} now",
        STOCK_START,
        count.load(Ordering::SeqCst)
    );
    println!("stats: {}", orch.stats());

    if args.happy_path() {
        let mut serial = Vec::new();
        for _ in 0..args.runs {
            let t = std::time::Instant::now();
            api.place_order_serially(&order).await?;
            serial.push(t.elapsed());
        }
        let graph_ms = ms(median(makespans));
        let serial_ms = ms(median(serial));
        let of_runs = if args.runs > 1 {
            format!("median of {} runs   ", args.runs)
        } else {
            String::new()
        };
        println!(
            "{of_runs}graph: {graph_ms:.1} ms   serial: {serial_ms:.1} ms   ({:.2}x faster)",
            serial_ms / graph_ms
        );
    }

    if let Some(report) = report {
        if !report.is_clean() {
            let c = report.counts();
            let kept = if result.is_ok() {
                "the run still returned its report"
            } else {
                "the run is an error"
            };
            println!(
                "{} of {} nodes produced no value ({} failed, {} skipped, {} cancelled); mode {}: {kept}",
                c.failed + c.skipped + c.cancelled,
                report.len(),
                c.failed,
                c.skipped,
                c.cancelled,
                args.mode,
            );
        }
        if let Some(path) = &args.json {
            let file = BufWriter::new(File::create(path)?);
            serde_json::to_writer_pretty(file, report)?;
            println!("report written to {}", path.display());
        }
        if let Some(path) = &args.trace {
            std::fs::write(path, report.to_chrome_trace())?;
            println!("trace written to {}", path.display());
        }
    }

    drop(graph);
    drop(api);
    server.shutdown().await?;

    Ok(if result.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
