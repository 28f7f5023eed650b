//! A timeout that costs nothing until it is needed: the inner future is polled first, and
//! the timer is only created (and registered with tokio's timer) when the inner future is not
//! ready at once. An attempt that completes on its first poll — the common case on the
//! success path — never touches the timer.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::time::{Instant, Sleep};

pin_project_lite::pin_project! {
    /// Resolves to `Some(output)`, or `None` when `until` passed first.
    pub(crate) struct Deadline<F> {
        #[pin]
        fut: F,
        until: Instant,
        #[pin]
        sleep: Option<Sleep>,
    }
}

impl<F> Deadline<F> {
    pub(crate) fn new(fut: F, until: Instant) -> Self {
        Deadline {
            fut,
            until,
            sleep: None,
        }
    }
}

impl<F: Future> Future for Deadline<F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Poll::Ready(out) = this.fut.poll(cx) {
            return Poll::Ready(Some(out));
        }
        if this.sleep.is_none() {
            this.sleep.set(Some(tokio::time::sleep_until(*this.until)));
        }
        match this.sleep.as_pin_mut() {
            Some(sleep) => match sleep.poll(cx) {
                Poll::Ready(()) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            },
            None => Poll::Pending,
        }
    }
}
