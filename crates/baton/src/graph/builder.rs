//! `GraphBuilder` and `NodeBuilder`: adding nodes, declaring upstreams, attaching tasks.

use std::any::TypeId;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::handle::Node;
use super::names::Names;
use super::router::RouterBuilder;
use super::tasks::{TaskRef, Tasks};
use super::upstreams::{Named, UpstreamRef, Upstreams};
use super::{Extras, Graph, NodeDef, NodeKind, validate};
use crate::error::{BoxError, BuildError, NodeError};
use crate::observe::NodeCallbacks;
use crate::orchestrator::Orchestrator;
use crate::policy::{Bulkhead, CircuitBreaker, Fallback, PolicyRef, PolicySpec, Retry};
use crate::report::NodeReport;
use crate::run::{FailureMode, StartMode};
use crate::task::{BlockingTask, Ctx, TypedTask};

static NEXT_GRAPH_ID: AtomicU64 = AtomicU64::new(1);

/// One declared upstream, after `add`: a node index (handles, already checked), or a name
/// to resolve at `build()`. Stored as one `u32` (see [`Up::encode`]), so that a graph built
/// from handles alone hands its upstream list to the scheduler as it is.
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

/// A node as `NodeBuilder::finish` hands it to `GraphBuilder::add`.
/// Its name is the builder's pending name ([`Names::begin`]).
pub(super) struct NewNode<I> {
    /// Its task, stored in the builder's [`Tasks`].
    pub(super) task: TaskRef<I>,
    /// Policies, callbacks, kind; `None` for a plain task node.
    pub(super) extras: Option<Box<Extras<PolicySpec>>>,
}

/// Defines a graph: add nodes with [`node`](Self::node), then [`build`](Self::build) it.
///
/// Adding a node never fails on the spot; problems (a duplicate name, a handle from another
/// builder, an unknown upstream name, a cycle, a type mismatch) are collected and
/// [`build`](Self::build) returns the first one as a typed [`BuildError`].
///
/// # Defaults
/// - failure mode: [`FailureMode::PreservePartial`];
/// - start mode: [`StartMode::Inline`].
pub struct GraphBuilder<I> {
    pub(super) id: u64,
    /// The nodes (each task knows the type of the value it produces), by index, with
    /// their policies as declared, one record shared by the nodes declared alike.
    pub(super) nodes: Vec<NodeDef<I, Box<Extras<Arc<PolicySpec>>>>>,
    /// What the nodes' tasks point to (`tasks.rs`).
    pub(super) tasks: Tasks,
    /// The last few distinct declarations of policies (the most recent last), which a node
    /// declared alike shares (graphs are built in loops, node after node alike).
    recent_policies: Vec<Arc<PolicySpec>>,
    pub(super) names: Names,
    /// Node `i`'s declared upstreams are `ups[up_at[i]..up_at[i + 1]]`.
    pub(super) up_at: Vec<u32>,
    /// Declared upstreams, encoded ([`Up::encode`]).
    pub(super) ups: Vec<u32>,
    pub(super) name_refs: Vec<NameRef>,
    /// Scratch for `Upstreams::__declare`, reused so that adding a node allocates nothing.
    declared: Vec<UpstreamRef>,
    /// Problems found while adding nodes, with the node they were found at and their rank
    /// among that node's problems (see [`build`](Self::build)).
    errors: Vec<(u32, u8, BuildError)>,
    /// Routers added by `select` whose `finish` has not run yet: `build()` rejects them (a
    /// router without its branches would never start them).
    open_routers: Vec<u32>,
    mode: FailureMode,
    start: StartMode,
    orchestrator: Orchestrator,
}

