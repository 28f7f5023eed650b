//! Counters split over cache-padded stripes, one stripe per thread modulo the stripe count,
//! so that threads counting at once do not fight over one cache line. A thread finds its
//! stripe once per call site, with one thread-local read, and bumps any fields of it. A read
//! sums the stripes.

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};

/// How many stripes.
pub(crate) const STRIPES: usize = 8;

/// One signed counter of a stripe. It is signed so that gauges can go up on one stripe and
/// down on another.
#[derive(Debug, Default)]
pub(crate) struct Count(AtomicI64);

impl Count {
    pub(crate) fn add(&self, n: i64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn incr(&self) {
        self.add(1);
    }

    pub(crate) fn decr(&self) {
        self.add(-1);
    }

    pub(crate) fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }

    pub(crate) fn reset(&self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

/// A value padded to its own cache lines.
#[repr(align(128))]
#[derive(Debug, Default)]
pub(crate) struct Padded<T>(pub(crate) T);

/// This thread's stripe index, assigned on the thread's first call. It is a
/// const-initialized thread-local, so no lazy-init state is checked on each read: this is
/// on every node's path.
#[inline]
pub(crate) fn stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static INDEX: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
    }
    INDEX
        .try_with(|i| {
            if i.get() == usize::MAX {
                i.set(NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES);
            }
            i.get()
        })
        .unwrap_or(0)
}
