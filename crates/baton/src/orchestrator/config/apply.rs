//! Applying a configuration to an orchestrator: new policies registered, registered ones
//! changed in place, one event.

use std::sync::Arc;

use super::{Config, ConfigError, ConfigErrorKind, PolicySet};
use crate::observe::{ConfigAction, ConfigChange, Event};
use crate::orchestrator::registry::Registry;
use crate::orchestrator::{Orchestrator, deliver};

/// What [`Orchestrator::apply`] did: every policy the configuration named, and what
/// happened to it, in the configuration's order. That order is breakers, bulkheads, rate
/// limiters, retry budgets, then policy sets, and by name within each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    changes: Vec<ConfigChange>,
}

impl Applied {
    /// Every policy named, and what happened to it.
    #[must_use]
    pub fn changes(&self) -> &[ConfigChange] {
        &self.changes
    }

    /// Whether anything was added or updated.
    #[must_use]
    pub fn changed_anything(&self) -> bool {
        self.changes
            .iter()
            .any(|c| c.action != ConfigAction::Unchanged)
    }
}

impl Orchestrator {
    /// Applies `config`: registers the policies it names that the orchestrator lacks, and
    /// changes the settings of those it has in place, so that every graph, pipeline and run
    /// holding them sees the new thresholds from their next call.
    /// [`CircuitBreaker::reconfigure`](crate::CircuitBreaker::reconfigure),
    /// [`Bulkhead::reconfigure`](crate::Bulkhead::reconfigure) and
    /// [`RateLimiter::reconfigure`](crate::RateLimiter::reconfigure) say what a change does
    /// to calls in flight. Named policy sets replace those of the same name. The graphs and
    /// pipelines that name a changed set, built before or after, use the new one from their
    /// next run or call; runs and calls in flight keep theirs. Nothing is removed: a policy
    /// the configuration leaves out stays as it is. Sends one [`Event::ConfigApplied`] to
    /// the observers.
    ///
    /// All or nothing: everything is checked before anything changes.
    ///
    /// # Errors
    /// What [`Config::validate`] rejects; [`ConfigErrorKind::UnknownName`] for a name a
    /// policy set refers to that neither `config` nor the orchestrator has, and
    /// [`ConfigErrorKind::WrongKind`] for one the orchestrator has only as another kind;
    /// [`ConfigErrorKind::NotInPlace`] for new settings of a breaker or rate limiter whose
    /// state is shared with other processes, or of a retry budget, whose settings cannot
    /// change in place.
    pub fn apply(&self, config: &Config) -> Result<Applied, ConfigError> {
        config.validate()?;
        let changes = {
            let r = self.registry();
            check(&r, config)?;
            drop(r);
            self.apply_checked(config)
        };
        deliver(
            &self.inner.observers,
            &Event::ConfigApplied { changes: &changes },
        );
        tracing::info!(changes = changes.len(), "configuration applied");
        Ok(Applied { changes })
    }

    /// The named policy set `name`, if a configuration gave one.
    #[must_use]
    pub fn policy_set(&self, name: &str) -> Option<PolicySet> {
        self.registry()
            .policy_sets
            .get(name)
            .map(|p| PolicySet::clone(p))
    }

