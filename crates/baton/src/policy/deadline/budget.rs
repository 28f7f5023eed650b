//! A deadline that crosses a service hop: the time left, in the two wire formats peers
//! use, and the error a downstream answers when it ran out.
//!
//! Only durations cross the wire, never instants: the receiver adds what it was given to
//! its own clock, so the two clocks need not agree. The formats:
//!
//! - `grpc-timeout`: 1 to 8 ASCII digits and a unit, as gRPC sends it over HTTP/2. The
//!   unit is `H` for hours, `M` for minutes, `S` for seconds, `m` for milliseconds, `u`
//!   for microseconds or `n` for nanoseconds;
//! - a plain header in whole milliseconds, as Envoy's `x-envoy-expected-rq-timeout-ms`
//!   carries.

use std::fmt;
use std::time::Duration;

/// The time left for a call to a downstream, to send with the request so that the
/// downstream stops when the caller stops waiting. From
/// [`Ctx::budget`](crate::Ctx::budget) or [`Attempt::budget`](crate::pipeline::Attempt::budget),
/// already less the margin asked for.
///
/// ```
/// use std::time::Duration;
/// use baton_graph::deadline::Budget;
///
/// let left = Budget::new(Duration::from_millis(250));
/// assert_eq!(left.grpc_timeout(), "250000u");
/// assert_eq!(left.millis(), "250");
/// assert_eq!(Budget::parse_grpc_timeout("250m"), Some(Duration::from_millis(250)));
/// assert_eq!(Budget::parse_millis("250"), Some(Duration::from_millis(250)));
/// assert_eq!(Budget::parse_grpc_timeout("123456789m"), None); // 9 digits
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Budget {
    left: Duration,
}

/// The `grpc-timeout` units, finest first, with their length in nanoseconds.
const UNITS: [(char, u128); 6] = [
    ('n', 1),
    ('u', 1_000),
    ('m', 1_000_000),
    ('S', 1_000_000_000),
    ('M', 60_000_000_000),
    ('H', 3_600_000_000_000),
];

/// The largest value of `grpc-timeout`: 8 digits.
const MAX_GRPC_DIGITS: u128 = 99_999_999;

impl Budget {
    /// A budget of `left`.
    #[must_use]
    pub fn new(left: Duration) -> Self {
        Budget { left }
    }

    /// The time left.
    #[must_use]
    pub fn left(&self) -> Duration {
        self.left
    }

    /// Whether no time is left: a downstream given this budget answers at once.
    #[must_use]
    pub fn is_expired(&self) -> bool {
        self.left.is_zero()
    }

    /// The budget as a `grpc-timeout` value: the finest unit in which it fits in 8 digits,
    /// rounded down, so a downstream is never promised more than the caller has. A budget
    /// longer than 99 999 999 hours is sent as that.
    #[must_use]
    pub fn grpc_timeout(&self) -> String {
        let nanos = self.left.as_nanos();
        for (unit, size) in UNITS {
            let value = nanos / size;
            if value <= MAX_GRPC_DIGITS {
                return format!("{value}{unit}");
            }
        }
        format!("{MAX_GRPC_DIGITS}H")
    }

    /// The budget in whole milliseconds, rounded down.
    #[must_use]
    pub fn millis(&self) -> String {
        self.left.as_millis().to_string()
    }

    /// Reads a `grpc-timeout` value: `None` when it is not 1 to 8 ASCII digits followed by
    /// one of the units `H M S m u n`.
    #[must_use]
    pub fn parse_grpc_timeout(value: &str) -> Option<Duration> {
        let unit = value.chars().last()?;
        let digits = &value[..value.len() - unit.len_utf8()];
        if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let n: u64 = digits.parse().ok()?;
        let (_, size) = UNITS.iter().find(|(u, _)| *u == unit)?;
        let nanos = u128::from(n) * size;
        let secs = u64::try_from(nanos / 1_000_000_000).ok()?;
        // The remainder is below 10^9: it fits in a `u32`.
        let sub = u32::try_from(nanos % 1_000_000_000).ok()?;
        Some(Duration::new(secs, sub))
    }

    /// Reads a budget in whole milliseconds: `None` when it is not 1 to 19 ASCII digits.
    #[must_use]
    pub fn parse_millis(value: &str) -> Option<Duration> {
        let value = value.trim();
        if value.is_empty() || value.len() > 19 || !value.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        value.parse::<u64>().ok().map(Duration::from_millis)
    }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ms left", self.left.as_millis())
    }
}

