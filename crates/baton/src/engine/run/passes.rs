//! Where an inline run's future is in one poll's passes over its drivers, and what the
//! passes after the first have spent: read by the drivers it polls, which start nodes
//! there on the passes' budget ([`REPOLL_MAX`]), paying tokio's coop budget one unit per
//! [`COOP_EVERY`] starts, before them, rather than one per start, and give the task's turn
//! back when either is spent. The future pays for its polls of drivers in those passes at
//! the same rate, at the end of each pass.
//!
//! The passes' budget is the run's; tokio's is the task's, shared by every run the task
//! awaits, side by side or nested in a node: paying it at that rate keeps a task's work
//! between two turns given back bounded, however many runs it awaits: some 1 024 starts
//! and polls, and for each run at most the pass that spent the last unit, which polls each
//! of its woken nodes once. A poll that begins with the task's budget spent starts no
//! node.

use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
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
}

impl PassBudget {
    /// The first pass of no poll yet.
    pub(super) fn new() -> Self {
        PassBudget {
            repolling: AtomicBool::new(false),
            starts: AtomicU16::new(0),
            turn_given_back: AtomicBool::new(false),
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
