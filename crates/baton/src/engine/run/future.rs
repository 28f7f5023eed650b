//! The [`Run`] future and its canceller.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use sync_wrapper::SyncWrapper;
use tokio_util::sync::CancellationToken;

use super::joined::Joined;
use super::options::{FailureMode, RunOptions};
use super::state::RunState;
use crate::engine::driver;
use crate::engine::graph::GraphInner;
use crate::error::CancelReason;
use crate::id::RunId;
use crate::orchestrator::InFlight;
use crate::report::{Outcome, Report, RunRecords};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle,
    Running,
    Done,
    /// The orchestrator was shutting down.
    Refused,
    /// The run needs timers, and its runtime has none.
    NoTimers,
}

/// One run of a graph: a future that resolves to the run's [`Report`].
///
/// Nothing starts until it is first polled; it must be polled inside a tokio runtime of any
/// flavour, on which its nodes run. Dropping it before it is ready cancels every node
/// of the run: a node that has not started never starts, a running one is dropped at its
/// next `.await`. [`Run::canceller`] gives a handle that cancels it from elsewhere.
///
/// By default, with [`StartMode::Inline`](crate::run::StartMode::Inline), the run's nodes run
/// inside this future, in the task that awaits it, so the first poll may already call tasks.
/// They are polled as `tokio::join!` would poll them: a node that waits stays here, polled
/// again when it is woken, and the run spawns no task unless it spreads. It spreads on
/// several workers, when one poll would start more nodes than its budget: see
/// `StartMode::Inline`. Starting a run spends a unit of the awaiting task's coop budget,
/// tokio's `coop`, as one operation on a tokio resource does: a run that finds none left
/// yields before it starts. That unit pays for the first eight nodes the run starts in
/// that poll; after them, and in its later polls, each eight nodes started spend one more,
/// the first of them before it starts, as do the polls of nodes woken during the run's
/// poll (see `StartMode::Inline`). A node that runs in a task of the run's own spends a unit of
/// that task's budget. A node sees the awaiting task's task-locals and
/// current `LocalSet`; it should not rely on either. A run that spreads, with
/// [`StartMode::Spread`](crate::run::StartMode::Spread), on a runtime with more workers
/// runs every node in tasks of its own instead, so a node that computes never holds up the
/// awaiting task, its timeout or the futures it joins. Where one thread runs every task, a
/// spread run starts its first nodes here, and a node that waits moves to a task of its own,
/// so that run goes on while this future is not polled. baton assumes one thread runs every
/// task on a current-thread runtime, and on a one-worker runtime awaited from one of its
/// tasks. Tokio does not say which thread is its worker: a spread run awaited on such a
/// runtime from a `LocalSet`, from a blocking thread of `spawn_blocking` or
/// `Handle::block_on`, or from another thread's `Handle::block_on` starts its nodes in the
/// awaiting task too, and one that computes holds that thread as it would in a
/// `tokio::join!`.
///
/// # Output
/// - `Ok(report)`: every node ended, and the failure mode accepts the outcomes.
/// - [`RunError::Failed`], under fail-all or fail-fast, or [`RunError::Cancelled`], both
///   carrying the report; [`RunError::NoRuntime`] when polled outside tokio;
///   [`RunError::NoTimers`] when its policies need timers and its runtime has none, and
///   then nothing runs.
///
/// Polling it again after it is ready returns the same result again.
#[must_use = "a run does nothing until it is awaited"]
pub struct Run<I: Send + Sync + 'static> {
    phase: Phase,
    /// Its span has no parent; see [`RunOptions::detached_span`].
    detached_span: bool,
    /// The driver that runs the first nodes inside this future, if `start` gave one.
    /// It is in a `SyncWrapper`, reached only through `&mut self`, so `Run` stays `Sync`
    /// although the driver's boxed futures are only `Send`.
    embedded: Option<SyncWrapper<driver::Driver<I>>>,
    /// The drivers an inline run spawned while local, for nodes that wait and those that run
    /// after them, polled here through `joined.rs`.
    joined: SyncWrapper<Joined<driver::Driver<I>>>,
    /// The waker last registered for the run's end: a poll with the same one registers
    /// nothing, as the run's end wakes it once.
    registered: Option<Waker>,
    /// The task this future was last found polled in on the run's own runtime, if any.
    home: Option<tokio::task::Id>,
    /// Declared last, so dropped last: the drivers and the run's waker go first, while
    /// this reference keeps the state alive, and a state dropped with this future then
    /// finds the waker held by no one and leaves it to later runs.
    pub(in crate::engine) state: Arc<RunState<I>>,
}

