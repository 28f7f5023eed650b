//! Named policy sets: the policies of a node or a pipeline, by name, in a configuration.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::{Config, ConfigError, ConfigErrorKind};
use crate::policy::{Backoff, DEFAULT_MIN_ATTEMPT_TIME, Hedge, Jitter};

/// The policies of a node or a pipeline, under a name, `[policies.NAME]`; nodes and
/// pipelines take it by that name. The circuit breaker, bulkhead, rate limiter and retry
/// budget are names too, of policies in the same configuration or in the orchestrator.
///
/// ```toml
/// [policies.checkout]
/// timeout = "300ms"
/// budget = "2s"
/// breaker = "inventory"
/// bulkhead = "db"
/// retry = { max_attempts = 3, backoff = { exponential = "100ms", max_delay = "1s", jitter = "full" } }
/// hedge = { delay = "50ms", max_hedges = 1 }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct PolicySet {
    /// The per-attempt timeout, above zero.
    #[serde(default, with = "humantime_serde")]
    pub timeout: Option<Duration>,
    /// The node's budget for all its attempts, above zero.
    #[serde(default, with = "humantime_serde")]
    pub budget: Option<Duration>,
    /// No attempt starts with less time than this left; 10 ms when left out.
    #[serde(default, with = "humantime_serde")]
    pub min_attempt_time: Option<Duration>,
    /// Retries.
    pub retry: Option<RetryConfig>,
    /// The circuit breaker's name.
    pub breaker: Option<String>,
    /// The bulkhead's name.
    pub bulkhead: Option<String>,
    /// The rate limiter's name.
    pub rate_limiter: Option<String>,
    /// Hedged attempts.
    pub hedge: Option<HedgeConfig>,
}

/// Retries: at most `max_attempts` attempts, waiting `backoff` between them, taking each
/// retry from the retry budget `budget` when one is named.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RetryConfig {
    /// Attempts in all, the first one included; at least 1.
    pub max_attempts: u32,
    /// The waits between attempts; none when left out.
    pub backoff: Option<BackoffConfig>,
    /// The retry budget's name.
    pub budget: Option<String>,
}

/// A backoff: exactly one of `exponential`, giving its base, and `constant`, giving its
/// delay, and a jitter: `none`, `full`, `equal` or `decorrelated`.
///
/// ```toml
/// backoff = { exponential = "100ms", multiplier = 2.0, max_delay = "2s", jitter = "full" }
/// backoff = { constant = "250ms" }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct BackoffConfig {
    /// The first delay of an exponential backoff; see [`Backoff::exponential`].
    #[serde(default, with = "humantime_serde")]
    pub exponential: Option<Duration>,
    /// The delay of a constant backoff; see [`Backoff::constant`].
    #[serde(default, with = "humantime_serde")]
    pub constant: Option<Duration>,
    /// An exponential backoff's factor; see [`Backoff::multiplier`].
    pub multiplier: Option<f64>,
    /// An exponential backoff's cap; see [`Backoff::max_delay`].
    #[serde(default, with = "humantime_serde")]
    pub max_delay: Option<Duration>,
    /// The jitter; none when left out.
    #[serde(default)]
    pub jitter: Jitter,
}

/// A hedge, as [`Hedge`] takes it: either a `delay`, with `max_hedges` and a `percentile`
/// over `min_samples`, or `all_at_once` attempts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct HedgeConfig {
    /// Hedge an attempt not ended after this; see [`Hedge::new`].
    #[serde(default, with = "humantime_serde")]
    pub delay: Option<Duration>,
    /// Start this many attempts at once; see [`Hedge::all_at_once`].
    pub all_at_once: Option<u32>,
    /// At most this many hedges per attempt; see [`Hedge::max_hedges`].
    pub max_hedges: Option<u32>,
    /// Hedge after this percentile of recent latencies; see [`Hedge::percentile`].
    pub percentile: Option<f64>,
    /// How many latencies the percentile needs first; 10 when left out.
    pub min_samples: Option<usize>,
}

impl BackoffConfig {
    /// The backoff, checked as a node's build checks it.
    ///
    /// # Errors
    /// Why it cannot work: neither or both of `exponential` and `constant`, settings of
    /// one given to the other, a bad multiplier or cap.
    pub fn to_backoff(&self) -> Result<Backoff, String> {
        let backoff = match (self.exponential, self.constant) {
            (Some(base), None) => {
                let mut b = Backoff::exponential(base);
                if let Some(m) = self.multiplier {
                    b = b.multiplier(m);
                }
                if let Some(max) = self.max_delay {
                    b = b.max_delay(max);
                }
                b
            }
            (None, Some(delay)) if self.multiplier.is_none() && self.max_delay.is_none() => {
                Backoff::constant(delay)
            }
            (None, Some(_)) => {
                return Err("`multiplier` and `max_delay` are for an exponential backoff".into());
            }
            _ => return Err("give exactly one of `exponential` and `constant`".into()),
        };
        let backoff = backoff.jitter(self.jitter);
        backoff.validate()?;
        Ok(backoff)
    }
}

