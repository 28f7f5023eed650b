//! Circuit breakers of [`baton_graph`] shared by every replica of a service through Redis.
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
//!   `TIME` inside the script: replicas' clocks never matter.
//! - **Consecutive failures** are one counter; a **failure-rate window** is ten bucket
//!   counters with TTLs (a time window only: the last N calls of a fleet cannot be kept
//!   cheaply, so a count window is refused with `BreakerConfigError::NotShareable`, as are
//!   slow-call rules and recovery ramps).
//! - **A generation** numbers the shared state's transitions; outcomes sent for an older
//!   one are ignored by the script.
//! - **Half-open probes** are slots taken with `SET NX PX`: `half_open_probes` in total
//!   across the fleet, and a probe that never answers frees its slot after
//!   `half_open_max_wait`. A replica's first caller after the cooldown asks for a slot and
//!   is rejected; the slot goes to the next caller.
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
//!   throughout; a run's report never depends on Redis.
//!
//! # Why the `redis` crate
//! It is the most used Redis client for Rust, kept by the Redis project itself; its
//! [`ConnectionManager`] is a cloneable multiplexed
//! connection that reconnects by itself, and its [`Script`](redis::Script) sends a script
//! by hash (`EVALSHA`) and loads it on a `NOSCRIPT` miss. `fred` has more features (a
//! client pool, Sentinel, its own reconnection policies) than one connection and one
//! script need.

mod backend;
mod reply;

use std::time::Duration;

use baton_graph::shared::Unreachable;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

pub use backend::RedisBreakerState;
pub use redis::RedisError;

/// The Lua script that makes every state change.
pub const SCRIPT: &str = include_str!("state.lua");

/// Settings of the Redis backend.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RedisOptions {
    /// How long one Redis call may take before the breaker judges alone. Default 50 ms.
    /// A replica so loaded that Redis's answers take longer is treated as cut off too (it
    /// judges alone, and probes on its own): set it well above the latency seen under load.
    pub timeout: Duration,
    /// How often batched outcomes are flushed. Default 5 ms.
    pub flush_every: Duration,
    /// How often the shared state is read again (besides the published transitions), and
    /// Redis retried while it cannot be reached. Default 250 ms.
    pub resync_every: Duration,
    /// What the breaker does while Redis cannot be reached. Default: judge alone.
    pub unreachable: Unreachable,
    /// The first part of every key: `<prefix>:{<breaker>}:…`. Default `baton`.
    pub key_prefix: String,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            timeout: Duration::from_millis(50),
            flush_every: Duration::from_millis(5),
            resync_every: Duration::from_millis(250),
            unreachable: Unreachable::Local,
            key_prefix: "baton".to_owned(),
        }
    }
}

impl RedisOptions {
    /// Sets [`timeout`](Self::timeout).
    #[must_use]
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = d;
        self
    }

    /// Sets [`flush_every`](Self::flush_every).
    #[must_use]
    pub fn flush_every(mut self, d: Duration) -> Self {
        self.flush_every = d;
        self
    }

    /// Sets [`resync_every`](Self::resync_every).
    #[must_use]
    pub fn resync_every(mut self, d: Duration) -> Self {
        self.resync_every = d;
        self
    }

    /// Sets [`unreachable`](Self::unreachable).
    #[must_use]
    pub fn unreachable(mut self, mode: Unreachable) -> Self {
        self.unreachable = mode;
        self
    }

    /// Sets [`key_prefix`](Self::key_prefix).
    #[must_use]
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }
}

/// A connection to Redis that makes shared-state backends for breakers.
#[derive(Clone)]
pub struct RedisBreakers {
    client: redis::Client,
    conn: ConnectionManager,
    options: RedisOptions,
    runtime: tokio::runtime::Handle,
}

impl std::fmt::Debug for RedisBreakers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBreakers")
            .field("server", &self.client.get_connection_info().addr())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl RedisBreakers {
    /// Connects to the Redis server at `url` (`redis://host:port/db`,
    /// `redis+unix:///path`). Must be called inside a tokio runtime, on which the
    /// backends' tasks then run.
    ///
    /// # Errors
    /// The URL is invalid or the server cannot be reached within `options.timeout` (a
    /// [`RedisError`]).
    pub async fn connect(url: &str, options: RedisOptions) -> Result<Self, RedisError> {
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(options.timeout))
            .set_response_timeout(Some(options.timeout))
            .set_number_of_retries(1);
        let conn = ConnectionManager::new_with_config(client.clone(), config).await?;
        Ok(RedisBreakers {
            client,
            conn,
            options,
            runtime: tokio::runtime::Handle::current(),
        })
    }

    /// A backend for one breaker: give it to
    /// [`CircuitBreakerBuilder::shared`](baton_graph::CircuitBreakerBuilder::shared). Every
    /// breaker with the same name (and key prefix) on this server shares its state.
    #[must_use]
    pub fn backend(&self) -> RedisBreakerState {
        RedisBreakerState::new(self)
    }
}
