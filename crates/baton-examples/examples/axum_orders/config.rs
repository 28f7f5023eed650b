//! How the order service runs its graph: the run's budget, the `sku` concurrency limit and
//! the `inventory` circuit breaker every request shares.

use std::time::Duration;

use baton_graph::{CircuitBreaker, breaker::BreakerConfigError};

/// How the order service runs its graph.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// The whole run's time budget, counted from each request's start.
    pub(crate) run_timeout: Duration,
    /// The most `sku` calls in flight at once (the tower concurrency limit).
    pub(crate) sku_concurrency: usize,
    /// The `inventory` breaker `stock` calls through: shared by every request.
    pub(crate) inventory: CircuitBreaker,
}

impl Config {
    /// A 2 s run budget, 64 `sku` calls at once, and an `inventory` breaker that opens after
    /// 5 consecutive failed requests, for 3 s.
    ///
    /// # Errors
    /// Never in practice: the breaker's settings are valid.
    pub(crate) fn new() -> Result<Config, BreakerConfigError> {
        Ok(Config {
            run_timeout: Duration::from_secs(2),
            sku_concurrency: 64,
            inventory: CircuitBreaker::builder("inventory")
                .consecutive_failures(5)
                .open_duration(Duration::from_secs(3))
                .build()?,
        })
    }
}
