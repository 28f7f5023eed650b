//! Policies from configuration: circuit breakers, bulkheads, rate limiters, retry budgets
//! and named policy sets, read from any serde format such as TOML, YAML or JSON, checked,
//! and applied to an [`Orchestrator`](crate::Orchestrator), at start and again on a reload.
//!
//! Durations are written the way people write them: `"300ms"`, `"2s"`, `"1m 30s"`. Every
//! key is known: an unknown key, a bad duration and an impossible value are errors that
//! name the key's path, such as `breakers.inventory.failure_rate.threshold`.
//!
//! ```
//! use baton_graph::{Orchestrator, config::Config};
//!
//! let text = r#"{
//!     "breakers": { "inventory": { "consecutive_failures": 3, "open_duration": "2s" } },
//!     "bulkheads": { "db": { "max_concurrent": 8, "max_wait": "50ms" } },
//!     "policies": { "checkout": { "timeout": "300ms", "breaker": "inventory" } }
//! }"#;
//! let config = Config::from_deserializer(&mut serde_json::Deserializer::from_str(text))?;
//! let orch = Orchestrator::new();
//! let applied = orch.apply(&config)?;
//! assert_eq!(applied.changes().len(), 3);
//! assert!(orch.breaker("inventory").is_some());
//! assert!(orch.policy_set("checkout").is_some());
//!
//! let bad = r#"{ "breakers": { "inventory": {
//!     "failure_rate": { "threshold": 1.5, "window": 20, "min_calls": 10 }
//! } } }"#;
//! let err = Config::from_deserializer(&mut serde_json::Deserializer::from_str(bad)).unwrap_err();
//! assert_eq!(err.path(), "breakers.inventory.failure_rate.threshold");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod apply;
mod breaker_config;
mod config_error;
mod limit_configs;
mod policy_set;

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

pub use apply::Applied;
pub use breaker_config::{BreakerConfig, FailureRateConfig, GrowthConfig, SlowCallsConfig};
pub use config_error::{ConfigError, ConfigErrorKind};
pub use limit_configs::{BulkheadConfig, RateLimiterConfig, RetryBudgetConfig};
pub use policy_set::{BackoffConfig, HedgeConfig, PolicySet, RetryConfig};

pub use crate::observe::{ConfigAction, ConfigChange};

/// A configuration file's policies, by name: what [`Orchestrator::apply`] registers or
/// updates. Every map may be left out.
///
/// Read it with [`Config::from_deserializer`] from any serde format, or build it in code
/// and check it with [`Config::validate`]. Reading rejects impossible values too, and its
/// error names the key's path.
///
/// [`Orchestrator::apply`]: crate::Orchestrator::apply
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Config {
    /// Circuit breakers, as in `[breakers.inventory]`.
    #[serde(default)]
    pub breakers: BTreeMap<String, BreakerConfig>,
    /// Bulkheads, as in `[bulkheads.db]`.
    #[serde(default)]
    pub bulkheads: BTreeMap<String, BulkheadConfig>,
    /// Rate limiters, as in `[rate_limiters.inventory]`.
    #[serde(default)]
    pub rate_limiters: BTreeMap<String, RateLimiterConfig>,
    /// Retry budgets, as in `[retry_budgets.inventory]`.
    #[serde(default)]
    pub retry_budgets: BTreeMap<String, RetryBudgetConfig>,
    /// Named policy sets that nodes and pipelines take by name, as in
    /// `[policies.checkout]`.
    #[serde(default)]
    pub policies: BTreeMap<String, PolicySet>,
}

impl Config {
    /// Reads a configuration from `deserializer` and [validates](Self::validate) it.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the key's path: [`ConfigErrorKind::Format`] for what the
    /// format or the schema rejects, such as a syntax error, an unknown key, a bad duration
    /// or a wrong type; else what [`validate`](Self::validate) rejects.
    pub fn from_deserializer<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Config, ConfigError> {
        let config: Config = serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let path = e.path().to_string();
            ConfigError::format(path, e.into_inner().to_string())
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Checks every value with the same rules as the builders, and that each name a policy
    /// set refers to is defined in this configuration.
    ///
    /// A policy set may also name a policy that is only registered in the orchestrator, in
    /// code or by an earlier configuration: [`Orchestrator::apply`] checks those. This
    /// check only rejects a name defined here under another kind, such as a `breaker` that
    /// is a bulkhead here, and no breaker.
    ///
    /// # Errors
    /// The first impossible value, as [`ConfigErrorKind::Invalid`], or wrongly kinded name,
    /// as [`ConfigErrorKind::WrongKind`], with its key's path.
    ///
    /// [`Orchestrator::apply`]: crate::Orchestrator::apply
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, b) in &self.breakers {
            b.build_settings(name)
                .validate()
                .map_err(|e| breaker_config::error(name, &e))?;
        }
        for (name, b) in &self.bulkheads {
            b.check(name)?;
        }
        for (name, l) in &self.rate_limiters {
            l.check(name)?;
        }
        for (name, r) in &self.retry_budgets {
            r.check(name)?;
        }
        for (name, p) in &self.policies {
            p.check(name, self)?;
        }
        Ok(())
    }

    /// The kinds under which `name` is defined in this configuration, besides `kind`.
    pub(crate) fn other_kinds(&self, name: &str, kind: &str) -> Vec<&'static str> {
        let defined = [
            ("circuit breaker", self.breakers.contains_key(name)),
            ("bulkhead", self.bulkheads.contains_key(name)),
            ("rate limiter", self.rate_limiters.contains_key(name)),
            ("retry budget", self.retry_budgets.contains_key(name)),
        ];
        defined
            .into_iter()
            .filter(|&(k, there)| there && k != kind)
            .map(|(k, _)| k)
            .collect()
    }

    /// Whether `name` is defined here as a `kind`.
    pub(crate) fn defines(&self, kind: &str, name: &str) -> bool {
        match kind {
            "circuit breaker" => self.breakers.contains_key(name),
            "bulkhead" => self.bulkheads.contains_key(name),
            "rate limiter" => self.rate_limiters.contains_key(name),
            "retry budget" => self.retry_budgets.contains_key(name),
            _ => false,
        }
    }
}
