//! The full path of a node: `tracing` spans, policies through the onion, and routers with
//! a span, which run their chosen branch inline, with a span of its own. The driver in
//! `driver/` takes it for any node that needs more than one plain attempt; it runs a
//! router without a span itself (`driver/route.rs`), with [`choose`] and [`branch_ended`]
//! from here.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::FutureExt;
use tokio::time::Instant;

use super::node_host::NodeHost;
use crate::engine::graph::NodeKind;
use crate::engine::run::core::RunCore;
use crate::engine::run::node_state::Claim;
use crate::engine::run::state::{RunState, catch_panic};
use crate::engine::task::ctx::AttemptFuture;
use crate::engine::task::tokens::AttemptGuard;
use crate::engine::task::upstreams::FetchCx;
use crate::error::{NodeError, UserCode};
use crate::observe::{Event, log, trace};
use crate::onion::{self, Execution, First, ResolvedPolicies};
use crate::report::{Outcome, Record};
use crate::util::value::Value;

/// Runs node `id`, already `RUNNING` since `start`, to its record, on the full path:
/// policies, `tracing` spans, routers with a span. `first` is its first attempt when the driver's fast
/// path started it and already counted the node as started. Also returns whether it spawned
/// a driver for nodes it queued, as a router whose branch made nodes ready does: the driver
/// then yields once before going on, as `RunState::schedule` says.
pub(crate) async fn run_node<I: Send + Sync + 'static>(
    run: &Arc<RunState<I>>,
    id: u32,
    span: tracing::Span,
    start: Instant,
    first: Option<First<AttemptFuture>>,
) -> (Record, bool) {
    if first.is_none() {
        started(run, id);
    }
    let (record, spawned) = match run.graph.kind(id) {
        // Boxed: a router runs its branch through `run_node` again.
        NodeKind::Router { .. } => {
            trace::within(span.clone(), Box::pin(route(run, id, start))).await
        }
        _ => (
            trace::within(span.clone(), execute(run, id, start, first)).await,
            false,
        ),
    };
    let error = record.error().map(|e| &**e);
    trace::record_outcome(&span, record.outcome, record.attempt_log().len(), error);
    let name = run.graph.meta.name(id);
    span.in_scope(|| log::node_ended(name, record.outcome, error));
    (record, spawned)
}

/// Counts node `id` as started and tells the observers.
pub(crate) fn started<I: Send + Sync + 'static>(run: &RunState<I>, id: u32) {
    let core = &run.core;
    run.count_started(id);
    if run.observed() && !core.is_cancelled() {
        run.emit(&Event::NodeStarted {
            run: core.run_id(),
            graph: run.graph_name(),
            node: run.graph.meta.name(id),
        });
    }
}

async fn execute<I: Send + Sync + 'static>(
    run: &Arc<RunState<I>>,
    id: u32,
    start: Instant,
    first: Option<First<AttemptFuture>>,
) -> Record {
    let core = &run.core;
    let policy = run.policy(id);
    // A map node's items keep the run's deadline themselves: the node is not cut at it,
    // so that every item ends with its own outcome.
    let deadline = match run.graph.kind(id) {
        NodeKind::Map { .. } => None,
        _ => core.deadline(),
    };
    let ended = match (policy, deadline) {
        // Fast path: no policy and no run deadline; one attempt, nothing to allocate.
        (None, None) => Cancellable::new(core, id, plain(run, id), false)
            .await
            .map(|result| Execution {
                result: result.map_err(Arc::new),
                recovered_from: None,
                attempts: Vec::new(),
                breaker_local: false,
            }),
        (policy, _) => {
            let default;
            let policy = match policy {
                Some(p) => p,
                None => {
                    default = ResolvedPolicies::default();
                    &default
                }
            };
            // The whole full path is boxed once by the driver; no second box here.
            let started = first.is_some();
            let host = NodeHost { run, id };
            let execution = onion::execute(&host, policy, core.deadline(), start, first);
            Cancellable::new(core, id, execution, started).await
        }
    };
    let end = core.now();
    match ended {
        Ended::Done(exec) => {
            let (outcome, value, error) = match (exec.result, exec.recovered_from) {
                (Ok(value), None) => (Outcome::Succeeded, Some(value), None),
                (Ok(value), Some(from)) => (Outcome::Recovered, Some(value), Some(from)),
                (Err(error), _) => (Outcome::Failed, None, Some(error)),
            };
            Record::ended(outcome, value, Some(start), end)
                .with_error(error)
                .with_log(exec.attempts)
                .with_breaker_local(exec.breaker_local)
        }
        Ended::Cancelled { started } => {
            Record::empty(Outcome::Cancelled, end).started(started.then_some(start))
        }
    }
}

