//! What a node declares of its policies before `build()` resolves them: its [`Policies`]
//! and whether it has a fallback. The fallback is typed, and lives with its task.

use crate::onion::Policies;

/// A node's policies as the builder collects them.
#[derive(Clone, Default, PartialEq)]
pub(crate) struct Declared {
    pub(crate) policies: Policies,
    /// The fallback itself is typed and lives with the task; the policy path must run it.
    pub(crate) has_fallback: bool,
    /// The orchestrator's named policy set that fills what the node was not given.
    #[cfg(feature = "serde")]
    pub(crate) policy_set: Option<String>,
}

impl Declared {
    /// Whether `self` declares the same policies as `other`: equal settings, the same
    /// handles or names, the same closures. The graph builder keeps one record for the
    /// nodes declared alike, and `build()` resolves it once for all of them.
    pub(crate) fn same(&self, other: &Self) -> bool {
        self == other
    }

    /// Whether the node declares no policy and no fallback, which is the scheduler's fast
    /// path.
    pub(crate) fn is_empty(&self) -> bool {
        !self.has_fallback && self.policies.is_empty()
    }
}
