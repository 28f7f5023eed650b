//! One node's per-run state. [`NodeState`] holds its lifecycle and join counter, the
//! protocol every party that starts or ends a node goes through. [`Slot`] holds the rest of
//! its bookkeeping, and [`RunBuffers`] the per-run arrays of both.
//!
//! A node's lifecycle goes `PENDING -> RUNNING -> DONE` or `PENDING -> DONE`, each step one
//! atomic operation, so exactly one party finalizes each node: whoever moved it to
//! `RUNNING` and ran it, or whoever moved it straight to `DONE` when it was skipped, not
//! taken, or cancelled while pending. Only [`NodeState`]'s methods touch its atomics.
//!
//! The join counter is counted down with a locked subtraction, except while an inline run
//! is local: every upstream then ends on the thread polling the run's future, and a load
//! and a store count it. Only that thread clears the run's `local` flag
//! (`RunCore::spread`), and it does so before it spawns any driver as a tokio task; the
//! loom model in `node_state_loom_tests.rs` checks counts made before and after that point.
//! In debug builds the store is a swap that checks no other count came in between.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use futures_util::task::AtomicWaker;

use crate::engine::ready::ReadyQueue;
use crate::report::Settled;
use crate::util::once::WriteOnce;
use crate::util::sync::{AtomicInt, StdSync, SyncFamily};
use crate::util::value::Value;

const PENDING: u8 = 0;
const RUNNING: u8 = 1;
const DONE: u8 = 2;

/// What the scheduler touches for every edge: a node's join counter and lifecycle state,
/// eight bytes, in an array of their own. A million nodes' worth fits in the cache, where
/// the records would not. Generic over its atomics: std's, or loom's in the model-checking
/// tests (`node_state_loom_tests.rs`).
#[derive(Debug)]
pub(in crate::engine) struct NodeState<S: SyncFamily = StdSync> {
    /// Upstreams that have not ended yet.
    pending: S::AtomicU32,
    state: S::AtomicU8,
}

/// What [`NodeState::claim`] did.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::engine) enum Claim {
    /// The node was pending and is now `RUNNING`: the caller runs it or queues it.
    Claimed,
    /// Someone else already started or ended it.
    Taken,
}

/// What [`NodeState::pass_over`] did.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::engine) enum PassOver {
    /// The node was pending and is now `DONE` without running: the caller records it.
    PassedOver,
    /// Someone else already started or ended it.
    Taken,
}

/// What [`NodeState::release_upstream`] did.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::engine) enum Release {
    /// This was its last upstream and the node was pending: it is now `RUNNING`, the
    /// caller's to run or queue.
    Ready,
    /// Other upstreams have not ended yet.
    Waiting,
    /// Its last upstream ended, but the node was already ended: skipped or cancelled.
    Ended,
}

impl<S: SyncFamily> NodeState<S> {
    /// A pending node with `upstreams` upstreams.
    fn new(upstreams: u32) -> Self {
        NodeState {
            pending: S::AtomicU32::new(upstreams),
            state: S::AtomicU8::new(PENDING),
        }
    }

    /// Makes it pending again with `upstreams` upstreams, for a new run.
    fn reset(&mut self, upstreams: u32) {
        self.pending.with_mut(|n| *n = upstreams);
        self.state.with_mut(|s| *s = PENDING);
    }

    /// `PENDING -> RUNNING`: a root at the run's start, a branch chosen by its router.
    #[inline]
    pub(in crate::engine) fn claim(&self) -> Claim {
        // Acquire on success: the node's slot and inputs, written by whoever ended its
        // upstreams, are read next; on failure, so is the record of whoever ended it.
        match self
            .state
            .compare_exchange(PENDING, RUNNING, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Claim::Claimed,
            Err(_) => Claim::Taken,
        }
    }

    /// `PENDING -> DONE`: the node ends without running, when skipped, not taken or cancelled.
    #[inline]
    pub(in crate::engine) fn pass_over(&self) -> PassOver {
        match self
            .state
            .compare_exchange(PENDING, DONE, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => PassOver::PassedOver,
            Err(_) => PassOver::Taken,
        }
    }

