//! The drivers of an inline run past those polled together: each has its own waker, and a
//! wake-up adds the driver to a list of those woken, so that a poll of the run polls them
//! and no other, however many wait. It is what a `FuturesUnordered` does, with fewer
//! locked instructions: a driver's place, its flag and its waker are made once and reused
//! by the drivers that come after it, and a wake-up wakes the run's task only when the
//! list was empty.
//!
//! The list is a stack of place numbers: a wake-up pushes its place with one
//! compare-and-swap on the head, and the run's poll takes the whole stack with one swap,
//! so no place is ever popped alone and no stale head can be swapped back in. A place is
//! on the stack at most once: its flag is set by the wake-up that pushes it and cleared
//! only by the poll that took it from the stack, just before polling its driver, so a
//! wake-up during that poll pushes it again. Nothing else clears the flag: a place freed
//! while a late wake-up still has it on the stack is reused with its flag set, and its new
//! driver is polled once more when the stack is taken. The flag's two sides are swaps, so
//! the poll reads what the wake-up wrote and sees what was done before it. The
//! `joined_loom_tests` module model-checks this, a late wake-up of a reused place included.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Wake, Waker};

use super::woken::Woken;
use crate::util::sync::{AtomicInt, StdSync, SyncFamily};

/// One place of the set, for one driver at a time.
struct Place<S: SyncFamily> {
    number: u32,
    /// On the stack: one while pushed and not yet taken.
    queued: S::AtomicU8,
    /// The place pushed before it, plus one; zero at the stack's bottom.
    below: S::AtomicU32,
    woken: Arc<Woken<S>>,
}

impl<S: SyncFamily> Wake for Place<S> {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.queued.swap(1, Ordering::AcqRel) != 0 {
            return;
        }
        let woken = &self.woken;
        let mut head = woken.head.load(Ordering::Relaxed);
        loop {
            self.below.store(head, Ordering::Relaxed);
            match woken.head.compare_exchange_weak(
                head,
                self.number + 1,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => head = now,
            }
        }
        // A stack that was not empty was pushed onto since the run's last pass took it, by
        // a wake-up that woke the run's future.
        if head == 0 {
            woken.notify();
        }
    }
}

/// See the module docs. Generic over its atomics and waker cell: std's, or loom's in the
/// model-checking tests.
pub(super) struct ReadySet<F, S: SyncFamily = StdSync> {
    /// The driver in each place; `None` where the place is free.
    drivers: Vec<Option<F>>,
    /// Each place, with the waker that pushes it. Kept for the set's life.
    places: Vec<(Arc<Place<S>>, Waker)>,
    /// Free places.
    free: Vec<u32>,
    /// Places whose driver was added since the last pass: polled at the next, unwoken,
    /// their flag left as it is.
    added: Vec<u32>,
    /// The places of a pass, reused from one pass to the next.
    taken: Vec<u32>,
    /// How many drivers it holds.
    len: usize,
    woken: Arc<Woken<S>>,
}

impl<F: Future<Output = ()> + Unpin, S: SyncFamily> ReadySet<F, S> {
    /// An empty set whose wake-ups wake the run's future through `woken`.
    pub(super) fn new(woken: Arc<Woken<S>>) -> Self {
        ReadySet {
            drivers: Vec::new(),
            places: Vec::new(),
            free: Vec::new(),
            added: Vec::new(),
            taken: Vec::new(),
            len: 0,
            woken,
        }
    }

    /// Whether it holds no driver.
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `driver`, to be polled at the next poll.
    #[inline(never)]
    pub(super) fn push(&mut self, driver: F) {
        let number = match self.free.pop() {
            Some(number) => number,
            None => {
                let Ok(number) = u32::try_from(self.places.len()) else {
                    unreachable!("a run has fewer than 2^32 drivers");
                };
                let place = Arc::new(Place {
                    number,
                    queued: AtomicInt::new(0),
                    below: AtomicInt::new(0),
                    woken: Arc::clone(&self.woken),
                });
                let waker = Waker::from(Arc::clone(&place));
                self.places.push((place, waker));
                self.drivers.push(None);
                number
            }
        };
        self.drivers[number as usize] = Some(driver);
        self.added.push(number);
        self.len += 1;
    }

    /// Has every driver it holds polled at the next pass, as if just added.
    pub(super) fn add_all(&mut self) {
        self.added.clear();
        for (number, driver) in self.drivers.iter().enumerate() {
            if driver.is_some() {
                self.added.push(number as u32);
            }
        }
    }

    /// One pass: polls the drivers added since the last pass, then those woken, in the
    /// order they were woken, each once. A driver woken during the pass is pushed again and
    /// wakes the run's future, which sees it at the pass's end. Returns how many it polled.
    #[inline(never)]
    pub(super) fn pass(&mut self) -> usize {
        if self.len == 0 {
            return 0;
        }
        let mut added = std::mem::take(&mut self.added);
        let mut taken = std::mem::take(&mut self.taken);
        self.take_woken(&mut taken);
        for &number in &added {
            self.poll_place(number, false);
        }
        for &number in &taken {
            self.poll_place(number, true);
        }
        let polled = added.len() + taken.len();
        added.clear();
        taken.clear();
        // Drivers added during the pass were pushed to `self.added`, which is empty then:
        // keep the larger list's room.
        if self.added.is_empty() {
            self.added = added;
        }
        self.taken = taken;
        polled
    }

    /// Takes the stack of woken places into `queue`, in the order they were woken.
    fn take_woken(&self, queue: &mut Vec<u32>) {
        let mut head = self.woken.head.swap(0, Ordering::Acquire);
        while let Some(number) = head.checked_sub(1) {
            let Some((place, _)) = self.places.get(number as usize) else {
                unreachable!("place {number} was made by this set");
            };
            head = place.below.load(Ordering::Relaxed);
            queue.push(number);
        }
        // The stack holds the last woken first.
        queue.reverse();
    }

    /// Polls the driver in place `number`, if any, with the place's waker, and frees the
    /// place if the driver ended. A place woken after its driver ended has none. `taken`:
    /// the place was taken from the stack, so its flag is cleared first, and a wake-up
    /// during the poll pushes it again.
    fn poll_place(&mut self, number: u32, taken: bool) {
        let index = number as usize;
        let (Some(Some(driver)), Some((place, waker))) =
            (self.drivers.get_mut(index), self.places.get(index))
        else {
            if taken {
                if let Some((place, _)) = self.places.get(index) {
                    place.queued.swap(0, Ordering::AcqRel);
                }
            }
            return;
        };
        if taken {
            place.queued.swap(0, Ordering::AcqRel);
        }
        if Pin::new(driver)
            .poll(&mut Context::from_waker(waker))
            .is_ready()
        {
            self.drivers[index] = None;
            self.free.push(number);
            self.len -= 1;
        }
    }

    /// Every driver it holds.
    pub(super) fn into_drivers(self) -> impl Iterator<Item = F> {
        self.drivers.into_iter().flatten()
    }
}