impl<I> fmt::Debug for GraphBuilder<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GraphBuilder")
            .field("nodes", &self.names)
            .field("errors", &self.errors)
            .field("failure_mode", &self.mode)
            .field("start_mode", &self.start)
            .finish()
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
            orchestrator,
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
    /// [`BuildError::DuplicateName`].
    ///
    /// `name` is copied into one text buffer shared by all of the graph's names (it grows as
    /// a `Vec` does): a `&str` costs no allocation of its own, and a `String` is not kept.
    /// A [`NodeBuilder`] dropped before its task is set adds nothing, and its name is
    /// forgotten.
    pub fn node<T>(&mut self, name: impl AsRef<str>) -> NodeBuilder<'_, I, (), T> {
        self.names.begin(name.as_ref());
        NodeBuilder {
            builder: self,
            upstreams: (),
            extras: None,
            fallback: None,
        }
    }

    /// Starts a router called `name` (seed 002 §14): declare its upstreams, then its
    /// selector with [`RouterBuilder::select`], then its branches with
    /// [`Router::branch`](super::Router::branch), and [`finish`](super::Router::finish) it.
    ///
    /// ```
    /// # use baton::{BoxError, Graph};
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
    /// `name` is copied, like a node's ([`node`](Self::node)). A router added by
    /// [`select`](RouterBuilder::select) but never [`finish`](super::Router::finish)ed makes
    /// `build()` fail ([`BuildError::InvalidRouter`]).
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

    fn set_kind(&mut self, index: u32, kind: NodeKind) {
        if let Some(node) = self.nodes.get_mut(index as usize) {
            node.extras.get_or_insert_with(Box::default).kind = kind;
        }
    }

    pub(super) fn mark_branch(&mut self, index: u32) {
        self.set_kind(index, NodeKind::Branch);
    }

    /// Router `router` was added (`select`); [`set_branches`](Self::set_branches) closes it.
    pub(super) fn open_router(&mut self, router: u32) {
        self.open_routers.push(router);
    }

    /// Gives router `router` its branches (its `finish`).
    pub(super) fn set_branches(&mut self, router: u32, branches: Box<[(Arc<str>, u32)]>) {
        self.open_routers.retain(|&r| r != router);
        self.set_kind(router, NodeKind::Router { branches });
    }

    /// Sets the failure mode every run of the graph uses unless its
    /// [`RunOptions`](crate::RunOptions) override it. Default:
    /// [`FailureMode::PreservePartial`].
    pub fn failure_mode(&mut self, mode: FailureMode) -> &mut Self {
        self.mode = mode;
        self
    }

    /// Sets where every run of the graph starts its nodes unless its
    /// [`RunOptions`](crate::RunOptions) override it: in the task that awaits the run, or
    /// spread over tokio's workers (see [`StartMode`] for what each costs and gives).
    /// Default: [`StartMode::Inline`].
    pub fn start_mode(&mut self, start: StartMode) -> &mut Self {
        self.start = start;
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
    /// 1. what was found while nodes were added: for each node in turn, a handle from
    ///    another builder ([`BuildError::ForeignHandle`]), its name already used
    ///    ([`BuildError::DuplicateName`]), a misdefined router
    ///    ([`BuildError::InvalidRouter`], among them a router whose [`Router::finish`] was
    ///    never called);
    /// 2. upstreams given by name: [`BuildError::UnknownUpstream`],
    ///    [`BuildError::TypeMismatch`];
    /// 3. policies: [`BuildError::InvalidPolicy`], [`BuildError::UnknownPolicy`],
    ///    [`BuildError::PolicyConflict`];
    /// 4. [`BuildError::Cycle`], with the cycle's path.
    ///
    /// [`Router::finish`]: super::Router::finish
    pub fn build(mut self) -> Result<Graph<I>, BuildError> {
        // Duplicate names are found now, in one pass over all names; a node's problems rank
        // as they arise while adding it: its upstreams, its name, then (routers) its
        // branches.
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
        let inner = validate::build(
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
        )?;
        Ok(Graph {
            inner: Arc::new(inner),
        })
    }

    /// Records the upstreams of the node about to be added (its name is the pending one);
    /// problems are recorded for `build()`.
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
    /// declarations ([`PolicySpec::same`]), or as a new one.
    fn share(&mut self, spec: PolicySpec) -> Arc<PolicySpec> {
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

/// The ranks of a node's problems (see [`GraphBuilder::build`]).
const RANK_UPSTREAM: u8 = 0;
const RANK_NAME: u8 = 1;
const RANK_ROUTER: u8 = 2;

/// One node being defined: its upstreams and policies, then its task.
///
/// `U` is the upstreams' shape (see [`Upstreams`]) and `T` the value the task produces;
/// both are inferred. The node is added to the graph when [`task`](Self::task) or
/// [`blocking_task`](Self::blocking_task) is called.
///
/// # Policies and their defaults
/// Policies compose in a fixed onion, inner to outer: attempt (bulkhead permit + task +
/// per-attempt timeout) → retry → circuit breaker → fallback (DESIGN rule 3).
/// - [`timeout`](Self::timeout): none;
/// - [`retry`](Self::retry): none (one attempt);
/// - [`budget`](Self::budget): none (only the run's deadline, if any, applies);
/// - [`min_attempt_time`](Self::min_attempt_time): 10 ms;
/// - [`breaker`](Self::breaker), [`bulkhead`](Self::bulkhead), [`fallback`](Self::fallback):
///   none.
#[must_use = "a node is only added to the graph when `.task(..)` is called"]
pub struct NodeBuilder<'g, I, U, T> {
    /// Holds the node's name, pending ([`Names::begin`]), until the node is added.
    builder: &'g mut GraphBuilder<I>,
    upstreams: U,
    /// Boxed on first use: most nodes have no policy and no callback, and a small builder
    /// is cheap to move through `.after(..)` and `.task(..)`.
    extras: Option<Box<Extras<PolicySpec>>>,
    fallback: Option<Fallback<T>>,
}

impl<I, U: fmt::Debug, T> fmt::Debug for NodeBuilder<'_, I, U, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeBuilder")
            .field("name", &self.builder.names.pending())
            .field("upstreams", &self.upstreams)
            .field("fallback", &self.fallback)
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
            upstreams,
            extras: self.extras,
            fallback: self.fallback,
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
        self.after(Named::new(names.into_iter().map(Into::into).collect()))
    }
}

