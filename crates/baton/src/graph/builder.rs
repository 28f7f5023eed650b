//! `GraphBuilder` and `NodeBuilder`: adding nodes, declaring upstreams, attaching tasks.

use std::any::TypeId;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::handle::Node;
use super::upstreams::{Named, UpstreamRef, Upstreams};
use super::{Graph, validate};
use crate::error::{BoxError, BuildError};
use crate::run::FailureMode;
use crate::task::{Ctx, ErasedTask, TypedTask};

static NEXT_GRAPH_ID: AtomicU64 = AtomicU64::new(1);

/// A node as the builder holds it until `build()`.
pub(super) struct PendingNode<I> {
    pub(super) name: Arc<str>,
    pub(super) upstreams: Vec<UpstreamRef>,
    pub(super) type_id: TypeId,
    pub(super) type_name: &'static str,
    pub(super) task: Box<dyn ErasedTask<I>>,
}

/// Defines a graph: add nodes with [`node`](Self::node), then [`build`](Self::build) it.
///
/// Adding a node never fails on the spot; problems (a duplicate name, a handle from another
/// builder, an unknown upstream name, a cycle, a type mismatch) are collected and
/// [`build`](Self::build) returns the first one as a typed [`BuildError`].
///
/// # Defaults
/// - failure mode: [`FailureMode::PreservePartial`].
pub struct GraphBuilder<I> {
    pub(super) id: u64,
    pub(super) nodes: Vec<PendingNode<I>>,
    names: HashMap<Arc<str>, u32>,
    errors: Vec<BuildError>,
    mode: FailureMode,
}

impl<I> fmt::Debug for GraphBuilder<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GraphBuilder")
            .field(
                "nodes",
                &self.nodes.iter().map(|n| &n.name).collect::<Vec<_>>(),
            )
            .field("errors", &self.errors)
            .field("failure_mode", &self.mode)
            .finish()
    }
}

impl<I: Send + Sync + 'static> Default for GraphBuilder<I> {
    fn default() -> Self {
        Self::new()
    }
}

impl<I: Send + Sync + 'static> GraphBuilder<I> {
    /// An empty graph definition. Same as [`Graph::builder`].
    #[must_use]
    pub fn new() -> Self {
        GraphBuilder {
            id: NEXT_GRAPH_ID.fetch_add(1, Ordering::Relaxed),
            nodes: Vec::new(),
            names: HashMap::new(),
            errors: Vec::new(),
            mode: FailureMode::default(),
        }
    }

    /// Starts a node called `name`; finish it with [`NodeBuilder::task`], which adds it and
    /// returns its handle.
    ///
    /// The name appears in the report, the timeline, errors and events. A name already used
    /// in this graph makes [`build`](Self::build) fail with
    /// [`BuildError::DuplicateName`].
    pub fn node<T>(&mut self, name: impl Into<String>) -> NodeBuilder<'_, I, (), T> {
        NodeBuilder {
            builder: self,
            name: name.into(),
            upstreams: (),
            _value: PhantomData,
        }
    }

    /// Sets the failure mode every run of the graph uses unless its
    /// [`RunOptions`](crate::RunOptions) override it. Default:
    /// [`FailureMode::PreservePartial`].
    pub fn failure_mode(&mut self, mode: FailureMode) -> &mut Self {
        self.mode = mode;
        self
    }

    /// How many nodes have been added so far.
    #[must_use]
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether no node has been added yet.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Validates the definition and returns the immutable, shareable [`Graph`].
    ///
    /// # Errors
    /// The first problem found, in declaration order:
    /// [`BuildError::DuplicateName`], [`BuildError::ForeignHandle`],
    /// [`BuildError::UnknownUpstream`], [`BuildError::TypeMismatch`], then
    /// [`BuildError::Cycle`] with the cycle's path.
    pub fn build(self) -> Result<Graph<I>, BuildError> {
        if let Some(first) = self.errors.into_iter().next() {
            return Err(first);
        }
        let inner = validate::build(self.id, self.nodes, self.names, self.mode)?;
        Ok(Graph {
            inner: Arc::new(inner),
        })
    }

    fn add(&mut self, node: PendingNode<I>) -> u32 {
        let index = self.nodes.len() as u32;
        if self.names.contains_key(&node.name) {
            self.errors.push(BuildError::DuplicateName {
                name: node.name.to_string(),
            });
        } else {
            self.names.insert(Arc::clone(&node.name), index);
        }
        for up in &node.upstreams {
            if let UpstreamRef::Handle { graph, index } = up {
                if *graph != self.id {
                    self.errors.push(BuildError::ForeignHandle {
                        node: node.name.to_string(),
                        upstream: format!("#{index}"),
                    });
                }
            }
        }
        self.nodes.push(node);
        index
    }
}

