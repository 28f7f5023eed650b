//! A circuit breaker's settings in a configuration.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Unexpected, Visitor};
use serde::{Deserialize, Deserializer};

use super::ConfigError;
use crate::policy::CircuitBreaker;
use crate::policy::breaker::{BreakerConfigError, BreakerWindow, CircuitBreakerBuilder};

/// A circuit breaker's settings, under `[breakers.NAME]`: the setters of
/// [`CircuitBreakerBuilder`], each optional, with the builder's defaults.
///
/// ```toml
/// [breakers.inventory]
/// failure_rate = { threshold = 0.5, window = 20, min_calls = 10 } # or window = "10s"
/// slow_calls = { slower_than = "1s", rate = 0.8 }
/// open_duration = "5s"
/// open_duration_growth = { multiplier = 2.0, max = "1m" }
/// half_open_probes = 2
/// ```
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct BreakerConfig {
    /// [`CircuitBreakerBuilder::consecutive_failures`].
    pub consecutive_failures: Option<u32>,
    /// [`CircuitBreakerBuilder::failure_rate`].
    pub failure_rate: Option<FailureRateConfig>,
    /// [`CircuitBreakerBuilder::slow_calls`].
    pub slow_calls: Option<SlowCallsConfig>,
    /// [`CircuitBreakerBuilder::open_duration`].
    #[serde(default, with = "humantime_serde")]
    pub open_duration: Option<Duration>,
    /// [`CircuitBreakerBuilder::open_duration_growth`].
    pub open_duration_growth: Option<GrowthConfig>,
    /// [`CircuitBreakerBuilder::half_open_probes`].
    pub half_open_probes: Option<u32>,
    /// [`CircuitBreakerBuilder::half_open_max_wait`].
    #[serde(default, with = "humantime_serde")]
    pub half_open_max_wait: Option<Duration>,
    /// [`CircuitBreakerBuilder::recovery_ramp`].
    #[serde(default, with = "humantime_serde")]
    pub recovery_ramp: Option<Duration>,
    /// [`CircuitBreakerBuilder::count_every_attempt`].
    pub count_every_attempt: Option<bool>,
}

/// The failure-rate rule: trip when failures / calls in `window` reach `threshold`, once
/// the window holds `min_calls` calls.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct FailureRateConfig {
    /// In `(0, 1]`.
    pub threshold: f64,
    /// A number of calls, such as `20`, or a duration, such as `"10s"`.
    pub window: BreakerWindow,
    /// At least 1, and at most a count window's size.
    pub min_calls: u32,
}

/// The slow-call rule: a call of at least `slower_than` is slow; trip at `rate`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct SlowCallsConfig {
    /// Above zero.
    #[serde(with = "humantime_serde")]
    pub slower_than: Duration,
    /// In `(0, 1]`.
    pub rate: f64,
}

/// The open duration's growth on repeated trips.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct GrowthConfig {
    /// Finite and at least 1.
    pub multiplier: f64,
    /// At least the open duration.
    #[serde(with = "humantime_serde")]
    pub max: Duration,
}

impl BreakerConfig {
    /// The builder of the breaker `name` with these settings.
    pub(crate) fn build_settings(&self, name: &str) -> CircuitBreakerBuilder {
        let mut b = CircuitBreaker::builder(name);
        if let Some(n) = self.consecutive_failures {
            b = b.consecutive_failures(n);
        }
        if let Some(r) = self.failure_rate {
            b = b.failure_rate(r.threshold, r.window, r.min_calls);
        }
        if let Some(s) = self.slow_calls {
            b = b.slow_calls(s.slower_than, s.rate);
        }
        if let Some(d) = self.open_duration {
            b = b.open_duration(d);
        }
        if let Some(g) = self.open_duration_growth {
            b = b.open_duration_growth(g.multiplier, g.max);
        }
        if let Some(n) = self.half_open_probes {
            b = b.half_open_probes(n);
        }
        if let Some(d) = self.half_open_max_wait {
            b = b.half_open_max_wait(d);
        }
        if let Some(d) = self.recovery_ramp {
            b = b.recovery_ramp(d);
        }
        if let Some(yes) = self.count_every_attempt {
            b = b.count_every_attempt(yes);
        }
        b
    }
}

/// The configuration error of the breaker `name` that the builder rejected with `e`.
pub(crate) fn error(name: &str, e: &BreakerConfigError) -> ConfigError {
    let field = match e {
        BreakerConfigError::Zero { field, .. }
        | BreakerConfigError::RateOutOfRange { field, .. }
        | BreakerConfigError::TooLarge { field, .. } => field,
        BreakerConfigError::InvalidMultiplier { .. } => "open_duration_growth.multiplier",
        BreakerConfigError::GrowthCapBelowOpenDuration { .. } => "open_duration_growth.max",
        BreakerConfigError::MinCallsExceedWindow { .. } => "failure_rate.min_calls",
        _ => "",
    };
    let path = if field.is_empty() {
        format!("breakers.{name}")
    } else {
        format!("breakers.{name}.{field}")
    };
    ConfigError::invalid(path, e)
}

/// A window is a number of calls, such as `20`, or a duration, such as `"10s"`.
impl<'de> Deserialize<'de> for BreakerWindow {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(WindowVisitor)
    }
}

struct WindowVisitor;

impl Visitor<'_> for WindowVisitor {
    type Value = BreakerWindow;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number of calls (20) or a duration (\"10s\")")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<BreakerWindow, E> {
        u32::try_from(v)
            .map(BreakerWindow::Count)
            .map_err(|_| E::invalid_value(Unexpected::Unsigned(v), &self))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<BreakerWindow, E> {
        u64::try_from(v)
            .map_err(|_| E::invalid_value(Unexpected::Signed(v), &self))
            .and_then(|v| self.visit_u64(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<BreakerWindow, E> {
        humantime::parse_duration(v)
            .map(BreakerWindow::Time)
            .map_err(|e| E::custom(format!("`{v}` is not a duration ({e})")))
    }
}
