//! Retry budget: retries may add at most a configured share on top of first attempts, per
//! downstream, with a small floor per second.
//!
//! # Why a budget and not only a maximum number of attempts
//! `max_attempts = 3` bounds what one call costs, not what a fleet costs. When a downstream
//! fails, every caller retries, and the downstream sees three times its normal load at the
//! moment it can least take it: a retry storm. A budget bounds the *share* of retries:
//! with `ratio = 0.2`, retries add at most 20 % to the calls that reached the downstream in
//! the last `ttl`, plus `min_per_sec` retries per second so that a quiet downstream can still
//! be retried. This is the idea of tower's `TpsBudget` and Finagle's `RetryBudget`; ours is
//! shared by name through the [`Orchestrator`](crate::Orchestrator).

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// The range of a budget's `ttl`.
const MIN_TTL: Duration = Duration::from_secs(1);
const MAX_TTL: Duration = Duration::from_secs(3600);
/// The largest ratio of retries to first attempts.
const MAX_RATIO: f64 = 1000.0;

/// Number of buckets the `ttl` window is divided into.
const BUCKETS: u32 = 10;

/// A retry budget shared by every node that names it; cheap to clone.
///
/// # Defaults
/// - `ttl`, how long a deposit counts: 10 s;
/// - `min_per_sec`: 10 retries per second always allowed;
/// - `ratio`: 0.2, so retries add at most 20 % on top of first attempts.
#[derive(Clone)]
pub struct RetryBudget {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    ttl: Duration,
    min_per_sec: u32,
    ratio: f64,
    state: Mutex<Window>,
}

struct Window {
    origin: Instant,
    /// Per bucket: its number, first attempts and retries, oldest first.
    buckets: Vec<(u64, u64, u64)>,
}

impl fmt::Debug for RetryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryBudget")
            .field("name", &self.inner.name)
            .field("ttl", &self.inner.ttl)
            .field("min_per_sec", &self.inner.min_per_sec)
            .field("ratio", &self.inner.ratio)
            .finish()
    }
}

impl RetryBudget {
    /// A budget called `name` with the defaults; see [`RetryBudget::with`] to set them.
    #[must_use]
    pub fn new(name: impl Into<String>) -> Self {
        Self::with(name, Duration::from_secs(10), 10, 0.2)
    }

    /// A budget called `name`: deposits count for `ttl`; retries may add `ratio`, from 0.0 to
    /// 1000.0, of the first attempts in the window, plus `min_per_sec` per second.
    ///
    /// A `ttl` below 1 s or above 1 hour, or a `ratio` outside `[0, 1000]` or NaN, makes
    /// a graph or pipeline given the budget fail to build with
    /// [`BuildError::InvalidPolicy`](crate::BuildError::InvalidPolicy).
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{Retry, retry::RetryBudget};
    ///
    /// // Retries may add 10 % to the first attempts of the last 10 s, plus 5 per second.
    /// let budget = RetryBudget::with("inventory", Duration::from_secs(10), 5, 0.1);
    /// let retry = Retry::new(3).budget(budget);
    /// # let _ = retry;
    /// ```
    #[must_use]
    pub fn with(name: impl Into<String>, ttl: Duration, min_per_sec: u32, ratio: f64) -> Self {
        RetryBudget {
            inner: Arc::new(Inner {
                name: name.into(),
                ttl,
                min_per_sec,
                ratio,
                state: Mutex::new(Window {
                    origin: Instant::now(),
                    buckets: Vec::new(),
                }),
            }),
        }
    }

    /// The window deposits count in, within the range a budget accepts. A budget outside it
    /// fails the build of its graph; used on its own, it keeps to the range.
    fn ttl(&self) -> Duration {
        self.inner.ttl.clamp(MIN_TTL, MAX_TTL)
    }

    /// The ratio of retries to first attempts, within the range a budget accepts.
    fn ratio(&self) -> f64 {
        let ratio = self.inner.ratio;
        if ratio.is_nan() {
            0.0
        } else {
            ratio.clamp(0.0, MAX_RATIO)
        }
    }

    /// Checks the budget's settings.
    ///
    /// # Errors
    /// Which setting is out of its range, and its range.
    pub(crate) fn validate(&self) -> Result<(), String> {
        let i = &self.inner;
        Self::check(&i.name, i.ttl, i.ratio).map_err(|(_, reason)| reason)
    }

