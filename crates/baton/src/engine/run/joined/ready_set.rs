//! The drivers of an inline run past those polled together: each has its own waker, and a
//! wake-up adds the driver to a list of those woken, so that a poll of the run polls them
//! and no other, however many wait. It is what a `FuturesUnordered` does, with fewer
//! locked instructions: a driver's place, its flag and its waker are made once and reused
//! by the drivers that come after it, in the run and in later runs of the graph
//! ([`Places`]), and a wake-up wakes the run's task only when the list was empty.
//!
//! The list is a stack of place numbers: a wake-up pushes its place with one
//! compare-and-swap on the head, and the run's poll takes the whole stack with one swap,
//! so no place is ever popped alone and no stale head can be swapped back in. A place is
//! on the stack at most once: its flag is set by the wake-up that pushes it and cleared
//! only by the poll that took it from the stack, just before polling its driver, so a
//! wake-up during that poll pushes it again. Nothing else clears the flag while the run
//! lasts: a place freed while a late wake-up still has it on the stack is reused with its
//! flag set, and its new driver is polled once more when the stack is taken. A later run
//! gets the places only when no waker of theirs is held outside the set, so that no
//! wake-up can come: their flags and the stack are cleared then ([`Places::spare`]). The
//! flag's two sides are swaps, so the poll reads what the wake-up wrote and sees what was
//! done before it. The `joined_loom_tests` module model-checks this within a run, a late
//! wake-up of a reused place included.

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

/// The most places a set leaves to a later run of the graph ([`Places::spare`]).
const PLACES_KEPT: usize = 32;

/// A set's places, with their wakers, and its lists of place numbers: everything of it
/// but its drivers. A run leaves them, with the run's waker they wake, to a later run of
/// the graph, whose set then makes a place, or grows a list, only when it needs more than
/// it was left; it still allocates itself and its list of drivers.
pub(in crate::engine) struct Places<S: SyncFamily = StdSync> {
    /// Each place, with the waker that pushes it. Kept for the set's life, and for later
    /// runs' sets.
    places: Vec<(Arc<Place<S>>, Waker)>,
    /// Free places.
    free: Vec<u32>,
    /// Places whose driver was added since the last pass: polled at the next, unwoken,
    /// their flag left as it is.
    added: Vec<u32>,
    /// The places of a pass, reused from one pass to the next.
    taken: Vec<u32>,
}

impl<S: SyncFamily> Places<S> {
    /// No place.
    fn new() -> Self {
        Places {
            places: Vec::new(),
            free: Vec::new(),
            added: Vec::new(),
            taken: Vec::new(),
        }
    }

    /// How many places it holds.
    pub(super) fn len(&self) -> usize {
        self.places.len()
    }

    /// These places, left by a run whose drivers are all dropped, made free for a later
    /// run's set that `woken` wakes, if nothing but them holds `woken` and nothing but they
    /// hold their places: no waker made of a place is kept anywhere. Their flags are
    /// cleared, and the caller clears the waker's stack (`Woken::reset`): a late wake-up
    /// could not set them again, as no one holds a waker to wake. Keeps [`PLACES_KEPT`] at
    /// most. `None`, dropping them, otherwise.
    pub(super) fn spare(mut self: Box<Self>, woken: &Arc<Woken<S>>) -> Option<Box<Self>> {
        self.places.truncate(PLACES_KEPT);
        let alone = Arc::strong_count(woken) == 1 + self.places.len()
            && self
                .places
                .iter()
                .all(|(place, _)| Arc::strong_count(place) == 2);
        if !alone {
            return None;
        }
        // The drops of the wakers that other threads held came before these counts were
        // read: what they did before them, a wake-up among it, is seen from here on.
        std::sync::atomic::fence(Ordering::Acquire);
        for (place, _) in &self.places {
            place.queued.store(0, Ordering::Relaxed);
            place.below.store(0, Ordering::Relaxed);
        }
        self.free.clear();
        self.free.extend((0..self.places.len() as u32).rev());
        self.added.clear();
        self.taken.clear();
        Some(self)
    }
}

