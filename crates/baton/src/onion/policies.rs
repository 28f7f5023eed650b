//! [`ResolvedPolicies`]: the policies of one node or pipeline, validated and resolved, as
//! the onion and the scheduler's fast path read them.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::declared::Policies;
use crate::error::{BuildError, NodeError};
use crate::policy::deadline::{self, Cut};
use crate::policy::{Bulkhead, CircuitBreaker, DEFAULT_MIN_ATTEMPT_TIME, RateLimiter, RetryBudget};
use crate::util::human::Human;

/// Which errors a breaker ignores: it releases their permit without counting it.
pub(crate) type ErrorFilter = Arc<dyn Fn(&NodeError) -> bool + Send + Sync>;

/// The policies of one node or one pipeline, resolved: the breaker, bulkhead and rate
/// limiter as handles, the minimum attempt time with its default, and derived from them
/// what the scheduler's fast path needs to know. Laid out in declaration order with
/// `repr(C)`: the fields the fast path reads come first.
#[derive(Clone)]
#[repr(C)]
pub(crate) struct ResolvedPolicies {
    pub(crate) breaker: Option<CircuitBreaker>,
    /// No bulkhead, no budget and no retry budget. With no run deadline either, an attempt
    /// needs no permit but the breaker's, its cut is its timeout, and it deposits nothing:
    /// the scheduler's fast path skips that work.
    pub(crate) simple: bool,
    /// A permit to wait for, from a bulkhead or a rate limiter, or attempts in parallel,
    /// from a hedge: only the onion runs the node's attempts, and the scheduler's fast path
    /// does not take it.
    pub(crate) onion_only: bool,
    /// The declared settings, their breaker, bulkhead and rate limiter taken out into the
    /// resolved handles here.
    pub(crate) declared: Policies,
    pub(crate) min_attempt: Duration,
    pub(crate) bulkhead: Option<Bulkhead>,
    pub(crate) rate_limit: Option<RateLimiter>,
    /// The policies as declared, when they name a policy set: what a reload resolves again
    /// in `reload.rs`.
    pub(crate) named_set: Option<Arc<Policies>>,
    /// This record's place among the records of its graph or pipeline that name a policy
    /// set, kept in `Reload`, where a run finds the record that replaced it after a reload.
    pub(crate) reload_slot: Option<u32>,
}

impl Default for ResolvedPolicies {
    fn default() -> Self {
        ResolvedPolicies::unguarded(Policies::default())
    }
}

impl fmt::Debug for ResolvedPolicies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = &self.declared;
        f.debug_struct("Policies")
            .field("timeout", &d.timeout)
            .field("retry", &d.retry)
            .field("budget", &d.budget)
            .field("min_attempt", &self.min_attempt)
            .field("breaker", &self.breaker.as_ref().map(CircuitBreaker::name))
            .field("bulkhead", &self.bulkhead.as_ref().map(Bulkhead::name))
            .field(
                "rate_limit",
                &self.rate_limit.as_ref().map(RateLimiter::name),
            )
            .field("hedge", &d.hedge)
            .field("chaos", &d.chaos)
            .finish()
    }
}

/// A policy that cannot work: which one, such as `timeout`, `budget` or `retry`, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Invalid {
    pub(crate) policy: &'static str,
    pub(crate) reason: String,
}

impl Invalid {
    /// The build error of node `node` with this policy.
    pub(crate) fn for_node(self, node: &str) -> BuildError {
        BuildError::InvalidPolicy {
            node: node.to_owned(),
            policy: self.policy,
            reason: self.reason,
        }
    }
}

impl ResolvedPolicies {
    /// `declared`, with no breaker, bulkhead or rate limiter. Whatever it declares of them
    /// is dropped: [`guarded_by`](Self::guarded_by) gives the resolved handles.
    pub(crate) fn unguarded(mut declared: Policies) -> Self {
        declared.breaker = None;
        declared.bulkhead = None;
        declared.rate_limit = None;
        ResolvedPolicies {
            breaker: None,
            simple: true,
            onion_only: false,
            min_attempt: declared.min_attempt.unwrap_or(DEFAULT_MIN_ATTEMPT_TIME),
            declared,
            bulkhead: None,
            rate_limit: None,
            named_set: None,
            reload_slot: None,
        }
        .derived()
    }

