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

/// The share of an attempt's time within which a timer running before a later attempt's
/// cut may stand for that attempt's own: see [`reach`].
pub(crate) const EARLY_TIMER_SHARE: u32 = 64;

/// The latest cut a timer at `at`, made for an attempt given `time`, may stand for: one
/// 1/[`EARLY_TIMER_SHARE`] of `time` after it; `None` when that is past any instant.
///
/// A later attempt with a cut no later than that, and not earlier than `at`, may wait
/// under the timer: it wakes that attempt's task early at most once, when the attempt has
/// nearly spent its time (attempts are given the same time, as a node's are), and is then
/// moved to the cut. A timer earlier still would wake the task while the attempt runs, and
/// tokio's time driver with it, for nothing: it is better taken out of tokio's wheel and
/// made again at the cut. Moving it later with `Sleep::reset` would not do: a timer moved
/// later stays in its wheel slot, and the time driver wakes at that slot.
#[inline]
pub(crate) fn reach(at: Instant, time: Duration) -> Option<Instant> {
    at.checked_add(time / EARLY_TIMER_SHARE)
}

pin_project_lite::pin_project! {
    /// A [`KeptTimer`]'s allocation.
    #[derive(Debug)]
    struct Kept {
        #[pin]
        sleep: Option<Sleep>,
        // The latest cut it stands for: see `reach`.
        reach: Option<Instant>,
        // The waker it is registered with, until it is set or cleared.
        registered: Registered,
        // Kept for the code that shares the timer; see `KeptTimer::sharers`.
        sharers: Sharers,
    }
}

/// Two counters a [`KeptTimer`] keeps in its allocation for code that shares the timer
/// between several waiters: how often the timer was moved later, and how many waiters
/// count on it. The timer never reads them; they are zero in a new timer's allocation, and
/// again once the timer is cleared.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sharers {
    pub(crate) moves: u32,
    pub(crate) armed: u32,
}

/// A timer kept from one attempt to the next, whose allocation outlives it: made again,
/// it is written over the old one, which is taken out of tokio's wheel.
#[derive(Debug, Default)]
pub(crate) struct KeptTimer(Option<Pin<Box<Kept>>>);

impl KeptTimer {
    /// No timer; allocates nothing.
    pub(crate) const fn new() -> Self {
        KeptTimer(None)
    }

    /// Whether its allocation is made.
    pub(crate) fn is_made(&self) -> bool {
        self.0.is_some()
    }

    /// The timer, if one is made.
    pub(crate) fn get(&self) -> Option<&Sleep> {
        self.0.as_ref()?.sleep.as_ref()
    }

    /// Whether the timer runs and may stand for one at `until`: it is set no later than
    /// `until`, and `until` is within its [`reach`].
    #[inline]
    pub(crate) fn stands_for(&self, until: Instant) -> bool {
        let Some(kept) = &self.0 else {
            return false;
        };
        let Some(sleep) = &kept.sleep else {
            return false;
        };
        sleep.deadline() <= until
            && kept.reach.is_none_or(|reach| until <= reach)
            && !sleep.is_elapsed()
    }

    /// Whether a timer was set, and not cleared since, whose [`reach`] takes in `until`: it
    /// was set at `until` or later, or a little earlier; it may have elapsed since.
    pub(crate) fn reaches(&self, until: Instant) -> bool {
        self.0.as_ref().is_some_and(|kept| {
            kept.sleep.is_some() && kept.reach.is_none_or(|reach| until <= reach)
        })
    }

    /// Sets the timer for `until`, the cut of an attempt given `time`: moved with
    /// `Sleep::reset` when it elapsed or runs later, else made in place of the old one,
    /// which takes that one out of tokio's wheel. A new one is not registered until polled;
    /// a moved one may keep the waker it had, but is not known to be registered.
    pub(crate) fn set(&mut self, until: Instant, time: Duration) -> Pin<&mut Sleep> {
        let kept = self.0.get_or_insert_with(|| {
            Box::pin(Kept {
                sleep: None,
                reach: None,
                registered: Registered::NONE,
                sharers: Sharers::default(),
            })
        });
        let mut kept = kept.as_mut().project();
        *kept.reach = reach(until, time);
        *kept.registered = Registered::NONE;
        match kept.sleep.as_mut().as_pin_mut() {
            Some(sleep) if sleep.is_elapsed() || sleep.deadline() > until => sleep.reset(until),
            _ => kept.sleep.set(Some(tokio::time::sleep_until(until))),
        }
        match kept.sleep.as_pin_mut() {
            Some(sleep) => sleep,
            None => unreachable!("a timer was just set"),
        }
    }

    /// Drops the timer, taking it out of tokio's wheel; the allocation is kept. It then
    /// stands for and reaches nothing, and its [`Sharers`] are zero, as a new one's.
    pub(crate) fn clear(&mut self) {
        if let Some(kept) = &mut self.0 {
            let mut kept = kept.as_mut().project();
            kept.sleep.set(None);
            *kept.registered = Registered::NONE;
            *kept.sharers = Sharers::default();
        }
    }

