//! The orchestrator's registries of circuit breakers, bulkheads, rate limiters and retry
//! budgets, shared by name.

use std::collections::HashMap;
use std::sync::{Arc, MutexGuard, PoisonError};

use super::{Orchestrator, deliver};
use crate::observe::Event;
use crate::policy::{Bulkhead, CircuitBreaker, RateLimiter, RetryBudget};

#[derive(Default)]
pub(super) struct Registry {
    pub(super) breakers: HashMap<String, CircuitBreaker>,
    pub(super) bulkheads: HashMap<String, Bulkhead>,
    pub(super) budgets: HashMap<String, RetryBudget>,
    pub(super) limiters: HashMap<String, RateLimiter>,
    /// Named policy sets, from configuration.
    #[cfg(feature = "serde")]
    pub(super) policy_sets: HashMap<String, Arc<super::config::PolicySet>>,
}

impl Registry {
    /// Whether a `kind` named `name` is registered. `kind` is spelled as [`NameTaken`]
    /// spells it.
    #[cfg(feature = "serde")]
    pub(super) fn has(&self, kind: &str, name: &str) -> bool {
        match kind {
            "circuit breaker" => self.breakers.contains_key(name),
            "bulkhead" => self.bulkheads.contains_key(name),
            "rate limiter" => self.limiters.contains_key(name),
            "retry budget" => self.budgets.contains_key(name),
            _ => false,
        }
    }
}

/// A registry entry was already taken by a different object with the same name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a different {kind} named `{name}` is already registered")]
pub struct NameTaken {
    /// `circuit breaker`, `bulkhead`, `rate limiter` or `retry budget`.
    pub kind: &'static str,
    /// The name.
    pub name: String,
}

macro_rules! registry_methods {
    ($field:ident, $H:ty, $kind:literal, $add:ident, $get:ident, $all:ident) => {
        #[doc = concat!("Registers `handle` as the ", $kind, " named after it.")]
        ///
        /// Registering the same handle again does nothing.
        ///
        /// # Errors
        #[doc = concat!("[`NameTaken`] when a different ", $kind, " has that name.")]
        pub fn $add(&self, handle: &$H) -> Result<(), NameTaken> {
            let mut r = self.registry();
            match r.$field.get(handle.name()) {
                Some(existing) if existing.same_as(handle) => Ok(()),
                Some(_) => Err(NameTaken {
                    kind: $kind,
                    name: handle.name().to_owned(),
                }),
                None => {
                    r.$field.insert(handle.name().to_owned(), handle.clone());
                    drop(r);
                    self.registered(handle);
                    Ok(())
                }
            }
        }

        #[doc = concat!("The ", $kind, " registered as `name`, if any.")]
        #[must_use]
        pub fn $get(&self, name: &str) -> Option<$H> {
            self.registry().$field.get(name).cloned()
        }

        #[doc = concat!("Every registered ", $kind, ", sorted by name.")]
        #[must_use]
        pub fn $all(&self) -> Vec<$H> {
            let r = self.registry();
            let mut all: Vec<$H> = r.$field.values().cloned().collect();
            all.sort_by(|a, b| a.name().cmp(b.name()));
            all
        }
    };
}

/// What happens when a policy object joins the registry.
trait Registered {
    fn registered(&self, orchestrator: &Orchestrator);
}

impl Registered for CircuitBreaker {
    /// Forwards the breaker's transitions to the observers.
    fn registered(&self, orchestrator: &Orchestrator) {
        if orchestrator.inner.observers.is_empty() {
            return;
        }
        let weak = Arc::downgrade(&orchestrator.inner);
        self.on_transition(move |t, _| {
            if let Some(inner) = weak.upgrade() {
                deliver(&inner.observers, &Event::BreakerTransition(t));
            }
        });
    }
}

impl Registered for Bulkhead {
    fn registered(&self, _: &Orchestrator) {}
}

impl Registered for RetryBudget {
    fn registered(&self, _: &Orchestrator) {}
}

impl Registered for RateLimiter {
    fn registered(&self, _: &Orchestrator) {}
}

impl Orchestrator {
    pub(super) fn registry(&self) -> MutexGuard<'_, Registry> {
        self.inner
            .registry
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn registered(&self, handle: &impl Registered) {
        handle.registered(self);
    }

    registry_methods!(
        breakers,
        CircuitBreaker,
        "circuit breaker",
        add_breaker,
        breaker,
        breakers
    );
    registry_methods!(
        bulkheads,
        Bulkhead,
        "bulkhead",
        add_bulkhead,
        bulkhead,
        bulkheads
    );
    registry_methods!(
        budgets,
        RetryBudget,
        "retry budget",
        add_retry_budget,
        retry_budget,
        retry_budgets
    );
    registry_methods!(
        limiters,
        RateLimiter,
        "rate limiter",
        add_rate_limiter,
        rate_limiter,
        rate_limiters
    );
}
