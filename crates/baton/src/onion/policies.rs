//! [`Policies`]: the policies of one node or pipeline, validated, as the onion reads them.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::retry::Retry;
use crate::error::NodeError;
use crate::policy::deadline::{self, Cut};
use crate::policy::{
    Bulkhead, Chaos, CircuitBreaker, DEFAULT_MIN_ATTEMPT_TIME, Hedge, RateLimiter,
};
use crate::util::human::Human;

/// Which errors a breaker ignores (releases the permit without counting).
pub(crate) type ErrorFilter = Arc<dyn Fn(&NodeError) -> bool + Send + Sync>;

/// The policies of one node (or one pipeline), resolved. Laid out in declaration order
/// (`repr(C)`): the fields the scheduler's fast path reads come first.
#[derive(Clone)]
#[repr(C)]
pub(crate) struct Policies {
    pub(crate) breaker: Option<CircuitBreaker>,
    pub(crate) timeout: Option<Duration>,
    /// No bulkhead, no budget and no retry budget: with no run deadline either, an attempt
    /// needs no permit but the breaker's, its cut is its timeout, and it deposits nothing
    /// (the scheduler's fast path skips that work).
    pub(crate) simple: bool,
    /// A permit to wait for (bulkhead, rate limiter) or attempts in parallel (hedge): only
    /// the onion runs the node's attempts (the scheduler's fast path does not take it).
    pub(crate) onion_only: bool,
    pub(crate) bulkhead: Option<Bulkhead>,
    pub(crate) budget: Option<Duration>,
    pub(crate) min_attempt: Duration,
    pub(crate) retry: Option<Retry>,
    pub(crate) breaker_ignore: Option<ErrorFilter>,
    pub(crate) rate_limit: Option<RateLimiter>,
    pub(crate) hedge: Option<Hedge>,
    pub(crate) chaos: Option<Chaos>,
}

impl Default for Policies {
    fn default() -> Self {
        Policies {
            timeout: None,
            retry: None,
            budget: None,
            min_attempt: DEFAULT_MIN_ATTEMPT_TIME,
            breaker: None,
            breaker_ignore: None,
            bulkhead: None,
            simple: true,
            onion_only: false,
            rate_limit: None,
            hedge: None,
            chaos: None,
        }
    }
}

impl fmt::Debug for Policies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Policies")
            .field("timeout", &self.timeout)
            .field("retry", &self.retry)
            .field("budget", &self.budget)
            .field("min_attempt", &self.min_attempt)
            .field("breaker", &self.breaker.as_ref().map(CircuitBreaker::name))
            .field("bulkhead", &self.bulkhead.as_ref().map(Bulkhead::name))
            .field(
                "rate_limit",
                &self.rate_limit.as_ref().map(RateLimiter::name),
            )
            .field("hedge", &self.hedge)
            .field("chaos", &self.chaos)
            .finish()
    }
}

/// A policy that cannot work: which one (`timeout`, `budget`, `retry`, …) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Invalid {
    pub(crate) policy: &'static str,
    pub(crate) reason: String,
}

