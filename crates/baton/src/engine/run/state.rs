//! [`RunState`]: one run, its graph, its input and its [`RunCore`]; how a node's end is
//! recorded, and how the run ends and is cancelled.
//!
//! # Invariants
//! 1. A node's state goes `PENDING -> RUNNING -> DONE` or `PENDING -> DONE`, through
//!    [`NodeState`] in `node_state.rs`, so exactly one party finalizes each node: the driver
//!    that ran it, or the one that skipped, passed over or cancelled it while it was pending.
//!    Finalizing, in [`record`](RunState::record), writes the record, counts the outcome,
//!    fires the node's callbacks and its `NodeFinished` event, in that order, exactly once.
//! 2. `live` counts the nodes not yet finalized plus the drivers still alive. Those drivers
//!    are tokio tasks, and those a run's future holds: its embedded one, and an inline run's
//!    joined ones in its inbox or its set, as `driver/` says. A record is written before
//!    `live` is decremented for it, and a driver decrements it as its very last action; the
//!    run ends when `live` reaches zero, so when the run future resolves every record is
//!    readable, every callback has fired, and no driver of the run will run a node again.
//!    One may still be returning from its last poll.
//! 3. A node starts only when its join counter reaches zero *and* it is still `PENDING`.
//!    An upstream that ends without a value passes its downstreams over, setting their state
//!    to `DONE`, *before* decrementing their counters, so whoever brings a counter to zero
//!    sees the skip.
//! 4. After the run is cancelled, no node starts its task: pending nodes are swept to
//!    `Cancelled`, and drivers check the flag before and while polling a node.
//! 5. A `RUNNING` node is, until it ends, in exactly one place: run by a driver, on one
//!    driver's own stack, or in the ready queue of `ready/mod.rs`, which some driver counted
//!    active will look at before it ends. Drivers keep nodes on their own stack on one-worker
//!    runtimes, and in inline runs while their future drives them. A driver whose node waits
//!    hands its stack to the queue; a driver dropped because its runtime shut down ends what
//!    it holds and what is queued `Cancelled`.
//!
//! [`NodeState`]: super::node_state::NodeState

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::task::Waker;
use std::time::Duration;

use tokio::time::Instant;

use super::core::{Leftovers, PREFETCH_MIN_NODES, RunCore};
use super::joined::{Inbox, Passes, Woken};
use super::nested_run::Nesting;
use super::node_state::RunBuffers;
use super::options::FailureMode;
use super::start::StartMode;
use crate::engine::driver::Driver;
use crate::engine::graph::GraphInner;
use crate::engine::task::attempt_box::{KeptAttempts, KeptBoxes};
use crate::error::{CancelReason, NodeError, UserCode};
use crate::id::{IdempotencyKey, RunId};
use crate::observe::Event;
use crate::onion::ResolvedPolicies;
use crate::onion::reload;
use crate::orchestrator::{InFlight, deliver};
use crate::policy::deadline::TimerHook;
use crate::report::{CompensationRecord, Detail, NodeReport, Outcome, Record, RunRecords, Settled};
use crate::util::value::Value;

/// What a run keeps beside its nodes' records when its graph has map nodes or
/// compensations, when it is nested in another run, or when a reload replaced policies.
#[derive(Default)]
struct Kept {
    /// What nodes kept beside their records, such as a map node's items, by node.
    details: Mutex<Vec<(u32, Arc<Detail>)>>,
    /// What its compensations did, once they ran.
    compensation: OnceLock<Arc<CompensationRecord>>,
    /// The run it is nested in, for a subgraph node's inner run that has observers to
    /// tell.
    nesting: OnceLock<Nesting>,
    /// The policy records that replaced the graph's after a reload changed a policy set
    /// they name, as they were when the run started. With `None`, the graph's stand.
    reloaded: Option<Arc<[Arc<ResolvedPolicies>]>>,
}

