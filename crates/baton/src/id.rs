//! Identifiers: a run's id, a node's typed handle, and the idempotency key of one node in
//! one run. Plain values that every layer above may hold; nothing here reaches a graph or
//! a run.

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A typed handle to one node of a graph; `T` is the type of the value the node produces.
///
/// [`NodeBuilder::task`](crate::NodeBuilder::task) returns it. Pass it to
/// [`NodeBuilder::after`](crate::NodeBuilder::after), alone or in a tuple, to make the node
/// an upstream of another, and to [`Report::get`](crate::Report::get) to read the value a
/// run produced. It is `Copy` whatever `T` is, `Send` and `Sync`, and two words wide.
///
/// A handle belongs to the builder that returned it: giving it to another builder is a
/// [`BuildError::ForeignHandle`](crate::BuildError::ForeignHandle), and a report of another
/// graph answers `None` for it.
pub struct Node<T> {
    pub(crate) graph: u64,
    pub(crate) index: u32,
    _value: PhantomData<fn() -> T>,
}

impl<T> Node<T> {
    pub(crate) fn new(graph: u64, index: u32) -> Self {
        Node {
            graph,
            index,
            _value: PhantomData,
        }
    }

    /// The node's position in its graph, counting from 0 in the order nodes were added.
    #[must_use]
    pub fn index(self) -> usize {
        self.index as usize
    }
}

impl<T> Clone for Node<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Node<T> {}

impl<T> PartialEq for Node<T> {
    fn eq(&self, other: &Self) -> bool {
        self.graph == other.graph && self.index == other.index
    }
}

impl<T> Eq for Node<T> {}

impl<T> std::hash::Hash for Node<T> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.graph.hash(state);
        self.index.hash(state);
    }
}

impl<T> fmt::Debug for Node<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node")
            .field("graph", &self.graph)
            .field("index", &self.index)
            .field("type", &std::any::type_name::<T>())
            .finish()
    }
}

/// The identity of one run: 64 random bits per process and a 64-bit number unique in the
/// process. The numbers of runs one thread creates count up; those of runs created on
/// different threads follow no order among them.
///
/// Displays as 32 lowercase hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunId {
    process: u64,
    seq: u64,
}

impl RunId {
    /// A fresh id: this process's random half and the thread's next number. A thread takes
    /// its numbers from the process's counter [`SEQ_BLOCK`] at a time, so that workers
    /// creating runs do not all write one counter.
    pub(crate) fn next() -> Self {
        static PROCESS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let process = *PROCESS.get_or_init(|| {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(std::process::id());
            h.finish()
        });
        RunId {
            process,
            seq: next_seq(),
        }
    }

    pub(crate) fn seq(self) -> u64 {
        self.seq
    }

    /// The id as one 128-bit number.
    #[must_use]
    pub fn as_u128(self) -> u128 {
        (u128::from(self.process) << 64) | u128::from(self.seq)
    }
}

/// How many run numbers a thread takes from the process's counter at once.
const SEQ_BLOCK: u64 = 1024;

/// The process's counter of run numbers, handed out in blocks, or one by one to a thread
/// whose thread-locals are gone. Each block or number is taken once, so no two runs share
/// one.
static SEQ: AtomicU64 = AtomicU64::new(1);

/// The calling thread's next run number.
fn next_seq() -> u64 {
    thread_local! {
        /// The thread's next number and the end of its block.
        static BLOCK: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
    }
    BLOCK
        .try_with(|block| {
            let (next, end) = block.get();
            if next < end {
                block.set((next + 1, end));
                return next;
            }
            let first = SEQ.fetch_add(SEQ_BLOCK, Ordering::Relaxed);
            block.set((first + 1, first + SEQ_BLOCK));
            first
        })
        .unwrap_or_else(|_| SEQ.fetch_add(1, Ordering::Relaxed))
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}{:016x}", self.process, self.seq)
    }
}

