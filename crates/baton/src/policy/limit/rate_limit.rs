//! Rate limiter: at most so many attempts per period to one downstream, shared by name like
//! a circuit breaker, with a bounded wait for a permit.
//!
//! The algorithm is GCRA, the generic cell rate algorithm: a token bucket kept as one
//! number, the *theoretical arrival time* or TAT, the instant at which the bucket would be
//! full again. A limiter of `permits` per `per` spaces permits one emission interval
//! `T = per / permits` apart and lets `burst` of them come at once: a request at `now`
//! conforms once `now ≥ TAT − (burst − 1)·T`, and each permit moves the TAT on by `T`. In
//! any window of length `w`, at most `burst + w / T` permits are granted.
//!
//! A permit is a reservation: an attempt that may wait learns at once the instant its
//! permit conforms, moves the TAT past it with one compare-and-swap, and sleeps until that
//! instant. So waiters never poll the limiter, they are served in the order they asked,
//! and an attempt whose wait would not end before its maximum wait or its cut is refused at
//! once, with the time after which it would have conformed as `retry_after`. A waiter
//! dropped before its instant gives its reservation back when no later one was made after
//! it; otherwise the slot stays unused. The rate is never exceeded, but it may be undershot.
//!
//! The state is one 64-bit atomic holding nanoseconds since the limiter was made. It is
//! generic over the [`SyncFamily`] so that a loom model in `rate_limit_loom_tests.rs`
//! checks it.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::rate_limit_shared::{SharedLimit, SharedRateLimit};
use crate::policy::InvalidSetting;
use crate::util::sync::{AtomicInt, StdSync, SyncFamily};

/// A rate limit on calls to one downstream: at most `permits` attempts per `per`, with
/// bursts of up to `burst`, each attempt waiting at most `max_wait` for its permit and
/// never past its cut. Cheap to clone; every clone, and every node and pipeline given it,
/// shares one limit. Registered in an [`Orchestrator`](crate::Orchestrator) by its name.
///
/// # Defaults
/// - `burst`: `permits`, so a full period's worth may come at once;
/// - `max_wait`: zero, so an attempt that finds no permit is refused at once.
///
/// A limiter of zero permits, zero period or zero burst could never work, nor could one of
/// more than one permit per nanosecond be kept: a graph or pipeline given one fails to
/// build with [`BuildError::InvalidPolicy`](crate::BuildError::InvalidPolicy). Used on its
/// own, such a limiter refuses every request.
///
/// ```
/// use std::time::Duration;
/// use baton_graph::RateLimiter;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// // The inventory service allows 100 calls per second; spread them, wait up to 50 ms.
/// let inventory = RateLimiter::new("inventory", 100, Duration::from_secs(1))
///     .burst(1)
///     .max_wait(Duration::from_millis(50));
/// assert_eq!(inventory.try_acquire(), Ok(()));
/// // The next permit conforms 10 ms later.
/// assert_eq!(inventory.try_acquire(), Err(Duration::from_millis(10)));
/// assert_eq!(inventory.acquire(None).await, Ok(Duration::from_millis(10)));
/// # }
/// ```
#[derive(Clone)]
pub struct RateLimiter {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    /// The rate as configured; the GCRA holds it as it uses it.
    limit: Mutex<Limit>,
    /// The maximum wait, in nanoseconds.
    max_wait: AtomicU64,
    gcra: Gcra,
    /// The instant the TAT counts from.
    origin: Instant,
    /// Where the permits come from, for a limiter shared by several processes.
    shared: Option<Arc<dyn SharedRateLimit>>,
}

/// A limiter's rate: `permits` per `per`, `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Limit {
    permits: u32,
    per: Duration,
    burst: u32,
}

impl fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let l = self.limit();
        f.debug_struct("RateLimiter")
            .field("name", &self.inner.name)
            .field("permits", &l.permits)
            .field("per", &l.per)
            .field("burst", &l.burst)
            .field("max_wait", &self.wait_bound())
            .field("shared", &self.inner.shared)
            .finish()
    }
}

impl RateLimiter {
    /// A limiter called `name` that grants at most `permits` per `per`, with the defaults
    /// above.
    #[must_use]
    pub fn new(name: impl Into<String>, permits: u32, per: Duration) -> Self {
        Self::with(name.into(), permits, per, permits, Duration::ZERO, None)
    }

