//! The runs in flight of an orchestrator: admitting them, their end, and cancelling them
//! all or shutting down.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use super::{InFlight, Orchestrator};
use crate::error::CancelReason;

pub(super) const SHARDS: usize = 16;

/// One shard of an orchestrator's runs in flight: the runs, behind a lock, and how many
/// there are, written under that lock and read without it by `runs_in_flight`.
///
/// A run is counted, and an ended one uncounted, under its shard's lock, which is also
/// where it reads whether the orchestrator accepts runs. `shutdown` stops accepting before
/// it counts the runs left, taking each shard's lock in turn. So for each shard, either the
/// shutdown's count comes after a run's admission or end there, and sees it; or it comes
/// before, and that run, taking the lock after the shutdown's store, reads "refusing": it
/// is refused, or its end wakes the shutdown, which counts again. No shared counter is
/// written per run.
#[derive(Default)]
pub(super) struct Shard {
    runs: Mutex<RunsShard>,
    in_flight: AtomicUsize,
}

impl Shard {
    fn lock(&self) -> MutexGuard<'_, RunsShard> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds `by` to the count; `_held` is this shard's locked runs, which the caller holds.
    fn count(&self, _held: &mut RunsShard, by: isize) {
        let n = self.in_flight.load(Ordering::Relaxed);
        self.in_flight
            .store(n.wrapping_add_signed(by), Ordering::Relaxed);
    }
}

/// Runs in flight of one shard: a slab, so that admitting a run and ending it cost a push
/// and a pop of a free slot's index, not a hash-table insert and remove. The run keeps its
/// slot's index as a [`RunKey`]. The slab keeps the size of its busiest moment, as the hash
/// table did: `cancel_all` and `shutdown` scan that many slots.
#[derive(Default)]
pub(super) struct RunsShard {
    slots: Vec<Option<Weak<dyn InFlight>>>,
    free: Vec<u32>,
}

impl RunsShard {
    /// Keeps `run`; its slot's index.
    fn insert(&mut self, run: Weak<dyn InFlight>) -> u32 {
        if let Some(i) = self.free.pop() {
            if let Some(slot) = self.slots.get_mut(i as usize) {
                *slot = Some(run);
                return i;
            }
        }
        self.slots.push(Some(run));
        (self.slots.len() - 1) as u32
    }

    /// Forgets the run in slot `i`; whether it held one. Nothing happens if it is empty.
    fn remove(&mut self, i: u32) -> bool {
        if let Some(slot) = self.slots.get_mut(i as usize) {
            if slot.take().is_some() {
                self.free.push(i);
                return true;
            }
        }
        false
    }

    fn runs(&self) -> impl Iterator<Item = &Weak<dyn InFlight>> {
        self.slots.iter().flatten()
    }
}

/// Where the orchestrator keeps an admitted run: its shard and its slot there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RunKey {
    shard: u32,
    slot: u32,
}

/// What [`Orchestrator::shutdown`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Runs in flight when the shutdown began that ended without being cancelled by it:
    /// within the grace period, or as the cancel came.
    pub finished: usize,
    /// Runs still in flight when the grace period ended that the shutdown, or a shutdown
    /// overlapping it, cancelled. Their futures end with
    /// [`RunError::Cancelled`](crate::RunError::Cancelled), reason
    /// [`CancelReason::Shutdown`].
    pub cancelled: usize,
}

impl Orchestrator {
    /// How many runs have started and not finished: the sum of the shards' counts, read
    /// one after the other, so runs starting and ending meanwhile may or may not be in it.
    /// A refused run never counts, and is in no [`ShutdownReport`] count.
    #[must_use]
    pub fn runs_in_flight(&self) -> usize {
        let shards = self.inner.runs.iter();
        shards.map(|s| s.0.in_flight.load(Ordering::Relaxed)).sum()
    }

