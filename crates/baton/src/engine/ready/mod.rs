//! The run's ready queue: nodes made ready, roots at the start and extra downstreams later,
//! that no driver has picked up yet, and the count of drivers that will pick them up.
//!
//! A few drivers drain the queue instead of one tokio task being spawned per ready node. A
//! node whose attempt ends on its first poll, such as a cache hit, a no-op or a
//! computation, then costs no spawn at all, and a million ready roots hold a million
//! `u32`s, not a million tasks. Nodes still run at once: at most `max` drivers drain the
//! queue. That cap is the runtime's worker count, or one while an inline run's future
//! drives it. A driver whose node waits, its attempt being `Pending`, stops counting as one
//! and spawns a replacement if work is waiting, so a node that waits never holds up
//! another.
//!
//! On a runtime with one worker, or in an inline run while its future drives it, which
//! counts as one, a driver keeps the extra nodes it makes ready for itself, on a stack of
//! its own. The stack is last in, first out: the node made ready last finds its upstream's
//! data still in the cache, as in Taskflow's per-worker queues, and a binary tree of
//! 100 000 nodes runs in about half the time. No other worker could take them; a driver whose
//! node waits shares its whole stack here first, and one that finds fewer drivers active
//! than `max` shares the older half of it. With more workers, every extra node is queued
//! here, where any driver takes it: a driver busy with a long computation must not sit on
//! nodes an idle worker could run. Per-driver stacks that idle drivers steal from would
//! give both, and are not built.
//!
//! Drivers take turns. One that yields to tokio, because its coop budget is spent, with
//! nodes waiting lets the oldest go first: its own next node joins the queue, or its
//! stack's bottom comes up. So a node that would start a request is not held behind a long
//! chain of nodes that end at once.
//!
//! Each node enters the queue at most once per run: whoever holds a `RUNNING` node may
//! queue it, and a node taken from the queue is never queued again. So the queue is an
//! array of one slot per node, written once, with a tail where pushers claim slots and a
//! head where drivers take them; no slot is reused within a run.
//!
//! No work is stranded. A pusher, which is a driver queuing what it made ready or the run's
//! start queuing roots, claims its slot, writes it, then reads `active` and spawns a driver
//! if fewer than `max` are active. A driver that finds the queue empty leaves `active`,
//! then looks at the queue again and stays if it is not empty. Both sides use sequentially
//! consistent operations, so at least one of them sees the other: either the pusher sees
//! too few active drivers and spawns one, or the leaving driver sees the node. The argument
//! holds whatever `max` each side reads, as long as it is at least one: a pusher that fails
//! to activate a driver saw one active after its push, and that driver looks at the queue
//! before it leaves. So the cap may change during a run, as an inline run's goes from one
//! to the worker count when its future stops driving it, and be read with a `Relaxed` load:
//! a driver that reads a stale cap only keeps or shares its nodes later. The
//! `ready_loom_tests` module model-checks this, and that each node is taken exactly once.

pub(super) mod schedule;

use std::sync::atomic::{AtomicU32, Ordering};

use crate::util::sync::{AtomicInt, StdSync, SyncFamily};

/// What [`ReadyQueue::pop`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pop {
    /// A ready node, now the caller's to run.
    Node(u32),
    /// A pusher has claimed the next slot but not written it yet: try again shortly.
    Busy,
    /// Nothing is waiting.
    Empty,
}

/// See the module docs. Generic over its atomics: std's, or loom's in the model-checking
/// tests.
#[derive(Debug)]
pub(crate) struct ReadyQueue<S: SyncFamily = StdSync> {
    /// Node id + 1 per slot; 0 while not written.
    slots: Box<[S::AtomicU32]>,
    head: S::AtomicUsize,
    tail: S::AtomicUsize,
    /// Drivers that will look at the queue before they end or wait.
    active: S::AtomicUsize,
}

impl ReadyQueue {
    /// Fresh zeroed slots for `n` nodes.
    pub(crate) fn slots(n: usize) -> Box<[AtomicU32]> {
        (0..n).map(|_| AtomicU32::new(0)).collect()
    }
}

impl<S: SyncFamily> ReadyQueue<S> {
    /// A queue for a run over `slots`, one per node, all zero.
    pub(crate) fn new(slots: Box<[S::AtomicU32]>) -> Self {
        ReadyQueue {
            slots,
            head: AtomicInt::new(0),
            tail: AtomicInt::new(0),
            active: AtomicInt::new(0),
        }
    }

    /// Gives the slots back, zeroed, for the graph's next run.
    pub(crate) fn into_slots(mut self) -> Box<[S::AtomicU32]> {
        let mut slots = self.slots;
        let written = self.tail.with_mut(|tail| *tail).min(slots.len());
        for slot in &mut slots[..written] {
            slot.with_mut(|id| *id = 0);
        }
        slots
    }

    /// Adds `id`, which the caller moved to `RUNNING`. Gives it back if the queue is full,
    /// which only a node pushed twice could cause, a bug: the caller then runs it itself.
    pub(crate) fn push(&self, id: u32) -> Result<(), u32> {
        let at = self.tail.fetch_add(1, Ordering::SeqCst);
        match self.slots.get(at) {
            Some(slot) => {
                slot.store(id + 1, Ordering::Release);
                Ok(())
            }
            None => {
                self.tail.fetch_sub(1, Ordering::SeqCst);
                Err(id)
            }
        }
    }

