//! Model checking with loom: every interleaving, up to two preemptions, of two or three
//! threads pushing to, popping from and leaving one ready queue.
//!
//! The queue is instantiated with [`LoomSync`], loom's atomics, through the sync shim, so
//! these run under a plain `cargo test`. The threads do with the queue what the run does. A
//! pusher is `RunState::schedule`: push, then count a driver in, to be spawned, if fewer
//! than the cap are active. A driver is `Driver::next_from_queue`: take nodes; on `Busy`
//! look again later; on `Empty` leave, and stay if `leave` says a node waits. A driver that
//! a pusher counted in would be spawned: the model's main thread plays it once the others
//! are done.

use std::sync::atomic::Ordering::{self, Relaxed};

use loom::sync::Arc;
use loom::sync::atomic::AtomicBool;
use loom::thread;

use super::{Pop, ReadyQueue};
use crate::util::sync::{AtomicInt, LoomSync};

type Q = ReadyQueue<LoomSync>;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(f);
}

/// A queue with `n` slots and no active driver.
///
/// Its counters are set to zero again with `SeqCst` stores. Loom treats the value an atomic
/// is created with as a store that is not `SeqCst`, and lets a `SeqCst` load return it even
/// after a newer `SeqCst` store that the loading thread has not synchronized with. The
/// memory model forbids that: a `SeqCst` load cannot read a value older than a `SeqCst`
/// store that precedes it in the single total order. Without these stores loom reports the
/// queue's store-buffering pattern as stranding a node, in executions the memory model
/// rules out. In that pattern a pusher writes `tail` then reads `active`, and a leaving
/// driver writes `active` then reads `tail`.
fn queue(n: usize) -> Arc<Q> {
    let q: Q = ReadyQueue::new((0..n).map(|_| AtomicInt::new(0)).collect());
    for counter in [&q.head, &q.tail, &q.active] {
        counter.store(0, Ordering::SeqCst);
    }
    Arc::new(q)
}

/// A pusher: queues `id`, then counts a driver in if fewer than `max` are active. Returns
/// whether it did, and so would spawn that driver.
fn schedule(q: &Q, id: u32, max: usize) -> bool {
    assert_eq!(q.push(id), Ok(()));
    q.try_activate(max)
}

/// A driver counted active: takes nodes until the queue is empty and `leave` lets it go.
/// Returns the nodes it took, each checked against `published`, which is what their pushers
/// wrote before pushing them.
fn drive(q: &Q, max: usize, published: &[AtomicBool]) -> Vec<u32> {
    let mut took = Vec::new();
    loop {
        match q.pop() {
            Pop::Node(id) => {
                assert!(
                    published[id as usize].load(Relaxed),
                    "node {id} taken before its pusher's writes are visible"
                );
                took.push(id);
            }
            Pop::Busy => thread::yield_now(),
            Pop::Empty => {
                if !q.leave(max) {
                    return took;
                }
            }
        }
    }
}

/// Flags for nodes `0..n`, each set by its pusher before the push.
fn flags(n: usize) -> Arc<Vec<AtomicBool>> {
    Arc::new((0..n).map(|_| AtomicBool::new(false)).collect())
}

/// One pusher, reading cap `push_max`, races the only active driver, which finds the queue
/// empty and leaves, reading cap `leave_max`. Whatever the interleaving, either the pusher
/// counts a driver in or the leaving driver sees the node and stays: the node is never
/// stranded, and is taken exactly once.
fn push_races_leave(push_max: usize, leave_max: usize) {
    model(move || {
        let (q, published) = (queue(1), flags(1));
        assert!(q.try_activate(leave_max), "the driver");
        let pusher = {
            let (q, published) = (Arc::clone(&q), Arc::clone(&published));
            thread::spawn(move || {
                published[0].store(true, Relaxed);
                schedule(&q, 0, push_max)
            })
        };
        let driver = {
            let (q, published) = (Arc::clone(&q), Arc::clone(&published));
            thread::spawn(move || drive(&q, leave_max, &published))
        };
        let spawned = pusher.join().unwrap();
        let mut took = driver.join().unwrap();
        assert_eq!(
            q.active(),
            usize::from(spawned),
            "only the driver the pusher counted in is still active"
        );
        if spawned {
            took.extend(drive(&q, push_max, &published));
        } else {
            assert!(
                q.is_empty(),
                "node 0 stranded: queued, and no driver to take it"
            );
        }
        assert_eq!(took, [0]);
        assert_eq!(q.active(), 0);
    });
}