impl<I: Send + Sync + 'static> fmt::Debug for Run<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Run")
            .field("id", &self.state.core.run_id())
            .field("phase", &self.phase)
            .finish_non_exhaustive()
    }
}

impl<I: Send + Sync + 'static> Run<I> {
    /// A run of `graph` on `input`, not started. `forwarded`: it is a subgraph node's inner
    /// run whose events its outer run forwards.
    pub(crate) fn new(
        graph: Arc<GraphInner<I>>,
        input: I,
        options: RunOptions,
        forwarded: bool,
    ) -> Self {
        let mode = options.mode.unwrap_or(graph.mode);
        let start = options.start.unwrap_or(graph.start);
        Run {
            state: RunState::new(
                graph,
                input,
                (mode, start),
                options.timeout,
                options.deadline,
                options.key,
                forwarded,
            ),
            phase: Phase::Idle,
            detached_span: options.detached,
            embedded: None,
            joined: SyncWrapper::new(Joined::new()),
            registered: None,
            home: None,
        }
    }

    /// The run's id, also part of every node's idempotency key.
    #[must_use]
    pub fn id(&self) -> RunId {
        self.state.core.run_id()
    }

    /// A handle that cancels this run from anywhere, also before it starts.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{BoxError, Graph, Outcome, RunError, run::CancelReason};
    /// use tokio::time::sleep;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// let slow = g.node("slow").task(|_ctx, ()| async {
    ///     sleep(Duration::from_secs(1)).await;
    ///     Ok::<_, BoxError>(())
    /// });
    /// let run = g.build()?.run(());
    /// let canceller = run.canceller();
    /// tokio::spawn(async move {
    ///     sleep(Duration::from_millis(10)).await; // e.g. the client went away
    ///     canceller.cancel();
    /// });
    /// let Err(RunError::Cancelled { reason, report }) = run.await else {
    ///     panic!("the run should be cancelled");
    /// };
    /// assert_eq!(reason, CancelReason::Requested);
    /// assert_eq!(report.node(slow).map(|n| n.outcome()), Some(Outcome::Cancelled));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn canceller(&self) -> RunCanceller {
        let run = Arc::downgrade(&self.state) as Weak<dyn InFlight>;
        RunCanceller {
            run,
            id: self.state.core.run_id(),
            cancelled: self.state.core.run_token().clone(),
        }
    }

    fn result(&self) -> Result<Report, RunError> {
        let core = &self.state.core;
        let report = Report::new(Arc::clone(&self.state) as Arc<dyn RunRecords>);
        if let Some(compensation) = self.state.compensation_record() {
            return Err(RunError::compensated(compensation, report));
        }
        if core.mode() == FailureMode::PreservePartial && core.reason().is_none() {
            return Ok(report);
        }
        let counts = report.counts();
        match core.reason() {
            Some(CancelReason::FailFast { .. }) | None => {}
            // A cancel that raced with the last node's end cancelled nothing.
            Some(_) if counts.cancelled == 0 => {}
            Some(reason) => {
                return Err(RunError::Cancelled {
                    reason: reason.clone(),
                    report: Box::new(report),
                });
            }
        }
        if core.mode() == FailureMode::PreservePartial {
            return Ok(report);
        }
        if counts.failed + counts.skipped + counts.cancelled == 0 {
            return Ok(report);
        }
        let node = report
            .nodes()
            .filter(|n| n.outcome() == Outcome::Failed)
            .min_by_key(|n| n.end())
            .map(|n| n.name().to_owned())
            .unwrap_or_default();
        Err(RunError::Failed {
            node,
            failed: counts.failed,
            skipped: counts.skipped,
            cancelled: counts.cancelled,
            report: Box::new(report),
        })
    }
}

