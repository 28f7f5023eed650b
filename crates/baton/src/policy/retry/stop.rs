//! When a retry series stops, and why: the decision taken after each failed attempt.
//!
//! The decision, [`after_failure`], is a pure function of what the series knows. The onion
//! asks it after every failed attempt, with the user's predicate, backoff and delay hint
//! behind closures so that each is called only when the decision needs it, in a fixed
//! order.

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use crate::policy::deadline::clip_backoff;

/// Why a retry series stopped before an attempt succeeded.
///
/// ```
/// use baton_graph::{BoxError, NodeError, Pipeline, Retry, retry::StopReason};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), BoxError> {
/// let stock = Pipeline::<u32>::builder("stock").retry(Retry::new(2)).build()?;
/// let call = stock.run(|_| async { Err::<u32, BoxError>("503".into()) }).await;
/// let Some(NodeError::GaveUp { reason, attempts, .. }) = call.error() else {
///     panic!("should give up");
/// };
/// assert_eq!((reason, *attempts), (&StopReason::MaxAttempts, 2));
/// assert_eq!(reason.to_string(), "max attempts reached");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// The policy's maximum number of attempts ran.
    MaxAttempts,
    /// The last error was not retryable: the retry predicate said no, or it was a breaker
    /// rejection, an exhausted deadline, or a panic under the default predicate.
    NotRetryable,
    /// The node's circuit breaker opened while the series was running.
    BreakerOpened,
    /// The named retry budget had no retry left.
    RetryBudgetExhausted {
        /// The budget's name.
        budget: String,
    },
    /// Too little time was left before the deadline for another attempt.
    DeadlineExceeded,
    /// A custom backoff sequence ran out of delays.
    BackoffExhausted,
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopReason::MaxAttempts => f.write_str("max attempts reached"),
            StopReason::NotRetryable => f.write_str("error not retryable"),
            StopReason::BreakerOpened => f.write_str("circuit breaker opened"),
            StopReason::RetryBudgetExhausted { budget } => {
                write!(f, "retry budget `{budget}` exhausted")
            }
            StopReason::DeadlineExceeded => f.write_str("deadline exceeded"),
            StopReason::BackoffExhausted => f.write_str("backoff sequence exhausted"),
        }
    }
}

/// What a retry series does after a failed attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next {
    /// Wait `delay`, already clipped to the deadline, then make the next attempt.
    Retry {
        /// The backoff.
        delay: Duration,
        /// The deadline clipped the backoff: the next attempt is the last.
        last: bool,
    },
    /// Stop, for this reason.
    Stop(StopReason),
}

/// What the series knows after attempt `number` failed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Failed {
    /// The attempt that failed, from 1.
    pub(crate) number: u32,
    /// The most attempts the series may make.
    pub(crate) max_attempts: u32,
    /// The attempt ran out of the deadline: it was cut by it, or none could start.
    pub(crate) out_of_time: bool,
    /// The attempt followed a backoff the deadline clipped: it was the last.
    pub(crate) after_clip: bool,
    /// The series' deadline.
    pub(crate) deadline: Option<Instant>,
    /// The least time an attempt needs.
    pub(crate) min_attempt: Duration,
}