#[test]
fn a_push_racing_a_leaving_driver_is_never_stranded() {
    push_races_leave(1, 1);
}

/// The cap may change during a run; the argument holds whatever cap each side reads.
#[test]
fn a_push_racing_a_leaving_driver_is_never_stranded_whatever_cap_each_reads() {
    push_races_leave(1, 2);
}

/// Two pushers race one driver, with a cap of one: each node is taken exactly once, after
/// what its pusher wrote before pushing it, and none is left in the queue without a driver.
#[test]
fn two_pushers_and_one_driver_take_each_node_once() {
    model(|| {
        let (q, published) = (queue(2), flags(2));
        assert!(q.try_activate(1), "the driver");
        let pushers: Vec<_> = (0..2u32)
            .map(|id| {
                let (q, published) = (Arc::clone(&q), Arc::clone(&published));
                thread::spawn(move || {
                    published[id as usize].store(true, Relaxed);
                    schedule(&q, id, 1)
                })
            })
            .collect();
        let driver = {
            let (q, published) = (Arc::clone(&q), Arc::clone(&published));
            thread::spawn(move || drive(&q, 1, &published))
        };
        let spawned = pushers
            .into_iter()
            .map(|p| usize::from(p.join().unwrap()))
            .sum::<usize>();
        let mut took = driver.join().unwrap();
        assert_eq!(
            q.active(),
            spawned,
            "only the drivers counted in are active"
        );
        assert!(spawned <= 1, "the cap is one");
        if spawned == 1 {
            took.extend(drive(&q, 1, &published));
        } else {
            assert!(q.is_empty(), "stranded: {took:?} taken, no driver left");
        }
        took.sort_unstable();
        assert_eq!(took, [0, 1]);
    });
}

/// Two active drivers race for two queued nodes: each is taken by exactly one of them.
#[test]
fn two_drivers_take_each_queued_node_once() {
    model(|| {
        let (q, published) = (queue(2), flags(2));
        for id in 0..2 {
            published[id as usize].store(true, Relaxed);
            assert_eq!(q.push(id), Ok(()));
        }
        assert!(q.try_activate(2) && q.try_activate(2));
        let drivers: Vec<_> = (0..2)
            .map(|_| {
                let (q, published) = (Arc::clone(&q), Arc::clone(&published));
                thread::spawn(move || drive(&q, 2, &published))
            })
            .collect();
        let mut took: Vec<u32> = drivers
            .into_iter()
            .flat_map(|d| d.join().unwrap())
            .collect();
        took.sort_unstable();
        assert_eq!(took, [0, 1]);
        assert_eq!((q.active(), q.pop()), (0, Pop::Empty));
    });
}

/// A popper that comes between a push's claim and its write finds `Busy`, not `Empty`. The
/// queue counts the node as waiting, so a leaving driver stays for it, and the popper gets
/// it once it is written.
#[test]
fn a_claimed_slot_not_yet_written_is_busy_then_taken() {
    static SAW_BUSY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    model(|| {
        let q = queue(1);
        let pusher = {
            let q = Arc::clone(&q);
            thread::spawn(move || assert_eq!(q.push(0), Ok(())))
        };
        let popper = {
            let q = Arc::clone(&q);
            thread::spawn(move || {
                loop {
                    match q.pop() {
                        Pop::Node(id) => return id,
                        Pop::Busy => {
                            SAW_BUSY.store(true, Relaxed);
                            assert!(!q.is_empty(), "a claimed slot counts as waiting");
                            thread::yield_now();
                        }
                        Pop::Empty => thread::yield_now(),
                    }
                }
            })
        };
        pusher.join().unwrap();
        assert_eq!(popper.join().unwrap(), 0);
        assert_eq!(q.pop(), Pop::Empty);
    });
    assert!(
        SAW_BUSY.load(Relaxed),
        "no interleaving reached a claimed, unwritten slot"
    );
}