impl<I: Send + Sync + 'static> Future for Run<I> {
    type Output = Result<Report, RunError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let starts = self.phase == Phase::Idle;
        match self.phase {
            Phase::Refused => return Poll::Ready(Err(RunError::ShuttingDown)),
            Phase::NoTimers => return Poll::Ready(Err(RunError::NoTimers)),
            Phase::Idle => {
                let Ok(handle) = tokio::runtime::Handle::try_current() else {
                    return Poll::Ready(Err(RunError::NoRuntime));
                };
                if self.state.needs_timers() && !timers_on(&handle) {
                    self.phase = Phase::NoTimers;
                    return Poll::Ready(Err(RunError::NoTimers));
                }
                // Starting a run spends a unit of the task's coop budget; with none left the
                // task yields first. Its first nodes run here; see `RunState::start`.
                match tokio::task::coop::poll_proceed(cx) {
                    Poll::Ready(coop) => coop.made_progress(),
                    Poll::Pending => return Poll::Pending,
                }
                // A run cancelled before it started is over already: nothing to admit.
                if self.state.core.reason().is_none() {
                    let state = &self.state;
                    let view: Weak<dyn InFlight> = Arc::downgrade(state) as Weak<dyn InFlight>;
                    let admitted = state.graph.orchestrator.admit(
                        view,
                        state.core.run_id().seq(),
                        state.graph.meta.len(),
                    );
                    let Some(key) = admitted else {
                        self.phase = Phase::Refused;
                        return Poll::Ready(Err(RunError::ShuttingDown));
                    };
                    // Read when the run ends, by `report_end`, after `start` marked it
                    // admitted: that compare-and-swap publishes it.
                    // SAFETY: the phase leaves `Idle` below, in this call through
                    // `&mut Run`: this is the one call of `keep` for this run.
                    #[allow(unsafe_code)]
                    unsafe {
                        state.core.keep(key);
                    }
                    // `start` also marks the run admitted, before its first driver.
                    let detached = self.detached_span;
                    // SAFETY: the phase leaves `Idle` below, in this call through
                    // `&mut Run`: this is the one call of `start` for this run.
                    #[allow(unsafe_code)]
                    let started = unsafe { self.state.start(handle, detached) };
                    self.embedded = started.map(SyncWrapper::new);
                    // It started on the runtime of the task polling it, if a task is.
                    self.home = tokio::task::try_id();
                }
                self.phase = Phase::Running;
            }
            Phase::Running | Phase::Done => {}
        }
        // The drivers polled here start at most `INLINE_MAX` nodes in this poll's first pass.
        self.state.core.passes().poll_begins(starts);
        // The first nodes run here while they end at once; the driver then ends, since it
        // never waits: see `RunState::start`. The rest of an inline run spreads over the
        // workers.
        if let Some(driver) = self.embedded.as_mut() {
            if Pin::new(driver.get_mut()).poll(cx).is_ready() {
                self.embedded = None;
                // A spread run's future stops driving it: the rest spreads. An inline run
                // stays local, its drivers polled below, until the spread rule of `driver/`
                // says otherwise.
                if !self.state.core.is_local() {
                    self.state.core.spread();
                }
            }
        }
        if !self.joined.get_mut().is_empty() && !self.on_its_runtime() {
            self.send_home();
        }
        let this = &mut *self;
        this.joined
            .get_mut()
            .poll(&this.state.inbox, cx, &*this.state);
        // A run that ended in this poll registers no waker.
        if !self.state.core.is_ended() {
            let waker = cx.waker();
            if !self.registered.as_ref().is_some_and(|w| w.will_wake(waker)) {
                self.state.core.wait_end(waker);
                self.registered = Some(waker.clone());
            }
            if !self.state.core.is_ended() {
                return Poll::Pending;
            }
        }
        self.phase = Phase::Done;
        Poll::Ready(self.result())
    }
}

impl<I: Send + Sync + 'static> Run<I> {
    /// Whether this poll runs on the runtime the run started on: in the task where it last
    /// found so, or else on a runtime of the same id. Task ids are unique in the process,
    /// and a task stays on its runtime.
    fn on_its_runtime(&mut self) -> bool {
        let task = tokio::task::try_id();
        if task.is_some() && task == self.home {
            return true;
        }
        let own = self.state.core.handle().map(tokio::runtime::Handle::id);
        let home = tokio::runtime::Handle::try_current().is_ok_and(|now| Some(now.id()) == own);
        if home {
            self.home = task;
        }
        home
    }

    /// Polled away from the runtime it started on, the run spreads: the drivers polled here
    /// become tasks of that runtime, which end their nodes `Cancelled` for `RuntimeShutdown`
    /// if it shut down. That runtime may be gone, and its timers with it.
    fn send_home(&mut self) {
        self.state.core.spread();
        for mut driver in self.joined.get_mut().take_all() {
            driver.unjoin();
            self.state.spawn_task(driver);
        }
    }
}

