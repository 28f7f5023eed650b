//! One deadline, everything derived from it.
//!
//! An attempt's deadline is the earliest of the run's deadline and the end of the node's
//! budget, counted from the node's start. From it:
//!
//! - the attempt's **cut**: the earlier of its per-attempt timeout and the deadline;
//! - the **backoff** before the next attempt:
//!   `min(computed, time left − minimum attempt time)`, so that the attempt after it still
//!   fits;
//! - the **minimum attempt time**: a first attempt does not start with less than it left.
//!   A retry's backoff is sized to leave it that much, but a timer fires up to a tick late,
//!   so a retry starts with whatever is left above zero. A retry that starts with less than
//!   the minimum left, or after a clipped backoff, is the series' last, so a budget never
//!   turns into a loop of attempts with no wait between them.
//!
//! These are pure functions of instants and durations, shared by the scheduler's fast path
//! and the onion. [`Deadline`] enforces a cut: a timeout that costs nothing until the
//! future it wraps first waits.

pub(crate) mod budget;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// The default minimum time an attempt needs: no attempt starts with less than this left
/// before its deadline.
pub const DEFAULT_MIN_ATTEMPT_TIME: Duration = Duration::from_millis(10);

/// The earlier of two optional instants, where `None` is "no limit".
#[inline]
pub(crate) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A node's deadline: the earlier of the run's and the end of its `budget`, counted from
/// `started`. A budget too large for an instant, such as `Duration::MAX`, is no budget.
#[inline]
pub(crate) fn node_deadline(
    run_deadline: Option<Instant>,
    budget: Option<Duration>,
    started: Instant,
) -> Option<Instant> {
    match (run_deadline, budget) {
        (None, None) => None,
        (run_deadline, budget) => {
            earliest(run_deadline, budget.and_then(|b| started.checked_add(b)))
        }
    }
}

/// Whether an attempt starting at `now` would have less than `min_attempt` left before
/// `deadline`: then it does not start.
#[inline]
pub(crate) fn too_late(deadline: Option<Instant>, now: Instant, min_attempt: Duration) -> bool {
    deadline.is_some_and(|d| d.saturating_duration_since(now) < min_attempt)
}

/// A backoff after [`clip_backoff`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backoff {
    /// The wait.
    pub(crate) delay: Duration,
    /// The deadline cut it short: the attempt after it is the last.
    pub(crate) clipped: bool,
}

/// The backoff `delay` clipped so that an attempt of `min_attempt` still fits before
/// `deadline` when it ends: `min(delay, time left − min_attempt)`. `None` when less than
/// `min_attempt` is left at `now`: no attempt fits any more.
#[inline]
pub(crate) fn clip_backoff(
    delay: Duration,
    deadline: Option<Instant>,
    now: Instant,
    min_attempt: Duration,
) -> Option<Backoff> {
    let Some(deadline) = deadline else {
        return Some(Backoff {
            delay,
            clipped: false,
        });
    };
    let left = deadline.saturating_duration_since(now);
    let room = left.checked_sub(min_attempt)?;
    Some(Backoff {
        delay: delay.min(room),
        clipped: delay > room,
    })
}

/// Whether an attempt may start at `now`: with at least `min_attempt` left before
/// `deadline`. The attempt a clipped backoff made room for, flagged by `after_clip`, may
/// start with any time left at all.
#[inline]
pub(crate) fn may_start(
    deadline: Option<Instant>,
    now: Instant,
    min_attempt: Duration,
    after_clip: bool,
) -> bool {
    match deadline {
        None => true,
        Some(_) if !after_clip => !too_late(deadline, now, min_attempt),
        Some(d) => d > now,
    }
}

/// When an attempt is cut, and whether by the deadline rather than its own timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cut {
    /// The instant the attempt is cut at; `None` when nothing cuts it.
    pub(crate) until: Option<Instant>,
    /// The deadline, not the per-attempt timeout, is what cuts it.
    pub(crate) by_deadline: bool,
}

impl Cut {
    /// The cut of an attempt starting at `now` with per-attempt `timeout`, under
    /// `deadline`: the earlier of the two.
    #[inline]
    pub(crate) fn new(timeout: Option<Duration>, now: Instant, deadline: Option<Instant>) -> Self {
        let by_timeout = timeout.and_then(|t| now.checked_add(t));
        Cut {
            until: earliest(by_timeout, deadline),
            by_deadline: match (by_timeout, deadline) {
                (Some(t), Some(d)) => d < t,
                (None, Some(_)) => true,
                _ => false,
            },
        }
    }
}

/// Told when a [`Deadline`] makes its timer, just before: the engine registers its run's
/// timer floor there.
pub(crate) trait TimerHook: Sync {
    /// A timer for `until` is about to be made.
    fn timer_made(&self, until: Instant);
}

pin_project_lite::pin_project! {
    /// Resolves to `Some(output)`, or `None` when `until` passed first.
    ///
    /// The inner future is polled first, and the timer is made and registered with tokio's
    /// only when it is not ready at once: an attempt that completes on its first poll never
    /// touches a timer. The timer is polled outside tokio's coop budget, with
    /// [`poll_timer`].
    pub(crate) struct Deadline<'a, F> {
        #[pin]
        fut: F,
        until: Instant,
        #[pin]
        sleep: Option<Sleep>,
        hook: Option<&'a dyn TimerHook>,
    }
}

