//! Policies that name an orchestrator's policy set, resolved again after a reload: a graph
//! or a pipeline built before [`Orchestrator::apply`] changed a set takes the new one for
//! the runs and calls that start after it; those in flight keep what they started with.

use std::sync::{Arc, Mutex, PoisonError};

use super::{Policies, ResolvedPolicies};
use crate::orchestrator::Orchestrator;

/// The policy records of one graph or one pipeline that name a policy set, as declared, and
/// the records resolved from them after the last change of a set. A record's place here is
/// its [`ResolvedPolicies::reload_slot`].
pub(crate) struct Reload {
    /// By slot: the name of a node that has the record, and the record as declared.
    declared: Box<[(Box<str>, Arc<Policies>)]>,
    resolved: Mutex<Resolved>,
}

struct Resolved {
    /// The orchestrator's count of policy set changes these were resolved against.
    changes: u64,
    /// By slot; `None` while the records built with the graph stand.
    current: Option<Arc<[Arc<ResolvedPolicies>]>>,
}

impl Reload {
    /// The reload of `declared`, by slot, resolved when the orchestrator had counted
    /// `changes` changes of its policy sets; `None` when nothing names a set.
    pub(crate) fn new(declared: Vec<(Box<str>, Arc<Policies>)>, changes: u64) -> Option<Self> {
        if declared.is_empty() {
            return None;
        }
        Some(Reload {
            declared: declared.into_boxed_slice(),
            resolved: Mutex::new(Resolved {
                changes,
                current: None,
            }),
        })
    }

    /// The records a run or call starting now uses, by slot: resolved again first if a
    /// policy set changed since they were; `None` while those built with the graph stand.
    ///
    /// A record that no longer resolves keeps the records used until now, and says why in a
    /// `tracing` warning; it is tried again at the next change. That happens when the new
    /// set does not fit the node's own settings, say a budget below its minimum attempt
    /// time.
    pub(crate) fn current(
        &self,
        orchestrator: &Orchestrator,
    ) -> Option<Arc<[Arc<ResolvedPolicies>]>> {
        let changes = orchestrator.policy_sets_changed();
        let mut r = self.resolved.lock().unwrap_or_else(PoisonError::into_inner);
        if r.changes != changes {
            r.changes = changes;
            match self.resolve(orchestrator) {
                Ok(records) => r.current = Some(records),
                Err(error) => tracing::warn!(
                    %error,
                    "a policy set changed, and a node's policies no longer resolve: it keeps its policies"
                ),
            }
        }
        r.current.clone()
    }

    fn resolve(
        &self,
        orchestrator: &Orchestrator,
    ) -> Result<Arc<[Arc<ResolvedPolicies>]>, crate::error::BuildError> {
        let mut records = Vec::with_capacity(self.declared.len());
        for (slot, (node, declared)) in (0_u32..).zip(self.declared.iter()) {
            let mut record = Policies::clone(declared).resolve(node, Some(orchestrator))?;
            record.reload_slot = Some(slot);
            records.push(Arc::new(record));
        }
        Ok(records.into())
    }
}

/// `policy`, or the record that replaced it in `reloaded` when it names a policy set.
/// `reloaded` holds a run's or a call's records, by slot.
#[inline]
pub(crate) fn current<'a>(
    policy: &'a ResolvedPolicies,
    reloaded: Option<&'a [Arc<ResolvedPolicies>]>,
) -> &'a ResolvedPolicies {
    match (policy.reload_slot, reloaded) {
        (Some(slot), Some(records)) => records.get(slot as usize).map_or(policy, |r| r),
        _ => policy,
    }
}
