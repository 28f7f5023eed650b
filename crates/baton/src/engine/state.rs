//! Per-run state: per node a join counter and lifecycle state (`Hot`, a dense array), a slot
//! (attempt counts, waker, record) and a value (a dense array of its own); the run's
//! counters; and the ways a node ends: run by a driver, skipped, not taken, cancelled.
//!
//! # Invariants
//! 1. A slot's `state` goes `PENDING -> RUNNING -> DONE` or `PENDING -> DONE`, each step by
//!    one atomic operation, so exactly one party finalizes each node: the driver that ran it,
//!    or the one that skipped, passed over or cancelled it while it was pending. Finalizing
//!    (`finalize`) writes the record, counts the outcome, fires the node's callbacks and its
//!    `NodeFinished` event, in that order, exactly once.
//! 2. `live` counts the nodes not yet finalized plus the drivers still alive (tokio tasks,
//!    and the one a run's future may hold, `driver.rs`).
//!    A record is written before `live` is decremented for it, and a driver decrements it as
//!    its very last action; the run ends when `live` reaches zero, so when the run future
//!    resolves every record is readable, every callback has fired, and no task of the run is
//!    still running (blocking closures abandoned after a timeout excepted: they cannot be
//!    stopped from outside).
//! 3. A node starts only when its join counter (`pending`) reaches zero *and* it is still
//!    `PENDING`. An upstream that ends without a value marks its downstreams skipped (state
//!    to `DONE`) *before* decrementing their counters, so whoever brings a counter to zero
//!    sees the skip.
//! 4. After `cancelled` is set, no node starts its task: pending nodes are swept to
//!    `Cancelled`, and drivers check the flag before and while polling a node.
//! 5. A `RUNNING` node is, until it ends, in exactly one place: run by a driver, on one
//!    driver's own stack (one-worker runtimes, and inline runs while their future drives
//!    them), or in the ready queue (`ready.rs`), which
//!    some driver counted active will look at before it ends. A driver whose node waits
//!    hands its stack to the queue; a driver dropped (its runtime shut down) ends what it
//!    holds and what is queued `Cancelled`.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicUsize, Ordering, fence};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use tokio::runtime::Handle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::driver::Driver;
use super::graph::{GraphInner, NodeKind, neighbours};
use super::ready::ReadyQueue;
use super::run::FailureMode;
use super::start::StartMode;
use crate::error::{CancelReason, NodeError};
use crate::id::RunId;
use crate::observe::{Event, trace};
use crate::orchestrator::{InFlight, RunKey, deliver};
use crate::policy::deadline::{TimerHook, poll_timer};
use crate::report::{NodeReport, Outcome, Record, Report, RunRecords, Settled};
use crate::util::once::WriteOnce;
use crate::util::value::Value;

pub(crate) const NOT_ADMITTED: u8 = 0;
pub(crate) const ADMITTED: u8 = 1;
pub(crate) const ENDED: u8 = 2;

pub(crate) const PENDING: u8 = 0;
pub(crate) const RUNNING: u8 = 1;
pub(crate) const DONE: u8 = 2;

/// What the scheduler touches for every edge: a node's join counter and lifecycle state,
/// eight bytes, in an array of their own (a million nodes' worth fits in the cache, where
/// the records would not).
#[derive(Debug)]
pub(crate) struct Hot {
    pub(crate) pending: AtomicU32,
    pub(crate) state: AtomicU8,
}

/// The rest of one node's per-run state.
#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) attempts: AtomicU32,
    /// Counted in the orchestrator's `nodes_in_flight` gauge (it started): uncounted when it
    /// ends. A node cancelled or abandoned before it started was never counted.
    pub(crate) counted: AtomicBool,
    /// Its outcome is not in the orchestrator's counters yet: it was recorded before its run
    /// was marked admitted (see `RunState::report_end`).
    pub(crate) uncounted: AtomicBool,
    /// Blocking attempts abandoned (timed out or cancelled) while their closure still ran.
    pub(crate) abandoned: AtomicU32,
    pub(crate) waker: AtomicWaker,
    pub(crate) record: WriteOnce<Settled>,
}

impl Slot {
    /// A slot before its node runs.
    #[allow(clippy::declare_interior_mutable_const)] // (copied, never shared)
    const EMPTY: Slot = Slot {
        attempts: AtomicU32::new(0),
        counted: AtomicBool::new(false),
        uncounted: AtomicBool::new(false),
        abandoned: AtomicU32::new(0),
        waker: AtomicWaker::new(),
        record: WriteOnce::new(),
    };
}

/// The per-run arrays of one run: join counters and states, slots, values, ready-queue
/// slots.
///
/// The graph keeps those of its ended runs, cleared (no value or record survives its run),
/// for its next runs (`spare.rs`).
#[derive(Debug)]
pub(crate) struct RunBuffers {
    pub(super) hot: Box<[Hot]>,
    slots: Box<[Slot]>,
    values: Box<[WriteOnce<Value>]>,
    queue: Box<[AtomicU32]>,
}

/// Graphs of at least this many nodes prefetch what their nodes touch at scattered places
/// (about 170 bytes per node in the run's and the graph's arrays: 4 096 nodes are some
/// 700 KB, most of a core's second-level cache here). Smaller graphs stay in the caches, where
/// the hints would only add instructions.
const PREFETCH_MIN_NODES: usize = 4096;

impl RunBuffers {
    /// Fresh arrays for a graph whose node `i` has `in_degree(i)` upstreams.
    pub(super) fn new(n: usize, in_degree: impl Fn(u32) -> u32) -> Self {
        RunBuffers {
            hot: (0..n as u32)
                .map(|i| Hot {
                    pending: AtomicU32::new(in_degree(i)),
                    state: AtomicU8::new(PENDING),
                })
                .collect(),
            // From a constant, not a value built on the stack: LLVM then writes each slot
            // with a few stores instead of building it and copying it over (a
            // store-forwarding stall per slot, the most costly part of a small run's start).
            slots: (0..n).map(|_| Slot::EMPTY).collect(),
            values: (0..n).map(|_| WriteOnce::new()).collect(),
            queue: ReadyQueue::slots(n),
        }
    }

    /// Resets arrays that [`clear`](Self::clear) emptied for a new run.
    fn reset(&mut self, in_degree: impl Fn(u32) -> u32) {
        for (i, hot) in self.hot.iter_mut().enumerate() {
            *hot.pending.get_mut() = in_degree(i as u32);
            *hot.state.get_mut() = PENDING;
        }
    }

    /// Drops every record, value and waker of the run that used them, so that nothing
    /// outlives its run, and zeroes the counters.
    fn clear(&mut self) {
        for slot in self.slots.iter_mut() {
            *slot.attempts.get_mut() = 0;
            *slot.counted.get_mut() = false;
            *slot.uncounted.get_mut() = false;
            *slot.abandoned.get_mut() = 0;
            slot.waker = AtomicWaker::new();
            drop(slot.record.take());
        }
        for value in self.values.iter_mut() {
            drop(value.take());
        }
    }
}

