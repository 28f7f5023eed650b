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

use crate::util::sync::{AtomicInt, StdSync, SyncFamily, WakerCell};

/// The stack of woken places, and the waker of the run's task, woken when the stack
/// stops being empty.
struct Woken<S: SyncFamily> {
    /// The last place pushed, plus one; zero when the stack is empty.
    head: S::AtomicU32,
    task: S::WakerCell,
}

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
        // A stack that was not empty was pushed onto since the run's last poll took it, by
        // a wake-up that wakes, or has woken, the run's task.
        if head == 0 {
            woken.task.wake();
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
    /// Places whose driver was added since the last poll: polled at the next, unwoken,
    /// their flag left as it is.
    added: Vec<u32>,
    /// Places taken from the stack and not polled yet, their flag still set: left by a poll
    /// that gave the task's turn back.
    left: Vec<u32>,
    /// How many drivers it holds.
    len: usize,
    woken: Arc<Woken<S>>,
}

impl<F: Future<Output = ()> + Unpin, S: SyncFamily> ReadySet<F, S> {
    /// An empty set.
    pub(super) fn new() -> Self {
        ReadySet {
            drivers: Vec::new(),
            places: Vec::new(),
            free: Vec::new(),
            added: Vec::new(),
            left: Vec::new(),
            len: 0,
            woken: Arc::new(Woken {
                head: AtomicInt::new(0),
                task: WakerCell::new(),
            }),
        }
    }

    /// Whether it holds no driver.
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `driver`, to be polled at the next poll.
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

    /// Polls the drivers the last poll left, those added since, then those woken, in the
    /// order they were woken, as a `FuturesUnordered` does: a driver woken while this runs is
    /// polled in this call too, until it made as many polls as it holds drivers. Once two
    /// drivers woke again during their own poll, it stops, wakes the task and leaves the
    /// rest for the next poll, so that drivers that keep waking give the task's turn back.
    /// A call that stops with places on the stack wakes the task too.
    pub(super) fn poll(&mut self, cx: &Context<'_>) {
        if self.len == 0 {
            return;
        }
        // Registered before the stack is taken: a wake-up that finds it empty after the
        // take wakes this task.
        self.woken.task.register(cx.waker());
        let budget = self.len;
        let (mut polled, mut yielded) = (0, 0);
        // What the last call left first, then the drivers added since, then each take of
        // the stack; `taken` says which places came from the stack, so their flag is set.
        let mut left = std::mem::take(&mut self.left);
        let mut added = std::mem::take(&mut self.added);
        let (mut in_left, mut in_added) = (0, 0);
        loop {
            if yielded >= 2 {
                cx.waker().wake_by_ref();
                break;
            }
            let (number, taken) = if in_left < left.len() {
                in_left += 1;
                (left[in_left - 1], true)
            } else if in_added < added.len() {
                in_added += 1;
                (added[in_added - 1], false)
            } else {
                left.clear();
                in_left = 0;
                if polled >= budget {
                    if self.woken.head.load(Ordering::Acquire) != 0 {
                        cx.waker().wake_by_ref();
                    }
                    break;
                }
                self.take_woken(&mut left);
                if left.is_empty() {
                    break;
                }
                continue;
            };
            polled += 1;
            if self.poll_place(number, taken) {
                yielded += 1;
            }
        }
        left.drain(..in_left);
        added.drain(..in_added);
        self.left = left;
        self.added = added;
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
    /// during the poll pushes it again. Returns whether the driver waits and its place is
    /// on the stack: woken again during its poll, or, for a new driver, still there from
    /// a late wake-up of the place.
    fn poll_place(&mut self, number: u32, taken: bool) -> bool {
        let index = number as usize;
        let (Some(Some(driver)), Some((place, waker))) =
            (self.drivers.get_mut(index), self.places.get(index))
        else {
            if taken {
                if let Some((place, _)) = self.places.get(index) {
                    place.queued.swap(0, Ordering::AcqRel);
                }
            }
            return false;
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
            return false;
        }
        // A new driver in a place still on the stack counts as woken: it will be polled
        // again when the stack is taken.
        place.queued.load(Ordering::Relaxed) != 0
    }

    /// Every driver it holds.
    pub(super) fn into_drivers(self) -> impl Iterator<Item = F> {
        self.drivers.into_iter().flatten()
    }
}
