//! The drivers an inline run polls in its own future: those it "spawned" while it had not
//! spread: nodes that wait, and the nodes that run after them in the same driver.
//!
//! The first [`POLLED_TOGETHER`] of them are held in a list and polled with the run's
//! waker, every one at each pass, as `tokio::join!` polls its futures: no allocation per
//! driver, no waker of its own, no list of those woken to keep. A driver not woken is then
//! polled for nothing, which a future allows, and which costs less than keeping track, for
//! a few drivers. Past them, drivers go to a [`ReadySet`], which gives each its own waker
//! and keeps the list of those woken, as a `FuturesUnordered` does, so a wake-up polls them
//! and no other, however many wait; see `joined/ready_set.rs`.
//!
//! The run's waker is a [`Woken`] of its own, not the awaiting task's: a driver woken while
//! the future polls its drivers, as one whose I/O was ready at once, wakes no task. The
//! future polls its drivers again in the same poll, pass after pass, while a pass was woken,
//! tokio's coop budget lasts, no driver gave the task's turn back (it started its most
//! nodes for one poll) and the passes' budget lasts: until [`REPOLL_MAX`] polls of
//! drivers, or as many nodes started, in passes after the first, which pay tokio's budget
//! one unit per eight; then it wakes its task and returns. See `joined/woken.rs` and
//! `passes.rs`.
//!
//! A driver spawned while the run is local goes to the run's [`Inbox`] first. Only code
//! that the run's future polls spawns while the run is local: its drivers, in this poll. So
//! the inbox is pushed to on the thread that polls the future, within that poll, and
//! [`Joined::poll`] looks at it again after polling its drivers, before it returns: a
//! push wakes nobody, and none is missed. The `joined_loom_tests` module model-checks
//! this, with the drivers' wake-ups coming from other threads and the future moved to
//! another task between two polls.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};

use std::sync::Arc;

use futures_util::task::waker_ref;

use super::passes::pay_coop;
use crate::util::sync::{AtomicInt, Exclusive, StdSync, SyncFamily};

mod ready_set;
mod woken;
pub(in crate::engine) use ready_set::Places;
use ready_set::ReadySet;
pub(in crate::engine) use woken::Woken;

/// The most drivers an inline run's future polls together at each wake-up, as
/// `tokio::join!` polls its futures; past them, drivers join a set that polls only those
/// woken.
pub(in crate::engine) const POLLED_TOGETHER: usize = 8;

/// The budget of the passes after the first of one poll of the run's future: polls of
/// drivers until this many were spent, and as many nodes started
/// (`PassBudget::start_in_repoll`), as tokio's coop budget bounds a task's work per poll.
/// Those polls and starts spend one unit of tokio's budget per eight (`passes.rs`), not one
/// per start: on several workers, each turn a task gives back wakes an idle worker to look
/// for it, and work spread over many drivers gives back fewer turns. Drivers that wake
/// themselves without spending tokio's budget still give the task's turn back, and a
/// node's own I/O still spends tokio's budget.
pub(in crate::engine) const REPOLL_MAX: usize = 1024;

/// A driver the run's future polls together with others, with the run's waker, at each
/// pass: polled with what those drivers share, [`Shared`](Self::Shared), which the
/// future keeps.
pub(in crate::engine) trait PolledTogether: Future<Output = ()> + Unpin {
    /// What the drivers polled together share; for the engine's drivers, one timer
    /// (`SharedTimer`).
    type Shared: Default;
    /// Polls the driver, as [`Future::poll`] does, with what it shares with the others,
    /// `together` drivers in all, itself included.
    fn poll_together(
        &mut self,
        cx: &mut Context<'_>,
        shared: &mut Self::Shared,
        together: usize,
    ) -> Poll<()>;
}

/// What the run's future tells its run of its passes, and asks it. Generic over the
/// primitives of the run's waker, as [`Joined`] is.
pub(super) trait Passes<S: SyncFamily = StdSync> {
    /// A pass after the first is to begin: whether it may, which it may not once a driver
    /// gave the task's turn back in this poll. If it may, the run is repolling from now.
    fn again(&self) -> bool;
    /// The poll's passes are over.
    fn over(&self);
    /// The run's waker for its joined drivers, made now, in the middle of the first pass,
    /// for the task of `task`. A cancel wakes the future through it, from now on.
    fn woken(&self, task: &Waker) -> Arc<Woken<S>> {
        Woken::polling(task)
    }
    /// Whether the run was cancelled: the future then polls every driver it holds.
    fn cancelled(&self) -> bool {
        false
    }
}

