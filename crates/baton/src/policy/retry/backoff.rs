//! Backoff: the wait between attempts, as an iterator of `Duration`s, and jitter, its
//! randomisation. The idea is backon's: a backoff is any `Iterator<Item = Duration>`, so
//! exact sequences are trivial to test.
//!
//! All arithmetic saturates: the delay of attempt 10 000 with multiplier 10 is the cap, not
//! an overflow, a panic, or zero. Jitter never pushes a delay past the cap.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The default cap of an exponential backoff: 30 s.
pub(crate) const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(30);

/// How long to wait before each retry, that is before attempt 2, 3, ….
///
/// # Kinds
/// - [`Backoff::exponential`]: `base * multiplier^(n-1)`, capped at `max`. The default
///   multiplier is 2.0 and the default cap 30 s.
/// - [`Backoff::constant`]: the same delay every time.
/// - [`Backoff::custom`]: any `IntoIterator<Item = Duration>`, such as an array, a `Vec` or
///   an iterator adapter, cloned at the start of each retry series. When it runs out, the
///   series stops retrying.
///
/// Jitter is set separately with [`Backoff::jitter`]; the default is [`Jitter::None`].
#[derive(Clone)]
pub struct Backoff {
    kind: Kind,
    jitter: Jitter,
}

#[derive(Clone)]
enum Kind {
    Exponential {
        base: Duration,
        multiplier: f64,
        max: Duration,
    },
    Constant(Duration),
    Custom(Arc<dyn Fn() -> Box<dyn Iterator<Item = Duration> + Send> + Send + Sync>),
}

impl fmt::Debug for Backoff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Exponential {
                base,
                multiplier,
                max,
            } => f
                .debug_struct("Backoff::Exponential")
                .field("base", base)
                .field("multiplier", multiplier)
                .field("max", max)
                .field("jitter", &self.jitter)
                .finish(),
            Kind::Constant(d) => f
                .debug_struct("Backoff::Constant")
                .field("delay", d)
                .field("jitter", &self.jitter)
                .finish(),
            Kind::Custom(_) => f
                .debug_struct("Backoff::Custom")
                .field("jitter", &self.jitter)
                .finish_non_exhaustive(),
        }
    }
}

