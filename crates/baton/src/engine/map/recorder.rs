//! [`Recorder`]: a map node's item records as its items start and end, kept in the run for
//! the report when the node ends. They are also kept when its attempt is dropped, because
//! the run's deadline cut it or it was cancelled with its run: the items it had not seen
//! end are then recorded `Cancelled`.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::super::run::state::RunState;
use crate::observe::log;
use crate::onion::Execution;
use crate::policy::completion::{Decision, Tally, Verdict};
use crate::report::{Detail, ItemCold, ItemRecord, MapRecord, Outcome, item_name};

pub(super) struct Recorder<'a, I: Send + Sync + 'static> {
    run: &'a Arc<RunState<I>>,
    node: u32,
    tally: Tally,
    items: Vec<ItemRecord>,
    decided: bool,
    kept: bool,
}

impl<'a, I: Send + Sync + 'static> Recorder<'a, I> {
    pub(super) fn new(run: &'a Arc<RunState<I>>, node: u32, tally: Tally, total: usize) -> Self {
        let items = (0..total)
            .zip(0_u32..)
            .map(|(_, index)| ItemRecord {
                index,
                outcome: Outcome::Cancelled,
                attempts: 0,
                start: None,
                end: Duration::ZERO,
                cold: None,
            })
            .collect();
        Recorder {
            run,
            node,
            tally,
            items,
            decided: false,
            kept: false,
        }
    }

    /// The orchestrator's statistics counters, this thread's stripe.
    fn stats(&self) -> crate::observe::stats::Local<'_> {
        self.run.graph.orchestrator.counters().local()
    }

    /// Now, from the run's start.
    pub(super) fn now(&self) -> Duration {
        self.run.core.offset(Instant::now())
    }

    /// Item `index` started at `at`.
    pub(super) fn started(&mut self, index: u32, at: Duration) {
        if let Some(item) = self.items.get_mut(index as usize) {
            item.start = Some(at);
            self.stats().items_started().incr();
        }
    }

    /// Item `index` ended at `now` after `attempts` attempts with `execution`.
    pub(super) fn ended<R>(
        &mut self,
        index: u32,
        attempts: u32,
        execution: &Execution<R>,
        now: Duration,
    ) {
        let Some(item) = self.items.get_mut(index as usize) else {
            return;
        };
        let (outcome, error) = match (&execution.result, &execution.recovered_from) {
            (Ok(_), None) => (Outcome::Succeeded, None),
            (Ok(_), Some(from)) => (Outcome::Recovered, Some(Arc::clone(from))),
            (Err(error), _) => (Outcome::Failed, Some(Arc::clone(error))),
        };
        if outcome != Outcome::Succeeded && tracing::enabled!(tracing::Level::DEBUG) {
            let name = item_name(self.run.graph.meta.name(self.node), index);
            log::node_ended(&name, outcome, error.as_deref());
        }
        item.outcome = outcome;
        item.attempts = attempts;
        self.run.graph.orchestrator.counters().local().item(outcome);
        item.end = now;
        if error.is_some() || !execution.attempts.is_empty() {
            item.cold = Some(Box::new(ItemCold {
                error,
                attempt_log: execution.attempts.clone(),
            }));
        }
    }

    /// Counts an item's end against the rule.
    pub(super) fn count(&mut self, success: bool) -> Verdict {
        let verdict = self.tally.count(success);
        if verdict != Verdict::Open {
            self.decided = true;
        }
        verdict
    }

    /// Whether the rule was decided.
    pub(super) fn decided(&self) -> bool {
        self.decided
    }

    /// The rule's decision, the items that did not end recorded `Cancelled`; the records
    /// are kept in the run.
    pub(super) fn finish(&mut self) -> Decision {
        let now = self.now();
        let mut cancelled = 0;
        for item in &mut self.items {
            if item.outcome == Outcome::Cancelled {
                cancelled += 1;
                item.end = now;
            }
        }
        if cancelled > 0 {
            self.stats().items_cancelled().add(cancelled as i64);
        }
        let decision = self.tally.decide(cancelled);
        if !self.kept {
            self.kept = true;
            let map = MapRecord {
                completion: self.tally.completion(),
                decision,
                items: std::mem::take(&mut self.items),
            };
            self.run.put_detail(self.node, Detail::Map(map));
        }
        decision
    }
}

impl<I: Send + Sync + 'static> Drop for Recorder<'_, I> {
    fn drop(&mut self) {
        if !self.kept {
            self.finish();
        }
    }
}
