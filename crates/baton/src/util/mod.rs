//! Leaf utilities: what every layer above may use, and which uses nothing of the crate.
//!
//! - [`once`]: a write-once cell for what a run writes once per node. Its `unsafe` is
//!   fenced here.
//! - [`prefetch`]: cache prefetch hints. Their `unsafe` is fenced here.
//! - [`striped`]: counters split over cache-padded stripes, one per thread.
//! - [`sync`]: the synchronization primitives concurrent code is written against, so that
//!   loom can model-check it under a plain `cargo test`.
//! - [`try_cell`]: a value one caller at a time reaches, the others giving up at once. Its
//!   `unsafe` is fenced here.
//! - [`names`]: a graph's node names in one text buffer, indexed on first lookup.
//! - [`human`]: durations as people read them in messages.
//! - [`value`]: a node's value, type-erased.

pub(crate) mod human;
pub(crate) mod names;
pub(crate) mod once;
pub(crate) mod prefetch;
pub(crate) mod striped;
pub(crate) mod sync;
pub(crate) mod try_cell;
pub(crate) mod value;

/// `a` and `b` both `None`, or both `Some` and `same`.
pub(crate) fn same_opt<T>(a: &Option<T>, b: &Option<T>, same: impl Fn(&T, &T) -> bool) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => same(a, b),
        _ => false,
    }
}

/// `n` milliseconds: the unit tests' one shorthand for a duration.
#[cfg(test)]
pub(crate) const fn ms(n: u64) -> std::time::Duration {
    std::time::Duration::from_millis(n)
}
