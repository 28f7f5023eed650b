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
    }
}
