//! Where the scheduler prefetches on large graphs whose edges jump.
//!
//! A node of such a graph touches a dozen cache lines that sit wherever its index puts
//! them: its definition, its slot, its edges, its upstreams' values, its downstreams' join
//! counters. Each hint is issued as soon as its address is known: by
//! [`RunState::prefetch_node`] when a node is made ready, by `GraphInner::prefetch_task`
//! when it starts, by [`RunState::prefetch_values`] when it reads its upstreams and by
//! [`RunState::prefetch_counters`] when it ends. Only runs of large, scattered graphs issue
//! them, as `RunCore::prefetch` decides. Hints change nothing observable, so the tests that
//! check the values of such graphs check these paths: 4 900 nodes in layers, and a fan-out
//! of 10 000.

use super::state::RunState;
use crate::engine::graph::neighbours;
use crate::util::prefetch::{prefetch, prefetch_all};

/// The most edges of one node whose far ends are prefetched: a hub's thousands of hints
/// would only evict each other.
const MAX_EDGES: usize = 16;

impl<I> RunState<I> {
    /// Prefetches the values of node `id`'s upstreams `ups`, the first [`MAX_EDGES`] of them,
    /// but for the `()` of an upstream that produces one, which no task reads.
    #[inline]
    pub(crate) fn prefetch_values(&self, id: u32, ups: &[u32]) {
        let meta = &self.graph.meta;
        for &u in ups.iter().take(MAX_EDGES) {
            if neighbours(u, id) || meta.produces_unit(u) {
                continue;
            }
            if let Some(v) = self.core.value_cell(u) {
                prefetch(v);
            }
        }
    }

    /// Prefetches the join counters of node `id`'s downstreams `downs`, which its end
    /// decrements; only the first [`MAX_EDGES`] of them.
    #[inline]
    pub(crate) fn prefetch_counters(&self, id: u32, downs: &[u32]) {
        for &d in downs.iter().take(MAX_EDGES) {
            if let (false, Some(h)) = (neighbours(d, id), self.core.node(d)) {
                prefetch(h);
            }
        }
    }

    /// Prefetches what node `id`, just made ready, will read first: its definition, its
    /// slot with every line of it, its edge offsets, its value's cell.
    #[inline]
    pub(crate) fn prefetch_node(&self, id: u32) {
        let i = id as usize;
        if let Some(n) = self.graph.nodes.get(i) {
            prefetch(n);
        }
        if let Some(s) = self.core.slot(id) {
            prefetch_all(s);
        }
        if let Some(v) = self.core.value_cell(id) {
            prefetch(v);
        }
        self.graph.meta.prefetch_edges_of(id);
    }
}
