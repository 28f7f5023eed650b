//! Conditional routing: a router node reads its upstreams' values and returns a branch key.
//! The chosen branch, a node with its own policies, runs, and its value becomes the
//! router's value. Branches not chosen end `NotTaken`.

use std::any::TypeId;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use super::graph_builder::{GraphBuilder, NewNode};
use super::node::NodeBuilder;
use crate::engine::{
    AttemptFuture, Ctx, ErasedTask, Extras, FallbackFuture, FallbackScope, FetchCx, Named,
    NodeKind, Upstreams,
};
use crate::error::NodeError;
use crate::id::Node;
use crate::policy::limit::bulkhead::BulkheadPermit;

/// Defines a router: its upstreams, then its selector; see [`GraphBuilder::router`].
#[must_use = "a router is added to the graph by `.select(..)`, and must then be `.finish()`ed"]
pub struct RouterBuilder<'g, I, U, T> {
    /// Holds the router's name, pending, until `select` adds it.
    builder: &'g mut GraphBuilder<I>,
    upstreams: U,
    _value: PhantomData<fn() -> T>,
}

impl<I, U: fmt::Debug, T> fmt::Debug for RouterBuilder<'_, I, U, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RouterBuilder")
            .field("name", &self.builder.names.pending())
            .field("upstreams", &self.upstreams)
            .finish_non_exhaustive()
    }
}

impl<'g, I: Send + Sync + 'static, T> RouterBuilder<'g, I, (), T> {
    /// A router builder for the name `builder` holds pending.
    pub(crate) fn new(builder: &'g mut GraphBuilder<I>) -> Self {
        RouterBuilder {
            builder,
            upstreams: (),
            _value: PhantomData,
        }
    }

    /// Declares the router's upstreams, like [`NodeBuilder::after`]. Its branches receive
    /// the same values.
    pub fn after<U: Upstreams>(self, upstreams: U) -> RouterBuilder<'g, I, U, T> {
        RouterBuilder {
            builder: self.builder,
            upstreams,
            _value: PhantomData,
        }
    }

    /// Declares the router's upstreams by name, like [`NodeBuilder::after_names`].
    pub fn after_names<V>(
        self,
        names: impl IntoIterator<Item = impl Into<String>>,
    ) -> RouterBuilder<'g, I, Named<V>, T>
    where
        V: Send + Sync + 'static,
    {
        self.after(Named::new(names.into_iter().map(Into::into).collect()))
    }
}

impl<'g, I, U, T> RouterBuilder<'g, I, U, T>
where
    I: Send + Sync + 'static,
    U: Upstreams,
    T: Send + Sync + 'static,
{
    /// Sets the selector and adds the router to the graph: `select(input, values)` returns
    /// the key of the branch to run, once the upstreams produced their values. A key no
    /// branch has fails the router with [`NodeError::UnknownBranch`], naming the key and
    /// the known keys; a panicking selector fails it with the panic message.
    pub fn select<K, F>(self, select: F) -> Router<'g, I, U, T>
    where
        F: Fn(&I, &U::Values) -> K + Send + Sync + 'static,
        K: Into<String>,
    {
        self.builder.declare(&self.upstreams);
        let task = RouterTask::<I, U, T> {
            select: Box::new(move |input: &I, values: &U::Values| select(input, values).into()),
            _value: PhantomData,
        };
        let node = NewNode {
            task: self.builder.tasks.push(task),
            extras: Some(Box::new(Extras {
                kind: NodeKind::Router {
                    branches: Box::new([]),
                },
                policy: None,
                callbacks: None,
            })),
        };
        let graph = self.builder.id;
        let index = self.builder.add(node);
        self.builder.open_router(index);
        Router {
            builder: self.builder,
            node: Node::new(graph, index),
            upstreams: self.upstreams,
            branches: Vec::new(),
        }
    }
}

