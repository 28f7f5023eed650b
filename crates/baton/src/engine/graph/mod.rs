//! The compiled graph: the immutable [`Graph`] that runs many times, and what the scheduler
//! reads of it. That is each node's task and extras, and the edges in compressed form.
//!
//! Build once, run many: the builder checks names, handles, upstream types and cycles once,
//! and the [`Graph`] it returns is an `Arc` inside, cheap to clone and share across tasks.
//! Each [`Graph::run`] gets its own input, its own per-node state and its own report; runs
//! never share state, so any number can run at once.

mod describe;
pub(super) mod spare;

use std::any::{Any, TypeId};
use std::fmt;
use std::sync::Arc;

use super::compensate::Compensations;
use super::run::future::Run;
use super::run::options::{FailureMode, RunOptions};
use super::run::start::StartMode;
use super::task::ctx::ErasedTask;
use super::task::storage::{TaskRef, Tasks};
use crate::observe::NodeCallbacks;
use crate::onion::ResolvedPolicies;
use crate::onion::reload::Reload;
use crate::orchestrator::Orchestrator;
use crate::policy::Completion;
use crate::util::names::Names;
use crate::util::prefetch::prefetch;
use spare::Spares;

/// An immutable, validated graph of nodes. It is cheap to clone, being an `Arc`, and runs
/// any number of times, concurrently.
///
/// `I` is the run input: the per-run value, such as the request, that every task can read
/// through [`Ctx::input`](crate::Ctx::input). Create one with [`Graph::builder`].
pub struct Graph<I> {
    pub(crate) inner: Arc<GraphInner<I>>,
}

impl<I> Clone for Graph<I> {
    fn clone(&self) -> Self {
        Graph {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<I> fmt::Debug for Graph<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Graph")
            .field("name", &self.inner.name)
            .field("nodes", &self.inner.meta.names)
            .field("failure_mode", &self.inner.mode)
            .field("start_mode", &self.inner.start)
            .finish_non_exhaustive()
    }
}

impl<I: Send + Sync + 'static> Graph<I> {
    /// Runs the graph once with `input`, in the graph's [`FailureMode`].
    ///
    /// The returned [`Run`] is a future: nothing starts until it is first polled, and
    /// dropping it cancels every node of the run. It must be polled inside a tokio runtime;
    /// otherwise it resolves to [`RunError::NoRuntime`](crate::RunError::NoRuntime).
    pub fn run(&self, input: I) -> Run<I> {
        self.run_with(input, RunOptions::new())
    }

    /// Runs the graph once with `input` and per-run `options`. Each option left unset
    /// keeps its default: the graph's failure mode and start mode, no timeout and no
    /// deadline, idempotency keys made from the run's id, and a `run` span that is a
    /// child of the current one. `run_with(input, RunOptions::new())` is `run(input)`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{BoxError, FailureMode, Graph, RunError, RunOptions};
    /// use tokio::time::sleep;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// let slow = g.node("slow").task(|_ctx, ()| async {
    ///     sleep(Duration::from_secs(1)).await;
    ///     Ok::<_, BoxError>(())
    /// });
    /// let graph = g.build()?;
    /// let options = RunOptions::new()
    ///     .timeout(Duration::from_millis(200))
    ///     .failure_mode(FailureMode::FailAll);
    /// let Err(RunError::Failed { report, .. }) = graph.run_with((), options).await else {
    ///     panic!("the run should fail");
    /// };
    /// let slow = report.node(slow).unwrap();
    /// assert_eq!(slow.error().map(|e| e.kind()), Some("deadline_exceeded"));
    /// assert_eq!(slow.end(), Duration::from_millis(200));
    /// # Ok(())
    /// # }
    /// ```
    pub fn run_with(&self, input: I, options: RunOptions) -> Run<I> {
        Run::new(Arc::clone(&self.inner), input, options, false)
    }
}

impl<I> Graph<I> {
    /// How many nodes the graph has.
    #[must_use]
    pub fn len(&self) -> usize {
        self.inner.meta.names.len()
    }