    /// Takes the oldest ready node.
    pub(crate) fn pop(&self) -> Pop {
        loop {
            let head = self.head.load(Ordering::SeqCst);
            if head >= self.tail.load(Ordering::SeqCst) {
                return Pop::Empty;
            }
            let Some(slot) = self.slots.get(head) else {
                return Pop::Empty;
            };
            let id = slot.load(Ordering::Acquire);
            if id == 0 {
                return Pop::Busy;
            }
            if self
                .head
                .compare_exchange(head, head + 1, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
            {
                return Pop::Node(id - 1);
            }
        }
    }

    /// Whether fewer than `max` drivers are active: a worker may be idle, and nodes a driver
    /// keeps for itself should rather be shared. One load of a rarely written counter.
    pub(crate) fn wants_help(&self, max: usize) -> bool {
        self.active.load(Ordering::Relaxed) < max
    }

    /// How many drivers are counted active, for tests.
    #[cfg(test)]
    pub(crate) fn active(&self) -> usize {
        self.active.load(Ordering::SeqCst)
    }

    /// Whether no node is waiting. A slot claimed but not yet written counts as waiting.
    pub(crate) fn is_empty(&self) -> bool {
        self.head.load(Ordering::SeqCst) >= self.tail.load(Ordering::SeqCst)
    }

    /// Counts one more active driver if fewer than `max` are, and returns whether it did.
    /// The caller then spawns that driver, or stays one.
    pub(crate) fn try_activate(&self, max: usize) -> bool {
        let mut now = self.active.load(Ordering::SeqCst);
        while now < max {
            match self.active.compare_exchange_weak(
                now,
                now + 1,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return true,
                Err(seen) => now = seen,
            }
        }
        false
    }

    /// Counts a driver that goes back to the queue after its node waited, whatever the
    /// count; it may exceed `max` for a while.
    pub(crate) fn activate(&self) {
        self.active.fetch_add(1, Ordering::SeqCst);
    }

    /// A driver stops being active: it ends, or its node waits. Returns whether a node is
    /// waiting and the caller should be, or spawn, an active driver again; it then counted
    /// itself back in. `false`: someone else will take what comes.
    pub(crate) fn leave(&self, max: usize) -> bool {
        self.active.fetch_sub(1, Ordering::SeqCst);
        !self.is_empty() && self.try_activate(max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_come_out_in_order_once() {
        let q: ReadyQueue = ReadyQueue::new(ReadyQueue::slots(3));
        assert_eq!(q.pop(), Pop::Empty);
        assert!(q.push(7).is_ok());
        assert!(q.push(0).is_ok());
        assert!(!q.is_empty());
        assert_eq!(q.pop(), Pop::Node(7));
        assert_eq!(q.pop(), Pop::Node(0));
        assert_eq!(q.pop(), Pop::Empty);
        assert!(q.push(2).is_ok());
        assert_eq!(q.push(5), Err(5), "a fourth push overflows three slots");
        assert_eq!(q.pop(), Pop::Node(2));
        assert!(q.is_empty());
        let slots = q.into_slots();
        assert!(slots.iter().all(|s| s.load(Ordering::Relaxed) == 0));
    }

    #[test]
    fn a_claimed_slot_not_yet_written_is_busy() {
        let q: ReadyQueue = ReadyQueue::new(ReadyQueue::slots(2));
        q.tail.fetch_add(1, Ordering::SeqCst);
        assert_eq!(q.pop(), Pop::Busy);
        assert!(!q.is_empty());
    }

    #[test]
    fn active_drivers_are_capped_and_a_leaver_stays_for_waiting_work() {
        let q: ReadyQueue = ReadyQueue::new(ReadyQueue::slots(2));
        assert!(q.try_activate(2));
        assert!(q.try_activate(2));
        assert!(!q.try_activate(2));
        assert!(!q.leave(2), "nothing waits: the driver may go");
        assert!(q.push(1).is_ok());
        assert!(q.leave(2), "a node waits: the leaver counts itself back in");
        assert_eq!(q.active.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn concurrent_pushers_and_poppers_see_every_node_once() {
        let n = 20_000u32;
        let q: std::sync::Arc<ReadyQueue> =
            std::sync::Arc::new(ReadyQueue::new(ReadyQueue::slots(n as usize)));
        let seen: std::sync::Arc<Vec<AtomicU32>> =
            std::sync::Arc::new((0..n).map(|_| AtomicU32::new(0)).collect());
        let pushers: Vec<_> = (0..2)
            .map(|t| {
                let q = std::sync::Arc::clone(&q);
                std::thread::spawn(move || {
                    for id in (t..n).step_by(2) {
                        assert!(q.push(id).is_ok());
                    }
                })
            })
            .collect();
        let taken = std::sync::Arc::new(AtomicU32::new(0));
        let poppers: Vec<_> = (0..2)
            .map(|_| {
                let q = std::sync::Arc::clone(&q);
                let seen = std::sync::Arc::clone(&seen);
                let taken = std::sync::Arc::clone(&taken);
                std::thread::spawn(move || {
                    while taken.load(Ordering::Relaxed) < n {
                        match q.pop() {
                            Pop::Node(id) => {
                                seen[id as usize].fetch_add(1, Ordering::Relaxed);
                                taken.fetch_add(1, Ordering::Relaxed);
                            }
                            Pop::Busy | Pop::Empty => std::hint::spin_loop(),
                        }
                    }
                })
            })
            .collect();
        for t in pushers.into_iter().chain(poppers) {
            t.join().unwrap();
        }
        assert!(seen.iter().all(|s| s.load(Ordering::Relaxed) == 1));
        assert_eq!(q.pop(), Pop::Empty);
    }
}

#[cfg(test)]
mod ready_loom_tests;
