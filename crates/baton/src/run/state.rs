//! Per-run state: one slot per node (join counter, lifecycle state, record), the run's
//! counters, and the three ways a node ends without running: skipped, cancelled, swept.
//!
//! # Invariants
//! 1. A slot's `state` goes `PENDING -> RUNNING -> DONE` or `PENDING -> DONE`, each step by
//!    one atomic operation, so exactly one party finalizes each node: the driver that ran it,
//!    or the one that skipped or cancelled it while it was pending.
//! 2. A slot's `record` is written once, by that party, before `remaining` is decremented
//!    for it; the run future reads records only after `remaining` reached zero.
//! 3. A node starts only when its join counter (`pending`) reaches zero *and* it is still
//!    `PENDING`. An upstream that ends without a value marks its downstreams skipped (state
//!    to `DONE`) *before* decrementing their counters, so whoever brings a counter to zero
//!    sees the skip.
//! 4. After `cancelled` is set, no node starts its task: pending nodes are swept to
//!    `Cancelled`, and drivers check the flag before and while polling a node.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicUsize, Ordering, fence};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use tokio::runtime::Handle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{FailureMode, RunId};
use crate::error::{CancelReason, NodeError};
use crate::graph::GraphInner;
use crate::report::Outcome;
use crate::task::Value;

pub(crate) const PENDING: u8 = 0;
pub(crate) const RUNNING: u8 = 1;
pub(crate) const DONE: u8 = 2;

/// What a node ended with.
#[derive(Debug)]
pub(crate) struct Record {
    pub(crate) outcome: Outcome,
    pub(crate) value: Option<Value>,
    pub(crate) error: Option<NodeError>,
    /// When its first attempt started, from the run's start; `None` if it never started.
    pub(crate) start: Option<Duration>,
    /// When it ended, from the run's start.
    pub(crate) end: Duration,
    /// For `Skipped`: the upstream that produced no value.
    pub(crate) because: Option<u32>,
}

/// One node's per-run state.
#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) pending: AtomicU32,
    pub(crate) state: AtomicU8,
    pub(crate) attempts: AtomicU32,
    pub(crate) waker: AtomicWaker,
    pub(crate) record: OnceLock<Record>,
}

/// The state of one run that does not depend on the input type.
#[derive(Debug)]
pub(crate) struct RunCore {
    pub(crate) slots: Box<[Slot]>,
    pub(crate) remaining: AtomicUsize,
    pub(crate) done: AtomicWaker,
    pub(crate) cancelled: AtomicBool,
    pub(crate) reason: OnceLock<CancelReason>,
    pub(crate) origin: OnceLock<Instant>,
    pub(crate) handle: OnceLock<Handle>,
    pub(crate) token: OnceLock<CancellationToken>,
    pub(crate) run_id: RunId,
    pub(crate) mode: FailureMode,
}

impl RunCore {
    /// Time since the run started (zero before it started).
    pub(crate) fn elapsed(&self) -> Duration {
        self.origin.get().map_or(Duration::ZERO, |o| {
            Instant::now().saturating_duration_since(*o)
        })
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
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

    /// `k` more nodes are finalized; wakes the run future when none is left.
    pub(crate) fn complete(&self, k: usize) {
        if k > 0 && self.remaining.fetch_sub(k, Ordering::AcqRel) == k {
            self.done.wake();
        }
    }

    pub(crate) fn slot(&self, id: u32) -> Option<&Slot> {
        self.slots.get(id as usize)
    }
}

/// A run: the graph, the input, and the per-run core.
pub(crate) struct RunState<I> {
    pub(crate) graph: Arc<GraphInner<I>>,
    pub(crate) input: I,
    pub(crate) core: RunCore,
}

impl<I> RunState<I> {
    pub(crate) fn new(graph: Arc<GraphInner<I>>, input: I, mode: FailureMode) -> Self {
        let meta = &graph.meta;
        let slots = (0..meta.len() as u32)
            .map(|i| Slot {
                pending: AtomicU32::new(meta.in_degree(i)),
                state: AtomicU8::new(PENDING),
                attempts: AtomicU32::new(0),
                waker: AtomicWaker::new(),
                record: OnceLock::new(),
            })
            .collect::<Box<[Slot]>>();
        let core = RunCore {
            remaining: AtomicUsize::new(slots.len()),
            slots,
            done: AtomicWaker::new(),
            cancelled: AtomicBool::new(false),
            reason: OnceLock::new(),
            origin: OnceLock::new(),
            handle: OnceLock::new(),
            token: OnceLock::new(),
            run_id: RunId::next(),
            mode,
        };
        RunState { graph, input, core }
    }

