//! [`GraphBuilder`]: adding nodes and routers, then `build()`.

use std::any::{Any, TypeId};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::compensate::{CompensateSpec, assemble};
use super::node::NodeBuilder;
use super::policy::Declared;
use super::router::RouterBuilder;
use super::validate;
use crate::engine::CompensationTrigger;
use crate::engine::{
    Extras, FailureMode, Graph, NodeDef, NodeKind, StartMode, States, TaskRef, Tasks, UpstreamRef,
    Upstreams,
};
use crate::error::BuildError;
use crate::orchestrator::Orchestrator;
use crate::util::names::Names;

static NEXT_GRAPH_ID: AtomicU64 = AtomicU64::new(1);

/// One declared upstream, after `add`: a node index, for handles, already checked, or a
/// name to resolve at `build()`. Stored as one `u32` by [`Up::encode`], so that a graph
/// built from handles alone hands its upstream list to the scheduler as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Up {
    Index(u32),
    /// The index of the upstream's [`NameRef`].
    Name(u32),
}

/// Marks an encoded upstream given by name.
const NAME_BIT: u32 = 1 << 31;

impl Up {
    fn encode(self) -> u32 {
        match self {
            Up::Index(i) => i,
            Up::Name(k) => NAME_BIT | k,
        }
    }

    pub(super) fn decode(raw: u32) -> Up {
        if raw & NAME_BIT == 0 {
            Up::Index(raw)
        } else {
            Up::Name(raw & !NAME_BIT)
        }
    }
}

/// An upstream given by name.
#[derive(Debug)]
pub(super) struct NameRef {
    pub(super) name: String,
    pub(super) type_id: TypeId,
    pub(super) type_name: &'static str,
}

/// A node as `NodeBuilder::finish` hands it to `GraphBuilder::add`. Its name is the
/// builder's pending name; see [`Names::begin`].
pub(super) struct NewNode<I> {
    /// Its task, stored in the builder's [`Tasks`].
    pub(super) task: TaskRef<I>,
    /// Policies, callbacks, kind; `None` for a plain task node.
    pub(super) extras: Option<Box<Extras<Declared>>>,
}

/// Defines a graph: add nodes with [`node`](Self::node), then [`build`](Self::build) it.
///
/// Adding a node never fails on the spot. Problems are collected and [`build`](Self::build)
/// returns the first one as a typed [`BuildError`]: a duplicate name, a handle from another
/// builder, an unknown upstream name, a cycle, a type mismatch.
///
/// # Defaults
/// - failure mode: [`FailureMode::PreservePartial`];
/// - start mode: [`StartMode::Inline`];
/// - name: none; see [`name`](Self::name).
///
/// ```
/// use baton_graph::{BoxError, BuildError, Graph};
///
/// let mut g = Graph::<()>::builder();
/// g.node("user").task(|_ctx, ()| async { Ok::<_, BoxError>(1_u64) });
/// g.node("user").task(|_ctx, ()| async { Ok::<_, BoxError>(2_u64) });
/// assert_eq!(g.len(), 2); // accepted here, rejected by `build()`
/// let err = g.build().unwrap_err();
/// assert_eq!(err, BuildError::DuplicateName { name: "user".into() });
/// ```
pub struct GraphBuilder<I> {
    pub(super) id: u64,
    /// The nodes, by index, with their policies as declared, one record shared by the nodes
    /// declared alike. Each task knows the type of the value it produces.
    pub(super) nodes: Vec<NodeDef<I, Box<Extras<Arc<Declared>>>>>,
    /// What the nodes' tasks point to; see `engine/task/storage.rs`.
    pub(super) tasks: Tasks,
    /// The last few distinct declarations of policies, the most recent last, which a node
    /// declared alike shares. Graphs are built in loops, node after node alike.
    recent_policies: Vec<Arc<Declared>>,
    pub(super) names: Names,
    /// Node `i`'s declared upstreams are `ups[up_at[i]..up_at[i + 1]]`.
    pub(super) up_at: Vec<u32>,
    /// Declared upstreams, encoded by [`Up::encode`].
    pub(super) ups: Vec<u32>,
    pub(super) name_refs: Vec<NameRef>,
    /// Scratch for `Upstreams::__declare`, reused so that adding a node allocates nothing.
    declared: Vec<UpstreamRef>,
    /// Problems found while adding nodes, with the node they were found at and their rank
    /// among that node's problems; see [`build`](Self::build).
    errors: Vec<(u32, u8, BuildError)>,
    /// Routers added by `select` whose `finish` has not run yet. `build()` rejects them: a
    /// router without its branches would never start them.
    open_routers: Vec<u32>,
    mode: FailureMode,
    start: StartMode,
    name: Option<Box<str>>,
    orchestrator: Orchestrator,
    /// Values shared by every task, by type; see [`state`](Self::state).
    states: Vec<(TypeId, Arc<dyn Any + Send + Sync>)>,
    /// The nodes' compensations, by node, and when they run.
    pub(super) compensations: Vec<(u32, Box<CompensateSpec<I>>)>,
    pub(super) trigger: CompensationTrigger,
}

