//! Where a graph keeps the per-run arrays of its ended runs, [`RunBuffers`], cleared, for
//! its next runs. A run that finds a set writes its initial counters into memory it already
//! has, instead of making four allocations and, for a large graph, faulting in about
//! 130 bytes per node. Its end hands its arrays back instead of freeing them, unless its
//! stripe holds as many sets as it keeps or another run holds the stripe at that instant.
//!
//! A small graph, run by many requests at once, keeps sets in [`STRIPES`] stripes, one per
//! thread stripe modulo that. A run takes a set from the stripe of its home: that of the
//! thread that creates it by calling `Graph::run`. It gives the set back there when it
//! ends, wherever that is, so workers that each create runs of one handler's graph do not
//! fight over one stripe. A stripe keeps as many sets as fit in [`STRIPE_BYTES`], at most
//! [`STRIPE_MAX_SETS`]: a handler with 64 requests in flight on two workers finds a set for
//! each. A larger graph keeps one set, whose allocations would cost little beside its nodes
//! anyway. Whoever finds the stripe held at that instant allocates, or frees, its own: no
//! run waits for another; see `util/try_cell.rs`.
//!
//! A stripe also keeps, for its later runs, what its runs made once and can hand on
//! emptied: the boxes of large attempts that ended, for the next attempts of their layouts
//! (see `task/attempt_box.rs`); up to [`STRIPE_TIMERS`] boxes of timers, drivers' and runs'
//! floors, the timers dropped; up to [`STRIPE_STANDING`] running timers, runs' floors,
//! those their joined drivers shared and drivers', on a multi-thread runtime
//! ([`Spares::keep_standing`]); and up to [`STRIPE_WAKERS`] wakers that runs polled their
//! joined drivers with, unused, each with the places of up to 32 drivers past the eight a
//! run polls together (`CancelWake::spare`). A run takes one only when it first needs one.
//!
//! What a graph keeps while idle is only the arrays, about 130 bytes per node per set, the
//! attempt boxes, at most 256 KiB a stripe, the timers' boxes and wakers, at most some
//! 6 KiB a stripe, the places kept with the wakers, at most some 3 KiB a waker, and a
//! stripe's running timers, 160 bytes each, which hold the handle of the last multi-thread
//! runtime the graph ran on there, with its file descriptors, until later runs of that
//! stripe take or drop them ([`Spares::keep_standing`]) or the graph is dropped. It
//! keeps no value or record, since those are dropped when the run ends, no task's waker,
//! and nothing a kept box's attempt held, since it ended. A graph keeps no more sets than
//! it had runs at once. That is at most 512 KiB of arrays for a small graph (eight stripes
//! of 64 KiB), and one set for a larger one, about 130 MB for a million nodes, until the
//! graph is dropped; and at most 2 MiB of attempt boxes for a small graph, 256 KiB for a
//! larger one.

use tokio::runtime::Id;
use tokio::time::Sleep;

use crate::engine::run::joined::SpareWaker;
use crate::engine::run::node_state::RunBuffers;
use crate::engine::task::attempt_box::KeptAttempts;
use crate::policy::deadline::KeptTimer;
use crate::util::striped::{Padded, stripe};
use crate::util::try_cell::TryCell;

/// How many stripes of run arrays a small graph keeps.
const STRIPES: usize = 8;

/// Graphs of at most this many nodes keep their run arrays in [`STRIPES`] stripes. Larger
/// ones keep one set.
const STRIPED_MAX_NODES: usize = 64;

/// The bytes of run arrays a stripe of a small graph keeps at most.
const STRIPE_BYTES: usize = 64 * 1024;

/// The most sets a stripe keeps, however small the graph.
const STRIPE_MAX_SETS: usize = 64;

/// About how many bytes a node's run arrays take: its state, slot, value cell and queue
/// cell.
const BYTES_PER_NODE: usize = 130;

/// A graph's spare run arrays.
#[derive(Debug)]
pub(crate) struct Spares {
    stripes: Box<[Padded<Stripe>]>,
    /// How many sets a stripe keeps.
    per_stripe: usize,
}

/// The most boxes of timers (drivers' and runs' floors) a stripe keeps.
const STRIPE_TIMERS: usize = 32;

/// The most running timers a stripe keeps for later runs ([`Spares::keep_standing`]): as
/// many as a run of a handler's graph leaves, its floor, its joined drivers' timer and a
/// few of its drivers'.
const STRIPE_STANDING: usize = 8;

/// The most unused wakers for runs' joined drivers a stripe keeps.
const STRIPE_WAKERS: usize = 32;

