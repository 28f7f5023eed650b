//! The run's timer floor: a timer it registers and never waits for, so that its attempts'
//! timers do not wake the worker parked in tokio's drivers; see
//! [`floor_timers`](RunCore::floor_timers).

use std::sync::atomic::Ordering;
use std::task::{Context, Waker};
use std::time::Duration;

use tokio::time::Instant;

use super::RunCore;
use crate::policy::deadline::{KeptTimer, poll_timer};
use crate::util::sync::Exclusive;

impl RunCore {
    /// Registers a timer at `until` that nobody waits for: it keeps tokio's timer from
    /// being woken for each later attempt's timer. `until` is the cut of a policy attempt
    /// of the run that waits, given `time()`: the run's first, then each whose cut is past the
    /// floor's reach, 1/64 of its attempt's time after it (`deadline::reach`), which
    /// replaces it. Called just before an attempt's timer is set: by the fast path's
    /// `first_attempt::wait`, and by the policy path's `Deadline` through [`TimerHook`](crate::policy::deadline::TimerHook).
    /// Not for the timer that drivers polled together share (`first_attempt/shared.rs`):
    /// it runs no later than any attempt armed on it and stays in tokio's wheel until it
    /// fires or the run's future drops, and past that on a multi-thread runtime, as a floor
    /// would.
    ///
    /// Tokio's timer wakes the worker parked in its drivers whenever a timer is registered
    /// that is due before any the parked worker knows of: with nothing else registered,
    /// that is every attempt's first timer, each a wake-up of a second worker. With this
    /// floor registered, an attempt whose cut is not earlier registers its timer without
    /// waking anyone. A floor that fires wakes the parked worker once, and no task; moved
    /// up to the cuts of attempts that take a while, it fires only when the run outlives
    /// the last such cut, or runs on past an attempt that had nearly spent its time. When
    /// the run's state is dropped, the graph keeps it running for a later run on the same
    /// runtime (`Spares::keep_standing`): the floor is the timer `spare()` gives, as it
    /// runs when it stands for `until`, else set again in its box. With one worker, parked
    /// or not, the wake-up is still a system call when the I/O driver is enabled, a write
    /// to its event file that its next turn reads back. A current-thread runtime, which may
    /// run on tokio's paused clock, makes no floor
    /// ([`keeps_standing_timers`](Self::keeps_standing_timers)).
    ///
    /// A run makes its first floor only when `granted()`: its orchestrator counts runs in
    /// flight holding one, and grants a floor when none does. Under a load of runs alike,
    /// the timers of the run holding it stand before the others' cuts, and a floor per run
    /// would only add a timer made, moved and taken out of tokio's wheel for each attempt
    /// that took a while. A run not granted one asks again at its next attempt's timer;
    /// one granted one gives it back when it ends (`take_floor_back`).
    ///
    /// # Panics
    ///
    /// On a runtime built without timers, as `tokio::time::sleep_until` does: its callers
    /// make a timer right after, which would panic the same way; the driver catches either
    /// and fails the node.
    pub(in crate::engine) fn floor_timers(
        &self,
        until: Instant,
        time: impl FnOnce() -> Duration,
        granted: impl FnOnce() -> bool,
        spare: impl FnOnce() -> Option<KeptTimer>,
    ) {
        if !self.keeps_standing_timers() {
            return;
        }
        self.timer_floor.with(|floor| {
            if floor.reaches(until) {
                return;
            }
            if !self.floored.load(Ordering::Relaxed) {
                if !granted() {
                    return;
                }
                self.floored.store(true, Ordering::Relaxed);
            }
            if !floor.is_made() {
                if let Some(kept) = spare() {
                    *floor = kept;
                    // A timer an earlier run left running, that stands for this floor.
                    if floor.stands_for(until) {
                        return;
                    }
                }
            }
            // Registered by its first poll, made outside the coop budget, which the attempt
            // may have spent: a poll inside it would register nothing, and there is no
            // second one. The waker it keeps is a no-op. Set later than it ran, the floor is
            // made again, which takes the old one out of tokio's wheel.
            let timer = floor.set(until, time());
            let _ = poll_timer(timer, &mut Context::from_waker(Waker::noop()));
        });
    }

    /// Whether the run is to give its orchestrator back the timer floor it was granted:
    /// true once, when it was granted one, for the first call; see
    /// [`floor_timers`](Self::floor_timers).
    pub(in crate::engine) fn take_floor_back(&self) -> bool {
        // Called as the run ends, once its attempts are over: no floor is granted meanwhile.
        let floored = self.floored.load(Ordering::Relaxed);
        if floored {
            self.floored.store(false, Ordering::Relaxed);
        }
        floored
    }

    /// The run's timer floor, once set: its instant and whether it elapsed.
    #[cfg(test)]
    pub(in crate::engine) fn timer_floor(&self) -> Option<(Instant, bool)> {
        self.timer_floor
            .with(|floor| floor.get().map(|t| (t.deadline(), t.is_elapsed())))
    }
}