    /// Whether the graph has no nodes. Runs of an empty graph end at once with an empty
    /// report.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.inner.meta.names.is_empty()
    }

    /// The nodes' names, in the order they were added.
    #[must_use]
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> {
        self.inner.meta.names.iter()
    }

    /// The names of the upstreams of the node called `name`, in declaration order; `None`
    /// when no node has that name. The graph's first lookup by name builds its name table,
    /// in time linear in the number of nodes, once per graph.
    ///
    /// ```
    /// use baton_graph::{BoxError, Graph};
    ///
    /// let mut g = Graph::<()>::builder();
    /// let user = g.node("user").task(|_ctx, ()| async { Ok::<_, BoxError>(1_u64) });
    /// let sku = g.node("sku").task(|_ctx, ()| async { Ok::<_, BoxError>(2_u64) });
    /// g.node("line").after((user, sku)).task(|_ctx, _| async { Ok::<_, BoxError>(()) });
    /// let graph = g.build()?;
    /// assert_eq!(graph.names().collect::<Vec<_>>(), ["user", "sku", "line"]);
    /// assert_eq!(graph.upstreams_of("line"), Some(vec!["user", "sku"]));
    /// assert_eq!(graph.upstreams_of("nope"), None);
    /// # Ok::<(), baton_graph::BuildError>(())
    /// ```
    #[must_use]
    pub fn upstreams_of(&self, name: &str) -> Option<Vec<&str>> {
        let meta = &self.inner.meta;
        let id = meta.names.find(name)?;
        Some(meta.upstreams(id).iter().map(|&u| meta.name(u)).collect())
    }

    /// The orchestrator whose registries, observers and statistics the graph's runs use.
    #[must_use]
    pub fn orchestrator(&self) -> &Orchestrator {
        &self.inner.orchestrator
    }

    /// The graph's name, set by [`GraphBuilder::name`](crate::GraphBuilder::name), if it
    /// has one.
    #[must_use]
    pub fn name(&self) -> Option<&str> {
        self.inner.name.as_deref()
    }

    /// The failure mode runs use unless [`RunOptions::failure_mode`] overrides it.
    #[must_use]
    pub fn failure_mode(&self) -> FailureMode {
        self.inner.mode
    }

    /// Where runs start their nodes unless [`RunOptions::start_mode`] overrides it.
    #[must_use]
    pub fn start_mode(&self) -> StartMode {
        self.inner.start
    }
}

/// What kind of node a node is.
#[derive(Debug, Clone, Default)]
pub(crate) enum NodeKind {
    /// A node with a task.
    #[default]
    Task,
    /// A router: its branches, by key.
    Router { branches: Box<[(Arc<str>, u32)]> },
    /// A branch of router `router`: started by the router, never by the scheduler.
    Branch { router: u32 },
    /// A map node: one item per element of its upstream's list, at most `concurrency` at
    /// once, done by `completion`. Its policies apply to each item, not to the node.
    Map {
        concurrency: usize,
        completion: Completion,
    },
    /// A node whose task runs another graph, made by `NodeBuilder::subgraph`. It is a task
    /// node with its policies, whose report entry nests the inner run's report.
    Subgraph,
}

/// One node as the scheduler sees it: its task, kept in its type's column by
/// `task/storage.rs`, and, behind a pointer, what only some nodes have. It is three words
/// wide, so that a graph of a million plain nodes stays small and the scheduler reads one
/// cache line per node.
/// `E` is what only some nodes have. In the builder it is as declared, in a box of the
/// node's own. In the graph it is as resolved, in a block shared by the nodes that have the
/// same. Both forms have the same layout, so `build()` converts the builder's nodes in
/// place.
pub(crate) struct NodeDef<I, E = Arc<Extras<Arc<ResolvedPolicies>>>> {
    /// Valid while the [`Tasks`] next to it are: the builder's, then the graph's.
    pub(crate) task: TaskRef<I>,
    /// `None` for a plain task node: no policy, no callbacks, not a router or a branch.
    pub(crate) extras: Option<E>,
}

/// What only some nodes have. `P` is the policy as declared, the builder's `Declared`, or
/// as resolved, [`ResolvedPolicies`] in the graph. It sits in an `Arc` shared by the nodes
/// declared alike, as `Declared::same` decides, so that a graph of many nodes calling one
/// downstream holds their policies once, and reads them from the cache.
///
/// Laid out in declaration order with `repr(C)`: what the scheduler reads for every node
/// that has extras sits in one small block, one cache line. That is its kind, whether it
/// has callbacks, and the pointer to its shared policy record. In the graph, task and
/// branch nodes with the same resolved policy and no callbacks share one block, made by
/// `validate::build`: on a large graph of such nodes it stays in the cache instead of being
/// one more scattered read per node. Not aligned to a cache line: that would double the
/// memory of a node with its own block for nothing a benchmark shows.
#[derive(Default)]
#[repr(C)]
pub(crate) struct Extras<P> {
    pub(crate) kind: NodeKind,
    pub(crate) callbacks: Option<Box<NodeCallbacks>>,
    /// `None` when the node has no policy, which is the scheduler's fast path.
    pub(crate) policy: Option<P>,
}