/// See the module docs. Generic over its atomics and waker cell: std's, or loom's in the
/// model-checking tests.
pub(super) struct ReadySet<F, S: SyncFamily = StdSync> {
    /// The driver in each place; `None` where the place is free. Shorter than the places
    /// when the last ones never held a driver in this run.
    drivers: Vec<Option<F>>,
    /// Its places, and its lists of place numbers.
    places: Box<Places<S>>,
    /// How many drivers it holds.
    len: usize,
    woken: Arc<Woken<S>>,
}

impl<F: Future<Output = ()> + Unpin, S: SyncFamily> ReadySet<F, S> {
    /// An empty set whose wake-ups wake the run's future through `woken`, with the free
    /// `places` an earlier run left with `woken`, if any ([`Places::spare`]).
    pub(super) fn new(woken: Arc<Woken<S>>, places: Option<Box<Places<S>>>) -> Self {
        ReadySet {
            drivers: Vec::new(),
            places: places.unwrap_or_else(|| Box::new(Places::new())),
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
        let places = &mut *self.places;
        let number = match places.free.pop() {
            Some(number) => number,
            None => {
                let Ok(number) = u32::try_from(places.places.len()) else {
                    unreachable!("a run has fewer than 2^32 drivers");
                };
                let place = Arc::new(Place {
                    number,
                    queued: AtomicInt::new(0),
                    below: AtomicInt::new(0),
                    woken: Arc::clone(&self.woken),
                });
                let waker = Waker::from(Arc::clone(&place));
                places.places.push((place, waker));
                number
            }
        };
        let index = number as usize;
        if self.drivers.len() <= index {
            self.drivers.resize_with(index + 1, || None);
        }
        self.drivers[index] = Some(driver);
        places.added.push(number);
        self.len += 1;
    }

    /// Has every driver it holds polled at the next pass, as if just added.
    pub(super) fn add_all(&mut self) {
        let added = &mut self.places.added;
        added.clear();
        for (number, driver) in self.drivers.iter().enumerate() {
            if driver.is_some() {
                added.push(number as u32);
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
        let mut added = std::mem::take(&mut self.places.added);
        let mut taken = std::mem::take(&mut self.places.taken);
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
        if self.places.added.is_empty() {
            self.places.added = added;
        }
        self.places.taken = taken;
        polled
    }

    /// Takes the stack of woken places into `queue`, in the order they were woken.
    fn take_woken(&self, queue: &mut Vec<u32>) {
        let mut head = self.woken.head.swap(0, Ordering::Acquire);
        while let Some(number) = head.checked_sub(1) {
            let Some((place, _)) = self.places.places.get(number as usize) else {
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
            (self.drivers.get_mut(index), self.places.places.get(index))
        else {
            if taken {
                if let Some((place, _)) = self.places.places.get(index) {
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
            self.places.free.push(number);
            self.len -= 1;
        }
    }

    /// Every driver it holds.
    pub(super) fn into_drivers(self) -> impl Iterator<Item = F> {
        self.drivers.into_iter().flatten()
    }

    /// Its places, its drivers dropped first.
    pub(super) fn into_places(self) -> Box<Places<S>> {
        drop(self.drivers);
        self.places
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::AtomicBool;
    use std::task::Poll;

    use super::*;

    /// A driver: at each poll it wakes itself if `wake`, and leaves a clone of its waker in
    /// `leave`, if given; it ends unless `gate` is given and still closed.
    #[derive(Default)]
    struct Probe {
        wake: bool,
        leave: Option<Arc<Mutex<Option<Waker>>>>,
        gate: Option<Arc<AtomicBool>>,
    }

    impl Future for Probe {
        type Output = ();

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.wake {
                cx.waker().wake_by_ref();
            }
            if let Some(slot) = &self.leave {
                *slot.lock().unwrap() = Some(cx.waker().clone());
            }
            match &self.gate {
                Some(gate) if !gate.load(Ordering::Acquire) => Poll::Pending,
                _ => Poll::Ready(()),
            }
        }
    }

    fn set(woken: &Arc<Woken>, places: Option<Box<Places>>) -> ReadySet<Probe> {
        ReadySet::new(Arc::clone(woken), places)
    }

    /// The places a run leaves are free for the next run's set, which makes no new one, and
    /// clear: a place that was on the stack of woken places when its run ended, its flag
    /// set, is pushed again by the next wake-up of the driver it then holds, which is
    /// polled.
    #[test]
    fn places_a_run_leaves_are_free_and_clear_for_the_next_run() {
        let woken: Arc<Woken> = Woken::polling(Waker::noop());
        let mut first = set(&woken, None);
        first.push(Probe {
            wake: true,
            ..Probe::default()
        });
        first.push(Probe::default());
        assert_eq!(first.pass(), 2);
        assert!(first.is_empty(), "both ended");
        assert_ne!(
            woken.head.load(Ordering::Relaxed),
            0,
            "one place is stacked"
        );
        let places = first
            .into_places()
            .spare(&woken)
            .expect("held by no one else");
        woken.reset();
        assert_eq!(places.len(), 2);

        let mut second = set(&woken, Some(places));
        let (slot, gate) = (Arc::default(), Arc::new(AtomicBool::new(false)));
        second.push(Probe {
            leave: Some(Arc::clone(&slot)),
            gate: Some(Arc::clone(&gate)),
            ..Probe::default()
        });
        assert_eq!(second.places.len(), 2, "no place made");
        assert_eq!(second.pass(), 1, "the added driver, and no stale place");
        assert!(!second.is_empty(), "it waits");
        gate.store(true, Ordering::Release);
        let waker = slot
            .lock()
            .unwrap()
            .take()
            .expect("the driver left its waker");
        waker.wake();
        assert_eq!(second.pass(), 1, "its wake-up stacked its place");
        assert!(second.is_empty(), "it ended");
    }

    /// A place whose waker is held elsewhere, as by a socket a driver registered with,
    /// could be woken later: no place of its set is kept.
    #[test]
    fn places_whose_waker_is_held_elsewhere_are_not_kept() {
        let woken: Arc<Woken> = Woken::polling(Waker::noop());
        let mut set = set(&woken, None);
        let slot = Arc::default();
        set.push(Probe::default());
        set.push(Probe {
            leave: Some(Arc::clone(&slot)),
            ..Probe::default()
        });
        set.pass();
        assert!(set.is_empty(), "both ended");
        assert!(set.into_places().spare(&woken).is_none());
        drop(slot);
        assert_eq!(Arc::strong_count(&woken), 1, "the places are dropped");
    }

    /// A set of many places leaves [`PLACES_KEPT`] of them.
    #[test]
    fn a_set_of_many_places_leaves_a_few() {
        let woken: Arc<Woken> = Woken::polling(Waker::noop());
        let mut set = set(&woken, None);
        for _ in 0..PLACES_KEPT + 10 {
            set.push(Probe::default());
        }
        assert_eq!(set.pass(), PLACES_KEPT + 10);
        let places = set
            .into_places()
            .spare(&woken)
            .expect("held by no one else");
        assert_eq!(places.len(), PLACES_KEPT);
        assert_eq!(Arc::strong_count(&woken), 1 + PLACES_KEPT);
    }

    /// A place past those kept, whose waker is held elsewhere, still holds the
    /// run's waker: no place is kept, or its late wake-up would push a number the next
    /// set has no place for.
    #[test]
    fn a_dropped_place_held_elsewhere_keeps_none() {
        let woken: Arc<Woken> = Woken::polling(Waker::noop());
        let mut set = set(&woken, None);
        let slot = Arc::default();
        for _ in 0..PLACES_KEPT + 5 {
            set.push(Probe::default());
        }
        set.push(Probe {
            leave: Some(Arc::clone(&slot)),
            ..Probe::default()
        });
        set.pass();
        assert!(set.into_places().spare(&woken).is_none());
    }

    /// The run's waker held elsewhere (as by a driver among the eight polled
    /// together): no place is kept.
    #[test]
    fn places_whose_run_s_waker_is_held_elsewhere_are_not_kept() {
        let woken: Arc<Woken> = Woken::polling(Waker::noop());
        let mut set = set(&woken, None);
        set.push(Probe::default());
        set.pass();
        let held = futures_util::task::waker(Arc::clone(&woken));
        assert!(set.into_places().spare(&woken).is_none());
        drop(held);
    }
}
