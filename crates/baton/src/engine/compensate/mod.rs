//! Compensation: when a run fails by the graph's trigger, the compensations of the nodes
//! that succeeded run, downstreams before upstreams; those at one height run at once. Each runs
//! through a pipeline of its own, with its timeout and retry and no run deadline. They run
//! on a tokio task of their own, so that they run even when the run was cancelled or its
//! future dropped. The run ends, its future resolving and its observers hearing
//! `RunFinished`, once they have.

mod compensation_ctx;

use std::fmt;
use std::sync::Arc;

use futures_util::future::{BoxFuture, join_all};
use tokio::time::Instant;

pub use compensation_ctx::CompensationCtx;

use super::run::options::FailureMode;
use super::run::state::RunState;
use crate::error::{BoxError, CancelReason};
use crate::observe::Event;
use crate::onion::Pipeline;
use crate::report::{CompensationEntry, CompensationRecord, Outcome, Report, RunRecords};
use crate::util::value::Value;

/// A node's compensation, its value erased: called with the node's value.
pub(crate) type CompensateFn<I> = Arc<
    dyn Fn(CompensationCtx<I>, Value) -> BoxFuture<'static, Result<(), BoxError>> + Send + Sync,
>;

/// One node's compensation: the function and the pipeline it runs in, with its timeout and
/// retry.
pub(crate) struct Compensation<I> {
    pub(crate) node: u32,
    pub(crate) run: CompensateFn<I>,
    pub(crate) pipeline: Pipeline<()>,
    /// The longest path from the node down to a node without downstreams: compensations
    /// run by increasing height, so a node's after its downstreams'.
    pub(crate) height: u32,
}

/// The graph's compensations and their trigger.
pub(crate) struct Compensations<I> {
    pub(crate) list: Vec<Compensation<I>>,
    pub(crate) trigger: CompensationTrigger,
}

/// When a run's compensations run; see [`GraphBuilder::compensate_when`].
///
/// [`GraphBuilder::compensate_when`]: crate::GraphBuilder::compensate_when
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum CompensationTrigger {
    /// When the run is an error under its failure mode: a node failed, was skipped or was
    /// cancelled in fail-all or fail-fast, or the run was cancelled. The default. In
    /// preserve-partial, only a cancelled run is an error.
    #[default]
    RunFailed,
    /// When any of these nodes failed, was skipped or was cancelled. A router's branch that
    /// the router did not choose, `NotTaken`, has not failed.
    NodesFailed(Vec<String>),
    /// When the predicate, given the run's report, says so.
    When(Arc<dyn Fn(&Report) -> bool + Send + Sync>),
}

impl CompensationTrigger {
    /// When any of `nodes` failed, was skipped or was cancelled; a branch its router did
    /// not choose does not count.
    pub fn nodes_failed(nodes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        CompensationTrigger::NodesFailed(nodes.into_iter().map(Into::into).collect())
    }

    /// When `predicate` says so, given the run's report.
    pub fn when(predicate: impl Fn(&Report) -> bool + Send + Sync + 'static) -> Self {
        CompensationTrigger::When(Arc::new(predicate))
    }
}

impl fmt::Debug for CompensationTrigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CompensationTrigger::RunFailed => f.write_str("RunFailed"),
            CompensationTrigger::NodesFailed(nodes) => {
                f.debug_tuple("NodesFailed").field(nodes).finish()
            }
            CompensationTrigger::When(_) => f.write_str("When(..)"),
        }
    }
}