    fn apply_checked(&self, config: &Config) -> Vec<ConfigChange> {
        use ConfigAction::{Added, Unchanged, Updated};
        let mut changes = Vec::new();
        let mut note =
            |kind, name: &str, action| changes.push(ConfigChange::new(kind, name, action));
        let changed = |yes: bool| if yes { Updated } else { Unchanged };
        for (name, b) in &config.breakers {
            let action = match self.breaker(name) {
                Some(breaker) => {
                    changed(breaker.reconfigure(b.build_settings(name)).unwrap_or(false))
                }
                None => match b.build_settings(name).build() {
                    Ok(breaker) => self.add_breaker(&breaker).map_or(Unchanged, |()| Added),
                    Err(_) => Unchanged,
                },
            };
            note("circuit breaker", name, action);
        }
        for (name, b) in &config.bulkheads {
            let action = match self.bulkhead(name) {
                Some(h) => changed(h.reconfigure(b.max_concurrent, b.max_wait).unwrap_or(false)),
                None => self
                    .add_bulkhead(&b.build(name))
                    .map_or(Unchanged, |()| Added),
            };
            note("bulkhead", name, action);
        }
        for (name, l) in &config.rate_limiters {
            let action = match self.rate_limiter(name) {
                Some(h) => changed(
                    h.reconfigure(l.permits, l.per, l.burst(), l.max_wait)
                        .unwrap_or(false),
                ),
                None => self
                    .add_rate_limiter(&l.build(name))
                    .map_or(Unchanged, |()| Added),
            };
            note("rate limiter", name, action);
        }
        for (name, b) in &config.retry_budgets {
            let action = match self.retry_budget(name) {
                Some(_) => Unchanged,
                None => self
                    .add_retry_budget(&b.build(name))
                    .map_or(Unchanged, |()| Added),
            };
            note("retry budget", name, action);
        }
        let mut r = self.registry();
        let mut sets_changed = false;
        for (name, p) in &config.policies {
            let action = match r.policy_sets.get(name) {
                Some(old) if **old == *p => Unchanged,
                Some(_) => Updated,
                None => Added,
            };
            if action != Unchanged {
                r.policy_sets.insert(name.clone(), Arc::new(p.clone()));
                sets_changed = true;
            }
            note("policy set", name, action);
        }
        if sets_changed {
            // Under the registry's lock: a graph that reads the new count re-resolves
            // against the new sets.
            self.inner
                .policy_sets_changed
                .fetch_add(1, std::sync::atomic::Ordering::Release);
        }
        changes
    }
}

/// Checks `config` against what the registry `r` has: the names policy sets refer to, and
/// the policies that cannot change in place.
fn check(r: &Registry, config: &Config) -> Result<(), ConfigError> {
    let not_in_place = |path: String, message: String| {
        Err(ConfigError::new(path, ConfigErrorKind::NotInPlace, message))
    };
    for (name, b) in &config.breakers {
        if let Some(breaker) = r.breakers.get(name) {
            if breaker.is_shared() {
                let e = crate::policy::breaker::BreakerConfigError::SharedRules {
                    breaker: name.clone(),
                };
                return not_in_place(format!("breakers.{name}"), e.to_string());
            }
            b.build_settings(name)
                .validate()
                .map_err(|e| super::breaker_config::error(name, &e))?;
        }
    }
    for name in config.rate_limiters.keys() {
        if let Some(limiter) = r.limiters.get(name) {
            if limiter.is_shared() {
                let message = format!(
                    "rate limiter `{name}` takes its permits from a store shared by the fleet: its rate cannot change in place"
                );
                return not_in_place(format!("rate_limiters.{name}"), message);
            }
        }
    }
    for (name, b) in &config.retry_budgets {
        if r.budgets.get(name).is_some_and(|h| !b.matches(h)) {
            let message = format!(
                "retry budget `{name}` is registered with other settings, and a retry budget's settings cannot change in place: give it a new name"
            );
            return not_in_place(format!("retry_budgets.{name}"), message);
        }
    }
    for (set, p) in &config.policies {
        for (kind, key, name) in p.references() {
            let Some(name) = name else { continue };
            if config.defines(kind, name) || r.has(kind, name) {
                continue;
            }
            let path = format!("policies.{set}.{key}");
            let found: Vec<&'static str> = [
                "circuit breaker",
                "bulkhead",
                "rate limiter",
                "retry budget",
            ]
            .into_iter()
            .filter(|k| *k != kind && (r.has(k, name) || config.defines(k, name)))
            .collect();
            if found.is_empty() {
                let message =
                    format!("no {kind} named `{name}` in the configuration or the orchestrator");
                let kind = ConfigErrorKind::UnknownName {
                    kind,
                    name: name.to_owned(),
                };
                return Err(ConfigError::new(path, kind, message));
            }
            let message = format!("`{name}` is a {}, not a {kind}", found.join(" and a "));
            let kind = ConfigErrorKind::WrongKind {
                expected: kind,
                found,
                name: name.to_owned(),
            };
            return Err(ConfigError::new(path, kind, message));
        }
    }
    Ok(())
}