/// The run's waker, as a graph keeps one for a later run, with the free places of the set
/// of drivers it woke, if the run had one, or of those it came with, which the run did
/// not use: see [`CancelWake::spare`].
pub(in crate::engine) struct SpareWaker<S: SyncFamily = StdSync> {
    woken: Arc<Woken<S>>,
    places: Option<Box<Places<S>>>,
}

impl<S: SyncFamily> SpareWaker<S> {
    /// `woken`, made unused, with no places, if nothing else holds it: see
    /// [`Woken::spare`].
    #[inline]
    pub(super) fn of(woken: Arc<Woken<S>>) -> Option<Self> {
        let woken = Woken::spare(woken)?;
        Some(SpareWaker {
            woken,
            places: None,
        })
    }
}

#[cfg(test)]
impl SpareWaker {
    /// Whether its waker is unused: see [`Woken::is_unused`].
    pub(in crate::engine) fn is_unused(&self) -> bool {
        self.woken.is_unused()
    }

    /// How many free places it keeps for a later run's set.
    pub(in crate::engine) fn places(&self) -> usize {
        self.places.as_ref().map_or(0, |p| p.len())
    }
}

impl<S: SyncFamily> std::fmt::Debug for SpareWaker<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpareWaker")
            .field("places", &self.places.as_ref().map_or(0, |p| p.len()))
            .finish_non_exhaustive()
    }
}

/// How a cancel reaches the drivers an inline run's future polls, which register no waker
/// of their own in their node's slot: it wakes the run's waker for them, and the future
/// then polls every driver it holds, which reads the run's cancel flag. The waker is made
/// when the first driver joins, maybe while the run is being cancelled on another thread.
/// Both sides take one lock after their own write (the waker; the cancel flag), so the
/// later of the two sees the other's write: the cancel finds the waker and wakes it, or the
/// future, polling its drivers after its lock, finds the flag set. Generic over its mutex:
/// std's, or loom's in the model-checking tests.
pub(in crate::engine) struct CancelWake<S: SyncFamily = StdSync> {
    woken: S::Mutex<Option<Arc<Woken<S>>>>,
}

impl<S: SyncFamily> CancelWake<S> {
    /// No waker yet; allocates nothing.
    pub(in crate::engine) fn new() -> Self {
        CancelWake {
            woken: Exclusive::new(None),
        }
    }

    /// Makes the run's waker for its joined drivers, for the task of `task`, of the unused
    /// one `spare()` gives, if any, which an earlier run of the graph left: a cancel wakes
    /// it from now on. The free places that came with it, if any, it holds for the run's
    /// set. Called once, by the future, before it polls the first driver.
    #[inline]
    pub(in crate::engine) fn make(
        &self,
        task: &Waker,
        spare: impl FnOnce() -> Option<SpareWaker<S>>,
    ) -> Arc<Woken<S>> {
        let woken = match spare() {
            Some(SpareWaker { woken, places }) => {
                woken.begin_polling(task);
                if let Some(places) = places {
                    woken.keep_places(places);
                }
                woken
            }
            None => Woken::polling(task),
        };
        self.woken.with(|kept| {
            debug_assert!(kept.is_none(), "the run's waker is made once");
            *kept = Some(Arc::clone(&woken));
        });
        woken
    }

    /// The run's cancel flag was set: wakes the run's waker for its joined drivers, if made.
    pub(in crate::engine) fn cancelled(&self) {
        if let Some(woken) = self.woken.with(|kept| kept.clone()) {
            woken.notify();
        }
    }

