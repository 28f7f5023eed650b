//! The synchronization primitives concurrent code is written against.
//!
//! The breaker's state machine, the run's ready queue, an inline run's inbox, a node's
//! join counter and the write-once cell are generic over a [`SyncFamily`]: [`StdSync`] in the library, and, in
//! this crate's own tests, a family backed by the [loom](https://docs.rs/loom) model
//! checker. Loom replaces the atomics, the mutex and the unsafe cell with instrumented
//! versions and explores every interleaving of a small test, so the properties these types
//! promise are checked, not hoped for: exactly N half-open probes, no ready node stranded,
//! one write per cell, no driver of an inline run left unpolled. Because
//! the swap happens through this trait rather than `--cfg loom`, the loom tests run under a
//! plain `cargo test` and tokio is left alone. The std family is each type's default
//! parameter, so the library names them without it.
//!
//! The surface is deliberately small:
//!
//! - a 64-bit atomic with `load`/`store`, as the breaker does every read-modify-write
//!   under its mutex;
//! - 8-, 32-, 64-bit and pointer-sized atomics with the few read-modify-writes the ready
//!   queue, the write-once cell and the rate limiter use;
//! - a mutex used through a closure, so that no guard can be held across an `.await` or
//!   leak out of a critical section (two: one for values that are `Send`, and one over any
//!   value, for the inbox of an inline run, whose drivers are `Send` only when its input is);
//! - an unsafe cell reached through closures, as loom's is, so that loom sees each access
//!   begin and end.

use std::fmt;
use std::sync::PoisonError;
use std::sync::atomic::Ordering;

/// A 64-bit atomic cell: only `load` and `store`.
pub(crate) trait Atomic: Send + Sync {
    /// A cell holding `v`.
    fn new(v: u64) -> Self;
    /// Reads the cell.
    fn load(&self, order: Ordering) -> u64;
    /// Writes the cell.
    fn store(&self, v: u64, order: Ordering);
}

/// A mutex used through a closure.
pub(crate) trait Lock<T>: Send + Sync {
    /// A mutex holding `v`.
    fn new(v: T) -> Self;
    /// Runs `f` with exclusive access. A poisoned lock is recovered: every critical section
    /// in the breaker leaves its data consistent before anything that could panic.
    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R;
}

/// An atomic integer: the operations of std's `AtomicU8`, `AtomicU32` and `AtomicUsize`
/// that the ready queue and the write-once cell use, with the same meaning.
pub(crate) trait AtomicInt: Send + Sync + fmt::Debug {
    /// The integer it holds.
    type Int: Copy;
    /// A cell holding `v`.
    fn new(v: Self::Int) -> Self;
    /// Reads the cell.
    fn load(&self, order: Ordering) -> Self::Int;
    /// Writes the cell.
    fn store(&self, v: Self::Int, order: Ordering);
    /// Adds `v`, wrapping; returns the previous value.
    fn fetch_add(&self, v: Self::Int, order: Ordering) -> Self::Int;
    /// Subtracts `v`, wrapping; returns the previous value.
    fn fetch_sub(&self, v: Self::Int, order: Ordering) -> Self::Int;
    /// Bitwise or with `v`; returns the previous value.
    fn fetch_or(&self, v: Self::Int, order: Ordering) -> Self::Int;
    /// Writes `v`; returns the previous value.
    fn swap(&self, v: Self::Int, order: Ordering) -> Self::Int;
    /// Writes `new` if the cell holds `current`; the previous value, `Ok` if it was written.
    fn compare_exchange(
        &self,
        current: Self::Int,
        new: Self::Int,
        success: Ordering,
        failure: Ordering,
    ) -> Result<Self::Int, Self::Int>;
    /// [`compare_exchange`](Self::compare_exchange), which may fail spuriously.
    fn compare_exchange_weak(
        &self,
        current: Self::Int,
        new: Self::Int,
        success: Ordering,
        failure: Ordering,
    ) -> Result<Self::Int, Self::Int>;
    /// Runs `f` on the value, reached without synchronization through `&mut self`.
    fn with_mut<R>(&mut self, f: impl FnOnce(&mut Self::Int) -> R) -> R;
}

/// A mutex over any value, used through a closure, as [`Lock`] is; unlike it, `Sync` only
/// when the value is `Send` (as std's mutex), so that a type with no bounds can hold one.
pub(crate) trait Exclusive<T> {
    /// A mutex holding `v`.
    fn new(v: T) -> Self;
    /// Runs `f` with exclusive access. A poisoned lock is recovered, as [`Lock::with`] does.
    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R;
    /// The value, through `&mut self`: no lock is taken. A poisoned lock is recovered.
    fn get_mut(&mut self) -> &mut T;
}

/// A cell whose value is reached through raw pointers, as `std::cell::UnsafeCell`'s is.
/// Each access is a closure call, so that loom can check that no write overlaps another
/// access; dereferencing the pointer is the caller's `unsafe`.
pub(crate) trait RawCell<T> {
    /// A cell holding `v`.
    fn new(v: T) -> Self;
    /// Runs `f` with a pointer to read the value through.
    fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R;
    /// Runs `f` with a pointer to write the value through.
    fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R;
}