    /// Lets a running timer stand for the timers of later attempts once whoever set it is
    /// gone: registered with a waker that does nothing, so that it holds no task, with its
    /// [`Sharers`] zeroed. Returns whether it runs. A timer never set or elapsed is cleared
    /// instead, without a poll; so is one that tokio refuses to poll, as it does, by
    /// panicking, while its runtime shuts down: only in a race with that shutdown, which
    /// fires every timer registered, since an elapsed one is not polled. So a timer is to
    /// be polled, and so registered, right after it is set, as its callers do. The panic
    /// is caught, after the panic hook ran; with `panic = "abort"` it aborts.
    pub(crate) fn stand(&mut self) -> bool {
        let running = self.0.as_mut().is_some_and(|kept| {
            let kept = kept.as_mut().project();
            *kept.sharers = Sharers::default();
            let (Some(sleep), registered) = (kept.sleep.as_pin_mut(), kept.registered) else {
                return false;
            };
            if sleep.is_elapsed() {
                return false;
            }
            let noop = &mut Context::from_waker(std::task::Waker::noop());
            let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                registered.poll(sleep, noop)
            }));
            polled.is_ok_and(|polled| polled.is_pending())
        });
        if !running {
            self.clear();
        }
        running
    }

    /// The counters kept for the code that shares the timer, once the timer's allocation
    /// is made: see [`Sharers`].
    #[inline]
    pub(crate) fn sharers(&mut self) -> Option<&mut Sharers> {
        Some(self.0.as_mut()?.as_mut().project().sharers)
    }

    /// Polls the timer as [`Registered::poll`] does; `None` when no timer is made.
    #[inline]
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Option<Poll<()>> {
        let kept = self.0.as_mut()?.as_mut().project();
        let sleep = kept.sleep.as_pin_mut()?;
        Some(kept.registered.poll(sleep, cx))
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
    /// touches a timer. The timer is polled outside tokio's coop budget, and not again with
    /// the waker it is registered with, through [`Registered::poll`].
    pub(crate) struct Deadline<'a, F> {
        #[pin]
        fut: F,
        until: Instant,
        #[pin]
        sleep: Option<Sleep>,
        registered: Registered,
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
            registered: Registered::NONE,
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
            registered: self.registered,
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
            Some(sleep) => match this.registered.poll(sleep, cx) {
                Poll::Ready(()) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            },
            None => Poll::Pending,
        }
    }
}

/// The waker a timer is known to be registered with: the one its last poll returned
/// `Pending` with, as the addresses of its data and vtable, which are only compared. A
/// future that returns `Pending` wakes the waker of its last poll when it is ready, so
/// tokio holds a clone of it, which keeps those addresses its own, until the timer fires,
/// is dropped, or is polled with another waker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Registered(Option<(usize, usize)>);

impl Registered {
    /// Not known to be registered: a timer just made, set or moved, or never polled.
    pub(crate) const NONE: Self = Registered(None);

