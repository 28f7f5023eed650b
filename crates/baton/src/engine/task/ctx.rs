//! What a task sees: the per-attempt context [`Ctx`], and the type-erased form in which the
//! graph stores tasks.

use std::any::TypeId;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub(crate) use super::attempt_box::AttemptFuture;
use super::attempt_box::put;
use super::node_fallback::{FallbackScope, FallbackSlot, NodeFallback};
use super::tokens::FALLBACK;
use super::upstreams::{FetchCx, Upstreams};
use crate::engine::graph::Graph;
use crate::engine::run::nested_run::NestedRun;
use crate::engine::run::options::RunOptions;
use crate::engine::run::state::RunState;
use crate::error::{BoxError, NodeError};
use crate::id::{IdempotencyKey, RunId};
use crate::policy::limit::bulkhead::BulkheadPermit;
use crate::util::value::Value;

/// A fallback's run, boxed.
pub(crate) type FallbackFuture = Pin<Box<dyn Future<Output = Result<Value, NodeError>> + Send>>;

/// A task with its upstreams' types erased, as the graph stores it.
pub(crate) trait ErasedTask<I>: Send + Sync + 'static {
    /// The type of the value the node produces, and its name for error messages.
    fn value_type(&self) -> (TypeId, &'static str);

    /// Fetches the upstream values and starts one attempt, which holds `permit` until it
    /// has really stopped, writing its future into `into`: into the box there, or one of
    /// those `cx` gives, when it can; see `attempt_box.rs`. `false` when a value is
    /// missing or of another type, which validation rules out.
    fn call(
        &self,
        ctx: Ctx<I>,
        cx: &FetchCx<'_>,
        permit: Option<BulkheadPermit>,
        into: &mut Option<AttemptFuture>,
    ) -> bool;

    /// The node's fallback for `error`, if it has one.
    fn fallback(
        &self,
        scope: &FallbackScope<'_, I>,
        error: Arc<NodeError>,
    ) -> Option<FallbackFuture>;

    /// Whether the node has a fallback.
    fn has_fallback(&self) -> bool {
        false
    }

    /// For a router: the key of the branch to run, from the run input and the upstreams'
    /// values. `None` for other nodes, or when a value is missing, which validation rules
    /// out.
    fn select(&self, _input: &I, _cx: &FetchCx<'_>) -> Option<String> {
        None
    }
}

/// Carries a task's type parameters without owning values of them. The upstreams' shape
/// `U` is a type only: their values are fetched by position from the run.
type Types<U, T, E, Fut> = PhantomData<fn() -> (U, T, E, Fut)>;

pub(crate) struct TypedTask<U, F, T, E, Fut, Fb = ()> {
    task: F,
    fallback: Fb,
    _types: Types<U, T, E, Fut>,
}

impl<U, F, T, E, Fut> TypedTask<U, F, T, E, Fut> {
    /// A task without a fallback.
    pub(crate) fn new(task: F) -> Self {
        TypedTask {
            task,
            fallback: (),
            _types: PhantomData,
        }
    }

    /// The task with `fallback`, boxed because few nodes have one.
    pub(crate) fn with_fallback<I>(
        self,
        fallback: NodeFallback<I, T>,
    ) -> TypedTask<U, F, T, E, Fut, Box<NodeFallback<I, T>>> {
        TypedTask {
            task: self.task,
            fallback: Box::new(fallback),
            _types: PhantomData,
        }
    }
}

