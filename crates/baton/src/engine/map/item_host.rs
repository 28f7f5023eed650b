//! The onion's host for one item of a map node: its task called with the item, its events
//! named after the item (`node[index]`), its attempts counted in the orchestrator's stats.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use super::super::run::state::RunState;
use super::ItemCtx;
use crate::error::{BoxError, NodeError, UserCode};
use crate::observe::{Event, log};
use crate::onion::{Fallback, Host, Recovered};
use crate::policy::breaker::BreakerState;
use crate::policy::deadline::TimerHook;
use crate::policy::limit::bulkhead::BulkheadPermit;
use crate::report::item_name;

/// What the map node reads back from an item's host.
pub(super) trait Counted {
    /// The item's index.
    fn index(&self) -> u32;
    /// How many attempts started.
    fn attempts(&self) -> u32;
}

/// Item `index` of map node `node` of `run`.
pub(super) struct ItemHost<'a, I, X, F, R> {
    run: &'a Arc<RunState<I>>,
    node: u32,
    index: u32,
    item: X,
    task: &'a F,
    fallback: Option<&'a Fallback<R>>,
    /// `node[index]`, made when an error or an event first needs it.
    name: OnceLock<String>,
    attempts: AtomicU32,
}

impl<'a, I, X, F, R> ItemHost<'a, I, X, F, R> {
    pub(super) fn new(
        run: &'a Arc<RunState<I>>,
        node: u32,
        index: u32,
        item: X,
        task: &'a F,
        fallback: Option<&'a Fallback<R>>,
    ) -> Self {
        ItemHost {
            run,
            node,
            index,
            item,
            task,
            fallback,
            name: OnceLock::new(),
            attempts: AtomicU32::new(0),
        }
    }
}

impl<I: Send + Sync + 'static, X, F, R> ItemHost<'_, I, X, F, R> {
    fn item_name(&self) -> &str {
        self.name
            .get_or_init(|| item_name(self.run.graph.meta.name(self.node), self.index))
    }

    pub(super) fn emit<'e>(&'e self, event: impl FnOnce(&'e str) -> Event<'e>) {
        if self.run.observed() {
            self.run.emit(&event(self.item_name()));
        }
    }

    pub(super) fn count(&self, counter: impl FnOnce(&crate::observe::stats::Stripe)) {
        counter(self.run.graph.orchestrator.counters().local());
    }
}

impl<I, X, F, R> Counted for ItemHost<'_, I, X, F, R> {
    fn index(&self) -> u32 {
        self.index
    }
    fn attempts(&self) -> u32 {
        self.attempts.load(Ordering::Relaxed)
    }
}