impl<F> Deadline<'static, F> {
    /// `fut`, cut at `until`.
    pub(crate) fn new(fut: F, until: Instant) -> Self {
        Deadline {
            fut,
            until,
            sleep: None,
            hook: None,
        }
    }
}

impl<'a, F> Deadline<'a, F> {
    /// Tells `hook` before the timer is made.
    pub(crate) fn with_hook(self, hook: Option<&'a dyn TimerHook>) -> Deadline<'a, F> {
        Deadline {
            fut: self.fut,
            until: self.until,
            sleep: self.sleep,
            hook,
        }
    }
}

impl<F: Future> Future for Deadline<'_, F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Poll::Ready(out) = this.fut.poll(cx) {
            return Poll::Ready(Some(out));
        }
        if this.sleep.is_none() {
            if let Some(hook) = this.hook {
                hook.timer_made(*this.until);
            }
            this.sleep.set(Some(tokio::time::sleep_until(*this.until)));
        }
        match this.sleep.as_pin_mut() {
            Some(sleep) => match poll_timer(sleep, cx) {
                Poll::Ready(()) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            },
            None => Poll::Pending,
        }
    }
}

/// Polls a timer outside tokio's coop budget, as tokio's `Timeout` polls its delay when the
/// future it wraps spent the budget. Otherwise an attempt that spends the budget at every
/// poll and wakes its task would keep its timer from ever being registered, and never be
/// cut. Used by [`Deadline`] and the scheduler's fast path.
pub(crate) fn poll_timer(sleep: Pin<&mut Sleep>, cx: &mut Context<'_>) -> Poll<()> {
    std::pin::pin!(tokio::task::unconstrained(sleep)).poll(cx)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::util::ms;

    #[test]
    fn the_earliest_deadline_applies_and_an_unrepresentable_budget_is_none() {
        let t = Instant::now();
        assert_eq!(node_deadline(None, None, t), None);
        assert_eq!(node_deadline(None, Some(ms(5)), t), Some(t + ms(5)));
        assert_eq!(
            node_deadline(Some(t + ms(3)), Some(ms(5)), t),
            Some(t + ms(3))
        );
        assert_eq!(
            node_deadline(Some(t + ms(9)), Some(ms(5)), t),
            Some(t + ms(5))
        );
        assert_eq!(node_deadline(None, Some(Duration::MAX), t), None);
    }

    #[test]
    fn a_cut_is_the_earlier_of_timeout_and_deadline() {
        let t = Instant::now();
        let by_timeout = Cut::new(Some(ms(5)), t, Some(t + ms(9)));
        assert_eq!(
            (by_timeout.until, by_timeout.by_deadline),
            (Some(t + ms(5)), false)
        );
        let by_deadline = Cut::new(Some(ms(5)), t, Some(t + ms(3)));
        assert_eq!(
            (by_deadline.until, by_deadline.by_deadline),
            (Some(t + ms(3)), true)
        );
        assert!(Cut::new(None, t, Some(t + ms(3))).by_deadline);
        assert_eq!(Cut::new(None, t, None).until, None);
        assert_eq!(Cut::new(Some(Duration::MAX), t, None).until, None);
    }

    #[test]
    fn a_backoff_leaves_room_for_one_minimum_attempt() {
        let t = Instant::now();
        let d = Some(t + ms(100));
        let waits = |delay, clipped| Some(Backoff { delay, clipped });
        assert_eq!(clip_backoff(ms(50), d, t, ms(10)), waits(ms(50), false));
        assert_eq!(clip_backoff(ms(90), d, t, ms(10)), waits(ms(90), false));
        assert_eq!(clip_backoff(ms(500), d, t, ms(10)), waits(ms(90), true));
        assert_eq!(
            clip_backoff(ms(500), d, t + ms(90), ms(10)),
            waits(ms(0), true)
        );
        assert_eq!(
            clip_backoff(ms(0), d, t + ms(90), ms(10)),
            waits(ms(0), false)
        );
        assert_eq!(clip_backoff(ms(500), d, t + ms(95), ms(10)), None);
        assert_eq!(
            clip_backoff(ms(500), None, t, ms(10)),
            waits(ms(500), false)
        );
        assert!(!too_late(d, t + ms(90), ms(10)));
        assert!(too_late(d, t + ms(91), ms(10)));
        assert!(!too_late(None, t, ms(10)));
    }

    #[test]
    fn the_attempt_after_a_clipped_backoff_starts_with_any_time_left() {
        let t = Instant::now();
        let d = Some(t + ms(100));
        // A timer that fired a tick late leaves less than the minimum: it still starts.
        assert!(may_start(d, t + ms(91), ms(10), true));
        assert!(!may_start(d, t + ms(91), ms(10), false));
        assert!(may_start(d, t + ms(99), ms(10), true));
        assert!(!may_start(d, t + ms(100), ms(10), true), "nothing left");
        assert!(may_start(None, t, ms(10), false));
    }
}