impl<I, U, F, T, E, Fut, Fb> ErasedTask<I> for TypedTask<U, F, T, E, Fut, Fb>
where
    Fb: FallbackSlot<I, T>,
    I: Send + Sync + 'static,
    U: Upstreams,
    F: Fn(Ctx<I>, U::Values) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
    T: Send + Sync + 'static,
    E: Into<BoxError> + 'static,
{
    fn value_type(&self) -> (TypeId, &'static str) {
        (TypeId::of::<T>(), std::any::type_name::<T>())
    }

    fn call(
        &self,
        ctx: Ctx<I>,
        cx: &FetchCx<'_>,
        permit: Option<BulkheadPermit>,
        into: &mut Option<AttemptFuture>,
    ) -> bool {
        let Some(values) = U::__fetch(cx) else {
            return false;
        };
        let attempt = (self.task)(ctx, values);
        put(
            into,
            async move {
                let out = match attempt.await {
                    Ok(value) => Ok(Value::new(value)),
                    Err(e) => Err(e.into()),
                };
                drop(permit);
                out
            },
            || cx.boxes.kept_attempts(),
        );
        true
    }

    fn fallback(
        &self,
        scope: &FallbackScope<'_, I>,
        error: Arc<NodeError>,
    ) -> Option<FallbackFuture> {
        self.fallback.recover(scope, error)
    }

    fn has_fallback(&self) -> bool {
        self.fallback.is_set()
    }
}

/// A synchronous task, run on tokio's blocking pool.
pub(crate) struct BlockingTask<I, U, F, T, E> {
    task: Arc<F>,
    fallback: Option<Box<NodeFallback<I, T>>>,
    _types: Types<U, T, E, ()>,
}

impl<I, U, F, T, E> BlockingTask<I, U, F, T, E> {
    pub(crate) fn new(task: F, fallback: Option<NodeFallback<I, T>>) -> Self {
        BlockingTask {
            task: Arc::new(task),
            fallback: fallback.map(Box::new),
            _types: PhantomData,
        }
    }
}

impl<I, U, F, T, E> ErasedTask<I> for BlockingTask<I, U, F, T, E>
where
    I: Send + Sync + 'static,
    U: Upstreams,
    F: Fn(Ctx<I>, U::Values) -> Result<T, E> + Send + Sync + 'static,
    T: Send + Sync + 'static,
    E: Into<BoxError> + 'static,
{
    fn value_type(&self) -> (TypeId, &'static str) {
        (TypeId::of::<T>(), std::any::type_name::<T>())
    }

    fn call(
        &self,
        ctx: Ctx<I>,
        cx: &FetchCx<'_>,
        permit: Option<BulkheadPermit>,
        into: &mut Option<AttemptFuture>,
    ) -> bool {
        let Some(values) = U::__fetch(cx) else {
            return false;
        };
        let task = Arc::clone(&self.task);
        // Created now, before the closure runs: the attempt's end, by a timeout or a
        // cancelled run, cancels it even though the closure, which owns `ctx`, keeps
        // running.
        let token = ctx.cancellation_token();
        let run = Arc::clone(&ctx.run);
        let node = ctx.node;
        let finished = Arc::new(AtomicBool::new(false));
        let done = Arc::clone(&finished);
        let handle = tokio::task::spawn_blocking(move || {
            // Abandoned while it waited for a thread of the blocking pool: it must not run.
            // A retry may already be running, or the node may have been reported failed.
            if token.is_cancelled() {
                done.store(true, Ordering::Release);
                return Err("attempt abandoned before a blocking thread picked it up".into());
            }
            let out = task(ctx, values).map_err(Into::into);
            done.store(true, Ordering::Release);
            // The bulkhead permit is held until the call has really stopped.
            drop(permit);
            out
        });
        let abandon = AbandonGuard {
            finished,
            on_abandon: Box::new(move || {
                if let Some(slot) = run.core.slot(node) {
                    slot.count_abandoned();
                }
            }),
        };
        put(
            into,
            async move {
                let _abandon = abandon;
                match handle.await {
                    Ok(Ok(value)) => Ok(Value::new(value)),
                    Ok(Err(e)) => Err(e),
                    Err(join) => match join.try_into_panic() {
                        Ok(panic) => std::panic::resume_unwind(panic),
                        Err(_) => Err("blocking task was cancelled by the runtime".into()),
                    },
                }
            },
            || cx.boxes.kept_attempts(),
        );
        true
    }

    fn fallback(
        &self,
        scope: &FallbackScope<'_, I>,
        error: Arc<NodeError>,
    ) -> Option<FallbackFuture> {
        self.fallback.recover(scope, error)
    }

    fn has_fallback(&self) -> bool {
        self.fallback.is_set()
    }
}

