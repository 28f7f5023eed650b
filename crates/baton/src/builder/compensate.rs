//! Compensations: [`NodeBuilder::compensate`] and its policies, the graph's trigger set by
//! [`GraphBuilder::compensate_when`], and how `build()` assembles them.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::graph_builder::GraphBuilder;
use super::node::NodeBuilder;
use crate::engine::{
    CompensateFn, Compensation, CompensationCtx, CompensationTrigger, Compensations, GraphMeta,
};
use crate::error::{BoxError, BuildError};
use crate::onion::{Pipeline, Retry};

/// The default per-attempt timeout of a compensation.
pub const DEFAULT_COMPENSATION_TIMEOUT: Duration = Duration::from_secs(10);

/// A node's compensation as declared.
pub(crate) struct CompensateSpec<I> {
    run: CompensateFn<I>,
    timeout: Duration,
    retry: Retry,
}

impl<I: Send + Sync + 'static> GraphBuilder<I> {
    /// When the runs' compensations, given by [`NodeBuilder::compensate`], run. By default,
    /// with [`CompensationTrigger::RunFailed`], they run when the run is an error under its
    /// failure mode. They may instead run when named nodes ended without a value, or when a
    /// predicate on the report says so.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicI64, Ordering};
    /// use baton_graph::{BoxError, Graph, RunError, compensate::CompensationTrigger};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let stock = Arc::new(AtomicI64::new(10));
    /// let (take, give_back) = (Arc::clone(&stock), Arc::clone(&stock));
    /// let mut g = Graph::<()>::builder();
    /// g.compensate_when(CompensationTrigger::nodes_failed(["ship"]));
    /// let reserved = g
    ///     .node("reserve")
    ///     .compensate(move |_ctx, n: Arc<i64>| {
    ///         let give_back = Arc::clone(&give_back);
    ///         async move {
    ///             give_back.fetch_add(*n, Ordering::SeqCst); // undo the reservation
    ///             Ok::<_, BoxError>(())
    ///         }
    ///     })
    ///     .task(move |_ctx, ()| {
    ///         let take = Arc::clone(&take);
    ///         async move {
    ///             take.fetch_sub(1, Ordering::SeqCst);
    ///             Ok::<_, BoxError>(1_i64)
    ///         }
    ///     });
    /// g.node("ship").after(reserved).task(|_ctx, _| async { Err::<(), BoxError>("503".into()) });
    /// let err = g.build()?.run(()).await.unwrap_err();
    /// assert!(matches!(err, RunError::Compensated { compensated: 1, .. }));
    /// assert_eq!(stock.load(Ordering::SeqCst), 10); // back where it was
    /// let report = err.into_report().unwrap();
    /// let compensation = report.compensation().unwrap();
    /// assert!(compensation.complete());
    /// assert_eq!(compensation.get("reserve").map(|c| c.attempts()), Some(1));
    /// # Ok(())
    /// # }
    /// ```
    pub fn compensate_when(&mut self, trigger: CompensationTrigger) -> &mut Self {
        self.trigger = trigger;
        self
    }
}