    fn with(
        name: String,
        permits: u32,
        per: Duration,
        burst: u32,
        max_wait: Duration,
        shared: Option<Arc<dyn SharedRateLimit>>,
    ) -> Self {
        if let Some(backend) = &shared {
            backend.attach(SharedLimit {
                name: name.clone(),
                permits,
                per,
                burst,
            });
        }
        RateLimiter {
            inner: Arc::new(Inner {
                gcra: Gcra::new(interval(permits, per), burst),
                name,
                limit: Mutex::new(Limit {
                    permits,
                    per,
                    burst,
                }),
                max_wait: AtomicU64::new(nanos(max_wait)),
                origin: Instant::now(),
                shared,
            }),
        }
    }

    /// Lets up to `burst` permits come at once, at least 1. Returns a new limiter: call it
    /// before sharing the handle.
    #[must_use]
    pub fn burst(self, burst: u32) -> Self {
        let (i, l) = (&self.inner, self.limit());
        Self::with(
            i.name.clone(),
            l.permits,
            l.per,
            burst,
            self.wait_bound(),
            i.shared.clone(),
        )
    }

    /// Lets an attempt wait up to `max_wait` for its permit; the wait counts toward the
    /// attempt's timeout. `Duration::ZERO` means "do not wait". Returns a new limiter: call
    /// it before sharing the handle.
    #[must_use]
    pub fn max_wait(self, max_wait: Duration) -> Self {
        let (i, l) = (&self.inner, self.limit());
        Self::with(
            i.name.clone(),
            l.permits,
            l.per,
            l.burst,
            max_wait,
            i.shared.clone(),
        )
    }

    /// The same limiter with `shared` as its backend.
    pub(in crate::policy) fn with_backend(self, shared: Option<Arc<dyn SharedRateLimit>>) -> Self {
        let (i, l) = (&self.inner, self.limit());
        Self::with(
            i.name.clone(),
            l.permits,
            l.per,
            l.burst,
            self.wait_bound(),
            shared,
        )
    }

    pub(in crate::policy) fn backend(&self) -> Option<&Arc<dyn SharedRateLimit>> {
        self.inner.shared.as_ref()
    }

    /// The limiter's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Whether `self` and `other` are the same limiter, that is clones of one handle.
    #[must_use]
    pub fn same_as(&self, other: &RateLimiter) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Checks that the limiter can ever grant a permit.
    ///
    /// # Errors
    /// Why it cannot: zero permits, a zero period, a zero burst, or more than one permit
    /// per nanosecond.
    pub(crate) fn validate(&self) -> Result<(), String> {
        check(&self.inner.name, self.limit()).map_err(|(_, reason)| reason)
    }

    /// [`validate`](Self::validate) for a limiter `name` of `permits` per `per`, `burst`
    /// at once, before it exists.
    ///
    /// # Errors
    /// The setting at fault, `permits`, `per` or `burst`, and why.
    #[cfg(feature = "serde")]
    pub(crate) fn check(
        name: &str,
        permits: u32,
        per: Duration,
        burst: u32,
    ) -> Result<(), (&'static str, String)> {
        check(
            name,
            Limit {
                permits,
                per,
                burst,
            },
        )
    }