/// Attempt tokens: created only when a task asks for one (rare), so they live beside the
/// slots, not in them. At most one per node (its current attempt's): O(1) either way.
#[derive(Debug, Default)]
pub(crate) struct Tokens {
    /// Set (never cleared) once any task of the run asked for a token.
    used: AtomicBool,
    /// node → (attempt, token) of the attempt that asked and has not ended.
    live: Mutex<rustc_hash::FxHashMap<u32, (u32, CancellationToken)>>,
}

impl Tokens {
    fn live(
        &self,
    ) -> std::sync::MutexGuard<'_, rustc_hash::FxHashMap<u32, (u32, CancellationToken)>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The token of `node`'s attempt `attempt`, created as a child of `parent` on first
    /// request. An attempt that has visibly ended (a later attempt started, or the node
    /// ended) gets a cancelled token.
    pub(crate) fn get(
        &self,
        hot: &Hot,
        slot: &Slot,
        node: u32,
        attempt: u32,
        parent: &CancellationToken,
    ) -> CancellationToken {
        self.used.store(true, Ordering::SeqCst);
        let mut live = self.live();
        if let Some((a, t)) = live.get(&node) {
            if *a == attempt {
                return t.clone();
            }
        }
        if slot.attempts.load(Ordering::SeqCst) > attempt
            || hot.state.load(Ordering::SeqCst) == DONE
        {
            let t = CancellationToken::new();
            t.cancel();
            return t;
        }
        let t = parent.child_token();
        if let Some((_, old)) = live.insert(node, (attempt, t.clone())) {
            old.cancel();
        }
        t
    }

    /// `node`'s attempts up to `attempt` ended: cancels and forgets their token. Inline: on
    /// every node's path, and nothing to do unless a task asked for a token.
    #[inline]
    pub(crate) fn end(&self, node: u32, attempt: u32) {
        if self.used.load(Ordering::SeqCst) {
            self.end_used(node, attempt);
        }
    }

    #[cold]
    fn end_used(&self, node: u32, attempt: u32) {
        let mut live = self.live();
        if live.get(&node).is_some_and(|(a, _)| *a <= attempt) {
            if let Some((_, t)) = live.remove(&node) {
                t.cancel();
            }
        }
    }
}

/// Ends an attempt's token when the attempt's future completes or is dropped.
pub(crate) struct AttemptGuard<'a> {
    pub(crate) core: &'a RunCore,
    pub(crate) node: u32,
    pub(crate) attempt: u32,
}

impl Drop for AttemptGuard<'_> {
    fn drop(&mut self) {
        self.core.tokens.end(self.node, self.attempt);
    }
}

/// What a run fixes when it starts.
#[derive(Debug)]
struct Started {
    origin: Instant,
    /// From its options: timeout and deadline.
    deadline: Option<Instant>,
    /// The runtime its drivers are spawned on.
    handle: Handle,
    /// The runtime's worker threads, whatever the start mode.
    runtime_workers: usize,
    span: tracing::Span,
}

/// What finishing a node released: a downstream for the caller to run inline, and whether
/// a driver was spawned for the others (see [`RunState::schedule`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Released {
    pub(crate) next: Option<u32>,
    pub(crate) spawned: bool,
}

/// The state of one run that does not depend on the input type.
#[derive(Debug)]
pub(crate) struct RunCore {
    pub(crate) hot: Box<[Hot]>,
    pub(crate) slots: Box<[Slot]>,
    /// The nodes' values, apart from their records: downstreams read them at random places
    /// on large graphs, and a dense array of 24-byte cells is kinder to the cache.
    pub(crate) values: Box<[WriteOnce<Value>]>,
    /// Nodes made ready that no driver has picked up yet (`ready.rs`).
    pub(crate) ready: ReadyQueue,
    /// Nodes not finalized plus drivers alive; the run ends when it reaches zero.
    pub(crate) live: AtomicUsize,
    pub(crate) done: AtomicWaker,
    pub(crate) cancelled: AtomicBool,
    pub(crate) reason: OnceLock<CancelReason>,
    /// What the run fixed when it started (one cell, set once; a `WriteOnce`, whose write
    /// is a compare-and-swap and a store, where `OnceLock::set` runs a `Once`).
    started: WriteOnce<Started>,
    pub(crate) token: OnceLock<CancellationToken>,
    pub(crate) run_id: RunId,
    pub(crate) mode: FailureMode,
    /// [`StartMode::Inline`]: the run starts in the task that awaits it (`start`), and
    /// schedules as on a one-worker runtime until that task stops driving it (`spread`).
    inline: bool,
    /// How many drivers at most drain the ready queue: the runtime's worker threads, or one
    /// while an inline run is driven by its future (`workers`). Read with `Relaxed`: the
    /// ready queue's protocol holds for any count of one or more, and a driver that reads
    /// one after it changed only shares its nodes a node later.
    drivers: AtomicUsize,
    /// The graph is large enough for its per-node arrays to outgrow the caches, and
    /// scattered (one edge between nodes that are not neighbours is enough): the scheduler
    /// prefetches what a node touches at scattered places (`prefetch.rs`).
    pub(crate) prefetch: bool,
    /// The graph's set of spare arrays this run took, or would have taken, and gives its
    /// own back to when it ends (`spare.rs`).
    home: usize,
    /// The run's standing with its orchestrator: `NOT_ADMITTED`, `ADMITTED`, or `ENDED`
    /// (see `on_end` and `mark_admitted`: whichever of "admitted" and "ended" comes second
    /// tells the orchestrator the run ended, so it is told exactly once).
    pub(crate) registered: AtomicU8,
    /// Where the orchestrator keeps the run while it is in flight: set once admitted.
    pub(crate) key: WriteOnce<RunKey>,
    /// Some node's outcome was recorded before the run was marked admitted, and is not
    /// counted yet (`RunState::report_end`).
    uncounted: AtomicBool,
    /// Set once `on_end` has told the orchestrator and the observers (`is_ended`).
    ended: AtomicBool,
    pub(crate) tokens: Tokens,
    timeout: Option<Duration>,
    fixed_deadline: Option<Instant>,
    /// A timer at the cut of the run's first policy attempt that waited, registered with
    /// tokio's and never polled again ([`floor_timers`](Self::floor_timers)).
    pub(crate) timer_floor: WriteOnce<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl RunCore {
    /// Now, on tokio's clock (paused in tests).
    pub(crate) fn now(&self) -> Instant {
        Instant::now()
    }

    /// `at` as an offset from the run's start (zero before it started).
    pub(crate) fn offset(&self, at: Instant) -> Duration {
        self.started
            .get()
            .map_or(Duration::ZERO, |s| at.saturating_duration_since(s.origin))
    }

    /// Whether the run's runtime has more than one worker thread: while one runs the run's
    /// nodes, another may be parked in tokio's drivers.
    pub(crate) fn several_workers(&self) -> bool {
        self.started.get().is_some_and(|s| s.runtime_workers > 1)
    }

    /// The run's future stopped driving its nodes (its embedded driver ended or handed
    /// off): an inline run is now scheduled as a spread one, over every worker. Nodes that
    /// become ready from here on go to the shared queue, and drivers keeping nodes for
    /// themselves share half of them at their next node's end (`Driver::end`).
    pub(crate) fn spread(&self) {
        if let Some(s) = self.started.get() {
            self.drivers.store(s.runtime_workers, Ordering::Relaxed);
        }
    }

    /// Registers, once per run, a timer at `until` (the cut of the run's first policy
    /// attempt that waits) that nobody waits for: it keeps tokio's timer from being woken for
    /// each later attempt's timer. Called where an attempt's timer is set (the fast path's
    /// `guarded::wait`, which makes a driver's timer or moves it to a new cut, and the
    /// policy path's `Deadline`), just before.
    ///
    /// Tokio's timer (the default one, in tokio 1.x) wakes the worker parked in its drivers
    /// whenever a timer is registered that is due before any the parked worker knows of:
    /// with nothing else registered, that is every driver's first timer and every timer
    /// the policy path makes (each removed when its driver or attempt ends), so each of
    /// them cost a wake-up of a second worker (with I/O enabled, a write to the driver's
    /// eventfd: `perf stat`, one `write` per waiting policy node before drivers kept their
    /// timer). With this floor registered, an attempt whose cut is not earlier
    /// (with one timeout for the graph's nodes, every later one) registers its timer without
    /// waking anyone, until the floor's own instant passes: in a run that lasts longer than
    /// its first cut, later timers wake the worker again (and a floor made at a cut already
    /// past does nothing). The floor's own registration costs one wake-up per run; it fires at
    /// its cut, waking no task, and is dropped with the run (its report), which takes the
    /// timer's lock once more. A runtime with one worker has no other thread to wake: no
    /// floor (it would cost a timer per run for nothing).
    ///
    /// # Panics
    ///
    /// On a runtime built without timers, as `tokio::time::sleep_until` does: its callers
    /// make a timer right after, which would panic the same way; the driver catches either
    /// (the fast path's wait under its own `catch_unwind`, the policy path's `Deadline` under
    /// the one around the whole boxed path) and fails the node.
    pub(crate) fn floor_timers(&self, until: Instant) {
        if self.timer_floor.get().is_some() || !self.several_workers() {
            return;
        }
        let mut timer = Box::pin(tokio::time::sleep_until(until));
        // Registered by its first poll (outside the coop budget, which the attempt may have
        // spent: a poll inside it would register nothing, and there is no second one); the
        // waker it keeps is a no-op.
        let _ = poll_timer(
            timer.as_mut(),
            &mut std::task::Context::from_waker(std::task::Waker::noop()),
        );
        // (Another driver's, set meanwhile, does as well: this one is dropped.)
        let _ = self.timer_floor.set(timer);
    }

    /// The run's deadline (from its options), once it started.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.started.get().and_then(|s| s.deadline)
    }