impl<I, U, T> NodeBuilder<'_, I, U, T>
where
    I: Send + Sync + 'static,
    T: Send + Sync + 'static,
{
    /// Gives the node a compensation: when a run fails by the graph's trigger, set by
    /// [`GraphBuilder::compensate_when`], and this node `Succeeded`, `f` is called with its
    /// value to undo what it did. Compensations run after every node of the run ended,
    /// downstreams before upstreams; those that do not depend on one another run at once.
    /// Each runs through its own timeout, by default 10 s per attempt, and retry, by
    /// default `Retry::new(3)`, without the run's deadline. They run even when the run's
    /// deadline is spent, the run was cancelled, or its future was dropped; then they run
    /// on a tokio task of their own, until they end. A runtime shutting down drops the
    /// compensations still running. Every due compensation runs even when another fails;
    /// the run's error then says so with [`RunError::PartiallyCompensated`], and the report
    /// has a compensation section, [`Report::compensation`]. See
    /// [`compensate_when`](GraphBuilder::compensate_when) for an example.
    ///
    ///
    /// A router has no value of its own to undo, and no `compensate`: giving it one does
    /// not compile. Its branches, which are nodes, may have one.
    ///
    /// ```compile_fail,E0599
    /// use baton_graph::{BoxError, Graph};
    ///
    /// let mut g = Graph::<()>::builder();
    /// g.router("dispatch")
    ///     .compensate(|_ctx, _v: std::sync::Arc<()>| async { Ok::<_, BoxError>(()) });
    /// ```
    ///
    /// [`RunError::PartiallyCompensated`]: crate::RunError::PartiallyCompensated
    /// [`Report::compensation`]: crate::Report::compensation
    pub fn compensate<F, Fut, E>(mut self, f: F) -> Self
    where
        F: Fn(CompensationCtx<I>, Arc<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        let run: CompensateFn<I> = Arc::new(move |ctx, value| {
            let fut = value.to_arc::<T>().map(|value| f(ctx, value));
            Box::pin(async move {
                match fut {
                    Some(fut) => fut.await.map_err(Into::into),
                    None => Err("the node's value is not of its type".into()),
                }
            })
        });
        let (timeout, retry) = match self.compensation.take() {
            Some(spec) => (spec.timeout, spec.retry),
            None => (DEFAULT_COMPENSATION_TIMEOUT, Retry::new(3)),
        };
        self.compensation = Some(Box::new(CompensateSpec {
            run,
            timeout,
            retry,
        }));
        self
    }

    /// The compensation's per-attempt timeout and retry, set after
    /// [`compensate`](Self::compensate).
    pub fn compensate_policies(mut self, timeout: Duration, retry: Retry) -> Self {
        if let Some(spec) = self.compensation.as_mut() {
            spec.timeout = timeout;
            spec.retry = retry;
        }
        self
    }
}

/// The graph's compensations, from the declared ones of nodes `(index, spec)`, with
/// their heights in `meta`; `None` when no node has one.
pub(super) fn assemble<I>(
    declared: Vec<(u32, Box<CompensateSpec<I>>)>,
    trigger: CompensationTrigger,
    meta: &GraphMeta,
) -> Result<Option<Box<Compensations<I>>>, BuildError> {
    if declared.is_empty() {
        return Ok(None);
    }
    let heights = heights(meta);
    let mut list = Vec::with_capacity(declared.len());
    for (node, spec) in declared {
        let name = meta.name(node);
        let pipeline = Pipeline::<()>::builder(format!("{name} (compensation)"))
            .timeout(spec.timeout)
            .retry(spec.retry)
            .build()
            .map_err(|e| match e {
                BuildError::InvalidPolicy { policy, reason, .. } => BuildError::InvalidPolicy {
                    node: name.to_owned(),
                    policy,
                    reason: format!("compensation: {reason}"),
                },
                other => other,
            })?;
        list.push(Compensation {
            node,
            run: spec.run,
            pipeline,
            height: heights.get(node as usize).copied().unwrap_or(0),
        });
    }
    Ok(Some(Box::new(Compensations { list, trigger })))
}

/// Each node's height: the longest path from it down to a node without downstreams.
fn heights(meta: &GraphMeta) -> Vec<u32> {
    let n = meta.len();
    let mut height = vec![0_u32; n];
    // Upstreams come before their downstreams in declaration order when given by handle.
    // Names may point forward, so relax until nothing changes, in at most n rounds.
    for _ in 0..n {
        let mut changed = false;
        for node in (0..n as u32).rev() {
            let h = meta
                .downstreams(node)
                .iter()
                .map(|&d| height[d as usize] + 1)
                .max()
                .unwrap_or(0);
            if h > height[node as usize] {
                height[node as usize] = h;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    height
}
