//! Map nodes: [`NodeBuilder::map`], [`NodeBuilder::map_settled`] and
//! [`NodeBuilder::concurrency`].

use std::future::Future;
use std::sync::Arc;

use super::super::graph_builder::NewNode;
use super::NodeBuilder;
use crate::engine::{ItemCtx, MapTask, NodeFallback, NodeKind, Results, Values};
use crate::error::{BoxError, BuildError, NodeError};
use crate::id::Node;
use crate::onion::Fallback;
use crate::policy::{Completion, DEFAULT_MAP_CONCURRENCY};

impl<I, U, T> NodeBuilder<'_, I, U, T> {
    /// For a map node: runs at most `limit` items at once. The default is
    /// [`DEFAULT_MAP_CONCURRENCY`], 16. Zero is a build error,
    /// [`BuildError::InvalidPolicy`] with policy `concurrency`, and so is a concurrency on
    /// a node that is not a map node.
    pub fn concurrency(mut self, limit: usize) -> Self {
        self.concurrency = Some(limit);
        self
    }
}

impl<'g, I, L, T> NodeBuilder<'g, I, Node<L>, T>
where
    I: Send + Sync + 'static,
    L: Send + Sync + 'static,
    T: Clone + Send + Sync + 'static,
{
    /// Makes the node a map node: its upstream's value is a list, and the node runs `task`
    /// once per item, its value the items' values in input order. A list is anything whose
    /// reference iterates over items, such as `Vec<X>`, a slice in a `Box` or a `BTreeSet`.
    /// Every item must succeed, as [`Completion::AllSucceed`] says: the first that fails
    /// fails the node and cancels the items still running. An empty list succeeds with an
    /// empty value.
    ///
    /// The node's policies apply to each item: its timeout to each attempt of an item, its
    /// retry to each item's series inside the run's deadline, and its breaker, bulkhead,
    /// rate limiter and hedge to each item as to a node. Its [`fallback`](Self::fallback)
    /// gives a failed item its value while the others keep theirs; `T` is an item's value,
    /// `Clone` so that one fallback value can answer several items. The items run inside
    /// the node's own work, at most [`concurrency`](Self::concurrency) at once, in input
    /// order; no task is spawned per item. `task` receives the item's [`ItemCtx`] and a
    /// clone of the item.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{BoxError, Graph, Outcome, Retry};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// let cart = g.node("cart").task(|_ctx, ()| async { Ok::<_, BoxError>(vec![10_u64, 20, 30]) });
    /// let prices = g
    ///     .node("prices")
    ///     .after(cart)
    ///     .concurrency(2)
    ///     .timeout(Duration::from_millis(100))
    ///     .retry(Retry::new(2))
    ///     .map(|item, sku: u64| async move {
    ///         if item.index() == 1 && item.attempt() == 1 {
    ///             return Err::<u64, BoxError>("503".into()); // item 1 fails once
    ///         }
    ///         Ok(sku * 100)
    ///     });
    /// let report = g.build()?.run(()).await?;
    /// assert_eq!(report.get(prices), Some(&vec![1_000, 2_000, 3_000]));
    /// let items = report.items(prices).unwrap();
    /// assert_eq!(items.get(1).map(|i| i.attempts()), Some(2));
    /// assert_eq!(report.node(prices).map(|n| n.outcome()), Some(Outcome::Succeeded));
    /// # Ok(())
    /// # }
    /// ```
    pub fn map<X, F, Fut, E>(self, task: F) -> Node<Vec<T>>
    where
        for<'a> &'a L: IntoIterator<Item = &'a X>,
        X: Clone + Send + Sync + 'static,
        F: Fn(ItemCtx<I>, X) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        self.finish_map(Completion::AllSucceed, |tasks, fallback| {
            tasks.push(MapTask::<L, X, F, T, E, Fut, Values>::new(task, fallback))
        })
    }

    /// A map node like [`map`](Self::map), done by `completion`, whose value holds each
    /// item's result in input order: its value or its error. An item cancelled once the
    /// rule was decided has [`NodeError::ItemCancelled`]. The node succeeds when the rule
    /// is met, and fails with [`MapFailed`](crate::map::MapFailed) as its task error when
    /// it is not. The report's [`Report::items`] says which rule it was and what it
    /// decided.
    ///
    /// [`Report::items`]: crate::Report::items
    ///
    /// ```
    /// use baton_graph::{BoxError, Graph, Outcome, map::Completion};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// let shards = g.node("shards").task(|_ctx, ()| async { Ok::<_, BoxError>(vec![0_u32, 1, 2, 3]) });
    /// let hits = g
    ///     .node("search")
    ///     .after(shards)
    ///     .map_settled(Completion::AtLeast(3), |_item, shard: u32| async move {
    ///         if shard == 2 {
    ///             return Err::<u32, BoxError>("shard 2 is down".into());
    ///         }
    ///         Ok(shard * 10)
    ///     });
    /// let report = g.build()?.run(()).await?;
    /// let results = report.get(hits).unwrap();
    /// assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 3);
    /// let items = report.items(hits).unwrap();
    /// assert_eq!(items.completion(), Completion::AtLeast(3));
    /// assert!(items.decision().met);
    /// assert_eq!(items.get(2).map(|i| i.outcome()), Some(Outcome::Failed));
    /// # Ok(())
    /// # }
    /// ```
    pub fn map_settled<X, F, Fut, E>(
        self,
        completion: Completion,
        task: F,
    ) -> Node<Vec<Result<T, Arc<NodeError>>>>
    where
        for<'a> &'a L: IntoIterator<Item = &'a X>,
        X: Clone + Send + Sync + 'static,
        F: Fn(ItemCtx<I>, X) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        self.finish_map(completion, |tasks, fallback| {
            tasks.push(MapTask::<L, X, F, T, E, Fut, Results>::new(task, fallback))
        })
    }

    /// Adds the map node, its task stored by `store`, which is given the items' fallback,
    /// if any.
    fn finish_map<V>(
        mut self,
        completion: Completion,
        store: impl FnOnce(&mut crate::engine::Tasks, Option<Fallback<T>>) -> crate::engine::TaskRef<I>,
    ) -> Node<V> {
        let concurrency = self.concurrency.take().unwrap_or(DEFAULT_MAP_CONCURRENCY);
        let NodeBuilder {
            builder,
            upstreams,
            extras,
            fallback,
            compensation,
            ..
        } = self;
        let graph = builder.id;
        builder.declare(&upstreams);
        let (fallback, per_item) = match fallback {
            None => (None, true),
            Some(NodeFallback::Plain(fallback)) => (Some(fallback), true),
            Some(NodeFallback::WithCtx(_)) => (None, false),
        };
        let node = NewNode {
            task: store(&mut builder.tasks, fallback),
            extras,
        };
        let index = builder.add(node);
        if let Some(compensation) = compensation {
            builder.compensations.push((index, compensation));
        }
        builder.set_kind(
            index,
            NodeKind::Map {
                concurrency,
                completion,
            },
        );
        let name = || builder.names.get(index).to_owned();
        let invalid = |policy: &'static str, reason: String| BuildError::InvalidPolicy {
            node: name(),
            policy,
            reason,
        };
        let problem = if concurrency == 0 {
            Some(invalid(
                "concurrency",
                "zero items at once would never run one".to_owned(),
            ))
        } else if let Some(reason) = completion.invalid() {
            Some(invalid("completion", reason))
        } else if !per_item {
            Some(invalid(
                "fallback",
                "a map node's fallback answers one item: use `fallback`, not `fallback_with`"
                    .to_owned(),
            ))
        } else {
            None
        };
        if let Some(error) = problem {
            builder.invalid_node(index, error);
        }
        Node::new(graph, index)
    }
}