/// One attempt of node `id`'s task, with panics caught: the path of nodes without policies
/// when `tracing` spans are wanted. The driver's fast path is the same without the span.
async fn plain<I: Send + Sync + 'static>(
    run: &Arc<RunState<I>>,
    id: u32,
) -> Result<Value, NodeError> {
    run.attempt_started(id, 1, None);
    let span = trace::attempt_span(run.graph.meta.name(id), 1, None);
    let _attempt = AttemptGuard {
        tokens: run.core.tokens(),
        node: id,
        attempt: 1,
    };
    let out = match run.call_task(id, 1, None, None) {
        Ok(attempt) => {
            let attempt = AssertUnwindSafe(attempt).catch_unwind();
            match trace::within(span.clone(), attempt).await {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(error)) => Err(NodeError::Task(error)),
                Err(panic) => Err(NodeError::from_panic(UserCode::Task, panic.as_ref())),
            }
        }
        Err(error) => Err(error),
    };
    trace::record_attempt(&span, out.as_ref().err());
    if let Err(error) = &out {
        span.in_scope(|| run.attempt_failed(id, 1, error));
    }
    out
}

/// A router: picks a branch from its upstreams' values, passes over the others as
/// `NotTaken`, runs the chosen one as a node of its own, and takes its value. Also returns
/// whether it spawned a driver for the nodes the branch made ready.
async fn route<I: Send + Sync + 'static>(
    run: &Arc<RunState<I>>,
    id: u32,
    start: Instant,
) -> (Record, bool) {
    let core = &run.core;
    if core.is_cancelled() {
        // The cancel's sweep ends its branches `Cancelled`, as every node still pending.
        return (Record::empty(Outcome::Cancelled, core.now()), false);
    }
    let branch = match choose(run, id) {
        Ok(branch) => branch,
        Err(error) => {
            run.release(run.not_taken_except(id, None, start));
            let record = Record::ended(Outcome::Failed, None, Some(start), core.now());
            return (record.with_error(Some(Arc::new(error))), false);
        }
    };
    // The branches not taken end at the router's start, as the branch taken starts then.
    run.release(run.not_taken_except(id, Some(branch), start));
    let Some(node) = core.node(branch) else {
        unreachable!("branch {branch} is in its graph")
    };
    if node.claim() == Claim::Taken {
        // Swept by a cancellation between the choice and now.
        let record = Record::empty(Outcome::Cancelled, core.now()).started(Some(start));
        return (record, false);
    }
    // Until the branch is finished below: a router dropped meanwhile ends it `Cancelled`.
    let _abandoned = BranchGuard { run, branch };
    let record = run_branch(run, branch, start).await;
    let end = record.end;
    let (record, spawned) = branch_ended(run, id, branch, record, start, end);
    debug_assert!(node.is_done());
    (record, spawned)
}

/// Router `id`'s chosen `branch` ended with `record`: records it, and gives the router's
/// own record, started at `start`, ended at `end`, and whether a driver was spawned for
/// the nodes the branch made ready. A branch served by its fallback makes the router
/// `Recovered` too, with its error; a failed one fails the router with
/// [`NodeError::BranchFailed`].
pub(in crate::engine) fn branch_ended<I: Send + Sync + 'static>(
    run: &Arc<RunState<I>>,
    id: u32,
    branch: u32,
    record: Record,
    start: Instant,
    end: Instant,
) -> (Record, bool) {
    let (outcome, value, error) = match (&record.value, record.outcome) {
        (Some(v), Outcome::Recovered) => {
            (Outcome::Recovered, Some(v.clone()), record.error().cloned())
        }
        (Some(v), _) => (Outcome::Succeeded, Some(v.clone()), None),
        (None, Outcome::Cancelled) => (Outcome::Cancelled, None, None),
        (None, _) => (
            Outcome::Failed,
            None,
            Some(Arc::new(NodeError::BranchFailed {
                router: run.graph.meta.name(id).to_owned(),
                branch: run.graph.meta.name(branch).to_owned(),
                error: record.error().cloned(),
            })),
        ),
    };
    // The branch has no downstreams of its own: finishing it only records it. Under
    // fail-fast the router's own failure, next, cancels the run, after skipping the
    // router's downstreams.
    // A node that depends on the branch itself, by name, may have become ready.
    let released = run.finish_branch(branch, record);
    let mut spawned = released.spawned;
    // Queued rather than run here: the router's record comes first. A driver spawned for
    // them is the router's driver's cue to yield once, after it writes the router's record.
    // That is its hand-off, as after any node that spawned one.
    if let Some(next) = released.next {
        spawned |= run.schedule(next);
    }
    let record = Record::ended(outcome, value, Some(start), end)
        .with_error(error)
        .with_branch(branch);
    (record, spawned)
}