impl<'a, I, X, F, R, E, Fut> Host for ItemHost<'a, I, X, F, R>
where
    I: Send + Sync + 'static,
    X: Clone + Send + Sync,
    F: Fn(ItemCtx<I>, X) -> Fut + Send + Sync,
    Fut: Future<Output = Result<R, E>> + Send,
    R: Clone + Send + Sync + 'static,
    E: Into<BoxError>,
{
    type Value = R;
    type Attempt = ItemAttempt<Fut>;
    type Recover = Pin<Box<dyn Future<Output = Result<R, NodeError>> + Send + 'a>>;

    /// The node's name: errors name the node (the report's item rows name the item), and
    /// an item that succeeds formats no name of its own.
    fn name(&self) -> &str {
        self.run.graph.meta.name(self.node)
    }

    fn call(
        &self,
        number: u32,
        cut: Option<Instant>,
        permit: Option<BulkheadPermit>,
    ) -> Result<ItemAttempt<Fut>, NodeError> {
        let ctx = ItemCtx {
            run: Arc::clone(self.run),
            node: self.node,
            index: self.index,
            attempt: number,
            cut,
        };
        let item = self.item.clone();
        let fut = std::panic::catch_unwind(AssertUnwindSafe(|| (self.task)(ctx, item)))
            .map_err(|panic| NodeError::from_panic(UserCode::Task, panic.as_ref()))?;
        Ok(ItemAttempt { fut, permit })
    }

    fn fallback(
        &self,
        error: &Arc<NodeError>,
        _attempts: u32,
        _deadline: Option<Instant>,
    ) -> Option<Self::Recover> {
        let fallback = self.fallback?;
        let (error, name) = (Arc::clone(error), self.item_name().to_owned());
        // `name` names the item in the fallback's error.
        Some(Box::pin(async move {
            match fallback.recover(&name, error).await? {
                Recovered::Shared(value) => Ok(R::clone(&value)),
                Recovered::Owned(value) => Ok(value),
            }
        }))
    }

    fn timer_hook(&self) -> Option<&dyn TimerHook> {
        Some(&self.run.core)
    }

    fn offset(&self, at: Instant) -> Duration {
        self.run.core.offset(at)
    }

    fn attempt_started(&self, number: u32, budget: Option<Duration>) {
        self.attempts.fetch_add(1, Ordering::Relaxed);
        self.count(|c| {
            c.attempts.incr();
            if number > 1 {
                c.retries.incr();
            }
        });
        let (run, graph) = (self.run.core.run_id(), self.run.graph_name());
        self.emit(|node| Event::AttemptStarted {
            run,
            graph,
            node,
            attempt: number,
            budget,
        });
    }

    fn attempt_ended(&self, _number: u32) {}

    fn attempt_failed(&self, number: u32, error: &NodeError) {
        log::attempt_failed(self.item_name(), number, error);
        let (run, graph) = (self.run.core.run_id(), self.run.graph_name());
        self.emit(|node| Event::AttemptFailed {
            run,
            graph,
            node,
            attempt: number,
            error,
        });
    }

    fn attempt_cut(&self, number: u32, limit: Duration) {
        self.count(|c| c.timeouts.incr());
        let (run, graph) = (self.run.core.run_id(), self.run.graph_name());
        self.emit(|node| Event::Timeout {
            run,
            graph,
            node,
            attempt: number,
            limit,
        });
    }

    fn retry_scheduled(&self, next: u32, delay: Duration, remaining: Option<Duration>) {
        let (run, graph) = (self.run.core.run_id(), self.run.graph_name());
        self.emit(|node| Event::RetryScheduled {
            run,
            graph,
            node,
            attempt: next,
            delay,
            remaining,
        });
    }

    fn permit_waited(&self, number: u32, bulkhead: &str, waited: Duration, acquired: bool) {
        let (run, graph) = (self.run.core.run_id(), self.run.graph_name());
        self.emit(|node| Event::BulkheadWaited {
            run,
            graph,
            node,
            attempt: number,
            bulkhead,
            waited,
            acquired,
        });
    }

    fn rate_limited(&self, number: u32, limiter: &str, wait: Duration, admitted: bool) {
        if !admitted {
            self.count(|c| c.rate_limited.incr());
        }
        let (run, graph) = (self.run.core.run_id(), self.run.graph_name());
        self.emit(|node| Event::RateLimitWaited {
            run,
            graph,
            node,
            attempt: number,
            limiter,
            wait,
            admitted,
        });
    }

    fn fault_injected(&self, number: u32, latency: Duration, error: bool) {
        self.count(|c| c.faults_injected.incr());
        let (run, graph) = (self.run.core.run_id(), self.run.graph_name());
        self.emit(|node| Event::FaultInjected {
            run,
            graph,
            node,
            attempt: number,
            latency,
            error,
        });
    }

    fn hedged(&self, number: u32, after: Duration) {
        self.count(|c| c.hedges.incr());
        let (run, graph) = (self.run.core.run_id(), self.run.graph_name());
        self.emit(|node| Event::HedgeStarted {
            run,
            graph,
            node,
            attempt: number,
            after,
        });
    }

    fn rejected(&self, breaker: &str, state: BreakerState) {
        self.count(|c| c.breaker_rejections.incr());
        let (run, graph) = (self.run.core.run_id(), self.run.graph_name());
        self.emit(|node| Event::BreakerRejected {
            run,
            graph,
            node,
            breaker,
            state,
        });
    }

    fn fell_back(&self, error: &NodeError) {
        self.count(|c| c.fallbacks.incr());
        let (run, graph) = (self.run.core.run_id(), self.run.graph_name());
        self.emit(|node| Event::FallbackUsed {
            run,
            graph,
            node,
            error,
        });
    }
}

pin_project_lite::pin_project! {
    /// An item's attempt: the task's future, with its error boxed, holding its bulkhead
    /// permit until it ends or is dropped.
    pub(super) struct ItemAttempt<Fut> {
        #[pin]
        fut: Fut,
        permit: Option<BulkheadPermit>,
    }
}

impl<Fut, R, E> Future for ItemAttempt<Fut>
where
    Fut: Future<Output = Result<R, E>>,
    E: Into<BoxError>,
{
    type Output = Result<R, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let out = std::task::ready!(this.fut.poll(cx));
        drop(this.permit.take());
        Poll::Ready(out.map_err(Into::into))
    }
}
