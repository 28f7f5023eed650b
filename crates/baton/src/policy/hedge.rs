//! Hedging: when an attempt is slow, start another in parallel; the first success wins.
//!
//! The policy is the hedge's configuration and its delay: a fixed delay, or a percentile
//! of the latencies of recent successful attempts, kept in a small window shared by every
//! clone of the handle. The race itself, with its cancelled losers, is the onion's.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// How many recent latencies a percentile hedge delay is computed from.
pub(crate) const HEDGE_WINDOW: usize = 128;

/// The most hedges one attempt may have, as set by [`Hedge::max_hedges`]. Every hedge of
/// an attempt may be in flight at once, each a call to the same downstream, so past this a
/// hedge multiplies the load it means to spare.
pub const MAX_HEDGES: u32 = 100;

/// Hedged attempts: when an attempt has not ended after a delay, another one starts in
/// parallel, and the first to succeed wins; the others are cancelled, that is dropped.
///
/// Each hedge is an attempt of the series: it counts toward the retry's maximum attempts,
/// or without a retry toward `1 + max_hedges`. It draws from the retry budget like a
/// retry, starts only when the deadline leaves it the minimum attempt time and the
/// circuit breaker has not opened, and is cut like any attempt. The breaker is told one
/// result for the race. A hedge is a call: while the breaker is half-open it needs a
/// probe permit of its own, and does not start without one. An attempt that fails while
/// others run does not end the race; when all of them failed, the retry policy decides
/// what comes next.
///
/// # Defaults
/// - `max_hedges`: 1, so at most two attempts are in flight;
/// - the delay: fixed, as given to [`new`](Self::new).
///
/// A zero delay from [`new`](Self::new), `max_hedges` of zero or above [`MAX_HEDGES`], a
/// percentile outside `(0, 100)` or a percentile on an all-at-once hedge is a build error:
/// [`BuildError::InvalidPolicy`](crate::BuildError::InvalidPolicy) with policy `hedge`,
/// naming the value. To start every attempt at once, use
/// [`all_at_once`](Self::all_at_once).
///
/// ```
/// use std::time::Duration;
/// use baton_graph::Hedge;
///
/// // Hedge after 50 ms; once 10 calls succeeded, after their 95th percentile instead.
/// let hedge = Hedge::new(Duration::from_millis(50)).percentile(95.0, 10);
/// assert_eq!(hedge.delay(), Duration::from_millis(50));
/// ```
#[derive(Clone)]
pub struct Hedge {
    inner: Arc<Inner>,
}

struct Inner {
    delay: Duration,
    /// Made by [`Hedge::all_at_once`]: the zero delay is meant.
    at_once: bool,
    max_hedges: u32,
    /// The percentile, and how many latencies it needs before it replaces `delay`.
    percentile: Option<(f64, usize)>,
    latencies: Mutex<VecDeque<Duration>>,
}

impl fmt::Debug for Hedge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hedge")
            .field("delay", &self.inner.delay)
            .field("at_once", &self.inner.at_once)
            .field("max_hedges", &self.inner.max_hedges)
            .field("percentile", &self.inner.percentile)
            .finish()
    }
}

impl Hedge {
    /// Hedges an attempt that has not ended after `delay`, which must be above zero. A
    /// zero delay is a build error: to start every attempt at once, say so with
    /// [`all_at_once`](Self::all_at_once).
    #[must_use]
    pub fn new(delay: Duration) -> Self {
        Self::with(delay, false, 1, None)
    }

    /// Starts `attempts` attempts at once, without waiting for the first to be slow: one
    /// attempt and `attempts - 1` hedges, all with a zero delay. The first to succeed wins.
    /// `attempts` must be in `2..=1 + MAX_HEDGES`, or building fails.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::Hedge;
    ///
    /// let race = Hedge::all_at_once(3);
    /// assert_eq!((race.delay(), race.hedges()), (Duration::ZERO, 2));
    /// ```
    #[must_use]
    pub fn all_at_once(attempts: u32) -> Self {
        Self::with(Duration::ZERO, true, attempts.saturating_sub(1), None)
    }

    fn with(
        delay: Duration,
        at_once: bool,
        max_hedges: u32,
        percentile: Option<(f64, usize)>,
    ) -> Self {
        Hedge {
            inner: Arc::new(Inner {
                delay,
                at_once,
                max_hedges,
                percentile,
                latencies: Mutex::new(VecDeque::new()),
            }),
        }
    }

    /// Starts at most `max` hedges per attempt, each after the delay since the one
    /// before, with `max` in `1..=MAX_HEDGES`. Returns a new handle.
    #[must_use]
    pub fn max_hedges(self, max: u32) -> Self {
        let i = &self.inner;
        Self::with(i.delay, i.at_once, max, i.percentile)
    }

    /// Once `min_samples` attempts succeeded, hedges after the `percentile`, in `(0, 100)`,
    /// of the last 128 successful attempts' latencies instead of the fixed
    /// delay. `min_samples` must be in `1..=128`. Returns a new handle, with an
    /// empty window.
    #[must_use]
    pub fn percentile(self, percentile: f64, min_samples: usize) -> Self {
        let i = &self.inner;
        Self::with(
            i.delay,
            i.at_once,
            i.max_hedges,
            Some((percentile, min_samples)),
        )
    }