/// One stripe of a graph's spares: sets of run arrays, attempt boxes, the boxes of timers
/// (drivers' and runs' floors) with no timer in them, running timers runs left, and
/// unused wakers for runs' joined drivers.
#[derive(Debug)]
struct Stripe {
    sets: TryCell<Vec<RunBuffers>>,
    attempts: KeptAttempts,
    timers: TryCell<Vec<KeptTimer>>,
    standing: TryCell<Standing>,
    wakers: TryCell<Vec<SpareWaker>>,
}

/// Running timers that runs left, kept for later runs', and the runtime whose wheel holds
/// them; see [`Spares::keep_standing`].
#[derive(Debug, Default)]
struct Standing {
    runtime: Option<Id>,
    timers: Vec<KeptTimer>,
}

impl Spares {
    /// No spare arrays yet, for a graph of `nodes` nodes. Allocates nothing.
    pub(crate) fn new(nodes: usize) -> Self {
        let (count, per_stripe) = if nodes <= STRIPED_MAX_NODES {
            let fit = STRIPE_BYTES / (BYTES_PER_NODE * nodes.max(1));
            (STRIPES, fit.clamp(1, STRIPE_MAX_SETS))
        } else {
            (1, 1)
        };
        Spares {
            stripes: (0..count)
                .map(|_| {
                    Padded(Stripe {
                        sets: TryCell::new(Vec::new()),
                        attempts: KeptAttempts::default(),
                        timers: TryCell::new(Vec::new()),
                        standing: TryCell::new(Standing::default()),
                        wakers: TryCell::new(Vec::new()),
                    })
                })
                .collect(),
            per_stripe,
        }
    }

    /// The stripe that a run created on this thread by `Graph::run` takes a set from, and
    /// gives it back to when it ends, on whichever thread that is. A run spread over the
    /// workers often ends on another thread.
    pub(crate) fn home(&self) -> usize {
        stripe() % self.stripes.len().max(1)
    }

    /// A set of stripe `home`'s, if it has one and no other run holds the stripe now.
    pub(in crate::engine) fn take(&self, home: usize) -> Option<RunBuffers> {
        self.stripes.get(home)?.0.sets.try_with(Vec::pop)?
    }

    /// Keeps `buffers`, cleared, in stripe `home` for a later run. If the stripe holds as
    /// many sets as it keeps, or another run holds the stripe now, `buffers` are dropped
    /// instead, outside the stripe.
    pub(in crate::engine) fn put(&self, home: usize, buffers: RunBuffers) {
        let Some(stripe) = self.stripes.get(home) else {
            return;
        };
        keep_in(&stripe.0.sets, self.per_stripe, buffers);
    }

    /// A timer's box of stripe `home`'s, with no timer in it, if it has one and no other
    /// run holds the stripe's boxes now.
    pub(in crate::engine) fn take_timer(&self, home: usize) -> Option<KeptTimer> {
        self.stripes.get(home)?.0.timers.try_with(Vec::pop)?
    }

    /// Keeps the box of a driver's or a run's floor's `timer` in stripe `home`, for a later
    /// driver's timer or run's floor, after dropping the timer, which takes it out of
    /// tokio's wheel. A timer never made, or one the stripe has no room or no turn for, is
    /// dropped, outside the stripe.
    pub(in crate::engine) fn keep_timer(&self, home: usize, mut timer: KeptTimer) {
        let Some(stripe) = self.stripes.get(home) else {
            return;
        };
        if !timer.is_made() {
            return;
        }
        timer.clear();
        keep_in(&stripe.0.timers, STRIPE_TIMERS, timer);
    }

    /// A timer stripe `home` keeps standing for a run on `runtime`, the one kept last (it
    /// may have fired since), if it keeps one for that runtime and no other run holds them
    /// now; see
    /// [`keep_standing`](Self::keep_standing). Those kept for another runtime, which may be
    /// gone, are dropped, and their boxes kept as by [`keep_timer`](Self::keep_timer), so
    /// that a graph does not hold a runtime it no longer runs on.
    pub(in crate::engine) fn take_standing(&self, home: usize, runtime: Id) -> Option<KeptTimer> {
        let stripe = &self.stripes.get(home)?.0;
        let taken = stripe.standing.try_with(|standing| {
            if standing.runtime == Some(runtime) {
                return Ok(standing.timers.pop());
            }
            Err(std::mem::take(&mut standing.timers))
        })?;
        match taken {
            Ok(timer) => timer,
            Err(others) => {
                others.into_iter().for_each(|t| self.keep_timer(home, t));
                None
            }
        }
    }

