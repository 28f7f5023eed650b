//! How a run ends. The party that brings the run's `live` count to zero ends it: it
//! starts the run's compensations if it has any, which end it when they are done;
//! otherwise it tells the orchestrator and the observers, then marks the run ended and
//! wakes its future, unless that future is the one polling, as it is for a driver it
//! polls.

use std::sync::Arc;

use super::admission::{Admit, End};
use super::state::RunState;
use crate::error::CancelReason;
use crate::observe::Event;
use crate::report::{Outcome, Report, RunRecords};

impl<I: Send + Sync + 'static> RunState<I> {
    /// Drops `k` from `live`; the one that brings it to zero ends the run.
    #[inline]
    pub(in crate::engine) fn release(&self, k: usize) {
        if self.core.release(k) {
            self.on_end();
        }
    }

    /// [`release`](Self::release), by a driver the run's future polls, as it is dropped in
    /// that future's poll or with the future: an end here wakes no task. The future looks at
    /// the run's end after polling its drivers, and a future being dropped awaits nothing.
    /// Waking would only notify the awaiting task while it runs, which tokio then polls
    /// again for nothing, as a task that yielded, waking an idle worker to look for it.
    #[inline]
    pub(in crate::engine) fn release_in_future(&self, k: usize) {
        if self.core.release(k) {
            self.end_unless_compensating(false);
        }
    }

    /// Ends the run, whose `live` count the caller brought to zero, and wakes its future.
    pub(in crate::engine) fn on_end(&self) {
        self.end_unless_compensating(true);
    }

    /// Ends the run, or starts its compensations, which end it when they are done and wake
    /// its future then. Otherwise the future is woken if `wake`.
    fn end_unless_compensating(&self, wake: bool) {
        if self.graph.compensations.is_some() {
            if let Some(me) = self.me.upgrade() {
                if me.start_compensation(Self::end) {
                    return;
                }
            }
        }
        self.end_and_wake(wake);
    }

    /// The run ended: tells the orchestrator and the observers, then lets its future
    /// resolve.
    fn end(&self) {
        self.end_and_wake(true);
    }

    /// [`end`](Self::end), waking the run's future only if `wake`.
    fn end_and_wake(&self, wake: bool) {
        // Its attempts are over: no timer of its own stands for other runs' cuts now.
        if self.core.take_floor_back() {
            self.graph.orchestrator.give_back_timer_floor();
        }
        if self.core.admission().end() == End::WasAdmitted {
            self.report_end();
        }
        // Only now may the run's future resolve: whoever reads the stats or awaits an
        // observer's `RunFinished` after the run finds them in.
        self.core.mark_ended(wake);
    }

    /// The orchestrator admitted the run. `start` calls this once it has fixed the run's
    /// origin, before the first driver. If the run already ended, cancelled while being
    /// admitted, says so now.
    pub(in crate::engine) fn mark_admitted(&self) {
        if self.core.admission().admit() == Admit::AlreadyEnded {
            self.report_end();
        }
    }

    /// Tells the observers and the orchestrator that the admitted run ended. Counts the
    /// outcomes of nodes recorded before the run was marked admitted, by a cancel that swept
    /// them while it was being admitted: its nodes were submitted, so they count.
    fn report_end(&self) {
        let core = &self.core;
        if core.has_uncounted() {
            let counters = self.graph.orchestrator.counters().local();
            for (_, slot) in core.nodes() {
                if let Some(record) = slot.record().filter(|_| slot.is_uncounted()) {
                    counters.outcome(record.outcome);
                }
            }
        }
        if self.observed() {
            if let Some(me) = self.me.upgrade() {
                let report = Report::new(me as Arc<dyn RunRecords>);
                self.emit(&Event::RunFinished {
                    run: core.run_id(),
                    graph: self.graph_name(),
                    report: &report,
                });
            }
        }
        if let Some(key) = core.key() {
            // Ended `Cancelled` by a shutdown, as the run's future will tell its caller. A
            // cancel that raced with the last node's end cancelled nothing; see
            // `Run::result`. Rare: the records are read only then.
            let by_shutdown = core.reason() == Some(&CancelReason::Shutdown)
                && core.nodes().any(|(_, slot)| {
                    slot.record()
                        .is_some_and(|r| r.outcome == Outcome::Cancelled)
                });
            self.graph.orchestrator.run_ended(key, by_shutdown);
        }
    }
}
