//! How the drivers an inline run polls in its own future wake that future: through one
//! waker of the run's, not the awaiting task's, so that a wake-up that comes while the
//! future is polling its drivers wakes no task. The future sees it when its pass over the
//! drivers ends and polls them again in the same poll, within a budget, instead of
//! returning `Pending` to be polled again at once: a task woken while it runs is put back
//! at the end of its worker's queue, as a yield, and tokio wakes an idle worker to steal it.
//!
//! The state is two bits, and a third that only the future reads: the future is polling its
//! drivers, and a wake-up came since that pass began or, when not polling, since the task
//! was woken; the third says that its last poll gave the task's turn back. A wake-up sets the second
//! bit; it wakes the task only if neither was set: while polling, the pass's end sees the
//! bit; when not polling, the task was woken already by the wake-up that set it. A pass
//! begins with a swap that sets the first bit and clears the second, so it polls after
//! every wake-up it cleared, and ends with a compare-and-swap from "polling" to neither,
//! which fails if a wake-up came during the pass. The task's waker is registered before the
//! first pass that can end: a wake-up after that end finds neither bit and wakes it. The
//! `joined_loom_tests` module model-checks this, with wake-ups from other threads and from
//! the drivers' own polls.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Waker;

use futures_util::task::ArcWake;

use super::ready_set::Places;
use crate::util::sync::{AtomicInt, Lock, StdSync, SyncFamily, WakerCell};

/// The future is polling its drivers.
const POLLING: u8 = 1;
/// A wake-up came since the pass began, or, when not polling, since the task was woken.
const WOKEN: u8 = 2;
/// The last poll gave the task's turn back with its drivers woken.
const GAVE_BACK: u8 = 4;

/// The run's waker for its joined drivers, and the stack of the ready set's woken places;
/// see the module docs and `ready_set.rs`.
pub(in crate::engine) struct Woken<S: SyncFamily = StdSync> {
    /// [`POLLING`] and [`WOKEN`].
    state: S::AtomicU8,
    /// The last place of the ready set pushed, plus one; zero when its stack is empty.
    pub(super) head: S::AtomicU32,
    /// The awaiting task.
    task: S::WakerCell,
    /// Free places of a set: those an earlier run left, until the run's set takes them,
    /// and those of the run's set, its drivers dropped, from the run's future's drop
    /// ([`Joined::leave_places`](super::Joined::leave_places)) to the run state's, whose
    /// [`CancelWake::spare`](super::CancelWake::spare) always takes them out: the places
    /// hold this waker.
    places: S::Lock<Option<Box<Places<S>>>>,
}

impl<S: SyncFamily> Woken<S> {
    /// A waker for a future in the middle of a pass over its drivers, whose task is
    /// `task`.
    pub(super) fn polling(task: &Waker) -> Arc<Self> {
        let woken: Woken<S> = Woken::unused();
        woken.begin_polling(task);
        Arc::new(woken)
    }

    /// A waker of no run: no pass begun, no wake-up, no task, an empty stack.
    fn unused() -> Self {
        Woken {
            state: AtomicInt::new(0),
            head: AtomicInt::new(0),
            task: WakerCell::new(),
            places: Lock::new(None),
        }
    }

    /// An unused waker (from [`spare`](Self::spare)) becomes that of a future in the
    /// middle of a pass over its drivers, whose task is `task`, as [`polling`] makes one.
    ///
    /// [`polling`]: Self::polling
    pub(super) fn begin_polling(&self, task: &Waker) {
        self.state.store(POLLING, Ordering::Relaxed);
        self.task.register(task);
    }

    /// `woken`, made unused for another run, if nothing else holds it: no driver, place
    /// or waker made of it. Else `None`, and it is dropped when the last holder is.
    pub(super) fn spare(mut woken: Arc<Self>) -> Option<Arc<Self>> {
        // Replacing the fields drops the task's waker: a spare keeps no task alive.
        *Arc::get_mut(&mut woken)? = Woken::unused();
        Some(woken)
    }

    /// Made unused, as [`spare`](Self::spare) makes it, while the places of a set still
    /// hold it: called only when nothing else does (`Places::spare`), so that no wake-up
    /// comes meanwhile. Lets the task go.
    pub(super) fn reset(&self) {
        self.state.store(0, Ordering::Relaxed);
        self.head.store(0, Ordering::Relaxed);
        drop(self.task.take());
    }

