//! The fan-out example's flags, and the services' behaviour they ask for. Each flag's help
//! text says what it does; `--help` prints them all, with example commands.

use std::str::FromStr;

use baton_examples::{Channel, Downstreams, ms};
use clap::Parser;

/// A notification fan-out with per-channel budgets and breakers.
#[derive(Debug, Parser)]
#[command(name = "notify_fanout", after_long_help = EXAMPLES)]
pub(crate) struct Args {
    /// How many borrow notifications to send.
    #[arg(long, value_name = "N", default_value_t = 36, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) requests: u32,

    /// Milliseconds between two requests.
    #[arg(long, value_name = "MS", default_value_t = 25)]
    pub(crate) interval_ms: u64,

    /// The channel that answers 503: mail, sms, push or none.
    #[arg(long, value_name = "CHANNEL", default_value = "push", value_parser = parse_down)]
    pub(crate) down: Down,

    /// The channel that is down comes back after this many requests.
    ///
    /// It is back after the N-th request, so that a half-open probe succeeds and the
    /// breaker closes.
    #[arg(long, value_name = "N")]
    pub(crate) up_after: Option<u32>,

    /// How long an open breaker rejects calls, in milliseconds.
    ///
    /// When it has elapsed, the next request is a half-open probe.
    #[arg(long, value_name = "MS", default_value_t = 200)]
    pub(crate) open_ms: u64,

    /// Add latency to a channel, in milliseconds (repeatable).
    ///
    /// That channel answers MS ms later; with a down channel, each failing attempt then
    /// takes longer, and the budget cuts the last one short ("attempt 3 budget=42.24 ms").
    #[arg(long, value_name = "CHANNEL=MS", value_parser = parse_slow)]
    pub(crate) slow: Vec<(Channel, u64)>,

    /// Log every channel's attempts, not only the watched ones.
    #[arg(long)]
    pub(crate) verbose: bool,
}

/// The example commands `--help` ends with.
const EXAMPLES: &str = "\
Examples:
  cargo run --release --example notify_fanout
  cargo run --release --example notify_fanout -- --up-after 16
  cargo run --release --example notify_fanout -- --down sms --slow sms=250 --requests 12
  cargo run --release --example notify_fanout -- --down none --requests 5 --verbose";

/// `--down`: a channel, or none.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Down(pub(crate) Option<Channel>);

fn parse_down(s: &str) -> Result<Down, String> {
    if s.trim().eq_ignore_ascii_case("none") {
        return Ok(Down(None));
    }
    Channel::from_str(s)
        .map(|c| Down(Some(c)))
        .map_err(|e| e.to_string())
}

fn parse_slow(s: &str) -> Result<(Channel, u64), String> {
    let (channel, ms) = s
        .split_once('=')
        .ok_or_else(|| format!("expected CHANNEL=MS, e.g. sms=250, got `{s}`"))?;
    let channel = channel.parse::<Channel>().map_err(|e| e.to_string())?;
    let ms = ms
        .trim()
        .parse::<u64>()
        .map_err(|e| format!("`{ms}` is not a number of milliseconds: {e}"))?;
    Ok((channel, ms))
}

impl Args {
    /// The services, configured as the flags say (before the server starts).
    pub(crate) fn downstreams(&self) -> Downstreams {
        let downstreams = Downstreams::new();
        if let Some(channel) = self.down.0 {
            downstreams.update(channel.service(), |b| b.fail());
        }
        for &(channel, extra) in &self.slow {
            downstreams.update(channel.service(), |b| b.slow_by(ms(extra)));
        }
        downstreams
    }

    /// The channels whose attempts the log shows: every one with `--verbose`, else the
    /// down and the slow ones.
    pub(crate) fn watched(&self) -> Vec<Channel> {
        let mut watched: Vec<Channel> = if self.verbose {
            Channel::ALL.to_vec()
        } else {
            self.down
                .0
                .into_iter()
                .chain(self.slow.iter().map(|(c, _)| *c))
                .collect()
        };
        watched.sort_unstable();
        watched.dedup();
        watched
    }
}