    #[inline]
    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// Every node is done and no driver is left.
    pub(crate) fn is_over(&self) -> bool {
        self.live.load(Ordering::Acquire) == 0
    }

    /// The run is over and told so: its `RunFinished` was emitted and the stats counted it
    /// (`RunState::on_end`). What the run's future waits for.
    pub(crate) fn is_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// The run-wide token, created on first use; cancelled when the run is.
    pub(crate) fn run_token(&self) -> &CancellationToken {
        let token = self.token.get_or_init(CancellationToken::new);
        // Pairs with the fence in `cancel`: either it sees this token, or we see its flag.
        fence(Ordering::SeqCst);
        if self.is_cancelled() {
            token.cancel();
        }
        token
    }

    pub(crate) fn slot(&self, id: u32) -> Option<&Slot> {
        self.slots.get(id as usize)
    }

    pub(crate) fn hot(&self, id: u32) -> Option<&Hot> {
        self.hot.get(id as usize)
    }

    /// Node `id`'s value, once it ended with one.
    pub(crate) fn value(&self, id: u32) -> Option<&Value> {
        self.values.get(id as usize)?.get()
    }

    pub(crate) fn span(&self) -> Option<&tracing::Span> {
        self.started.get().map(|s| &s.span)
    }
}

/// A run: the graph, the input, and the per-run core.
pub(crate) struct RunState<I> {
    pub(crate) graph: Arc<GraphInner<I>>,
    pub(crate) input: I,
    pub(crate) core: RunCore,
    me: Weak<RunState<I>>,
}