/// The idempotency key of one node in one run; see
/// [`Ctx::idempotency_key`](crate::Ctx::idempotency_key).
///
/// The same for every attempt of the node in the run, different for each node and run.
/// Displays as the run's key, a dash, and the node's index. By default the run's key is its
/// id in 32 hex digits, as in `3f9a…c1-4`, unique within a process and, for its first
/// 64 random bits, across processes. A caller may give its own with
/// [`RunOptions::idempotency_key`](crate::RunOptions::idempotency_key), for example the
/// `Idempotency-Key` header of the request the run serves, so that a retried request, which
/// is a new run, sends the same keys downstream, as in `order-7f3a-4`. Two keys are equal
/// when they display alike: with a caller's key, the run's id does not matter. An item of a
/// map node adds a dot and its index, as in `order-7f3a-4.2`.
#[derive(Debug, Clone)]
pub struct IdempotencyKey {
    run: RunId,
    caller: Option<Arc<str>>,
    node: u32,
    item: Option<u32>,
}

impl IdempotencyKey {
    /// The key of node `node` in run `run`, whose caller gave it the key `caller`, if any.
    pub(crate) fn new(run: RunId, caller: Option<Arc<str>>, node: u32) -> Self {
        IdempotencyKey {
            run,
            caller,
            node,
            item: None,
        }
    }

    /// The key of item `index` of the same map node.
    pub(crate) fn for_item(mut self, index: u32) -> Self {
        self.item = Some(index);
        self
    }

    /// For an item of a map node: its index in the list.
    #[must_use]
    pub fn item_index(&self) -> Option<usize> {
        self.item.map(|i| i as usize)
    }

    /// The run part of the key: the run's id.
    #[must_use]
    pub fn run_id(&self) -> RunId {
        self.run
    }

    /// The key the run's caller gave, if it gave one.
    #[must_use]
    pub fn caller_key(&self) -> Option<&str> {
        self.caller.as_deref()
    }

    /// The node's index in its graph.
    #[must_use]
    pub fn node_index(&self) -> usize {
        self.node as usize
    }
}

impl IdempotencyKey {
    /// What the key is made of, as it displays: the caller's key, or else the run's id.
    fn parts(&self) -> (Option<&str>, Option<RunId>, u32, Option<u32>) {
        match &self.caller {
            Some(key) => (Some(key), None, self.node, self.item),
            None => (None, Some(self.run), self.node, self.item),
        }
    }
}

impl PartialEq for IdempotencyKey {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for IdempotencyKey {}

impl std::hash::Hash for IdempotencyKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.parts().hash(state);
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.caller {
            Some(key) => write!(f, "{key}-{}", self.node)?,
            None => write!(f, "{}-{}", self.run, self.node)?,
        }
        match self.item {
            Some(item) => write!(f, ".{item}"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::{RunId, SEQ_BLOCK};

    /// Runs created on one thread count up one by one, across the end of a block, and
    /// threads creating runs at once never share a number.
    #[test]
    fn run_ids_count_up_on_a_thread_and_are_unique_across_threads() {
        let ids = || {
            (0..2 * SEQ_BLOCK + 3)
                .map(|_| RunId::next().seq())
                .collect::<Vec<_>>()
        };
        let threads: Vec<_> = (0..3).map(|_| std::thread::spawn(ids)).collect();
        let mut seen = HashSet::new();
        for thread in threads {
            let Ok(seqs) = thread.join() else {
                panic!("a thread creating ids panicked");
            };
            let mut within_blocks = 0;
            for pair in seqs.windows(2) {
                assert!(pair[1] > pair[0], "{} then {}", pair[0], pair[1]);
                within_blocks += usize::from(pair[1] == pair[0] + 1);
            }
            assert!(within_blocks >= seqs.len() - 3, "at most a jump per block");
            for seq in seqs {
                assert!(seen.insert(seq), "number {seq} given twice");
            }
        }
        let here = RunId::next();
        assert_ne!(here, RunId::next());
        assert_eq!(here.process, RunId::next().process);
    }
}
