//! A borrow notification, fanned out to three channels with a budget and a circuit
//! breaker each, against real HTTP services on `127.0.0.1`:
//!
//! ```text
//!          ┌─> mail   budget 2000 ms, breaker `mail` trips after 5 failed requests
//! borrow ──┼─> sms    budget  800 ms, breaker `sms`  trips after 3
//!          └─> push   budget  500 ms, breaker `push` trips after 2
//! ```
//!
//! Every channel retries (`Retry::new(3)`: up to 3 attempts, exponential backoff 15 ms ×2,
//! capped at 200 ms, no jitter so that the log is reproducible) inside its own budget
//! (`.budget(..)`): no attempt starts with less than 10 ms left, backoffs are clipped to
//! the budget, and each attempt's task passes the time it has left (`ctx.remaining()`) on to
//! the HTTP call, as the request's timeout and in the `x-budget-ms` header, so that the
//! service stops working when the caller stops waiting. Each channel has its own breaker
//! (one guard per downstream, not one for all), registered in one
//! `Orchestrator`, so every request shares them.
//!
//! The example sends a stream of borrow notifications (each a run of the graph, started a
//! few milliseconds apart, running concurrently) while one channel is down (answers 503),
//! and prints, as it happens, from an observer given to the orchestrator:
//! - every breaker transition, with its time since the start:
//!   closed → open after the threshold of failed requests, open → half-open when the open
//!   duration has elapsed and a request asks, half-open → open (probe failed, fresh
//!   cooldown) or → closed (probe succeeded);
//! - for the watched channels (the one down, the slowed ones; all with `--verbose`), each
//!   attempt with the budget it had when it started and what it used, each backoff with the
//!   budget left, and each request the open breaker rejected without calling.
//!
//! Then one line per request (what each channel did, attempts, time used of its budget),
//! the breakers' final states, how many calls each service received (against how many a
//! naive retry loop would have made) and the orchestrator's stats panel.
//!
//! # Flags
//! - `--requests N` (default 36): how many borrow notifications to send.
//! - `--interval-ms MS` (default 25): the time between two requests.
//! - `--down CHANNEL` (default `push`): the channel that answers 503 (`mail`, `sms`, `push`
//!   or `none`).
//! - `--up-after N`: the channel that is down comes back after the N-th request, so that a
//!   half-open probe succeeds and the breaker closes.
//! - `--open-ms MS` (default 200): how long an open breaker rejects before a probe.
//! - `--slow CHANNEL=MS` (repeatable): that channel answers MS ms later; with a down
//!   channel, each failing attempt then takes longer, and the budget cuts the last one
//!   short ("attempt 3 budget=42.24 ms").
//! - `--verbose`: log the attempts of every channel, not only the watched ones.
//!
//! # Examples
//! ```text
//! cargo run --release --example notify_fanout
//! cargo run --release --example notify_fanout -- --up-after 16
//! cargo run --release --example notify_fanout -- --down sms --slow sms=250 --requests 12
//! cargo run --release --example notify_fanout -- --down none --requests 5 --verbose
//! ```

use std::collections::HashMap;
use std::error::Error;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use baton_examples::{CallError, Channel, Downstreams, Notice, OrderApi, OrderServer};
use baton_graph::{
    Backoff, CircuitBreaker, Graph, Jitter, NodeError, NodeReport, Orchestrator, Outcome, Report,
    Retry, breaker::BreakerState, observe::Event, retry::StopReason, run::RunId,
};
use clap::Parser;
use tokio::time::Instant;

/// The per-channel settings: "mail 2 s, 5 failures; sms 800 ms, 3; push 500 ms,
/// 2".
fn settings(channel: Channel) -> (Duration, u32) {
    match channel {
        Channel::Mail => (Duration::from_millis(2000), 5),
        Channel::Sms => (Duration::from_millis(800), 3),
        Channel::Push => (Duration::from_millis(500), 2),
    }
}

const MAX_ATTEMPTS: u32 = 3;

/// A notification fan-out with per-channel budgets and breakers.
#[derive(Debug, Parser)]
#[command(name = "notify_fanout")]
struct Args {
    /// How many borrow notifications to send.
    #[arg(long, value_name = "N", default_value_t = 36, value_parser = clap::value_parser!(u32).range(1..))]
    requests: u32,

    /// Milliseconds between two requests.
    #[arg(long, value_name = "MS", default_value_t = 25)]
    interval_ms: u64,

