//! Fault injection for tests: latency and errors injected into attempts at configured
//! rates, drawn from a seeded random number generator so that a test replays the same
//! faults.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// A task's error, as [`BoxError`](crate::BoxError). The error layer is above this one.
type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Makes the error an injected fault fails an attempt with, given the attempt's number.
type MakeError = Arc<dyn Fn(u32) -> BoxError + Send + Sync>;

/// Fault injection, or chaos, for a node or a pipeline. Before each attempt's task, with
/// probability `rate`, a latency is injected: the attempt sleeps first, and the sleep
/// counts toward its timeout. With its own probability, an error replaces the task's run:
/// the task is not called, and the attempt fails with a task error, retryable and counted
/// by the breaker like a downstream's.
///
/// Draws come from one generator seeded with `seed`, in the order attempts ask: the same
/// seed and the same order of attempts give the same faults, as on a current-thread
/// runtime with the paused clock. Clones share the generator. A chaos policy can be turned
/// off and on while the graph runs with [`set_enabled`](Self::set_enabled); when off, no
/// draw is made.
///
/// Rates outside `[0, 1]` are a build error:
/// [`BuildError::InvalidPolicy`](crate::BuildError::InvalidPolicy) with policy `chaos`.
///
/// ```
/// use std::time::Duration;
/// use baton_graph::chaos::Chaos;
///
/// // A fifth of the attempts wait 200 ms more; a tenth fail with an `InjectedFault`.
/// let chaos = Chaos::new(42)
///     .latency(0.2, Duration::from_millis(200))
///     .error(0.1);
/// chaos.set_enabled(false); // off until the test turns it on
/// # let _ = chaos;
/// ```
#[derive(Clone)]
pub struct Chaos {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Config {
    seed: u64,
    latency: Option<(f64, Duration)>,
    error: Option<(f64, Option<MakeError>)>,
}

struct Inner {
    config: Config,
    enabled: AtomicBool,
    rng: Mutex<fastrand::Rng>,
}

impl fmt::Debug for Chaos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.inner.config;
        f.debug_struct("Chaos")
            .field("seed", &c.seed)
            .field("latency", &c.latency)
            .field("error", &c.error.as_ref().map(|(rate, _)| rate))
            .field("enabled", &self.is_enabled())
            .finish()
    }
}

/// The faults drawn for one attempt.
#[derive(Default)]
pub(crate) struct Fault {
    /// Latency to inject before the task; zero for none.
    pub(crate) latency: Duration,
    /// The error that replaces the task's run, if one was drawn.
    pub(crate) error: Option<BoxError>,
}

/// The error of an attempt that fault injection failed: the task was not called.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("injected fault (attempt {attempt})")]
pub struct InjectedFault {
    /// The attempt, from 1.
    pub attempt: u32,
}