    /// A run asks for a timer floor, the timer the engine registers so that its attempts'
    /// timers do not wake a parked worker: granted, and counted, when no other run in
    /// flight holds one, whose timers stand for it. Two runs asking at once may both be
    /// granted. A run granted one gives it back with
    /// [`give_back_timer_floor`](Self::give_back_timer_floor) when it ends.
    pub(crate) fn take_timer_floor(&self) -> bool {
        let floors = &self.inner.timer_floors.0;
        if floors.load(Ordering::Relaxed) > 0 {
            return false;
        }
        floors.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// A run granted a timer floor by [`take_timer_floor`](Self::take_timer_floor) ended.
    pub(crate) fn give_back_timer_floor(&self) {
        self.inner.timer_floors.0.fetch_sub(1, Ordering::Relaxed);
    }

    /// How many runs in flight hold a timer floor.
    #[cfg(test)]
    pub(crate) fn timer_floors_held(&self) -> usize {
        self.inner.timer_floors.0.load(Ordering::Relaxed)
    }

    /// [`runs_in_flight`](Self::runs_in_flight), counted under each shard's lock, as
    /// `shutdown` needs; see [`Shard`].
    fn runs_in_flight_locked(&self) -> usize {
        let shards = self.inner.runs.iter();
        shards
            .map(|s| {
                let _held = s.0.lock();
                s.0.in_flight.load(Ordering::Relaxed)
            })
            .sum()
    }

    /// Whether [`shutdown`](Self::shutdown) was called: new runs are refused with
    /// [`RunError::ShuttingDown`](crate::RunError::ShuttingDown).
    #[must_use]
    pub fn is_shutting_down(&self) -> bool {
        !self.inner.accepting.load(Ordering::SeqCst)
    }

    /// Cancels every run in flight; each ends with
    /// [`RunError::Cancelled`](crate::RunError::Cancelled), reason
    /// [`CancelReason::CancelAll`]. Returns how many runs it found in flight; a run that
    /// ended meanwhile is among them. New runs are still accepted.
    #[allow(
        clippy::must_use_candidate,
        reason = "cancelling is the point; the count is informational"
    )]
    pub fn cancel_all(&self) -> usize {
        self.cancel_runs(CancelReason::CancelAll)
    }

    fn cancel_runs(&self, reason: CancelReason) -> usize {
        let mut runs = Vec::new();
        for shard in &self.inner.runs {
            runs.extend(shard.0.lock().runs().filter_map(Weak::upgrade));
        }
        // Cancelling fires callbacks: never while holding a lock.
        for run in &runs {
            run.cancel(reason.clone());
        }
        runs.len()
    }

    /// Stops accepting runs, waits up to `grace` for the runs in flight to finish, then
    /// cancels the rest and waits for them to wind down. A new run fails at once with
    /// [`RunError::ShuttingDown`](crate::RunError::ShuttingDown).
    ///
    /// Cancel-safe: dropping the future leaves the orchestrator refusing new runs, with the
    /// runs in flight running on.
    ///
    /// The report counts the runs that ended after the orchestrator stopped accepting runs
    /// and before the call returned: cancelled by a shutdown, or not. A run refused
    /// meanwhile is in neither count. Two shutdowns that overlap both count the runs
    /// either cancelled. The call returns only when every run has ended: a node that
    /// never yields after the cancel holds it up.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{BoxError, Orchestrator, RunError, run::CancelReason};
    /// use tokio::time::sleep;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let orch = Orchestrator::new();
    /// let mut g = orch.graph::<()>();
    /// g.node("slow").task(|_ctx, ()| async {
    ///     sleep(Duration::from_secs(10)).await;
    ///     Ok::<_, BoxError>(())
    /// });
    /// let graph = g.build()?;
    /// let in_flight = tokio::spawn(graph.run(()));
    /// tokio::task::yield_now().await; // let it start
    /// let shutdown = orch.shutdown(Duration::from_secs(1)).await;
    /// assert_eq!((shutdown.finished, shutdown.cancelled), (0, 1));
    /// let cancelled = in_flight.await?;
    /// let Err(RunError::Cancelled { reason, .. }) = cancelled else { panic!("not cancelled") };
    /// assert_eq!(reason, CancelReason::Shutdown);
    /// assert!(matches!(graph.run(()).await, Err(RunError::ShuttingDown)));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn shutdown(&self, grace: Duration) -> ShutdownReport {
        let inner = &self.inner;
        let before = inner.ended_in_shutdown.load(Ordering::SeqCst);
        inner.accepting.store(false, Ordering::SeqCst);
        let _ = tokio::time::timeout(grace, self.idle()).await;
        if self.runs_in_flight_locked() > 0 {
            self.cancel_runs(CancelReason::Shutdown);
            self.idle().await;
        }
        // Every run admitted before the store above has ended, as `idle` says, and counted
        // itself first in `run_ended`: a run that ended after the store saw it, and one
        // that did not ended before the shutdown began.
        let after = inner.ended_in_shutdown.load(Ordering::SeqCst);
        let ended = (after & u64::from(u32::MAX)).wrapping_sub(before & u64::from(u32::MAX));
        let cancelled = (after >> 32).wrapping_sub(before >> 32);
        ShutdownReport {
            finished: usize::try_from(ended.saturating_sub(cancelled)).unwrap_or(usize::MAX),
            cancelled: usize::try_from(cancelled).unwrap_or(usize::MAX),
        }
    }

    /// Resolves when no run is in flight.
    async fn idle(&self) {
        loop {
            let notified = self.inner.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            // Under the shards' locks, not as `runs_in_flight` reads: see `Shard`.
            if self.runs_in_flight_locked() == 0 {
                return;
            }
            notified.await;
        }
    }

    /// Admits a run that is starting: where it is kept, or `None` when shutting down, when
    /// nothing is kept. `seq`, the run's sequence number, picks the shard.
    pub(crate) fn admit(&self, run: Weak<dyn InFlight>, seq: u64, nodes: usize) -> Option<RunKey> {
        let inner = &self.inner;
        let i = (seq % SHARDS as u64) as u32;
        let shard = &inner.runs[i as usize].0;
        let slot = {
            let mut runs = shard.lock();
            // Read under the lock: see `Shard`.
            if inner.accepting.load(Ordering::SeqCst) {
                let slot = runs.insert(run);
                shard.count(&mut runs, 1);
                Some(slot)
            } else {
                None
            }
        };
        let Some(slot) = slot else {
            inner.counters.local().runs_rejected().incr();
            return None;
        };
        let key = RunKey { shard: i, slot };
        let c = inner.counters.local();
        c.runs_started().incr();
        c.runs_in_flight().incr();
        c.nodes_submitted().add(nodes as i64);
        Some(key)
    }

    /// A run admitted by [`admit`](Self::admit), kept at `key`, ended; `by_shutdown`: it
    /// was cancelled by a shutdown. Counted in the shutdown's report before it leaves its
    /// shard, so that a shutdown that sees no run in flight finds it counted.
    ///
    /// Only `shutdown` waits, with `idle`, for no run to be in flight, and only after it
    /// stopped accepting runs. While the orchestrator accepts, nobody is told:
    /// `notify_waiters` takes a lock. Once it refuses, every run's end wakes the shutdown,
    /// which counts again; see [`Shard`].
    pub(crate) fn run_ended(&self, key: RunKey, by_shutdown: bool) {
        let inner = &self.inner;
        let Some(shard) = inner.runs.get(key.shard as usize).map(|s| &s.0) else {
            debug_assert!(false, "shard {} of {SHARDS}", key.shard);
            return;
        };
        let refusing = {
            let mut runs = shard.lock();
            // Read under the lock: see `Shard`.
            let refusing = !inner.accepting.load(Ordering::SeqCst);
            if refusing {
                let by_shutdown = if by_shutdown { 1 << 32 } else { 0 };
                inner
                    .ended_in_shutdown
                    .fetch_add(1 | by_shutdown, Ordering::SeqCst);
            }
            let removed = runs.remove(key.slot);
            debug_assert!(removed, "a run ends once");
            if removed {
                shard.count(&mut runs, -1);
            }
            refusing
        };
        let c = inner.counters.local();
        c.runs_finished().incr();
        c.runs_in_flight().decr();
        if refusing {
            inner.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Weak;

    use super::RunsShard;
    use crate::error::CancelReason;
    use crate::orchestrator::InFlight;

    struct Idle;

    impl InFlight for Idle {
        fn cancel(&self, _: CancelReason) {}
    }

    fn run() -> Weak<dyn InFlight> {
        Weak::<Idle>::new() as Weak<dyn InFlight>
    }

    /// A slot freed by a run that ended is the next one taken, and removing an empty slot,
    /// or one out of range, changes nothing. So no slot is on the free list twice, and only
    /// kept runs are listed. The scheduler removes each run once: a second removal after
    /// the slot was reused would take another run's.
    #[test]
    fn the_runs_slab_reuses_freed_slots_once() {
        let mut shard = RunsShard::default();
        let (a, b, c) = (
            shard.insert(run()),
            shard.insert(run()),
            shard.insert(run()),
        );
        assert_eq!((a, b, c), (0, 1, 2));
        assert!(shard.remove(b));
        assert!(!shard.remove(b));
        assert!(!shard.remove(7));
        assert_eq!(shard.runs().count(), 2);
        assert_eq!(shard.insert(run()), b, "the freed slot");
        assert_eq!(shard.insert(run()), 3, "no slot freed twice");
        assert_eq!(shard.runs().count(), 4);
    }
}
