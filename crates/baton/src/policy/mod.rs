//! Resilience policies, one module each, composed per node in a fixed onion (DESIGN rule 3;
//! seed 002 §13), inner to outer:
//!
//! 1. **attempt**: a [`Bulkhead`] permit, then the task under its per-attempt timeout
//!    (`min(timeout, time left before the deadline)`);
//! 2. **retry**: [`Retry`] with a [`Backoff`] (and [`Jitter`]), each delay clipped to the
//!    deadline minus the minimum attempt time, each retry drawn from the
//!    [`RetryBudget`] if there is one;
//! 3. **circuit breaker**: asked once before the series, told one result per series;
//! 4. **fallback**: [`Fallback`], when the inner layers failed.
//!
//! The order is not configurable: a timeout outside the retry would kill the whole series
//! (§13, counter-example one), and a breaker inside the retry would count every attempt and
//! trip after one request (counter-example two).

pub(crate) mod backoff;
pub(crate) mod breaker;
pub(crate) mod bulkhead;
pub(crate) mod deadline;
pub(crate) mod fallback;
pub(crate) mod onion;
pub(crate) mod retry;
pub(crate) mod retry_budget;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub use backoff::{Backoff, BackoffIter, DEFAULT_MAX_DELAY, Jitter};
pub(crate) use breaker::CircuitBreaker;
pub use bulkhead::Bulkhead;
pub use fallback::Fallback;
pub use retry::Retry;
use retry::same_opt;
pub use retry_budget::RetryBudget;

use crate::error::NodeError;

/// The default minimum time an attempt needs: no attempt starts with less than this left
/// before its deadline (seed 000's `MIN_ATTEMPT_MILLIS`).
pub const DEFAULT_MIN_ATTEMPT_TIME: Duration = Duration::from_millis(10);

/// A circuit breaker, bulkhead or retry budget given to a node: the handle itself, or its
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
handle_ref!(CircuitBreaker, Bulkhead);

/// Which errors the node's breaker ignores (releases the permit without counting).
pub(crate) type ErrorFilter = Arc<dyn Fn(&NodeError) -> bool + Send + Sync>;

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
                a.same(b, CircuitBreaker::same)
            })
            && same_opt(&self.breaker_ignore, &other.breaker_ignore, |a, b| {
                Arc::ptr_eq(a, b)
            })
            && same_opt(&self.bulkhead, &other.bulkhead, |a, b| {
                a.same(b, Bulkhead::same)
            })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.timeout.is_none()
            && self.min_attempt.is_none()
            && self.retry.is_none()
            && self.budget.is_none()
            && self.breaker.is_none()
            && self.bulkhead.is_none()
            && !self.has_fallback
    }
}

/// A node's policies, resolved and validated at `build()`. Laid out in declaration order
/// (`repr(C)`): the fields the scheduler's fast path reads come first (`run/guarded.rs`).
#[derive(Clone)]
#[repr(C)]
pub(crate) struct NodePolicy {
    pub(crate) breaker: Option<CircuitBreaker>,
    pub(crate) timeout: Option<Duration>,
    /// No bulkhead, no node budget and no retry budget: with no run deadline either, an
    /// attempt needs no permit but the breaker's, its cut is its timeout, and it deposits
    /// nothing (the scheduler's fast path skips that work).
    pub(crate) simple: bool,
    pub(crate) bulkhead: Option<Bulkhead>,
    pub(crate) budget: Option<Duration>,
    pub(crate) min_attempt: Duration,
    pub(crate) retry: Option<Retry>,
    pub(crate) breaker_ignore: Option<ErrorFilter>,
}

impl Default for NodePolicy {
    fn default() -> Self {
        NodePolicy {
            timeout: None,
            retry: None,
            budget: None,
            min_attempt: DEFAULT_MIN_ATTEMPT_TIME,
            breaker: None,
            breaker_ignore: None,
            bulkhead: None,
            simple: true,
        }
    }
}

impl fmt::Debug for NodePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodePolicy")
            .field("timeout", &self.timeout)
            .field("retry", &self.retry)
            .field("budget", &self.budget)
            .field("min_attempt", &self.min_attempt)
            .field("breaker", &self.breaker.as_ref().map(CircuitBreaker::name))
            .field("bulkhead", &self.bulkhead.as_ref().map(Bulkhead::name))
            .finish()
    }
}
