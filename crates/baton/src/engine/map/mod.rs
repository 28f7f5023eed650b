//! Map nodes: one item per element of the upstream's list, each through the node's
//! policies, polled inside the node's own attempt as a set of futures, with no task per
//! item. At most `concurrency` run at once, until the node's [`Completion`] rule is
//! decided.

mod item_ctx;
mod item_host;
mod recorder;

use std::any::TypeId;
use std::future::Future;
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock};

use futures_util::future::Either;
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use tokio::time::Instant;

pub use item_ctx::ItemCtx;
use item_host::ItemHost;
use recorder::Recorder;

use super::graph::NodeKind;
use super::run::state::RunState;
use super::task::attempt_box::put;
use super::task::ctx::{AttemptFuture, Ctx, ErasedTask, FallbackFuture};
use super::task::node_fallback::FallbackScope;
use super::task::upstreams::FetchCx;
use super::task::upstreams::sealed::Sealed;
use crate::error::{BoxError, MapFailed, NodeError, UserCode};
use crate::id::Node;
use crate::onion::{self, Execution, Fallback, ResolvedPolicies};
use crate::policy::completion::{Tally, Verdict};
use crate::policy::{Completion, DEFAULT_MAP_CONCURRENCY};
use crate::util::value::Value;

/// What a map node's value is made of its items' results, in input order.
pub(crate) trait MapOutput<R>: Send + Sync + 'static {
    /// The node's value.
    type Value: Send + Sync + 'static;
    /// The value, once the rule was met; `None` marks an item cancelled by the rule.
    fn collect(node: &str, results: Vec<Option<Result<R, Arc<NodeError>>>>) -> Self::Value;
}

/// The values alone, for `NodeBuilder::map`: every item succeeded.
pub(crate) struct Values;

impl<R: Send + Sync + 'static> MapOutput<R> for Values {
    type Value = Vec<R>;
    fn collect(_: &str, results: Vec<Option<Result<R, Arc<NodeError>>>>) -> Vec<R> {
        results
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .collect()
    }
}

/// Each item's result, for `NodeBuilder::map_settled`.
pub(crate) struct Results;

impl<R: Send + Sync + 'static> MapOutput<R> for Results {
    type Value = Vec<Result<R, Arc<NodeError>>>;
    fn collect(node: &str, results: Vec<Option<Result<R, Arc<NodeError>>>>) -> Self::Value {
        let mut cancelled = None;
        results
            .into_iter()
            .map(|result| {
                result.unwrap_or_else(|| {
                    let error = cancelled.get_or_insert_with(|| {
                        Arc::new(NodeError::ItemCancelled {
                            node: node.to_owned(),
                        })
                    });
                    Err(Arc::clone(error))
                })
            })
            .collect()
    }
}

/// Carries a map task's type parameters without owning values of them.
type MapTypes<L, X, R, E, Fut, O> = PhantomData<fn() -> (L, X, R, E, Fut, O)>;

/// A map node's task: the item task, the item fallback, and how the value is made.
pub(crate) struct MapTask<L, X, F, R, E, Fut, O> {
    task: Arc<F>,
    fallback: Option<Fallback<R>>,
    _types: MapTypes<L, X, R, E, Fut, O>,
}

impl<L, X, F, R, E, Fut, O> MapTask<L, X, F, R, E, Fut, O> {
    pub(crate) fn new(task: F, fallback: Option<Fallback<R>>) -> Self {
        MapTask {
            task: Arc::new(task),
            fallback,
            _types: PhantomData,
        }
    }
}

impl<I, L, X, F, R, E, Fut, O> ErasedTask<I> for MapTask<L, X, F, R, E, Fut, O>
where
    I: Send + Sync + 'static,
    L: Send + Sync + 'static,
    for<'a> &'a L: IntoIterator<Item = &'a X>,
    X: Clone + Send + Sync + 'static,
    F: Fn(ItemCtx<I>, X) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, E>> + Send + 'static,
    R: Clone + Send + Sync + 'static,
    E: Into<BoxError> + 'static,
    O: MapOutput<R>,
{
    fn value_type(&self) -> (TypeId, &'static str) {
        (TypeId::of::<O::Value>(), std::any::type_name::<O::Value>())
    }

    fn call(
        &self,
        ctx: Ctx<I>,
        cx: &FetchCx<'_>,
        _permit: Option<crate::policy::limit::bulkhead::BulkheadPermit>,
        into: &mut Option<AttemptFuture>,
    ) -> bool {
        let Some(list) = <Node<L> as Sealed>::__fetch(cx) else {
            return false;
        };
        let items: Vec<X> = (&*list).into_iter().cloned().collect();
        let (run, node) = ctx.into_parts();
        let task = Arc::clone(&self.task);
        let fallback = self.fallback.clone();
        put(
            into,
            async move { run_map::<I, X, F, R, E, Fut, O>(run, node, items, task, fallback).await },
            || cx.boxes.kept_attempts(),
        );
        true
    }

    fn fallback(&self, _: &FallbackScope<'_, I>, _: Arc<NodeError>) -> Option<FallbackFuture> {
        // The fallback is the items': the node itself has none.
        None
    }

    /// Whether the items have a fallback. The diagrams label it.
    fn has_fallback(&self) -> bool {
        self.fallback.is_some()
    }
}

