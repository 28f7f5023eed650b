//! Where a graph keeps the per-run arrays of its ended runs, [`RunBuffers`], cleared, for
//! its next runs. A run that finds a set writes its initial counters into memory it already
//! has, instead of making four allocations and, for a large graph, faulting in about
//! 130 bytes per node. Its end hands its arrays back instead of freeing them, unless the set it
//! came from holds arrays already or another run holds it at that instant.
//!
//! A small graph, run by many requests at once, keeps up to [`SETS`] sets, one per thread
//! stripe modulo that. A run takes the set of its home: that of the thread that creates it
//! by calling `Graph::run`. It gives the set back there when it ends, wherever that is, so
//! workers that each create runs of one handler's graph do not fight over one set. A
//! larger graph keeps one set, whose allocations would cost little beside its nodes anyway.
//! Whoever finds the set held at that instant allocates, or frees, its own: no run waits
//! for another; see `util/try_cell.rs`.
//!
//! What a graph keeps while idle is only the arrays, about 130 bytes per node per set; no
//! value or record, since those are dropped when the run ends. That is at most 8 sets of
//! 64 nodes, some 68 KB, for a small graph, and one set for a larger one, about 130 MB for a
//! million nodes, until the graph is dropped.

use crate::engine::run::node_state::RunBuffers;
use crate::util::striped::{Padded, stripe};
use crate::util::try_cell::TryCell;

/// How many sets of run arrays a small graph keeps at most.
const SETS: usize = 8;

/// Graphs of at most this many nodes keep a set of run arrays per thread stripe, at most
/// [`SETS`] sets of about 130 bytes per node each. Larger ones keep one.
const STRIPED_MAX_NODES: usize = 64;

/// A graph's spare run arrays.
#[derive(Debug)]
pub(crate) struct Spares {
    sets: Box<[Padded<TryCell<Option<RunBuffers>>>]>,
}

impl Spares {
    /// No spare arrays yet, for a graph of `nodes` nodes.
    pub(crate) fn new(nodes: usize) -> Self {
        let count = if nodes <= STRIPED_MAX_NODES { SETS } else { 1 };
        Spares {
            sets: (0..count).map(|_| Padded(TryCell::new(None))).collect(),
        }
    }

    /// The set that a run created on this thread by `Graph::run` takes, and gives back when
    /// it ends, on whichever thread that is: its stripe's. A run spread over the workers
    /// often ends on another thread.
    pub(crate) fn home(&self) -> usize {
        stripe() % self.sets.len().max(1)
    }

    /// Set `home`'s arrays, if it has them and no other run holds the set now.
    pub(in crate::engine) fn take(&self, home: usize) -> Option<RunBuffers> {
        self.sets.get(home)?.0.try_with(Option::take)?
    }

    /// Keeps `buffers`, cleared, in set `home` for a later run. If the set holds arrays
    /// already, or another run holds the set now, `buffers` are dropped instead, outside
    /// the set.
    pub(in crate::engine) fn put(&self, home: usize, buffers: RunBuffers) {
        let Some(set) = self.sets.get(home) else {
            return;
        };
        let refused = set.0.try_with(|set| match set {
            None => {
                *set = Some(buffers);
                None
            }
            Some(_) => Some(buffers),
        });
        drop(refused);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffers(n: usize) -> RunBuffers {
        RunBuffers::new(n, |_| 0)
    }

    #[test]
    fn small_graphs_keep_a_set_per_stripe_larger_ones_one() {
        assert_eq!(Spares::new(1).sets.len(), SETS);
        assert_eq!(Spares::new(STRIPED_MAX_NODES).sets.len(), SETS);
        assert_eq!(Spares::new(STRIPED_MAX_NODES + 1).sets.len(), 1);
    }

    #[test]
    fn a_set_put_is_taken_back_once_and_a_second_is_dropped() {
        let spares = Spares::new(3);
        let home = spares.home();
        assert!(spares.take(home).is_none());
        spares.put(home, buffers(3));
        // The stripe holds a set: this one is dropped.
        spares.put(home, buffers(5));
        let other = (home + 1) % SETS;
        assert!(spares.take(other).is_none(), "another stripe's set");
        let taken = spares.take(home).map(|b| b.nodes.len());
        assert_eq!(taken, Some(3));
        assert!(spares.take(home).is_none());
    }

    #[test]
    fn a_held_lock_makes_take_and_put_give_up_without_waiting() {
        let spares = Spares::new(100);
        assert_eq!(spares.home(), 0);
        spares.put(0, buffers(1));
        let inside = spares.sets[0].0.try_with(|_| {
            assert!(spares.take(0).is_none());
            spares.put(0, buffers(2));
        });
        assert!(inside.is_some());
        assert_eq!(spares.take(0).map(|b| b.nodes.len()), Some(1));
        assert!(spares.take(1).is_none(), "out of range");
    }
}