/// A downstream answered that the caller's deadline had passed, with HTTP 504 or gRPC
/// status `DEADLINE_EXCEEDED`. The time is gone, so a retry could only fail the same way.
/// A task that returns it, as its error or as the source of its error, is never retried,
/// whatever the retry predicate says.
///
/// ```
/// use baton_graph::{BoxError, Graph, Retry, deadline::DownstreamDeadlineExceeded};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), BoxError> {
/// let mut g = Graph::<()>::builder();
/// let stock = g.node("stock").retry(Retry::new(3)).task(|_ctx, ()| async {
///     Err::<u32, _>(DownstreamDeadlineExceeded::new("stock answered 504"))
/// });
/// let report = g.build()?.run(()).await?;
/// assert_eq!(report.node(stock).map(|n| n.attempts()), Some(1)); // not retried
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the downstream's deadline passed: {what}")]
pub struct DownstreamDeadlineExceeded {
    what: String,
}

impl DownstreamDeadlineExceeded {
    /// The error, with what the downstream answered, such as `"stock answered 504"`.
    #[must_use]
    pub fn new(what: impl Into<String>) -> Self {
        DownstreamDeadlineExceeded { what: what.into() }
    }

    /// What the downstream answered.
    #[must_use]
    pub fn what(&self) -> &str {
        &self.what
    }

    /// Whether an answer says the deadline passed: HTTP status 504, or a `grpc-status`
    /// of 4, which is `DEADLINE_EXCEEDED`.
    #[must_use]
    pub fn is_expired_answer(http_status: u16, grpc_status: Option<&str>) -> bool {
        http_status == 504 || grpc_status.is_some_and(|s| s.trim() == "4")
    }

    /// Whether `error` is this error, or has it as a source.
    #[must_use]
    pub fn is_in(error: &(dyn std::error::Error + 'static)) -> bool {
        let mut next = Some(error);
        while let Some(e) = next {
            if e.is::<DownstreamDeadlineExceeded>() {
                return true;
            }
            next = e.source();
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_round_trip_in_the_finest_unit_that_fits() {
        let cases = [
            (Duration::ZERO, "0n"),
            (Duration::from_nanos(99_999_999), "99999999n"),
            (Duration::from_millis(100), "100000u"),
            (Duration::from_secs(5), "5000000u"),
            (Duration::from_secs(200_000), "200000S"),
        ];
        for (left, wire) in &cases[..4] {
            assert_eq!(Budget::new(*left).grpc_timeout(), *wire);
            assert_eq!(Budget::parse_grpc_timeout(wire), Some(*left));
        }
        assert_eq!(
            Budget::new(Duration::from_secs(6_000_000_000)).grpc_timeout(),
            "1666666H"
        );
        assert_eq!(Budget::new(Duration::MAX).grpc_timeout(), "99999999H");
        for bad in ["", "m", "12", "1x", "123456789m", "-1m", "1.5S", "１m"] {
            assert_eq!(Budget::parse_grpc_timeout(bad), None, "{bad:?}");
        }
        assert_eq!(
            Budget::parse_grpc_timeout("99999999H"),
            Some(Duration::from_secs(99_999_999 * 3600))
        );
    }

    #[test]
    fn millis_are_whole_and_rounded_down() {
        assert_eq!(Budget::new(Duration::from_micros(2_999)).millis(), "2");
        assert_eq!(Budget::parse_millis("15"), Some(Duration::from_millis(15)));
        for bad in ["", "-3", "1.5", "abc", "99999999999999999999"] {
            assert_eq!(Budget::parse_millis(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn an_expired_answer_is_504_or_grpc_deadline_exceeded() {
        assert!(DownstreamDeadlineExceeded::is_expired_answer(504, None));
        assert!(DownstreamDeadlineExceeded::is_expired_answer(
            200,
            Some("4")
        ));
        assert!(!DownstreamDeadlineExceeded::is_expired_answer(
            503,
            Some("14")
        ));
        let wrapped: Box<dyn std::error::Error + Send + Sync> =
            Box::new(DownstreamDeadlineExceeded::new("504"));
        assert!(DownstreamDeadlineExceeded::is_in(wrapped.as_ref()));
    }
}