/// A cell holding a waker that another thread wakes, as `futures`' `AtomicWaker`.
pub(crate) trait WakerCell: Send + Sync {
    /// An empty cell.
    fn new() -> Self;
    /// Keeps `waker`, replacing the one kept; wakes it at once if a wake-up raced this.
    fn register(&self, waker: &std::task::Waker);
    /// Wakes the waker kept, if any, and takes it out.
    fn wake(&self);
    /// Takes the waker kept out, if any, without waking it.
    fn take(&self) -> Option<std::task::Waker>;
}

/// A family of primitives: std's in the library, loom's in the model-checking tests.
pub(crate) trait SyncFamily: Send + Sync + 'static {
    /// The 64-bit atomic cell.
    type Atomic: Atomic;
    /// The mutex.
    type Lock<T: Send>: Lock<T>;
    /// The mutex over any value.
    type Mutex<T>: Exclusive<T>;
    /// An 8-bit atomic integer.
    type AtomicU8: AtomicInt<Int = u8>;
    /// A 32-bit atomic integer.
    type AtomicU32: AtomicInt<Int = u32>;
    /// A pointer-sized atomic integer.
    type AtomicUsize: AtomicInt<Int = usize>;
    /// A 64-bit atomic integer.
    type AtomicU64: AtomicInt<Int = u64>;
    /// The unsafe cell.
    type UnsafeCell<T>: RawCell<T>;
    /// The waker cell.
    type WakerCell: WakerCell;
}

/// Implements [`AtomicInt`] for an atomic type by forwarding to its inherent methods;
/// `$with_mut` is how `with_mut` reaches the value.
macro_rules! atomic_int {
    ($atomic:ty, $int:ty, |$this:ident, $f:ident| $with_mut:expr) => {
        impl AtomicInt for $atomic {
            type Int = $int;
            #[inline]
            fn new(v: $int) -> Self {
                <$atomic>::new(v)
            }
            #[inline]
            fn load(&self, order: Ordering) -> $int {
                <$atomic>::load(self, order)
            }
            #[inline]
            fn store(&self, v: $int, order: Ordering) {
                <$atomic>::store(self, v, order);
            }
            #[inline]
            fn fetch_add(&self, v: $int, order: Ordering) -> $int {
                <$atomic>::fetch_add(self, v, order)
            }
            #[inline]
            fn fetch_sub(&self, v: $int, order: Ordering) -> $int {
                <$atomic>::fetch_sub(self, v, order)
            }
            #[inline]
            fn fetch_or(&self, v: $int, order: Ordering) -> $int {
                <$atomic>::fetch_or(self, v, order)
            }
            #[inline]
            fn swap(&self, v: $int, order: Ordering) -> $int {
                <$atomic>::swap(self, v, order)
            }
            #[inline]
            fn compare_exchange(
                &self,
                current: $int,
                new: $int,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$int, $int> {
                <$atomic>::compare_exchange(self, current, new, success, failure)
            }
            #[inline]
            fn compare_exchange_weak(
                &self,
                current: $int,
                new: $int,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$int, $int> {
                <$atomic>::compare_exchange_weak(self, current, new, success, failure)
            }
            #[inline]
            fn with_mut<R>(&mut self, f: impl FnOnce(&mut $int) -> R) -> R {
                let ($this, $f) = (self, f);
                $with_mut
            }
        }
    };
}

/// The standard library's primitives.
#[derive(Debug)]
pub(crate) enum StdSync {}

impl SyncFamily for StdSync {
    type Atomic = std::sync::atomic::AtomicU64;
    type Lock<T: Send> = std::sync::Mutex<T>;
    type Mutex<T> = std::sync::Mutex<T>;
    type AtomicU8 = std::sync::atomic::AtomicU8;
    type AtomicU32 = std::sync::atomic::AtomicU32;
    type AtomicUsize = std::sync::atomic::AtomicUsize;
    type AtomicU64 = std::sync::atomic::AtomicU64;
    type UnsafeCell<T> = std::cell::UnsafeCell<T>;
    type WakerCell = futures_util::task::AtomicWaker;
}

impl WakerCell for futures_util::task::AtomicWaker {
    fn new() -> Self {
        futures_util::task::AtomicWaker::new()
    }
    #[inline]
    fn register(&self, waker: &std::task::Waker) {
        futures_util::task::AtomicWaker::register(self, waker);
    }
    #[inline]
    fn wake(&self) {
        futures_util::task::AtomicWaker::wake(self);
    }
    fn take(&self) -> Option<std::task::Waker> {
        futures_util::task::AtomicWaker::take(self)
    }
}

atomic_int!(std::sync::atomic::AtomicU8, u8, |this, f| f(this.get_mut()));
atomic_int!(std::sync::atomic::AtomicU32, u32, |this, f| f(
    this.get_mut()
));
atomic_int!(std::sync::atomic::AtomicUsize, usize, |this, f| f(
    this.get_mut()
));
atomic_int!(std::sync::atomic::AtomicU64, u64, |this, f| f(
    this.get_mut()
));

impl<T> RawCell<T> for std::cell::UnsafeCell<T> {
    #[inline]
    fn new(v: T) -> Self {
        std::cell::UnsafeCell::new(v)
    }
    #[inline]
    fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.get())
    }
    #[inline]
    fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.get())
    }
}

