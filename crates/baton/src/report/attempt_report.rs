//! [`AttemptReport`]: one attempt in a node's attempt log.

use std::time::Duration;

#[cfg(feature = "serde")]
use super::json;

/// One attempt of a node with policies: when it ran, how long the backoff before it was, and
/// how it failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(::serde::Serialize))]
#[non_exhaustive]
pub struct AttemptReport {
    /// The attempt number, from 1.
    pub number: u32,
    /// When it started, from the run's start. With a rate limiter or a bulkhead, it starts
    /// when it asks for its first permit.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "start_ms", serialize_with = "json::ms")
    )]
    pub start: Duration,
    /// When it ended, from the run's start.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "end_ms", serialize_with = "json::ms")
    )]
    pub end: Duration,
    /// How long it waited for its bulkhead permit. Zero without a bulkhead, or when a permit
    /// was free. The wait counts toward the attempt's timeout.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "permit_wait_ms", serialize_with = "json::ms")
    )]
    pub permit_wait: Duration,
    /// How long it waited for its rate-limit permit. Zero without a rate limiter, or when a
    /// permit was free. The wait counts toward the attempt's timeout.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "rate_limit_wait_ms", serialize_with = "json::ms")
    )]
    pub rate_limit_wait: Duration,
    /// The backoff waited before it. Zero for the first attempt.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "delay_before_ms", serialize_with = "json::ms")
    )]
    pub delay_before: Duration,
    /// Its error, as text; `None` when it succeeded or was cancelled.
    pub error: Option<String>,
    /// The latency fault injection added before its task. Zero without one.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "injected_latency_ms", serialize_with = "json::ms")
    )]
    pub injected_latency: Duration,
    /// Fault injection failed it with an error instead of running its task.
    pub injected_error: bool,
    /// It was a hedge: started in parallel with a slower attempt.
    pub hedge: bool,
    /// It was cancelled, that is dropped, because a parallel attempt won; its `end` is when.
    pub cancelled: bool,
    /// How long past its cut, its timeout or deadline, it ended, having succeeded: an
    /// async task that computes without reaching an `.await` cannot be cut until it
    /// yields, and keeps the value it returns. Zero for an attempt that ended in time.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "overran_ms", serialize_with = "json::ms")
    )]
    pub overran: Duration,
}

impl AttemptReport {
    /// The log entry of attempt `number`, from `start` to `end`, that succeeded `overran`
    /// past its cut: nothing else to say of it.
    pub(crate) fn overran(number: u32, start: Duration, end: Duration, overran: Duration) -> Self {
        AttemptReport {
            number,
            start,
            end,
            permit_wait: Duration::ZERO,
            rate_limit_wait: Duration::ZERO,
            delay_before: Duration::ZERO,
            error: None,
            injected_latency: Duration::ZERO,
            injected_error: false,
            hedge: false,
            cancelled: false,
            overran,
        }
    }
}

/// The attempt whose value a series has, from its attempt `log`: its successful entry, or
/// attempt 1 when `succeeded` with an empty log, as when a first attempt succeeded at once.
pub(crate) fn winner(log: &[AttemptReport], succeeded: bool) -> Option<u32> {
    if !succeeded {
        return None;
    }
    if log.is_empty() {
        return Some(1);
    }
    log.iter()
        .rev()
        .find(|a| a.error.is_none() && !a.cancelled)
        .map(|a| a.number)
}
