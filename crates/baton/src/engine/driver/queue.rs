//! How a driver shares the run's ready queue with the others: taking its next node, taking
//! turns when it yields, handing its nodes off when it stops driving, suspending when its
//! node waits. `ready/mod.rs` has the queue's protocol.

use std::sync::Arc;
use std::task::{Context, Poll};

use super::{Driver, Pop, State};

impl<I: Send + Sync + 'static> Driver<I> {
    /// Embedded: the current node waits, as its attempt returned `Pending`. It moves, as it
    /// is, to a driver spawned for it, which polls it again and goes on from there; this one
    /// carries on with its own stack or the queue. In an inline run that has not spread, the
    /// new driver is a local one, which the run's future polls when it is woken.
    pub(super) fn migrate(&mut self) {
        let state = std::mem::replace(&mut self.state, State::Idle);
        let mut driver = Driver::new(Arc::clone(&self.run), Some(self.id), false);
        driver.branch = std::mem::take(&mut self.branch);
        if matches!(state, State::Attempt(_)) {
            driver.attempt = self.attempt.take();
        }
        driver.state = state;
        // Once idle, this one has no end to start a root at: its node has not ended.
        driver.start = self.start.take();
        let _ = self.run.spawn(driver);
        if let Some(next) = self.local.pop_back() {
            self.id = next;
            self.from_queue = false;
            self.state = State::Begin;
        }
    }

    /// Embedded, or local when the run spreads: where a spawned driver would yield, this one
    /// ends instead. Its stack goes to the queue, and its node, if it has not started it, to
    /// a driver spawned for it, which takes its place among the active drivers; without a
    /// node, it leaves the queue to the other drivers, spawning one if none is left to drain
    /// it. With `spread`, or in a run that is not local, the run spreads first; otherwise
    /// the drivers it spawns are local too.
    pub(super) fn hand_off(&mut self, spread: bool) {
        // What is left spreads over the workers, from the drivers spawned here on. It
        // spreads before they are spawned, so that they see it.
        if spread || !self.run.core.is_local() {
            self.run.core.spread();
        }
        let node = matches!(self.state, State::Begin).then_some(self.id);
        self.state = State::Done;
        if !self.local.is_empty() {
            let _ = self.run.share(self.local.drain(..));
        }
        let active = std::mem::take(&mut self.active);
        match node {
            Some(id) => {
                let mut driver = Driver::new(Arc::clone(&self.run), Some(id), active);
                // A node is queued once per run: the new driver must know if it was.
                driver.from_queue = self.from_queue;
                let _ = self.run.spawn(driver);
            }
            None if active && self.run.core.ready().leave(self.run.workers()) => {
                let _ = self.run.spawn_driver(None, true);
            }
            None => {}
        }
        // Queued nodes get as many drivers as the workers. A thousand ready roots would
        // otherwise wait for the one driver above, nothing queuing more to spawn another.
        let ready = &self.run.core.ready();
        while !ready.is_empty() && ready.try_activate(self.run.workers()) {
            let _ = self.run.spawn_driver(None, true);
        }
    }

    /// The current node waits: the driver stops draining the queue, and if nodes wait there
    /// it spawns a driver to take its place, so a node that waits holds up no other.
    pub(super) fn suspend(&mut self) {
        // Its own nodes would wait with it: they go to the queue, for any driver.
        if !self.local.is_empty() {
            self.run.share(self.local.drain(..));
        }
        let ready = &self.run.core.ready();
        let workers = self.run.workers();
        let replace = if self.active {
            self.active = false;
            ready.leave(workers)
        } else {
            !ready.is_empty() && ready.try_activate(workers)
        };
        if replace {
            let _ = self.run.spawn_driver(None, true);
        }
    }

    /// The driver yields to tokio, its budget spent, before starting node `id`: nodes
    /// that have waited longer go first, so that a long chain run inline does not hold up a
    /// node that would start a request. The oldest queued node goes first if there is one,
    /// and `id` joins the queue unless it came from there, since a node is queued once per
    /// run. Otherwise the oldest node of the driver's own stack goes first, and `id` goes on
    /// top.
    pub(super) fn take_turns(&mut self) {
        if self.from_queue {
            return;
        }
        if !self.run.core.ready().is_empty() {
            // Whether it spawned a driver does not matter: this one returns `Pending` now.
            let _ = self.run.schedule(self.id);
            // An idle driver looks only at the queue: its own stack goes there too. Another
            // driver may empty the queue first, and this one would then end.
            if !self.local.is_empty() {
                let _ = self.run.share(self.local.drain(..));
            }
            self.state = State::Idle;
        } else if let Some(oldest) = self.local.pop_front() {
            self.local.push_back(self.id);
            self.id = oldest;
        }
    }

    /// Takes the next node from the queue. `None` means it is in `id` and the state is
    /// `Begin`; otherwise it returns what `poll` returns: `Ready` when the driver is done,
    /// `Pending` when it yielded.
    pub(super) fn next_from_queue(&mut self, cx: &mut Context<'_>) -> Option<Poll<()>> {
        let ready = &self.run.core.ready();
        if !self.active {
            // Not counted active, it owes the queue nothing: nothing waits, it is done.
            // Whoever queues a node later spawns a driver if too few are active.
            if ready.is_empty() {
                self.state = State::Done;
                return Some(Poll::Ready(()));
            }
            ready.activate();
            self.active = true;
        }
        loop {
            match ready.pop() {
                Pop::Node(id) => {
                    let last = self.id;
                    self.start = self
                        .start
                        .take()
                        .filter(|_| self.run.is_root(id) && self.run.quiet_after(last));
                    self.id = id;
                    self.from_queue = true;
                    self.state = State::Begin;
                    return None;
                }
                // A pusher is between claiming its slot and writing it: look again shortly.
                Pop::Busy => {
                    cx.waker().wake_by_ref();
                    return Some(Poll::Pending);
                }
                Pop::Empty => {
                    if !ready.leave(self.run.workers()) {
                        self.active = false;
                        self.state = State::Done;
                        return Some(Poll::Ready(()));
                    }
                }
            }
        }
    }
}