/// Values shared by every task of a graph, one per type, read with [`Ctx::state`].
///
/// [`Ctx::state`]: super::Ctx::state
#[derive(Default)]
pub(crate) struct States(Box<[(TypeId, Arc<dyn Any + Send + Sync>)]>);

impl States {
    /// The states, at most one per type. A later one of a type replaces the earlier.
    pub(crate) fn new(states: Vec<(TypeId, Arc<dyn Any + Send + Sync>)>) -> Self {
        let mut kept: Vec<(TypeId, Arc<dyn Any + Send + Sync>)> = Vec::new();
        for (ty, state) in states {
            match kept.iter_mut().find(|(t, _)| *t == ty) {
                Some(slot) => slot.1 = state,
                None => kept.push((ty, state)),
            }
        }
        States(kept.into_boxed_slice())
    }

    /// The state of type `S`, if the graph has one.
    pub(crate) fn get<S: 'static>(&self) -> Option<&S> {
        let ty = TypeId::of::<S>();
        let (_, state) = self.0.iter().find(|(t, _)| *t == ty)?;
        state.downcast_ref::<S>()
    }
}

/// The graph as the scheduler sees it.
pub(crate) struct GraphInner<I> {
    pub(crate) meta: GraphMeta,
    pub(crate) nodes: Box<[NodeDef<I>]>,
    /// What the nodes' [`TaskRef`]s point to. It is declared after `nodes`, so it is
    /// dropped after them: no `TaskRef` is read while it drops, but none then points to
    /// freed memory.
    pub(crate) tasks: Tasks,
    pub(crate) orchestrator: Orchestrator,
    pub(crate) mode: FailureMode,
    pub(crate) start: StartMode,
    /// The graph's name, if it was given one. Events, spans and metrics carry it.
    pub(crate) name: Option<Box<str>>,
    /// The per-run arrays of ended runs, kept for the next runs.
    pub(crate) spare: Spares,
    /// Values shared by every task, read with [`Ctx::state`](super::Ctx::state).
    pub(crate) states: States,
    /// Some node's policies make timers: a timeout, a retry's backoff, a budget, or a
    /// bulkhead's bounded wait.
    pub(crate) uses_timers: bool,
    /// The nodes' compensations and their trigger, if any node has one.
    pub(crate) compensations: Option<Box<Compensations<I>>>,
    /// The policy records that name a policy set, if any: resolved again for the runs
    /// that start after a reload changed a set.
    pub(crate) reload: Option<Reload>,
}

static TASK: NodeKind = NodeKind::Task;

impl<I> Graph<I> {
    /// The graph of `inner`.
    pub(crate) fn new(inner: GraphInner<I>) -> Self {
        Graph {
            inner: Arc::new(inner),
        }
    }
}

impl<I> GraphInner<I> {
    /// The graph of `meta`, whose node `i` is `nodes[i]`, its task stored in `tasks`.
    pub(crate) fn new(
        meta: GraphMeta,
        nodes: Box<[NodeDef<I>]>,
        mut tasks: Tasks,
        orchestrator: Orchestrator,
        mode: FailureMode,
        start: StartMode,
        states: States,
    ) -> Self {
        tasks.freeze();
        let spare = Spares::new(meta.len());
        let uses_timers = nodes.iter().any(|node| {
            let policy = node.extras.as_deref().and_then(|e| e.policy.as_deref());
            policy.is_some_and(|p| {
                p.declared.timeout.is_some()
                    || p.declared.budget.is_some()
                    || p.declared.retry.is_some()
                    || p.bulkhead.is_some()
            })
        });
        GraphInner {
            meta,
            nodes,
            tasks,
            orchestrator,
            mode,
            start,
            name: None,
            spare,
            states,
            uses_timers,
            compensations: None,
            reload: None,
        }
    }

    /// Resolves the graph's records that name a policy set again after a reload. A set
    /// may gain a timeout or a retry: such a graph makes timers.
    pub(crate) fn set_reload(&mut self, reload: Option<Reload>) {
        self.uses_timers |= reload.is_some();
        self.reload = reload;
    }

    fn extras(&self, id: u32) -> Option<&Extras<Arc<ResolvedPolicies>>> {
        self.nodes.get(id as usize)?.extras.as_deref()
    }

    /// Node `id`'s task.
    pub(crate) fn task(&self, id: u32) -> Option<&dyn ErasedTask<I>> {
        let node = self.nodes.get(id as usize)?;
        // SAFETY: the graph's nodes and `tasks` come from one builder, whose `Tasks` made
        // every node's `TaskRef`. `validate::build` moves both here, and nothing else makes
        // a `GraphInner`.
        #[allow(unsafe_code)]
        let task = unsafe { node.task.get(&self.tasks) };
        Some(task)
    }