    fn limit(&self) -> Limit {
        *self
            .inner
            .limit
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// How long an attempt waits at most for a permit, as set by
    /// [`max_wait`](Self::max_wait) or [`reconfigure`](Self::reconfigure).
    #[must_use]
    pub fn wait_bound(&self) -> Duration {
        Duration::from_nanos(self.inner.max_wait.load(Ordering::Relaxed))
    }

    /// The rate: `(permits, per, burst)`.
    #[must_use]
    pub fn rate(&self) -> (u32, Duration, u32) {
        let l = self.limit();
        (l.permits, l.per, l.burst)
    }

    /// Changes the rate and the maximum wait in place, for every node, graph and run that
    /// holds the limiter; returns whether anything changed.
    ///
    /// Permits already granted or reserved stand, and a waiter keeps its instant. The next
    /// permit is spaced by the new rate from the last one reserved, so a lowered rate
    /// holds from at most one old interval on, and a raised one at once. A request made
    /// during the change conforms by the old rate or the new one.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::RateLimiter;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), baton_graph::limit::InvalidSetting> {
    /// let inventory = RateLimiter::new("inventory", 10, Duration::from_secs(1)).burst(1);
    /// assert_eq!(inventory.try_acquire(), Ok(()));
    /// assert_eq!(inventory.try_acquire(), Err(Duration::from_millis(100)));
    /// inventory.reconfigure(100, Duration::from_secs(1), 1, Duration::ZERO)?;
    /// // The slot already reserved stands; from it on, permits are 10 ms apart.
    /// tokio::time::advance(Duration::from_millis(100)).await;
    /// assert_eq!(inventory.try_acquire(), Ok(()));
    /// assert_eq!(inventory.try_acquire(), Err(Duration::from_millis(10)));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`InvalidSetting`] for a rate that could never grant a permit, as `build()` checks,
    /// and for a limiter whose permits come from a store shared by the fleet. The limiter
    /// is then unchanged.
    pub fn reconfigure(
        &self,
        permits: u32,
        per: Duration,
        burst: u32,
        max_wait: Duration,
    ) -> Result<bool, InvalidSetting> {
        let i = &self.inner;
        if i.shared.is_some() {
            return Err(InvalidSetting::new(format!(
                "rate limiter `{}` takes its permits from a store shared by the fleet: its rate cannot change in place",
                i.name
            )));
        }
        let new = Limit {
            permits,
            per,
            burst,
        };
        check(&i.name, new).map_err(|(_, reason)| InvalidSetting::new(reason))?;
        let wait = i.max_wait.swap(nanos(max_wait), Ordering::Relaxed) != nanos(max_wait);
        let mut limit = i.limit.lock().unwrap_or_else(PoisonError::into_inner);
        let changed = *limit != new;
        if changed {
            *limit = new;
            i.gcra.set(interval(permits, per), burst);
        }
        Ok(changed || wait)
    }

    /// Takes a permit now if one is free; otherwise how long until one would be.
    ///
    /// # Errors
    /// The time until a permit conforms; `Duration::MAX` for a limiter that never grants
    /// one.
    pub fn try_acquire(&self) -> Result<(), Duration> {
        if let Some(shared) = &self.inner.shared {
            return shared.try_reserve();
        }
        let now = self.nanos(Instant::now());
        match self.inner.gcra.reserve(now, 0) {
            Ok(reserved) => {
                debug_assert_eq!(reserved.wait, 0, "a reservation without waiting");
                Ok(())
            }
            Err(after) => Err(Duration::from_nanos(after)),
        }
    }

    /// Waits for a permit, at most the limiter's maximum wait and, if `until` is given,
    /// only if the wait ends before it; with the permit, how long it waited. Cancel-safe:
    /// dropping the future gives the reservation back when no later one was made. A shared
    /// limiter's reservation is not given back: the fleet's rate may be undershot, never
    /// exceeded.
    ///
    /// # Errors
    /// How long until a permit would conform, when that is past the maximum wait or
    /// `until`; `Duration::MAX` for a limiter that never grants one. A refused request
    /// takes nothing.
    pub async fn acquire(&self, until: Option<Instant>) -> Result<Duration, Duration> {
        let started = Instant::now();
        let now = self.nanos(started);
        let max_wait = self.inner.max_wait.load(Ordering::Relaxed);
        // A wait must end strictly before the attempt's cut.
        let bound = match until {
            Some(u) => max_wait.min(
                (u.saturating_duration_since(started)
                    .as_nanos()
                    .min(u128::from(u64::MAX)) as u64)
                    .saturating_sub(1),
            ),
            None => max_wait,
        };
        if let Some(shared) = &self.inner.shared {
            let wait = shared.reserve(Duration::from_nanos(bound)).await?;
            if !wait.is_zero() {
                tokio::time::sleep_until(started + wait).await;
            }
            return Ok(Instant::now().saturating_duration_since(started));
        }
        let reserved = match self.inner.gcra.reserve(now, bound) {
            Ok(reserved) => reserved,
            Err(after) => return Err(Duration::from_nanos(after)),
        };
        if reserved.wait == 0 {
            return Ok(Duration::ZERO);
        }
        let mut back = GiveBack {
            gcra: &self.inner.gcra,
            tat: Some(reserved.tat),
        };
        tokio::time::sleep_until(started + Duration::from_nanos(reserved.wait)).await;
        back.tat = None;
        Ok(Instant::now().saturating_duration_since(started))
    }

    fn nanos(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.inner.origin).as_nanos();
        since.min(u128::from(u64::MAX / 2)) as u64
    }
}

