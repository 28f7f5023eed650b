//! The public API's contract, one module per area: what a user of baton can rely on, tested
//! only through the public API.

mod api;
mod breaker;
mod breaker_burst;
mod breaker_control;
mod breaker_shared;
mod bulkhead;
mod chaos;
mod compensation;
#[cfg(feature = "serde")]
mod config;
#[cfg(feature = "axum")]
mod deadlines;
mod export;
mod failure_modes;
mod fallback;
mod hedge;
mod lifecycle;
mod map;
mod observe;
mod onion;
mod pipeline;
mod rate_limit;
mod retry;
mod robustness;
mod routing;
mod schedule;
mod shape;
mod skip;
mod subgraph;
#[cfg(feature = "tower")]
mod tower;
mod validation;

use std::time::Duration;

/// `n` milliseconds: how every test here writes a duration.
fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