impl<'g, I, U, T> NodeBuilder<'g, I, U, T> {
    pub(super) fn for_branch(builder: &'g mut GraphBuilder<I>, name: &str, upstreams: U) -> Self {
        builder.names.begin(name);
        NodeBuilder {
            builder,
            upstreams,
            extras: None,
            fallback: None,
        }
    }

    fn policy(&mut self) -> &mut PolicySpec {
        self.extras
            .get_or_insert_with(Box::default)
            .policy
            .get_or_insert_with(PolicySpec::default)
    }

    fn callbacks(&mut self) -> &mut NodeCallbacks {
        self.extras
            .get_or_insert_with(Box::default)
            .callbacks
            .get_or_insert_with(Box::default)
    }
}

impl<I, U, T: Send + Sync + 'static> NodeBuilder<'_, I, U, T> {
    /// Calls `f` with the node's value when it ends `Succeeded` or `Recovered`. Several
    /// callbacks stack and fire in registration order, exactly once per run; a panicking
    /// one is caught and logged (seed 002 §16).
    pub fn on_success(mut self, f: impl Fn(&T) + Send + Sync + 'static) -> Self {
        self.callbacks().on_success(f);
        self
    }

    /// Calls `f` with the node's report entry when it ends `Failed` or `Skipped`: its
    /// [`error`](NodeReport::error), or, for a skip, the upstream that
    /// [caused](NodeReport::skipped_because) it and the [root cause](NodeReport::root_cause).
    /// Stacks like [`on_success`](Self::on_success).
    pub fn on_failure(mut self, f: impl Fn(&NodeReport<'_>) + Send + Sync + 'static) -> Self {
        self.callbacks().on_failure(f);
        self
    }

    /// Calls `f` with the node's report entry whatever its outcome, after `on_success` /
    /// `on_failure`. Stacks like [`on_success`](Self::on_success).
    pub fn on_complete(mut self, f: impl Fn(&NodeReport<'_>) + Send + Sync + 'static) -> Self {
        self.callbacks().on_complete(f);
        self
    }
}

impl<I, U, T> NodeBuilder<'_, I, U, T> {
    /// Limits each attempt to `limit`; an attempt that runs longer is dropped (it stops at
    /// its next `.await`) and fails with [`NodeError::Timeout`] naming the node, the
    /// attempt and the limit. The effective limit is `min(limit, time left before the
    /// deadline)`. A zero limit is rejected by `build()`
    /// ([`BuildError::InvalidPolicy`]).
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.policy().timeout = Some(limit);
        self
    }

    /// Retries failed attempts per `retry` (attempts, backoff, jitter, which errors, retry
    /// budget), inside the node's deadline.
    pub fn retry(mut self, retry: Retry) -> Self {
        self.policy().retry = Some(retry);
        self
    }

    /// Gives the node a time budget from its start: every attempt, backoff and bulkhead wait
    /// must end by then (and by the run's deadline, if earlier). When it runs out mid-attempt
    /// the attempt is cut at the deadline, and the node fails with
    /// [`NodeError::DeadlineExceeded`] (or [`NodeError::GaveUp`] saying how many attempts
    /// ran and how long the series took). Seed 000.
    pub fn budget(mut self, budget: Duration) -> Self {
        self.policy().budget = Some(budget);
        self
    }

