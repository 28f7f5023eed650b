//! The order placement of seed 002, as a baton graph against real HTTP services.
//!
//! Five downstream services run in this process on a random port of `127.0.0.1` (see the
//! `baton_examples` library): `user` and `sku` take 200 ms each, `stock` 150 ms and needs
//! both, `promo` 100 ms and needs `stock`, `notify` 50 ms and needs `promo`. Called one
//! after the other, as the seed's original handler does, that is 700 ms. As a graph, `user`
//! and `sku` run at the same time and the order is placed in 500 ms, the critical path.
//!
//! The example builds the graph once, runs it, prints the run's timeline (the report's
//! `Display`), and then, in the same process, over the same connection pool, makes the same
//! five calls serially, and prints both figures:
//!
//! ```text
//! graph: 503.2 ms   serial: 705.9 ms   (1.40x faster)
//! ```
//!
//! Failures are part of the report: with `--fail stock`, `stock` fails with the 503 in its
//! error, `promo` and `notify` are `skipped` naming `stock` as the cause, and what `user`
//! and `sku` produced is kept.
//!
//! # Flags
//! - `--fail NODE` (repeatable): that service answers `503 Service Unavailable`.
//! - `--slow NODE=MS` (repeatable): that service answers `MS` milliseconds later.
//! - `--mode preserve-partial|fail-all|fail-fast`: the run's failure mode (default
//!   `preserve-partial`: a run with failures still succeeds and returns its report).
//! - `--runs N` (default 1): run the graph (and the serial calls) `N` times, print the last
//!   timeline and the median makespans.
//! - `--json PATH`: write the (last) report as JSON.
//! - `--user ID`, `--sku ID`: the order request (defaults 7 and 42).
//!
//! Exit status: 0 when the run returned its report (in `preserve-partial` mode also when
//! nodes failed, which the output says), 1 when the run was an error (`fail-all` or
//! `fail-fast` with a failure: the error and the report it carries are printed).
//!
//! # Examples
//! ```text
//! cargo run --release --example order
//! cargo run --release --example order -- --runs 5
//! cargo run --release --example order -- --fail stock
//! cargo run --release --example order -- --fail stock --mode fail-all --json report.json
//! cargo run --release --example order -- --slow sku=300 --fail notify --mode fail-fast
//! ```
//! `RUST_LOG=debug` shows every call the server answers.

use std::error::Error;
use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use baton::{FailureMode, Graph, Report, RunOptions};
use baton_examples::{Behavior, Downstreams, OrderApi, OrderRequest, OrderServer, Service};
use clap::Parser;

/// The order placement of seed 002 as a baton graph, against HTTP services on 127.0.0.1.
#[derive(Debug, Parser)]
#[command(name = "order")]
struct Args {
    /// Make this service answer 503 Service Unavailable (repeatable).
    #[arg(long, value_name = "NODE")]
    fail: Vec<Service>,

    /// Add latency to a service, in milliseconds (repeatable).
    #[arg(long, value_name = "NODE=MS", value_parser = parse_slow)]
    slow: Vec<(Service, u64)>,

    /// What the run does when a node fails: preserve-partial, fail-all or fail-fast.
    #[arg(long, value_name = "MODE", default_value_t = FailureMode::PreservePartial)]
    mode: FailureMode,

    /// How many times to run the graph (and the serial calls); the medians are reported.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,

    /// Write the last run's report as JSON to this file.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,

    /// The ordering user's id.
    #[arg(long, value_name = "ID", default_value_t = 7)]
    user: u64,