/// Checks that a limiter `name` of rate `i` can ever grant a permit.
fn check(name: &str, i: Limit) -> Result<(), (&'static str, String)> {
    if i.permits == 0 {
        return Err((
            "permits",
            format!("rate limiter `{name}` grants 0 permits: no attempt could ever run"),
        ));
    }
    if i.per.is_zero() {
        return Err((
            "per",
            format!(
                "rate limiter `{name}` has a period of zero: give the rate per a period above zero"
            ),
        ));
    }
    if i.burst == 0 {
        return Err((
            "burst",
            format!("rate limiter `{name}` has a burst of 0: no attempt could ever run"),
        ));
    }
    // Permits are spaced in whole nanoseconds: a faster rate cannot be kept.
    if u128::from(i.permits) > i.per.as_nanos() {
        return Err((
            "permits",
            format!(
                "rate limiter `{name}` grants {} permits per {:?}, more than one per nanosecond",
                i.permits, i.per
            ),
        ));
    }
    Ok(())
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Gives a reservation back when the wait for it is dropped.
struct GiveBack<'a> {
    gcra: &'a Gcra,
    tat: Option<u64>,
}

impl Drop for GiveBack<'_> {
    fn drop(&mut self) {
        if let Some(tat) = self.tat {
            self.gcra.give_back(tat);
        }
    }
}

/// The emission interval of `permits` per `per`, in nanoseconds, at least 1.
/// `u64::MAX` for a limiter that never grants, with no permit or no period.
fn interval(permits: u32, per: Duration) -> u64 {
    if permits == 0 || per.is_zero() {
        return u64::MAX;
    }
    let per = per.as_nanos().min(u128::from(u64::MAX / 4));
    ((per / u128::from(permits)) as u64).max(1)
}

/// A permit reserved by [`Gcra::reserve`]: the wait before it conforms, and the TAT the
/// reservation wrote, to give it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reserved {
    pub(crate) wait: u64,
    pub(crate) tat: u64,
}

/// The GCRA state: the theoretical arrival time, in nanoseconds from an origin.
pub(crate) struct Gcra<S: SyncFamily = StdSync> {
    tat: S::AtomicU64,
    /// The emission interval, in nanoseconds; `u64::MAX`: the limiter never grants a
    /// permit.
    interval: S::AtomicU64,
    /// How far ahead of now the TAT may be for a request to conform: `(burst − 1)·T`.
    tolerance: S::AtomicU64,
}

impl<S: SyncFamily> Gcra<S> {
    /// A bucket that grants one permit per `interval` nanoseconds, `burst` at once.
    pub(crate) fn new(interval: u64, burst: u32) -> Self {
        let (interval, tolerance) = Self::spacing(interval, burst);
        Gcra {
            tat: S::AtomicU64::new(0),
            interval: S::AtomicU64::new(interval),
            tolerance: S::AtomicU64::new(tolerance),
        }
    }

    /// The interval and tolerance of `interval`, `burst`.
    fn spacing(interval: u64, burst: u32) -> (u64, u64) {
        let interval = if burst == 0 { u64::MAX } else { interval };
        let tolerance = interval.saturating_mul(u64::from(burst.saturating_sub(1)));
        (interval, tolerance)
    }

    /// Changes the rate in place; the TAT stays.
    pub(crate) fn set(&self, interval: u64, burst: u32) {
        let (interval, tolerance) = Self::spacing(interval, burst);
        self.tolerance.store(tolerance, Ordering::Relaxed);
        self.interval.store(interval, Ordering::Relaxed);
    }

    /// Reserves the next permit for a request at `now`, if it conforms within `max_wait`
    /// nanoseconds. Otherwise returns how long until it would conform, and takes nothing.
    pub(crate) fn reserve(&self, now: u64, max_wait: u64) -> Result<Reserved, u64> {
        let interval = self.interval.load(Ordering::Relaxed);
        if interval == u64::MAX {
            return Err(u64::MAX);
        }
        let tolerance = self.tolerance.load(Ordering::Relaxed);
        let mut tat = self.tat.load(Ordering::Acquire);
        loop {
            let from = tat.max(now);
            let wait = from.saturating_sub(tolerance).saturating_sub(now);
            if wait > max_wait {
                return Err(wait);
            }
            let next = from.saturating_add(interval);
            match self
                .tat
                .compare_exchange_weak(tat, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(Reserved { wait, tat: next }),
                Err(actual) => tat = actual,
            }
        }
    }

