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

use crate::util::sync::{AtomicInt, StdSync, SyncFamily, WakerCell};

/// The future is polling its drivers.
const POLLING: u8 = 1;
/// A wake-up came since the pass began, or, when not polling, since the task was woken.
const WOKEN: u8 = 2;
/// The last poll gave the task's turn back with its drivers woken.
const GAVE_BACK: u8 = 4;

/// The run's waker for its joined drivers, and the stack of the ready set's woken places;
/// see the module docs and `ready_set.rs`.
pub(super) struct Woken<S: SyncFamily = StdSync> {
    /// [`POLLING`] and [`WOKEN`].
    state: S::AtomicU8,
    /// The last place of the ready set pushed, plus one; zero when its stack is empty.
    pub(super) head: S::AtomicU32,
    /// The awaiting task.
    task: S::WakerCell,
}

impl<S: SyncFamily> Woken<S> {
    /// A waker for a future in the middle of a pass over its drivers, whose task is
    /// `task`.
    pub(super) fn polling(task: &Waker) -> Arc<Self> {
        let woken: Woken<S> = Woken {
            state: AtomicInt::new(POLLING),
            head: AtomicInt::new(0),
            task: WakerCell::new(),
        };
        woken.task.register(task);
        Arc::new(woken)
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

impl<S: SyncFamily> ArcWake for Woken<S> {
    fn wake_by_ref(arc_self: &Arc<Self>) {
        arc_self.notify();
    }
}