    /// Cancels the run: no node starts its task from now on; pending nodes end `Cancelled`
    /// at once, running ones as soon as their driver is polled (it is woken here). The first
    /// reason wins.
    pub(crate) fn cancel(&self, reason: CancelReason) {
        let core = &self.core;
        if core.remaining.load(Ordering::Acquire) == 0
            || core.cancelled.swap(true, Ordering::SeqCst)
        {
            return;
        }
        let _ = core.reason.set(reason);
        fence(Ordering::SeqCst);
        if let Some(token) = core.token.get() {
            token.cancel();
        }
        let now = core.elapsed();
        let mut swept = 0;
        for slot in core.slots.iter() {
            match slot
                .state
                .compare_exchange(PENDING, DONE, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    let _ = slot.record.set(Record {
                        outcome: Outcome::Cancelled,
                        value: None,
                        error: None,
                        start: None,
                        end: now,
                        because: None,
                    });
                    swept += 1;
                }
                Err(RUNNING) => slot.waker.wake(),
                Err(_) => {}
            }
        }
        core.complete(swept);
    }

    /// Marks `first` and everything downstream of it that is still pending `Skipped`;
    /// `because` is the upstream of `first` that produced no value.
    fn skip(&self, first: u32, because: u32) {
        let core = &self.core;
        let meta = &self.graph.meta;
        let now = core.elapsed();
        let mut stack = vec![(first, because)];
        while let Some((id, because)) = stack.pop() {
            let Some(slot) = core.slot(id) else { continue };
            if slot
                .state
                .compare_exchange(PENDING, DONE, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                continue;
            }
            let _ = slot.record.set(Record {
                outcome: Outcome::Skipped,
                value: None,
                error: None,
                start: None,
                end: now,
                because: Some(because),
            });
            core.complete(1);
            stack.extend(meta.downstreams(id).iter().map(|&d| (d, id)));
        }
    }
}

impl<I: Send + Sync + 'static> RunState<I> {
    /// Records how node `id` ended and releases its downstreams. Returns one downstream that
    /// became ready, for the caller to run inline; the others are spawned.
    pub(crate) fn finish(self: &Arc<Self>, id: u32, record: Record) -> Option<u32> {
        let core = &self.core;
        let Some(slot) = core.slot(id) else {
            return None;
        };
        let produced = record.value.is_some();
        let outcome = record.outcome;
        let _ = slot.record.set(record);
        slot.state.store(DONE, Ordering::Release);

        let mut next = None;
        for &d in self.graph.meta.downstreams(id) {
            if !produced && outcome != Outcome::Cancelled {
                self.skip(d, id);
            }
            let Some(ds) = core.slot(d) else { continue };
            if ds.pending.fetch_sub(1, Ordering::AcqRel) == 1
                && ds
                    .state
                    .compare_exchange(PENDING, RUNNING, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                match next {
                    None => next = Some(d),
                    Some(_) => self.spawn(d),
                }
            }
        }
        if outcome == Outcome::Failed && core.mode == FailureMode::FailFast {
            self.cancel(CancelReason::FailFast {
                node: self.graph.meta.name(id).to_owned(),
            });
        }
        core.complete(1);
        next
    }

    /// Spawns a driver for node `id`, which the caller moved to `RUNNING`.
    pub(crate) fn spawn(self: &Arc<Self>, id: u32) {
        let run = Arc::clone(self);
        match self.core.handle.get() {
            Some(handle) => {
                handle.spawn(super::exec::drive(run, id));
            }
            None => {
                tokio::spawn(super::exec::drive(run, id));
            }
        }
    }

    /// Starts the run: records its origin, and spawns every root.
    pub(crate) fn start(self: &Arc<Self>, handle: Handle) {
        let core = &self.core;
        let _ = core.origin.set(Instant::now());
        let _ = core.handle.set(handle);
        for &root in self.graph.meta.roots.iter() {
            let Some(slot) = core.slot(root) else {
                continue;
            };
            if slot
                .state
                .compare_exchange(PENDING, RUNNING, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                self.spawn(root);
            }
        }
    }
}

/// What a task's upstreams fetch their values from: the run's slots and the node's
/// resolved upstream indices.
#[doc(hidden)]
#[derive(Debug)]
pub struct FetchCx<'a> {
    pub(crate) ups: &'a [u32],
    pub(crate) slots: &'a [Slot],
    pub(crate) names: &'a [Arc<str>],
}

impl FetchCx<'_> {
    /// The value of the `pos`-th declared upstream, as a `T`.
    pub(crate) fn typed<T: Send + Sync + 'static>(&self, pos: usize) -> Option<Arc<T>> {
        let up = *self.ups.get(pos)? as usize;
        let value = self.slots.get(up)?.record.get()?.value.as_ref()?;
        Arc::clone(value).downcast::<T>().ok()
    }

    /// The name of the `pos`-th declared upstream.
    pub(crate) fn name(&self, pos: usize) -> Option<Arc<str>> {
        let up = *self.ups.get(pos)? as usize;
        self.names.get(up).cloned()
    }
}
