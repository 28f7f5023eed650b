//! Sliding windows over recent calls, for the failure-rate and slow-call-rate rules. They
//! match resilience4j's `COUNT_BASED` and `TIME_BASED` sliding windows.
//!
//! Both windows keep running totals, so recording a call and reading the totals cost O(1)
//! for a count window and O(buckets) = O(10) for a time window, whatever the window size.
//! They live inside the breaker's mutex; nothing here is shared or atomic.

use std::time::Duration;

/// Calls in the window, and how many of them failed or were slow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Totals {
    pub(crate) calls: u32,
    pub(crate) failures: u32,
    pub(crate) slow: u32,
}

/// A window of the last N calls, or of the calls in the last T.
#[derive(Debug)]
pub(crate) enum Window {
    Count(CountWindow),
    Time(TimeWindow),
}

impl Window {
    /// Records one call that ended at `now_ns`, in nanoseconds since the breaker's origin.
    pub(crate) fn record(&mut self, now_ns: u64, failed: bool, slow: bool) {
        match self {
            Window::Count(w) => w.record(failed, slow),
            Window::Time(w) => w.record(now_ns, failed, slow),
        }
    }

    /// The calls still in the window at `now_ns`.
    pub(crate) fn totals(&self, now_ns: u64) -> Totals {
        match self {
            Window::Count(w) => w.totals(),
            Window::Time(w) => w.totals(now_ns),
        }
    }

    /// Forgets every call. Used when the breaker leaves the closed state.
    pub(crate) fn clear(&mut self) {
        match self {
            Window::Count(w) => w.clear(),
            Window::Time(w) => w.clear(),
        }
    }
}

const FAILED: u8 = 0b01;
const SLOW: u8 = 0b10;

/// The last `N` calls, one byte each, in a ring.
#[derive(Debug)]
pub(crate) struct CountWindow {
    ring: Box<[u8]>,
    next: usize,
    len: usize,
    totals: Totals,
}

impl CountWindow {
    /// A window of the last `size` calls. `size` is at least 1; the builder checks it.
    pub(crate) fn new(size: u32) -> Self {
        let size = usize::try_from(size.max(1)).unwrap_or(1);
        CountWindow {
            ring: vec![0; size].into_boxed_slice(),
            next: 0,
            len: 0,
            totals: Totals::default(),
        }
    }

    fn record(&mut self, failed: bool, slow: bool) {
        let capacity = self.ring.len();
        let Some(slot) = self.ring.get_mut(self.next) else {
            return; // unreachable: `next < ring.len()` and the ring is never empty
        };
        if self.len == capacity {
            let old = *slot;
            self.totals.failures -= u32::from(old & FAILED != 0);
            self.totals.slow -= u32::from(old & SLOW != 0);
        } else {
            self.len += 1;
            self.totals.calls += 1;
        }
        let new = if failed { FAILED } else { 0 } | if slow { SLOW } else { 0 };
        *slot = new;
        self.totals.failures += u32::from(failed);
        self.totals.slow += u32::from(slow);
        self.next = (self.next + 1) % capacity;
    }

    fn totals(&self) -> Totals {
        self.totals
    }

    fn clear(&mut self) {
        self.next = 0;
        self.len = 0;
        self.totals = Totals::default();
    }
}

/// How many buckets a time window is split into.
pub(crate) const TIME_BUCKETS: u64 = 10;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// `now_ns / width` of the calls in it; `u64::MAX` when never used.
    index: u64,
    totals: Totals,
}

const EMPTY: Bucket = Bucket {
    index: u64::MAX,
    totals: Totals {
        calls: 0,
        failures: 0,
        slow: 0,
    },
};

/// The calls of the last `T`, in [`TIME_BUCKETS`] buckets of `T / 10` each.
///
/// A call counts from the moment it is recorded until its bucket falls out of the window:
/// for at least `0.9 T` and at most `T`. Buckets are recycled by their index, so a bucket
/// left over from before an idle period is never mistaken for a recent one.
#[derive(Debug)]
pub(crate) struct TimeWindow {
    width_ns: u64,
    buckets: [Bucket; TIME_BUCKETS as usize],
}

impl TimeWindow {
    /// A window of the calls in the last `span`. `span` is non-zero; the builder checks it.
    pub(crate) fn new(span: Duration) -> Self {
        let span_ns = u64::try_from(span.as_nanos()).unwrap_or(u64::MAX);
        TimeWindow {
            width_ns: (span_ns / TIME_BUCKETS).max(1),
            buckets: [EMPTY; TIME_BUCKETS as usize],
        }
    }