    /// At most how many hedges start per attempt.
    #[must_use]
    pub fn hedges(&self) -> u32 {
        self.inner.max_hedges
    }

    /// The delay after which the next hedge starts: the fixed delay, or the percentile of
    /// recent latencies once there are enough.
    #[must_use]
    pub fn delay(&self) -> Duration {
        let Some((p, min)) = self.inner.percentile else {
            return self.inner.delay;
        };
        let window = self.window();
        if window.len() < min {
            return self.inner.delay;
        }
        let mut sorted: Vec<Duration> = window.iter().copied().collect();
        sorted.sort_unstable();
        // Nearest rank: the smallest latency with at least p% of the window at or below it.
        let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
        sorted[rank.clamp(1, sorted.len()) - 1]
    }

    /// Records the latency of a successful attempt. Only a percentile hedge keeps it.
    pub(crate) fn record(&self, latency: Duration) {
        if self.inner.percentile.is_none() {
            return;
        }
        let mut window = self.window();
        if window.len() == HEDGE_WINDOW {
            window.pop_front();
        }
        window.push_back(latency);
    }

    fn window(&self) -> std::sync::MutexGuard<'_, VecDeque<Duration>> {
        self.inner
            .latencies
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `self` and `other` are the same handle.
    #[must_use]
    pub fn same_as(&self, other: &Hedge) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Checks the hedge can work.
    ///
    /// # Errors
    /// Why not: a zero delay not made by `all_at_once`, zero hedges or more than
    /// [`MAX_HEDGES`], a percentile outside `(0, 100)` or on an all-at-once hedge, or a
    /// sample count outside `1..=128`.
    pub(crate) fn validate(&self) -> Result<(), String> {
        let i = &self.inner;
        if i.delay.is_zero() && !i.at_once {
            return Err("a hedge delay of zero starts every attempt at once: \
                 use Hedge::all_at_once(attempts) to mean it"
                .to_owned());
        }
        if i.max_hedges == 0 {
            return Err(if i.at_once {
                "Hedge::all_at_once needs at least 2 attempts".to_owned()
            } else {
                "a hedge with max_hedges 0 never starts: give at least 1".to_owned()
            });
        }
        if i.max_hedges > MAX_HEDGES {
            return Err(format!(
                "max_hedges is {}, above the most a hedge may start, {MAX_HEDGES}",
                i.max_hedges
            ));
        }
        if i.at_once && i.percentile.is_some() {
            return Err("an all-at-once hedge has no delay for a percentile to replace".to_owned());
        }
        if let Some((p, min)) = i.percentile {
            if !(p > 0.0 && p < 100.0) {
                return Err(format!("the hedge percentile must be in (0, 100), got {p}"));
            }
            if !(1..=HEDGE_WINDOW).contains(&min) {
                return Err(format!(
                    "a percentile hedge needs 1 to {HEDGE_WINDOW} samples, got {min}"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::util::ms;

    #[test]
    fn the_percentile_replaces_the_fixed_delay_once_there_are_enough_samples() {
        let h = Hedge::new(ms(50)).percentile(90.0, 10);
        for n in 1..=9 {
            h.record(ms(n * 10));
        }
        assert_eq!(h.delay(), ms(50), "nine samples: the fixed delay");
        h.record(ms(100));
        assert_eq!(h.delay(), ms(90), "the 90th percentile of 10..=100 ms");
        for _ in 0..HEDGE_WINDOW {
            h.record(ms(7));
        }
        assert_eq!(h.delay(), ms(7), "old samples leave the window");
        let fixed = Hedge::new(ms(5));
        fixed.record(ms(1));
        assert_eq!(fixed.delay(), ms(5));
    }

    #[test]
    fn an_impossible_hedge_is_invalid() {
        assert!(Hedge::new(ms(1)).max_hedges(0).validate().is_err());
        assert!(Hedge::new(ms(1)).max_hedges(MAX_HEDGES).validate().is_ok());
        assert!(
            Hedge::new(ms(1))
                .max_hedges(MAX_HEDGES + 1)
                .validate()
                .is_err()
        );
        assert!(Hedge::new(Duration::ZERO).validate().is_err());
        assert!(Hedge::all_at_once(2).validate().is_ok());
        assert!(Hedge::all_at_once(1).validate().is_err());
        assert!(Hedge::all_at_once(0).validate().is_err());
        assert!(Hedge::all_at_once(MAX_HEDGES + 2).validate().is_err());
        assert!(
            Hedge::all_at_once(3)
                .percentile(50.0, 1)
                .validate()
                .is_err()
        );
        assert!(Hedge::new(ms(1)).percentile(100.0, 1).validate().is_err());
        assert!(
            Hedge::new(ms(1))
                .percentile(f64::NAN, 1)
                .validate()
                .is_err()
        );
        assert!(Hedge::new(ms(1)).percentile(50.0, 0).validate().is_err());
        assert!(Hedge::new(ms(1)).percentile(99.9, 1).validate().is_ok());
    }
}