/// A run: the graph, the input, and the per-run core.
pub(crate) struct RunState<I> {
    pub(in crate::engine) graph: Arc<GraphInner<I>>,
    pub(in crate::engine) input: I,
    pub(in crate::engine) core: RunCore,
    /// What only runs of map nodes or compensations keep, made on first use, so that
    /// other runs pay one pointer for it.
    kept: OnceLock<Box<Kept>>,
    /// Drivers spawned by an inline run that has not spread, as [`RunCore::is_local`] tells,
    /// for its future to poll next. `Run::poll` moves them to the set it polls. Pushed and
    /// taken only by code that future polls; emptied when it is dropped.
    pub(in crate::engine) inbox: Inbox<Driver<I>>,
    /// What a driver of this run does when dropped, `Driver::on_drop`, reached from
    /// `Drop`, which cannot name the bounds the run's input has.
    pub(in crate::engine) drop_driver: fn(&mut Driver<I>),
    /// The run's state itself, for what needs an `Arc` of it where only `&self` is at hand:
    /// its compensations, and the report its observers are given. A run with neither, no
    /// observer and no outer run to forward its events to, keeps `Weak::new()`, which
    /// upgrades to nothing; see [`RunState::new`].
    pub(super) me: Weak<RunState<I>>,
}

impl<I> RunState<I> {
    /// Node `id`'s policies in this run, if it has any: the graph's, or those a reload put
    /// in their place before the run began. A map node's policies apply to its items, so it
    /// has none here.
    #[inline]
    pub(in crate::engine) fn policy(&self, id: u32) -> Option<&ResolvedPolicies> {
        let policy = self.graph.policy(id)?;
        Some(self.reloaded(policy))
    }

    /// `policy`, or the record a reload put in its place before the run began.
    #[inline(always)]
    fn reloaded<'a>(&'a self, policy: &'a ResolvedPolicies) -> &'a ResolvedPolicies {
        if policy.reload_slot.is_none() {
            return policy;
        }
        let reloaded = self.kept.get().and_then(|k| k.reloaded.as_deref());
        reload::current(policy, reloaded)
    }

    /// The policies of map node `id`'s items in this run, if it has any, found as
    /// [`policy`](Self::policy) finds a node's.
    pub(in crate::engine) fn item_policy(&self, id: u32) -> Option<&ResolvedPolicies> {
        let policy = self.graph.item_policy(id)?;
        Some(self.reloaded(policy))
    }

    /// Node `id`'s policies in this run if it is a task node, as
    /// [`GraphInner::task_policy`] tells them, found as [`policy`](Self::policy) finds them.
    #[inline]
    pub(in crate::engine) fn task_policy(&self, id: u32) -> Option<Option<&ResolvedPolicies>> {
        let found = self.graph.task_policy(id);
        if let Some(Some(policy)) = found {
            return Some(Some(self.reloaded(policy)));
        }
        found
    }
}

/// The boxes the graph keeps in the stripe of spare run arrays this run takes its own
/// from, and gives them back to.
impl<I: Send + Sync> KeptBoxes for RunState<I> {
    #[inline]
    fn kept_attempts(&self) -> Option<&KeptAttempts> {
        self.graph.spare.attempts(self.core.home())
    }
}