impl<I: Send + Sync + 'static> Drop for Run<I> {
    fn drop(&mut self) {
        if self.phase == Phase::Running {
            self.state.cancel(CancelReason::Dropped);
        }
        // Its joined drivers' timer goes to the graph for a later run's: running, on a
        // multi-thread runtime, else as an empty box.
        let shared = self.joined.get_mut().shared_mut();
        if shared.is_made() {
            let timer = shared.take_timer();
            let core = &self.state.core;
            let spare = &self.state.graph.spare;
            spare.keep_standing(core.home(), core.standing_runtime(), timer);
        }
        // Drivers not yet moved to the set hold the run's state: they end here, with the
        // run cancelled, not with it, or the state would keep itself alive.
        drop(self.state.inbox.take());
        // The places of its set, for a later run's, with the run's waker.
        self.joined.get_mut().leave_places();
    }
}

/// Whether `handle`'s runtime has timers, checked once per runtime and thread: tokio says
/// so only by panicking when a timer is made without them. The panic is caught, and the
/// default panic hook prints it once.
fn timers_on(handle: &tokio::runtime::Handle) -> bool {
    use std::cell::Cell;
    thread_local! {
        static LAST: Cell<Option<(tokio::runtime::Id, bool)>> = const { Cell::new(None) };
    }
    let id = handle.id();
    if let Ok(Some((seen, on))) = LAST.try_with(Cell::get) {
        if seen == id {
            return on;
        }
    }
    let on = std::panic::catch_unwind(|| drop(tokio::time::sleep(Duration::ZERO))).is_ok();
    let _ = LAST.try_with(|last| last.set(Some((id, on))));
    on
}

/// Cancels one run; get it from [`Run::canceller`]. Cloneable, `Send + Sync`.
///
/// It does not keep the run alive: a canceller kept anywhere, in a task of the run's own
/// graph included, holds neither the run's values nor its records, and once the run's
/// future and reports are dropped, cancelling does nothing.
#[derive(Clone)]
pub struct RunCanceller {
    run: Weak<dyn InFlight>,
    id: RunId,
    /// The run's token, cancelled when the run is.
    cancelled: CancellationToken,
}

impl fmt::Debug for RunCanceller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunCanceller")
            .field("run", &self.id)
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

impl RunCanceller {
    /// Cancels the run: pending nodes end `Cancelled` at once; running nodes are dropped at
    /// their next `.await` and end `Cancelled`. The run then resolves to
    /// [`RunError::Cancelled`]. Cancelling a finished run, or twice, does nothing.
    pub fn cancel(&self) {
        if let Some(run) = self.run.upgrade() {
            run.cancel(CancelReason::Requested);
        }
    }

    /// Whether the run has been cancelled: by this handle, a drop, fail-fast, the
    /// orchestrator, or its runtime shutting down.
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.is_cancelled()
    }

    /// The run's id.
    #[must_use]
    pub fn run_id(&self) -> RunId {
        self.id
    }
}

