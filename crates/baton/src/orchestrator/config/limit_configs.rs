//! Bulkheads, rate limiters and retry budgets in a configuration.

use std::time::Duration;

use serde::Deserialize;

use super::ConfigError;
use crate::policy::{Bulkhead, RateLimiter, RetryBudget};

/// A bulkhead's settings, under `[bulkheads.NAME]`, as [`Bulkhead::new`] takes them.
///
/// ```toml
/// [bulkheads.db]
/// max_concurrent = 8
/// max_wait = "50ms" # default: 0, do not wait
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct BulkheadConfig {
    /// At most this many attempts at once, `1..=Bulkhead::MAX_CONCURRENT`.
    pub max_concurrent: usize,
    /// How long an attempt waits at most for a permit.
    #[serde(default, with = "humantime_serde")]
    pub max_wait: Duration,
}

/// A rate limiter's settings, under `[rate_limiters.NAME]`, as [`RateLimiter::new`],
/// [`burst`](RateLimiter::burst) and [`max_wait`](RateLimiter::max_wait) take them.
///
/// ```toml
/// [rate_limiters.inventory]
/// permits = 100
/// per = "1s"
/// burst = 10        # default: permits
/// max_wait = "50ms" # default: 0, do not wait
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RateLimiterConfig {
    /// Permits per period, at least 1.
    pub permits: u32,
    /// The period, above zero.
    #[serde(with = "humantime_serde")]
    pub per: Duration,
    /// How many permits may come at once; `permits` when left out.
    pub burst: Option<u32>,
    /// How long an attempt waits at most for a permit.
    #[serde(default, with = "humantime_serde")]
    pub max_wait: Duration,
}

/// A retry budget's settings, under `[retry_budgets.NAME]`, as [`RetryBudget::with`] takes
/// them, with [`RetryBudget::new`]'s defaults.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RetryBudgetConfig {
    /// How long a call counts toward the budget, 1 s to 1 hour; default 10 s.
    #[serde(default = "default_ttl", with = "humantime_serde")]
    pub ttl: Duration,
    /// Retries allowed per second whatever the calls; default 10.
    #[serde(default = "default_min_per_sec")]
    pub min_per_sec: u32,
    /// Retries allowed per call, 0 to 1000; default 0.2.
    #[serde(default = "default_ratio")]
    pub ratio: f64,
}

fn default_ttl() -> Duration {
    Duration::from_secs(10)
}

fn default_min_per_sec() -> u32 {
    10
}

fn default_ratio() -> f64 {
    0.2
}

impl BulkheadConfig {
    pub(crate) fn check(&self, name: &str) -> Result<(), ConfigError> {
        Bulkhead::check(name, self.max_concurrent)
            .map_err(|e| ConfigError::invalid(format!("bulkheads.{name}.max_concurrent"), e))
    }

    pub(crate) fn build(&self, name: &str) -> Bulkhead {
        Bulkhead::new(name, self.max_concurrent, self.max_wait)
    }
}

impl RateLimiterConfig {
    pub(crate) fn burst(&self) -> u32 {
        self.burst.unwrap_or(self.permits)
    }

    pub(crate) fn check(&self, name: &str) -> Result<(), ConfigError> {
        RateLimiter::check(name, self.permits, self.per, self.burst())
            .map_err(|(field, e)| ConfigError::invalid(format!("rate_limiters.{name}.{field}"), e))
    }

    pub(crate) fn build(&self, name: &str) -> RateLimiter {
        RateLimiter::new(name, self.permits, self.per)
            .burst(self.burst())
            .max_wait(self.max_wait)
    }
}

impl RetryBudgetConfig {
    pub(crate) fn check(&self, name: &str) -> Result<(), ConfigError> {
        RetryBudget::check(name, self.ttl, self.ratio)
            .map_err(|(field, e)| ConfigError::invalid(format!("retry_budgets.{name}.{field}"), e))
    }

    pub(crate) fn build(&self, name: &str) -> RetryBudget {
        RetryBudget::with(name, self.ttl, self.min_per_sec, self.ratio)
    }

    /// Whether `budget` has these settings.
    pub(crate) fn matches(&self, budget: &RetryBudget) -> bool {
        let (ttl, min_per_sec, ratio) = budget.settings();
        ttl == self.ttl
            && min_per_sec == self.min_per_sec
            && ratio.to_bits() == self.ratio.to_bits()
    }
}
