//! Where an inline run's future is in one poll's passes over its drivers, and what they
//! have spent: read by the drivers it polls, which start nodes in the first pass up to
//! `INLINE_MAX` per poll, and in the passes after it on the passes' budget
//! ([`REPOLL_MAX`]), paying tokio's coop budget one unit per [`COOP_EVERY`] starts, before
//! them, rather than one per start, and give the task's turn back when any is spent. The
//! unit the run's start spent pays for its first [`COOP_EVERY`] first-pass starts. The
//! future pays for its polls of drivers in the passes after the first at the same rate,
//! at the end of each pass.
//!
//! The passes' budget is the run's; tokio's is the task's, shared by every run the task
//! awaits, side by side or nested in a node: paying it at that rate keeps a task's work
//! between two turns given back bounded, however many runs it awaits: some 1 024 starts
//! and polls, and for each run at most the pass that spent the last unit, which polls each
//! of its woken nodes once. A poll that begins with the task's budget spent starts no
//! node.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU16, Ordering};
use std::task::{Context, Poll};

use super::joined::REPOLL_MAX;

/// How many polls of drivers, or node starts, in passes after the first spend one unit of
/// tokio's coop budget: the passes' budget, [`REPOLL_MAX`], is eight times tokio's 128.
pub(super) const COOP_EVERY: usize = 8;

/// Spends a unit of the task's coop budget for every [`COOP_EVERY`] of the `spent` polls
/// that `paid` does not cover yet, and counts them in `paid`. Returns whether the budget
/// lasted; if not, tokio has woken `cx`'s waker.
#[inline]
pub(super) fn pay_coop(spent: usize, paid: &mut usize, cx: &mut Context<'_>) -> bool {
    spent < *paid + COOP_EVERY || pay_coop_due(spent, paid, cx)
}

/// [`pay_coop`] with at least a unit due.
#[inline(never)]
fn pay_coop_due(spent: usize, paid: &mut usize, cx: &mut Context<'_>) -> bool {
    while *paid + COOP_EVERY <= spent {
        *paid += COOP_EVERY;
        if !spend_coop_unit(cx) {
            return false;
        }
    }
    true
}

/// Spends what is left of the task's coop budget, as a task whose budget runs out gives
/// its turn back: tokio wakes `cx`'s waker, and the tasks it spawned in this poll go to
/// its worker's queue, where an idle worker may take them, rather than run at once in its
/// place (tokio runs a task just spawned next, in the spawner's place, while the budget
/// lasts). At most [`COOP_BUDGET`] units: an unconstrained task has no end to its budget.
pub(in crate::engine) fn spend_all_coop(cx: &mut Context<'_>) {
    for _ in 0..COOP_BUDGET {
        if !spend_coop_unit(cx) {
            return;
        }
    }
}

/// Tokio's coop budget for one poll of a task, in units.
const COOP_BUDGET: usize = 128;

/// Spends one unit of the task's coop budget; whether there was one. If not, tokio has
/// woken `cx`'s waker.
fn spend_coop_unit(cx: &mut Context<'_>) -> bool {
    match tokio::task::coop::poll_proceed(cx) {
        Poll::Ready(coop) => {
            coop.made_progress();
            true
        }
        Poll::Pending => false,
    }
}

const _: () = assert!(
    REPOLL_MAX < u16::MAX as usize,
    "node starts are counted in a u16"
);

const _: () = assert!(
    2 * COOP_EVERY <= u8::MAX as usize,
    "first-pass starts fit a u8"
);

/// See the module docs. Written and read only by code the run's future polls, in its
/// poll, hence `Relaxed`.
#[derive(Debug)]
pub(in crate::engine) struct PassBudget {
    /// The future is polling its drivers again, in passes after the first of its poll: a
    /// spent budget there gives the task's turn back and spreads nothing.
    repolling: AtomicBool,
    /// Nodes started in passes after the first of this poll.
    starts: AtomicU16,
    /// A driver the future polls gave the task's turn back in this poll: no other pass
    /// follows.
    turn_given_back: AtomicBool,
    /// Nodes started in the first pass of this poll.
    first_pass_started: AtomicU8,
    /// Where the poll is in paying for the nodes started in its first pass: below
    /// [`COOP_EVERY`], how many of the first [`COOP_EVERY`], which the run's start paid for
    /// in the poll that started it, have started; from there on, [`COOP_EVERY`] plus how
    /// many of the current [`COOP_EVERY`] have, the first of which paid a unit.
    first_pass_starts: AtomicU8,
}