impl<I: Send + Sync + 'static> RunState<I> {
    /// Whether the ended run's compensations are due by `trigger`.
    fn compensation_due(self: &Arc<Self>, trigger: &CompensationTrigger) -> bool {
        let report = Report::new(Arc::clone(self) as Arc<dyn RunRecords>);
        match trigger {
            CompensationTrigger::RunFailed => self.is_error(&report),
            CompensationTrigger::NodesFailed(nodes) => nodes.iter().any(|name| {
                report.by_name(name).is_some_and(|n| {
                    matches!(
                        n.outcome(),
                        Outcome::Failed | Outcome::Skipped | Outcome::Cancelled
                    )
                })
            }),
            CompensationTrigger::When(predicate) => {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| predicate(&report)))
                    .unwrap_or_else(|_| {
                        tracing::error!("the compensation trigger panicked; compensating");
                        true
                    })
            }
        }
    }

    /// Whether the run's future will resolve to an error, as `Run::result` decides.
    fn is_error(&self, report: &Report) -> bool {
        let counts = report.counts();
        let mode = self.core.mode();
        match self.core.reason() {
            Some(CancelReason::FailFast { .. }) | None => {}
            Some(_) if counts.cancelled == 0 => {}
            Some(_) => return true,
        }
        mode != FailureMode::PreservePartial
            && counts.failed + counts.skipped + counts.cancelled > 0
    }

    /// Starts the run's compensations if they are due, on a task of their own, which then
    /// ends the run with `end`. `false` when nothing was started; the caller then ends the
    /// run.
    pub(super) fn start_compensation(self: &Arc<Self>, end: fn(&RunState<I>)) -> bool {
        let Some(plan) = self.graph.compensations.as_deref() else {
            return false;
        };
        if !self.compensation_due(&plan.trigger) {
            return false;
        }
        let run = Arc::clone(self);
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    let record = compensate(&run).await;
                    run.keep_compensation(record);
                    end(&run);
                });
                true
            }
            Err(_) => {
                self.keep_compensation(CompensationRecord {
                    not_run: self.due(plan).into_iter().map(|c| c.node).collect(),
                    not_compensated: self.not_compensated(plan),
                    ..CompensationRecord::default()
                });
                false
            }
        }
    }

    /// The compensations of the nodes that succeeded.
    fn due<'p>(&self, plan: &'p Compensations<I>) -> Vec<&'p Compensation<I>> {
        plan.list
            .iter()
            .filter(|c| self.succeeded(c.node))
            .collect()
    }

    fn succeeded(&self, id: u32) -> bool {
        self.core
            .slot(id)
            .and_then(|s| s.record())
            .is_some_and(|r| r.outcome == Outcome::Succeeded)
    }

    /// The nodes that succeeded and have no compensation.
    fn not_compensated(&self, plan: &Compensations<I>) -> Vec<u32> {
        (0..self.graph.meta.len() as u32)
            .filter(|&id| self.succeeded(id) && plan.list.iter().all(|c| c.node != id))
            .collect()
    }
}

/// Runs the due compensations of `run`, by increasing height, those of one height at once.
async fn compensate<I: Send + Sync + 'static>(run: &Arc<RunState<I>>) -> CompensationRecord {
    let mut record = CompensationRecord::default();
    let Some(plan) = run.graph.compensations.as_deref() else {
        return record;
    };
    record.not_compensated = run.not_compensated(plan);
    let mut due = run.due(plan);
    due.sort_by_key(|c| c.height);
    let mut at = 0;
    while at < due.len() {
        let height = due[at].height;
        let wave: Vec<_> = due[at..]
            .iter()
            .take_while(|c| c.height == height)
            .collect();
        at += wave.len();
        let ended = join_all(wave.into_iter().map(|c| compensate_one(run, c))).await;
        record.entries.extend(ended.into_iter().flatten());
    }
    record
}

/// Runs one compensation through its pipeline.
async fn compensate_one<I: Send + Sync + 'static>(
    run: &Arc<RunState<I>>,
    compensation: &Compensation<I>,
) -> Option<CompensationEntry> {
    let node = compensation.node;
    let value = run.core.value(node)?.clone();
    let started = Instant::now();
    let start = run.core.offset(started);
    let name = run.graph.meta.name(node);
    if run.observed() {
        let (id, graph) = (run.core.run_id(), run.graph_name());
        run.emit(&Event::CompensationStarted {
            run: id,
            graph,
            node: name,
        });
    }
    let call = compensation
        .pipeline
        .run(|attempt| {
            let ctx = CompensationCtx {
                run: Arc::clone(run),
                node,
                attempt: attempt.number(),
                deadline: attempt.deadline(),
            };
            (compensation.run)(ctx, Value::clone(&value))
        })
        .await;
    let end = run.core.offset(Instant::now());
    let outcome = call.outcome();
    let attempts = call.attempts();
    let attempt_log = call.attempt_log().to_vec();
    let outcome = if outcome == Outcome::Succeeded {
        Outcome::Succeeded
    } else {
        tracing::warn!(node = name, "compensation failed");
        Outcome::Failed
    };
    run.graph
        .orchestrator
        .counters()
        .local()
        .compensation(outcome);
    if run.observed() {
        let (id, graph) = (run.core.run_id(), run.graph_name());
        run.emit(&Event::CompensationFinished {
            run: id,
            graph,
            node: name,
            outcome,
            attempts,
            duration: started.elapsed(),
        });
    }
    Some(CompensationEntry {
        node,
        outcome,
        attempts,
        start,
        end,
        error: call.into_result().err(),
        attempt_log,
    })
}
