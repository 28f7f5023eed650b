//! Identifiers: a run's id, a node's typed handle, and the idempotency key of one node in
//! one run. Plain values that every layer above may hold; nothing here reaches a graph or
//! a run.

use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

/// A typed handle to one node of a graph; `T` is the type of the value the node produces.
///
/// [`NodeBuilder::task`](crate::NodeBuilder::task) returns it. Pass it to
/// [`NodeBuilder::after`](crate::NodeBuilder::after) (alone or in a tuple) to make the node an
/// upstream of another, and to [`Report::get`](crate::Report::get) to read the value a run
/// produced. It is `Copy` whatever `T` is, `Send` and `Sync`, and two words wide.
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

/// The identity of one run: 64 random bits per process and a 64-bit sequence number.
///
/// Displays as 32 lowercase hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunId {
    process: u64,
    seq: u64,
}

impl RunId {
    /// A fresh id: this process's random half and the next sequence number.
    pub(crate) fn next() -> Self {
        static SEQ: AtomicU64 = AtomicU64::new(1);
        static PROCESS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let process = *PROCESS.get_or_init(|| {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(std::process::id());
            h.finish()
        });
        RunId {
            process,
            seq: SEQ.fetch_add(1, Ordering::Relaxed),
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

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}{:016x}", self.process, self.seq)
    }
}

/// The idempotency key of one node in one run; see [`Ctx::idempotency_key`].
///
/// Displays as 32 hex digits of the run id, a dash, and the node's index:
/// `3f9a…c1-4`. Unique within a process; across processes the run id's first 64 bits are
/// random per process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IdempotencyKey {
    run: RunId,
    node: u32,
}

impl IdempotencyKey {
    /// The key of node `node` in run `run`.
    pub(crate) fn new(run: RunId, node: u32) -> Self {
        IdempotencyKey { run, node }
    }
}

impl IdempotencyKey {
    /// The run part of the key.
    #[must_use]
    pub fn run_id(self) -> RunId {
        self.run
    }

    /// The node's index in its graph.
    #[must_use]
    pub fn node_index(self) -> usize {
        self.node as usize
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.run, self.node)
    }
}
