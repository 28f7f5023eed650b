//! A node's fallback as its task stores it: a [`Fallback`] of the error alone, or one that
//! is also given the node's context and upstream values, made by
//! [`NodeBuilder::fallback_with`](crate::NodeBuilder::fallback_with).

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use tokio::time::Instant;

use super::ctx::{Ctx, CtxCut, FallbackFuture};
use super::tokens::FALLBACK;
use super::upstreams::{FetchCx, Upstreams};
use crate::engine::run::state::RunState;
use crate::error::{BoxError, NodeError};
use crate::onion::{Fallback, Recovered, recover_async};
use crate::util::value::Value;

/// A fallback given the node's context, the upstream values, which it fetches from the
/// `FetchCx`, and the error. It catches the panics of the function it wraps.
type CtxFallbackFn<I, T> = Arc<
    dyn Fn(Ctx<I>, &FetchCx<'_>, Arc<NodeError>) -> BoxFuture<'static, Result<T, NodeError>>
        + Send
        + Sync,
>;

/// A node's fallback.
pub(crate) enum NodeFallback<I, T> {
    /// A function of the error alone.
    Plain(Fallback<T>),
    /// A function of the context, the upstream values and the error.
    WithCtx(CtxFallbackFn<I, T>),
}

impl<I, T> fmt::Debug for NodeFallback<I, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeFallback::Plain(fallback) => fallback.fmt(f),
            NodeFallback::WithCtx(_) => f.write_str("Fallback { kind: \"async fn with ctx\" }"),
        }
    }
}

impl<I: Send + Sync + 'static, T: Send + Sync + 'static> NodeFallback<I, T> {
    /// The fallback `f(ctx, values, error)` of a node whose upstreams are `U`.
    pub(crate) fn with_ctx<U, F, Fut, E>(f: F) -> Self
    where
        U: Upstreams,
        F: Fn(Ctx<I>, U::Values, Arc<NodeError>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        let f = Arc::new(f);
        NodeFallback::WithCtx(Arc::new(move |ctx, cx, error| {
            // A node's fallback runs only once each of its upstreams produced a value, and
            // validation checked their types.
            let Some(values) = U::__fetch(cx) else {
                unreachable!(
                    "node {}'s upstream values are present and typed",
                    ctx.node_name()
                )
            };
            let node = ctx.node_name().to_owned();
            let f = Arc::clone(&f);
            Box::pin(async move {
                let start = move |e| {
                    let fut = f(ctx, values, e);
                    async move { fut.await.map_err(Into::into) }
                };
                recover_async(&node, error, start).await
            })
        }))
    }
}

/// What a fallback is run for: node `node` of `run`, after `attempts` attempts ran, cut at
/// `deadline`.
pub(crate) struct FallbackScope<'a, I> {
    pub(crate) run: &'a Arc<RunState<I>>,
    pub(crate) node: u32,
    pub(crate) attempts: u32,
    pub(crate) deadline: Option<Instant>,
}

/// Where a task keeps its fallback: `()` for none, as most nodes have, or a box. A type,
/// not an `Option`, so that a task without one is its closure alone, and a closure that
/// captures nothing takes no room in the graph's task storage, `engine/task/storage.rs`.
pub(crate) trait FallbackSlot<I: Send + Sync + 'static, T>: Send + Sync + 'static {
    /// The fallback's run for `error`, if there is a fallback.
    fn recover(
        &self,
        scope: &FallbackScope<'_, I>,
        error: Arc<NodeError>,
    ) -> Option<FallbackFuture>;

    /// Whether there is a fallback. A diagram labels the node with it.
    fn is_set(&self) -> bool {
        true
    }
}

impl<I: Send + Sync + 'static, T> FallbackSlot<I, T> for () {
    fn recover(&self, _: &FallbackScope<'_, I>, _: Arc<NodeError>) -> Option<FallbackFuture> {
        None
    }

    fn is_set(&self) -> bool {
        false
    }
}

impl<I, T> FallbackSlot<I, T> for Box<NodeFallback<I, T>>
where
    I: Send + Sync + 'static,
    T: Send + Sync + 'static,
{
    fn recover(
        &self,
        scope: &FallbackScope<'_, I>,
        error: Arc<NodeError>,
    ) -> Option<FallbackFuture> {
        Some(recover(self, scope, error))
    }
}

impl<I, T> FallbackSlot<I, T> for Option<Box<NodeFallback<I, T>>>
where
    I: Send + Sync + 'static,
    T: Send + Sync + 'static,
{
    fn recover(
        &self,
        scope: &FallbackScope<'_, I>,
        error: Arc<NodeError>,
    ) -> Option<FallbackFuture> {
        Some(recover(self.as_deref()?, scope, error))
    }

    fn is_set(&self) -> bool {
        self.is_some()
    }
}

/// Runs `fallback` for `error` in `scope`.
fn recover<I, T>(
    fallback: &NodeFallback<I, T>,
    scope: &FallbackScope<'_, I>,
    error: Arc<NodeError>,
) -> FallbackFuture
where
    I: Send + Sync + 'static,
    T: Send + Sync + 'static,
{
    match fallback {
        NodeFallback::Plain(fallback) => {
            let node = scope.run.graph.meta.name(scope.node).to_owned();
            let fallback = fallback.clone();
            Box::pin(async move {
                Ok(match fallback.recover(&node, error).await? {
                    Recovered::Shared(value) => Value::from_arc(value),
                    Recovered::Owned(value) => Value::new(value),
                })
            })
        }
        NodeFallback::WithCtx(f) => {
            let cx = scope.run.fetch_cx(scope.node);
            let ctx = Ctx::new(
                Arc::clone(scope.run),
                scope.node,
                scope.attempts,
                CtxCut::Fallback(scope.deadline),
            );
            // Cancels the fallback's token, if it asked for one, when it ends in any way.
            let ended = FallbackEnded {
                run: Arc::clone(scope.run),
                node: scope.node,
            };
            let recovering = f(ctx, &cx, error);
            Box::pin(async move {
                let _ended = ended;
                Ok(Value::new(recovering.await?))
            })
        }
    }
}

/// Ends the token of node `node`'s fallback when dropped.
struct FallbackEnded<I> {
    run: Arc<RunState<I>>,
    node: u32,
}

impl<I> Drop for FallbackEnded<I> {
    fn drop(&mut self) {
        self.run.core.tokens().end(self.node, FALLBACK);
    }
}