    /// The waker, if made, made unused for a later run of the graph, if nothing else holds
    /// it: the run's future and its drivers are dropped, and no waker made of it is kept
    /// anywhere. With it, the places the waker holds, if any: those of the run's set
    /// ([`Joined::leave_places`]), or those it came with if the run made no set; when
    /// nothing else holds them either (`Places::spare`), else without them. A waker is
    /// made only by a run with joined drivers, so a run whose state is dropped with none
    /// made leaves no places held.
    #[inline]
    pub(in crate::engine) fn spare(&mut self) -> Option<SpareWaker<S>> {
        let woken = self.woken.get_mut().take()?;
        // Held by no one else, it holds no places: they would hold it.
        if Arc::strong_count(&woken) == 1 {
            return SpareWaker::of(woken);
        }
        let places = woken.take_places();
        if let Some(places) = places.and_then(|places| places.spare(&woken)) {
            woken.reset();
            return Some(SpareWaker {
                woken,
                places: Some(places),
            });
        }
        SpareWaker::of(woken)
    }
}

impl<S: SyncFamily> std::fmt::Debug for CancelWake<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelWake").finish_non_exhaustive()
    }
}

/// The drivers spawned by an inline run that has not spread, for its future to take in;
/// see the module docs. Generic over its mutex and flag: std's, or loom's in the
/// model-checking tests.
pub(in crate::engine) struct Inbox<F, S: SyncFamily = StdSync> {
    drivers: S::Mutex<Vec<F>>,
    /// It has drivers: set by whoever pushes one, cleared by the future that takes them.
    /// Both run on the thread that polls that future, in its poll, hence `Relaxed`.
    pushed: S::AtomicU8,
}

impl<F, S: SyncFamily> Inbox<F, S> {
    /// An empty inbox; allocates nothing.
    pub(in crate::engine) fn new() -> Self {
        Inbox {
            drivers: Exclusive::new(Vec::new()),
            pushed: AtomicInt::new(0),
        }
    }

    /// Adds `driver`, for the run's future to take in before its poll returns. Called only
    /// by code that future polls; see the module docs.
    pub(in crate::engine) fn push(&self, driver: F) {
        self.drivers.with(|drivers| {
            drivers.push(driver);
            self.pushed.store(1, Ordering::Relaxed);
        });
    }

    /// Every driver it holds, leaving it empty: the run's future is dropped, and those
    /// drivers with it, outside the inbox's lock. An inbox that was emptied by the last
    /// look of [`Joined::poll`], as it is unless a push came since, is not locked.
    pub(in crate::engine) fn take(&self) -> Vec<F> {
        if self.pushed.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        self.drivers.with(std::mem::take)
    }
}

/// See the module docs. Generic over the primitives of its set, as [`Inbox`] is.
pub(super) struct Joined<F: PolledTogether, S: SyncFamily = StdSync> {
    /// Up to [`POLLED_TOGETHER`] drivers, polled together.
    few: Vec<F>,
    /// What those drivers share.
    shared: F::Shared,
    /// The drivers past them, each woken on its own. Made when first needed, and boxed: a
    /// run's future, which holds this, is moved as any future is, and most runs never need
    /// the set.
    set: Option<Box<ReadySet<F, S>>>,
    /// The run's waker for its drivers, made with the first driver taken in. It holds
    /// the free places an earlier run left with it, if any, until the set is made.
    woken: Option<Arc<Woken<S>>>,
}

impl<F: PolledTogether, S: SyncFamily> Joined<F, S> {
    /// None yet; allocates nothing.
    pub(super) fn new() -> Self {
        Joined {
            few: Vec::new(),
            shared: F::Shared::default(),
            set: None,
            woken: None,
        }
    }

    /// What the drivers polled together share.
    pub(super) fn shared_mut(&mut self) -> &mut F::Shared {
        &mut self.shared
    }

    /// Whether no driver is held.
    pub(super) fn is_empty(&self) -> bool {
        self.few.is_empty() && self.set.as_deref().is_none_or(ReadySet::is_empty)
    }

    /// Leaves the places of its set, its drivers dropped, to the run's waker, for a later
    /// run of the graph ([`CancelWake::spare`]). The run's future is being dropped.
    #[inline]
    pub(super) fn leave_places(&mut self) {
        if let (Some(woken), Some(set)) = (&self.woken, self.set.take()) {
            woken.keep_places(set.into_places());
        }
    }

    /// Every driver held, leaving none.
    pub(super) fn take_all(&mut self) -> impl Iterator<Item = F> {
        let few = std::mem::take(&mut self.few);
        let set = self.set.take();
        few.into_iter()
            .chain(set.into_iter().flat_map(|set| set.into_drivers()))
    }