impl<I: Send + Sync + 'static> RunState<I> {
    pub(crate) fn new(
        graph: Arc<GraphInner<I>>,
        input: I,
        mode: FailureMode,
        start: StartMode,
        timeout: Option<Duration>,
        fixed_deadline: Option<Instant>,
    ) -> Arc<Self> {
        let meta = &graph.meta;
        let n = meta.len();
        let in_degree = |i| meta.in_degree(i);
        let home = graph.spare.home();
        let spare = graph.spare.take(home).filter(|b| b.hot.len() == n);
        let RunBuffers {
            hot,
            slots,
            values,
            queue,
        } = match spare {
            Some(mut buffers) => {
                buffers.reset(in_degree);
                buffers
            }
            None => RunBuffers::new(n, in_degree),
        };
        let core = RunCore {
            live: AtomicUsize::new(n),
            values,
            ready: ReadyQueue::new(queue),
            hot,
            slots,
            done: AtomicWaker::new(),
            cancelled: AtomicBool::new(false),
            reason: OnceLock::new(),
            started: WriteOnce::new(),
            token: OnceLock::new(),
            run_id: RunId::next(),
            mode,
            inline: start == StartMode::Inline,
            drivers: AtomicUsize::new(1),
            prefetch: n >= PREFETCH_MIN_NODES && meta.scattered,
            home,
            registered: AtomicU8::new(NOT_ADMITTED),
            key: WriteOnce::new(),
            uncounted: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            tokens: Tokens::default(),
            timeout,
            fixed_deadline,
            timer_floor: WriteOnce::new(),
        };
        Arc::new_cyclic(|me| RunState {
            graph,
            input,
            core,
            me: me.clone(),
        })
    }

    /// Sends `event` to the orchestrator's observers. Check [`observed`](Self::observed)
    /// first when building the event costs anything.
    pub(crate) fn emit(&self, event: &Event<'_>) {
        deliver(self.graph.orchestrator.observers(), event);
    }

    /// Whether the orchestrator has observers.
    pub(crate) fn observed(&self) -> bool {
        !self.graph.orchestrator.observers().is_empty()
    }

    /// Drops `k` from `live`; the one that brings it to zero ends the run.
    pub(crate) fn release(&self, k: usize) {
        if k > 0 && self.core.live.fetch_sub(k, Ordering::AcqRel) == k {
            self.on_end();
        }
    }

    /// Counts node `id` as started in the orchestrator's `nodes_in_flight` gauge, once
    /// ([`record`](Self::record) uncounts it). Called only by whoever runs the node, so a
    /// load and a store do what a swap would, without its locked instruction.
    pub(crate) fn count_started(&self, id: u32) {
        if let Some(slot) = self.core.slot(id) {
            if !slot.counted.load(Ordering::Relaxed) {
                slot.counted.store(true, Ordering::Relaxed);
                self.graph
                    .orchestrator
                    .counters()
                    .local()
                    .nodes_in_flight
                    .incr();
            }
        }
    }

    /// Registers a driver about to be spawned.
    fn retain(&self) {
        self.core.live.fetch_add(1, Ordering::Relaxed);
    }

    fn on_end(&self) {
        let core = &self.core;
        if core.registered.swap(ENDED, Ordering::AcqRel) == ADMITTED {
            self.report_end();
        }
        // Only now may the run's future resolve: whoever reads the stats or awaits an
        // observer's `RunFinished` after the run finds them in.
        core.ended.store(true, Ordering::Release);
        core.done.wake();
    }

    /// The orchestrator admitted the run (`start` calls this once it has fixed the run's
    /// origin, before the first driver). If the run already ended (it was cancelled while
    /// being admitted), says so now.
    fn mark_admitted(&self) {
        if self
            .core
            .registered
            .compare_exchange(NOT_ADMITTED, ADMITTED, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            self.report_end();
        }
    }

    /// Tells the observers and the orchestrator that the admitted run ended. Counts the
    /// outcomes of nodes recorded before the run was marked admitted (a cancel that swept
    /// them while it was being admitted): its nodes were submitted, so they count.
    fn report_end(&self) {
        let core = &self.core;
        if core.uncounted.load(Ordering::Acquire) {
            let counters = self.graph.orchestrator.counters().local();
            for slot in core.slots.iter() {
                if slot.uncounted.load(Ordering::Relaxed) {
                    if let Some(record) = slot.record.get() {
                        counters.outcome(record.outcome);
                    }
                }
            }
        }
        if self.observed() {
            if let Some(me) = self.me.upgrade() {
                let report = Report::new(me as Arc<dyn RunRecords>);
                self.emit(&Event::RunFinished {
                    run: core.run_id,
                    report: &report,
                });
            }
        }
        if let Some(&key) = core.key.get() {
            // Ended `Cancelled` by a shutdown, as the run's future will tell its caller (a
            // cancel that raced with the last node's end cancelled nothing: see
            // `Run::result`). Rare: the records are read only then.
            let by_shutdown = core.reason.get() == Some(&CancelReason::Shutdown)
                && core.slots.iter().any(|slot| {
                    slot.record
                        .get()
                        .is_some_and(|r| r.outcome == Outcome::Cancelled)
                });
            self.graph.orchestrator.run_ended(key, by_shutdown);
        }
    }

    /// Records how node `id` ended and fires what follows from it: outcome count, callbacks,
    /// `NodeFinished`. The caller owns the node (moved it to `RUNNING`, or from `PENDING` to
    /// `DONE`). Does not release `live`.
    fn record(&self, id: u32, record: Record, was_running: bool) {
        let (Some(hot), Some(slot)) = (self.core.hot(id), self.core.slot(id)) else {
            return;
        };
        let outcome = record.outcome;
        let (settled, value) = record.settle();
        if let (Some(value), Some(cell)) = (value, self.core.values.get(id as usize)) {
            let _ = cell.set(value);
        }
        let _ = slot.record.set(settled);
        hot.state.store(DONE, Ordering::Release);
        self.core.tokens.end(id, u32::MAX);
        let counters = self.graph.orchestrator.counters().local();
        // A node that did not run, recorded before its run was marked admitted (a cancel's
        // sweep), counts only if the run turns out admitted: `report_end` counts it then.
        // (A run cancelled before the orchestrator saw it submitted nothing.)
        if self.core.registered.load(Ordering::Acquire) != NOT_ADMITTED || was_running {
            counters.outcome(outcome);
        } else {
            slot.uncounted.store(true, Ordering::Relaxed);
            self.core.uncounted.store(true, Ordering::Release);
        }
        if slot.counted.load(Ordering::Relaxed) {
            counters.nodes_in_flight.decr();
        }
        let callbacks = self.graph.callbacks(id);
        let observed = self.observed();
        if callbacks.is_none() && !observed {
            return;
        }
        let Some(rec) = slot.record.get() else { return };
        let view = NodeReport::new(self, id, rec);
        if let Some(callbacks) = callbacks {
            callbacks.fire(&view, self.core.value(id).map(|v| &**v));
        }
        if observed {
            self.emit(&Event::NodeFinished {
                run: self.core.run_id,
                node: view.name(),
                outcome,
                duration: view.duration(),
            });
        }
    }

    /// Finalizes a node that was pending (`PENDING -> DONE`), if nobody else did. Returns
    /// whether this call did it.
    fn pass_over(&self, id: u32, record: Record) -> bool {
        let Some(hot) = self.core.hot(id) else {
            return false;
        };
        if hot
            .state
            .compare_exchange(PENDING, DONE, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        self.record(id, record, false);
        true
    }

    /// Cancels the run: no node starts its task from now on; pending nodes end `Cancelled`
    /// at once, running ones as soon as their driver is polled (it is woken here). The first
    /// reason wins. Cancelling a run that has ended does nothing.
    pub(crate) fn cancel(&self, reason: CancelReason) {
        let core = &self.core;
        // The reason is set before the flag: whoever sees the flag finds the reason.
        if core.is_over() || core.reason.set(reason).is_err() {
            return;
        }
        core.cancelled.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if let Some(token) = core.token.get() {
            token.cancel();
        }
        let now = core.now();
        let mut swept = 0;
        for (id, (hot, slot)) in core.hot.iter().zip(core.slots.iter()).enumerate() {
            if self.pass_over(id as u32, Record::empty(Outcome::Cancelled, now)) {
                swept += 1;
            } else if hot.state.load(Ordering::Acquire) == RUNNING {
                slot.waker.wake();
            }
        }
        self.release(swept);
    }

    /// Marks `first` and everything downstream of it that is still pending `Skipped`;
    /// `because` is the upstream of `first` that produced no value. A skipped router's
    /// branches end `NotTaken`.
    fn skip(&self, first: u32, because: u32) {
        self.pass_over_from(first, because, Outcome::Skipped);
    }

    /// Ends `first` and everything downstream of it that is still pending with `outcome`
    /// (`Skipped`, or `NotTaken` below a branch that was not taken).
    fn pass_over_from(&self, first: u32, because: u32, outcome: Outcome) {
        let core = &self.core;
        let meta = &self.graph.meta;
        let now = core.now();
        // `because` produced no value itself: it is the root cause of everything skipped here.
        let root = because;
        let mut stack = vec![(first, because)];
        let mut ended = 0;
        while let Some((id, because)) = stack.pop() {
            let record = Record::empty(outcome, now).with_cause(because, root);
            if !self.pass_over(id, record) {
                continue;
            }
            ended += 1;
            ended += self.not_taken_except(id, None, now);
            stack.extend(meta.downstreams(id).iter().map(|&d| (d, id)));
        }
        self.release(ended);
    }

    /// Marks the branches of router `id` other than `chosen` `NotTaken` (and skips whatever
    /// depends on them directly); returns how many branches it marked, for the caller to
    /// release.
    pub(crate) fn not_taken_except(&self, id: u32, chosen: Option<u32>, now: Instant) -> usize {
        let NodeKind::Router { branches } = self.graph.kind(id) else {
            return 0;
        };
        let mut marked = 0;
        for &(_, b) in branches.iter().filter(|(_, b)| Some(*b) != chosen) {
            if self.pass_over(b, Record::empty(Outcome::NotTaken, now)) {
                marked += 1;
                // What depends on a branch not taken is not taken either.
                for &d in self.graph.meta.downstreams(b) {
                    self.pass_over_from(d, b, Outcome::NotTaken);
                }
            }
        }
        marked
    }

    /// Records how node `id` (run by a driver) ended and releases its downstreams: one
    /// downstream that became ready is returned for the caller to run inline, the others are
    /// queued. Does not release the node from `live`: the driver does, with itself, when it
    /// ends (one atomic operation for a whole chain).
    ///
    /// The others are queued for all, or, on a one-worker runtime (or in an inline run while
    /// its future drives it), go on `local`, the driver's own stack (`ready.rs`).
    pub(crate) fn finish(
        self: &Arc<Self>,
        id: u32,
        record: Record,
        local: &mut VecDeque<u32>,
    ) -> Released {
        self.finish_inner(id, record, true, Some(local))
    }

    /// [`finish`](Self::finish) for a router's branch: fail-fast is left to the router, and
    /// the branch is released from `live` at once.
    pub(crate) fn finish_branch(self: &Arc<Self>, id: u32, record: Record) -> Released {
        let released = self.finish_inner(id, record, false, None);
        self.release(1);
        released
    }

    fn finish_inner(
        self: &Arc<Self>,
        id: u32,
        record: Record,
        fail_fast: bool,
        mut local: Option<&mut VecDeque<u32>>,
    ) -> Released {
        let produced = record.value.is_some();
        let outcome = record.outcome;
        let core = &self.core;
        let downstreams = self.graph.meta.downstreams(id);
        if core.prefetch {
            // Their counters' misses overlap each other and the record's writes.
            self.prefetch_counters(id, downstreams);
        }
        self.record(id, record, true);
        let mut next = None;
        let mut spawned = false;
        // A driver keeps extra ready nodes for itself only on a one-worker runtime (or in an
        // inline run, which counts one), where no other worker could take them (`ready.rs`).
        let workers = self.workers();
        let keep = workers == 1 && !core.ready.wants_help(workers);
        for &d in downstreams {
            if !produced && outcome != Outcome::Cancelled {
                self.skip(d, id);
            }
            let Some(ds) = core.hot(d) else { continue };
            if ds.pending.fetch_sub(1, Ordering::AcqRel) == 1
                && ds
                    .state
                    .compare_exchange(PENDING, RUNNING, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                if core.prefetch && !neighbours(d, id) {
                    self.prefetch_node(d);
                }
                match (next, local.as_deref_mut()) {
                    (None, _) => next = Some(d),
                    (Some(_), Some(local)) if keep => local.push_back(d),
                    (Some(_), _) => spawned |= self.schedule(d),
                }
            }
        }
        if fail_fast && outcome == Outcome::Failed && core.mode == FailureMode::FailFast {
            self.cancel(CancelReason::FailFast {
                node: self.graph.meta.name(id).to_owned(),
            });
        }
        Released { next, spawned }
    }

    /// When `next`, released by its upstream `id` that ended at `end`, starts if run at once:
    /// the latest end among its upstreams, when nothing but the scheduler's own bookkeeping
    /// ran between those ends and now. `None` (read the clock) when user code may have run
    /// in between (callbacks, observers), when `id` has more than two downstreams (queuing
    /// the others takes time, and may spawn a driver), or past two upstreams (reading records at scattered places costs more than the clock).
    pub(crate) fn ready_at(&self, id: u32, next: u32, end: Instant) -> Option<Instant> {
        if !self.quiet_after(id) {
            return None;
        }
        let graph = &self.graph;
        match *graph.meta.upstreams(next) {
            [_] => Some(end),
            [a, b] => {
                let other = if a == id { b } else { a };
                if graph.callbacks(other).is_some() || graph.meta.downstreams(other).len() > 2 {
                    return None;
                }
                let other_end = self.core.slot(other)?.record.get()?.end;
                Some(end.max(other_end))
            }
            _ => None,
        }
    }

    /// Whether finishing node `id`, which produced a value (a node without one skips its
    /// downstreams, running their callbacks), runs nothing but the scheduler's bookkeeping,
    /// and little of it: no observer, no callbacks of `id`, at most two downstreams to
    /// release. Then the node's end is still "now" for whatever its driver starts next.
    pub(crate) fn quiet_after(&self, id: u32) -> bool {
        let graph = &self.graph;
        !self.observed() && graph.callbacks(id).is_none() && graph.meta.downstreams(id).len() <= 2
    }

    /// Whether node `id` has no upstreams: ready from the run's start.
    pub(crate) fn is_root(&self, id: u32) -> bool {
        self.graph.meta.upstreams(id).is_empty()
    }

    /// Finalizes a node whose driver disappeared without ending it (the runtime dropped the
    /// task, e.g. because it is shutting down): it ends `Cancelled`, and so does the rest of
    /// the run, which cannot go on without it.
    pub(crate) fn abandon(&self, id: u32) {
        let Some(hot) = self.core.hot(id) else {
            return;
        };
        if hot.state.load(Ordering::Acquire) == RUNNING {
            self.cancel(CancelReason::Dropped);
            let record = Record::empty(Outcome::Cancelled, self.core.now());
            self.record(id, record, true);
            self.release(1);
        }
    }

    /// Ends router branch `id` `Cancelled` and releases it, if it is still running: its
    /// router's future was dropped while running it. Does nothing once the branch ended.
    pub(crate) fn abandon_branch(&self, id: u32) {
        let Some(hot) = self.core.hot(id) else {
            return;
        };
        if hot.state.load(Ordering::Acquire) == RUNNING {
            let record = Record::empty(Outcome::Cancelled, self.core.now());
            self.record(id, record, true);
            self.release(1);
        }
    }

    /// Queues node `id`, which the caller moved to `RUNNING`, for a driver to run, and
    /// spawns a driver if fewer than the runtime's workers are draining the queue; whether
    /// it spawned one. [`share`](Self::share) does the same for several nodes.
    ///
    /// A task spawned from a tokio worker waits in that worker's LIFO slot, which other
    /// workers cannot steal from, and no idle worker is woken for it: a caller that goes
    /// on running a node itself must first yield once (its own task then goes to the
    /// stealable queue, an idle worker is woken, and the new driver runs here), or the two
    /// would share one worker.
    pub(crate) fn schedule(self: &Arc<Self>, id: u32) -> bool {
        let ready = &self.core.ready;
        let id = match ready.push(id) {
            Ok(()) if ready.try_activate(self.workers()) => None,
            Ok(()) => return false,
            // Only a node queued twice could fill the queue; run it all the same.
            Err(id) => Some(id),
        };
        self.spawn_driver(id, id.is_none());
        true
    }

    /// Queues `nodes` (moved to `RUNNING`) for any driver, like [`schedule`](Self::schedule)
    /// with one spawn at most; whether it spawned a driver.
    pub(crate) fn share(self: &Arc<Self>, nodes: impl Iterator<Item = u32>) -> bool {
        let ready = &self.core.ready;
        let mut queued = false;
        for id in nodes {
            match ready.push(id) {
                Ok(()) => queued = true,
                // Only a node queued twice could fill the queue; run it all the same.
                Err(id) => self.spawn_driver(Some(id), false),
            }
        }
        if queued && ready.try_activate(self.workers()) {
            self.spawn_driver(None, true);
            return true;
        }
        false
    }

    /// How many drivers at most drain the ready queue: the runtime's worker threads (one for
    /// an inline run while its future drives it).
    #[inline]
    pub(crate) fn workers(&self) -> usize {
        self.core.drivers.load(Ordering::Relaxed)
    }

    /// Spawns a driver, counted in `live`: one that starts with node `id` (moved to
    /// `RUNNING` by the caller), or with `None` one that starts with the ready queue;
    /// `active`: the caller counted it as an active driver.
    pub(crate) fn spawn_driver(self: &Arc<Self>, id: Option<u32>, active: bool) {
        self.spawn(Driver::new(Arc::clone(self), id, active));
    }

    /// Spawns `driver` (of this run), counted in `live`.
    pub(crate) fn spawn(&self, driver: Driver<I>) {
        self.retain();
        let fut = driver;
        match self.core.started.get() {
            Some(Started { handle, .. }) => {
                handle.spawn(fut);
            }
            None => {
                tokio::spawn(fut);
            }
        }
    }

    /// Starts the run: fixes its origin and deadline, emits `RunStarted`, marks the run
    /// admitted (its nodes count in the stats from here on), spawns a driver for each of the
    /// first roots (as many as the runtime has workers) and queues the others for them.
    ///
    /// Where one thread runs every task (taken to be so on a current-thread runtime, or on a
    /// one-worker runtime awaited from a task: see `one_thread` below), that one driver is
    /// not spawned but returned, for the run's future to poll at once: a graph whose nodes
    /// end at once then runs in the task that awaits it, without a spawn (as `tokio::join!`
    /// would). That driver holds nothing across a `Pending`: a node that waits, and whatever
    /// it would yield with, goes to a spawned driver (`driver.rs`), so a run whose future is
    /// held without being polled still makes progress, and can always be cancelled. With
    /// more workers every first driver is a task, as a node that computes must not hold the
    /// awaiting task (its timeout, the other futures it joins) while other workers could run
    /// the node, unless the run starts inline ([`StartMode::Inline`], the default): it then
    /// schedules as on a one-worker runtime, whatever the runtime, until its future stops
    /// driving it ([`RunCore::spread`]).
    pub(crate) fn start(self: &Arc<Self>, handle: Handle) -> Option<Driver<I>> {
        let core = &self.core;
        let now = Instant::now();

        let by_timeout = core.timeout.and_then(|t| now.checked_add(t));
        let deadline = match (by_timeout, core.fixed_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // An inline run counts one worker while its future drives it (its first poll): at
        // most one driver at a time drains the ready queue, and a driver keeps the nodes it
        // makes ready for itself. Once the future stops driving it, it spreads (`spread`).
        let runtime_workers = handle.metrics().num_workers().max(1);
        let workers = if core.inline { 1 } else { runtime_workers };
        core.drivers.store(workers, Ordering::Relaxed);
        // Whether one thread runs every task, the caller's included, so that a node run in
        // the task that awaits the run holds nothing another worker could have run. Tokio
        // does not say which thread is a worker: this is a current-thread runtime, or one
        // worker and the caller is a task. A `LocalSet`, a blocking thread (`spawn_blocking`
        // and `Handle::block_on`) or a `Handle::block_on` from another thread pass it too;
        // there a node that computes holds the awaiting thread, as in a `tokio::join!`.
        let one_thread = core.inline
            || (workers == 1
                && (handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread
                    || tokio::task::try_id().is_some()));
        let _ = core.started.set(Started {
            origin: now,
            deadline,
            handle,
            runtime_workers,
            span: trace::run_span(core.run_id, self.graph.meta.len()),
        });
        if self.observed() {
            self.emit(&Event::RunStarted {
                run: core.run_id,
                nodes: self.graph.meta.len(),
            });
        }
        // Admitted after `RunStarted` (a cancel may end the run from here on, and
        // `RunFinished` must come second) and before the first driver (which may record
        // nodes on another worker before this returns).
        self.mark_admitted();
        // An empty graph is over at once.
        if self.graph.meta.len() == 0 {
            self.on_end();
            return None;
        }
        let claim = |root: u32| {
            core.hot(root).is_some_and(|hot| {
                hot.state
                    .compare_exchange(PENDING, RUNNING, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            })
        };
        // The first roots (one per worker) get a driver of their own; the others wait in
        // the queue for those drivers. They are queued first, so that a driver that ends
        // its root at once finds them. Where one thread runs every task, the first driver
        // is the run's future itself.
        let roots = &self.graph.meta.roots;
        let (own, queued) = roots.split_at(roots.len().min(workers));
        for &root in queued {
            if claim(root) {
                if let Err(root) = core.ready.push(root) {
                    self.spawn_driver(Some(root), false);
                }
            }
        }
        let mut embedded = None;
        for &root in own {
            if claim(root) {
                let active = core.ready.try_activate(workers);
                if one_thread {
                    self.retain();
                    // The run's origin is its first node's start, when no observer runs
                    // in between (the run's future polls that node next).
                    let start = (!self.observed()).then_some(now);
                    embedded = Some(Driver::embedded(Arc::clone(self), root, active, start));
                } else {
                    self.spawn_driver(Some(root), active);
                }
            }
        }
        // A cancel between the two loops sweeps first roots that were not claimed yet: the
        // queued ones then have no driver. Honour the pusher's side of the protocol.
        if !core.ready.is_empty() && core.ready.try_activate(workers) {
            self.spawn_driver(None, true);
        }
        embedded
    }
}

/// Runs `f`, catching a panic; for user code called by the scheduler.
pub(crate) fn guarded<R>(f: impl FnOnce() -> R) -> Result<R, NodeError> {
    std::panic::catch_unwind(AssertUnwindSafe(f)).map_err(|p| NodeError::from_panic(p.as_ref()))
}

impl TimerHook for RunCore {
    fn timer_made(&self, until: Instant) {
        self.floor_timers(until);
    }
}

impl<I: Send + Sync + 'static> InFlight for RunState<I> {
    fn cancel(&self, reason: CancelReason) {
        RunState::cancel(self, reason);
    }
}

impl<I: Send + Sync + 'static> super::run::Control for RunState<I> {
    fn run_id(&self) -> RunId {
        self.core.run_id
    }

    fn is_cancelled(&self) -> bool {
        self.core.is_cancelled()
    }
}

