//! The policies every build puts on every downstream call, as the order example sets them
//! on `stock`: a per-attempt timeout, three attempts with an exponential backoff inside the
//! request's deadline, a circuit breaker per downstream (by the service's name), and a
//! fallback on `stock` (0 units: the order goes to `shortage`) and on `notify` (the in-app
//! message).

use std::time::Duration;

use tokio::time::Instant;

/// Each attempt's time limit (the order example's on `stock`).
pub(crate) const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(300);
/// Attempts per call: the first and at most two retries.
pub(crate) const ATTEMPTS: u32 = 3;
/// The first retry's backoff; each next one is [`BACKOFF_FACTOR`] times longer.
pub(crate) const BACKOFF: Duration = Duration::from_millis(100);
/// The backoff's growth factor.
pub(crate) const BACKOFF_FACTOR: f64 = 2.0;
/// Consecutive failed calls that open a breaker.
pub(crate) const BREAKER_FAILURES: u32 = 5;
/// How long an open breaker stays open before it lets a probe through.
pub(crate) const BREAKER_OPEN: Duration = Duration::from_secs(3);
/// The whole request's deadline (the order example's run timeout).
pub(crate) const DEADLINE: Duration = Duration::from_secs(2);
/// No retry starts with less than this left before the deadline (baton's default).
pub(crate) const MIN_ATTEMPT: Duration = Duration::from_millis(10);
/// What `notify` says when the notify service fails.
pub(crate) const IN_APP: &str = "sent by in-app message";

/// The backoff before a retry, clipped so that the retry has [`MIN_ATTEMPT`] before
/// `deadline`; `None`: no time for another attempt.
pub(crate) fn clip_backoff(delay: Duration, deadline: Instant) -> Option<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    let room = left.checked_sub(MIN_ATTEMPT).filter(|r| !r.is_zero())?;
    Some(delay.min(room))
}

/// An attempt's time limit: [`ATTEMPT_TIMEOUT`] or what is left before `deadline`.
pub(crate) fn attempt_limit(deadline: Instant) -> Duration {
    ATTEMPT_TIMEOUT.min(deadline.saturating_duration_since(Instant::now()))
}
