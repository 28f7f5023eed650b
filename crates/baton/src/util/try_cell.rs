//! A cell whose value one caller at a time may reach, and whose other callers give up at
//! once instead of waiting: what a graph's spare run arrays need.
//!
//! `std::sync::Mutex::try_lock` costs two read-modify-writes: one to take the lock, and
//! one to release it, which must learn whether a thread sleeps on the lock and needs
//! waking. Nobody ever sleeps on this cell, as nobody waits: taking it is one
//! compare-and-swap, and releasing it is a release store. The `try_cell_loom_tests` module
//! model-checks that two callers never reach the value at once and that each sees what the
//! last one left.

#![allow(unsafe_code)]

use std::fmt;
use std::sync::atomic::Ordering;

use super::sync::{AtomicInt, RawCell, StdSync, SyncFamily};

const FREE: u8 = 0;
const HELD: u8 = 1;

/// A value behind a flag that one caller at a time holds, without waiting; see the module
/// docs. Generic over its atomic and cell: std's, or loom's in the model-checking tests.
pub(crate) struct TryCell<T, S: SyncFamily = StdSync> {
    held: S::AtomicU8,
    value: S::UnsafeCell<T>,
}

// SAFETY: the value is reached only by the one caller that moved the flag from `FREE`
// to `HELD`, so a shared `TryCell<T>` hands out `&mut T` to one thread at a time, as a
// mutex does: `T: Send` is needed, and `T: Sync` is not.
unsafe impl<T: Send, S: SyncFamily> Sync for TryCell<T, S> {}

impl<T, S: SyncFamily> TryCell<T, S> {
    /// A free cell holding `value`.
    pub(crate) fn new(value: T) -> Self {
        TryCell {
            held: AtomicInt::new(FREE),
            value: RawCell::new(value),
        }
    }

    /// Runs `f` on the value, unless another caller holds it now: then `None`, at once.
    /// If `f` panics, the cell is free again and the value is as `f` left it.
    pub(crate) fn try_with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        // Acquire: this caller sees what the previous holder wrote before its release.
        if self
            .held
            .compare_exchange(FREE, HELD, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return None;
        }
        let _free = Free(&self.held);
        // SAFETY: the compare-and-swap above found the cell free and marked it held: until
        // `_free` stores `FREE`, no other caller reaches the value.
        Some(self.value.with_mut(|value| f(unsafe { &mut *value })))
    }
}

/// Frees the cell when the holder's closure returns or panics.
struct Free<'a, A: AtomicInt<Int = u8>>(&'a A);

impl<A: AtomicInt<Int = u8>> Drop for Free<'_, A> {
    fn drop(&mut self) {
        // Release: the next holder sees what this one wrote.
        self.0.store(FREE, Ordering::Release);
    }
}

impl<T, S: SyncFamily> fmt::Debug for TryCell<T, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let held = self.held.load(Ordering::Relaxed) != FREE;
        f.debug_struct("TryCell")
            .field("held", &held)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::TryCell;

    #[test]
    fn a_held_cell_refuses_a_second_caller_and_is_free_after() {
        let cell = TryCell::<Vec<u32>>::new(Vec::new());
        let inner = cell.try_with(|v| {
            v.push(1);
            cell.try_with(|v| v.push(2))
        });
        assert_eq!(inner, Some(None), "refused while held");
        assert_eq!(cell.try_with(|v| v.clone()), Some(vec![1]));
    }

    #[test]
    fn a_panic_in_the_closure_frees_the_cell() {
        let cell = TryCell::<u32>::new(1);
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cell.try_with(|v| {
                *v = 2;
                panic!("in the closure");
            })
        }));
        assert!(panicked.is_err());
        assert_eq!(cell.try_with(|v| *v), Some(2));
    }
}

#[cfg(test)]
mod try_cell_loom_tests;