/// Counts a blocking attempt as abandoned when its future is dropped before the closure
/// returned.
struct AbandonGuard {
    finished: Arc<AtomicBool>,
    on_abandon: Box<dyn Fn() + Send>,
}

impl Drop for AbandonGuard {
    fn drop(&mut self) {
        if !self.finished.load(Ordering::Acquire) {
            (self.on_abandon)();
        }
    }
}

/// The context of one attempt of one node's task.
///
/// A fresh `Ctx` is passed to every attempt. It gives the run input, the attempt number,
/// the node's name, an idempotency key, and a cancellation token for work the attempt hands
/// off. It is cheap, one `Arc` and a few words, and `Send + Sync`.
///
/// ```
/// use baton_graph::{BoxError, Graph, Retry};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), BoxError> {
/// let mut g = Graph::<u64>::builder(); // the run input: an order id
/// let charge = g.node("charge").retry(Retry::new(2)).task(|ctx, ()| async move {
///     if ctx.attempt() == 1 {
///         return Err::<String, BoxError>("connection reset".into());
///     }
///     // Every attempt of this node in this run sends the same key.
///     Ok(format!("{} order {} key {}", ctx.node_name(), ctx.input(), ctx.idempotency_key()))
/// });
/// let report = g.build()?.run(42).await?;
/// let expected = format!("charge order 42 key {}-0", report.run_id());
/// assert_eq!(report.get(charge), Some(&expected));
/// # Ok(())
/// # }
/// ```
pub struct Ctx<I> {
    run: Arc<RunState<I>>,
    node: u32,
    attempt: u32,
    cut: CtxCut,
}

/// When an attempt is cut, as the scheduler hands it to the attempt's [`Ctx`].
///
/// The scheduler's fast path starts a first attempt without computing its cut when it can
/// be computed later from the attempt's start, as [`TimeoutAfter`](CtxCut::TimeoutAfter)
/// does: most tasks never ask for it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CtxCut {
    /// The cut, computed; `None` when nothing cuts the attempt.
    At(Option<Instant>),
    /// The attempt's start: its cut is the node's timeout after it, or `None` without a
    /// timeout. Only for a first attempt whose node has no budget, in a run without a
    /// deadline, where the timeout alone cuts it.
    TimeoutAfter(Instant),
    /// A fallback's context, cut at the node's deadline; `None` when nothing cuts it.
    Fallback(Option<Instant>),
}

impl<I> Ctx<I> {
    pub(crate) fn new(run: Arc<RunState<I>>, node: u32, attempt: u32, cut: CtxCut) -> Self {
        Ctx {
            run,
            node,
            attempt,
            cut,
        }
    }

    /// The run and the node this context belongs to.
    pub(in crate::engine) fn into_parts(self) -> (Arc<RunState<I>>, u32) {
        (self.run, self.node)
    }

    /// When this attempt will be cut: the earliest of its per-attempt timeout, the node's
    /// budget and the run's deadline; `None` when none applies. A tokio instant, which is
    /// monotonic.
    #[must_use]
    pub fn deadline(&self) -> Option<Instant> {
        match self.cut {
            CtxCut::At(at) | CtxCut::Fallback(at) => at,
            CtxCut::TimeoutAfter(start) => {
                let run = &self.run;
                run.policy(self.node)?.first_cut(run.core.deadline(), start)
            }
        }
    }

