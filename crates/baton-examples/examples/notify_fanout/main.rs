//! A borrow notification, fanned out to three channels with a budget and a circuit
//! breaker each, against real HTTP services on `127.0.0.1`:
//!
//! ```text
//!          ┌─> mail   budget 2000 ms, breaker `mail` trips after 5 failed requests
//! borrow ──┼─> sms    budget  800 ms, breaker `sms`  trips after 3
//!          └─> push   budget  500 ms, breaker `push` trips after 2
//! ```
//!
//! The example sends a stream of borrow notifications (each a run of the graph, started a
//! few milliseconds apart, running concurrently) while one channel is down (answers 503).
//! The comments in `fanout_graph` say how each channel retries inside its budget.
//!
//! ```text
//! cargo run --release -p baton-examples --example notify_fanout
//! ```
//!
//! The flags and more commands are `args.rs` (`--help` lists them), the observer's log of
//! attempts `log.rs`, and the per-request table and the summary `output.rs`.

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
    // Every channel retries (`Retry::new(3)`: up to 3 attempts, exponential backoff 15 ms
    // ×2, capped at 200 ms, no jitter so that the log is reproducible) inside its own budget
    // (`.budget(..)`): no attempt starts with less than 10 ms left, backoffs are clipped to
    // the budget, and each attempt's task passes the time it has left (`ctx.remaining()`)
    // on to the HTTP call, as the request's timeout and in the `x-budget-ms` header, so
    // that the service stops working when the caller stops waiting. Each channel has its
    // own breaker (one guard per downstream, not one for all), registered in one
    // `Orchestrator`, so every request shares them.
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
