//! Model checking with loom: a node's join counter, counted down by upstreams that end on
//! the thread polling an inline run's future while the run is local, then, once that thread
//! spread the run, by it and by the drivers it spawned, while a cancel passes the node over.
//!
//! The thread polling the run's future counts with a load and a store while the run is
//! local, as `RunState::finish_inner` does (in these debug builds, a load and a swap that
//! asserts nothing came in between); every other count is a locked subtraction. Each
//! upstream writes its value before it counts, with a relaxed store: whoever claims the
//! node must see every value, which only the counter's ordering can give it.

use std::sync::atomic::Ordering::Relaxed;

use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use loom::thread;

use super::{NodeState, PassOver, Release};
use crate::util::sync::LoomSync;

type Node = NodeState<LoomSync>;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(f);
}

/// What the model's threads share: the node, its upstreams' values, whether the run is
/// local, and how many parties claimed or passed over the node.
struct Run {
    node: Node,
    values: [AtomicU64; 3],
    local: AtomicBool,
    finalized: AtomicUsize,
}

impl Run {
    fn new() -> Arc<Run> {
        Arc::new(Run {
            node: NodeState::new(3),
            values: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
            local: AtomicBool::new(true),
            finalized: AtomicUsize::new(0),
        })
    }

    /// Upstream `i` ends: writes its value, then counts the node down, as the run is.
    fn end_upstream(&self, i: usize) {
        self.values[i].store(10 + i as u64, Relaxed);
        match self.node.release_upstream(self.local.load(Relaxed)) {
            Release::Ready => {
                for (i, value) in self.values.iter().enumerate() {
                    assert_eq!(value.load(Relaxed), 10 + i as u64, "upstream {i}'s value");
                }
                self.finalized.fetch_add(1, Relaxed);
            }
            Release::Waiting | Release::Ended => {}
        }
    }

    /// The thread polling the run's future stops it being local.
    fn spread(&self) {
        self.local.store(false, Relaxed);
    }
}

#[test]
fn counts_before_and_after_a_spread_claim_the_node_once_with_every_value() {
    model(|| {
        let run = Run::new();
        run.end_upstream(0);
        run.spread();
        let spawned = {
            let run = Arc::clone(&run);
            thread::spawn(move || {
                assert!(!run.local.load(Relaxed), "a spawned driver sees the spread");
                run.end_upstream(2);
            })
        };
        run.end_upstream(1);
        spawned.join().expect("the spawned driver");
        assert_eq!(run.finalized.load(Relaxed), 1);
        assert!(run.node.is_running());
    });
}

#[test]
fn a_cancel_racing_counts_before_and_after_a_spread_leaves_one_finalizer() {
    model(|| {
        let run = Run::new();
        let cancel = {
            let run = Arc::clone(&run);
            thread::spawn(move || {
                if run.node.pass_over() == PassOver::PassedOver {
                    run.finalized.fetch_add(1, Relaxed);
                }
            })
        };
        run.end_upstream(0);
        run.spread();
        let spawned = {
            let run = Arc::clone(&run);
            thread::spawn(move || run.end_upstream(2))
        };
        run.end_upstream(1);
        spawned.join().expect("the spawned driver");
        cancel.join().expect("the cancel");
        assert_eq!(run.finalized.load(Relaxed), 1);
    });
}
