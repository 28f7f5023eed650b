//! The order example's flags, and the services' behaviour they ask for. Each flag's help
//! text says what it shows; `--help` prints them all, with example commands.

use std::path::PathBuf;

use baton_examples::{Behavior, Downstreams, Service, ms};
use baton_graph::FailureMode;
use clap::Parser;

/// The order flow as a baton graph, against HTTP services on 127.0.0.1.
#[derive(Debug, Parser)]
#[command(name = "order", after_long_help = AFTER_HELP)]
pub(crate) struct Args {
    /// Stock answers 503 to its first K calls, then recovers.
    ///
    /// Retries with their backoffs, then success: K = 2 recovers on the last attempt; K = 3
    /// exhausts the attempts and uses the fallback.
    #[arg(long, value_name = "K")]
    pub(crate) flaky_stock: Option<u64>,

    /// Stock answers MS milliseconds later (past its 300 ms timeout when MS > 150).
    ///
    /// Stock then answers after 150 + MS ms; past 150 the 300 ms timeout cuts every attempt:
    /// timeouts, retries, then the fallback 0 and the `shortage` branch.
    #[arg(long, value_name = "MS")]
    pub(crate) slow_stock: Option<u64>,

    /// Stock always answers 503.
    ///
    /// The fallback 0, then `shortage`. With `--runs 12` the breaker opens after the 5th
    /// failed run, and later runs are rejected at once by the open breaker (no call is made)
    /// and served by the fallback.
    #[arg(long)]
    pub(crate) stock_down: bool,

    /// With --stock-down: stock is back after this many runs.
    ///
    /// With enough runs and `--pause-ms` the breaker goes closed → open → half-open →
    /// closed.
    #[arg(long, value_name = "RUNS", requires = "stock_down")]
    pub(crate) recover_after: Option<u32>,

    /// Stock answers that it has 0 units.
    ///
    /// `shortage` runs, `ship` is not taken.
    #[arg(long)]
    pub(crate) out_of_stock: bool,

    /// How long the `inventory` breaker stays open, in milliseconds.
    ///
    /// The default, 3 s, is what a hand-written handler of this flow would use.
    #[arg(long, value_name = "MS", default_value_t = 3000)]
    pub(crate) open_ms: u64,

    /// Pause between runs, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub(crate) pause_ms: u64,

    /// Make this service answer 503 Service Unavailable (repeatable).
    ///
    /// NODE is one of user, sku, stock, ship, shortage, notify; `--fail notify` shows the
    /// notify fallback.
    #[arg(long, value_name = "NODE")]
    pub(crate) fail: Vec<Service>,

    /// Add latency to a service, in milliseconds (repeatable).
    ///
    /// That service answers MS ms later.
    #[arg(long, value_name = "NODE=MS", value_parser = parse_slow)]
    pub(crate) slow: Vec<(Service, u64)>,

    /// What the run does when a node fails: preserve-partial, fail-all or fail-fast.
    #[arg(long, value_name = "MODE", default_value_t = FailureMode::PreservePartial)]
    pub(crate) mode: FailureMode,

    /// How many times to run the graph, through the same orchestrator and breaker.
    ///
    /// With N > 1 each run prints one line (start time, makespan, how `stock` ended, the
    /// branch taken, the breaker's state), and the full timeline is printed for runs in
    /// which the breaker changed state and for the last run.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) runs: u32,

    /// Write the last run's report as JSON to this file.
    #[arg(long, value_name = "PATH")]
    pub(crate) json: Option<PathBuf>,

    /// Write the last run as a Chrome trace (open it in Perfetto or chrome://tracing).
    ///
    /// In Perfetto: ui.perfetto.dev, "Open trace file".
    #[arg(long, value_name = "PATH")]
    pub(crate) trace: Option<PathBuf>,

    /// The ordering user's id.
    #[arg(long, value_name = "ID", default_value_t = 7)]
    pub(crate) user: u64,

    /// The ordered sku's id.
    #[arg(long, value_name = "ID", default_value_t = 42)]
    pub(crate) sku: u64,
}

/// What `--help` ends with: the exit status and example commands.
const AFTER_HELP: &str = "\
Exit status: 0 when the last run returned its report (in `preserve-partial` mode also when
nodes failed, which the output says), 1 when it was an error: under `fail-all` or
`fail-fast` with a failure, or when compensations ran (`--fail ship`). `RUST_LOG=debug` shows every call the server answers.

Examples:
  cargo run --release --example order
  cargo run --release --example order -- --flaky-stock 2
  cargo run --release --example order -- --slow-stock 400
  cargo run --release --example order -- --out-of-stock --fail notify
  cargo run --release --example order -- --stock-down --runs 12
  cargo run --release --example order -- --stock-down --runs 8 --recover-after 5 --open-ms 1000 --pause-ms 200
  cargo run --release --example order -- --fail user --mode fail-all --json report.json
  cargo run --release --example order -- --flaky-stock 2 --trace order-trace.json
  cargo run --release --example order -- --fail ship";

impl Args {
    /// Whether no flag changes how the services answer (the serial comparison is fair).
    pub(crate) fn happy_path(&self) -> bool {
        self.flaky_stock.is_none()
            && self.slow_stock.is_none()
            && !self.stock_down
            && !self.out_of_stock
            && self.fail.is_empty()
            && self.slow.is_empty()
    }
}

impl Args {
    /// An error naming a `--fail` or `--slow` service that is not part of the order flow.
    pub(crate) fn check(&self) -> Result<(), String> {
        let other = self
            .fail
            .iter()
            .chain(self.slow.iter().map(|(s, _)| s))
            .find(|s| !Service::ORDER_FLOW.contains(s));
        match other {
            Some(s) => Err(format!(
                "`{s}` is not part of the order flow (user, sku, stock, ship, shortage, notify)"
            )),
            None => Ok(()),
        }
    }

    /// The services, configured as the flags say (before the server starts).
    pub(crate) fn downstreams(&self) -> Downstreams {
        let downstreams = Downstreams::new();
        for &service in &self.fail {
            downstreams.update(service, Behavior::fail);
        }
        for &(service, extra) in &self.slow {
            downstreams.update(service, |b| b.slow_by(ms(extra)));
        }
        if let Some(k) = self.flaky_stock {
            downstreams.update(Service::Stock, |b| b.fail_first(k));
        }
        if let Some(extra) = self.slow_stock {
            downstreams.update(Service::Stock, |b| b.slow_by(ms(extra)));
        }
        if self.stock_down {
            downstreams.update(Service::Stock, Behavior::fail);
        }
        if self.out_of_stock {
            downstreams.update(Service::Stock, |b| b.stock(0));
        }
        downstreams
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