    /// [`validate`](Self::validate) for a budget `name` of `ttl` and `ratio`, before it
    /// exists.
    ///
    /// # Errors
    /// The setting at fault, `ttl` or `ratio`, and why.
    pub(crate) fn check(
        name: &str,
        ttl: Duration,
        ratio: f64,
    ) -> Result<(), (&'static str, String)> {
        if !(MIN_TTL..=MAX_TTL).contains(&ttl) {
            return Err((
                "ttl",
                format!("retry budget `{name}`: a ttl of {ttl:?} is outside 1 s to 1 hour"),
            ));
        }
        if !(0.0..=MAX_RATIO).contains(&ratio) {
            return Err((
                "ratio",
                format!("retry budget `{name}`: a ratio of {ratio} is outside 0 to {MAX_RATIO}"),
            ));
        }
        Ok(())
    }

    /// Its settings: `(ttl, min_per_sec, ratio)`, as given.
    #[cfg(feature = "serde")]
    pub(crate) fn settings(&self) -> (Duration, u32, f64) {
        let i = &self.inner;
        (i.ttl, i.min_per_sec, i.ratio)
    }

    /// The budget's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Whether `self` and `other` are the same budget, that is clones of one handle.
    #[must_use]
    pub fn same_as(&self, other: &RetryBudget) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Records a first attempt, that is a call that is not a retry.
    pub fn deposit(&self) {
        self.with_window(Instant::now(), |w, bucket| {
            if w.buckets.last().is_none_or(|b| b.0 != bucket) {
                w.buckets.push((bucket, 0, 0));
            }
            if let Some(b) = w.buckets.last_mut() {
                b.1 += 1;
            }
        });
    }

    /// Asks for one retry; `true` when the budget allows it, and then records it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::retry::RetryBudget;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// // 20 % of first attempts, nothing per second.
    /// let budget = RetryBudget::with("inventory", Duration::from_secs(10), 0, 0.2);
    /// for _ in 0..10 {
    ///     budget.deposit(); // ten first attempts
    /// }
    /// let granted = (0..5).filter(|_| budget.try_withdraw()).count();
    /// assert_eq!(granted, 2);
    /// # }
    /// ```
    #[must_use]
    pub fn try_withdraw(&self) -> bool {
        self.try_withdraw_at(Instant::now())
    }

    fn bucket_len(&self) -> Duration {
        self.ttl() / BUCKETS
    }

    fn with_window<R>(&self, now: Instant, f: impl FnOnce(&mut Window, u64) -> R) -> R {
        let mut w = self
            .inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let elapsed = now.saturating_duration_since(w.origin);
        let bucket = (elapsed.as_nanos() / self.bucket_len().as_nanos().max(1)) as u64;
        let oldest = bucket.saturating_sub(u64::from(BUCKETS) - 1);
        w.buckets.retain(|b| b.0 >= oldest);
        f(&mut w, bucket)
    }

    pub(crate) fn try_withdraw_at(&self, now: Instant) -> bool {
        let floor = f64::from(self.inner.min_per_sec) * self.ttl().as_secs_f64();
        let ratio = self.ratio();
        self.with_window(now, |w, bucket| {
            let (deposits, retries) = w
                .buckets
                .iter()
                .fold((0u64, 0u64), |(d, r), b| (d + b.1, r + b.2));
            if (retries as f64) >= floor + ratio * deposits as f64 {
                return false;
            }
            if w.buckets.last().is_none_or(|b| b.0 != bucket) {
                w.buckets.push((bucket, 0, 0));
            }
            if let Some(b) = w.buckets.last_mut() {
                b.2 += 1;
            }
            true
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn ratio_bounds_retries_on_top_of_deposits() {
        let b = RetryBudget::with("x", Duration::from_secs(10), 0, 0.5);
        for _ in 0..10 {
            b.deposit();
        }
        let granted = (0..10).filter(|_| b.try_withdraw()).count();
        assert_eq!(granted, 5);
    }

    #[tokio::test(start_paused = true)]
    async fn floor_allows_retries_without_deposits_and_expires() {
        let b = RetryBudget::with("x", Duration::from_secs(1), 3, 0.0);
        assert_eq!((0..10).filter(|_| b.try_withdraw()).count(), 3);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!((0..10).filter(|_| b.try_withdraw()).count(), 3);
    }
}