impl PassBudget {
    /// The first pass of no poll yet.
    pub(super) fn new() -> Self {
        PassBudget {
            repolling: AtomicBool::new(false),
            starts: AtomicU16::new(0),
            turn_given_back: AtomicBool::new(false),
            first_pass_started: AtomicU8::new(0),
            first_pass_starts: AtomicU8::new(0),
        }
    }

    /// A driver the run's future polls gives the task's turn back: its budget is spent.
    #[inline]
    pub(in crate::engine) fn give_turn_back(&self) {
        self.turn_given_back.store(true, Ordering::Relaxed);
    }

    /// Whether the run's future is in a pass after the first of its poll.
    #[inline]
    pub(in crate::engine) fn is_repolling(&self) -> bool {
        self.repolling.load(Ordering::Relaxed)
    }

    /// A driver the run's future polls, with `cx`, starts a node in a pass after the first:
    /// whether the passes' budget, [`REPOLL_MAX`] nodes per poll of the future, allows it,
    /// and the task's coop budget, of which the first of every [`COOP_EVERY`] starts spends
    /// a unit, before they start: with none left, no node starts.
    #[inline]
    pub(in crate::engine) fn start_in_repoll(&self, cx: &mut Context<'_>) -> bool {
        let started = usize::from(self.starts.load(Ordering::Relaxed));
        if started >= REPOLL_MAX || (started % COOP_EVERY == 0 && !spend_coop_unit(cx)) {
            return false;
        }
        self.starts.store(started as u16 + 1, Ordering::Relaxed);
        true
    }

    /// A poll of the run's future begins: its first pass has started no node yet. Unless
    /// the run starts in this poll, whose start paid for its first [`COOP_EVERY`] nodes,
    /// the next first-pass start pays a unit: starts paid for in an earlier poll do not
    /// carry over, so a poll that begins with the task's budget spent starts no node.
    #[inline]
    pub(in crate::engine) fn poll_begins(&self, run_starts: bool) {
        self.first_pass_started.store(0, Ordering::Relaxed);
        if !run_starts {
            self.first_pass_starts
                .store(COOP_EVERY as u8, Ordering::Relaxed);
        }
    }

    /// A driver the run's future polls, with `cx`, starts a node in the first pass of a
    /// poll: whether that pass has started fewer than `most` nodes, and the task's coop
    /// budget allows it. The unit the run's start spent pays for its first [`COOP_EVERY`]
    /// such starts; the first of every [`COOP_EVERY`] after them spends a unit before it
    /// starts. With none left, no node starts, and tokio has woken `cx`'s waker. See
    /// [`poll_begins`](Self::poll_begins).
    #[inline]
    pub(in crate::engine) fn start_in_first_pass(&self, most: u8, cx: &mut Context<'_>) -> bool {
        let started = self.first_pass_started.load(Ordering::Relaxed);
        if started >= most {
            return false;
        }
        let at = usize::from(self.first_pass_starts.load(Ordering::Relaxed));
        if at == COOP_EVERY && !spend_coop_unit(cx) {
            return false;
        }
        self.first_pass_started
            .store(started + 1, Ordering::Relaxed);
        let next = if at + 1 == 2 * COOP_EVERY {
            COOP_EVERY
        } else {
            at + 1
        };
        self.first_pass_starts.store(next as u8, Ordering::Relaxed);
        true
    }

    /// A pass after the first is to begin: whether it may (no driver gave the task's turn
    /// back in this poll). If it may, the future is repolling from now.
    #[inline]
    pub(super) fn again(&self) -> bool {
        if self.turn_given_back.load(Ordering::Relaxed) {
            return false;
        }
        self.repolling.store(true, Ordering::Relaxed);
        true
    }

    /// The poll's passes are over: the next poll's budget is whole.
    #[inline]
    pub(super) fn over(&self) {
        self.repolling.store(false, Ordering::Relaxed);
        self.starts.store(0, Ordering::Relaxed);
        self.turn_given_back.store(false, Ordering::Relaxed);
    }
}