/// The policies of an item whose node has none.
fn no_policies() -> &'static ResolvedPolicies {
    static NONE: OnceLock<ResolvedPolicies> = OnceLock::new();
    NONE.get_or_init(ResolvedPolicies::default)
}

/// Runs the items of map node `node`: at most the node's concurrency at once, until its
/// rule is decided. Records them, also when dropped, and makes the node's value.
async fn run_map<I, X, F, R, E, Fut, O>(
    run: Arc<RunState<I>>,
    node: u32,
    items: Vec<X>,
    task: Arc<F>,
    fallback: Option<Fallback<R>>,
) -> Result<Value, BoxError>
where
    I: Send + Sync + 'static,
    X: Clone + Send + Sync + 'static,
    F: Fn(ItemCtx<I>, X) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, E>> + Send + 'static,
    R: Clone + Send + Sync + 'static,
    E: Into<BoxError> + 'static,
    O: MapOutput<R>,
{
    let (concurrency, completion) = match run.graph.kind(node) {
        NodeKind::Map {
            concurrency,
            completion,
        } => (*concurrency, *completion),
        _ => (DEFAULT_MAP_CONCURRENCY, Completion::AllSucceed),
    };
    let deadline = run.core.deadline();
    // Without policies and without a deadline, an item is its task's one attempt.
    let fast = run.item_policy(node).is_none() && deadline.is_none();
    let policies: &ResolvedPolicies = match run.item_policy(node) {
        Some(policies) => policies,
        None => no_policies(),
    };
    let total = items.len();
    let mut recorder = Recorder::new(&run, node, Tally::new(completion, total), total);
    let mut results: Vec<Option<Result<R, Arc<NodeError>>>> = Vec::with_capacity(total);
    results.resize_with(total, || None);
    let mut pending = items.into_iter().zip(0_u32..);
    let mut running = FuturesUnordered::new();
    let (task, fallback) = (&*task, fallback.as_ref());
    let mut first_failure = None;
    let mut now = recorder.now();
    loop {
        while running.len() < concurrency && !recorder.decided() {
            let Some((item, index)) = pending.next() else {
                break;
            };
            recorder.started(index, now);
            let host = ItemHost::new(&run, node, index, item, task, fallback);
            running.push(if fast {
                Either::Left(fast_item(host))
            } else {
                Either::Right(Box::pin(run_item(host, policies, deadline)))
            });
        }
        let Some((index, attempts, execution)) = running.next().await else {
            break;
        };
        now = recorder.now();
        let success = execution.result.is_ok();
        if !success && first_failure.is_none() {
            first_failure = Some(index);
        }
        recorder.ended(index, attempts, &execution, now);
        if let Some(slot) = results.get_mut(index as usize) {
            *slot = Some(execution.result);
        }
        if let Verdict::Stop { .. } = recorder.count(success) {
            break;
        }
    }
    // Cancels the items still in flight: they stop at their next `.await`.
    drop(running);
    let decision = recorder.finish();
    if decision.met {
        return Ok(Value::new(O::collect(run.graph.meta.name(node), results)));
    }
    let first_error = first_failure.and_then(|i| results.get_mut(i as usize)?.take()?.err());
    Err(Box::new(MapFailed {
        node: run.graph.meta.name(node).to_owned(),
        completion,
        decision,
        first_failed: first_failure.map(|i| i as usize),
        first_error,
    }))
}

/// Runs one item through the policies; its index, attempts and what it produced.
async fn run_item<H: onion::Host + item_host::Counted>(
    host: H,
    policies: &ResolvedPolicies,
    deadline: Option<Instant>,
) -> (u32, u32, Execution<H::Value>) {
    let started = Instant::now();
    let execution = onion::execute(&host, policies, deadline, started, None).await;
    (host.index(), host.attempts(), execution)
}

/// Runs one item of a node without policies, in a run without a deadline: its task's one
/// attempt, its panic caught, counted and told as the onion would.
async fn fast_item<H: onion::Host + item_host::Counted>(
    host: H,
) -> (u32, u32, Execution<H::Value>) {
    let result = match host.call(1, None, None) {
        Ok(attempt) => {
            host.attempt_started(1, None);
            match AssertUnwindSafe(attempt).catch_unwind().await {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(error)) => Err(NodeError::Task(error)),
                Err(panic) => Err(NodeError::from_panic(UserCode::Task, panic.as_ref())),
            }
        }
        Err(error) => {
            host.attempt_started(1, None);
            Err(error)
        }
    };
    let result = result.map_err(|error| {
        host.attempt_failed(1, &error);
        Arc::new(error)
    });
    let execution = Execution {
        result,
        recovered_from: None,
        attempts: Vec::new(),
        breaker_local: false,
    };
    (host.index(), 1, execution)
}