/// Decides whether the series retries after `failed`, reading what it must in this order,
/// each only when the ones before let the series go on. Nothing comes after the attempt a
/// clipped backoff made room for: it is the series' last. Then come whether the error is
/// `retryable`, whether the breaker the series reports to `moved` on since it was
/// admitted, the next `backoff` delay, the delay the error asks for, `hinted`, which
/// replaces the backoff's, and the time left at `now()`. The delay, hinted or not, is
/// clipped to the deadline. A retry budget, if any, is asked after this says
/// [`Next::Retry`].
pub(crate) fn after_failure(
    failed: Failed,
    retryable: impl FnOnce() -> bool,
    moved: impl FnOnce() -> bool,
    backoff: impl FnOnce() -> Option<Duration>,
    hinted: impl FnOnce() -> Option<Duration>,
    now: impl FnOnce() -> Instant,
) -> Next {
    if failed.out_of_time || failed.after_clip {
        return Next::Stop(StopReason::DeadlineExceeded);
    }
    if failed.number >= failed.max_attempts {
        return Next::Stop(StopReason::MaxAttempts);
    }
    if !retryable() {
        return Next::Stop(StopReason::NotRetryable);
    }
    // Its result would be ignored, and the downstream is presumed down.
    if moved() {
        return Next::Stop(StopReason::BreakerOpened);
    }
    let Some(computed) = backoff() else {
        return Next::Stop(StopReason::BackoffExhausted);
    };
    let delay = hinted().unwrap_or(computed);
    match clip_backoff(delay, failed.deadline, now(), failed.min_attempt) {
        Some(backoff) => Next::Retry {
            delay: backoff.delay,
            last: backoff.clipped,
        },
        None => Next::Stop(StopReason::DeadlineExceeded),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::util::ms;

    fn failed(number: u32, deadline: Option<Instant>) -> Failed {
        Failed {
            number,
            max_attempts: 3,
            out_of_time: false,
            after_clip: false,
            deadline,
            min_attempt: ms(10),
        }
    }

    #[test]
    fn each_reason_stops_the_series_in_order() {
        let t = Instant::now();
        let go = || Next::Retry {
            delay: ms(100),
            last: false,
        };
        let next = |f: Failed, r: bool, m: bool, b: Option<Duration>| {
            after_failure(f, || r, || m, || b, || None, || t)
        };
        assert_eq!(next(failed(1, None), true, false, Some(ms(100))), go());
        let late = Failed {
            out_of_time: true,
            ..failed(1, None)
        };
        assert_eq!(
            next(late, true, false, Some(ms(1))),
            Next::Stop(StopReason::DeadlineExceeded)
        );
        assert_eq!(
            next(failed(3, None), true, false, Some(ms(1))),
            Next::Stop(StopReason::MaxAttempts)
        );
        assert_eq!(
            next(failed(1, None), false, false, Some(ms(1))),
            Next::Stop(StopReason::NotRetryable)
        );
        assert_eq!(
            next(failed(1, None), true, true, Some(ms(1))),
            Next::Stop(StopReason::BreakerOpened)
        );
        assert_eq!(
            next(failed(1, None), true, false, None),
            Next::Stop(StopReason::BackoffExhausted)
        );
        assert_eq!(
            next(failed(1, Some(t + ms(50))), true, false, Some(ms(100))),
            Next::Retry {
                delay: ms(40),
                last: true
            }
        );
        let after_clip = Failed {
            after_clip: true,
            ..failed(1, None)
        };
        assert_eq!(
            next(after_clip, true, false, Some(ms(1))),
            Next::Stop(StopReason::DeadlineExceeded),
            "the attempt after a clipped backoff is the last"
        );
        assert_eq!(
            next(failed(1, Some(t + ms(5))), true, false, Some(ms(100))),
            Next::Stop(StopReason::DeadlineExceeded)
        );
    }

    #[test]
    fn what_the_decision_does_not_need_is_not_asked() {
        let t = Instant::now();
        let asked = std::cell::Cell::new(0);
        let ask = || asked.set(asked.get() + 1);
        let next = after_failure(
            failed(3, None),
            || {
                ask();
                true
            },
            || {
                ask();
                false
            },
            || {
                ask();
                Some(ms(1))
            },
            || {
                ask();
                None
            },
            || t,
        );
        assert_eq!(next, Next::Stop(StopReason::MaxAttempts));
        assert_eq!(asked.get(), 0, "nothing asked past max attempts");
    }

    /// A delay the error asks for replaces the backoff's, and is clipped by the deadline
    /// like it; it is asked only once the backoff said the series goes on.
    #[test]
    fn a_hinted_delay_replaces_the_backoff_and_is_clipped() {
        let t = Instant::now();
        let hint = |f: Failed, b: Option<Duration>, h: Option<Duration>| {
            after_failure(f, || true, || false, || b, || h, || t)
        };
        let retry = |delay, last| Next::Retry { delay, last };
        assert_eq!(
            hint(failed(1, None), Some(ms(100)), Some(ms(2_000))),
            retry(ms(2_000), false)
        );
        assert_eq!(
            hint(failed(1, None), Some(ms(100)), None),
            retry(ms(100), false),
            "no hint: the backoff's delay"
        );
        assert_eq!(
            hint(failed(1, Some(t + ms(500))), Some(ms(100)), Some(ms(2_000))),
            retry(ms(490), true),
            "clipped to the deadline minus the minimum attempt time"
        );
        assert_eq!(
            hint(failed(1, None), None, Some(ms(5))),
            Next::Stop(StopReason::BackoffExhausted),
            "the backoff still decides whether the series goes on"
        );
        let asked = std::cell::Cell::new(false);
        let next = after_failure(
            failed(1, None),
            || false,
            || false,
            || Some(ms(1)),
            || {
                asked.set(true);
                None
            },
            || t,
        );
        assert_eq!(next, Next::Stop(StopReason::NotRetryable));
        assert!(
            !asked.get(),
            "no hint asked for an error that is not retried"
        );
    }
}
