//! A named policy set of the orchestrator, resolved for one node or pipeline: its policy
//! names looked up, its retry built.

use std::time::Duration;

use super::Retry;
use crate::error::BuildError;
use crate::orchestrator::Orchestrator;
use crate::policy::{Bulkhead, CircuitBreaker, Hedge, RateLimiter};

/// The policies of a named policy set, with handles for its names.
#[derive(Debug, Default)]
pub(crate) struct ResolvedSet {
    pub(crate) timeout: Option<Duration>,
    pub(crate) budget: Option<Duration>,
    pub(crate) min_attempt: Option<Duration>,
    pub(crate) retry: Option<Retry>,
    pub(crate) breaker: Option<CircuitBreaker>,
    pub(crate) bulkhead: Option<Bulkhead>,
    pub(crate) rate_limit: Option<RateLimiter>,
    pub(crate) hedge: Option<Hedge>,
}

/// The policy set `name` of `orchestrator`, for the node (or pipeline) `node`.
///
/// # Errors
/// [`BuildError::UnknownPolicy`] for a set, or a policy it names, that the orchestrator
/// does not have; [`BuildError::InvalidPolicy`] for a retry or hedge it cannot build
/// (the configuration was checked when applied, so only a set built in code).
pub(crate) fn resolve_set(
    orchestrator: &Orchestrator,
    name: &str,
    node: &str,
) -> Result<ResolvedSet, BuildError> {
    let unknown = |kind: &'static str, name: &str| BuildError::UnknownPolicy {
        node: node.to_owned(),
        kind,
        name: name.to_owned(),
    };
    let invalid = |policy: &'static str, reason: String| BuildError::InvalidPolicy {
        node: node.to_owned(),
        policy,
        reason,
    };
    let set = orchestrator
        .policy_set(name)
        .ok_or_else(|| unknown("policy set", name))?;
    let retry = match &set.retry {
        Some(r) => {
            let mut retry = Retry::new(r.max_attempts);
            if let Some(b) = &r.backoff {
                retry = retry.backoff(b.to_backoff().map_err(|e| invalid("retry", e))?);
            }
            if let Some(budget) = &r.budget {
                let found = orchestrator.retry_budget(budget);
                retry = retry.budget(found.ok_or_else(|| unknown("retry budget", budget))?);
            }
            Some(retry)
        }
        None => None,
    };
    let hedge = set
        .hedge
        .map(|h| h.to_hedge().map_err(|e| invalid("hedge", e)))
        .transpose()?;
    Ok(ResolvedSet {
        timeout: set.timeout,
        budget: set.budget,
        min_attempt: set.min_attempt_time,
        retry,
        breaker: lookup(
            &set.breaker,
            "circuit breaker",
            |n| orchestrator.breaker(n),
            unknown,
        )?,
        bulkhead: lookup(
            &set.bulkhead,
            "bulkhead",
            |n| orchestrator.bulkhead(n),
            unknown,
        )?,
        rate_limit: lookup(
            &set.rate_limiter,
            "rate limiter",
            |n| orchestrator.rate_limiter(n),
            unknown,
        )?,
        hedge,
    })
}

/// The handle named `name`, if any, looked up with `get`.
fn lookup<H>(
    name: &Option<String>,
    kind: &'static str,
    get: impl FnOnce(&str) -> Option<H>,
    unknown: impl FnOnce(&'static str, &str) -> BuildError,
) -> Result<Option<H>, BuildError> {
    match name.as_deref() {
        None => Ok(None),
        Some(n) => get(n).map(Some).ok_or_else(|| unknown(kind, n)),
    }
}
