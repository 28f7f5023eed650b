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
//!
//! The graph is `fanout_graph` in this file; the flags are `args.rs`, the observer's log
//! of attempts `log.rs`, and the per-request table and the summary `output.rs`.

mod args;
mod log;
mod output;

use std::error::Error;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use baton_examples::{CallError, Channel, Notice, OrderApi, OrderServer, ms};
use baton_graph::{
    Backoff, BuildError, CircuitBreaker, Graph, Jitter, Orchestrator, Report, Retry,
};
use clap::Parser;

use crate::args::Args;
use crate::log::Log;

/// The per-channel settings: "mail 2 s, 5 failures; sms 800 ms, 3; push 500 ms,
/// 2".
pub(crate) fn settings(channel: Channel) -> (Duration, u32) {
    match channel {
        Channel::Mail => (ms(2000), 5),
        Channel::Sms => (ms(800), 3),
        Channel::Push => (ms(500), 2),
    }
}

pub(crate) const MAX_ATTEMPTS: u32 = 3;

/// The graph: the borrow event, fanned out to the three channels, each with its budget, its
/// retries and its breaker (registered in `orch`, open for `open` once tripped).
fn fanout_graph(
    orch: &Orchestrator,
    api: &OrderApi,
    open: Duration,
) -> Result<(Graph<Notice>, Vec<CircuitBreaker>), Box<dyn Error>> {
    let mut g = orch.graph::<Notice>();
    let borrow = g
        .node("borrow")
        .task(|ctx, ()| async move { Ok::<_, CallError>(ctx.input().clone()) });
    let mut breakers = Vec::new();
    for channel in Channel::ALL {
        let (budget, trips_after) = settings(channel);
        let breaker = CircuitBreaker::builder(channel.name())
            .consecutive_failures(trips_after)
            .open_duration(open)
            .build()?;
        orch.add_breaker(&breaker)?;
        let api = api.clone();
        g.node(channel.name())
            .after(borrow)
            .budget(budget)
            .retry(
                Retry::new(MAX_ATTEMPTS).backoff(
                    Backoff::exponential(ms(15))
                        .max_delay(ms(200))
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
    let graph: Result<Graph<Notice>, BuildError> = g.build();
    Ok((graph?, breakers))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let down = args.down.0;
    let downstreams = args.downstreams();
    let server = OrderServer::start(downstreams.clone()).await?;
    let http = reqwest::Client::builder().no_proxy().build()?;
    let api = OrderApi::new(http, server.base_url());
    api.warm_up(8).await?;

    let log = Arc::new(Log::new(args.watched()));
    let orch = Orchestrator::builder()
        .observer({
            let log = Arc::clone(&log);
            move |event: &baton_graph::observe::Event<'_>| log.on_event(event)
        })
        .build();
    let (graph, breakers) = fanout_graph(&orch, &api, ms(args.open_ms))?;
    output::print_settings(&args);

    // The stream: one run per request, `interval` apart, running concurrently.
    let mut runs = tokio::task::JoinSet::new();
    let mut ticker = tokio::time::interval(ms(args.interval_ms));
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

    output::print_table(&reports);
    output::print_channels(&reports, &breakers, &downstreams, down);
    println!("stats: {}", orch.stats());

    drop(graph);
    drop(api);
    server.shutdown().await?;
    Ok(())
}
