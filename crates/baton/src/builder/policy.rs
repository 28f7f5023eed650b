//! What a node declares of its policies, before `build()` resolves it: [`PolicyRef`] (a
//! handle, or a name to look up in the orchestrator) and the builder's `PolicySpec`.

use std::sync::Arc;
use std::time::Duration;

use crate::onion::{ErrorFilter, Retry};
use crate::policy::{Bulkhead, Chaos, CircuitBreaker, Hedge, RateLimiter};
use crate::util::same_opt;

/// A circuit breaker, bulkhead or rate limiter given to a node: the handle itself, or its
/// name, looked up in the graph's [`Orchestrator`](crate::Orchestrator) when the graph is
/// built.
///
/// Converts from a handle (`CircuitBreaker`, `&CircuitBreaker`, …) and from a name
/// (`&str`, `String`).
#[derive(Debug, Clone)]
pub enum PolicyRef<H> {
    /// This handle; registered in the orchestrator under its name at `build()`.
    Handle(H),
    /// The handle the orchestrator has under this name.
    Name(String),
}

impl<H> From<&str> for PolicyRef<H> {
    fn from(name: &str) -> Self {
        PolicyRef::Name(name.to_owned())
    }
}

impl<H> From<String> for PolicyRef<H> {
    fn from(name: String) -> Self {
        PolicyRef::Name(name)
    }
}

macro_rules! handle_ref {
    ($($H:ty),*) => {$(
        impl From<$H> for PolicyRef<$H> {
            fn from(h: $H) -> Self {
                PolicyRef::Handle(h)
            }
        }
        impl From<&$H> for PolicyRef<$H> {
            fn from(h: &$H) -> Self {
                PolicyRef::Handle(h.clone())
            }
        }
    )*};
}
handle_ref!(CircuitBreaker, Bulkhead, RateLimiter);

/// A node's policies as the builder collects them.
#[derive(Clone, Default)]
pub(crate) struct PolicySpec {
    pub(crate) timeout: Option<Duration>,
    pub(crate) retry: Option<Retry>,
    pub(crate) budget: Option<Duration>,
    pub(crate) min_attempt: Option<Duration>,
    pub(crate) breaker: Option<PolicyRef<CircuitBreaker>>,
    pub(crate) breaker_ignore: Option<ErrorFilter>,
    pub(crate) bulkhead: Option<PolicyRef<Bulkhead>>,
    pub(crate) rate_limit: Option<PolicyRef<RateLimiter>>,
    pub(crate) hedge: Option<Hedge>,
    pub(crate) chaos: Option<Chaos>,
    /// The fallback itself is typed and lives with the task; the policy path must run it.
    pub(crate) has_fallback: bool,
    /// The orchestrator's named policy set that fills what the node was not given.
    #[cfg(feature = "serde")]
    pub(crate) policy_set: Option<String>,
}

impl<H> PolicyRef<H> {
    /// The same handle (by `same`), or the same name.
    fn same(&self, other: &Self, same: impl Fn(&H, &H) -> bool) -> bool {
        match (self, other) {
            (PolicyRef::Handle(a), PolicyRef::Handle(b)) => same(a, b),
            (PolicyRef::Name(a), PolicyRef::Name(b)) => a == b,
            _ => false,
        }
    }
}

impl PolicySpec {
    /// Whether `self` declares the same policies as `other`: equal settings, the same
    /// handles (or names), the same closures. The graph builder keeps one record for the
    /// nodes declared alike, and `build()` resolves it once for all of them.
    pub(crate) fn same(&self, other: &Self) -> bool {
        self.timeout == other.timeout
            && self.budget == other.budget
            && self.min_attempt == other.min_attempt
            && self.has_fallback == other.has_fallback
            && same_opt(&self.retry, &other.retry, Retry::same)
            && same_opt(&self.breaker, &other.breaker, |a, b| {
                a.same(b, CircuitBreaker::same_as)
            })
            && same_opt(&self.breaker_ignore, &other.breaker_ignore, |a, b| {
                Arc::ptr_eq(a, b)
            })
            && same_opt(&self.bulkhead, &other.bulkhead, |a, b| {
                a.same(b, Bulkhead::same_as)
            })
            && same_opt(&self.rate_limit, &other.rate_limit, |a, b| {
                a.same(b, RateLimiter::same_as)
            })
            && same_opt(&self.hedge, &other.hedge, Hedge::same_as)
            && same_opt(&self.chaos, &other.chaos, Chaos::same_as)
            && self.same_set(other)
    }

    #[cfg(feature = "serde")]
    fn same_set(&self, other: &Self) -> bool {
        self.policy_set == other.policy_set
    }

    #[cfg(not(feature = "serde"))]
    fn same_set(&self, _: &Self) -> bool {
        true
    }

    /// Fills what the node was not given from its policy set, if it has one.
    #[cfg(feature = "serde")]
    pub(crate) fn with_policy_set(
        mut self,
        node: &str,
        orchestrator: &crate::orchestrator::Orchestrator,
    ) -> Result<Self, crate::error::BuildError> {
        let Some(name) = self.policy_set.take() else {
            return Ok(self);
        };
        let set = crate::onion::resolve_set(orchestrator, &name, node)?;
        self.timeout = self.timeout.or(set.timeout);
        self.budget = self.budget.or(set.budget);
        self.min_attempt = self.min_attempt.or(set.min_attempt);
        self.retry = self.retry.or(set.retry);
        self.breaker = self.breaker.or(set.breaker.map(PolicyRef::Handle));
        self.bulkhead = self.bulkhead.or(set.bulkhead.map(PolicyRef::Handle));
        self.rate_limit = self.rate_limit.or(set.rate_limit.map(PolicyRef::Handle));
        self.hedge = self.hedge.or(set.hedge);
        Ok(self)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.timeout.is_none()
            && self.min_attempt.is_none()
            && self.retry.is_none()
            && self.budget.is_none()
            && self.breaker.is_none()
            && self.bulkhead.is_none()
            && self.rate_limit.is_none()
            && self.hedge.is_none()
            && self.chaos.is_none()
            && !self.has_fallback
            && self.no_set()
    }

    #[cfg(feature = "serde")]
    fn no_set(&self) -> bool {
        self.policy_set.is_none()
    }

    #[cfg(not(feature = "serde"))]
    fn no_set(&self) -> bool {
        true
    }
}