impl<I: Send + Sync + 'static> RunRecords for RunState<I> {
    fn run_id(&self) -> RunId {
        self.core.run_id
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
        self.core.slot(id)?.record.get()
    }

    fn value(&self, id: u32) -> Option<&Value> {
        self.core.value(id)
    }

    fn attempts(&self, id: u32) -> u32 {
        self.core
            .slot(id)
            .map_or(0, |s| s.attempts.load(Ordering::Acquire))
    }

    fn abandoned(&self, id: u32) -> u32 {
        self.core
            .slot(id)
            .map_or(0, |s| s.abandoned.load(Ordering::Acquire))
    }

    fn offset(&self, at: Instant) -> Duration {
        self.core.offset(at)
    }

    fn cancel_reason(&self) -> Option<&CancelReason> {
        self.core.reason.get()
    }
}

impl<I> Drop for RunState<I> {
    /// Hands the run's per-run arrays, cleared, to the graph's next run.
    fn drop(&mut self) {
        if self.core.hot.is_empty() {
            return;
        }
        let ready = std::mem::replace(&mut self.core.ready, ReadyQueue::new(Box::new([])));
        let mut buffers = RunBuffers {
            hot: std::mem::take(&mut self.core.hot),
            slots: std::mem::take(&mut self.core.slots),
            values: std::mem::take(&mut self.core.values),
            queue: ready.into_slots(),
        };
        buffers.clear();
        self.graph.spare.put(self.core.home, buffers);
    }
}