    /// Holds `places`, those of the run's set, its drivers dropped: see the field's docs.
    pub(super) fn keep_places(&self, places: Box<Places<S>>) {
        self.places.with(|kept| *kept = Some(places));
    }

    /// The places it holds, if any, taken out.
    pub(super) fn take_places(&self) -> Option<Box<Places<S>>> {
        self.places.with(Option::take)
    }

    /// The future now runs in the task of `task`: a wake-up when not polling wakes it.
    pub(super) fn register(&self, task: &Waker) {
        self.task.register(task);
    }

    /// A pass over the drivers begins: it polls after every wake-up before it. Returns
    /// whether the poll before gave the task's turn back.
    pub(super) fn begin_pass(&self) -> bool {
        self.state.swap(POLLING, Ordering::Acquire) & GAVE_BACK != 0
    }

    /// The pass ends; whether no wake-up came during it. If one did, the future is still
    /// polling: it begins another pass, or gives its turn back with
    /// [`give_turn_back`](Self::give_turn_back).
    pub(super) fn end_pass(&self) -> bool {
        self.state
            .compare_exchange(POLLING, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// A pass ended with a wake-up and the future stops polling its drivers: it wakes its
    /// task itself, after this.
    pub(super) fn give_turn_back(&self) {
        self.state.store(WOKEN | GAVE_BACK, Ordering::Release);
    }

    /// A wake-up: see the module docs.
    pub(super) fn notify(&self) {
        if self.state.fetch_or(WOKEN, Ordering::AcqRel) == 0 {
            self.task.wake();
        }
    }
}

#[cfg(test)]
impl Woken {
    /// Whether it is as [`spare`](Self::spare) leaves it: no pass begun, no wake-up, an
    /// empty stack, no task kept (a task found is taken out).
    pub(in crate::engine) fn is_unused(&self) -> bool {
        self.state.load(Ordering::Relaxed) == 0
            && self.head.load(Ordering::Relaxed) == 0
            && WakerCell::take(&self.task).is_none()
    }
}

impl<S: SyncFamily> std::fmt::Debug for Woken<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Woken").finish_non_exhaustive()
    }
}

impl<S: SyncFamily> ArcWake for Woken<S> {
    fn wake_by_ref(arc_self: &Arc<Self>) {
        arc_self.notify();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    use super::*;

    /// A task that counts its wake-ups.
    #[derive(Default)]
    struct Task(AtomicUsize);

    impl Wake for Task {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A waker that nothing else holds is made unused, and lets its task go; one still
    /// held, by a waker made of it, is not kept. A spare waker made the run's again works
    /// as a new one: it wakes its new task after a pass, not during one.
    #[test]
    fn only_a_waker_no_one_holds_is_kept_and_it_keeps_no_task() {
        let task = Arc::new(Task::default());
        let woken: Arc<Woken> = Woken::polling(&Waker::from(Arc::clone(&task)));
        assert_eq!(Arc::strong_count(&task), 2, "the run's task is kept");
        let held = futures_util::task::waker(Arc::clone(&woken));
        assert!(Woken::spare(woken).is_none(), "a waker made of it holds it");
        let woken: Arc<Woken> = Woken::polling(&Waker::from(Arc::clone(&task)));
        drop(held);
        let spare = Woken::spare(woken).expect("no one else holds it");
        assert_eq!(Arc::strong_count(&task), 1, "the spare keeps no task");
        assert!(spare.is_unused());

        let next = Arc::new(Task::default());
        spare.begin_polling(&Waker::from(Arc::clone(&next)));
        spare.notify();
        assert_eq!(
            next.0.load(Ordering::Relaxed),
            0,
            "no wake-up during a pass"
        );
        assert!(!spare.end_pass(), "the pass sees the wake-up");
        spare.begin_pass();
        assert!(spare.end_pass(), "a pass with no wake-up ends");
        spare.notify();
        assert_eq!(
            next.0.load(Ordering::Relaxed),
            1,
            "a wake-up after it wakes the task"
        );
        assert_eq!(task.0.load(Ordering::Relaxed), 0, "and not the last run's");
    }
}
