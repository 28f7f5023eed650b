//! The order example's flags, and the services' behaviour they ask for.

use std::path::PathBuf;

use baton_examples::{Behavior, Downstreams, Service, ms};
use baton_graph::FailureMode;
use clap::Parser;

/// The order flow as a baton graph, against HTTP services on 127.0.0.1.
#[derive(Debug, Parser)]
#[command(name = "order")]
pub(crate) struct Args {
    /// Stock answers 503 to its first K calls, then recovers.
    #[arg(long, value_name = "K")]
    pub(crate) flaky_stock: Option<u64>,

    /// Stock answers MS milliseconds later (past its 300 ms timeout when MS > 150).
    #[arg(long, value_name = "MS")]
    pub(crate) slow_stock: Option<u64>,

    /// Stock always answers 503.
    #[arg(long)]
    pub(crate) stock_down: bool,

    /// With --stock-down: stock is back after this many runs.
    #[arg(long, value_name = "RUNS", requires = "stock_down")]
    pub(crate) recover_after: Option<u32>,

    /// Stock answers that it has 0 units.
    #[arg(long)]
    pub(crate) out_of_stock: bool,

    /// How long the `inventory` breaker stays open, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 3000)]
    pub(crate) open_ms: u64,

    /// Pause between runs, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub(crate) pause_ms: u64,

    /// Make this service answer 503 Service Unavailable (repeatable).
    #[arg(long, value_name = "NODE")]
    pub(crate) fail: Vec<Service>,

    /// Add latency to a service, in milliseconds (repeatable).
    #[arg(long, value_name = "NODE=MS", value_parser = parse_slow)]
    pub(crate) slow: Vec<(Service, u64)>,

    /// What the run does when a node fails: preserve-partial, fail-all or fail-fast.
    #[arg(long, value_name = "MODE", default_value_t = FailureMode::PreservePartial)]
    pub(crate) mode: FailureMode,

    /// How many times to run the graph, through the same orchestrator and breaker.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) runs: u32,

    /// Write the last run's report as JSON to this file.
    #[arg(long, value_name = "PATH")]
    pub(crate) json: Option<PathBuf>,

    /// Write the last run as a Chrome trace (open it in Perfetto or chrome://tracing).
    #[arg(long, value_name = "PATH")]
    pub(crate) trace: Option<PathBuf>,

    /// The ordering user's id.
    #[arg(long, value_name = "ID", default_value_t = 7)]
    pub(crate) user: u64,

    /// The ordered sku's id.
    #[arg(long, value_name = "ID", default_value_t = 42)]
    pub(crate) sku: u64,
}

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