impl HedgeConfig {
    /// The hedge, checked as a node's build checks it.
    ///
    /// # Errors
    /// Why it cannot work: neither or both of `delay` and `all_at_once`, or a setting
    /// `Hedge` rejects.
    pub fn to_hedge(&self) -> Result<Hedge, String> {
        let hedge = match (self.delay, self.all_at_once) {
            (Some(delay), None) => {
                let mut h = Hedge::new(delay);
                if let Some(max) = self.max_hedges {
                    h = h.max_hedges(max);
                }
                if let Some(p) = self.percentile {
                    h = h.percentile(p, self.min_samples.unwrap_or(10));
                }
                h
            }
            (None, Some(n)) if self.max_hedges.is_none() && self.percentile.is_none() => {
                Hedge::all_at_once(n)
            }
            (None, Some(_)) => {
                return Err("`max_hedges` and `percentile` are for a hedge with a `delay`".into());
            }
            _ => return Err("give exactly one of `delay` and `all_at_once`".into()),
        };
        hedge.validate()?;
        Ok(hedge)
    }
}

/// A backoff reads as a [`BackoffConfig`] and is checked.
impl<'de> Deserialize<'de> for Backoff {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        BackoffConfig::deserialize(deserializer)?
            .to_backoff()
            .map_err(serde::de::Error::custom)
    }
}

/// A hedge reads as a [`HedgeConfig`] and is checked.
impl<'de> Deserialize<'de> for Hedge {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        HedgeConfig::deserialize(deserializer)?
            .to_hedge()
            .map_err(serde::de::Error::custom)
    }
}

impl PolicySet {
    /// Checks the policy set `name` of `config`.
    pub(crate) fn check(&self, name: &str, config: &Config) -> Result<(), ConfigError> {
        let at = |key: &str| format!("policies.{name}.{key}");
        let zero = |key: &str, d: Option<Duration>| match d {
            Some(d) if d.is_zero() => Err(ConfigError::invalid(at(key), "must be above zero")),
            _ => Ok(()),
        };
        zero("timeout", self.timeout)?;
        zero("budget", self.budget)?;
        let min = self.min_attempt_time.unwrap_or(DEFAULT_MIN_ATTEMPT_TIME);
        if let Some(budget) = self.budget.filter(|b| *b < min) {
            let message = format!(
                "a budget of {budget:?} is below the minimum attempt time of {min:?}: no attempt could ever start"
            );
            return Err(ConfigError::invalid(at("budget"), message));
        }
        if let Some(retry) = &self.retry {
            if retry.max_attempts == 0 {
                let message = "retry needs at least 1 attempt, got 0";
                return Err(ConfigError::invalid(at("retry.max_attempts"), message));
            }
            if let Some(b) = &retry.backoff {
                b.to_backoff()
                    .map_err(|e| ConfigError::invalid(at("retry.backoff"), e))?;
            }
            check_name(config, &at("retry.budget"), "retry budget", &retry.budget)?;
        }
        if let Some(h) = &self.hedge {
            h.to_hedge()
                .map_err(|e| ConfigError::invalid(at("hedge"), e))?;
        }
        check_name(config, &at("breaker"), "circuit breaker", &self.breaker)?;
        check_name(config, &at("bulkhead"), "bulkhead", &self.bulkhead)?;
        check_name(
            config,
            &at("rate_limiter"),
            "rate limiter",
            &self.rate_limiter,
        )
    }

    /// The names this set refers to, with their kind and key.
    pub(crate) fn references(&self) -> [(&'static str, &'static str, Option<&str>); 4] {
        [
            ("circuit breaker", "breaker", self.breaker.as_deref()),
            ("bulkhead", "bulkhead", self.bulkhead.as_deref()),
            ("rate limiter", "rate_limiter", self.rate_limiter.as_deref()),
            (
                "retry budget",
                "retry.budget",
                self.retry.as_ref().and_then(|r| r.budget.as_deref()),
            ),
        ]
    }
}

/// A name defined in `config` only under another kind than `kind` is an error.
fn check_name(
    config: &Config,
    path: &str,
    kind: &'static str,
    name: &Option<String>,
) -> Result<(), ConfigError> {
    let Some(name) = name else {
        return Ok(());
    };
    if config.defines(kind, name) {
        return Ok(());
    }
    let found = config.other_kinds(name, kind);
    if found.is_empty() {
        return Ok(());
    }
    let message = format!("`{name}` is a {} here, not a {kind}", found.join(" and a "));
    let kind = ConfigErrorKind::WrongKind {
        expected: kind,
        found,
        name: name.clone(),
    };
    Err(ConfigError::new(path.to_owned(), kind, message))
}
