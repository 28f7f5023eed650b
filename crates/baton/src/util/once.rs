//! A write-once cell for what a run writes once: each node's record and value, and the run's
//! own start, `Started`, and orchestrator key.
//!
//! `std::sync::OnceLock::set` goes through `Once::call_once_force`, twice per node, with a
//! closure and a queue of waiters it never needs here. Every writer of these cells is alone
//! by construction: a node's record and value are written by whoever finalizes the node, as
//! invariant 1 in `engine/run/state.rs` says, and the run's cells by its future, when it
//! starts. Their readers never wait: they read after the node is `DONE`, or after the run is
//! over. A read before the write finds `None`, as `OnceLock::get` would, and the run's
//! readers treat that as "not started". This cell is what that needs: a write, `set_alone`,
//! is a relaxed load, the value written, and a release store; a read is one acquire load.
//! The `once_loom_tests` module model-checks the publication and the drops.

#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::fmt;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU8, Ordering};

use super::sync::{AtomicInt, RawCell, StdSync, SyncFamily};

const EMPTY: u8 = 0;
const READY: u8 = 1;

/// A cell written at most once; readers see nothing until the write is complete. Generic
/// over its atomic and cell: std's, or loom's in the model-checking tests.
pub(crate) struct WriteOnce<T, S: SyncFamily = StdSync> {
    state: S::AtomicU8,
    value: S::UnsafeCell<MaybeUninit<T>>,
}

// SAFETY: a shared `WriteOnce<T>` hands out only `&T`, so `T: Sync` is needed. The one
// write moves a `T` in from whichever thread is its writer, so `T: Send` is needed. The
// write happens before the `READY` release store and every read after an acquire load of
// `READY`, so no read overlaps the write; `take` and `Drop` need `&mut self`.
unsafe impl<T: Send + Sync, S: SyncFamily> Sync for WriteOnce<T, S> {}

impl<T> WriteOnce<T> {
    /// An empty cell. It is a constant, so that arrays of cells are built without copies.
    pub(crate) const fn new() -> Self {
        WriteOnce {
            state: AtomicU8::new(EMPTY),
            value: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }
}

impl<T, S: SyncFamily> WriteOnce<T, S> {
    /// Stores `value`, for a cell whose one writer is known by construction, as a node's
    /// finalizer is. A relaxed load and a release store. Returns whether it wrote: a cell
    /// already written keeps its value, and `value` is dropped.
    ///
    /// # Safety
    ///
    /// No other call of `set_alone` on this cell may run at the same time as this one. Calls
    /// one after the other, on any threads, are fine: the later one finds the cell written.
    #[inline]
    pub(crate) unsafe fn set_alone(&self, value: T) -> bool {
        if self.state.load(Ordering::Relaxed) != EMPTY {
            refused(value);
            return false;
        }
        // SAFETY: the caller is the only writer at this time, and the cell is empty, so no
        // earlier write is overwritten; readers do not look at the value until `READY` is
        // stored below.
        self.value.with_mut(|cell| unsafe { (*cell).write(value) });
        self.state.store(READY, Ordering::Release);
        true
    }

    /// The value, once its write is complete.
    pub(crate) fn get(&self) -> Option<&T> {
        if self.state.load(Ordering::Acquire) == READY {
            // SAFETY: `READY` was stored with release ordering after the value was written, and only
            // `take` and `Drop`, which hold `&mut self`, ever leave `READY`.
            Some(self.value.with(|cell| unsafe { (*cell).assume_init_ref() }))
        } else {
            None
        }
    }

