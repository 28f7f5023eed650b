//! The breaker's two errors: a rejected call, and a configuration `build()` refused.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::events::BreakerState;

/// [`CircuitBreaker::try_acquire`](super::CircuitBreaker::try_acquire) refused the call:
/// the breaker is open or isolated, half-open with every probe permit taken, or recovering
/// and this call is beyond its share.
///
/// `Display`: ``circuit breaker `inventory` is open (retry in 2.4 s)``,
/// ``circuit breaker `inventory` is half_open (its probe permits are taken)``,
/// ``circuit breaker `inventory` is recovering (this call is beyond the ramp's share)``, or
/// ``circuit breaker `inventory` is isolated (every call is rejected)``.
///
/// ```
/// use std::time::Duration;
/// use baton_graph::{CircuitBreaker, breaker::BreakerState};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let breaker = CircuitBreaker::builder("inventory")
///     .consecutive_failures(1)
///     .open_duration(Duration::from_secs(5))
///     .build()?;
/// breaker.try_acquire()?.failure(Duration::from_millis(5));
/// tokio::time::advance(Duration::from_secs(2)).await;
/// let rejected = breaker.try_acquire().unwrap_err();
/// assert_eq!((rejected.breaker(), rejected.state()), ("inventory", BreakerState::Open));
/// assert_eq!(rejected.retry_after(), Some(Duration::from_secs(3)));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("circuit breaker `{breaker}` is {state} ({})", RetryHint(*.state, *.retry_after))]
#[non_exhaustive]
pub struct BreakerOpen {
    pub(crate) breaker: Arc<str>,
    pub(crate) state: BreakerState,
    pub(crate) retry_after: Option<Duration>,
}

impl BreakerOpen {
    /// The breaker's name.
    #[must_use]
    pub fn breaker(&self) -> &str {
        &self.breaker
    }

    /// The state that rejected the call: [`BreakerState::Open`],
    /// [`BreakerState::HalfOpen`], [`BreakerState::Recovering`] or
    /// [`BreakerState::Isolated`].
    #[must_use]
    pub fn state(&self) -> BreakerState {
        self.state
    }

    /// How long until the open duration elapses and the next caller may probe, when the
    /// breaker is open. `None` when it is half-open: the wait depends on the probes in
    /// flight. Rounded down to the microsecond when the rejection took the lock-free path.
    #[must_use]
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
}

/// Formats a retry hint: `retry in 2.4 s`, `retry in 150 ms`, or why the state rejects.
struct RetryHint(BreakerState, Option<Duration>);

impl fmt::Display for RetryHint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            None => f.write_str(match self.0 {
                BreakerState::Recovering => "this call is beyond the ramp's share",
                BreakerState::Isolated => "every call is rejected",
                _ => "its probe permits are taken",
            }),
            Some(d) if d >= Duration::from_secs(1) => {
                write!(f, "retry in {:.1} s", d.as_secs_f64())
            }
            Some(d) => write!(f, "retry in {} ms", d.as_micros().div_ceil(1000)),
        }
    }
}