impl<I> fmt::Debug for GraphBuilder<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GraphBuilder")
            .field("name", &self.name)
            .field("nodes", &self.names)
            .field("errors", &self.errors)
            .field("failure_mode", &self.mode)
            .field("start_mode", &self.start)
            .finish()
    }
}

impl<I: Send + Sync + 'static> Graph<I> {
    /// Starts a graph definition whose runs take an input of type `I`.
    ///
    /// See [`GraphBuilder`] for adding nodes and [`GraphBuilder::build`] for the checks.
    #[must_use]
    pub fn builder() -> GraphBuilder<I> {
        GraphBuilder::new()
    }
}

impl Orchestrator {
    /// Starts a graph whose breakers, bulkheads and retry budgets live in this
    /// orchestrator. Names given to nodes are looked up here, and handles given to nodes
    /// are registered here when the graph is built. The graph's runs report to the
    /// orchestrator's observers and statistics and obey its
    /// [`cancel_all`](Self::cancel_all) and [`shutdown`](Self::shutdown).
    #[must_use]
    pub fn graph<I: Send + Sync + 'static>(&self) -> GraphBuilder<I> {
        GraphBuilder::with_orchestrator(self.clone())
    }
}

impl<I: Send + Sync + 'static> Default for GraphBuilder<I> {
    fn default() -> Self {
        Self::new()
    }
}

