//! A fleet of replicas against one downstream that goes down and comes back, with local
//! breakers and then with breakers shared through Redis.
//!
//! One command starts a `redis-server` on a free loopback port (unless `--redis URL` is
//! given), a downstream on 127.0.0.1, and `--replicas` child processes (this example run
//! with `--replica`), each calling the downstream every 2 ms through its own breaker
//! `inventory` (trips after 5 consecutive failures, open 500 ms, one half-open probe). The
//! downstream is down from 0.5 s to 2.5 s. Prints, for each kind of breaker, the calls that
//! reached the dead downstream, the time from its going down until every replica stopped
//! calling it, and the probes it received while down:
//!
//! ```text
//! cargo run --release -p baton-examples --example fleet -- --replicas 8
//! ```
//!
//! Real processes, real time: the figures vary a little from run to run.
//!
//! What a replica does is `replica` in this file; a round (the downstream and the replica
//! processes) is `round.rs`, the flags `args.rs`, the Redis server `redis.rs`.

mod args;
mod redis;
mod round;

use std::time::{Duration, Instant};

use baton_graph::{BoxError, CircuitBreaker};
use baton_redis::{RedisBreakers, RedisOptions};
use clap::Parser;

use crate::args::Args;
use crate::redis::RedisServer;

pub(crate) const DOWN_AT: Duration = Duration::from_millis(500);
pub(crate) const UP_AT: Duration = Duration::from_millis(2_500);
const RUN_FOR: Duration = Duration::from_millis(3_000);

/// A replica: calls the downstream every 2 ms through its breaker for [`RUN_FOR`].
async fn replica(args: &Args) -> Result<(), BoxError> {
    let builder = CircuitBreaker::builder(&args.name)
        .consecutive_failures(5)
        .open_duration(Duration::from_millis(500));
    let breaker = if args.mode == "shared" {
        let redis = args.redis.as_deref().unwrap_or_default();
        let redis = RedisBreakers::connect(redis, RedisOptions::default()).await?;
        builder.shared(redis.backend()).build()?
    } else {
        builder.build()?
    };
    let client = reqwest::Client::new();
    let end = Instant::now() + RUN_FOR;
    while Instant::now() < end {
        if let Ok(permit) = breaker.try_acquire() {
            let start = Instant::now();
            match client.get(&args.downstream).send().await {
                Ok(r) if r.status().is_success() => permit.success(start.elapsed()),
                _ => permit.failure(start.elapsed()),
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    if args.replica {
        return replica(&args).await;
    }
    let (url, _server) = match &args.redis {
        Some(url) => (url.clone(), None),
        None => {
            let server = RedisServer::start()?;
            (server.url(), Some(server))
        }
    };
    println!(
        "{:<8} {:>9} {:>14} {:>18} {:>18}",
        "breakers", "replicas", "calls to dead", "until all stopped", "probes while down"
    );
    for mode in ["local", "shared"] {
        let f = round::round(&args, &url, mode).await?;
        println!(
            "{:<8} {:>9} {:>14} {:>15} ms {:>18}",
            mode,
            args.replicas,
            f.calls,
            f.stopped.as_millis(),
            f.probes
        );
    }
    Ok(())
}
