//! [`ItemCtx`]: what one attempt of a map node's item sees.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::super::run::state::RunState;
use crate::id::{IdempotencyKey, RunId};
use crate::report::item_name;

/// The context of one attempt of one item of a map node, made by
/// [`NodeBuilder::map`](crate::NodeBuilder::map).
///
/// Like a node's [`Ctx`](crate::Ctx): the run input, the graph's state, the attempt number
/// and its deadline, and an idempotency key, here the item's: the same for every attempt
/// of the item, different for each item.
///
/// ```
/// use baton_graph::{BoxError, Graph};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), BoxError> {
/// let mut g = Graph::<&'static str>::builder(); // the run input: a currency
/// let skus = g.node("skus").task(|_ctx, ()| async { Ok::<_, BoxError>(vec!["a", "b"]) });
/// let labels = g.node("label").after(skus).map(|item, sku: &'static str| async move {
///     Ok::<_, BoxError>(format!("{} {sku} in {}", item.name(), item.input()))
/// });
/// let report = g.build()?.run("EUR").await?;
/// assert_eq!(
///     report.get(labels),
///     Some(&vec!["label[0] a in EUR".to_owned(), "label[1] b in EUR".to_owned()])
/// );
/// # Ok(())
/// # }
/// ```
pub struct ItemCtx<I> {
    pub(super) run: Arc<RunState<I>>,
    pub(super) node: u32,
    pub(super) index: u32,
    pub(super) attempt: u32,
    pub(super) cut: Option<Instant>,
}

impl<I> ItemCtx<I> {
    /// The run input.
    #[must_use]
    pub fn input(&self) -> &I {
        &self.run.input
    }

    /// The item's position in the list, from 0.
    #[must_use]
    pub fn index(&self) -> usize {
        self.index as usize
    }

    /// The attempt number, starting at 1.
    #[must_use]
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The map node's name.
    #[must_use]
    pub fn node_name(&self) -> &str {
        self.run.graph.meta.name(self.node)
    }

    /// The item's name, as events and the report show it: `node[index]`.
    #[must_use]
    pub fn name(&self) -> String {
        item_name(self.node_name(), self.index)
    }

    /// When this attempt will be cut: the earliest of its per-attempt timeout, the item's
    /// budget and the run's deadline; `None` when none applies.
    #[must_use]
    pub fn deadline(&self) -> Option<Instant> {
        self.cut
    }

    /// The time left before [`deadline`](Self::deadline), zero once it passed.
    #[must_use]
    pub fn remaining(&self) -> Option<Duration> {
        self.cut
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// The graph's shared state of type `S`, given with
    /// [`GraphBuilder::state`](crate::GraphBuilder::state), if it has one.
    #[must_use]
    pub fn try_state<S: Send + Sync + 'static>(&self) -> Option<&S> {
        self.run.graph.states.get::<S>()
    }

    /// The run this attempt belongs to.
    #[must_use]
    pub fn run_id(&self) -> RunId {
        self.run.core.run_id()
    }

    /// The item's idempotency key: the map node's key and the item's index, as in `…-4.2`.
    /// It is the same for every attempt of the item in this run.
    #[must_use]
    pub fn idempotency_key(&self) -> IdempotencyKey {
        self.run.key_of(self.node).for_item(self.index)
    }
}

impl<I> fmt::Debug for ItemCtx<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ItemCtx")
            .field("node", &self.node_name())
            .field("index", &self.index)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}