#[cfg(test)]
mod tests {
    use std::future::{Ready, ready};

    use super::*;
    use crate::{BoxError, Ctx, Graph, Node};

    fn noop<V>(_ctx: Ctx<()>, _values: V) -> Ready<Result<(), BoxError>> {
        ready(Ok(()))
    }

    /// A run of `graph` with the default options, not started.
    fn run_of(graph: &Graph<()>) -> Arc<RunState<()>> {
        RunState::new(
            Arc::clone(&graph.inner),
            (),
            FailureMode::default(),
            StartMode::default(),
            None,
            None,
        )
    }

    /// Runs `graph` once on a runtime with `workers` worker threads (from outside it); the
    /// run's state, after its report was dropped.
    fn run_on(graph: &Graph<()>, workers: usize) -> Arc<RunState<()>> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
            .expect("a runtime");
        let run = graph.run(());
        let state = Arc::clone(&run.state);
        let report = rt.block_on(run).expect("the run succeeds");
        drop(report);
        state
    }

    /// Whether a run of `graph` on `workers` worker threads set its timer floor.
    fn sets_a_floor(graph: &Graph<()>, workers: usize) -> bool {
        run_on(graph, workers).core.timer_floor.get().is_some()
    }

    /// One node with `timeout` and a retry without backoff, whose attempts run
    /// `attempt(first)`.
    fn timed_graph<F, Fut>(timeout: Duration, attempt: F) -> Graph<()>
    where
        F: Fn(bool) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
    {
        let calls = Arc::new(AtomicU32::new(0));
        let mut g = Graph::<()>::builder();
        let _: Node<()> = g
            .node("n")
            .timeout(timeout)
            .retry(crate::Retry::new(2).backoff(crate::Backoff::constant(Duration::ZERO)))
            .task(move |_ctx, ()| attempt(calls.fetch_add(1, Ordering::SeqCst) == 0));
        g.build().expect("a valid graph")
    }

    /// A node with a timeout whose attempts wait (yield twice), and that fails its first
    /// attempt at once when `retried`: its waiting attempt then runs on the policy path.
    /// (Twice: a run that starts inline moves an attempt to a driver of its own at its first
    /// `Pending`, and that driver sets its timer at the next.)
    fn waiting_graph(retried: bool) -> Graph<()> {
        timed_graph(Duration::from_secs(60), move |first| async move {
            if first && retried {
                return Err::<(), BoxError>("refused".into());
            }
            tokio::task::yield_now().await;
            tokio::task::yield_now().await;
            Ok(())
        })
    }

    /// The timer floor (`RunCore::floor_timers`) is set where a policy node's attempt waits,
    /// on the fast path and on the policy path alike, on a runtime with several workers, and
    /// not on one with a single worker, where no other thread parks.
    #[test]
    fn waiting_policy_attempts_set_the_timer_floor_on_several_workers() {
        assert!(sets_a_floor(&waiting_graph(false), 2), "fast path");
        assert!(sets_a_floor(&waiting_graph(true), 2), "policy path");
        assert!(!sets_a_floor(&waiting_graph(false), 1), "one worker");
        assert!(!sets_a_floor(&waiting_graph(true), 1), "one worker");
    }

    /// An inline run counts one driver while its future drives it; once the future stops
    /// (a 300-node chain: it hands off after its first nodes), every worker's. Spread runs
    /// count every worker from the start, and one worker is one either way.
    #[test]
    fn an_inline_run_spreads_once_its_future_stops_driving_it() {
        let chain = |start: StartMode| {
            let mut g = Graph::<()>::builder();
            g.start_mode(start);
            let mut prev: Node<()> = g.node("c0").task(noop);
            for i in 1..300 {
                prev = g.node(format!("c{i}")).after(prev).task(noop);
            }
            g.build().expect("a valid graph")
        };
        let inline = chain(StartMode::Inline);
        let state = RunState::new(
            Arc::clone(&inline.inner),
            (),
            FailureMode::default(),
            StartMode::Inline,
            None,
            None,
        );
        assert_eq!(state.workers(), 1, "not started");
        assert_eq!(run_on(&inline, 2).workers(), 2, "inline, two workers");
        assert_eq!(run_on(&inline, 1).workers(), 1, "inline, one worker");
        assert_eq!(run_on(&chain(StartMode::Spread), 2).workers(), 2, "spread");
    }

    /// An inline run's future that hands off a run with nodes still queued gives them a
    /// driver per worker: with both workers of the runtime held (so that no spawned driver
    /// runs and leaves), the first poll of a run of 300 roots that end at once runs the
    /// first ones, then hands off, and two drivers are counted active (one without the
    /// hand-off's spawns for queued nodes, or without `spread`).
    #[test]
    fn an_inline_hand_off_gives_queued_nodes_a_driver_per_worker() {
        let mut g = Graph::<()>::builder();
        g.start_mode(StartMode::Inline);
        for i in 0..300 {
            let _: Node<()> = g.node(format!("r{i}")).task(noop);
        }
        let graph = g.build().expect("a valid graph");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let held = Arc::new(std::sync::Barrier::new(3));
        let release = Arc::new(std::sync::Barrier::new(3));
        for _ in 0..2 {
            let (held, release) = (Arc::clone(&held), Arc::clone(&release));
            // Each holds a worker (blocking it) until the test releases both.
            rt.spawn(async move {
                held.wait();
                release.wait();
            });
        }
        held.wait();
        let mut run = graph.run(());
        let state = Arc::clone(&run.state);
        rt.block_on(async {
            assert!(futures::poll!(&mut run).is_pending(), "it handed off");
        });
        let queued = !state.core.ready.is_empty();
        let active = state.core.ready.active();
        release.wait();
        let report = rt.block_on(run).expect("the run succeeds");
        assert_eq!(report.len(), 300);
        assert!(queued, "roots were left queued");
        assert_eq!(active, 2, "a driver per worker for the queued roots");
    }

    /// The floor is registered when the attempt that sets it spent the task's coop budget
    /// before its first `Pending` (its one poll is made outside the budget): it fires with
    /// the attempt's cut, at the same instant, before the run can end. (A 5 ms cut on a
    /// multi-thread runtime, whose clock cannot be paused; nothing is timed: the run ends
    /// after its cut whatever the machine.)
    #[test]
    fn a_floor_set_with_the_coop_budget_spent_is_registered() {
        let graph = timed_graph(Duration::from_millis(5), |first| async move {
            if first {
                while tokio::task::coop::has_budget_remaining() {
                    tokio::task::coop::consume_budget().await;
                }
                std::future::pending::<()>().await;
            }
            Ok(())
        });
        let state = run_on(&graph, 2);
        let floor = state.core.timer_floor.get().expect("a floor was set");
        assert!(floor.is_elapsed(), "the floor was never registered");
    }

    /// What a node costs per run, beside its join counter (8 bytes), value cell (24) and
    /// ready-queue cell (4): the README's "about 130 bytes per node".
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn a_slot_is_96_bytes_and_its_record_48() {
        assert_eq!(std::mem::size_of::<Settled>(), 48);
        assert_eq!(std::mem::size_of::<Slot>(), 96);
        assert_eq!(std::mem::size_of::<Hot>(), 8);
        assert_eq!(std::mem::size_of::<WriteOnce<Value>>(), 24);
    }

    /// A run's arrays go back to the set of the thread that created it, not to that of the
    /// thread that drops it (a run spread over the workers often ends on another): the next
    /// run created here finds them.
    #[test]
    fn a_run_gives_its_arrays_back_to_its_home_set() {
        let mut g = Graph::<()>::builder();
        let _a: Node<()> = g.node("a").task(noop);
        let graph = g.build().unwrap();
        let home = graph.inner.spare.home();
        let mut run = Some(run_of(&graph));
        let mut elsewhere = None;
        // New threads take new stripes: one of the next few is not this thread's.
        for _ in 0..=crate::util::striped::STRIPES {
            let Some(r) = run.take() else { break };
            let inner = Arc::clone(&graph.inner);
            let (back, other) = std::thread::spawn(move || {
                let other = inner.spare.home();
                if other == home {
                    (Some(r), None)
                } else {
                    drop(r);
                    (None, Some(other))
                }
            })
            .join()
            .unwrap();
            run = back;
            elsewhere = other;
        }
        let other = elsewhere.expect("a thread of another stripe dropped the run");
        assert!(graph.inner.spare.take(other).is_none(), "the dropper's set");
        assert!(graph.inner.spare.take(home).is_some(), "the home set");
    }

    /// A run prefetches only on a graph that is both large (its arrays outgrow the caches)
    /// and scattered (some edge joins nodes that are not neighbours): not on a small graph,
    /// nor on a long chain or many independent nodes, whose entries the hardware streams.
    #[test]
    fn only_large_scattered_graphs_prefetch() {
        fn prefetches(graph: &Graph<()>) -> bool {
            run_of(graph).core.prefetch
        }
        let n = PREFETCH_MIN_NODES;
        // A chain, then one edge back to the first node (the only scattered edge).
        let chain = |len: usize, back: bool| {
            let mut g = Graph::<()>::builder();
            let first: Node<()> = g.node("n0").task(noop);
            let mut last = first;
            for i in 1..len {
                last = g.node(format!("n{i}")).after(last).task(noop);
            }
            if back {
                g.node("back").after(first).task(noop);
            }
            g.build().unwrap()
        };
        let parallel = {
            let mut g = Graph::<()>::builder();
            for i in 0..n {
                g.node(format!("n{i}")).task(noop);
            }
            g.build().unwrap()
        };
        assert!(!prefetches(&chain(n, false)), "a long chain");
        assert!(!prefetches(&parallel), "independent nodes");
        assert!(!prefetches(&chain(16, true)), "a small scattered graph");
        assert!(prefetches(&chain(n, true)), "a large scattered graph");
    }

    /// A node continued inline reuses its upstream's end as its start only when nothing but
    /// the scheduler's bookkeeping can have run in between: no callbacks on the upstreams,
    /// at most one other downstream spawned, at most two upstreams (the other one's record
    /// written).
    #[test]
    fn a_start_is_reused_only_when_no_user_code_ran_in_between() {
        let mut g = Graph::<()>::builder();
        let a: Node<()> = g.node("a").task(noop);
        let b: Node<()> = g.node("b").after(a).task(noop);
        let c: Node<()> = g.node("c").on_success(|_: &()| {}).task(noop);
        let d: Node<()> = g.node("d").after(c).task(noop);
        let e: Node<()> = g.node("e").after((a, c)).task(noop);
        let f: Node<()> = g.node("f").task(noop);
        let fan: Vec<Node<()>> = (0..3)
            .map(|i| g.node(format!("f{i}")).after(f).task(noop))
            .collect();
        let h: Node<()> = g.node("h").task(noop);
        let k: Node<()> = g.node("k").after((b, h)).task(noop);
        let graph = g.build().unwrap();
        let run = run_of(&graph);
        let t = Instant::now();
        assert_eq!(run.ready_at(a.index, b.index, t), Some(t), "a chain");
        assert_eq!(run.ready_at(c.index, d.index, t), None, "callbacks ran");
        assert_eq!(
            run.ready_at(a.index, e.index, t),
            None,
            "the other's callbacks"
        );
        assert_eq!(
            run.ready_at(f.index, fan[0].index, t),
            None,
            "others spawned"
        );
        assert_eq!(
            run.ready_at(b.index, k.index, t),
            None,
            "the other's end unknown"
        );
        let later = t + Duration::from_millis(5);
        let _ = run.core.slots[h.index as usize]
            .record
            .set(Settled::empty(Outcome::Succeeded, later));
        assert_eq!(
            run.ready_at(b.index, k.index, t),
            Some(later),
            "the later end"
        );
    }
}