impl Atomic for std::sync::atomic::AtomicU64 {
    #[inline]
    fn new(v: u64) -> Self {
        std::sync::atomic::AtomicU64::new(v)
    }
    #[inline]
    fn load(&self, order: Ordering) -> u64 {
        std::sync::atomic::AtomicU64::load(self, order)
    }
    #[inline]
    fn store(&self, v: u64, order: Ordering) {
        std::sync::atomic::AtomicU64::store(self, v, order);
    }
}

impl<T: Send> Lock<T> for std::sync::Mutex<T> {
    fn new(v: T) -> Self {
        std::sync::Mutex::new(v)
    }
    #[inline]
    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let mut guard = self.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut guard)
    }
}

impl<T> Exclusive<T> for std::sync::Mutex<T> {
    fn new(v: T) -> Self {
        std::sync::Mutex::new(v)
    }
    #[inline]
    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let mut guard = self.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut guard)
    }
    #[inline]
    fn get_mut(&mut self) -> &mut T {
        std::sync::Mutex::get_mut(self).unwrap_or_else(PoisonError::into_inner)
    }
}

/// Loom's primitives, for the model-checking tests.
#[cfg(test)]
#[derive(Debug)]
pub(crate) enum LoomSync {}

#[cfg(test)]
impl SyncFamily for LoomSync {
    type Atomic = loom::sync::atomic::AtomicU64;
    type Lock<T: Send> = loom::sync::Mutex<T>;
    type Mutex<T> = loom::sync::Mutex<T>;
    type AtomicU8 = loom::sync::atomic::AtomicU8;
    type AtomicU32 = loom::sync::atomic::AtomicU32;
    type AtomicUsize = loom::sync::atomic::AtomicUsize;
    type AtomicU64 = loom::sync::atomic::AtomicU64;
    type UnsafeCell<T> = loom::cell::UnsafeCell<T>;
    type WakerCell = loom::future::AtomicWaker;
}

#[cfg(test)]
impl WakerCell for loom::future::AtomicWaker {
    fn new() -> Self {
        loom::future::AtomicWaker::new()
    }
    fn register(&self, waker: &std::task::Waker) {
        self.register_by_ref(waker);
    }
    fn wake(&self) {
        loom::future::AtomicWaker::wake(self);
    }
    fn take(&self) -> Option<std::task::Waker> {
        self.take_waker()
    }
}

#[cfg(test)]
atomic_int!(loom::sync::atomic::AtomicU8, u8, |this, f| this.with_mut(f));
#[cfg(test)]
atomic_int!(loom::sync::atomic::AtomicU32, u32, |this, f| this
    .with_mut(f));
#[cfg(test)]
atomic_int!(loom::sync::atomic::AtomicUsize, usize, |this, f| this
    .with_mut(f));
#[cfg(test)]
atomic_int!(loom::sync::atomic::AtomicU64, u64, |this, f| this
    .with_mut(f));

#[cfg(test)]
impl<T> RawCell<T> for loom::cell::UnsafeCell<T> {
    fn new(v: T) -> Self {
        loom::cell::UnsafeCell::new(v)
    }
    fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        loom::cell::UnsafeCell::with(self, f)
    }
    fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        loom::cell::UnsafeCell::with_mut(self, f)
    }
}

#[cfg(test)]
impl Atomic for loom::sync::atomic::AtomicU64 {
    fn new(v: u64) -> Self {
        loom::sync::atomic::AtomicU64::new(v)
    }
    fn load(&self, order: Ordering) -> u64 {
        loom::sync::atomic::AtomicU64::load(self, order)
    }
    fn store(&self, v: u64, order: Ordering) {
        loom::sync::atomic::AtomicU64::store(self, v, order);
    }
}

#[cfg(test)]
impl<T: Send> Lock<T> for loom::sync::Mutex<T> {
    fn new(v: T) -> Self {
        loom::sync::Mutex::new(v)
    }
    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let mut guard = self.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut guard)
    }
}

#[cfg(test)]
impl<T> Exclusive<T> for loom::sync::Mutex<T> {
    fn new(v: T) -> Self {
        loom::sync::Mutex::new(v)
    }
    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let mut guard = self.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut guard)
    }
    fn get_mut(&mut self) -> &mut T {
        loom::sync::Mutex::get_mut(self).unwrap_or_else(PoisonError::into_inner)
    }
}
