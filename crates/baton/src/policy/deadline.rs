//! A timeout that costs nothing until it is needed: the inner future is polled first, and
//! the timer is only created (and registered with tokio's timer) when the inner future is not
//! ready at once. An attempt that completes on its first poll — the common case on the
//! success path — never touches the timer. The timer is polled outside tokio's coop budget
//! ([`poll_timer`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::time::{Instant, Sleep};

use crate::run::RunCore;

pin_project_lite::pin_project! {
    /// Resolves to `Some(output)`, or `None` when `until` passed first.
    pub(crate) struct Deadline<'a, F> {
        #[pin]
        fut: F,
        until: Instant,
        #[pin]
        sleep: Option<Sleep>,
        // The run whose timer floor is set before the timer is made, if any.
        floor: Option<&'a RunCore>,
    }
}

impl<F> Deadline<'static, F> {
    pub(crate) fn new(fut: F, until: Instant) -> Self {
        Deadline {
            fut,
            until,
            sleep: None,
            floor: None,
        }
    }
}

impl<'a, F> Deadline<'a, F> {
    /// Sets `run`'s timer floor ([`RunCore::floor_timers`]) before making the timer.
    pub(crate) fn with_floor(self, run: &'a RunCore) -> Deadline<'a, F> {
        Deadline {
            fut: self.fut,
            until: self.until,
            sleep: self.sleep,
            floor: Some(run),
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
            if let Some(run) = this.floor {
                run.floor_timers(*this.until);
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

/// Polls an attempt's timer outside tokio's coop budget, as tokio's `Timeout` polls its
/// delay when the future it wraps spent the budget: an attempt that spends the budget at
/// every poll (and wakes its task) would otherwise keep its timer from ever being
/// registered, and never be cut. Used by [`Deadline`] and the scheduler's fast path.
pub(crate) fn poll_timer(sleep: Pin<&mut Sleep>, cx: &mut Context<'_>) -> Poll<()> {
    std::pin::pin!(tokio::task::unconstrained(sleep)).poll(cx)
}