    /// Gives back the reservation that moved the TAT to `tat`, if no later one moved it on.
    pub(crate) fn give_back(&self, tat: u64) {
        let back = tat.saturating_sub(self.interval.load(Ordering::Relaxed));
        let _ = self
            .tat
            .compare_exchange(tat, back, Ordering::AcqRel, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::util::ms;

    #[test]
    fn a_burst_comes_at_once_then_one_permit_per_interval() {
        let g: Gcra = Gcra::new(10, 3);
        for _ in 0..3 {
            assert_eq!(g.reserve(0, 0).map(|r| r.wait), Ok(0));
        }
        assert_eq!(
            g.reserve(0, 0),
            Err(10),
            "the fourth conforms after one interval"
        );
        assert_eq!(g.reserve(5, 0), Err(5));
        assert_eq!(g.reserve(10, 0).map(|r| r.wait), Ok(0));
        // A reservation ahead: its wait, in order.
        assert_eq!(g.reserve(10, 100).map(|r| r.wait), Ok(10));
        assert_eq!(g.reserve(10, 100).map(|r| r.wait), Ok(20));
    }

    #[test]
    fn a_reservation_is_given_back_only_when_it_is_the_latest() {
        let g: Gcra = Gcra::new(10, 1);
        let first = g.reserve(0, 0).unwrap();
        let second = g.reserve(0, 100).unwrap();
        assert_eq!(second.wait, 10);
        g.give_back(second.tat);
        assert_eq!(g.reserve(0, 100).map(|r| r.wait), Ok(10), "its slot again");
        g.give_back(first.tat);
        assert_eq!(
            g.reserve(0, 100).map(|r| r.wait),
            Ok(20),
            "not the latest: kept"
        );
    }

    #[test]
    fn a_limiter_that_never_grants_refuses_without_overflow() {
        let g: Gcra = Gcra::new(interval(0, ms(1)), 1);
        assert_eq!(g.reserve(0, u64::MAX), Err(u64::MAX));
        let huge: Gcra = Gcra::new(interval(1, Duration::MAX), u32::MAX);
        assert!(huge.reserve(u64::MAX / 2, u64::MAX).is_ok());
        assert_eq!(interval(3, Duration::from_nanos(1)), 1, "never zero");
    }

    #[tokio::test(start_paused = true)]
    async fn the_wait_is_bounded_by_the_maximum_and_the_cut() {
        let l = RateLimiter::new("l", 10, Duration::from_secs(1))
            .burst(1)
            .max_wait(ms(150));
        assert_eq!(l.acquire(None).await, Ok(ms(0)));
        assert_eq!(l.acquire(None).await, Ok(ms(100)));
        let now = Instant::now();
        assert_eq!(
            l.acquire(Some(now + ms(100))).await,
            Err(ms(100)),
            "ends at the cut"
        );
        assert_eq!(l.acquire(Some(now + ms(101))).await, Ok(ms(100)));
        assert_eq!(l.try_acquire(), Err(ms(100)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_waiter_gives_its_permit_back() {
        let l = RateLimiter::new("l", 10, Duration::from_secs(1))
            .burst(1)
            .max_wait(ms(500));
        assert_eq!(l.try_acquire(), Ok(()));
        let waiting = tokio::time::timeout(ms(20), l.acquire(None)).await;
        assert!(waiting.is_err(), "cut while it waited");
        tokio::time::advance(ms(80)).await;
        assert_eq!(
            l.try_acquire(),
            Ok(()),
            "the dropped waiter's slot is free again"
        );
    }
}

#[cfg(test)]
mod props {
    use proptest::prelude::*;

    use super::Gcra;

    proptest! {
        /// Whatever the requests' instants and maximum wait, every granted permit
        /// conforms within its wait bound, permits conform in the order they were granted,
        /// and no window of `w` ns holds more than `burst + w / T` of them.
        #[test]
        fn the_rate_is_held_over_every_window(
            interval in 1u64..50,
            burst in 1u32..5,
            max_wait in 0u64..200,
            gaps in proptest::collection::vec(0u64..40, 1..60),
        ) {
            let g: Gcra = Gcra::new(interval, burst);
            let mut now = 0u64;
            let mut at = Vec::new();
            for gap in gaps {
                now += gap;
                if let Ok(r) = g.reserve(now, max_wait) {
                    prop_assert!(r.wait <= max_wait);
                    at.push(now + r.wait);
                }
            }
            prop_assert!(at.windows(2).all(|w| w[0] <= w[1]), "{:?}", at);
            for (i, &from) in at.iter().enumerate() {
                for (j, &to) in at.iter().enumerate().skip(i) {
                    let granted = (j - i + 1) as u64;
                    let bound = u64::from(burst) + (to - from) / interval;
                    prop_assert!(granted <= bound, "{} in [{}, {}]: {:?}", granted, from, to, at);
                }
            }
        }
    }
}