impl<I: Send + Sync + 'static> RunState<I> {
    /// A run of `graph` on `input`, not started. `forwarded`: its events go to an outer
    /// run, as a subgraph node's inner run's may, and its state keeps `me`.
    // Not inlined: in `Run::new`, the state is built on the stack and copied to its
    // allocation.
    #[inline(never)]
    pub(in crate::engine) fn new(
        graph: Arc<GraphInner<I>>,
        input: I,
        (mode, start): (FailureMode, StartMode),
        timeout: Option<Duration>,
        fixed_deadline: Option<Instant>,
        key: Option<Arc<str>>,
        forwarded: bool,
    ) -> Arc<Self> {
        let meta = &graph.meta;
        let n = meta.len();
        let in_degree = |i| meta.in_degree(i);
        let home = graph.spare.home();
        let spare = graph.spare.take(home).filter(|b| b.nodes.len() == n);
        let buffers = match spare {
            Some(mut buffers) => {
                buffers.reset(in_degree);
                buffers
            }
            None => RunBuffers::new(n, in_degree),
        };
        let prefetch = n >= PREFETCH_MIN_NODES && meta.scattered;
        let inline = start == StartMode::Inline;
        let kept = OnceLock::new();
        if let Some(reload) = &graph.reload {
            let reloaded = reload.current(&graph.orchestrator);
            if reloaded.is_some() {
                let _ = kept.set(Box::new(Kept {
                    reloaded,
                    ..Kept::default()
                }));
            }
        }
        let keeps_me = forwarded
            || graph.compensations.is_some()
            || !graph.orchestrator.observers().is_empty();
        // One expression: the core built apart would be copied into the state.
        let state = |me| RunState {
            graph,
            input,
            core: RunCore::new(
                buffers,
                (mode, inline, prefetch),
                home,
                (timeout, fixed_deadline),
                key,
            ),
            kept,
            inbox: Inbox::new(),
            drop_driver: Driver::on_drop,
            me,
        };
        // `Weak::new` points nowhere: making and dropping it touch no reference count.
        if keeps_me {
            Arc::new_cyclic(|me| state(me.clone()))
        } else {
            Arc::new(state(Weak::new()))
        }
    }

    /// Keeps `detail` for node `id`'s report entry.
    pub(in crate::engine) fn put_detail(&self, id: u32, detail: Detail) {
        let kept = self.kept.get_or_init(Box::default);
        let mut details = kept.details.lock().unwrap_or_else(PoisonError::into_inner);
        details.push((id, Arc::new(detail)));
    }

    /// Whether the run makes timers: its graph's policies do, or it has a deadline.
    pub(in crate::engine) fn needs_timers(&self) -> bool {
        self.graph.uses_timers || self.core.has_deadline()
    }

    /// Sends `event` to the orchestrator's observers, and, for a nested run, to those of
    /// the runs it is nested in. Check [`observed`](Self::observed) first when building
    /// the event costs anything.
    pub(in crate::engine) fn emit(&self, event: &Event<'_>) {
        match self.nesting() {
            None => deliver(self.graph.orchestrator.observers(), event),
            Some(nesting) => {
                if nesting.delivers_own {
                    deliver(self.graph.orchestrator.observers(), event);
                }
                nesting.parent.forward(event);
            }
        }
    }

    /// The run this one is nested in, if it is a subgraph node's inner run with observers
    /// to tell.
    pub(in crate::engine) fn nesting(&self) -> Option<&Nesting> {
        self.kept.get()?.nesting.get()
    }

    /// Makes this run nested in another, before it starts.
    pub(in crate::engine) fn set_nesting(&self, nesting: Nesting) {
        debug_assert!(
            self.me.strong_count() > 0,
            "a forwarded run keeps a reference to itself"
        );
        let kept = self.kept.get_or_init(Box::default);
        let _ = kept.nesting.set(nesting);
    }

    /// The graph's name, as events carry it.
    #[inline]
    pub(in crate::engine) fn graph_name(&self) -> Option<&str> {
        self.graph.name.as_deref()
    }

    /// Whether the orchestrator has observers, or the run is nested in one that has.
    #[inline]
    pub(in crate::engine) fn observed(&self) -> bool {
        !self.graph.orchestrator.observers().is_empty() || self.nesting().is_some()
    }

    /// Counts node `id` as started in the orchestrator's `nodes_in_flight` gauge, once
    /// until [`record`](Self::record) uncounts it. Called only by whoever runs the node.
    #[inline]
    pub(in crate::engine) fn count_started(&self, id: u32) {
        if self.core.slot(id).is_some_and(|slot| slot.mark_counted()) {
            let counters = self.graph.orchestrator.counters();
            counters.local().nodes_in_flight().incr();
        }
    }

    /// Keeps what the run's compensations did, for its report.
    pub(in crate::engine) fn keep_compensation(&self, record: CompensationRecord) {
        let kept = self.kept.get_or_init(Box::default);
        let _ = kept.compensation.set(Arc::new(record));
    }

    /// What the run's compensations did, if they ran.
    pub(in crate::engine) fn compensation_record(&self) -> Option<&CompensationRecord> {
        self.kept.get()?.compensation.get().map(|c| &**c)
    }

    /// Records how node `id` ended and fires what follows from it: outcome count, callbacks,
    /// `NodeFinished`. The caller owns the node: it moved it to `RUNNING`, and with
    /// `was_running` this moves it to `DONE`; or it moved it from `PENDING` to `DONE`. Does
    /// not release `live`.
    pub(in crate::engine) fn record(&self, id: u32, record: Record, was_running: bool) {
        let core = &self.core;
        let (Some(node), Some(slot)) = (core.node(id), core.slot(id)) else {
            debug_assert!(false, "node {id} out of range");
            return;
        };
        let outcome = record.outcome;
        let (settled, value) = record.settle();
        // SAFETY: invariant 1: the caller finalizes node `id`, so it is the one writer of
        // the node's value and record, and writes each once.
        #[allow(unsafe_code)]
        unsafe {
            if let (Some(value), Some(cell)) = (value, core.value_cell(id)) {
                let written = cell.set_alone(value);
                debug_assert!(written, "a node's value is written once");
            }
            slot.set_record(settled);
        }
        if was_running {
            node.finish();
        }
        self.attempt_ended(id, u32::MAX);
        let counters = self.graph.orchestrator.counters().local();
        // A node that did not run, recorded by a cancel's sweep before its run was marked
        // admitted, counts only if the run turns out admitted: `report_end` counts it then.
        // A run cancelled before the orchestrator saw it submitted nothing.
        if was_running || core.admission().counts_outcomes() {
            counters.outcome(outcome);
        } else {
            slot.mark_uncounted();
            core.note_uncounted();
        }
        if slot.is_counted() {
            counters.nodes_in_flight().decr();
        }
        let callbacks = self.graph.callbacks(id);
        let observed = self.observed();
        if callbacks.is_none() && !observed {
            return;
        }
        let Some(rec) = slot.record() else {
            unreachable!("the record was written above")
        };
        let view = NodeReport::new(self, id, rec);
        if let Some(callbacks) = callbacks {
            callbacks.fire(&view, core.value(id).map(Value::as_any));
        }
        if observed {
            self.emit(&Event::NodeFinished {
                run: core.run_id(),
                graph: self.graph_name(),
                node: view.name(),
                outcome,
                duration: view.duration(),
            });
        }
    }

    /// Cancels the run: no node starts its task from now on; pending nodes end `Cancelled`
    /// at once, running ones as soon as their driver, woken here, is polled. The first
    /// reason wins. Cancelling a run that has ended does nothing.
    pub(in crate::engine) fn cancel(&self, reason: CancelReason) {
        let core = &self.core;
        if !core.begin_cancel(reason) {
            return;
        }
        let now = core.now();
        let mut swept = 0;
        for (id, (node, slot)) in core.nodes().enumerate() {
            if self.pass_over(id as u32, Record::empty(Outcome::Cancelled, now)) {
                swept += 1;
            } else if node.is_running() {
                slot.wake();
            }
        }
        core.wake_joined();
        self.release(swept);
    }

    /// Finalizes a node whose driver disappeared without ending it: it ends `Cancelled`,
    /// and so does the rest of the run, which cannot go on without it, for `reason`. Either
    /// the run's future was dropped with the driver it polled, or the runtime dropped the
    /// driver's task as it shut down.
    pub(in crate::engine) fn abandon(&self, id: u32, reason: &CancelReason) {
        if self.core.node(id).is_some_and(|n| n.is_running()) {
            self.cancel(reason.clone());
            let record = Record::empty(Outcome::Cancelled, self.core.now());
            self.record(id, record, true);
            self.release(1);
        }
    }

    /// Ends router branch `id` `Cancelled` and releases it, if it is still running: its
    /// router's future was dropped while running it. Does nothing once the branch ended.
    pub(in crate::engine) fn abandon_branch(&self, id: u32) {
        if self.core.node(id).is_some_and(|n| n.is_running()) {
            let record = Record::empty(Outcome::Cancelled, self.core.now());
            self.record(id, record, true);
            self.release(1);
        }
    }
}

