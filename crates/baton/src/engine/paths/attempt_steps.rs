//! What every path that runs an attempt shares: counting it, telling the observers, and
//! calling the task under `catch_unwind` to get the attempt's future.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::run::state::{RunState, catch_panic};
use crate::engine::task::ctx::{AttemptFuture, Ctx, CtxCut};
use crate::error::{NodeError, UserCode};
use crate::observe::{Event, log};
use crate::policy::limit::bulkhead::BulkheadPermit;

impl<I: Send + Sync + 'static> RunState<I> {
    /// Counts attempt `number` of node `id`, in its slot and the stats, and tells the
    /// observers it started, with the time it has before it is cut, if any.
    pub(crate) fn attempt_started(&self, id: u32, number: u32, budget: Option<Duration>) {
        self.attempt_started_with(id, number, || budget);
    }

    /// [`attempt_started`](Self::attempt_started), computing the budget only when an
    /// observer wants it.
    pub(crate) fn attempt_started_with(
        &self,
        id: u32,
        number: u32,
        budget: impl FnOnce() -> Option<Duration>,
    ) {
        if let Some(slot) = self.core.slot(id) {
            slot.count_attempt();
        }
        let counters = self.graph.orchestrator.counters().local();
        counters.attempts().incr();
        if number > 1 {
            counters.retries().incr();
        }
        if self.observed() {
            self.emit(&Event::AttemptStarted {
                run: self.core.run_id(),
                graph: self.graph_name(),
                node: self.graph.meta.name(id),
                item: None,
                attempt: number,
                budget: budget(),
            });
        }
    }

    /// Attempt `number` of node `id` ended, in any way; `u32::MAX` stands for all of its
    /// attempts. The cancellation token it asked for, if any, is cancelled. Inline: it is
    /// on every node's path, and has nothing to do unless a task asked for a token.
    #[inline]
    pub(crate) fn attempt_ended(&self, id: u32, number: u32) {
        self.core.tokens().end(id, number);
    }

    /// Logs that attempt `number` of node `id` failed with `error`, and tells the observers.
    pub(crate) fn attempt_failed(&self, id: u32, number: u32, error: &NodeError) {
        log::attempt_failed(self.graph.meta.name(id), number, error);
        if self.observed() {
            self.emit(&Event::AttemptFailed {
                run: self.core.run_id(),
                graph: self.graph_name(),
                node: self.graph.meta.name(id),
                item: None,
                attempt: number,
                error,
            });
        }
    }

    /// Calls node `id`'s task for attempt `number`, which is cut at `deadline` and holds
    /// `permit` until it has really stopped. Returns the attempt's future, or why it could
    /// not start: the task panicked before returning its future.
    pub(crate) fn call_task(
        self: &Arc<Self>,
        id: u32,
        number: u32,
        deadline: Option<Instant>,
        permit: Option<BulkheadPermit>,
    ) -> Result<AttemptFuture, NodeError> {
        let mut into = None;
        self.call_task_into(id, number, CtxCut::At(deadline), permit, &mut into)?;
        let Some(attempt) = into else {
            unreachable!("a task that was called wrote its attempt")
        };
        Ok(attempt)
    }

    /// [`call_task`](Self::call_task), with the attempt's cut as its `Ctx` gives it,
    /// writing the attempt's future into `into`. When the two futures have the same layout,
    /// it reuses the box already there, which holds a driver's last attempt, already ended;
    /// otherwise a box the graph kept, when the future is large (`task/attempt_box.rs`).
    pub(crate) fn call_task_into(
        self: &Arc<Self>,
        id: u32,
        number: u32,
        cut: CtxCut,
        permit: Option<BulkheadPermit>,
        into: &mut Option<AttemptFuture>,
    ) -> Result<(), NodeError> {
        let Some(task) = self.graph.task(id) else {
            unreachable!("node {id} is in its graph")
        };
        let cx = self.fetch_cx(id);
        let ctx = Ctx::new(Arc::clone(self), id, number, cut);
        let called = catch_panic(UserCode::Task, || task.call(ctx, &cx, permit, into))?;
        // Validation checked every upstream's type, and a node runs only once each of its
        // upstreams produced a value.
        if !called {
            unreachable!("node {id}'s upstream values are present and typed");
        }
        Ok(())
    }
}
