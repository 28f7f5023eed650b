//! The onion's host for one item of a map node: its task called with the item, its events
//! named after the item as `node[index]`, its attempts counted in the orchestrator's stats.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

use super::super::run::state::RunState;
use super::ItemCtx;
use crate::error::{BoxError, NodeError, UserCode};
use crate::observe::Event;
use crate::observe::stats::Local;
use crate::onion::tell::{self, Subject, Teller};
use crate::onion::{Fallback, Held, Host, Recovered};
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
}

impl<I: Send + Sync + 'static, X, F, R> Teller for ItemHost<'_, I, X, F, R> {
    fn stripe(&self) -> Option<Local<'_>> {
        Some(self.run.graph.orchestrator.counters().local())
    }

    fn observed(&self) -> bool {
        self.run.observed()
    }

    fn subject(&self) -> Subject<'_> {
        Subject {
            run: self.run.core.run_id(),
            graph: self.run.graph_name(),
            node: self.item_name(),
            item: Some(self.index as usize),
        }
    }

    fn tell(&self, event: &Event<'_>) {
        self.run.emit(event);
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
    type Attempt = Held<Fut>;
    type Recover = Pin<Box<dyn Future<Output = Result<R, NodeError>> + Send + 'a>>;

    /// The node's name: errors name the node, while the report's item rows name the item,
    /// and an item that succeeds formats no name of its own.
    fn name(&self) -> &str {
        self.run.graph.meta.name(self.node)
    }

    fn call(
        &self,
        number: u32,
        cut: Option<Instant>,
        permit: Option<BulkheadPermit>,
    ) -> Result<Held<Fut>, NodeError> {
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
        Ok(Held::new(fut, permit))
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
        Some(&**self.run)
    }

    fn offset(&self, at: Instant) -> Duration {
        self.run.core.offset(at)
    }

    fn attempt_started(&self, number: u32, budget: Option<Duration>) {
        self.attempts.fetch_add(1, Ordering::Relaxed);
        tell::attempt_started(self, number, budget);
    }

    fn attempt_ended(&self, _number: u32) {}

    fn attempt_failed(&self, number: u32, error: &NodeError) {
        tell::attempt_failed(self, self.item_name(), number, error);
    }
}
