//! The synchronization primitives the state machine is written against.
//!
//! The breaker's internals ([`Machine`](super::machine::Machine)) are generic over a
//! [`SyncFamily`]: [`StdSync`] in the library, and, in this crate's own tests, a family
//! backed by the [loom](https://docs.rs/loom) model checker. Loom replaces the atomics and
//! the mutex with instrumented versions and explores every interleaving of a small test,
//! so the properties the breaker promises (exactly N half-open probes, every transition
//! delivered once and in order) are checked, not hoped for. Because the swap happens
//! through this trait rather than `--cfg loom`, the loom tests run under a plain
//! `cargo test` and tokio is left alone.
//!
//! The surface is deliberately tiny: one 64-bit atomic with `load`/`store` (every
//! read-modify-write happens under the mutex), and a mutex used through a closure, so that
//! no guard can be held across an `.await` or leak out of a critical section.

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

/// A family of primitives: std's in the library, loom's in the model-checking tests.
pub(crate) trait SyncFamily: Send + Sync + 'static {
    /// The atomic cell.
    type Atomic: Atomic;
    /// The mutex.
    type Lock<T: Send>: Lock<T>;
}

/// The standard library's primitives.
#[derive(Debug)]
pub(crate) enum StdSync {}

impl SyncFamily for StdSync {
    type Atomic = std::sync::atomic::AtomicU64;
    type Lock<T: Send> = std::sync::Mutex<T>;
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

/// Loom's primitives, for the model-checking tests.
#[cfg(test)]
#[derive(Debug)]
pub(crate) enum LoomSync {}

#[cfg(test)]
impl SyncFamily for LoomSync {
    type Atomic = loom::sync::atomic::AtomicU64;
    type Lock<T: Send> = loom::sync::Mutex<T>;
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
