//! [`CompensationCtx`]: what one attempt of a node's compensation sees.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::super::run::state::RunState;
use crate::id::{IdempotencyKey, RunId};

/// The context of one attempt of a node's compensation, set with
/// [`NodeBuilder::compensate`](crate::NodeBuilder::compensate). It gives the run input, the
/// node, the attempt and its deadline, and the node's idempotency key, the same its task
/// had. The deadline is the compensation's own timeout: the run's deadline does not apply.
pub struct CompensationCtx<I> {
    pub(super) run: Arc<RunState<I>>,
    pub(super) node: u32,
    pub(super) attempt: u32,
    pub(super) deadline: Option<Instant>,
}

impl<I> CompensationCtx<I> {
    /// The run input.
    #[must_use]
    pub fn input(&self) -> &I {
        &self.run.input
    }

    /// The name of the node being compensated.
    #[must_use]
    pub fn node_name(&self) -> &str {
        self.run.graph.meta.name(self.node)
    }

    /// The attempt number, starting at 1.
    #[must_use]
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// When this attempt is cut by its timeout, if it has one.
    #[must_use]
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// The time left before [`deadline`](Self::deadline), zero once it passed.
    #[must_use]
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// The graph's shared state of type `S`, if it has one.
    #[must_use]
    pub fn try_state<S: Send + Sync + 'static>(&self) -> Option<&S> {
        self.run.graph.states.get::<S>()
    }

    /// The run being compensated.
    #[must_use]
    pub fn run_id(&self) -> RunId {
        self.run.core.run_id()
    }

    /// The node's idempotency key: the one its task's attempts had, so that the
    /// downstream can match the undo to the request it undoes.
    #[must_use]
    pub fn idempotency_key(&self) -> IdempotencyKey {
        self.run.key_of(self.node)
    }
}

impl<I> fmt::Debug for CompensationCtx<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompensationCtx")
            .field("node", &self.node_name())
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}