    /// The channel that answers 503: mail, sms, push or none.
    #[arg(long, value_name = "CHANNEL", default_value = "push", value_parser = parse_down)]
    down: Down,

    /// The channel that is down comes back after this many requests.
    #[arg(long, value_name = "N")]
    up_after: Option<u32>,

    /// How long an open breaker rejects calls, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 200)]
    open_ms: u64,

    /// Add latency to a channel, in milliseconds (repeatable).
    #[arg(long, value_name = "CHANNEL=MS", value_parser = parse_slow)]
    slow: Vec<(Channel, u64)>,

    /// Log every channel's attempts, not only the watched ones.
    #[arg(long)]
    verbose: bool,
}

/// `--down`: a channel, or none.
#[derive(Debug, Clone, Copy)]
struct Down(Option<Channel>);

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

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The last attempt's error in a few words: `503 Service Unavailable`, `cut at the budget`.
fn cause(error: &NodeError) -> String {
    let call = error
        .task_error()
        .and_then(|e| e.downcast_ref::<CallError>());
    if let Some(CallError::Status { status, .. }) = call {
        return status.to_string();
    }
    match error.last_attempt() {
        NodeError::DeadlineExceeded { .. } => "cut at the budget".to_owned(),
        NodeError::BreakerOpen { .. } => "breaker open".to_owned(),
        other => other.to_string(),
    }
}

/// What the observer needs to print an event: the start, the request number of each run,
/// when each attempt started, and which channels to watch.
struct Log {
    started: Instant,
    requests: Mutex<HashMap<RunId, u32>>,
    attempts: Mutex<HashMap<(RunId, String), Attempt>>,
    /// Each breaker's state, as its transitions arrive (breakers are named after channels).
    states: Mutex<HashMap<String, BreakerState>>,
    watched: Vec<Channel>,
}

/// The attempt a node of a run is making: its number, start and budget.
#[derive(Debug, Clone, Copy)]
struct Attempt {
    number: u32,
    at: Instant,
    budget: Option<Duration>,
}

impl fmt::Display for Attempt {
    /// `attempt 2  budget=452.4 ms  used=31.6 ms` (used: so far).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "attempt {}  budget=", self.number)?;
        match self.budget {
            Some(b) => write!(f, "{:>5.1} ms", ms(b))?,
            None => f.write_str("none")?,
        }
        write!(f, "  used={:>5.1} ms", ms(self.at.elapsed()))
    }
}

impl Log {
    /// The attempt `node` of `run` is making, as text.
    fn attempt(&self, run: RunId, node: &str) -> String {
        self.attempts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(run, node.to_owned()))
            .map_or_else(|| "attempt ?".to_owned(), ToString::to_string)
    }

    fn at(&self) -> String {
        format!("[{:>7.1} ms]", ms(self.started.elapsed()))
    }

    fn request(&self, run: RunId) -> u32 {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&run)
            .copied()
            .unwrap_or(0)
    }

    fn watched(&self, node: &str) -> bool {
        self.watched.iter().any(|c| c.name() == node)
    }

    fn on_event(&self, event: &Event<'_>) {
        match event {
            Event::BreakerTransition(t) => {
                self.states
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(t.breaker().to_owned(), t.to());
                println!(
                    "[{:>7.1} ms] ======== breaker `{}`: {} -> {} ({})",
                    ms(t.at().saturating_duration_since(self.started)),
                    t.breaker(),
                    t.from(),
                    t.to(),
                    t.reason()
                );
            }
            Event::AttemptStarted {
                run,
                node,
                attempt,
                budget,
                ..
            } if self.watched(node) => {
                let started = Attempt {
                    number: *attempt,
                    at: Instant::now(),
                    budget: *budget,
                };
                self.attempts
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert((*run, (*node).to_owned()), started);
            }
            Event::AttemptFailed {
                run, node, error, ..
            } if self.watched(node) => {
                let attempt = self.attempt(*run, node);
                println!(
                    "{} #{:<3} {node:<4} {attempt}  fail: {}",
                    self.at(),
                    self.request(*run),
                    cause(error)
                );
            }
            Event::RetryScheduled {
                run,
                node,
                delay,
                remaining,
                ..
            } if self.watched(node) => {
                let left =
                    remaining.map_or_else(String::new, |r| format!(" remaining={:.1} ms", ms(r)));
                println!(
                    "{} #{:<3} {node:<4} backoff {:.1} ms{left}",
                    self.at(),
                    self.request(*run),
                    ms(*delay)
                );
            }
            Event::NodeFinished {
                run,
                node,
                outcome,
                duration,
                ..
            } if self.watched(node) => {
                let last = self
                    .attempts
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&(*run, (*node).to_owned()));
                let what = match (outcome, last) {
                    // Started, no attempt: the breaker rejected it before any call.
                    (Outcome::Failed, None) => {
                        let state = self
                            .states
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .get(*node)
                            .copied()
                            .unwrap_or(BreakerState::Closed);
                        match state {
                            BreakerState::HalfOpen => {
                                "rejected: breaker half-open, its one probe is in flight".to_owned()
                            }
                            _ => "rejected: breaker open, no call made".to_owned(),
                        }
                    }
                    (Outcome::Succeeded, Some(a)) => format!("{a}  ok"),
                    (outcome, _) => format!("{outcome} after {:.1} ms", ms(*duration)),
                };
                println!("{} #{:<3} {node:<4} {what}", self.at(), self.request(*run));
            }
            _ => {}
        }
    }
}

