//! [`RunCore`]: the state of one run that does not depend on its input type: the per-node
//! arrays, the ready queue, the run's lifecycle counters and flags, and what it fixed when
//! it started. Its fields are private: the run's protocols, `live`, admission and
//! cancellation, are methods here, each with its orderings beside it.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering, fence};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::Waker;
use std::time::Duration;

use futures_util::task::AtomicWaker;
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::admission::Admission;
use super::joined::{CancelWake, Passes, SpareWaker, Woken};
use super::node_state::{NodeState, RunBuffers, Slot};
use super::options::FailureMode;
use super::passes::PassBudget;
use crate::engine::ready::ReadyQueue;
use crate::engine::task::tokens::Tokens;
use crate::error::CancelReason;
use crate::id::RunId;
use crate::orchestrator::RunKey;
use crate::policy::deadline::KeptTimer;
use crate::util::once::WriteOnce;
use crate::util::sync::Exclusive;
use crate::util::value::Value;

mod floor;

/// What a run fixes when it starts.
#[derive(Debug)]
struct Started {
    origin: Instant,
    /// From its options: timeout and deadline.
    deadline: Option<Instant>,
    /// The runtime its drivers are spawned on.
    handle: Handle,
    /// The runtime's worker threads, whatever the start mode.
    runtime_workers: u32,
    /// Whether the runtime is a multi-thread one, which cannot run on tokio's paused clock.
    multi_thread: bool,
    /// Its span, unless disabled.
    span: Option<tracing::Span>,
}

/// The span a run whose own is disabled gives its nodes as their parent.
static DISABLED: tracing::Span = tracing::Span::none();

/// Graphs of at least this many nodes prefetch what their nodes touch at scattered places.
/// The run's and the graph's arrays take about 170 bytes per node: 4 096 nodes are some
/// 700 KB, most of a core's second-level cache. Smaller graphs stay in the caches, where
/// the hints would only add instructions.
pub(in crate::engine) const PREFETCH_MIN_NODES: usize = 4096;

