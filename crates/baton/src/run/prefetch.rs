//! Prefetch hints for what a node reads and writes at scattered places on large graphs.
//!
//! A node of a large graph touches a dozen cache lines that sit wherever its index puts
//! them: its definition, its slot, its edges, its upstreams' values, its downstreams' join
//! counters. Plain loads of them wait for each other behind the locked instructions that
//! follow (a reference count, a join counter); prefetch hints do not, so the misses overlap.
//! Each hint is issued as soon as its address is known: when a node is made ready
//! ([`RunState::prefetch_node`]), when it starts (`GraphInner::prefetch_task`), when it
//! reads its upstreams ([`RunState::prefetch_values`]) and when it ends
//! ([`RunState::prefetch_counters`]). Only runs of large, scattered graphs issue them
//! (`RunCore::prefetch`); hints change nothing observable, so the tests that check the
//! values of such graphs (`tests/ready_queue.rs`, 4 900 nodes in layers; `tests/schedule.rs`,
//! a fan-out of 10 000) check these paths.

#![allow(unsafe_code)]

use super::state::RunState;
use crate::graph::neighbours;

/// The most edges of one node whose far ends are prefetched: a hub's thousands of hints
/// would only evict each other.
const MAX_EDGES: usize = 16;

impl<I> RunState<I> {
    /// Prefetches the values of node `id`'s upstreams `ups` (the first [`MAX_EDGES`]).
    #[inline]
    pub(crate) fn prefetch_values(&self, id: u32, ups: &[u32]) {
        for &u in ups.iter().take(MAX_EDGES) {
            if let (false, Some(v)) = (neighbours(u, id), self.core.values.get(u as usize)) {
                prefetch(v);
            }
        }
    }

    /// Prefetches the join counters of node `id`'s downstreams `downs` (the first
    /// [`MAX_EDGES`]), which its end decrements.
    #[inline]
    pub(crate) fn prefetch_counters(&self, id: u32, downs: &[u32]) {
        for &d in downs.iter().take(MAX_EDGES) {
            if let (false, Some(h)) = (neighbours(d, id), self.core.hot(d)) {
                prefetch(h);
            }
        }
    }

    /// Prefetches what node `id`, just made ready, will read first: its definition, its
    /// slot (every line of it), its edge offsets, its value's cell.
    #[inline]
    pub(crate) fn prefetch_node(&self, id: u32) {
        let i = id as usize;
        if let Some(n) = self.graph.nodes.get(i) {
            prefetch(n);
        }
        if let Some(s) = self.core.slots.get(i) {
            prefetch_all(s);
        }
        if let Some(v) = self.core.values.get(i) {
            prefetch(v);
        }
        self.graph.meta.prefetch_edges_of(id);
    }
}

/// Asks the CPU to bring the cache line holding `*at` into its caches. A hint only: it
/// changes nothing the program can observe, and does nothing where it is not supported
/// (targets other than x86-64).
/// A zero-sized value (a closure that captures nothing) has no line to bring in: its address
/// may dangle, so it gets no hint.
#[inline(always)]
pub(crate) fn prefetch<T: ?Sized>(at: &T) {
    if size_of_val(at) != 0 {
        prefetch_ptr(std::ptr::from_ref(at).cast::<u8>());
    }
}

/// The hint for the line holding the byte at `at`, which may point anywhere: the hint never
/// reads or faults.
#[inline(always)]
fn prefetch_ptr(at: *const u8) {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse"))]
    // SAFETY: `_mm_prefetch` needs SSE, which the `cfg` above guarantees. The hint reads no
    // memory the program can observe and cannot fault, whatever the address (here it is
    // always inside a live value of non-zero size).
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>(at.cast::<i8>());
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse")))]
    let _ = at;
}

/// [`prefetch`]es every cache line `*at` spans (a value larger than a line, or one that
/// straddles two).
#[inline(always)]
pub(crate) fn prefetch_all<T>(at: &T) {
    let bytes = std::ptr::from_ref(at).cast::<u8>();
    let mut offset = 0;
    while offset < size_of::<T>() {
        prefetch_ptr(bytes.wrapping_add(offset));
        offset += LINE;
    }
    // The last byte's line, when the value straddles one more line than its size needs.
    if let Some(last) = size_of::<T>().checked_sub(1) {
        prefetch_ptr(bytes.wrapping_add(last));
    }
}

/// A cache line's size on the targets that have prefetch hints.
const LINE: usize = 64;

#[cfg(test)]
mod tests {
    use super::{prefetch, prefetch_all};

    /// The hint leaves what it points at as it was, whatever the type. (Hints change nothing
    /// observable, so this can fail only under Miri or a sanitizer, which check the
    /// `unsafe` call's address; it is here for them.)
    #[test]
    fn a_prefetch_changes_nothing() {
        let values: Vec<u64> = (0..1024).collect();
        for v in &values {
            prefetch(v);
        }
        prefetch(values.as_slice());
        prefetch("a str");
        let wide = [7u8; 200];
        prefetch_all(&wide);
        prefetch_all(&());
        assert!(wide.iter().all(|&b| b == 7));
        assert!(values.iter().copied().eq(0..1024));
    }
}