    /// Node `id`'s kind; `Task` out of range.
    pub(crate) fn kind(&self, id: u32) -> &NodeKind {
        self.extras(id).map_or(&TASK, |e| &e.kind)
    }

    /// Node `id`'s policies, if it has any. A map node's policies apply to its items, so it
    /// has none here.
    pub(crate) fn policy(&self, id: u32) -> Option<&ResolvedPolicies> {
        let extras = self.extras(id)?;
        match extras.kind {
            NodeKind::Map { .. } => None,
            _ => extras.policy.as_deref(),
        }
    }

    /// The policies of map node `id`'s items, if it has any.
    pub(crate) fn item_policy(&self, id: u32) -> Option<&ResolvedPolicies> {
        let extras = self.extras(id)?;
        match extras.kind {
            NodeKind::Map { .. } => extras.policy.as_deref(),
            _ => None,
        }
    }

    /// Node `id`'s callbacks, if it has any.
    pub(crate) fn callbacks(&self, id: u32) -> Option<&NodeCallbacks> {
        self.extras(id)?.callbacks.as_deref()
    }

    /// Prefetches node `id`'s edge lists and its task's data, about to be read. These are
    /// hints. It reads the node's definition and edge offsets, which were prefetched when
    /// the node was made ready.
    #[inline]
    pub(crate) fn prefetch_task(&self, id: u32) {
        self.meta.prefetch_lists_of(id);
        if let Some(task) = self.task(id) {
            prefetch(task);
        }
    }

    /// Node `id`'s policies, if it runs a task: `Some(None)` for one without policies,
    /// which is the scheduler's fast path, and `None` for a router, or out of range. A
    /// branch runs its task when its router started it. One look at the node, for the
    /// scheduler to choose its path.
    #[inline]
    pub(crate) fn task_policy(&self, id: u32) -> Option<Option<&ResolvedPolicies>> {
        match self.nodes.get(id as usize)?.extras.as_deref() {
            None => Some(None),
            Some(e) => match e.kind {
                NodeKind::Task | NodeKind::Subgraph | NodeKind::Branch { .. } => {
                    Some(e.policy.as_deref())
                }
                // Its policies are its items': the node itself runs as a plain one.
                NodeKind::Map { .. } => Some(None),
                _ => None,
            },
        }
    }
}

/// The shape of a graph, without its tasks: names, and edges in compressed sparse row form.
#[derive(Debug)]
pub(crate) struct GraphMeta {
    pub(crate) id: u64,
    pub(crate) names: Arc<Names>,
    /// `ups[up_at[i]..up_at[i + 1]]` are node `i`'s upstreams, in declaration order.
    up_at: Box<[u32]>,
    ups: Box<[u32]>,
    /// `downs[down_at[i]..down_at[i + 1]]` are node `i`'s downstreams.
    down_at: Box<[u32]>,
    downs: Box<[u32]>,
    pub(crate) roots: Box<[u32]>,
    /// Some edge joins nodes that are not neighbours in declaration order, so running the
    /// graph touches per-node entries at scattered places. The entries of a chain, or of
    /// independent nodes, are a stream the hardware prefetches on its own.
    pub(crate) scattered: bool,
    /// Bit `i % 64` of word `i / 64` is set when node `i` produces `()`, which no
    /// downstream reads from the run (`FetchCx::typed`), so its cell is not prefetched.
    unit: Box<[u64]>,
}