/// One node being defined: its upstreams, then its task.
///
/// `U` is the upstreams' shape (see [`Upstreams`]) and `T` the value the task produces;
/// both are inferred. The node is added to the graph when [`task`](Self::task) is called.
#[must_use = "a node is only added to the graph when `.task(..)` is called"]
pub struct NodeBuilder<'g, I, U, T> {
    builder: &'g mut GraphBuilder<I>,
    name: String,
    upstreams: U,
    _value: PhantomData<fn() -> T>,
}

impl<I, U: fmt::Debug, T> fmt::Debug for NodeBuilder<'_, I, U, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeBuilder")
            .field("name", &self.name)
            .field("upstreams", &self.upstreams)
            .finish_non_exhaustive()
    }
}

impl<'g, I: Send + Sync + 'static, T> NodeBuilder<'g, I, (), T> {
    /// Declares the node's upstreams: a [`Node`] handle, a tuple of 1 to 16 handles, or a
    /// `Vec` of handles of one type. The task then receives their values typed, each as an
    /// `Arc`: `(Node<User>, Node<Sku>)` gives `(Arc<User>, Arc<Sku>)`.
    ///
    /// The node's first attempt starts only after every upstream ended with a value; when one
    /// did not, the node ends `Skipped` naming it (DESIGN rule 1).
    pub fn after<U: Upstreams>(self, upstreams: U) -> NodeBuilder<'g, I, U, T> {
        NodeBuilder {
            builder: self.builder,
            name: self.name,
            upstreams,
            _value: PhantomData,
        }
    }

    /// Declares the node's upstreams by name, for graphs built from configuration. Each
    /// must produce a `V`; the task receives their values as [`Inputs<V>`](crate::Inputs).
    ///
    /// Names may refer to nodes added later. `build()` reports an unknown name
    /// ([`BuildError::UnknownUpstream`]), an upstream of another type
    /// ([`BuildError::TypeMismatch`]) and a cycle ([`BuildError::Cycle`]).
    pub fn after_names<V, S>(
        self,
        names: impl IntoIterator<Item = S>,
    ) -> NodeBuilder<'g, I, Named<V>, T>
    where
        V: Send + Sync + 'static,
        S: Into<String>,
    {
        NodeBuilder {
            builder: self.builder,
            name: self.name,
            upstreams: Named::new(names.into_iter().map(Into::into).collect()),
            _value: PhantomData,
        }
    }
}

impl<I, U, T> NodeBuilder<'_, I, U, T>
where
    I: Send + Sync + 'static,
    U: Upstreams,
    T: Send + Sync + 'static,
{
    /// Sets the node's task, adds the node to the graph, and returns its typed handle.
    ///
    /// The task is an `async` closure `|ctx, values| async move { .. }` returning
    /// `Result<T, E>` with `E: Into<BoxError>`. It is `Fn`, not `FnOnce`: a retrying node
    /// calls it once per attempt, each time with a fresh [`Ctx`] and the same upstream
    /// values. A panic inside it (before or after its first `.await`) is caught and becomes
    /// the node's `Failed` outcome with the panic message.
    pub fn task<F, Fut, E>(self, task: F) -> Node<T>
    where
        F: Fn(Ctx<I>, U::Values) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        let mut upstreams = Vec::new();
        self.upstreams.__declare(&mut upstreams);
        let node = PendingNode {
            name: Arc::from(self.name),
            upstreams,
            type_id: TypeId::of::<T>(),
            type_name: std::any::type_name::<T>(),
            task: Box::new(TypedTask::new(self.upstreams, task)),
        };
        let graph = self.builder.id;
        let index = self.builder.add(node);
        Node::new(graph, index)
    }
}