    /// One upstream of the node ended: counts it down, and claims the node when it was the
    /// last. An upstream that ends without a value passes its downstreams over before it
    /// releases them, so whoever brings the count to zero sees the skip.
    ///
    /// `local`: the run is local, so that every upstream of the node ends on the thread
    /// that polls the run's future, one poll after the other; the count is then a load and
    /// a store, not a locked subtraction. Only that thread makes a run stop being local,
    /// before it spawns the drivers that then count with it.
    #[inline]
    pub(in crate::engine) fn release_upstream(&self, local: bool) -> Release {
        let left = if local {
            let n = self.pending.load(Ordering::Relaxed);
            if cfg!(debug_assertions) {
                let was = self.pending.swap(n.wrapping_sub(1), Ordering::Relaxed);
                debug_assert_eq!(was, n, "a local run's join counter counted on two threads");
            } else {
                self.pending.store(n.wrapping_sub(1), Ordering::Relaxed);
            }
            n
        } else {
            // AcqRel: the last upstream to end sees every other upstream's value written.
            self.pending.fetch_sub(1, Ordering::AcqRel)
        };
        if left != 1 {
            return Release::Waiting;
        }
        match self.claim() {
            Claim::Claimed => Release::Ready,
            Claim::Taken => Release::Ended,
        }
    }

    /// `RUNNING -> DONE`: the caller, which claimed the node, has written its record and
    /// value. Release: whoever sees `DONE` sees them.
    #[inline]
    pub(in crate::engine) fn finish(&self) {
        debug_assert_eq!(self.state.load(Ordering::Relaxed), RUNNING);
        self.state.store(DONE, Ordering::Release);
    }

    /// Whether some driver is running it: claimed, not finished.
    #[inline]
    pub(in crate::engine) fn is_running(&self) -> bool {
        self.state.load(Ordering::Acquire) == RUNNING
    }

    /// Whether it ended.
    #[inline]
    pub(in crate::engine) fn is_done(&self) -> bool {
        self.state.load(Ordering::SeqCst) == DONE
    }
}

/// The rest of one node's per-run state: written by whoever runs the node, one party at a
/// time, and read by the report once the node ended.
#[derive(Debug)]
pub(in crate::engine) struct Slot {
    attempts: AtomicU32,
    /// Counted in the orchestrator's `nodes_in_flight` gauge, as it started; uncounted when
    /// it ends. A node cancelled or abandoned before it started was never counted.
    counted: AtomicBool,
    /// Its outcome is not in the orchestrator's counters yet: it was recorded before its run
    /// was marked admitted; see `RunState::report_end`.
    uncounted: AtomicBool,
    /// Blocking attempts abandoned by a timeout or a cancel while their closure still ran.
    abandoned: AtomicU32,
    /// The driver running the node, woken when the run is cancelled.
    waker: AtomicWaker,
    record: WriteOnce<Settled>,
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

    /// Counts an attempt. Only whoever runs the node counts, one attempt after the other:
    /// a load and a store, not a locked add.
    #[inline]
    pub(in crate::engine) fn count_attempt(&self) {
        let n = self.attempts.load(Ordering::Relaxed);
        self.attempts.store(n.wrapping_add(1), Ordering::Relaxed);
    }

    /// How many attempts started.
    #[inline]
    pub(in crate::engine) fn attempts(&self) -> u32 {
        self.attempts.load(Ordering::SeqCst)
    }

    /// Marks the node counted in the in-flight gauge; whether this call did, which it does
    /// only if the node was not counted yet.
    /// Only whoever runs the node calls it: a load and a store do what a swap would.
    #[inline]
    pub(in crate::engine) fn mark_counted(&self) -> bool {
        if self.counted.load(Ordering::Relaxed) {
            return false;
        }
        self.counted.store(true, Ordering::Relaxed);
        true
    }

    /// Whether the node is counted in the in-flight gauge.
    #[inline]
    pub(in crate::engine) fn is_counted(&self) -> bool {
        self.counted.load(Ordering::Relaxed)
    }

    /// Marks the node's outcome as not counted yet: it was recorded before its run was admitted.
    pub(in crate::engine) fn mark_uncounted(&self) {
        self.uncounted.store(true, Ordering::Relaxed);
    }

    /// Whether the node's outcome was recorded before its run was admitted.
    pub(in crate::engine) fn is_uncounted(&self) -> bool {
        self.uncounted.load(Ordering::Relaxed)
    }

    /// Counts a blocking attempt abandoned while its closure still ran.
    pub(in crate::engine) fn count_abandoned(&self) {
        self.abandoned.fetch_add(1, Ordering::Relaxed);
    }

    /// How many blocking attempts were abandoned while their closure still ran.
    pub(in crate::engine) fn abandoned(&self) -> u32 {
        self.abandoned.load(Ordering::Acquire)
    }

    /// Registers the waker of the driver that waits on the node's attempt.
    #[inline]
    pub(in crate::engine) fn register(&self, waker: &std::task::Waker) {
        self.waker.register(waker);
    }

    /// Wakes the driver waiting on the node's attempt, if any.
    pub(in crate::engine) fn wake(&self) {
        self.waker.wake();
    }

    /// The node's record, once written.
    #[inline]
    pub(in crate::engine) fn record(&self) -> Option<&Settled> {
        self.record.get()
    }