impl GraphMeta {
    /// The shape of graph `id`, whose node `i` has the upstreams
    /// `ups[up_at[i]..up_at[i + 1]]`, resolved to node indices: the downstream lists, the
    /// roots, and whether it is scattered. A branch, marked by `is_branch`, reads its
    /// router's upstreams but is started by the router: it is nobody's downstream and no
    /// root. `unit` marks the nodes that produce `()`.
    pub(crate) fn compile(
        id: u64,
        names: Names,
        mut up_at: Vec<u32>,
        ups: Vec<u32>,
        is_branch: impl Fn(usize) -> bool,
        unit: impl Fn(usize) -> bool,
    ) -> Self {
        let n = names.len();
        let mut unit_bits = vec![0u64; n.div_ceil(64)];
        for (i, word) in (0..n).filter(|&i| unit(i)).map(|i| (i, i / 64)) {
            if let Some(word) = unit_bits.get_mut(word) {
                *word |= 1 << (i % 64);
            }
        }
        up_at.shrink_to_fit();
        let edges = |node: usize| -> &[u32] {
            if is_branch(node) {
                &[]
            } else {
                &ups[up_at[node] as usize..up_at[node + 1] as usize]
            }
        };
        // Downstream lists: counting sort of the edges by upstream. `down_at[u]` first
        // counts u's downstreams, then marks the end of its range, and is decremented as
        // the range is filled from the back, nodes in reverse, ending at its start:
        // downstreams come out in declaration order.
        let mut down_at = vec![0u32; n + 1];
        let mut scattered = false;
        for node in 0..n {
            for &u in edges(node) {
                down_at[u as usize] += 1;
                scattered |= !neighbours(u, node as u32);
            }
        }
        let mut total = 0u32;
        for at in down_at.iter_mut() {
            total += *at;
            *at = total;
        }
        let mut downs = vec![0u32; total as usize];
        for node in (0..n).rev() {
            for &u in edges(node) {
                down_at[u as usize] -= 1;
                downs[down_at[u as usize] as usize] = node as u32;
            }
        }
        let roots = (0..n)
            .filter(|&i| !is_branch(i) && up_at[i] == up_at[i + 1])
            .map(|i| i as u32)
            .collect();
        GraphMeta {
            id,
            roots,
            names: Arc::new(names),
            up_at: up_at.into_boxed_slice(),
            ups: ups.into_boxed_slice(),
            down_at: down_at.into_boxed_slice(),
            downs: downs.into_boxed_slice(),
            scattered,
            unit: unit_bits.into_boxed_slice(),
        }
    }

    /// Whether node `id` produces `()`.
    #[inline]
    pub(crate) fn produces_unit(&self, id: u32) -> bool {
        let i = id as usize;
        self.unit
            .get(i / 64)
            .is_some_and(|w| w >> (i % 64) & 1 == 1)
    }

    pub(crate) fn len(&self) -> usize {
        self.names.len()
    }

    pub(crate) fn name(&self, id: u32) -> &str {
        self.names.get(id)
    }

    #[inline]
    pub(crate) fn upstreams(&self, id: u32) -> &[u32] {
        slice_at(&self.up_at, &self.ups, id)
    }

    #[inline]
    pub(crate) fn downstreams(&self, id: u32) -> &[u32] {
        slice_at(&self.down_at, &self.downs, id)
    }

    /// Prefetches node `id`'s edge offsets. This is a hint; see `run/prefetch_sites.rs`.
    #[inline]
    pub(crate) fn prefetch_edges_of(&self, id: u32) {
        let i = id as usize;
        if let Some(at) = self.up_at.get(i) {
            prefetch(at);
        }
        if let Some(at) = self.down_at.get(i) {
            prefetch(at);
        }
    }

    /// Prefetches the first entries of node `id`'s upstream and downstream lists. This is a
    /// hint. It reads the edge offsets, which
    /// [`prefetch_edges_of`](Self::prefetch_edges_of) asked for earlier.
    #[inline]
    pub(crate) fn prefetch_lists_of(&self, id: u32) {
        let i = id as usize;
        if let (Some(&at), Some(&down)) = (self.up_at.get(i), self.down_at.get(i)) {
            if let Some(first) = self.ups.get(at as usize) {
                prefetch(first);
            }
            if let Some(first) = self.downs.get(down as usize) {
                prefetch(first);
            }
        }
    }

    /// How many upstreams node `id` declared; 0 out of range.
    #[inline]
    pub(crate) fn in_degree(&self, id: u32) -> u32 {
        let i = id as usize;
        match self.up_at.get(i..i.saturating_add(2)) {
            Some(&[from, to]) => to.saturating_sub(from),
            _ => 0,
        }
    }
}

/// Whether nodes `a` and `b` are neighbours in declaration order. An edge between
/// neighbours does not make a graph scattered, as [`GraphMeta::scattered`] says, and the
/// scheduler leaves their per-node entries to the hardware, which sees the stream.
#[inline]
pub(crate) fn neighbours(a: u32, b: u32) -> bool {
    a.abs_diff(b) <= 1
}

/// `items[at[id]..at[id + 1]]`, empty out of range. Inlined: it is on every node's path.
#[inline]
fn slice_at<'a>(at: &[u32], items: &'a [u32], id: u32) -> &'a [u32] {
    let i = id as usize;
    match at.get(i..i.saturating_add(2)) {
        Some(&[from, to]) => items.get(from as usize..to as usize).unwrap_or(&[]),
        _ => &[],
    }
}