    fn slot(index: u64) -> usize {
        // `index % 10` always fits.
        usize::try_from(index % TIME_BUCKETS).unwrap_or(0)
    }

    fn record(&mut self, now_ns: u64, failed: bool, slow: bool) {
        let index = now_ns / self.width_ns;
        let Some(bucket) = self.buckets.get_mut(Self::slot(index)) else {
            return; // unreachable: the slot is < TIME_BUCKETS
        };
        if bucket.index != index {
            *bucket = Bucket {
                index,
                totals: Totals::default(),
            };
        }
        let t = &mut bucket.totals;
        t.calls = t.calls.saturating_add(1);
        t.failures = t.failures.saturating_add(u32::from(failed));
        t.slow = t.slow.saturating_add(u32::from(slow));
    }

    fn totals(&self, now_ns: u64) -> Totals {
        let index = now_ns / self.width_ns;
        let mut sum = Totals::default();
        for b in &self.buckets {
            if index
                .checked_sub(b.index)
                .is_some_and(|age| age < TIME_BUCKETS)
            {
                sum.calls = sum.calls.saturating_add(b.totals.calls);
                sum.failures = sum.failures.saturating_add(b.totals.failures);
                sum.slow = sum.slow.saturating_add(b.totals.slow);
            }
        }
        sum
    }

    fn clear(&mut self) {
        self.buckets = [EMPTY; TIME_BUCKETS as usize];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn t(calls: u32, failures: u32, slow: u32) -> Totals {
        Totals {
            calls,
            failures,
            slow,
        }
    }

    #[test]
    fn count_window_keeps_the_last_n_calls() {
        let mut w = Window::Count(CountWindow::new(3));
        w.record(0, true, false);
        w.record(0, true, true);
        assert_eq!(w.totals(0), t(2, 2, 1));
        w.record(0, false, false);
        assert_eq!(w.totals(0), t(3, 2, 1));
        // The oldest call, failed and fast, falls out.
        w.record(0, false, true);
        assert_eq!(w.totals(0), t(3, 1, 2));
        w.record(0, false, false);
        assert_eq!(w.totals(0), t(3, 0, 1));
        w.record(0, false, false);
        w.record(0, false, false);
        assert_eq!(w.totals(0), t(3, 0, 0));
        w.clear();
        assert_eq!(w.totals(0), t(0, 0, 0));
    }

    #[test]
    fn count_window_of_one() {
        let mut w = Window::Count(CountWindow::new(1));
        w.record(0, true, true);
        assert_eq!(w.totals(0), t(1, 1, 1));
        w.record(0, false, false);
        assert_eq!(w.totals(0), t(1, 0, 0));
    }

    #[test]
    fn time_window_ages_calls_out_bucket_by_bucket() {
        // 100 ms window = 10 buckets of 10 ms.
        let mut w = Window::Time(TimeWindow::new(Duration::from_millis(100)));
        w.record(0, true, false);
        w.record(5 * MS, false, true);
        w.record(55 * MS, true, false);
        assert_eq!(w.totals(55 * MS), t(3, 2, 1));
        assert_eq!(w.totals(99 * MS), t(3, 2, 1));
        // Bucket 0, 0..10 ms, leaves the window once bucket 10 starts.
        assert_eq!(w.totals(100 * MS), t(1, 1, 0));
        // Bucket 5, 50..60 ms, leaves once bucket 15 starts.
        assert_eq!(w.totals(149 * MS), t(1, 1, 0));
        assert_eq!(w.totals(150 * MS), t(0, 0, 0));
    }

    #[test]
    fn time_window_forgets_stale_buckets_after_idle_periods() {
        let mut w = Window::Time(TimeWindow::new(Duration::from_millis(100)));
        for _ in 0..5 {
            w.record(3 * MS, true, false);
        }
        // 1 s later the same ring slot is reused, as 100 % 10 == 0: the old calls must
        // not be added to the new ones.
        w.record(1_003 * MS, false, false);
        assert_eq!(w.totals(1_003 * MS), t(1, 0, 0));
    }

    #[test]
    fn tiny_and_huge_time_windows_do_not_divide_by_zero() {
        let mut w = Window::Time(TimeWindow::new(Duration::from_nanos(3)));
        w.record(7, true, false);
        assert_eq!(w.totals(7), t(1, 1, 0));
        let mut w = Window::Time(TimeWindow::new(Duration::MAX));
        w.record(u64::MAX, true, false);
        assert_eq!(w.totals(u64::MAX), t(1, 1, 0));
    }
}