    /// No attempt starts with less than `min` left before the deadline, and backoffs are
    /// clipped to leave it (default 10 ms, seed 000's `MIN_ATTEMPT_MILLIS`).
    pub fn min_attempt_time(mut self, min: Duration) -> Self {
        self.policy().min_attempt = Some(min);
        self
    }

    /// Guards the node with a circuit breaker: a handle, or the name of one registered in
    /// the graph's [`Orchestrator`]. It is asked once before the retry series (when open,
    /// the task does not run and the node fails with [`NodeError::BreakerOpen`]) and told
    /// one result per series.
    pub fn breaker(mut self, breaker: impl Into<PolicyRef<CircuitBreaker>>) -> Self {
        self.policy().breaker = Some(breaker.into());
        self
    }

    /// Errors for which `ignore` returns `true` do not count for or against the node's
    /// breaker (the permit is released uncounted), like resilience4j's `ignoreExceptions`.
    pub fn breaker_ignore(
        mut self,
        ignore: impl Fn(&NodeError) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.policy().breaker_ignore = Some(Arc::new(ignore));
        self
    }

    /// Takes a permit of `bulkhead` (a handle, or the name of one registered in the graph's
    /// [`Orchestrator`]) for each attempt, and holds it until the attempt has really
    /// stopped.
    pub fn bulkhead(mut self, bulkhead: impl Into<PolicyRef<Bulkhead>>) -> Self {
        self.policy().bulkhead = Some(bulkhead.into());
        self
    }

    /// Recovers with `fallback` when the inner layers failed: the node ends `Recovered` with
    /// the fallback's value, and the report keeps the error.
    pub fn fallback(mut self, fallback: Fallback<T>) -> Self {
        self.fallback = Some(fallback);
        self.policy().has_fallback = true;
        self
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
    ///
    /// Between `.await`s the task holds the run's driver, like any future holds its tokio
    /// worker, and a run has at most as many drivers draining its ready nodes as the
    /// runtime has workers: work that blocks its thread (file or socket I/O without
    /// `.await`, long computations, `block_in_place`) belongs in
    /// [`blocking_task`](Self::blocking_task), whose nodes wait like any other. By default
    /// ([`StartMode::Inline`](crate::StartMode::Inline)), or where one thread runs every
    /// task, the run's first nodes start in the task that awaits the run
    /// and move to a task of their own at their first `.await` that waits (see
    /// [`Run`](crate::Run)).
    pub fn task<F, Fut, E>(self, task: F) -> Node<T>
    where
        F: Fn(Ctx<I>, U::Values) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        let task = TypedTask::<U, _, _, _, _>::new(task);
        self.finish(|tasks, fallback| match fallback {
            None => tasks.push(task),
            Some(fallback) => tasks.push(task.with_fallback(fallback)),
        })
    }

    /// Sets a synchronous (blocking) task, run on tokio's blocking pool, adds the node and
    /// returns its handle.
    ///
    /// When an attempt times out (or the run is cancelled) the node moves on at once; the
    /// closure cannot be stopped from outside, so its thread keeps running until it returns
    /// (the one exception to "no task outlives its run"). The report counts such attempts as
    /// abandoned ([`NodeReport::abandoned`](crate::NodeReport::abandoned)), and
    /// [`Ctx::cancellation_token`] is cancelled so that a closure that checks it can stop
    /// early. A bulkhead permit stays held until the closure returns. An attempt abandoned
    /// while it still waited for a thread of the blocking pool never runs.
    pub fn blocking_task<F, E>(self, task: F) -> Node<T>
    where
        F: Fn(Ctx<I>, U::Values) -> Result<T, E> + Send + Sync + 'static,
        E: Into<BoxError> + 'static,
    {
        self.finish(|tasks, fallback| tasks.push(BlockingTask::<U, _, _, _>::new(task, fallback)))
    }

    /// Adds the node, its task stored by `store` (given the node's fallback, if any).
    fn finish(self, store: impl FnOnce(&mut Tasks, Option<Fallback<T>>) -> TaskRef<I>) -> Node<T> {
        let NodeBuilder {
            builder,
            upstreams,
            extras,
            fallback,
        } = self;
        let graph = builder.id;
        builder.declare(&upstreams);
        let node = NewNode {
            task: store(&mut builder.tasks, fallback),
            extras,
        };
        let index = builder.add(node);
        Node::new(graph, index)
    }
}