impl Backoff {
    /// Whether `self` and `other` give the same delays: the same kind, settings and jitter.
    /// For a custom backoff, that means the same closure, not a copy of it.
    pub(crate) fn same(&self, other: &Self) -> bool {
        let kind = match (&self.kind, &other.kind) {
            (
                Kind::Exponential {
                    base,
                    multiplier,
                    max,
                },
                Kind::Exponential {
                    base: b,
                    multiplier: m,
                    max: x,
                },
            ) => base == b && multiplier.to_bits() == m.to_bits() && max == x,
            (Kind::Constant(a), Kind::Constant(b)) => a == b,
            (Kind::Custom(a), Kind::Custom(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        kind && self.jitter == other.jitter
    }

    /// Exponential backoff starting at `base`: `base`, `2·base`, `4·base`, … capped at
    /// 30 s. Change the factor with [`multiplier`](Self::multiplier) and
    /// the cap with [`max_delay`](Self::max_delay).
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::Backoff;
    ///
    /// let ms = Duration::from_millis;
    /// let backoff = Backoff::exponential(ms(100)).max_delay(ms(500));
    /// let delays: Vec<_> = backoff.iter().take(5).collect();
    /// assert_eq!(delays, [ms(100), ms(200), ms(400), ms(500), ms(500)]);
    /// let tripled: Vec<_> = Backoff::exponential(ms(10)).multiplier(3.0).iter().take(3).collect();
    /// assert_eq!(tripled, [ms(10), ms(30), ms(90)]);
    /// ```
    #[must_use]
    pub fn exponential(base: Duration) -> Self {
        Backoff {
            kind: Kind::Exponential {
                base,
                multiplier: 2.0,
                max: DEFAULT_MAX_DELAY,
            },
            jitter: Jitter::None,
        }
    }

    /// The same `delay` before every retry.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::Backoff;
    ///
    /// let delays: Vec<_> = Backoff::constant(Duration::from_millis(250)).iter().take(3).collect();
    /// assert_eq!(delays, [Duration::from_millis(250); 3]);
    /// ```
    #[must_use]
    pub fn constant(delay: Duration) -> Self {
        Backoff {
            kind: Kind::Constant(delay),
            jitter: Jitter::None,
        }
    }

    /// Exactly these delays, in order; when they run out, the series stops retrying.
    ///
    /// `delays` is cloned at the start of every retry series, so `[ms(100), ms(300)]` or
    /// `(1..).map(|n| ms(10 * n))` both work.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::Backoff;
    ///
    /// let ms = Duration::from_millis;
    /// let backoff = Backoff::custom([ms(10), ms(50), ms(200)]);
    /// // Each series starts the sequence again, and retries at most 3 times.
    /// assert_eq!(backoff.iter().collect::<Vec<_>>(), [ms(10), ms(50), ms(200)]);
    /// assert_eq!(backoff.iter().count(), 3);
    /// ```
    #[must_use]
    pub fn custom<D>(delays: D) -> Self
    where
        D: IntoIterator<Item = Duration> + Clone + Send + Sync + 'static,
        D::IntoIter: Send + 'static,
    {
        Backoff {
            kind: Kind::Custom(Arc::new(move || Box::new(delays.clone().into_iter()))),
            jitter: Jitter::None,
        }
    }

    /// Sets the growth factor of an exponential backoff; the default is 2.0. Ignored by the
    /// other kinds. A factor below 1.0, NaN or infinite is rejected when the graph is built,
    /// with [`BuildError::InvalidPolicy`](crate::BuildError::InvalidPolicy).
    #[must_use]
    pub fn multiplier(mut self, multiplier: f64) -> Self {
        if let Kind::Exponential { multiplier: m, .. } = &mut self.kind {
            *m = multiplier;
        }
        self
    }

    /// Sets the cap of an exponential backoff; the default is 30 s. No delay,
    /// jittered or not, exceeds it. Ignored by the other kinds.
    #[must_use]
    pub fn max_delay(mut self, max: Duration) -> Self {
        if let Kind::Exponential { max: m, .. } = &mut self.kind {
            *m = max;
        }
        self
    }

    /// Sets the jitter; the default is [`Jitter::None`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{Backoff, Jitter};
    ///
    /// let ms = Duration::from_millis;
    /// let backoff = Backoff::exponential(ms(100)).jitter(Jitter::Full);
    /// for (delay, unjittered) in backoff.iter().zip([ms(100), ms(200), ms(400)]) {
    ///     assert!(delay <= unjittered); // uniform in [0, d]
    /// }
    /// ```
    #[must_use]
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// Checks the configuration; `Err` says what is wrong.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if let Kind::Exponential {
            multiplier,
            base,
            max,
            ..
        } = &self.kind
        {
            if !multiplier.is_finite() || *multiplier < 1.0 {
                return Err(format!(
                    "backoff multiplier must be a finite number >= 1.0, got {multiplier}"
                ));
            }
            if base > max {
                return Err(format!(
                    "backoff base {base:?} is larger than its cap {max:?}"
                ));
            }
        }
        Ok(())
    }

    /// The delays of one retry series: the first item is the wait before attempt 2.
    #[must_use]
    pub fn iter(&self) -> BackoffIter {
        let inner = match &self.kind {
            Kind::Exponential {
                base,
                multiplier,
                max,
            } => Inner::Exponential {
                base: *base,
                multiplier: *multiplier,
                max: *max,
                n: 0,
            },
            Kind::Constant(d) => Inner::Constant(*d),
            Kind::Custom(make) => Inner::Custom(make()),
        };
        BackoffIter {
            inner,
            jitter: self.jitter,
            prev: None,
            rng: fastrand::Rng::new(),
        }
    }
}

/// Randomisation of backoff delays, so that clients that failed together do not retry
/// together.
///
/// For a computed delay `d`, already capped:
/// - `None`: `d`.
/// - `Full`: uniform in `[0, d]`.
/// - `Equal`: `d/2` plus uniform in `[0, d/2]`.
/// - `Decorrelated`: uniform in `[d, 3 · previous]`, capped, where `previous` is the last
///   jittered delay, `d` at first. It lengthens delays: on an exponential backoff the cap is
///   its `max_delay`; constant and custom sequences have no cap.
///
/// No jitter ever produces a delay above the backoff's cap.
///
/// ```
/// use std::time::Duration;
/// use baton_graph::{Backoff, Jitter};
///
/// let d = Duration::from_millis(200);
/// let equal = Backoff::constant(d).jitter(Jitter::Equal);
/// assert!(equal.iter().take(100).all(|delay| delay >= d / 2 && delay <= d));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(rename_all = "lowercase")
)]
#[non_exhaustive]
pub enum Jitter {
    /// No randomisation. This is the default.
    #[default]
    None,
    /// Uniform in `[0, d]`.
    Full,
    /// `d/2 + uniform[0, d/2]`.
    Equal,
    /// `min(cap, uniform[base, 3 · previous delay])`.
    Decorrelated,
}

enum Inner {
    Exponential {
        base: Duration,
        multiplier: f64,
        max: Duration,
        n: u32,
    },
    Constant(Duration),
    Custom(Box<dyn Iterator<Item = Duration> + Send>),
}

/// The delays of one retry series; see [`Backoff::iter`].
pub struct BackoffIter {
    inner: Inner,
    jitter: Jitter,
    prev: Option<Duration>,
    rng: fastrand::Rng,
}

impl fmt::Debug for BackoffIter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackoffIter")
            .field("jitter", &self.jitter)
            .field("prev", &self.prev)
            .finish_non_exhaustive()
    }
}