/// One cell of the per-request table: `ok 1×151/2000 ms`, `failed 3×141/500 ms: 503 …`.
fn cell(node: &NodeReport<'_>, budget: Duration) -> String {
    let used = format!(
        "{}×{:.0}/{:.0} ms",
        node.attempts(),
        ms(node.duration()),
        ms(budget)
    );
    match (node.outcome(), node.error()) {
        (Outcome::Succeeded, _) => format!("ok {used}"),
        (Outcome::Failed, Some(NodeError::BreakerOpen { .. })) => "rejected, no call".to_owned(),
        (Outcome::Failed, Some(e @ NodeError::GaveUp { reason, .. })) => {
            let why = match reason {
                StopReason::MaxAttempts => {
                    match e.task_error().and_then(|t| t.downcast_ref::<CallError>()) {
                        Some(CallError::Status { status, .. }) => {
                            format!("{} ×{}", status.as_u16(), node.attempts())
                        }
                        _ => cause(e),
                    }
                }
                StopReason::BreakerOpened => "breaker opened".to_owned(),
                StopReason::DeadlineExceeded => "budget spent".to_owned(),
                other => other.to_string(),
            };
            format!("failed {used}: {why}")
        }
        (Outcome::Failed, Some(e)) => format!("failed {used}: {}", cause(e)),
        (outcome, _) => outcome.to_string(),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let down = args.down.0;

    let downstreams = Downstreams::new();
    if let Some(channel) = down {
        downstreams.update(channel.service(), |b| b.fail());
    }
    for &(channel, extra) in &args.slow {
        downstreams.update(channel.service(), |b| {
            b.slow_by(Duration::from_millis(extra))
        });
    }
    let server = OrderServer::start(downstreams.clone()).await?;
    let http = reqwest::Client::builder().no_proxy().build()?;
    let api = OrderApi::new(http, server.base_url());
    api.warm_up(8).await?;

    let mut watched: Vec<Channel> = if args.verbose {
        Channel::ALL.to_vec()
    } else {
        down.into_iter()
            .chain(args.slow.iter().map(|(c, _)| *c))
            .collect()
    };
    watched.sort_unstable();
    watched.dedup();
    let log = Arc::new(Log {
        started: Instant::now(),
        requests: Mutex::default(),
        attempts: Mutex::default(),
        states: Mutex::default(),
        watched,
    });
    let orch = Orchestrator::builder()
        .observer({
            let log = Arc::clone(&log);
            move |event: &Event<'_>| log.on_event(event)
        })
        .build();

    // The graph: the borrow event, fanned out to the three channels.
    let mut g = orch.graph::<Notice>();
    let borrow = g
        .node("borrow")
        .task(|ctx, ()| async move { Ok::<_, CallError>(ctx.input().clone()) });
    let mut breakers = Vec::new();
    for channel in Channel::ALL {
        let (budget, trips_after) = settings(channel);
        let breaker = CircuitBreaker::builder(channel.name())
            .consecutive_failures(trips_after)
            .open_duration(Duration::from_millis(args.open_ms))
            .build()?;
        orch.add_breaker(&breaker)?;
        let api = api.clone();
        g.node(channel.name())
            .after(borrow)
            .budget(budget)
            .retry(
                Retry::new(MAX_ATTEMPTS).backoff(
                    Backoff::exponential(Duration::from_millis(15))
                        .max_delay(Duration::from_millis(200))
                        .jitter(Jitter::None),
                ),
            )
            .breaker(&breaker)
            .task(move |ctx, notice: Arc<Notice>| {
                // The budget this attempt has left goes downstream with the request.
                let api = api.within(ctx.remaining());
                async move { api.send(channel, &notice).await }
            });
        breakers.push(breaker);
    }
    let graph: Graph<Notice> = g.build()?;

    println!(
        "{} borrow notifications, {} ms apart; {}; breakers open for {} ms",
        args.requests,
        args.interval_ms,
        match (down, args.up_after) {
            (Some(c), Some(n)) => format!("{c} is down until request {n}"),
            (Some(c), None) => format!("{c} is down (503)"),
            (None, _) => "every channel is up".to_owned(),
        },
        args.open_ms
    );
    for channel in Channel::ALL {
        let (budget, trips) = settings(channel);
        println!(
            "  {channel:<4} budget {:>4.0} ms, breaker trips after {trips} failed requests, base latency {:.0} ms",
            ms(budget),
            ms(channel.service().base_latency())
        );
    }
    println!(
        "  retry: {MAX_ATTEMPTS} attempts, backoff 15 ms ×2 (cap 200 ms), no jitter, no attempt with < 10 ms left\n"
    );

    // The stream: one run per request, `interval` apart, running concurrently.
    let mut runs = tokio::task::JoinSet::new();
    let mut ticker = tokio::time::interval(Duration::from_millis(args.interval_ms));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for n in 1..=args.requests {
        ticker.tick().await;
        if let (Some(channel), Some(up)) = (down, args.up_after) {
            if n == up + 1 {
                downstreams.update(channel.service(), |b| b.succeed());
                println!("{} -------- {channel} is back up", log.at());
            }
        }
        let run = graph.run(Notice {
            borrow_id: u64::from(n),
            user_id: 7,
            isbn: "978-7-111-54742-6".to_owned(),
        });
        log.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(run.id(), n);
        let at = log.started.elapsed();
        runs.spawn(async move { (n, at, run.await) });
    }
    let mut reports: Vec<(u32, Duration, Report)> = Vec::new();
    while let Some(done) = runs.join_next().await {
        let (n, at, result) = done?;
        match result {
            Ok(report) => reports.push((n, at, report)),
            Err(e) => println!("request {n}: {e}"),
        }
    }
    reports.sort_by_key(|(n, _, _)| *n);

    println!("\nper request (attempts×time used/budget):");
    println!(
        "{:>4}  {:>7}  {:<32}  {:<32}  push",
        "req", "at (ms)", "mail", "sms"
    );
    for (n, at, report) in &reports {
        let cells: Vec<String> = Channel::ALL
            .iter()
            .map(|c| {
                report
                    .by_name(c.name())
                    .map(|node| cell(&node, settings(*c).0))
                    .unwrap_or_default()
            })
            .collect();
        println!(
            "{n:>4}  {:>7.1}  {:<32}  {:<32}  {}",
            ms(*at),
            cells[0],
            cells[1],
            cells[2]
        );
    }

    println!();
    for (channel, breaker) in Channel::ALL.iter().zip(&breakers) {
        let delivered = reports
            .iter()
            .filter(|(_, _, r)| {
                r.by_name(channel.name())
                    .is_some_and(|n| n.outcome() == Outcome::Succeeded)
            })
            .count();
        let rejected = reports
            .iter()
            .filter(|(_, _, r)| {
                r.by_name(channel.name())
                    .is_some_and(|n| matches!(n.error(), Some(NodeError::BreakerOpen { .. })))
            })
            .count();
        let service = channel.service();
        let naive = if down == Some(*channel) {
            format!(
                " of {} possible ({MAX_ATTEMPTS} attempts × {} requests)",
                reports.len() as u32 * MAX_ATTEMPTS,
                reports.len()
            )
        } else {
            String::new()
        };
        println!(
            "{channel:<4} breaker {:<9}  delivered {delivered:>2}/{}  rejected by the breaker {rejected:>2}  \
             stopped by the server at the caller's deadline {}  calls received {}{naive}",
            breaker.state().as_str(),
            reports.len(),
            downstreams.stopped_early(service),
            downstreams.calls(service),
        );
    }
    println!("stats: {}", orch.stats());

    drop(graph);
    drop(api);
    server.shutdown().await?;
    Ok(())
}