    /// Writes the node's record, once: only whoever finalizes the node writes it.
    ///
    /// # Safety
    ///
    /// The caller finalizes the node, as invariant 1 of `state.rs` says: no other call of
    /// this method on this slot runs at the same time.
    #[inline]
    #[allow(unsafe_code)]
    pub(in crate::engine) unsafe fn set_record(&self, record: Settled) {
        // SAFETY: the caller is the node's one finalizer, so the only writer of its record.
        let written = unsafe { self.record.set_alone(record) };
        debug_assert!(written, "a node's record is written once");
    }
}

/// The per-run arrays of one run: node states, slots, values, ready-queue slots.
///
/// The graph keeps those of its ended runs for its next runs, cleared so that no value or
/// record survives its run; see `graph/spare.rs`.
#[derive(Debug)]
pub(in crate::engine) struct RunBuffers {
    pub(in crate::engine) nodes: Box<[NodeState]>,
    pub(in crate::engine) slots: Box<[Slot]>,
    pub(in crate::engine) values: Box<[WriteOnce<Value>]>,
    pub(in crate::engine) queue: Box<[AtomicU32]>,
}

impl RunBuffers {
    /// Fresh arrays for a graph whose node `i` has `in_degree(i)` upstreams.
    pub(in crate::engine) fn new(n: usize, in_degree: impl Fn(u32) -> u32) -> Self {
        RunBuffers {
            nodes: (0..n as u32)
                .map(|i| NodeState::new(in_degree(i)))
                .collect(),
            // From a constant, not a value built on the stack: LLVM then writes each slot
            // with a few stores instead of building it and copying it over. The copy costs a
            // store-forwarding stall per slot, the most costly part of a small run's start.
            slots: (0..n).map(|_| Slot::EMPTY).collect(),
            values: (0..n).map(|_| WriteOnce::new()).collect(),
            queue: ReadyQueue::slots(n),
        }
    }

    /// Resets arrays that [`clear`](Self::clear) emptied for a new run.
    pub(in crate::engine) fn reset(&mut self, in_degree: impl Fn(u32) -> u32) {
        for (i, node) in self.nodes.iter_mut().enumerate() {
            node.reset(in_degree(i as u32));
        }
    }

    /// Drops every record, value and waker of the run that used them, so that nothing
    /// outlives its run, and zeroes the counters.
    pub(in crate::engine) fn clear(&mut self) {
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

#[cfg(test)]
mod node_state_loom_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_claimed_or_passed_over_once() {
        let node: NodeState = NodeState::new(0);
        assert_eq!(node.claim(), Claim::Claimed);
        assert_eq!(node.claim(), Claim::Taken);
        assert_eq!(node.pass_over(), PassOver::Taken);
        assert!(node.is_running() && !node.is_done());
        node.finish();
        assert!(node.is_done() && !node.is_running());
        let skipped: NodeState = NodeState::new(2);
        assert_eq!(skipped.pass_over(), PassOver::PassedOver);
        assert_eq!(skipped.claim(), Claim::Taken);
        assert!(skipped.is_done());
    }

    #[test]
    fn the_last_upstream_to_end_claims_a_pending_node() {
        let node: NodeState = NodeState::new(2);
        assert_eq!(node.release_upstream(false), Release::Waiting);
        assert_eq!(node.release_upstream(false), Release::Ready);
        assert!(node.is_running());
        let skipped: NodeState = NodeState::new(2);
        assert_eq!(skipped.pass_over(), PassOver::PassedOver);
        assert_eq!(skipped.release_upstream(false), Release::Waiting);
        assert_eq!(skipped.release_upstream(false), Release::Ended);
    }

    #[test]
    fn a_cleared_set_of_arrays_is_pending_again() {
        let mut buffers = RunBuffers::new(3, |i| i);
        assert_eq!(buffers.nodes[2].release_upstream(false), Release::Waiting);
        assert_eq!(buffers.nodes[0].claim(), Claim::Claimed);
        buffers.slots[0].count_attempt();
        // SAFETY: this test is the slot's only writer.
        #[allow(unsafe_code)]
        unsafe {
            buffers.slots[0].set_record(Settled::empty(
                crate::report::Outcome::Succeeded,
                tokio::time::Instant::now(),
            ));
        }
        buffers.clear();
        buffers.reset(|i| i);
        assert_eq!(buffers.slots[0].attempts(), 0);
        assert!(buffers.slots[0].record().is_none());
        assert_eq!(buffers.nodes[0].claim(), Claim::Claimed);
        assert_eq!(buffers.nodes[2].release_upstream(false), Release::Waiting);
        assert_eq!(buffers.nodes[2].release_upstream(false), Release::Ready);
    }
}