/// The branch router `id` chooses: its selector's key, looked up among its branches. A
/// panicking selector, or a key no branch has, is the router's error.
pub(in crate::engine) fn choose<I: Send + Sync + 'static>(
    run: &Arc<RunState<I>>,
    id: u32,
) -> Result<u32, NodeError> {
    let NodeKind::Router { branches } = run.graph.kind(id) else {
        unreachable!("`route` runs routers")
    };
    let Some(task) = run.graph.task(id) else {
        unreachable!("node {id} is in its graph")
    };
    let cx = run.fetch_cx(id);
    let key = catch_panic(UserCode::Selector, || {
        let key = task.select(&run.input, &cx);
        // Validation checked every upstream's type, and a router runs only once each of
        // its upstreams produced a value.
        key.unwrap_or_else(|| unreachable!("router {id}'s upstream values are present"))
    })?;
    match branches.iter().find(|(k, _)| **k == *key) {
        Some(&(_, branch)) => Ok(branch),
        None => Err(NodeError::UnknownBranch {
            router: run.graph.meta.name(id).to_owned(),
            key,
            known: branches.iter().map(|(k, _)| k.to_string()).collect(),
        }),
    }
}

/// Runs router branch `branch`, already claimed, as a node of its own started at `start`,
/// its router's start, to its record.
async fn run_branch<I: Send + Sync + 'static>(
    run: &Arc<RunState<I>>,
    branch: u32,
    start: Instant,
) -> Record {
    let core = &run.core;
    let span = trace::node_span(|| core.span(), || run.graph.meta.name(branch));
    // User code of the branch's policies, such as a retry predicate or a breaker filter,
    // may panic: the branch fails with it, and the router with the branch, as for a task's
    // panic. A branch is a task node: it spawns nothing itself.
    match AssertUnwindSafe(Box::pin(run_node(run, branch, span, start, None)))
        .catch_unwind()
        .await
    {
        Ok((record, _)) => record,
        Err(panic) => {
            Record::ended(Outcome::Failed, None, Some(start), core.now()).with_error(Some(
                Arc::new(NodeError::from_panic(UserCode::Scheduler, panic.as_ref())),
            ))
        }
    }
}

/// Ends a router's branch `Cancelled` when the router's future is dropped while the branch
/// runs, as when its runtime shuts down. Nothing else would, and the run would wait for it
/// forever.
struct BranchGuard<'a, I: Send + Sync + 'static> {
    run: &'a Arc<RunState<I>>,
    branch: u32,
}

impl<I: Send + Sync + 'static> Drop for BranchGuard<'_, I> {
    fn drop(&mut self) {
        self.run.abandon_branch(self.branch);
    }
}

impl<I: Send + Sync + 'static> RunState<I> {
    /// What node `id`'s task reads its upstreams' values from. Inline: on every node's path.
    #[inline]
    pub(crate) fn fetch_cx(&self, id: u32) -> FetchCx<'_> {
        let meta = &self.graph.meta;
        let ups = meta.upstreams(id);
        if self.core.prefetch() {
            // The task reads them one after the other: their misses overlap.
            self.prefetch_values(id, ups);
        }
        FetchCx {
            ups,
            values: self.core.values(),
            names: &meta.names,
            boxes: self,
        }
    }
}

enum Ended<T> {
    Done(T),
    Cancelled { started: bool },
}

impl<T> Ended<T> {
    fn map<U>(self, f: impl FnOnce(T) -> U) -> Ended<U> {
        match self {
            Ended::Done(t) => Ended::Done(f(t)),
            Ended::Cancelled { started } => Ended::Cancelled { started },
        }
    }
}

pin_project_lite::pin_project! {
    /// Polls a node's future unless the run is cancelled; registers the driver's waker in the
    /// node's slot so that `cancel` can wake it.
    struct Cancellable<'a, F> {
        core: &'a RunCore,
        id: u32,
        polled: bool,
        #[pin]
        fut: F,
    }
}

impl<'a, F> Cancellable<'a, F> {
    /// `started`: the node's first attempt already ran, started by the driver's fast path.
    fn new(core: &'a RunCore, id: u32, fut: F, started: bool) -> Self {
        Cancellable {
            core,
            id,
            polled: started,
            fut,
        }
    }
}

impl<F: Future> Future for Cancellable<'_, F> {
    type Output = Ended<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if this.core.is_cancelled() {
            return Poll::Ready(Ended::Cancelled {
                started: *this.polled,
            });
        }
        *this.polled = true;
        if let Poll::Ready(out) = this.fut.poll(cx) {
            return Poll::Ready(Ended::Done(out));
        }
        if let Some(slot) = this.core.slot(*this.id) {
            slot.register(cx.waker());
        }
        // `cancel` sets the flag, then wakes: re-check after registering.
        if this.core.is_cancelled() {
            return Poll::Ready(Ended::Cancelled { started: true });
        }
        Poll::Pending
    }
}