    /// Keeps `timer`, a run's timer floor, the timer its joined drivers shared or a
    /// driver's, in stripe `home`, still running in the wheel of `runtime`, the run's, for
    /// a later run's floor, joined drivers or driver. While runs follow each other, tokio's
    /// wheel then holds timers until the next run's: a later run's timer, at a later cut,
    /// does not wake tokio's drivers, which it would if the wheel had been left empty, and
    /// a timer that the kept one stands for (`KeptTimer::stands_for`) is not registered at
    /// all. It holds no task (`KeptTimer::stand`) and fires once, at most, when no run
    /// takes it. A stripe keeps up to [`STRIPE_STANDING`] such timers; past that, the box
    /// of `timer` is kept as by [`keep_timer`](Self::keep_timer), and so is the box of a
    /// timer that does not run, and of one with no runtime to keep it for: `runtime` is
    /// `None` for a current-thread runtime (`RunCore::standing_runtime`); such a run also
    /// drops kept timers that elapsed, as a runtime's shutdown leaves its timers. In a full
    /// stripe, the timer kept first, once it fired, makes room for `timer`; others that
    /// fired are not looked at. When another run holds the stripe's running timers at
    /// that instant, `timer` is dropped.
    ///
    /// The kept timers hold their runtime's handle, with the runtime's file descriptors,
    /// until runs of that stripe take them or drop them (those of another runtime, in
    /// [`take_standing`](Self::take_standing) or here; those elapsed, in a run on a
    /// current-thread runtime; the one kept first once it fired, in a full stripe), or the
    /// graph is dropped.
    ///
    /// A driver's timer comes here as the driver ends, a run's shared timer as its future
    /// drops, its floor as its state drops. One dropped outside the runtime's tasks, while
    /// another thread shuts that runtime down, may meet the panic with which tokio refuses
    /// to poll a timer then, which `KeptTimer::stand` catches (the panic hook runs; with
    /// `panic = "abort"`, the process aborts). A runtime dropped with runs in flight in
    /// its tasks drops them first.
    pub(in crate::engine) fn keep_standing(
        &self,
        home: usize,
        runtime: Option<Id>,
        mut timer: KeptTimer,
    ) {
        let Some(stripe) = self.stripes.get(home) else {
            return;
        };
        let Some(runtime) = runtime else {
            // A runtime's shutdown fires its timers: those kept for a runtime that is gone
            // have elapsed, and hold that runtime's handle for nothing.
            let elapsed = stripe
                .0
                .standing
                .try_with(|standing| take_elapsed(&mut standing.timers));
            elapsed
                .into_iter()
                .flatten()
                .for_each(|t| self.keep_timer(home, t));
            return self.keep_timer(home, timer);
        };
        // Made to stand under the stripe's lock, once there is room for it: a timer
        // refused is only cleared, as one kept as a box. The timer kept first, once it
        // fired, as no run took it, gives way to it.
        let left = stripe.0.standing.try_with(|standing| {
            let (mut others, mut fired) = (Vec::new(), None);
            if standing.runtime != Some(runtime) {
                standing.runtime = Some(runtime);
                others = std::mem::take(&mut standing.timers);
            } else if standing.timers.len() >= STRIPE_STANDING
                && standing.timers.first().is_some_and(is_elapsed)
            {
                fired = Some(standing.timers.remove(0));
            }
            if standing.timers.len() < STRIPE_STANDING && timer.stand() {
                standing.timers.push(timer);
                return (None, fired, others);
            }
            (Some(timer), fired, others)
        });
        let Some((refused, fired, others)) = left else {
            return;
        };
        refused
            .into_iter()
            .chain(fired)
            .for_each(|t| self.keep_timer(home, t));
        if !others.is_empty() {
            others.into_iter().for_each(|t| self.keep_timer(home, t));
        }
    }

    /// An unused waker for a run's joined drivers, of stripe `home`'s, if it has one and no
    /// other run holds the stripe's wakers now.
    pub(in crate::engine) fn take_waker(&self, home: usize) -> Option<SpareWaker> {
        self.stripes.get(home)?.0.wakers.try_with(Vec::pop)?
    }

    /// Keeps `woken`, an unused waker (`CancelWake::spare`), in stripe `home` for a later
    /// run's joined drivers; dropped, outside the stripe, when the stripe has no room or no
    /// turn for it.
    pub(in crate::engine) fn keep_waker(&self, home: usize, woken: SpareWaker) {
        if let Some(stripe) = self.stripes.get(home) {
            keep_in(&stripe.0.wakers, STRIPE_WAKERS, woken);
        }
    }