impl Chaos {
    /// No fault yet, drawn from a generator seeded with `seed`; enabled. Add faults with
    /// [`latency`](Self::latency) and [`error`](Self::error).
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self::from_config(Config {
            seed,
            latency: None,
            error: None,
        })
    }

    fn from_config(config: Config) -> Self {
        Chaos {
            inner: Arc::new(Inner {
                rng: Mutex::new(fastrand::Rng::with_seed(config.seed)),
                config,
                enabled: AtomicBool::new(true),
            }),
        }
    }

    /// Injects `delay` before the task of a share `rate` of attempts, in `[0, 1]`.
    /// Returns a new handle, with a fresh generator.
    #[must_use]
    pub fn latency(self, rate: f64, delay: Duration) -> Self {
        let mut config = self.inner.config.clone();
        config.latency = Some((rate, delay));
        Self::from_config(config)
    }

    /// Fails a share `rate` of attempts, in `[0, 1]`, with [`InjectedFault`], without
    /// calling the task. Returns a new handle, with a fresh generator.
    #[must_use]
    pub fn error(self, rate: f64) -> Self {
        let mut config = self.inner.config.clone();
        config.error = Some((rate, None));
        Self::from_config(config)
    }

    /// Fails a share `rate` of attempts with the error `make` returns for the attempt's
    /// number, without calling the task. The outcome is the user's choice, say an HTTP 503
    /// with a `Retry-After`. Returns a new handle, with a fresh generator.
    #[must_use]
    pub fn error_with(
        self,
        rate: f64,
        make: impl Fn(u32) -> BoxError + Send + Sync + 'static,
    ) -> Self {
        let mut config = self.inner.config.clone();
        config.error = Some((rate, Some(Arc::new(make))));
        Self::from_config(config)
    }

    /// Turns the injection on or off, for every node and pipeline sharing this handle,
    /// from the next attempt on.
    pub fn set_enabled(&self, enabled: bool) {
        self.inner.enabled.store(enabled, Ordering::Relaxed);
    }

    /// Whether it injects faults.
    #[must_use]
    pub fn is_enabled(&self) -> bool {
        self.inner.enabled.load(Ordering::Relaxed)
    }

    /// Whether `self` and `other` are the same handle.
    #[must_use]
    pub fn same_as(&self, other: &Chaos) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The faults for attempt `number`: one draw for the latency, one for the error, each
    /// made only when that fault is configured. `None` when disabled or nothing drawn.
    pub(crate) fn draw(&self, number: u32) -> Option<Fault> {
        if !self.is_enabled() {
            return None;
        }
        let config = &self.inner.config;
        let (latency, error) = {
            let mut rng = self
                .inner
                .rng
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let latency = config
                .latency
                .filter(|(rate, _)| rng.f64() < *rate)
                .map_or(Duration::ZERO, |(_, delay)| delay);
            let error = config.error.as_ref().filter(|(rate, _)| rng.f64() < *rate);
            (latency, error.map(|(_, make)| make.clone()))
        };
        let error = error.map(|make| match make {
            Some(make) => make(number),
            None => Box::new(InjectedFault { attempt: number }) as BoxError,
        });
        (!latency.is_zero() || error.is_some()).then_some(Fault { latency, error })
    }

    /// Checks the rates.
    ///
    /// # Errors
    /// A rate outside `[0, 1]`.
    pub(crate) fn validate(&self) -> Result<(), String> {
        let c = &self.inner.config;
        let rates = [
            ("latency", c.latency.map(|(r, _)| r)),
            ("error", c.error.as_ref().map(|(r, _)| *r)),
        ];
        for (what, rate) in rates {
            if let Some(rate) = rate.filter(|r| !(0.0..=1.0).contains(r)) {
                return Err(format!(
                    "the chaos {what} rate must be in [0, 1], got {rate}"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn faults(chaos: &Chaos, n: u32) -> Vec<(u128, bool)> {
        (1..=n)
            .map(|k| {
                let f = chaos.draw(k).unwrap_or_default();
                (f.latency.as_millis(), f.error.is_some())
            })
            .collect()
    }

    #[test]
    fn the_same_seed_draws_the_same_faults_at_about_the_rate() {
        let make = || {
            Chaos::new(7)
                .latency(0.3, Duration::from_millis(5))
                .error(0.5)
        };
        let (a, b) = (faults(&make(), 1_000), faults(&make(), 1_000));
        assert_eq!(a, b);
        let slow = a.iter().filter(|(l, _)| *l == 5).count();
        let failed = a.iter().filter(|(_, e)| *e).count();
        assert!((250..350).contains(&slow), "{slow}");
        assert!((450..550).contains(&failed), "{failed}");
        assert_ne!(
            a,
            faults(
                &Chaos::new(8)
                    .latency(0.3, Duration::from_millis(5))
                    .error(0.5),
                1_000
            )
        );
    }

    #[test]
    fn a_disabled_chaos_draws_nothing_and_bad_rates_are_invalid() {
        let chaos = Chaos::new(1).error(1.0);
        chaos.set_enabled(false);
        assert!(chaos.draw(1).is_none());
        chaos.set_enabled(true);
        assert!(chaos.draw(1).is_some());
        assert!(Chaos::new(1).error(1.5).validate().is_err());
        assert!(
            Chaos::new(1)
                .latency(f64::NAN, Duration::ZERO)
                .validate()
                .is_err()
        );
        assert!(
            Chaos::new(1)
                .latency(0.0, Duration::ZERO)
                .error(1.0)
                .validate()
                .is_ok()
        );
    }
}
