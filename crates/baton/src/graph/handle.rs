//! `Node<T>`: the typed, `Copy` handle a builder returns for each node.

use std::fmt;
use std::marker::PhantomData;

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
