//! Circuit breakers and rate limiters of [`baton_graph`] shared by every replica of a
//! service through Redis.
//!
//! Ten replicas with local breakers against a dead downstream make ten times the failed
//! calls before they all stop, and probe a recovering one ten times over. A breaker built
//! with a [`RedisBreakers::backend`] counts the failures of every replica, trips them all
//! at once, and admits its half-open probes fleet-wide.
//!
//! ```no_run
//! use baton_graph::CircuitBreaker;
//! use baton_redis::{RedisBreakers, RedisOptions};
//!
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! let redis = RedisBreakers::connect("redis://127.0.0.1:6379/", RedisOptions::default()).await?;
//! let inventory = CircuitBreaker::builder("inventory")
//!     .consecutive_failures(5)
//!     .shared(redis.backend())
//!     .build()?;
//! # Ok(())
//! # }
//! ```
//!
//! # How it works
//! - **One atomic Lua script per state change** (counting outcomes, tripping, admitting a
//!   probe, a probe's result, a manual transition). Its keys share the hash tag
//!   `{<breaker>}`, so it runs on one Redis Cluster slot, and it reads the time with
//!   `TIME` inside the script: replicas' clocks never matter. Each operation has named
//!   fields, and the breaker's rules are stored once in Redis (`<prefix>:{<breaker>}:rules`,
//!   written by a backend's first call and again if the server lost them).
//! - **Consecutive failures** are one counter; a **failure-rate window** is ten bucket
//!   counters with TTLs (a time window only: the last N calls of a fleet cannot be kept
//!   cheaply, so a count window is refused with `BreakerConfigError::NotShareable`, as are
//!   slow-call rules and recovery ramps).
//! - **A generation** numbers the shared state's transitions; outcomes sent for an older
//!   one are ignored by the script, and a reply older than the generation a replica
//!   already adopted is dropped (a slower answer never brings an earlier state back).
//! - **Outcomes are kept until Redis acknowledges them.** Each batch has a number; a
//!   batch whose sending failed is sent again once Redis answers, and the script counts
//!   each batch once.
//! - **Half-open probes** are slots taken with `SET NX PX`: `half_open_probes` in total
//!   across the fleet, and a probe that never answers frees its slot after
//!   `half_open_max_wait`. A replica's first caller after the cooldown asks for a slot and
//!   is rejected; the slot goes to the next caller. A request is valid only until its own
//!   timeout (on Redis's clock, as last read): one that reaches a paused Redis after that
//!   takes nothing. Each slot names the request that took it, and a request whose answer
//!   was lost gives its slot back once Redis answers.
//! - **No round trip on the closed path.** Each replica's breaker reads its local machine,
//!   which follows the shared state: transitions are published on a channel and the
//!   replica resyncs at once (and every [`resync_every`](RedisOptions::resync_every)
//!   besides). Outcomes are counted locally and flushed as one delta every
//!   [`flush_every`](RedisOptions::flush_every) (a few milliseconds). The trade-off: the
//!   fleet trips up to one flush interval late, so a dead downstream gets the threshold
//!   plus about one interval's worth of calls per replica; within one interval, the order
//!   of failures and successes of different replicas is lost (a success resets the
//!   consecutive count of every failure flushed before it, as if it came last).
//! - **Redis down or slow.** Every Redis call has its own timeout
//!   ([`timeout`](RedisOptions::timeout)) and none is made on a caller's path. When one
//!   fails, the breaker stops following the shared state (a transition with
//!   `TransitionReason::SharedStateLost`, counted by `baton_breaker_transitions_total` like
//!   any) and judges alone, admits everything or rejects everything, as
//!   [`unreachable`](RedisOptions::unreachable) says. It retries every `resync_every` and,
//!   once Redis answers, follows it again (`SharedStateResynced`). Calls and runs go on
//!   throughout; a run's report never depends on Redis, and each node judged meanwhile
//!   says so (`NodeReport::breaker_local`, `"breaker_local"` in JSON).
//!   A backend that never reached Redis (down at start-up, or refusing the script) makes
//!   the same loss transition; [`RedisBreakers::connect_lazy`] starts that way on purpose,
//!   and follows the shared state once Redis answers.
//! - **A quorum mode**, if [`quorum`](RedisOptions::quorum) is set, so that one bad
//!   replica does not open every replica's breaker: outcomes are not pooled, each replica
//!   trips by its own counts and opens its own breaker at once (then judges alone: its own
//!   cooldown and probes). The script adds its id to a sorted set by time (`{<breaker>}:q`,
//!   entries older than the quorum's window dropped) and opens the shared state once the
//!   set holds the quorum (`TransitionReason::ReplicasTripped`); every replica follows,
//!   and half-open probes and closing are shared as without a quorum. A replica open alone
//!   that closes by itself follows the shared state again at its next resync. Each
//!   backend is one replica, with an id of its own.
//!
//! # A rate limiter shared by the fleet
//! [`RedisBreakers::rate_limit`] makes a backend for
//! [`RateLimiter::shared`](baton_graph::RateLimiter::shared): a limit such as a
//! downstream's quota of 100 requests per second holds across every replica. Each permit
//! an attempt waits for is one atomic script (GCRA, on Redis's clock, under the key
//! `<prefix>:{<limiter>}:rate`): exact for the fleet, at the cost of one round trip per
//! permit (leased batches of permits would save round trips and lose accuracy: a replica
//! holding unused permits starves the others). While Redis does not answer, the replica
//! falls back to [`LimitFallback`]: its share of the rate, admit, or reject, with a
//! [`LimitTransition`] and a log line each way.
//!
//! # Why the `redis` crate
//! It is the most used Redis client for Rust, kept by the Redis project itself; its
//! [`ConnectionManager`](redis::aio::ConnectionManager) is a cloneable multiplexed
//! connection that reconnects by itself, and its [`Script`](redis::Script) sends a script
//! by hash (`EVALSHA`) and loads it on a `NOSCRIPT` miss. `fred` has more features (a
//! client pool, Sentinel, its own reconnection policies) than one connection and one
//! script need.

mod backend;
mod connect;
mod limiter;
mod op;
mod options;
mod reply;
mod task;

pub use backend::RedisBreakerState;
pub use connect::{ConnectError, RedisBreakers};
pub use limiter::{LIMIT_SCRIPT, LimitFallback, LimitTransition, RedisRateLimit};
pub use options::{OptionsError, Quorum, QuorumError, RedisOptions};
pub use redis::RedisError;

/// The Lua script that makes every state change of a shared breaker.
pub const SCRIPT: &str = include_str!("state.lua");

/// An id for one replica's backend, unique across processes and hosts in practice: the
/// process id, the time it was made at, and a counter.
pub(crate) fn replica_id() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{nanos:x}-{n}", std::process::id())
}