    /// The same policies, with `simple` and `onion_only` derived from them.
    fn derived(mut self) -> Self {
        let d = &self.declared;
        self.onion_only = self.bulkhead.is_some()
            || self.rate_limit.is_some()
            || d.hedge.is_some()
            || d.chaos.is_some();
        self.simple = !self.onion_only && d.budget.is_none() && self.retry_budget().is_none();
        self
    }

    /// The same policies, guarded by `breaker`, `bulkhead` and `rate_limit`, resolved after
    /// validation.
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

    /// The retry's retry budget, if it has one.
    #[inline]
    pub(crate) fn retry_budget(&self) -> Option<&RetryBudget> {
        self.declared.retry.as_ref().and_then(|r| r.budget.as_ref())
    }

    /// Checks that every policy can work: a timeout and a budget above zero, a budget no
    /// shorter than the minimum attempt time, a valid retry.
    ///
    /// # Errors
    /// The first policy that cannot, and why.
    pub(crate) fn validate(&self) -> Result<(), Invalid> {
        let invalid = |policy: &'static str, reason: String| Err(Invalid { policy, reason });
        if self.declared.timeout.is_some_and(|t| t.is_zero()) {
            return invalid(
                "timeout",
                "the per-attempt timeout must be above zero".to_owned(),
            );
        }
        if self.declared.budget.is_some_and(|b| b.is_zero()) {
            return invalid("budget", "the budget must be above zero".to_owned());
        }
        if let Some(budget) = self.declared.budget.filter(|b| *b < self.min_attempt) {
            return invalid(
                "budget",
                format!(
                    "a budget of {} is below the minimum attempt time of {}: no attempt could ever start",
                    Human(budget),
                    Human(self.min_attempt)
                ),
            );
        }
        if let Some(retry) = &self.declared.retry {
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
        if let Some(hedge) = &self.declared.hedge {
            hedge
                .validate()
                .or_else(|reason| invalid("hedge", reason))?;
        }
        if let Some(chaos) = &self.declared.chaos {
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
        deadline::node_deadline(run_deadline, self.declared.budget, started)
    }

    /// The cut of an attempt starting at `now` in a series under `deadline`: the earlier of
    /// its per-attempt timeout and the deadline. The one place an attempt's cut is computed:
    /// the onion's attempts, the scheduler's fast path and [`Ctx::deadline`] all ask here.
    ///
    /// [`Ctx::deadline`]: crate::Ctx::deadline
    #[inline]
    pub(crate) fn cut(&self, now: Instant, deadline: Option<Instant>) -> Cut {
        Cut::new(self.declared.timeout, now, deadline)
    }

    /// When a series' first attempt, starting at `start` in a run whose deadline is
    /// `run_deadline`, is cut: [`cut`](Self::cut) under the series' [`deadline`](Self::deadline).
    #[inline]
    pub(crate) fn first_cut(
        &self,
        run_deadline: Option<Instant>,
        start: Instant,
    ) -> Option<Instant> {
        self.cut(start, self.deadline(run_deadline, start)).until
    }

    /// Whether an attempt starting at `now` would have less than the minimum attempt time
    /// left before `deadline`. Such an attempt does not start.
    #[inline]
    pub(crate) fn too_late(&self, deadline: Option<Instant>, now: Instant) -> bool {
        deadline::too_late(deadline, now, self.min_attempt)
    }

    /// Whether an attempt may start at `now` under `deadline`. `after_clip`: it is the one
    /// a clipped backoff made room for; see `policy::deadline`.
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
        if let Some(budget) = self.retry_budget() {
            budget.deposit();
        }
    }
}