/// Runs `f`, user code of kind `code`, catching a panic.
pub(in crate::engine) fn catch_panic<R>(
    code: UserCode,
    f: impl FnOnce() -> R,
) -> Result<R, NodeError> {
    std::panic::catch_unwind(AssertUnwindSafe(f))
        .map_err(|p| NodeError::from_panic(code, p.as_ref()))
}

impl<I: Send + Sync + 'static> InFlight for RunState<I> {
    fn cancel(&self, reason: CancelReason) {
        RunState::cancel(self, reason);
    }
}

impl<I: Send + Sync + 'static> RunRecords for RunState<I> {
    fn run_id(&self) -> RunId {
        self.core.run_id()
    }

    fn graph_id(&self) -> u64 {
        self.graph.meta.id
    }

    fn len(&self) -> usize {
        self.graph.meta.len()
    }

    fn name(&self, id: u32) -> &str {
        self.graph.meta.name(id)
    }

    fn find(&self, name: &str) -> Option<u32> {
        self.graph.meta.names.find(name)
    }

    fn record(&self, id: u32) -> Option<&Settled> {
        self.core.slot(id)?.record()
    }

    fn value(&self, id: u32) -> Option<&Value> {
        self.core.value(id)
    }

    fn attempts(&self, id: u32) -> u32 {
        self.core.slot(id).map_or(0, |s| s.attempts())
    }

    fn abandoned(&self, id: u32) -> u32 {
        self.core.slot(id).map_or(0, |s| s.abandoned())
    }

    fn offset(&self, at: Instant) -> Duration {
        self.core.offset(at)
    }

    fn cancel_reason(&self) -> Option<&CancelReason> {
        self.core.reason()
    }

    fn compensation(&self) -> Option<Arc<CompensationRecord>> {
        self.kept.get()?.compensation.get().cloned()
    }

    fn detail(&self, id: u32) -> Option<Arc<Detail>> {
        let kept = self.kept.get()?;
        let details = kept.details.lock().unwrap_or_else(PoisonError::into_inner);
        let (_, detail) = details.iter().rev().find(|(node, _)| *node == id)?;
        Some(Arc::clone(detail))
    }
}

