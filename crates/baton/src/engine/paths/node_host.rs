//! The onion's host for a graph node: how the onion calls the node's task and fallback,
//! and where what it reports goes (the run's slot and tokens, the orchestrator's counters
//! and observers).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::run::state::RunState;
use crate::engine::task::ctx::{AttemptFuture, FallbackFuture};
use crate::engine::task::node_fallback::FallbackScope;
use crate::error::NodeError;
use crate::observe::Event;
use crate::onion::Host;
use crate::policy::breaker::BreakerState;
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
        Some(&self.run.core)
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

    fn attempt_cut(&self, number: u32, limit: Duration) {
        let run = self.run;
        run.graph.orchestrator.counters().local().timeouts.incr();
        if run.observed() {
            run.emit(&Event::Timeout {
                run: run.core.run_id(),
                graph: run.graph_name(),
                node: self.name(),
                attempt: number,
                limit,
            });
        }
    }

    fn retry_scheduled(&self, next: u32, delay: Duration, remaining: Option<Duration>) {
        let run = self.run;
        if run.observed() {
            run.emit(&Event::RetryScheduled {
                run: run.core.run_id(),
                graph: run.graph_name(),
                node: self.name(),
                attempt: next,
                delay,
                remaining,
            });
        }
    }

    fn permit_waited(&self, number: u32, bulkhead: &str, waited: Duration, acquired: bool) {
        let run = self.run;
        if run.observed() {
            run.emit(&Event::BulkheadWaited {
                run: run.core.run_id(),
                graph: run.graph_name(),
                node: self.name(),
                attempt: number,
                bulkhead,
                waited,
                acquired,
            });
        }
    }

    fn rate_limited(&self, number: u32, limiter: &str, wait: Duration, admitted: bool) {
        let run = self.run;
        if !admitted {
            run.graph
                .orchestrator
                .counters()
                .local()
                .rate_limited
                .incr();
        }
        if run.observed() {
            run.emit(&Event::RateLimitWaited {
                run: run.core.run_id(),
                graph: run.graph_name(),
                node: self.name(),
                attempt: number,
                limiter,
                wait,
                admitted,
            });
        }
    }

    fn fault_injected(&self, number: u32, latency: Duration, error: bool) {
        let run = self.run;
        run.graph
            .orchestrator
            .counters()
            .local()
            .faults_injected
            .incr();
        if run.observed() {
            run.emit(&Event::FaultInjected {
                run: run.core.run_id(),
                graph: run.graph_name(),
                node: self.name(),
                attempt: number,
                latency,
                error,
            });
        }
    }

    fn hedged(&self, number: u32, after: Duration) {
        let run = self.run;
        run.graph.orchestrator.counters().local().hedges.incr();
        if run.observed() {
            run.emit(&Event::HedgeStarted {
                run: run.core.run_id(),
                graph: run.graph_name(),
                node: self.name(),
                attempt: number,
                after,
            });
        }
    }

    fn rejected(&self, breaker: &str, state: BreakerState) {
        let run = self.run;
        run.graph
            .orchestrator
            .counters()
            .local()
            .breaker_rejections
            .incr();
        if run.observed() {
            run.emit(&Event::BreakerRejected {
                run: run.core.run_id(),
                graph: run.graph_name(),
                node: self.name(),
                breaker,
                state,
            });
        }
    }

    fn fell_back(&self, error: &NodeError) {
        let run = self.run;
        run.graph.orchestrator.counters().local().fallbacks.incr();
        if run.observed() {
            run.emit(&Event::FallbackUsed {
                run: run.core.run_id(),
                graph: run.graph_name(),
                node: self.name(),
                error,
            });
        }
    }
}
