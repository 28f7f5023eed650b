//! Counters split over cache-padded stripes, so that threads counting at once do not fight
//! over one cache line. A thread finds its stripe with one thread-local read, and bumps any
//! fields of it. A read sums the stripes.
//!
//! The first [`OWNED`] stripes each belong to one thread at a time: a thread claims one the
//! first time it counts and gives it back when it exits. The owner is the only thread that
//! writes its stripe, so it adds with a plain load and store, not a locked
//! read-modify-write: a counter costs what a local variable does. Threads past the owned
//! stripes share the last [`SHARED`] stripes, and add to them with `fetch_add`.
//!
//! Only a value that cannot leave its thread may write a stripe as its owner: the handle
//! that bumps counters is neither `Send` nor `Sync`, so it cannot be held across an
//! `.await` in a future that moves between workers. The `striped_loom_tests` module
//! model-checks the claim, the hand-back and the sum.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::Ordering;

use super::sync::{AtomicInt, StdSync, SyncFamily};

/// How many stripes one thread each may own.
pub(crate) const OWNED: usize = 32;
/// How many stripes the threads past the owned ones share.
pub(crate) const SHARED: usize = 8;
/// How many stripes in all.
pub(crate) const STRIPES: usize = OWNED + SHARED;

/// One signed counter of a stripe. It is signed so that gauges can go up on one stripe and
/// down on another; it is stored as the two's complement bits of an `i64`.
#[derive(Debug)]
pub(crate) struct Count<S: SyncFamily = StdSync>(S::AtomicU64);

impl<S: SyncFamily> Default for Count<S> {
    fn default() -> Self {
        Count(AtomicInt::new(0))
    }
}

impl<S: SyncFamily> Count<S> {
    /// Adds `n`. `owner`: the calling thread owns the stripe this count is in, so no other
    /// thread writes it, and a load and a store do.
    #[inline]
    fn add(&self, n: i64, owner: bool) {
        if owner {
            let v = self.0.load(Ordering::Relaxed);
            self.0.store(v.wrapping_add(n as u64), Ordering::Relaxed);
        } else {
            self.0.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// The current value.
    pub(crate) fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed) as i64
    }

    /// Sets the value of a count that no thread bumps, such as a total being summed.
    pub(crate) fn set(&self, v: i64) {
        self.0.store(v as u64, Ordering::Relaxed);
    }
}

/// One count of this thread's stripe, to bump at once. It is neither `Send` nor `Sync`:
/// see the module docs.
#[derive(Debug)]
pub(crate) struct Bump<'a, S: SyncFamily = StdSync> {
    count: &'a Count<S>,
    owner: bool,
    _thread: PhantomData<*const ()>,
}

impl<'a, S: SyncFamily> Bump<'a, S> {
    /// `count`, in a stripe that the calling thread owns if `owner`.
    #[inline]
    pub(crate) fn new(count: &'a Count<S>, owner: bool) -> Self {
        Bump {
            count,
            owner,
            _thread: PhantomData,
        }
    }

    #[inline]
    pub(crate) fn add(&self, n: i64) {
        self.count.add(n, self.owner);
    }

    #[inline]
    pub(crate) fn incr(&self) {
        self.add(1);
    }

    #[inline]
    pub(crate) fn decr(&self) {
        self.add(-1);
    }
}

/// A value padded to its own cache lines.
#[repr(align(128))]
#[derive(Debug, Default)]
pub(crate) struct Padded<T>(pub(crate) T);

/// Which owned stripes threads hold, one bit each. Generic over its atomic: std's, or
/// loom's in the model-checking tests.
#[derive(Debug)]
pub(crate) struct Owners<S: SyncFamily = StdSync> {
    held: S::AtomicU64,
}

impl<S: SyncFamily> Owners<S> {
    /// No stripe held.
    pub(crate) fn empty() -> Self {
        Owners {
            held: AtomicInt::new(0),
        }
    }

    /// Claims the lowest free owned stripe, if one is free. The acquire pairs with the
    /// release of [`give_back`](Self::give_back): whatever the previous owner wrote is
    /// seen by the next one.
    pub(crate) fn claim(&self) -> Option<usize> {
        let mut held = self.held.load(Ordering::Relaxed);
        loop {
            let free = (!held).trailing_zeros() as usize;
            if free >= OWNED {
                return None;
            }
            match self.held.compare_exchange_weak(
                held,
                held | 1 << free,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(free),
                Err(now) => held = now,
            }
        }
    }

    /// Gives back owned stripe `index`, claimed by the calling thread, which writes it no
    /// more.
    pub(crate) fn give_back(&self, index: usize) {
        debug_assert!(index < OWNED, "stripe {index} is not an owned one");
        // Only the owner clears its bit, which is set: subtracting it clears it.
        self.held.fetch_sub(1 << index, Ordering::Release);
    }
}

