//! A counter split over cache-padded stripes, so that threads counting at once do not fight
//! over one cache line; a read sums the stripes.

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};

const STRIPES: usize = 8;

#[repr(align(128))]
#[derive(Debug, Default)]
struct Padded(AtomicI64);

/// A striped signed counter (signed so that gauges can go up and down on different
/// stripes).
#[derive(Debug, Default)]
pub(crate) struct Striped {
    stripes: [Padded; STRIPES],
}

fn stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    INDEX.with(|i| *i)
}

impl Striped {
    pub(crate) fn add(&self, n: i64) {
        if let Some(s) = self.stripes.get(stripe()) {
            s.0.fetch_add(n, Ordering::Relaxed);
        }
    }

    pub(crate) fn incr(&self) {
        self.add(1);
    }

    pub(crate) fn decr(&self) {
        self.add(-1);
    }

    pub(crate) fn get(&self) -> i64 {
        self.stripes
            .iter()
            .map(|s| s.0.load(Ordering::Relaxed))
            .sum()
    }

    /// A counter's value (never negative).
    pub(crate) fn count(&self) -> u64 {
        self.get().max(0) as u64
    }

    pub(crate) fn reset(&self) {
        for s in &self.stripes {
            s.0.store(0, Ordering::Relaxed);
        }
    }
}