    /// Moves the value out, leaving the cell empty so it can be written again.
    pub(crate) fn take(&mut self) -> Option<T> {
        let was_ready = self.state.with_mut(|state| {
            if *state != READY {
                return false;
            }
            *state = EMPTY;
            true
        });
        if !was_ready {
            return None;
        }
        // SAFETY: `READY` means the value is initialized, and `&mut self` excludes any
        // other access; the state is `EMPTY` again, so it is neither read nor dropped a
        // second time.
        let value = self
            .value
            .with_mut(|cell| unsafe { (*cell).assume_init_read() });
        Some(value)
    }
}

/// Drops the value of a write refused because the cell was written: rare, kept off the
/// write's path.
#[cold]
fn refused<T>(value: T) {
    drop(value);
}

impl<T, S: SyncFamily> Default for WriteOnce<T, S> {
    /// An empty cell.
    fn default() -> Self {
        WriteOnce {
            state: AtomicInt::new(EMPTY),
            value: RawCell::new(MaybeUninit::uninit()),
        }
    }
}

impl<T, S: SyncFamily> Drop for WriteOnce<T, S> {
    fn drop(&mut self) {
        drop(self.take());
    }
}

impl<T: fmt::Debug, S: SyncFamily> fmt::Debug for WriteOnce<T, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.get() {
            Some(v) => f.debug_tuple("WriteOnce").field(v).finish(),
            None => f.write_str("WriteOnce(<empty>)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::WriteOnce;

    /// Counts its drops.
    struct Counted(Arc<AtomicUsize>, usize);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn written_once_read_many_taken_and_dropped_once() {
        let drops = Arc::new(AtomicUsize::new(0));
        let mut cell = WriteOnce::new();
        assert!(cell.get().is_none());
        // SAFETY: this thread is the cell's only writer, and its writes are one after the
        // other.
        assert!(unsafe { cell.set_alone(Counted(Arc::clone(&drops), 1)) });
        assert_eq!(cell.get().map(|c| c.1), Some(1));
        assert_eq!(drops.load(Ordering::SeqCst), 0, "the written value is kept");
        // SAFETY: as above.
        let wrote = unsafe { cell.set_alone(Counted(Arc::clone(&drops), 2)) };
        assert!(!wrote, "the second write is refused");
        assert_eq!(
            drops.load(Ordering::SeqCst),
            1,
            "the refused value is dropped"
        );
        assert_eq!(cell.get().map(|c| c.1), Some(1), "the first value stays");
        let taken = cell.take();
        assert_eq!(taken.as_ref().map(|c| c.1), Some(1));
        assert!(cell.get().is_none() && cell.take().is_none());
        assert_eq!(drops.load(Ordering::SeqCst), 1, "taking does not drop");
        drop(taken);
        // SAFETY: as above.
        let wrote = unsafe { cell.set_alone(Counted(Arc::clone(&drops), 3)) };
        assert!(wrote, "writable again");
        assert_eq!(cell.get().map(|c| c.1), Some(3));
        drop(cell);
        assert_eq!(
            drops.load(Ordering::SeqCst),
            3,
            "every value dropped exactly once"
        );
    }

    /// One thread writes a cell while others read it: every reader sees nothing or the whole
    /// value, and it is dropped once.
    #[test]
    fn a_lone_writer_and_readers_see_none_or_the_whole_value() {
        for round in 0..200 {
            let drops = Arc::new(AtomicUsize::new(0));
            let cell = Arc::new(WriteOnce::<(Counted, [usize; 8])>::new());
            let readers: Vec<_> = (0..3)
                .map(|_| {
                    let cell = Arc::clone(&cell);
                    std::thread::spawn(move || {
                        for _ in 0..100 {
                            if let Some((c, words)) = cell.get() {
                                assert!(words.iter().all(|&w| w == c.1), "a torn read");
                            }
                        }
                    })
                })
                .collect();
            let writer = {
                let (cell, drops) = (Arc::clone(&cell), Arc::clone(&drops));
                // SAFETY: this thread is the cell's only writer.
                std::thread::spawn(move || unsafe {
                    cell.set_alone((Counted(drops, round), [round; 8]))
                })
            };
            assert!(writer.join().unwrap());
            for r in readers {
                r.join().unwrap();
            }
            let seen = cell.get().map(|(c, words)| (c.1, *words));
            assert_eq!(seen, Some((round, [round; 8])));
            assert_eq!(drops.load(Ordering::SeqCst), 0);
            drop(cell);
            assert_eq!(drops.load(Ordering::SeqCst), 1);
        }
    }
}

#[cfg(test)]
mod once_loom_tests;