impl<I: Send + Sync + 'static> GraphBuilder<I> {
    /// An empty graph definition with an orchestrator of its own. Same as
    /// [`Graph::builder`]; use [`Orchestrator::graph`] to share breakers, bulkheads and
    /// retry budgets by name with other graphs.
    #[must_use]
    pub fn new() -> Self {
        Self::with_orchestrator(Orchestrator::new())
    }

    pub(crate) fn with_orchestrator(orchestrator: Orchestrator) -> Self {
        GraphBuilder {
            id: NEXT_GRAPH_ID.fetch_add(1, Ordering::Relaxed),
            nodes: Vec::new(),
            tasks: Tasks::default(),
            names: Names::default(),
            up_at: vec![0],
            ups: Vec::new(),
            name_refs: Vec::new(),
            declared: Vec::new(),
            recent_policies: Vec::new(),
            errors: Vec::new(),
            open_routers: Vec::new(),
            mode: FailureMode::default(),
            start: StartMode::default(),
            name: None,
            orchestrator,
            states: Vec::new(),
            compensations: Vec::new(),
            trigger: CompensationTrigger::default(),
        }
    }

    /// The orchestrator whose registries this graph uses.
    #[must_use]
    pub fn orchestrator(&self) -> &Orchestrator {
        &self.orchestrator
    }

    /// Starts a node called `name`; finish it with [`NodeBuilder::task`], which adds it and
    /// returns its handle.
    ///
    /// The name appears in the report, the timeline, errors and events. A name already used
    /// in this graph makes [`build`](Self::build) fail with
    /// [`BuildError::DuplicateName`], an empty one with [`BuildError::EmptyName`].
    ///
    /// `name` is copied into one text buffer shared by all of the graph's names, which
    /// grows as a `Vec` does: a `&str` costs no allocation of its own, and a `String` is
    /// not kept. A [`NodeBuilder`] dropped before its task is set adds nothing, and its
    /// name is forgotten.
    pub fn node<T>(&mut self, name: impl AsRef<str>) -> NodeBuilder<'_, I, (), T> {
        self.names.begin(name.as_ref());
        NodeBuilder::new(self)
    }

    /// Starts a router called `name`: declare its upstreams, then its
    /// selector with [`RouterBuilder::select`], then its branches with
    /// [`Router::branch`](super::Router::branch), and [`finish`](super::Router::finish) it.
    ///
    /// ```
    /// # use baton_graph::{BoxError, Graph};
    /// let mut g = Graph::<()>::builder();
    /// let stock = g.node("stock").task(|_ctx, ()| async { Ok::<_, BoxError>(3u32) });
    /// let dispatch = g
    ///     .router("dispatch")
    ///     .after(stock)
    ///     .select(|_input, stock| if **stock > 0 { "ship" } else { "shortage" })
    ///     .branch("ship", |b| b.task(|_ctx, _stock| async { Ok::<_, BoxError>("shipped") }))
    ///     .branch("shortage", |b| b.task(|_ctx, _stock| async { Ok::<_, BoxError>("backordered") }))
    ///     .finish();
    /// # let _ = dispatch;
    /// ```
    ///
    /// The router's value is its chosen branch's; branches not chosen end `NotTaken`; a
    /// router whose upstream produced no value is `Skipped` and its branches `NotTaken`.
    ///
    /// `name` is copied, like a node's given to [`node`](Self::node). A router added by
    /// [`select`](RouterBuilder::select) but never [`finish`](super::Router::finish)ed
    /// makes `build()` fail with [`BuildError::InvalidRouter`].
    pub fn router<T>(&mut self, name: impl AsRef<str>) -> RouterBuilder<'_, I, (), T> {
        self.names.begin(name.as_ref());
        RouterBuilder::new(self)
    }

    /// Records a problem with router `router`, reported by `build()`.
    pub(super) fn invalid_router(&mut self, router: u32, reason: String) {
        let error = BuildError::InvalidRouter {
            router: self.names.get(router).to_owned(),
            reason,
        };
        // Found now, after the last node added: it ranks there, in declaration order.
        let at = (self.nodes.len() as u32).saturating_sub(1).max(router);
        self.errors.push((at, RANK_ROUTER, error));
    }

    /// Records a problem with node `node`, found while it was added, reported by `build()`.
    pub(super) fn invalid_node(&mut self, node: u32, error: BuildError) {
        self.errors.push((node, RANK_ROUTER, error));
    }

    /// The declared upstreams of node `id`.
    fn ups_of(&self, id: u32) -> impl ExactSizeIterator<Item = Up> + '_ {
        let i = id as usize;
        let from = self.up_at.get(i).map_or(0, |&t| t as usize);
        let to = self.up_at.get(i + 1).map_or(0, |&t| t as usize);
        self.ups
            .get(from..to)
            .unwrap_or(&[])
            .iter()
            .map(|&raw| Up::decode(raw))
    }

    /// Whether nodes `a` and `b` declared the same upstreams.
    pub(super) fn same_upstreams(&self, a: u32, b: u32) -> bool {
        let (ua, ub) = (self.ups_of(a), self.ups_of(b));
        ua.len() == ub.len()
            && ua.zip(ub).all(|(x, y)| match (x, y) {
                (Up::Index(i), Up::Index(j)) => i == j,
                (Up::Name(i), Up::Name(j)) => {
                    let name = |k: u32| self.name_refs.get(k as usize).map(|r| r.name.as_str());
                    name(i) == name(j)
                }
                _ => false,
            })
    }

    pub(super) fn set_kind(&mut self, index: u32, kind: NodeKind) {
        if let Some(node) = self.nodes.get_mut(index as usize) {
            node.extras.get_or_insert_with(Box::default).kind = kind;
        }
    }

    /// Node `index` is a branch of router `router`.
    pub(super) fn mark_branch(&mut self, index: u32, router: u32) {
        self.set_kind(index, NodeKind::Branch { router });
    }

    /// Router `router` was added by `select`; [`set_branches`](Self::set_branches) closes
    /// it.
    pub(super) fn open_router(&mut self, router: u32) {
        self.open_routers.push(router);
    }

    /// Gives router `router` its branches, as its `finish` does.
    pub(super) fn set_branches(&mut self, router: u32, branches: Box<[(Arc<str>, u32)]>) {
        self.open_routers.retain(|&r| r != router);
        self.set_kind(router, NodeKind::Router { branches });
    }

    /// Gives every task of the graph `state`, read with [`Ctx::state`](crate::Ctx::state):
    /// the client, configuration or pool the tasks share, instead of a clone captured by
    /// each closure. One state per type: a second of the same type replaces the first. It
    /// is shared by every run of the graph, so it is `Send + Sync`.
    pub fn state<S: Send + Sync + 'static>(&mut self, state: S) -> &mut Self {
        self.states.push((TypeId::of::<S>(), Arc::new(state)));
        self
    }

    /// Sets the failure mode every run of the graph uses unless its
    /// [`RunOptions`](crate::RunOptions) override it. Default:
    /// [`FailureMode::PreservePartial`].
    ///
    /// ```
    /// use baton_graph::{BoxError, FailureMode, Graph, RunError};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let mut g = Graph::<()>::builder();
    /// g.failure_mode(FailureMode::FailAll);
    /// g.node("stock").task(|_ctx, ()| async { Err::<u32, BoxError>("503".into()) });
    /// let err = g.build()?.run(()).await.unwrap_err();
    /// assert!(matches!(&err, RunError::Failed { node, failed: 1, .. } if node == "stock"));
    /// assert_eq!(err.report().map(|r| r.len()), Some(1)); // the report is kept
    /// # Ok(())
    /// # }
    /// ```
    pub fn failure_mode(&mut self, mode: FailureMode) -> &mut Self {
        self.mode = mode;
        self
    }

    /// Sets where every run of the graph starts its nodes unless its
    /// [`RunOptions`](crate::RunOptions) override it: in the task that awaits the run, or
    /// spread over tokio's workers. [`StartMode`] says what each costs and gives. Default:
    /// [`StartMode::Inline`].
    pub fn start_mode(&mut self, start: StartMode) -> &mut Self {
        self.start = start;
        self
    }

    /// Names the graph, for example after the endpoint that runs it, such as `"checkout"`.
    /// Its runs' events, `tracing` spans and metrics carry the name as `graph`, so that
    /// graphs can be told apart on a dashboard; a graph without one has no `graph` field or
    /// label. Keep it fixed, never a request's or a run's id: every name is a series of its
    /// own for a metrics backend. Default: none.
    ///
    /// ```
    /// use baton_graph::Graph;
    ///
    /// let mut g = Graph::<()>::builder();
    /// g.name("checkout");
    /// assert_eq!(g.build()?.name(), Some("checkout"));
    /// # Ok::<(), baton_graph::BuildError>(())
    /// ```
    pub fn name(&mut self, name: impl Into<String>) -> &mut Self {
        self.name = Some(name.into().into_boxed_str());
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
    /// One problem, the first of these checks that finds any, each in declaration order:
    /// 1. what was found while nodes were added, for each node in turn: a handle from
    ///    another builder, [`BuildError::ForeignHandle`]; an empty name,
    ///    [`BuildError::EmptyName`]; its name already used, [`BuildError::DuplicateName`];
    ///    a misdefined router, [`BuildError::InvalidRouter`], among them a router whose
    ///    [`Router::finish`] was never called;
    /// 2. upstreams given by name: [`BuildError::UnknownUpstream`],
    ///    [`BuildError::TypeMismatch`];
    /// 3. policies: [`BuildError::InvalidPolicy`], [`BuildError::UnknownPolicy`],
    ///    [`BuildError::PolicyConflict`];
    /// 4. [`BuildError::Cycle`], with the cycle's path.
    ///
    /// [`Router::finish`]: super::Router::finish
    ///
    /// ```
    /// use baton_graph::{BoxError, BuildError, Graph};
    ///
    /// let mut g = Graph::<()>::builder();
    /// g.node("a").after_names::<u32>(["b"]).task(|_ctx, _| async { Ok::<_, BoxError>(1_u32) });
    /// g.node("b").after_names::<u32>(["a"]).task(|_ctx, _| async { Ok::<_, BoxError>(2_u32) });
    /// let err = g.build().unwrap_err();
    /// assert!(matches!(&err, BuildError::Cycle { path } if path.len() == 3));
    /// assert_eq!(err.to_string(), "dependency cycle: a -> b -> a");
    /// ```
    pub fn build(mut self) -> Result<Graph<I>, BuildError> {
        // Duplicate names are found now, in one pass over all names. A node's problems rank
        // as they arise while adding it: its upstreams, its name, then, for routers, its
        // branches.
        if let Some(index) = self.names.iter().position(str::is_empty) {
            let error = BuildError::EmptyName { index };
            self.errors.push((index as u32, RANK_NAME, error));
        }
        if let Some(dup) = self.names.check_unique() {
            let error = BuildError::DuplicateName {
                name: self.names.get(dup).to_owned(),
            };
            self.errors.push((dup, RANK_NAME, error));
        }
        for router in std::mem::take(&mut self.open_routers) {
            let error = BuildError::InvalidRouter {
                router: self.names.get(router).to_owned(),
                reason: "it was never finished (call `.finish()` after its branches)".to_owned(),
            };
            self.errors.push((router, RANK_ROUTER, error));
        }
        if let Some(i) = (0..self.errors.len()).min_by_key(|&i| {
            let (node, rank, _) = &self.errors[i];
            (*node, *rank, i)
        }) {
            return Err(self.errors.swap_remove(i).2);
        }
        let mut inner = validate::build(
            self.id,
            self.nodes,
            self.tasks,
            self.names,
            self.up_at,
            self.ups,
            self.name_refs,
            self.mode,
            self.start,
            &self.orchestrator,
            States::new(self.states),
        )?;
        inner.name = self.name;
        inner.compensations = assemble(self.compensations, self.trigger, &inner.meta)?;
        Ok(Graph::new(inner))
    }

    /// Records the upstreams of the node about to be added, whose name is the pending one.
    /// Problems are recorded for `build()`.
    pub(super) fn declare<U: Upstreams>(&mut self, upstreams: &U) {
        self.declared.clear();
        upstreams.__declare(&mut self.declared);
        for up in self.declared.drain(..) {
            match up {
                UpstreamRef::Handle { graph, index: up } => {
                    if graph != self.id {
                        let error = BuildError::ForeignHandle {
                            node: self.names.pending().to_owned(),
                            upstream: format!("#{up}"),
                        };
                        self.errors
                            .push((self.nodes.len() as u32, RANK_UPSTREAM, error));
                    }
                    self.ups.push(Up::Index(up).encode());
                }
                UpstreamRef::Name {
                    name,
                    type_id,
                    type_name,
                } => {
                    self.ups
                        .push(Up::Name(self.name_refs.len() as u32).encode());
                    self.name_refs.push(NameRef {
                        name,
                        type_id,
                        type_name,
                    });
                }
            }
        }
    }

    /// Adds a node whose upstreams [`declare`](Self::declare) just recorded.
    pub(super) fn add(&mut self, node: NewNode<I>) -> u32 {
        let index = self.nodes.len() as u32;
        self.names.commit();
        self.up_at.push(self.ups.len() as u32);
        let extras = node.extras.map(|e| {
            let Extras {
                kind,
                callbacks,
                policy,
            } = *e;
            Box::new(Extras {
                kind,
                callbacks,
                policy: policy.map(|spec| self.share(spec)),
            })
        });
        self.nodes.push(NodeDef {
            task: node.task,
            extras,
        });
        index
    }

    /// `spec` as a record shared with the nodes declared alike among the last few distinct
    /// declarations, as [`Declared::same`] decides, or as a new one.
    fn share(&mut self, spec: Declared) -> Arc<Declared> {
        /// How many distinct declarations are remembered.
        const KEEP: usize = 8;
        let recent = &mut self.recent_policies;
        if let Some(at) = recent.iter().rposition(|s| s.same(&spec)) {
            let hit = recent.remove(at);
            recent.push(Arc::clone(&hit)); // the most recent last
            return hit;
        }
        if recent.len() == KEEP {
            recent.remove(0);
        }
        let spec = Arc::new(spec);
        recent.push(Arc::clone(&spec));
        spec
    }
}

/// The ranks of a node's problems; see [`GraphBuilder::build`].
const RANK_UPSTREAM: u8 = 0;
const RANK_NAME: u8 = 1;
const RANK_ROUTER: u8 = 2;