    /// Polls `sleep` outside tokio's coop budget, through [`poll_timer`], unless it is
    /// registered with a waker that wakes the same task as `cx`'s
    /// ([`Waker::will_wake`](std::task::Waker::will_wake)) and has not elapsed: then it
    /// returns `Pending` without a poll, which would only find that waker there. `self`
    /// must be [`NONE`](Self::NONE) whenever `sleep` is made, moved or polled elsewhere.
    ///
    /// Built with `--cfg tokio_unstable`, it always polls: there a task dump polls a timer
    /// without registering the waker, and tokio may run another timer implementation.
    #[inline]
    pub(crate) fn poll(&mut self, sleep: Pin<&mut Sleep>, cx: &mut Context<'_>) -> Poll<()> {
        let waker = cx.waker();
        let with = Some((
            waker.data().addr(),
            std::ptr::from_ref(waker.vtable()).addr(),
        ));
        if !cfg!(tokio_unstable) && self.0 == with && !sleep.is_elapsed() {
            return Poll::Pending;
        }
        let polled = poll_timer(sleep, cx);
        self.0 = if polled.is_pending() { with } else { None };
        polled
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

    /// A timer stands for later cuts within 1/64 of its attempt's time after it, and for
    /// none before it; one that elapsed stands for none.
    #[tokio::test(start_paused = true)]
    async fn a_kept_timer_stands_for_cuts_within_its_reach() {
        let start = Instant::now();
        let mut timer = KeptTimer::new();
        assert!(!timer.stands_for(start) && !timer.reaches(start));
        let noop = &mut Context::from_waker(std::task::Waker::noop());
        assert!(poll_timer(timer.set(start + ms(640), ms(640)), noop).is_pending());
        assert!(timer.stands_for(start + ms(640)), "its own cut");
        assert!(timer.stands_for(start + ms(650)), "1/64 of 640 ms after");
        assert!(!timer.stands_for(start + ms(651)));
        assert!(!timer.stands_for(start + ms(639)), "an earlier cut");
        assert!(timer.reaches(start + ms(639)) && timer.reaches(start + ms(650)));
        assert!(!timer.reaches(start + ms(651)));
        tokio::time::sleep(ms(640)).await;
        assert!(!timer.stands_for(start + ms(645)), "elapsed");
    }

    /// Waits for `timer` to elapse.
    async fn kept_timer_elapsed(timer: &mut KeptTimer) {
        std::future::poll_fn(|cx| timer.poll(cx).unwrap_or(Poll::Ready(()))).await;
    }

    /// A waker that counts its wake-ups.
    struct Counting(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Counting {
        fn wake(self: std::sync::Arc<Self>) {
            self.wake_by_ref();
        }

        fn wake_by_ref(self: &std::sync::Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// A kept timer polled again with the waker it registered stays registered with it,
    /// and is found elapsed once it fires; polled with another waker, it wakes that one.
    #[tokio::test(start_paused = true)]
    async fn a_kept_timer_wakes_the_waker_it_was_last_polled_with() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        use std::task::Waker;
        let start = Instant::now();
        let (a, b) = (
            Arc::new(Counting(AtomicUsize::new(0))),
            Arc::new(Counting(AtomicUsize::new(0))),
        );
        let (wake_a, wake_b) = (Waker::from(a.clone()), Waker::from(b.clone()));
        let poll =
            |timer: &mut KeptTimer, waker: &Waker| timer.poll(&mut Context::from_waker(waker));
        let mut timer = KeptTimer::new();
        assert_eq!(poll(&mut timer, &wake_a), None, "no timer");
        assert_eq!(timer.set(start + ms(10), ms(10)).deadline(), start + ms(10));
        assert_eq!(poll(&mut timer, &wake_a), Some(Poll::Pending));
        assert_eq!(poll(&mut timer, &wake_a), Some(Poll::Pending));
        tokio::time::sleep(ms(10)).await;
        assert_eq!(a.0.load(SeqCst), 1, "woken at its instant");
        assert_eq!(
            poll(&mut timer, &wake_a),
            Some(Poll::Ready(())),
            "found elapsed"
        );
        assert_eq!(timer.set(start + ms(20), ms(10)).deadline(), start + ms(20));
        assert_eq!(poll(&mut timer, &wake_a), Some(Poll::Pending));
        assert_eq!(poll(&mut timer, &wake_b), Some(Poll::Pending));
        assert_eq!(poll(&mut timer, &wake_b), Some(Poll::Pending));
        tokio::time::sleep(ms(10)).await;
        assert_eq!(
            (a.0.load(SeqCst), b.0.load(SeqCst)),
            (1, 1),
            "the last waker woken"
        );
        assert_eq!(poll(&mut timer, &wake_b), Some(Poll::Ready(())));
        assert_eq!(timer.set(start + ms(30), ms(10)).deadline(), start + ms(30));
        assert_eq!(
            poll(&mut timer, &wake_b),
            Some(Poll::Pending),
            "set again: polled"
        );
        timer.clear();
        assert_eq!(poll(&mut timer, &wake_b), None, "cleared");
    }

    /// A kept timer set later than it runs is made again in place, and fires at its new
    /// instant, not at the old one; set earlier, or after it elapsed, it is moved. Cleared,
    /// it has no timer. The allocation is the same throughout.
    #[tokio::test(start_paused = true)]
    async fn a_kept_timer_set_again_replaces_or_moves_the_old_one() {
        let start = Instant::now();
        let mut timer = KeptTimer::new();
        let noop = &mut Context::from_waker(std::task::Waker::noop());
        assert!(poll_timer(timer.set(start + ms(10), ms(10)), noop).is_pending());
        let kept: *const Kept = timer.0.as_deref().expect("set");
        assert!(poll_timer(timer.set(start + ms(30), ms(10)), noop).is_pending());
        tokio::time::sleep(ms(20)).await;
        assert!(
            timer.get().is_some_and(|t| !t.is_elapsed()),
            "fired at the old instant"
        );
        assert!(poll_timer(timer.set(start + ms(25), ms(10)), noop).is_pending());
        kept_timer_elapsed(&mut timer).await;
        assert_eq!(start.elapsed(), ms(25), "moved earlier");
        assert!(poll_timer(timer.set(start + ms(40), ms(10)), noop).is_pending());
        kept_timer_elapsed(&mut timer).await;
        assert_eq!(start.elapsed(), ms(40), "moved after it elapsed");
        assert_eq!(timer.0.as_deref().map(std::ptr::from_ref), Some(kept));
        timer.clear();
        assert!(timer.get().is_none());
    }

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