/// A breaker configuration that
/// [`CircuitBreakerBuilder::build`](super::CircuitBreakerBuilder::build) refused. Every
/// variant but [`EmptyName`](Self::EmptyName) names the breaker and the offending setter.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum BreakerConfigError {
    /// The name is empty; breakers are shared by name.
    #[error("circuit breaker name is empty: breakers are shared by name, so they need one")]
    EmptyName,
    /// A count or duration that must be positive is zero.
    #[error("circuit breaker `{breaker}`: `{field}` must not be zero")]
    Zero {
        /// The breaker's name.
        breaker: String,
        /// The setter and argument, e.g. `half_open_probes` or `failure_rate.window`.
        field: &'static str,
    },
    /// A rate is not in `(0, 1]`, or is NaN.
    #[error("circuit breaker `{breaker}`: `{field}` must be in (0, 1], got {value}")]
    RateOutOfRange {
        /// The breaker's name.
        breaker: String,
        /// `failure_rate.threshold` or `slow_calls.rate`.
        field: &'static str,
        /// The rejected value.
        value: f64,
    },
    /// The open-duration growth multiplier is NaN, infinite or below 1.
    #[error(
        "circuit breaker `{breaker}`: `open_duration_growth.multiplier` must be finite and >= 1, got {value}"
    )]
    InvalidMultiplier {
        /// The breaker's name.
        breaker: String,
        /// The rejected value.
        value: f64,
    },
    /// The open-duration growth cap is shorter than the open duration itself.
    #[error(
        "circuit breaker `{breaker}`: `open_duration_growth.max` ({max:?}) is shorter than `open_duration` ({open_duration:?})"
    )]
    GrowthCapBelowOpenDuration {
        /// The breaker's name.
        breaker: String,
        /// The cap.
        max: Duration,
        /// The open duration.
        open_duration: Duration,
    },
    /// A count window smaller than `min_calls`: the rate would never be evaluated.
    #[error(
        "circuit breaker `{breaker}`: `failure_rate.min_calls` ({min_calls}) exceeds the window of the last {window} calls, so the rate would never be evaluated"
    )]
    MinCallsExceedWindow {
        /// The breaker's name.
        breaker: String,
        /// The configured minimum.
        min_calls: u32,
        /// The configured window size, in calls.
        window: u32,
    },
    /// A count above what the breaker supports.
    #[error("circuit breaker `{breaker}`: `{field}` is {value}, above the supported maximum {max}")]
    TooLarge {
        /// The breaker's name.
        breaker: String,
        /// `half_open_probes` or `failure_rate.window`.
        field: &'static str,
        /// The rejected value.
        value: u64,
        /// The largest accepted value.
        max: u64,
    },
    /// The breaker's shared-state backend cannot share this setting.
    #[error("circuit breaker `{breaker}`: its shared state cannot keep `{setting}`")]
    NotShareable {
        /// The breaker's name.
        breaker: String,
        /// The setting, such as `slow_calls`, or `failure_rate.window` for a count window.
        setting: &'static str,
    },
    /// A shared breaker's rules are kept in its shared store with the fleet's other
    /// processes: they cannot change in place in one of them.
    #[error(
        "circuit breaker `{breaker}`: its rules are shared with other processes and cannot change in place"
    )]
    SharedRules {
        /// The breaker's name.
        breaker: String,
    },
}

impl BreakerConfigError {
    /// The breaker's name; `None` for [`EmptyName`](Self::EmptyName).
    #[must_use]
    pub fn breaker(&self) -> Option<&str> {
        match self {
            BreakerConfigError::EmptyName => None,
            BreakerConfigError::Zero { breaker, .. }
            | BreakerConfigError::RateOutOfRange { breaker, .. }
            | BreakerConfigError::InvalidMultiplier { breaker, .. }
            | BreakerConfigError::GrowthCapBelowOpenDuration { breaker, .. }
            | BreakerConfigError::MinCallsExceedWindow { breaker, .. }
            | BreakerConfigError::TooLarge { breaker, .. }
            | BreakerConfigError::NotShareable { breaker, .. }
            | BreakerConfigError::SharedRules { breaker } => Some(breaker),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(retry_after: Option<Duration>, state: BreakerState) -> String {
        BreakerOpen {
            breaker: Arc::from("inventory"),
            state,
            retry_after,
        }
        .to_string()
    }

    #[test]
    fn breaker_open_messages() {
        assert_eq!(
            open(Some(Duration::from_millis(2_400)), BreakerState::Open),
            "circuit breaker `inventory` is open (retry in 2.4 s)"
        );
        assert_eq!(
            open(Some(Duration::from_micros(149_001)), BreakerState::Open),
            "circuit breaker `inventory` is open (retry in 150 ms)"
        );
        assert_eq!(
            open(None, BreakerState::HalfOpen),
            "circuit breaker `inventory` is half_open (its probe permits are taken)"
        );
        assert_eq!(
            open(None, BreakerState::Recovering),
            "circuit breaker `inventory` is recovering (this call is beyond the ramp's share)"
        );
        assert_eq!(
            open(None, BreakerState::Isolated),
            "circuit breaker `inventory` is isolated (every call is rejected)"
        );
    }
}
