//! A write-once cell for the records and values a run writes once per node.
//!
//! `std::sync::OnceLock::set` goes through `Once::call_once_force` (a closure, a queue of
//! waiters it never needs here): some sixty instructions per write, twice per node. A node's
//! record and value have exactly one writer (whoever finalizes the node, invariant 1 in
//! `state.rs`) and readers who never wait (they read after the node is `DONE`, or the run
//! is over). This cell is what that needs: a plain write and one release store to publish
//! it, one acquire load to read it. Having one writer is the caller's promise
//! ([`WriteOnce::set`] is `unsafe`), not the cell's to check.

#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::fmt;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU8, Ordering};

const EMPTY: u8 = 0;
const READY: u8 = 1;

/// A cell written at most once; readers see nothing until the write is complete.
pub(crate) struct WriteOnce<T> {
    state: AtomicU8,
    value: UnsafeCell<MaybeUninit<T>>,
}

// SAFETY: a shared `WriteOnce<T>` hands out only `&T` (so `T: Sync` is needed), and the one
// write moves a `T` in from the one writing thread (so `T: Send` is needed). The write
// happens before the `READY` release store and every read after an acquire load of `READY`,
// so no read overlaps the write; writes never overlap each other (the contract of the
// `unsafe` `set`); `take` and `Drop` need `&mut self`.
unsafe impl<T: Send + Sync> Sync for WriteOnce<T> {}

impl<T> WriteOnce<T> {
    pub(crate) const fn new() -> Self {
        WriteOnce {
            state: AtomicU8::new(EMPTY),
            value: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    /// Stores `value`. Neither claims the cell (a compare-and-swap) nor checks it first (a
    /// load): either waits for the cell's cache line, which is often cold on a large graph
    /// (its nodes end in graph order, not memory order), where a plain store does not wait.
    ///
    /// # Safety
    ///
    /// The cell is empty (never written, or emptied by [`take`](Self::take)), and no other
    /// thread writes it concurrently: the caller is its only writer (for a node's record and
    /// value, the one party that finalizes the node, invariant 1 in `state.rs`). Checked in
    /// debug builds.
    pub(crate) unsafe fn set(&self, value: T) {
        debug_assert_eq!(self.state.load(Ordering::Relaxed), EMPTY, "written twice");
        // SAFETY: the cell is empty and the caller is its only writer (this function's
        // contract), so no reader looks at the value until `READY` is stored below.
        unsafe { (*self.value.get()).write(value) };
        self.state.store(READY, Ordering::Release);
    }

    /// The value, once its write is complete.
    pub(crate) fn get(&self) -> Option<&T> {
        if self.state.load(Ordering::Acquire) == READY {
            // SAFETY: `READY` was stored (release) after the value was written, and only
            // `take` and `Drop`, which hold `&mut self`, ever leave `READY`.
            Some(unsafe { (*self.value.get()).assume_init_ref() })
        } else {
            None
        }
    }

    /// Moves the value out, leaving the cell empty (to be written again).
    pub(crate) fn take(&mut self) -> Option<T> {
        if *self.state.get_mut() != READY {
            return None;
        }
        *self.state.get_mut() = EMPTY;
        // SAFETY: `READY` means the value is initialized; the state is `EMPTY` again, so it
        // is neither read nor dropped a second time.
        Some(unsafe { self.value.get_mut().assume_init_read() })
    }
}

impl<T> Default for WriteOnce<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Drop for WriteOnce<T> {
    fn drop(&mut self) {
        drop(self.take());
    }
}

impl<T: fmt::Debug> fmt::Debug for WriteOnce<T> {
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
        // SAFETY (every `set` in this test): one thread, and the cell is empty.
        unsafe { cell.set(Counted(Arc::clone(&drops), 1)) };
        assert_eq!(cell.get().map(|c| c.1), Some(1));
        assert_eq!(cell.get().map(|c| c.1), Some(1), "read many times");
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        let taken = cell.take();
        assert_eq!(taken.as_ref().map(|c| c.1), Some(1));
        assert!(cell.get().is_none() && cell.take().is_none());
        drop(taken);
        unsafe { cell.set(Counted(Arc::clone(&drops), 3)) };
        assert_eq!(
            cell.get().map(|c| c.1),
            Some(3),
            "writable again once taken"
        );
        drop(cell);
        assert_eq!(
            drops.load(Ordering::SeqCst),
            2,
            "every value dropped exactly once"
        );
    }

    /// One thread writes a cell while others read it: every reader sees nothing or the whole
    /// value, and it is dropped once.
    #[test]
    fn readers_see_nothing_or_the_whole_value() {
        for round in 0..200 {
            let drops = Arc::new(AtomicUsize::new(0));
            let cell = Arc::new(WriteOnce::<(Counted, [usize; 8])>::new());
            let readers: Vec<_> = (0..3)
                .map(|_| {
                    let cell = Arc::clone(&cell);
                    std::thread::spawn(move || {
                        let mut seen = 0;
                        for _ in 0..1000 {
                            if let Some((c, words)) = cell.get() {
                                assert!(words.iter().all(|&w| w == c.1), "a torn read");
                                seen += 1;
                            }
                        }
                        seen
                    })
                })
                .collect();
            let value = (Counted(Arc::clone(&drops), round), [round; 8]);
            // SAFETY: the cell is empty and this thread is its only writer.
            unsafe { cell.set(value) };
            for r in readers {
                r.join().unwrap();
            }
            assert_eq!(cell.get().map(|(c, _)| c.1), Some(round));
            assert_eq!(drops.load(Ordering::SeqCst), 0);
            drop(cell);
            assert_eq!(
                drops.load(Ordering::SeqCst),
                1,
                "dropped once, with the cell"
            );
        }
    }
}
