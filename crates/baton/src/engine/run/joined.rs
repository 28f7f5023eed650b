//! The drivers an inline run polls in its own future: those it "spawned" while it had not
//! spread: nodes that wait, and the nodes that run after them in the same driver.
//!
//! The first [`POLLED_TOGETHER`] of them are held in a list and polled with the run's
//! waker, every one at each wake-up of the run, as `tokio::join!` polls its futures: no
//! allocation per driver, no waker of its own, no list of those woken to keep. A driver not
//! woken is then polled for nothing, which a future allows, and which costs less than
//! keeping track, for a few drivers. Past them, drivers go to a `FuturesUnordered`, which
//! gives each its own waker and keeps the list of those woken, so a wake-up polls them and
//! no other, however many wait.

use std::future::Future;
use std::pin::Pin;
use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use futures_util::stream::{FuturesUnordered, StreamExt};

use super::state::RunState;
use crate::engine::driver::Driver;

/// The most drivers an inline run's future polls together at each wake-up, as
/// `tokio::join!` polls its futures; past them, drivers join a set that polls only those
/// woken.
pub(super) const POLLED_TOGETHER: usize = 8;

/// See the module docs.
pub(super) struct Joined<I> {
    /// Up to [`POLLED_TOGETHER`] drivers, polled together.
    few: Vec<Driver<I>>,
    /// The drivers past them, each woken on its own. Made when first needed.
    set: Option<FuturesUnordered<Driver<I>>>,
}

impl<I: Send + Sync + 'static> Joined<I> {
    /// None yet; allocates nothing.
    pub(super) fn new() -> Self {
        Joined {
            few: Vec::new(),
            set: None,
        }
    }

    /// Whether no driver is held.
    pub(super) fn is_empty(&self) -> bool {
        self.few.is_empty() && self.set.as_ref().is_none_or(FuturesUnordered::is_empty)
    }

    /// Every driver held, leaving none.
    pub(super) fn take_all(&mut self) -> impl Iterator<Item = Driver<I>> {
        let few = std::mem::take(&mut self.few);
        let set = self.set.take();
        few.into_iter().chain(set.into_iter().flatten())
    }

    /// Polls the drivers held: the few polled together, and those of the set woken since
    /// their last poll. It first takes in the ones spawned since, from `run`'s inbox, and
    /// again while polling them spawned more. Those are polled at once, as a spawned task
    /// would be; the others are not polled twice in one call.
    pub(super) fn poll(&mut self, run: &RunState<I>, cx: &mut Context<'_>) {
        let mut from = 0;
        loop {
            if run.inboxed.load(Ordering::Relaxed) {
                run.inboxed.store(false, Ordering::Relaxed);
                self.take_inbox(run);
            }
            // A driver that ends leaves its place to the last one, not yet polled here.
            let mut at = from;
            while at < self.few.len() {
                if Pin::new(&mut self.few[at]).poll(cx).is_ready() {
                    self.few.swap_remove(at);
                } else {
                    at += 1;
                }
            }
            from = self.few.len();
            if let Some(set) = self.set.as_mut().filter(|set| !set.is_empty()) {
                // Each driver returns when it ends; the set returns `Pending` once none of
                // those woken is left, or it gives the task's turn back after polling each once.
                while let Poll::Ready(Some(())) = set.poll_next_unpin(cx) {}
            }
            if !run.inboxed.load(Ordering::Relaxed) {
                return;
            }
        }
    }

    /// Takes in the drivers spawned since the last look at `run`'s inbox. With none held
    /// and few enough, the inbox's list becomes the held one, and the empty held one the
    /// inbox's: no driver moves, and neither list allocates again.
    fn take_inbox(&mut self, run: &RunState<I>) {
        let mut inbox = run.inbox.lock().unwrap_or_else(PoisonError::into_inner);
        if self.is_empty() && inbox.len() <= POLLED_TOGETHER {
            std::mem::swap(&mut self.few, &mut *inbox);
            return;
        }
        for driver in inbox.drain(..) {
            self.take_in(driver);
        }
    }

    /// Takes in one driver: among the few polled together while there is room and the set
    /// is empty, else in the set.
    fn take_in(&mut self, driver: Driver<I>) {
        let set_empty = self.set.as_ref().is_none_or(FuturesUnordered::is_empty);
        if set_empty && self.few.len() < POLLED_TOGETHER {
            self.few.push(driver);
            return;
        }
        self.set
            .get_or_insert_with(FuturesUnordered::new)
            .push(driver);
    }
}
