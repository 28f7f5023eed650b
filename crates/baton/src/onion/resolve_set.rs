//! A named policy set of the orchestrator, filled into a node's or a pipeline's
//! [`Policies`] when they are built: its retry built, its other names left for the
//! lookup that follows.

use super::{Policies, PolicyRef, Retry};
use crate::error::BuildError;
use crate::orchestrator::Orchestrator;

impl Policies {
    /// Whether both name the same policy set, or both name none.
    pub(super) fn same_set(&self, other: &Self) -> bool {
        self.policy_set == other.policy_set
    }

    /// These policies, with what they do not set taken from the orchestrator's policy set
    /// they name, and no longer naming it.
    ///
    /// # Errors
    /// [`BuildError::UnknownPolicy`] for a set, or a retry budget it names, that the
    /// orchestrator does not have, or for any set without an orchestrator.
    /// [`BuildError::InvalidPolicy`] for a backoff or hedge it cannot build, in a set made
    /// in code; a configuration was checked when applied. Each names `node`.
    pub(crate) fn with_policy_set(
        mut self,
        node: &str,
        orchestrator: Option<&Orchestrator>,
    ) -> Result<Policies, BuildError> {
        let Some(name) = self.policy_set.take() else {
            return Ok(self);
        };
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
        let orch = orchestrator.ok_or_else(|| unknown("policy set", &name))?;
        let set = orch
            .policy_set(&name)
            .ok_or_else(|| unknown("policy set", &name))?;
        if self.retry.is_none() {
            if let Some(r) = &set.retry {
                let mut retry = Retry::new(r.max_attempts);
                if let Some(b) = &r.backoff {
                    retry = retry.backoff(b.to_backoff().map_err(|e| invalid("retry", e))?);
                }
                if let Some(budget) = &r.budget {
                    let found = orch.retry_budget(budget);
                    retry = retry.budget(found.ok_or_else(|| unknown("retry budget", budget))?);
                }
                self.retry = Some(retry);
            }
        }
        if self.hedge.is_none() {
            self.hedge = set
                .hedge
                .map(|h| h.to_hedge().map_err(|e| invalid("hedge", e)))
                .transpose()?;
        }
        self.timeout = self.timeout.or(set.timeout);
        self.budget = self.budget.or(set.budget);
        self.min_attempt = self.min_attempt.or(set.min_attempt_time);
        self.breaker = self.breaker.or(set.breaker.map(PolicyRef::Name));
        self.bulkhead = self.bulkhead.or(set.bulkhead.map(PolicyRef::Name));
        self.rate_limit = self.rate_limit.or(set.rate_limiter.map(PolicyRef::Name));
        Ok(self)
    }
}