/// The process's owned stripes.
static OWNERS: std::sync::LazyLock<Owners> = std::sync::LazyLock::new(Owners::empty);

/// Not yet assigned.
const UNSET: usize = usize::MAX;

thread_local! {
    /// This thread's stripe. It has no destructor, so it is readable to the thread's last
    /// instruction with no check of whether it was destroyed: this is on every node's path.
    static INDEX: Cell<usize> = const { Cell::new(UNSET) };
    /// The owned stripe this thread holds, given back by its destructor as the thread exits.
    static HELD: Held = const { Held(Cell::new(UNSET)) };
}

/// Gives back the owned stripe it holds, when the thread exits.
struct Held(Cell<usize>);

impl Drop for Held {
    fn drop(&mut self) {
        let index = self.0.get();
        if index < OWNED {
            // Counts made after this, by other destructors of the thread, go to a shared
            // stripe, since the next owner of this one may write it at once.
            INDEX.with(|i| i.set(shared()));
            OWNERS.give_back(index);
        }
    }
}

/// A stripe for a thread that owns none: one of the shared ones, in turn.
fn shared() -> usize {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    OWNED + NEXT.fetch_add(1, Ordering::Relaxed) % SHARED
}

/// This thread's stripe index, below [`STRIPES`], assigned on the thread's first call: an
/// owned one if one is free, else a shared one.
#[inline]
pub(crate) fn stripe() -> usize {
    INDEX
        .try_with(|i| match i.get() {
            UNSET => assign(i),
            index => index,
        })
        .unwrap_or(OWNED)
}

/// Claims an owned stripe for this thread, if one is free and the thread can still give
/// it back at its exit, else takes a shared one; keeps it in `index`.
#[cold]
fn assign(index: &Cell<usize>) -> usize {
    let chosen = match OWNERS.claim() {
        Some(owned) if HELD.try_with(|held| held.0.set(owned)).is_ok() => owned,
        Some(owned) => {
            OWNERS.give_back(owned);
            shared()
        }
        None => shared(),
    };
    index.set(chosen);
    chosen
}

/// Whether stripe `index` is an owned one, which only the thread it was handed to writes.
#[inline]
pub(crate) fn is_owned(index: usize) -> bool {
    index < OWNED
}

#[cfg(test)]
mod striped_loom_tests;

#[cfg(test)]
mod tests {
    use super::*;

    /// Threads past the owned stripes, and threads that exit and leave their stripe to
    /// the next, count exactly: no stripe ever has two writers adding with a plain store.
    #[test]
    fn more_threads_than_owned_stripes_count_exactly() {
        let counts: Vec<Padded<Count>> = (0..STRIPES).map(|_| Padded::default()).collect();
        let counts = std::sync::Arc::new(counts);
        let per_thread = 50_000;
        // Three waves of threads, each wave more than the owned stripes, so that each wave
        // takes over the stripes of the last, and some threads share.
        for _ in 0..3 {
            let start = std::sync::Arc::new(std::sync::Barrier::new(OWNED + 3 * SHARED));
            let threads: Vec<_> = (0..OWNED + 3 * SHARED)
                .map(|_| {
                    let counts = std::sync::Arc::clone(&counts);
                    let start = std::sync::Arc::clone(&start);
                    std::thread::spawn(move || {
                        // Every thread claims its stripe, then all count at once.
                        let _ = stripe();
                        start.wait();
                        for _ in 0..per_thread {
                            let i = stripe();
                            Bump::new(&counts[i].0, is_owned(i)).incr();
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().expect("a counting thread");
            }
        }
        let total: i64 = counts.iter().map(|c| c.0.get()).sum();
        assert_eq!(total, 3 * (OWNED + 3 * SHARED) as i64 * per_thread);
    }

    #[test]
    fn a_stripe_is_claimed_lowest_first_and_given_back() {
        let owners: Owners = Owners::empty();
        assert_eq!(owners.claim(), Some(0));
        assert_eq!(owners.claim(), Some(1));
        owners.give_back(0);
        assert_eq!(owners.claim(), Some(0));
        for i in 2..OWNED {
            assert_eq!(owners.claim(), Some(i));
        }
        assert_eq!(owners.claim(), None, "every owned stripe is held");
        owners.give_back(7);
        assert_eq!(owners.claim(), Some(7));
    }

    #[test]
    fn a_count_goes_down_as_well_as_up() {
        let c: Count = Count::default();
        Bump::new(&c, true).decr();
        Bump::new(&c, false).decr();
        assert_eq!(c.get(), -2);
        c.set(5);
        Bump::new(&c, true).add(3);
        assert_eq!(c.get(), 8);
    }
}