    /// The attempt boxes kept in stripe `home`, for its runs' attempts and from them.
    #[inline]
    pub(in crate::engine) fn attempts(&self, home: usize) -> Option<&KeptAttempts> {
        Some(&self.stripes.get(home)?.0.attempts)
    }
}

/// Whether a kept timer elapsed, or holds none.
fn is_elapsed(timer: &KeptTimer) -> bool {
    timer.get().is_none_or(Sleep::is_elapsed)
}

/// The timers of `timers` that elapsed, taken out: none, and nothing allocated, when
/// none did.
fn take_elapsed(timers: &mut Vec<KeptTimer>) -> Vec<KeptTimer> {
    if !timers.iter().any(is_elapsed) {
        return Vec::new();
    }
    let (gone, running) = std::mem::take(timers).into_iter().partition(is_elapsed);
    *timers = running;
    gone
}

/// Pushes `item` on the list in `cell` if it holds fewer than `max` and no one else holds
/// the cell now; drops it otherwise, outside the cell.
fn keep_in<T>(cell: &TryCell<Vec<T>>, max: usize, item: T) {
    let refused = cell.try_with(|items| {
        if items.len() < max {
            items.push(item);
            return None;
        }
        Some(item)
    });
    drop(refused);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffers(n: usize) -> RunBuffers {
        RunBuffers::new(n, |_| 0)
    }

    #[test]
    fn small_graphs_keep_stripes_of_sets_larger_ones_one_set() {
        let five = Spares::new(5);
        assert_eq!(
            (five.stripes.len(), five.per_stripe),
            (STRIPES, STRIPE_MAX_SETS)
        );
        let most = Spares::new(STRIPED_MAX_NODES);
        assert_eq!(most.stripes.len(), STRIPES);
        assert_eq!(
            most.per_stripe,
            STRIPE_BYTES / (BYTES_PER_NODE * STRIPED_MAX_NODES)
        );
        let larger = Spares::new(STRIPED_MAX_NODES + 1);
        assert_eq!((larger.stripes.len(), larger.per_stripe), (1, 1));
    }

    #[test]
    fn a_stripe_keeps_its_sets_up_to_its_count_and_drops_the_rest() {
        let spares = Spares::new(STRIPED_MAX_NODES);
        let home = spares.home();
        assert!(spares.take(home).is_none());
        for _ in 0..spares.per_stripe + 1 {
            spares.put(home, buffers(STRIPED_MAX_NODES));
        }
        let other = (home + 1) % STRIPES;
        assert!(spares.take(other).is_none(), "another stripe's set");
        let mut taken = 0;
        while let Some(set) = spares.take(home) {
            assert_eq!(set.nodes.len(), STRIPED_MAX_NODES);
            taken += 1;
        }
        assert_eq!(
            taken, spares.per_stripe,
            "the one past the count was dropped"
        );
    }

    #[test]
    fn a_held_lock_makes_take_and_put_give_up_without_waiting() {
        let spares = Spares::new(100);
        assert_eq!(spares.home(), 0);
        spares.put(0, buffers(1));
        let inside = spares.stripes[0].0.sets.try_with(|_| {
            assert!(spares.take(0).is_none());
            spares.put(0, buffers(2));
        });
        assert!(inside.is_some());
        assert_eq!(spares.take(0).map(|b| b.nodes.len()), Some(1));
        assert!(spares.take(0).is_none(), "the second set was dropped");
        assert!(spares.take(1).is_none(), "out of range");
    }

    /// A stripe keeps a driver's timer's box with the timer dropped, up to its count;
    /// a timer never made is not kept.
    #[test]
    fn a_stripe_keeps_timers_boxes_empty_up_to_its_count() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime");
        let _entered = rt.enter();
        let spares = Spares::new(1);
        spares.keep_timer(0, KeptTimer::new());
        assert!(spares.take_timer(0).is_none(), "nothing to keep");
        let now = tokio::time::Instant::now();
        for _ in 0..=STRIPE_TIMERS {
            let mut timer = KeptTimer::new();
            let set = timer.set(
                now + std::time::Duration::from_secs(1),
                std::time::Duration::from_secs(1),
            );
            assert!(!set.is_elapsed());
            spares.keep_timer(0, timer);
        }
        for _ in 0..STRIPE_TIMERS {
            let kept = spares.take_timer(0).expect("a kept box");
            assert!(
                kept.is_made() && kept.get().is_none(),
                "a box with no timer"
            );
        }
        assert!(
            spares.take_timer(0).is_none(),
            "the one past the count was dropped"
        );
        assert!(spares.take_timer(1).is_none(), "out of range");
    }

    /// A stripe keeps up to eight running timers, for runs on its runtime, with no task's
    /// waker, and gives the one kept last first; past eight, a timer's box is kept with no
    /// timer in it, unless the first of the eight fired: that one's box is kept instead. A
    /// run on another runtime drops them, keeping their boxes, and so does a run of no
    /// runtime once they elapsed. A timer that does not run, or of no runtime, is kept as a
    /// box.
    #[test]
    fn a_stripe_keeps_running_timers_for_its_runtime() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::task::{Context, Wake, Waker};
        use std::time::Duration;

        struct Task(AtomicUsize);
        impl Wake for Task {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a runtime");
        let (id, _entered) = (rt.handle().id(), rt.enter());
        let other = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("another runtime")
            .handle()
            .id();
        let now = tokio::time::Instant::now();
        let task = Arc::new(Task(AtomicUsize::new(0)));
        let running = |secs| {
            let mut timer = KeptTimer::new();
            let waker = Waker::from(Arc::clone(&task));
            let set = timer.set(now + Duration::from_secs(secs), Duration::from_secs(secs));
            let polled = crate::policy::deadline::poll_timer(set, &mut Context::from_waker(&waker));
            assert!(polled.is_pending());
            timer
        };
        let spares = Spares::new(1);
        let empty_box = |why| {
            let kept = spares.take_timer(0);
            assert!(
                kept.is_some_and(|t| t.is_made() && t.get().is_none()),
                "{why}"
            );
        };
        spares.keep_standing(0, Some(id), running(1));
        assert_eq!(Arc::strong_count(&task), 1, "no task's waker kept");
        spares.keep_standing(0, Some(id), running(2));
        assert!(spares.take_timer(0).is_none(), "both kept running");
        let deadline = |timer: Option<KeptTimer>| {
            timer.and_then(|t| t.get().map(tokio::time::Sleep::deadline))
        };
        let later = spares.take_standing(0, id);
        assert_eq!(deadline(later), Some(now + Duration::from_secs(2)));
        let kept = spares.take_standing(0, id).expect("a running timer");
        let at = kept.get().map(tokio::time::Sleep::deadline);
        assert_eq!(at, Some(now + Duration::from_secs(1)), "the earlier one");
        assert!(spares.take_standing(0, id).is_none(), "taken");
        for secs in 1..=STRIPE_STANDING as u64 + 1 {
            spares.keep_standing(0, Some(id), running(secs));
        }
        empty_box("the box of the one past eight");
        assert!(spares.take_timer(0).is_none(), "one box");
        let standing = std::iter::from_fn(|| spares.take_standing(0, id)).count();
        assert_eq!(standing, STRIPE_STANDING, "eight kept running");
        spares.keep_standing(0, Some(id), running(3));
        spares.keep_standing(0, Some(id), running(3));
        assert!(
            spares.take_standing(0, other).is_none(),
            "another runtime's"
        );
        assert!(
            spares.take_standing(0, id).is_none(),
            "dropped for another runtime"
        );
        empty_box("their boxes");
        empty_box("their boxes");
        spares.keep_standing(0, Some(id), running(4));
        spares.keep_standing(0, None, running(5));
        empty_box("the box of one with no runtime");
        rt.block_on(tokio::time::advance(Duration::from_secs(4)));
        spares.keep_standing(0, None, KeptTimer::new());
        assert!(
            spares.take_standing(0, id).is_none(),
            "an elapsed one dropped"
        );
        empty_box("and its box kept");
        spares.keep_standing(0, Some(id), KeptTimer::new());
        assert!(
            spares.take_timer(0).is_none(),
            "a timer never made is dropped"
        );
        // Full, with one that fired: a later one takes its place.
        for secs in 1..=STRIPE_STANDING as u64 {
            spares.keep_standing(0, Some(id), running(secs * 10));
        }
        rt.block_on(tokio::time::advance(Duration::from_secs(11)));
        spares.keep_standing(0, Some(id), running(100));
        empty_box("the box of the one that fired");
        let mut at: Vec<_> = std::iter::from_fn(|| spares.take_standing(0, id))
            .filter_map(|t| t.get().map(tokio::time::Sleep::deadline))
            .collect();
        at.sort();
        assert_eq!(at.len(), STRIPE_STANDING, "eight kept running");
        assert_eq!(
            at.first(),
            Some(&(now + Duration::from_secs(20))),
            "not the fired one"
        );
        assert_eq!(
            at.last(),
            Some(&(now + Duration::from_secs(100))),
            "the later one"
        );
        drop(kept);
        assert_eq!(task.0.load(Ordering::Relaxed), 0, "no task woken");
    }
}
