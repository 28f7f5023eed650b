//! The breaker's packed state word, its lazy clock and saturating instant arithmetic. The
//! word holds a generation, a kind and the free probe slots.
//!
//! A kind's low two bits are its *class*, what the lock-free paths need to know:
//!
//! - closed: [`CLOSED`] and [`FORCED_CLOSED`] admit without asking;
//! - open: [`OPEN`] and [`ISOLATED`] reject;
//! - half-open;
//! - recovering.
//!
//! So the closed path tests the class with the same one mask and compare it always did.

use std::time::Duration;

use tokio::time::Instant;

use super::events::BreakerState;

pub(super) const FREE_MASK: u64 = 0xFFFF;
const KIND_SHIFT: u32 = 16;
const GEN_SHIFT: u32 = 19;
pub(super) const GEN_MASK: u64 = (1 << 45) - 1;
pub(super) const TAG_MASK: u64 = 0xFFFF;
pub(super) const MAX_MICROS: u64 = (1 << 48) - 1;

pub(super) const CLOSED: u64 = 0;
pub(super) const OPEN: u64 = 1;
pub(super) const HALF_OPEN: u64 = 2;
pub(super) const RECOVERING: u64 = 3;
/// Closed by hand: admits every call and counts nothing. Its class is closed.
pub(super) const FORCED_CLOSED: u64 = 4;
/// Open by hand until a reset: rejects every call. Its class is open.
pub(super) const ISOLATED: u64 = 5;

pub(super) fn pack(kind: u64, generation: u64, free: u32) -> u64 {
    ((generation & GEN_MASK) << GEN_SHIFT) | (kind << KIND_SHIFT) | (u64::from(free) & FREE_MASK)
}
pub(super) fn kind_of(word: u64) -> u64 {
    (word >> KIND_SHIFT) & 0b111
}
/// The kind's class: [`CLOSED`], [`OPEN`], [`HALF_OPEN`] or [`RECOVERING`].
#[inline]
pub(super) fn class_of(word: u64) -> u64 {
    (word >> KIND_SHIFT) & 0b11
}
pub(super) fn gen_of(word: u64) -> u64 {
    word >> GEN_SHIFT
}
pub(super) fn state_of(kind: u64) -> BreakerState {
    match kind {
        CLOSED => BreakerState::Closed,
        OPEN => BreakerState::Open,
        HALF_OPEN => BreakerState::HalfOpen,
        RECOVERING => BreakerState::Recovering,
        FORCED_CLOSED => BreakerState::ForcedClosed,
        _ => BreakerState::Isolated,
    }
}

/// The clock, read at most once and only if needed.
pub(super) struct LazyNow<F> {
    clock: Option<F>,
    now: Option<Instant>,
}

impl<F: FnOnce() -> Instant> LazyNow<F> {
    pub(super) fn new(clock: F) -> Self {
        LazyNow {
            clock: Some(clock),
            now: None,
        }
    }

    pub(super) fn get(&mut self) -> Instant {
        match (self.now, self.clock.take()) {
            (Some(now), _) => now,
            (None, Some(clock)) => *self.now.insert(clock()),
            // Unreachable: the clock is only taken when `now` is set.
            (None, None) => Instant::now(),
        }
    }
}

/// `t + d`, saturating instead of panicking on overflow.
pub(super) fn add(t: Instant, d: Duration) -> Instant {
    t.checked_add(d)
        .or_else(|| t.checked_add(Duration::from_secs(u64::from(u32::MAX))))
        .unwrap_or(t)
}