    /// Polls the drivers held, in passes: the few polled together, and those of the set
    /// woken since the last pass. A pass first takes in the drivers spawned since, from the
    /// run's `inbox`, and again while polling them spawned more: those are polled at once,
    /// as a spawned task would be. Another pass follows while the last was woken, within the
    /// budget the module docs give, and while `passes` allows it.
    /// Inlined into `Run::poll`, its one caller.
    #[inline(always)]
    pub(super) fn poll(
        &mut self,
        inbox: &Inbox<F, S>,
        cx: &mut Context<'_>,
        passes: &impl Passes<S>,
    ) {
        // A poll after one that gave the task's turn back goes on with the work it left,
        // as a pass after the first.
        let mut again = false;
        if let Some(woken) = &self.woken {
            woken.register(cx.waker());
            again = woken.begin_pass() && passes.again();
        }
        let (mut from, mut spent, mut paid) = (0, 0, 0);
        loop {
            if inbox.pushed.load(Ordering::Relaxed) != 0 {
                inbox.pushed.store(0, Ordering::Relaxed);
                self.take_inbox(inbox, cx, passes);
            }
            let Some(woken) = self.woken.as_ref() else {
                return;
            };
            let waker = waker_ref(woken);
            let mut few_cx = Context::from_waker(&waker);
            // A driver that ends leaves its place to the last one, not yet polled here.
            let mut at = from;
            while at < self.few.len() {
                spent += usize::from(again);
                let together = self.few.len();
                if self.few[at]
                    .poll_together(&mut few_cx, &mut self.shared, together)
                    .is_ready()
                {
                    self.few.swap_remove(at);
                } else {
                    at += 1;
                }
            }
            from = self.few.len();
            if let Some(set) = self.set.as_mut() {
                // A cancel wakes the run's waker, not each driver's place: every driver of
                // the set is polled, to see it.
                if passes.cancelled() {
                    set.add_all();
                }
                let polled = set.pass();
                if again {
                    spent += polled;
                }
            }
            if inbox.pushed.load(Ordering::Relaxed) != 0 {
                continue;
            }
            if woken.end_pass() {
                break;
            }
            // The pass is paid for before the budget is looked at: one can cross it.
            if !pay_coop(spent, &mut paid, cx)
                || spent >= REPOLL_MAX
                || !tokio::task::coop::has_budget_remaining()
                || !passes.again()
            {
                woken.give_turn_back();
                cx.waker().wake_by_ref();
                break;
            }
            again = true;
            woken.begin_pass();
            from = 0;
        }
        passes.over();
    }

    /// Takes in the drivers spawned since the last look at the inbox. With none held, the
    /// inbox's list becomes the held one, and the empty held one the inbox's: the first
    /// drivers do not move, and with [`POLLED_TOGETHER`] or fewer neither list allocates
    /// again; those past them go on to the set, through the inbox's new list.
    fn take_inbox(&mut self, inbox: &Inbox<F, S>, cx: &Context<'_>, passes: &impl Passes<S>) {
        if self.woken.is_none() {
            self.woken = Some(passes.woken(cx.waker()));
        }
        inbox.drivers.with(|drivers| {
            if self.is_empty() {
                std::mem::swap(&mut self.few, drivers);
                if self.few.len() <= POLLED_TOGETHER {
                    return;
                }
                drivers.extend(self.few.drain(POLLED_TOGETHER..));
            }
            for driver in drivers.drain(..) {
                self.take_in(driver);
            }
        });
    }

    /// Takes in one driver: among the few polled together while there is room and the set
    /// is empty, else in the set. A driver stays where it is taken in until it ends: the
    /// few are polled with the run's waker and a driver of the set with its place's, both
    /// made once, so a driver that waits registers its waker once per node.
    fn take_in(&mut self, driver: F) {
        let set_empty = self.set.as_deref().is_none_or(ReadySet::is_empty);
        if set_empty && self.few.len() < POLLED_TOGETHER {
            self.few.push(driver);
            return;
        }
        let woken = &self.woken;
        self.set
            .get_or_insert_with(|| {
                let Some(woken) = woken else {
                    unreachable!("the run's waker is made before its first driver is taken in");
                };
                Box::new(ReadySet::new(Arc::clone(woken), woken.take_places()))
            })
            .push(driver);
    }
}

#[cfg(test)]
mod joined_loom_tests;
