//! Identifiers: a run's id, a node's typed handle, and the idempotency key of one node in
//! one run. Plain values that every layer above may hold; nothing here reaches a graph or
//! a run.

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