impl<I> RunState<I> {
    /// Node `id`'s idempotency key in this run: what its task's attempts, its map items
    /// with their index, and its compensation send downstream.
    pub(in crate::engine) fn key_of(&self, id: u32) -> IdempotencyKey {
        let caller = self.core.caller_key().cloned();
        IdempotencyKey::new(self.core.run_id(), caller, id)
    }
}

impl<I> Drop for RunState<I> {
    /// Hands the run's per-run arrays, cleared, to the graph's next run, its timer floor,
    /// running or as an empty box (`Spares::keep_standing`), and its joined drivers'
    /// waker, emptied, to later runs.
    fn drop(&mut self) {
        if self.core.len() == 0 {
            return;
        }
        let Leftovers { floor, woken } = self.core.leftovers();
        let (mut buffers, home) = self.core.take_buffers();
        buffers.clear();
        self.graph.spare.put(home, buffers);
        if let Some(floor) = floor {
            let runtime = self.core.standing_runtime();
            self.graph.spare.keep_standing(home, runtime, floor);
        }
        if let Some(woken) = woken {
            self.graph.spare.keep_waker(home, woken);
        }
    }
}

impl<I: Send + Sync + 'static> RunState<I> {
    /// [`RunCore::floor_timers`], the floor granted by the graph's orchestrator: the running
    /// timer an earlier run left on this run's runtime (`Spares::keep_standing`), if the
    /// graph keeps one, or made in a timer's box the graph kept, if any.
    pub(in crate::engine) fn floor_timers(&self, until: Instant, time: impl FnOnce() -> Duration) {
        let (spare, home) = (&self.graph.spare, self.core.home());
        let granted = || self.graph.orchestrator.take_timer_floor();
        let kept = || {
            let runtime = self.core.standing_runtime();
            let standing = runtime.and_then(|runtime| spare.take_standing(home, runtime));
            standing.or_else(|| spare.take_timer(home))
        };
        self.core.floor_timers(until, time, granted, kept);
    }
}

impl<I: Send + Sync + 'static> Passes for RunState<I> {
    #[inline]
    fn again(&self) -> bool {
        self.core.again()
    }

    #[inline]
    fn over(&self) {
        self.core.over();
    }

    /// Made of a waker the graph kept, if any.
    fn woken(&self, task: &Waker) -> Arc<Woken> {
        let home = self.core.home();
        self.core
            .make_woken(task, || self.graph.spare.take_waker(home))
    }

    #[inline]
    fn cancelled(&self) -> bool {
        self.core.is_cancelled()
    }
}

impl<I: Send + Sync + 'static> TimerHook for RunState<I> {
    fn timer_made(&self, until: Instant) {
        // The policy path's attempt started no later than its timer is made.
        self.floor_timers(until, || until.saturating_duration_since(Instant::now()));
    }
}

#[cfg(test)]
mod state_tests;