/// A count of drivers as [`RunCore`] keeps it, in 32 bits; no runtime has more workers.
fn count(drivers: usize) -> u32 {
    u32::try_from(drivers).unwrap_or(u32::MAX)
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct RunCore {
    nodes: Box<[NodeState]>,
    slots: Box<[Slot]>,
    /// The nodes' values, apart from their records: downstreams read them at random places
    /// on large graphs, and a dense array of 24-byte cells is kinder to the cache.
    values: Box<[WriteOnce<Value>]>,
    /// Nodes made ready that no driver has picked up yet; see `ready/mod.rs`.
    ready: ReadyQueue,
    /// Nodes not finalized plus drivers alive; the run ends when it reaches zero.
    live: AtomicUsize,
    /// The run's future, woken when the run ends.
    done: AtomicWaker,
    cancelled: AtomicBool,
    reason: OnceLock<CancelReason>,
    /// What the run fixed when it started, in one cell set once. It is a `WriteOnce`, whose
    /// write is a load and a store, where `OnceLock::set` runs a `Once`.
    started: WriteOnce<Started>,
    token: OnceLock<CancellationToken>,
    run_id: RunId,
    mode: FailureMode,
    /// The run starts in the task that awaits it, and schedules as on a one-worker runtime
    /// until that task stops driving it; see [`spread`](Self::spread).
    inline: bool,
    /// An inline run that has not spread: every driver it spawns is polled by its future,
    /// through `RunState::spawn`, so the run uses no task but the one that awaits it. Cleared by
    /// [`spread`](Self::spread), never set again. Written and read only by code the run's
    /// future polls until then, hence `Relaxed`.
    local: AtomicBool,
    /// Where the run's future is in its poll's passes over its drivers, and what the passes
    /// after the first have spent.
    passes: PassBudget,
    /// How many drivers at most drain the ready queue: the runtime's worker threads, or one
    /// while an inline run is driven by its future. Read with `Relaxed`: the ready queue's
    /// protocol holds for any count of one or more, and a driver that reads one after it
    /// changed only shares its nodes a node later.
    drivers: AtomicU32,
    /// The graph is large enough for its per-node arrays to outgrow the caches, and
    /// scattered: the scheduler prefetches what a node touches at scattered places.
    prefetch: bool,
    /// The graph's set of spare arrays this run took, or would have taken, and gives its
    /// own back to when it ends; see `graph/spare.rs`.
    home: usize,
    admission: Admission,
    /// Where the orchestrator keeps the run while it is in flight: set once admitted.
    key: WriteOnce<RunKey>,
    /// Some node's outcome was recorded before the run was marked admitted, and is not
    /// counted yet; see `RunState::report_end`.
    uncounted: AtomicBool,
    /// Set once the run's end has told the orchestrator and the observers.
    ended: AtomicBool,
    tokens: Tokens,
    timeout: Option<Duration>,
    fixed_deadline: Option<Instant>,
    /// The key the run's caller gave its nodes' idempotency keys, if any.
    caller_key: Option<Arc<str>>,
    /// A timer at the cut of a policy attempt of the run that waited, registered with
    /// tokio's and never polled again; see [`floor_timers`](Self::floor_timers).
    timer_floor: Mutex<KeptTimer>,
    /// The run's orchestrator granted it a timer floor, which it has not given back; see
    /// [`floor_timers`](Self::floor_timers). Set under the floor's lock.
    floored: AtomicBool,
    /// How a cancel wakes an inline run's future to poll its joined drivers.
    cancel_wake: CancelWake,
}

impl RunCore {
    /// A run over `buffers`, reset for it, with these options and the key its caller gave
    /// its nodes' idempotency keys; `prefetch` and `home` as described on the fields.
    /// Inlined, so that the run's state is built in place.
    #[inline(always)]
    pub(in crate::engine) fn new(
        buffers: RunBuffers,
        (mode, inline, prefetch): (FailureMode, bool, bool),
        home: usize,
        (timeout, fixed_deadline): (Option<Duration>, Option<Instant>),
        caller_key: Option<Arc<str>>,
    ) -> Self {
        let RunBuffers {
            nodes,
            slots,
            values,
            queue,
        } = buffers;
        RunCore {
            live: AtomicUsize::new(nodes.len()),
            values,
            ready: ReadyQueue::new(queue),
            nodes,
            slots,
            done: AtomicWaker::new(),
            cancelled: AtomicBool::new(false),
            reason: OnceLock::new(),
            started: WriteOnce::new(),
            token: OnceLock::new(),
            run_id: RunId::next(),
            mode,
            inline,
            local: AtomicBool::new(inline),
            passes: PassBudget::new(),
            drivers: AtomicU32::new(1),
            prefetch,
            home,
            admission: Admission::new(),
            key: WriteOnce::new(),
            uncounted: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            tokens: Tokens::default(),
            timeout,
            fixed_deadline,
            caller_key,
            timer_floor: Mutex::new(KeptTimer::new()),
            floored: AtomicBool::new(false),
            cancel_wake: CancelWake::new(),
        }
    }

    /// The stripe of the graph's spare run arrays this run belongs to; see `graph/spare.rs`.
    #[inline]
    pub(in crate::engine) fn home(&self) -> usize {
        self.home
    }

    /// The key the run's caller gave its nodes' idempotency keys, if any.
    pub(in crate::engine) fn caller_key(&self) -> Option<&Arc<str>> {
        self.caller_key.as_ref()
    }

    /// The per-node arrays, for the graph's next run as `self` is being dropped, and the
    /// set of spare arrays they go back to.
    #[inline]
    pub(in crate::engine) fn take_buffers(&mut self) -> (RunBuffers, usize) {
        let ready = std::mem::replace(&mut self.ready, ReadyQueue::new(Box::new([])));
        let buffers = RunBuffers {
            nodes: std::mem::take(&mut self.nodes),
            slots: std::mem::take(&mut self.slots),
            values: std::mem::take(&mut self.values),
            queue: ready.into_slots(),
        };
        (buffers, self.home)
    }

    /// Now, on tokio's clock, which tests pause.
    #[inline]
    pub(in crate::engine) fn now(&self) -> Instant {
        Instant::now()
    }

    #[inline]
    pub(crate) fn run_id(&self) -> RunId {
        self.run_id
    }

    #[inline]
    pub(in crate::engine) fn mode(&self) -> FailureMode {
        self.mode
    }

    #[inline]
    pub(in crate::engine) fn prefetch(&self) -> bool {
        self.prefetch
    }

    #[inline]
    pub(in crate::engine) fn ready(&self) -> &ReadyQueue {
        &self.ready
    }

    #[inline]
    pub(in crate::engine) fn tokens(&self) -> &Tokens {
        &self.tokens
    }

    #[inline]
    pub(in crate::engine) fn len(&self) -> usize {
        self.nodes.len()
    }

    #[inline]
    pub(in crate::engine) fn node(&self, id: u32) -> Option<&NodeState> {
        self.nodes.get(id as usize)
    }

    #[inline]
    pub(in crate::engine) fn slot(&self, id: u32) -> Option<&Slot> {
        self.slots.get(id as usize)
    }

    /// Every node's state and slot, by index.
    pub(in crate::engine) fn nodes(&self) -> impl Iterator<Item = (&NodeState, &Slot)> {
        self.nodes.iter().zip(self.slots.iter())
    }

    /// Every node's value cell, by index.
    #[inline]
    pub(in crate::engine) fn values(&self) -> &[WriteOnce<Value>] {
        &self.values
    }

    /// Node `id`'s value, once it ended with one.
    #[inline]
    pub(in crate::engine) fn value(&self, id: u32) -> Option<&Value> {
        self.values.get(id as usize)?.get()
    }

    /// The cell of node `id`'s value.
    #[inline]
    pub(in crate::engine) fn value_cell(&self, id: u32) -> Option<&WriteOnce<Value>> {
        self.values.get(id as usize)
    }

    /// `at` as an offset from the run's start; zero before it started.
    pub(in crate::engine) fn offset(&self, at: Instant) -> Duration {
        self.started
            .get()
            .map_or(Duration::ZERO, |s| at.saturating_duration_since(s.origin))
    }

    /// Fixes what the run fixes when it starts at `origin`: its deadline, its runtime, its
    /// span, and how many drivers it starts with. The deadline comes from its options: the
    /// earlier of its timeout and its fixed deadline. Called once, by the run's first poll.
    ///
    /// # Safety
    ///
    /// No other call of `fix_start` on this run may run at the same time: the run's future
    /// makes the one call, in its first poll, through `&mut Run`.
    #[inline]
    #[allow(unsafe_code)]
    pub(in crate::engine) unsafe fn fix_start(
        &self,
        origin: Instant,
        handle: Handle,
        runtime_workers: usize,
        span: tracing::Span,
    ) {
        let by_timeout = self.timeout.and_then(|t| origin.checked_add(t));
        let deadline = crate::policy::deadline::earliest(by_timeout, self.fixed_deadline);
        let drivers = if self.inline { 1 } else { runtime_workers };
        self.drivers.store(count(drivers), Ordering::Relaxed);
        // SAFETY: the caller is the one writer of `started`, as this function's contract
        // says; readers wait for the write's release store.
        let fixed = unsafe {
            self.started.set_alone(Started {
                origin,
                deadline,
                multi_thread: handle.runtime_flavor() == RuntimeFlavor::MultiThread,
                handle,
                runtime_workers: count(runtime_workers),
                span: crate::observe::trace::enabled(span),
            })
        };
        debug_assert!(fixed, "a run starts once");
    }

    /// Whether the run's options give it a deadline, as a timeout or an instant.
    pub(in crate::engine) fn has_deadline(&self) -> bool {
        self.timeout.is_some() || self.fixed_deadline.is_some()
    }

    /// The runtime the run's drivers are spawned on, once it started.
    pub(in crate::engine) fn handle(&self) -> Option<&Handle> {
        self.started.get().map(|s| &s.handle)
    }

    /// Whether the run starts in the task that awaits it, with [`StartMode::Inline`].
    ///
    /// [`StartMode::Inline`]: crate::engine::StartMode::Inline
    #[inline]
    pub(in crate::engine) fn is_inline(&self) -> bool {
        self.inline
    }

    /// Whether the run is inline and has not spread: the drivers it spawns are polled by its
    /// future, in the task that awaits it.
    #[inline]
    pub(in crate::engine) fn is_local(&self) -> bool {
        self.local.load(Ordering::Relaxed)
    }

    /// Where the run's future is in its poll's passes over its drivers.
    #[inline]
    pub(in crate::engine) fn passes(&self) -> &PassBudget {
        &self.passes
    }

    /// Whether the run's runtime has more than one worker thread: while one runs the run's
    /// nodes, another may be parked in tokio's drivers.
    pub(in crate::engine) fn several_workers(&self) -> bool {
        self.started.get().is_some_and(|s| s.runtime_workers > 1)
    }

    /// Whether the run's runtime keeps timers nobody waits for in its wheel: the run's timer
    /// floor ([`floor_timers`](Self::floor_timers)) and those it leaves running for a later
    /// run ([`standing_runtime`](Self::standing_runtime)). True on a multi-thread runtime,
    /// whatever its workers. Tokio wakes its drivers whenever a timer is registered that is
    /// due before any its wheel held when they last looked: with its I/O driver enabled,
    /// that is a write to the driver's event file even when no thread is parked there.
    /// With a timer standing, the later ones register without that system call, and one
    /// that stands for a later cut is not registered at all. Not on a current-thread runtime,
    /// which may run on tokio's paused clock: that clock moves to a timer left running
    /// whenever the runtime has nothing else to do.
    pub(in crate::engine) fn keeps_standing_timers(&self) -> bool {
        self.started.get().is_some_and(|s| s.multi_thread)
    }

    /// The runtime whose timers the run may take running from an earlier run, and leave
    /// running for a later one (`Spares::keep_standing`): its own, when it keeps standing
    /// timers ([`keeps_standing_timers`](Self::keeps_standing_timers)).
    pub(in crate::engine) fn standing_runtime(&self) -> Option<tokio::runtime::Id> {
        let started = self.started.get().filter(|s| s.multi_thread)?;
        Some(started.handle.id())
    }

    /// How many drivers at most drain the ready queue: the runtime's worker threads, or one
    /// for an inline run while its future drives it.
    #[inline]
    pub(in crate::engine) fn drivers(&self) -> usize {
        self.drivers.load(Ordering::Relaxed) as usize
    }

    /// The run spreads: an inline run that started more nodes in one poll of its future
    /// than that poll's budget allows, on several workers, as `driver/` says; or a spread run
    /// whose future stopped driving its first nodes. It is now scheduled over every worker: the
    /// drivers it spawns from here on are tokio tasks, nodes that become ready go to the
    /// shared queue, and drivers keeping nodes for themselves share half of them at their
    /// next node's end.
    pub(in crate::engine) fn spread(&self) {
        self.local.store(false, Ordering::Relaxed);
        if let Some(s) = self.started.get() {
            self.drivers.store(s.runtime_workers, Ordering::Relaxed);
        }
    }

    /// The run's deadline from its options, once it started.
    #[inline]
    pub(in crate::engine) fn deadline(&self) -> Option<Instant> {
        self.started.get().and_then(|s| s.deadline)
    }

    /// The run's span, once it started; a disabled one when the run's is.
    pub(in crate::engine) fn span(&self) -> Option<&tracing::Span> {
        self.started
            .get()
            .map(|s| s.span.as_ref().unwrap_or(&DISABLED))
    }

    /// Counts one more party in `live`: a driver about to be spawned.
    #[inline]
    pub(in crate::engine) fn retain(&self) {
        self.live.fetch_add(1, Ordering::Relaxed);
    }

    /// Drops `k` parties from `live`; whether this call brought it to zero, in which case
    /// the caller ends the run. AcqRel: the party that ends the run sees every record written.
    #[inline]
    pub(in crate::engine) fn release(&self, k: usize) -> bool {
        k > 0 && self.live.fetch_sub(k, Ordering::AcqRel) == k
    }

    /// Every node is done and no driver is left.
    pub(in crate::engine) fn is_over(&self) -> bool {
        self.live.load(Ordering::Acquire) == 0
    }

    /// Where the orchestrator keeps the run: set once, when it admits the run, before the
    /// run is marked admitted by `Admission::admit`, whose compare-and-swap publishes it.
    ///
    /// # Safety
    ///
    /// No other call of `keep` on this run may run at the same time: the run's future
    /// makes the one call, in its first poll, through `&mut Run`.
    #[inline]
    #[allow(unsafe_code)]
    pub(in crate::engine) unsafe fn keep(&self, key: RunKey) {
        // SAFETY: the caller is the one writer of `key`, as this function's contract says.
        let kept = unsafe { self.key.set_alone(key) };
        debug_assert!(kept, "a run is admitted once");
    }

    /// The run's standing with its orchestrator.
    #[inline]
    pub(in crate::engine) fn admission(&self) -> &Admission {
        &self.admission
    }

    /// Where the orchestrator keeps the run, once admitted.
    #[inline]
    pub(in crate::engine) fn key(&self) -> Option<RunKey> {
        self.key.get().copied()
    }

    /// Some node's outcome was recorded before the run was admitted.
    pub(in crate::engine) fn note_uncounted(&self) {
        self.uncounted.store(true, Ordering::Release);
    }

    /// Whether some node's outcome was recorded before the run was admitted.
    pub(in crate::engine) fn has_uncounted(&self) -> bool {
        self.uncounted.load(Ordering::Acquire)
    }

    /// The run's end was told to the orchestrator and the observers: its future may resolve
    /// now, and is woken if `wake`. Not waking is for an end inside the future's own poll,
    /// which looks at [`is_ended`](Self::is_ended) after polling its drivers.
    pub(in crate::engine) fn mark_ended(&self, wake: bool) {
        // Release: whoever sees it ended finds the stats and the observers told.
        self.ended.store(true, Ordering::Release);
        if wake {
            self.done.wake();
        }
    }

    /// The run is over and told so. What the run's future waits for.
    pub(in crate::engine) fn is_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// Registers the run's future to be woken when the run ends.
    pub(in crate::engine) fn wait_end(&self, waker: &Waker) {
        self.done.register(waker);
    }

    /// Marks the run cancelled for `reason`, and cancels the run-wide token if one was
    /// made; whether this call did. The first reason wins, and a run that is over is not
    /// cancelled.
    pub(in crate::engine) fn begin_cancel(&self, reason: CancelReason) -> bool {
        // The reason is set before the flag: whoever sees the flag finds the reason.
        if self.is_over() || self.reason.set(reason).is_err() {
            return false;
        }
        self.cancelled.store(true, Ordering::SeqCst);
        // Pairs with the fence in `run_token`: either it sees this flag, or we its token.
        fence(Ordering::SeqCst);
        if let Some(token) = self.token.get() {
            token.cancel();
        }
        true
    }

    #[inline]
    pub(in crate::engine) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// Wakes the future of an inline run that polls joined drivers, which then polls them
    /// all: a cancel's wake-up for those drivers, which register no waker of their own.
    /// Called after the cancel flag is set.
    pub(in crate::engine) fn wake_joined(&self) {
        self.cancel_wake.cancelled();
    }

    /// Why the run was cancelled, if it was.
    #[inline]
    pub(in crate::engine) fn reason(&self) -> Option<&CancelReason> {
        self.reason.get()
    }

    /// The run-wide token, created on first use; cancelled when the run is.
    pub(in crate::engine) fn run_token(&self) -> &CancellationToken {
        let token = self.token.get_or_init(CancellationToken::new);
        // Pairs with the fence in `begin_cancel`: either it sees this token, or we its flag.
        fence(Ordering::SeqCst);
        if self.is_cancelled() {
            token.cancel();
        }
        token
    }
}

impl Passes for RunCore {
    #[inline]
    fn again(&self) -> bool {
        self.passes.again()
    }

    #[inline]
    fn over(&self) {
        self.passes.over();
    }

    #[inline]
    fn cancelled(&self) -> bool {
        self.is_cancelled()
    }
}

/// What a run whose state is being dropped leaves for later runs of its graph: its timer
/// floor, if made, and its joined drivers' waker, if made and no one else holds it, made
/// unused.
#[derive(Debug, Default)]
pub(in crate::engine) struct Leftovers {
    pub(in crate::engine) floor: Option<KeptTimer>,
    pub(in crate::engine) woken: Option<SpareWaker>,
}

impl RunCore {
    /// What the run leaves for later runs of its graph, as its state is being dropped.
    #[inline]
    pub(in crate::engine) fn leftovers(&mut self) -> Leftovers {
        let floor = Exclusive::get_mut(&mut self.timer_floor);
        Leftovers {
            floor: floor.is_made().then(|| std::mem::take(floor)),
            woken: self.cancel_wake.spare(),
        }
    }

    /// The joined drivers' waker, made for the task of `task` of `spare()`'s if that gives
    /// one: see [`CancelWake::make`].
    pub(in crate::engine) fn make_woken(
        &self,
        task: &Waker,
        spare: impl FnOnce() -> Option<SpareWaker>,
    ) -> Arc<Woken> {
        self.cancel_wake.make(task, spare)
    }
}