/// A run that did not end cleanly, or could not start.
///
/// Every variant that ran carries the full [`Report`]: nothing a run produced is lost
/// because the run is an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// [`FailureMode::FailAll`](crate::FailureMode::FailAll) or
    /// [`FailureMode::FailFast`](crate::FailureMode::FailFast): at least one node did not
    /// produce a value. `node` is the first that failed.
    #[error(
        "run failed: node `{node}` failed ({failed} failed, {skipped} skipped, {cancelled} cancelled)"
    )]
    Failed {
        /// The first node, in end-time order, that failed.
        node: String,
        /// How many nodes ended `Failed`.
        failed: usize,
        /// How many nodes ended `Skipped`.
        skipped: usize,
        /// How many nodes ended `Cancelled`.
        cancelled: usize,
        /// The run's report.
        report: Box<Report>,
    },
    /// The run was cancelled before every node ended; nodes that had not ended are
    /// `Cancelled` in the report.
    #[error("run cancelled: {reason}")]
    Cancelled {
        /// Why.
        reason: CancelReason,
        /// The run's report.
        report: Box<Report>,
    },
    /// The run was polled outside a tokio runtime, so it could not spawn its nodes.
    #[error("no tokio runtime: a baton run must be awaited inside a tokio runtime")]
    NoRuntime,
    /// The run's policies, such as timeouts, retries, budgets and bulkheads, or its own
    /// timeout need tokio's timers, and its runtime was built without them; nothing ran.
    #[error(
        "the tokio runtime has no timers, which this run's timeouts, retries or budgets need: build it with `enable_time()` (or `enable_all()`)"
    )]
    NoTimers,
    /// The orchestrator is shutting down or shut down, and accepts no new run; nothing ran.
    #[error("orchestrator is shutting down: run refused")]
    ShuttingDown,
    /// The run failed by its graph's compensation trigger, and every compensation of the
    /// nodes that succeeded succeeded; see [`Report::compensation`].
    #[error("run failed and was compensated ({compensated} compensation(s) ran)")]
    Compensated {
        /// How many compensations ran.
        compensated: usize,
        /// The run's report, with its compensation section.
        report: Box<Report>,
    },
    /// The run failed by its graph's compensation trigger, and some compensation failed
    /// or could not run: `failed` names their nodes.
    #[error("run failed and was partially compensated: compensation of {} failed", failed.join(", "))]
    PartiallyCompensated {
        /// The nodes whose compensation failed or could not run.
        failed: Vec<String>,
        /// The run's report, with its compensation section.
        report: Box<Report>,
    },
}

impl RunError {
    /// The error of a run whose compensations ran as `record` says.
    fn compensated(record: &crate::report::CompensationRecord, report: Report) -> Self {
        let report = Box::new(report);
        if record.complete() {
            return RunError::Compensated {
                compensated: record.entries.len(),
                report,
            };
        }
        let failed = record
            .entries
            .iter()
            .filter(|e| e.outcome != Outcome::Succeeded)
            .map(|e| e.node)
            .chain(record.not_run.iter().copied())
            .map(|id| report.node_name(id).to_owned())
            .collect();
        RunError::PartiallyCompensated { failed, report }
    }

    /// The run's report, when the run started.
    #[must_use]
    pub fn report(&self) -> Option<&Report> {
        match self {
            RunError::Failed { report, .. }
            | RunError::Cancelled { report, .. }
            | RunError::Compensated { report, .. }
            | RunError::PartiallyCompensated { report, .. } => Some(report),
            RunError::NoRuntime | RunError::NoTimers | RunError::ShuttingDown => None,
        }
    }

    /// Takes the run's report out of the error, when the run started.
    ///
    /// ```
    /// use baton_graph::{BoxError, FailureMode, Graph, Outcome, RunOptions};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// let stock = g.node("stock").task(|_ctx, ()| async { Err::<u32, BoxError>("503".into()) });
    /// let price = g.node("price").task(|_ctx, ()| async { Ok::<_, BoxError>(59_900_u64) });
    /// let options = RunOptions::new().failure_mode(FailureMode::FailAll);
    /// let err = g.build()?.run_with((), options).await.unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "run failed: node `stock` failed (1 failed, 0 skipped, 0 cancelled)"
    /// );
    /// let report = err.into_report().unwrap(); // what succeeded is kept
    /// assert_eq!(report.get(price), Some(&59_900));
    /// assert_eq!(report.node(stock).map(|n| n.outcome()), Some(Outcome::Failed));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn into_report(self) -> Option<Report> {
        match self {
            RunError::Failed { report, .. }
            | RunError::Cancelled { report, .. }
            | RunError::Compensated { report, .. }
            | RunError::PartiallyCompensated { report, .. } => Some(*report),
            RunError::NoRuntime | RunError::NoTimers | RunError::ShuttingDown => None,
        }
    }
}

#[cfg(test)]
mod tests {
    /// `docs/architecture.md`'s "26 words": a caller moves the run's future into its own.
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn a_run_future_is_26_words() {
        assert_eq!(
            std::mem::size_of::<super::Run<()>>(),
            26 * std::mem::size_of::<usize>()
        );
    }
}