/// A router whose selector is set: add its branches, then [`finish`](Self::finish) it. A
/// router dropped unfinished makes [`GraphBuilder::build`] fail with
/// [`BuildError::InvalidRouter`](crate::BuildError::InvalidRouter).
///
/// ```
/// use baton_graph::{BoxError, Graph, Outcome};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), BoxError> {
/// let mut g = Graph::<&'static str>::builder(); // the run input: a country code
/// let shipping = g
///     .router("shipping")
///     .select(|country, ()| *country)
///     .branch("DE", |b| b.task(|_ctx, ()| async { Ok::<_, BoxError>(5_u32) }))
///     .branch("FR", |b| b.task(|_ctx, ()| async { Ok::<_, BoxError>(7_u32) }))
///     .finish();
/// let graph = g.build()?;
/// let report = graph.run("FR").await?;
/// assert_eq!(report.get(shipping), Some(&7));
/// assert_eq!(report.by_name("DE").map(|n| n.outcome()), Some(Outcome::NotTaken));
/// let report = graph.run("US").await?;
/// let err = report.node(shipping).and_then(|n| n.error()).unwrap();
/// assert_eq!(err.kind(), "unknown_branch");
/// assert_eq!(
///     err.to_string(),
///     "router `shipping` chose unknown branch `US` (known: DE, FR)"
/// );
/// # Ok(())
/// # }
/// ```
#[must_use = "call `.finish()` to get the router's handle (an unfinished router fails `build()`)"]
pub struct Router<'g, I, U, T> {
    builder: &'g mut GraphBuilder<I>,
    node: Node<T>,
    upstreams: U,
    branches: Vec<(Arc<str>, u32)>,
}

impl<I, U: fmt::Debug, T> fmt::Debug for Router<'_, I, U, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Router")
            .field("node", &self.node)
            .field("branches", &self.branches)
            .finish_non_exhaustive()
    }
}

impl<I, U, T> Router<'_, I, U, T>
where
    I: Send + Sync + 'static,
    U: Upstreams,
    T: Send + Sync + 'static,
{
    /// Adds the branch chosen by `key`: a node named `key` with its own policies, defined
    /// by `define`, which receives a [`NodeBuilder`] whose upstreams are the router's and
    /// must return what finishing it with `.task(..)` or `.blocking_task(..)` returns. Its
    /// value becomes the router's. `build()` rejects a branch defined otherwise, or one
    /// that declares upstreams of its own, with
    /// [`BuildError::InvalidRouter`](crate::BuildError::InvalidRouter). `key` is copied,
    /// like a node's name given to [`GraphBuilder::node`].
    pub fn branch(
        mut self,
        key: impl AsRef<str>,
        define: impl FnOnce(NodeBuilder<'_, I, U, T>) -> Node<T>,
    ) -> Self {
        let key = key.as_ref();
        let expected = self.builder.len() as u32;
        let builder = NodeBuilder::for_branch(&mut *self.builder, key, self.upstreams.clone());
        let branch = define(builder);
        let router = self.node.index;
        let problem = if branch.graph != self.node.graph
            || branch.index != expected
            || self.builder.len() as u32 != expected + 1
        {
            Some(format!(
                "branch `{key}` must be defined by the builder it is given (return what its `.task(..)` returns)"
            ))
        } else if !self.builder.same_upstreams(router, branch.index) {
            Some(format!(
                "branch `{key}` declares upstreams of its own; a branch receives its router's"
            ))
        } else {
            None
        };
        match problem {
            Some(reason) => self.builder.invalid_router(router, reason),
            None => {
                self.builder.mark_branch(branch.index, router);
                self.branches.push((Arc::from(key), branch.index));
            }
        }
        self
    }

    /// Finishes the router and returns its handle: downstreams depend on the router, and
    /// receive the chosen branch's value. A router without branches is a
    /// [`BuildError::InvalidRouter`](crate::BuildError::InvalidRouter) at `build()`.
    pub fn finish(self) -> Node<T> {
        if self.branches.is_empty() {
            self.builder
                .invalid_router(self.node.index, "it has no branch".to_owned());
        }
        self.builder
            .set_branches(self.node.index, self.branches.into_boxed_slice());
        self.node
    }
}

type Select<I, V> = Box<dyn Fn(&I, &V) -> String + Send + Sync>;

struct RouterTask<I, U: Upstreams, T> {
    select: Select<I, U::Values>,
    /// The value of the router: its chosen branch's.
    _value: PhantomData<fn() -> T>,
}

impl<I, U, T> ErasedTask<I> for RouterTask<I, U, T>
where
    I: Send + Sync + 'static,
    U: Upstreams,
    T: Send + Sync + 'static,
{
    fn value_type(&self) -> (TypeId, &'static str) {
        (TypeId::of::<T>(), std::any::type_name::<T>())
    }

    fn call(
        &self,
        _ctx: Ctx<I>,
        _cx: &FetchCx<'_>,
        _permit: Option<BulkheadPermit>,
        _into: &mut Option<AttemptFuture>,
    ) -> bool {
        false
    }

    fn fallback(
        &self,
        _scope: &FallbackScope<'_, I>,
        _error: Arc<NodeError>,
    ) -> Option<FallbackFuture> {
        None
    }

    fn select(&self, input: &I, cx: &FetchCx<'_>) -> Option<String> {
        let values = U::__fetch(cx)?;
        Some((self.select)(input, &values))
    }
}