    /// The time left before [`deadline`](Self::deadline), zero once it passed; `None` when
    /// no deadline applies. Pass it downstream, for example as the request's timeout, so
    /// that the downstream does not work for a caller that has given up. If the task's own
    /// timeout fires at that same instant and the task returns its error, the attempt still
    /// counts as cut by baton's timeout or deadline, not as a task error.
    #[must_use]
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline()
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// The time left of this attempt less `margin`, to send downstream with the request, as
    /// `grpc-timeout` or in milliseconds; see [`Budget`](crate::deadline::Budget). `None`
    /// when no deadline applies. The margin covers the request's trip and the downstream's
    /// answer, so that the answer arrives before this attempt is cut. Work the task starts
    /// on a detached `tokio::spawn` is not cut by this deadline: give it a budget of its
    /// own.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{BoxError, Graph};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// let sent = g.node("stock").timeout(Duration::from_millis(300)).task(|ctx, ()| async move {
    ///     let budget = ctx.budget(Duration::from_millis(20)).unwrap();
    ///     Ok::<_, BoxError>((budget.grpc_timeout(), budget.millis())) // the headers to send
    /// });
    /// let report = g.build()?.run(()).await?;
    /// assert_eq!(report.get(sent), Some(&("280000u".to_owned(), "280".to_owned())));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn budget(&self, margin: Duration) -> Option<crate::policy::Budget> {
        self.remaining()
            .map(|left| crate::policy::Budget::new(left.saturating_sub(margin)))
    }

    /// The run input: what [`Graph::run`](crate::Graph::run) was given, such as the
    /// request.
    #[must_use]
    pub fn input(&self) -> &I {
        &self.run.input
    }

    /// The graph's shared state of type `S`, given with [`GraphBuilder::state`]: a client,
    /// a configuration or a pool, given once to the graph instead of cloned into every
    /// task.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use baton_graph::{BoxError, Graph};
    ///
    /// struct Api {
    ///     base: String,
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<u64>::builder();
    /// g.state(Api { base: "http://127.0.0.1:8080".to_owned() });
    /// let user = g.node("user").task(|ctx, ()| async move {
    ///     let api = ctx.state::<Api>(); // no clone into the closure
    ///     Ok::<_, BoxError>(format!("{}/users/{}", api.base, ctx.input()))
    /// });
    /// let report = g.build()?.run(7).await?;
    /// assert_eq!(report.get(user).map(String::as_str), Some("http://127.0.0.1:8080/users/7"));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// When the graph has no state of type `S`, because no `GraphBuilder::state` call gave
    /// one: the task panics, and its node fails with the message. See
    /// [`try_state`](Self::try_state).
    ///
    /// [`GraphBuilder::state`]: crate::GraphBuilder::state
    #[must_use]
    pub fn state<S: Send + Sync + 'static>(&self) -> &S {
        match self.try_state::<S>() {
            Some(state) => state,
            None => panic!(
                "the graph has no state of type `{}`: give it with `GraphBuilder::state`",
                std::any::type_name::<S>()
            ),
        }
    }

    /// The graph's shared state of type `S`, if it has one.
    #[must_use]
    pub fn try_state<S: Send + Sync + 'static>(&self) -> Option<&S> {
        self.run.graph.states.get::<S>()
    }

    /// The attempt number, starting at 1.
    ///
    /// In a fallback's `Ctx`, given by
    /// [`NodeBuilder::fallback_with`](crate::NodeBuilder::fallback_with): how many attempts
    /// ran. It is 0 when none did, because the circuit breaker rejected the node or the
    /// deadline left no time for one.
    #[must_use]
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The name of the node this attempt belongs to.
    #[must_use]
    pub fn node_name(&self) -> &str {
        self.run.graph.meta.name(self.node)
    }

    /// The run this attempt belongs to.
    #[must_use]
    pub fn run_id(&self) -> RunId {
        self.run.core.run_id()
    }

    /// A key that is the same for every attempt of this node in this run and differs
    /// between nodes and runs. Send it with side effects, for example as an
    /// `Idempotency-Key` header, so that the downstream can deduplicate a retried request
    /// whose first attempt did reach it. A timed-out attempt may have had its side effect.
    #[must_use]
    pub fn idempotency_key(&self) -> IdempotencyKey {
        self.run.key_of(self.node)
    }

    /// A token that is cancelled when this attempt ends in any way: it completed, timed
    /// out, or its run was cancelled or dropped.
    ///
    /// The attempt's own future needs no token: it is dropped when it is cancelled, so it
    /// stops at its next `.await`. Give the token to work the attempt spawns or hands to a
    /// thread, so that nothing outlives the attempt; a blocking task's closure should check
    /// it. Created on first call; later calls in the same attempt return clones of it.
    /// Called on the `Ctx` of an attempt that has already ended, it returns a cancelled
    /// token. In a fallback's `Ctx`, the token is cancelled when the fallback ends or the
    /// run is cancelled.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use baton_graph::{BoxError, Graph};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// let spawned = Arc::new(Mutex::new(None));
    /// let keep = Arc::clone(&spawned);
    /// g.node("upload").task(move |ctx, ()| {
    ///     let keep = Arc::clone(&keep);
    ///     async move {
    ///         let token = ctx.cancellation_token();
    ///         // Work handed off stops when the attempt ends.
    ///         let work = tokio::spawn(async move { token.cancelled().await; "stopped" });
    ///         *keep.lock().unwrap() = Some(work);
    ///         Ok::<_, BoxError>(())
    ///     }
    /// });
    /// g.build()?.run(()).await?;
    /// let work = spawned.lock().unwrap().take().unwrap();
    /// assert_eq!(work.await?, "stopped");
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn cancellation_token(&self) -> CancellationToken {
        let core = &self.run.core;
        // A fallback keeps its token under a number no attempt has.
        let attempt = match self.cut {
            CtxCut::Fallback(_) => FALLBACK,
            _ => self.attempt,
        };
        match (core.node(self.node), core.slot(self.node)) {
            (Some(hot), Some(slot)) => {
                core.tokens()
                    .get(hot, slot, self.node, attempt, core.run_token())
            }
            _ => {
                let t = CancellationToken::new();
                t.cancel();
                t
            }
        }
    }
}

