//! The onion's host for a graph node: how the onion calls the node's task and fallback, and
//! where what it reports goes. That is the run's slot and tokens, and the orchestrator's
//! counters and observers.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::run::state::RunState;
use crate::engine::task::ctx::{AttemptFuture, FallbackFuture};
use crate::engine::task::node_fallback::FallbackScope;
use crate::error::NodeError;
use crate::observe::Event;
use crate::observe::stats::Local;
use crate::onion::Host;
use crate::onion::tell::{Subject, Teller};
use crate::policy::deadline::TimerHook;
use crate::policy::limit::bulkhead::BulkheadPermit;
use crate::util::value::Value;

/// Node `id` of `run`, as the onion sees it.
pub(in crate::engine) struct NodeHost<'a, I: Send + Sync + 'static> {
    pub(in crate::engine) run: &'a Arc<RunState<I>>,
    pub(in crate::engine) id: u32,
}

impl<I: Send + Sync + 'static> Host for NodeHost<'_, I> {
    type Value = Value;
    type Attempt = AttemptFuture;
    type Recover = FallbackFuture;

    fn name(&self) -> &str {
        self.run.graph.meta.name(self.id)
    }

    fn call(
        &self,
        number: u32,
        cut: Option<Instant>,
        permit: Option<BulkheadPermit>,
    ) -> Result<AttemptFuture, NodeError> {
        self.run.call_task(self.id, number, cut, permit)
    }

    fn fallback(
        &self,
        error: &Arc<NodeError>,
        attempts: u32,
        deadline: Option<Instant>,
    ) -> Option<FallbackFuture> {
        let task = self.run.graph.task(self.id)?;
        let scope = FallbackScope {
            run: self.run,
            node: self.id,
            attempts,
            deadline,
        };
        task.fallback(&scope, Arc::clone(error))
    }

    fn timer_hook(&self) -> Option<&dyn TimerHook> {
        Some(&**self.run)
    }

    fn offset(&self, at: Instant) -> Duration {
        self.run.core.offset(at)
    }

    fn attempt_started(&self, number: u32, budget: Option<Duration>) {
        self.run.attempt_started(self.id, number, budget);
    }

    fn attempt_ended(&self, number: u32) {
        self.run.attempt_ended(self.id, number);
    }

    fn attempt_failed(&self, number: u32, error: &NodeError) {
        self.run.attempt_failed(self.id, number, error);
    }
}

impl<I: Send + Sync + 'static> Teller for NodeHost<'_, I> {
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
            node: self.name(),
            item: None,
        }
    }

    fn tell(&self, event: &Event<'_>) {
        self.run.emit(event);
    }
}