impl BackoffIter {
    /// Uses a seeded random generator, for reproducible jittered sequences in tests.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{Backoff, Jitter};
    ///
    /// let backoff = Backoff::exponential(Duration::from_millis(100)).jitter(Jitter::Decorrelated);
    /// let a: Vec<_> = backoff.iter().with_seed(7).take(5).collect();
    /// let b: Vec<_> = backoff.iter().with_seed(7).take(5).collect();
    /// assert_eq!(a, b);
    /// ```
    #[must_use]
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.rng = fastrand::Rng::with_seed(seed);
        self
    }

    /// The cap jitter respects: the exponential backoff's `max_delay`, and none for the other
    /// kinds. Full and equal jitter only shorten a delay anyway.
    fn cap(&self) -> Duration {
        match &self.inner {
            Inner::Exponential { max, .. } => *max,
            Inner::Constant(_) | Inner::Custom(_) => Duration::MAX,
        }
    }

    /// Uniform in `[lo, hi]`, at nanosecond resolution, saturating.
    fn uniform(&mut self, lo: Duration, hi: Duration) -> Duration {
        if hi <= lo {
            return lo;
        }
        let lo_n = lo.as_nanos().min(u128::from(u64::MAX)) as u64;
        let hi_n = hi.as_nanos().min(u128::from(u64::MAX)) as u64;
        Duration::from_nanos(self.rng.u64(lo_n..=hi_n))
    }
}

/// `base * multiplier^k`, saturating at `max`: no overflow, no panic, no NaN.
fn exponential(base: Duration, multiplier: f64, k: u32, max: Duration) -> Duration {
    let factor = multiplier.powi(k.min(i32::MAX as u32) as i32);
    let secs = base.as_secs_f64() * factor;
    if !secs.is_finite() || secs >= max.as_secs_f64() {
        return max;
    }
    Duration::try_from_secs_f64(secs).map_or(max, |d| d.min(max))
}

impl Iterator for BackoffIter {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let computed = match &mut self.inner {
            Inner::Exponential {
                base,
                multiplier,
                max,
                n,
            } => {
                let d = exponential(*base, *multiplier, *n, *max);
                *n = n.saturating_add(1);
                d
            }
            Inner::Constant(d) => *d,
            Inner::Custom(it) => it.next()?,
        };
        let cap = self.cap();
        let delay = match self.jitter {
            Jitter::None => computed,
            Jitter::Full => self.uniform(Duration::ZERO, computed),
            Jitter::Equal => {
                let half = computed / 2;
                half.saturating_add(self.uniform(Duration::ZERO, computed - half))
            }
            Jitter::Decorrelated => {
                // Between this step's delay and three times the previous jittered one.
                let prev = self.prev.unwrap_or(computed);
                let hi = prev.saturating_mul(3).max(computed).min(cap);
                self.uniform(computed.min(hi), hi)
            }
        };
        let delay = delay.min(cap);
        self.prev = Some(delay);
        Some(delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::util::ms;

    #[test]
    fn exponential_sequence_is_exact_and_capped() {
        let b = Backoff::exponential(ms(100)).max_delay(ms(1000));
        let got: Vec<_> = b.iter().take(6).collect();
        assert_eq!(
            got,
            [ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000)]
        );
    }

    #[test]
    fn multiplier_three() {
        let b = Backoff::exponential(ms(10)).multiplier(3.0);
        let got: Vec<_> = b.iter().take(4).collect();
        assert_eq!(got, [ms(10), ms(30), ms(90), ms(270)]);
    }

    #[test]
    fn huge_attempt_numbers_saturate_at_the_cap() {
        let b = Backoff::exponential(ms(100))
            .multiplier(10.0)
            .max_delay(ms(5000));
        let d = b.iter().nth(10_000);
        assert_eq!(d, Some(ms(5000)));
        assert_eq!(exponential(ms(100), 10.0, u32::MAX, ms(7)), ms(7));
        let no_cap = Backoff::exponential(ms(1))
            .multiplier(10.0)
            .max_delay(Duration::MAX);
        assert_eq!(no_cap.iter().nth(10_000), Some(Duration::MAX));
    }

    #[test]
    fn constant_and_custom() {
        assert_eq!(
            Backoff::constant(ms(5)).iter().take(3).collect::<Vec<_>>(),
            [ms(5); 3]
        );
        let c = Backoff::custom([ms(1), ms(2)]);
        assert_eq!(c.iter().collect::<Vec<_>>(), [ms(1), ms(2)]);
        // Cloned per series: a second series starts over.
        assert_eq!(c.iter().next(), Some(ms(1)));
    }

    #[test]
    fn validation_rejects_bad_multipliers() {
        assert!(
            Backoff::exponential(ms(1))
                .multiplier(0.5)
                .validate()
                .is_err()
        );
        assert!(
            Backoff::exponential(ms(1))
                .multiplier(f64::NAN)
                .validate()
                .is_err()
        );
        assert!(
            Backoff::exponential(ms(1))
                .multiplier(f64::INFINITY)
                .validate()
                .is_err()
        );
        assert!(
            Backoff::exponential(ms(10))
                .max_delay(ms(1))
                .validate()
                .is_err()
        );
        assert!(Backoff::exponential(ms(1)).validate().is_ok());
    }
}