impl Policies {
    /// The policies, with `simple` derived from them.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        timeout: Option<Duration>,
        retry: Option<Retry>,
        budget: Option<Duration>,
        min_attempt: Option<Duration>,
        breaker: Option<CircuitBreaker>,
        breaker_ignore: Option<ErrorFilter>,
        bulkhead: Option<Bulkhead>,
    ) -> Self {
        Policies {
            breaker,
            timeout,
            simple: true,
            onion_only: false,
            bulkhead,
            budget,
            min_attempt: min_attempt.unwrap_or(DEFAULT_MIN_ATTEMPT_TIME),
            retry,
            breaker_ignore,
            rate_limit: None,
            hedge: None,
            chaos: None,
        }
        .derived()
    }

    /// The same policies, with `simple` and `onion_only` derived from them.
    fn derived(mut self) -> Self {
        self.onion_only = self.bulkhead.is_some()
            || self.rate_limit.is_some()
            || self.hedge.is_some()
            || self.chaos.is_some();
        self.simple = !self.onion_only
            && self.budget.is_none()
            && self
                .retry
                .as_ref()
                .is_none_or(|retry| retry.budget.is_none());
        self
    }

    /// The same policies, with `rate_limit` too.
    pub(crate) fn limited(mut self, rate_limit: Option<RateLimiter>) -> Self {
        self.rate_limit = rate_limit;
        self.derived()
    }

    /// The same policies, with `hedge` and `chaos` too.
    pub(crate) fn hedged(mut self, hedge: Option<Hedge>, chaos: Option<Chaos>) -> Self {
        self.hedge = hedge;
        self.chaos = chaos;
        self.derived()
    }

    /// The same policies, guarded by `breaker`, `bulkhead` and `rate_limit` (resolved after
    /// validation).
    pub(crate) fn guarded_by(
        mut self,
        breaker: Option<CircuitBreaker>,
        bulkhead: Option<Bulkhead>,
        rate_limit: Option<RateLimiter>,
    ) -> Self {
        self.breaker = breaker;
        self.bulkhead = bulkhead;
        self.rate_limit = rate_limit;
        self.derived()
    }

    /// Checks that every policy can work: a timeout and a budget above zero, a budget no
    /// shorter than the minimum attempt time, a valid retry.
    ///
    /// # Errors
    /// The first policy that cannot, and why.
    pub(crate) fn validate(&self) -> Result<(), Invalid> {
        let invalid = |policy: &'static str, reason: String| Err(Invalid { policy, reason });
        if self.timeout.is_some_and(|t| t.is_zero()) {
            return invalid(
                "timeout",
                "the per-attempt timeout must be above zero".to_owned(),
            );
        }
        if self.budget.is_some_and(|b| b.is_zero()) {
            return invalid("budget", "the budget must be above zero".to_owned());
        }
        if let Some(budget) = self.budget.filter(|b| *b < self.min_attempt) {
            return invalid(
                "budget",
                format!(
                    "a budget of {} is below the minimum attempt time of {}: no attempt could ever start",
                    Human(budget),
                    Human(self.min_attempt)
                ),
            );
        }
        if let Some(retry) = &self.retry {
            retry
                .validate()
                .or_else(|reason| invalid("retry", reason))?;
        }
        if let Some(bulkhead) = &self.bulkhead {
            bulkhead
                .validate()
                .or_else(|reason| invalid("bulkhead", reason))?;
        }
        if let Some(limiter) = &self.rate_limit {
            limiter
                .validate()
                .or_else(|reason| invalid("rate limit", reason))?;
        }
        if let Some(hedge) = &self.hedge {
            hedge
                .validate()
                .or_else(|reason| invalid("hedge", reason))?;
        }
        if let Some(chaos) = &self.chaos {
            chaos
                .validate()
                .or_else(|reason| invalid("chaos", reason))?;
        }
        Ok(())
    }

    /// The deadline of a series that started at `started`: the earlier of `run_deadline`
    /// and the end of the budget.
    #[inline]
    pub(crate) fn deadline(
        &self,
        run_deadline: Option<Instant>,
        started: Instant,
    ) -> Option<Instant> {
        deadline::node_deadline(run_deadline, self.budget, started)
    }

    /// The cut of an attempt starting at `now` under `deadline`.
    #[inline]
    pub(crate) fn cut(&self, now: Instant, deadline: Option<Instant>) -> Cut {
        Cut::new(self.timeout, now, deadline)
    }

    /// Whether an attempt starting at `now` would have less than the minimum attempt time
    /// left before `deadline` (then it does not start).
    #[inline]
    pub(crate) fn too_late(&self, deadline: Option<Instant>, now: Instant) -> bool {
        deadline::too_late(deadline, now, self.min_attempt)
    }

    /// Whether an attempt may start at `now` under `deadline`; `after_clip`: it is the one a
    /// clipped backoff made room for (see `policy::deadline`).
    #[inline]
    pub(crate) fn may_start(
        &self,
        deadline: Option<Instant>,
        now: Instant,
        after_clip: bool,
    ) -> bool {
        deadline::may_start(deadline, now, self.min_attempt, after_clip)
    }

    /// A series starts: it earns its share of the retry budget, if any.
    #[inline]
    pub(crate) fn deposit(&self) {
        if let Some(budget) = self.retry.as_ref().and_then(|r| r.budget.as_ref()) {
            budget.deposit();
        }
    }
}