    /// The ordered sku's id.
    #[arg(long, value_name = "ID", default_value_t = 42)]
    sku: u64,
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

/// The graph: `user ∥ sku → stock → promo → notify`, every task an HTTP call through the
/// one shared client, upstream values passed in the requests.
fn order_graph(api: &OrderApi) -> Result<Graph<OrderRequest>, baton::BuildError> {
    let mut g = Graph::<OrderRequest>::builder();

    let user = g.node("user").task({
        let api = api.clone();
        move |ctx, ()| {
            let api = api.clone();
            async move { api.user(ctx.input().user_id).await }
        }
    });
    let sku = g.node("sku").task({
        let api = api.clone();
        move |ctx, ()| {
            let api = api.clone();
            async move { api.sku(ctx.input().sku_id).await }
        }
    });
    let stock = g.node("stock").after((user, sku)).task({
        let api = api.clone();
        move |_ctx, (user, sku)| {
            let api = api.clone();
            async move { api.deduct_stock(&user, &sku).await }
        }
    });
    let promo = g.node("promo").after(stock).task({
        let api = api.clone();
        move |_ctx, stock| {
            let api = api.clone();
            async move { api.promo(&stock).await }
        }
    });
    g.node("notify").after(promo).task({
        let api = api.clone();
        move |_ctx, promo| {
            let api = api.clone();
            async move { api.notify(&promo).await }
        }
    });

    g.build()
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

#[tokio::main]
async fn main() -> Result<ExitCode, Box<dyn Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();

    // The five services, configured before they start.
    let downstreams = Downstreams::new();
    for &service in &args.fail {
        downstreams.update(service, Behavior::fail);
    }
    for &(service, extra) in &args.slow {
        downstreams.update(service, |b| b.slow_by(Duration::from_millis(extra)));
    }
    let server = OrderServer::start(downstreams.clone()).await?;

    // One client, one connection pool, for the graph and the serial calls alike.
    let http = reqwest::Client::builder().no_proxy().build()?;
    let api = OrderApi::new(http, server.base_url());
    // Two connections: `user` and `sku` run at the same time.
    api.warm_up(2).await?;

    let graph = order_graph(&api)?;
    let order = OrderRequest {
        user_id: args.user,
        sku_id: args.sku,
    };
    let options = RunOptions::new().failure_mode(args.mode);

    let mut makespans = Vec::new();
    let mut last = None;
    for _ in 0..args.runs {
        let result = graph.run_with(order, options.clone()).await;
        let report = match &result {
            Ok(report) => Some(report),
            Err(e) => e.report(),
        };
        if let Some(report) = report {
            makespans.push(report.makespan());
        }
        last = Some(result);
    }
    let Some(result) = last else {
        return Err("no run was made".into());
    };

    let mut serial = Vec::new();
    let mut serial_error = None;
    for _ in 0..args.runs {
        let started = Instant::now();
        let outcome = api.place_order_serially(&order).await;
        serial.push(started.elapsed());
        if let Err(e) = outcome {
            serial_error = Some(e);
        }
    }

    let report: Option<&Report> = match &result {
        Ok(report) => {
            print!("{report}");
            Some(report)
        }
        Err(e) => {
            println!("error: {e}");
            if let Some(report) = e.report() {
                print!("{report}");
            }
            e.report()
        }
    };
    println!();

    let graph_ms = ms(median(makespans));
    let serial_ms = ms(median(serial));
    let of_runs = if args.runs > 1 {
        format!("median of {} runs   ", args.runs)
    } else {
        String::new()
    };
    match &serial_error {
        None if report.is_some_and(Report::is_clean) => println!(
            "{of_runs}graph: {graph_ms:.1} ms   serial: {serial_ms:.1} ms   ({:.2}x faster)",
            serial_ms / graph_ms
        ),
        None => println!("{of_runs}graph: {graph_ms:.1} ms   serial: {serial_ms:.1} ms"),
        Some(e) => println!(
            "{of_runs}graph: {graph_ms:.1} ms   serial: {serial_ms:.1} ms (stopped at the first error: {e})"
        ),
    }

    if let Some(report) = report {
        let c = report.counts();
        if !report.is_clean() {
            let kept = if result.is_ok() {
                "the run still returned its report"
            } else {
                "the run is an error"
            };
            println!(
                "{} of {} nodes produced no value ({} failed, {} skipped, {} cancelled); \
                 mode {}: {kept}",
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