impl<I: Send + Sync + 'static> Ctx<I> {
    /// Starts `graph`'s run nested in this node, as a subgraph node's task does: its events
    /// reach this run's observers too, and its report is kept for this node's entry.
    pub(crate) fn run_nested<J: Send + Sync + 'static>(
        &self,
        graph: &Graph<J>,
        input: J,
        options: RunOptions,
    ) -> NestedRun<I, J> {
        NestedRun::new(Arc::clone(&self.run), self.node, graph, input, options)
    }
}

impl<I> fmt::Debug for Ctx<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ctx")
            .field("node", &self.node_name())
            .field("attempt", &self.attempt)
            .field("run", &self.run.core.run_id())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onion::Fallback;

    /// A task without a fallback is its closure alone: one that captures nothing is a
    /// zero-sized value, stored without memory. With a fallback, the task holds it behind
    /// one pointer.
    #[test]
    fn a_task_without_a_fallback_is_its_closure_alone() {
        fn typed<F, Fut>(task: F) -> TypedTask<(), F, u32, BoxError, Fut>
        where
            F: Fn(Ctx<()>, ()) -> Fut,
        {
            TypedTask::new(task)
        }
        let task = typed(|_ctx, ()| async { Ok::<u32, BoxError>(1) });
        assert_eq!(std::mem::size_of_val(&task), 0);
        let task = task.with_fallback::<()>(NodeFallback::Plain(Fallback::value(2)));
        assert_eq!(std::mem::size_of_val(&task), std::mem::size_of::<usize>());
    }
}
