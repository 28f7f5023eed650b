//! The timer that the drivers an inline run's future polls together share.
//!
//! Those drivers are polled with one waker, the run's, every one at each pass (see
//! `run/joined.rs`), so one timer wakes all of them. Their first attempts that wait are
//! armed on it instead of on a timer each: attempts started together, as the nodes of a
//! fan-out are, register one timer in tokio's wheel instead of one per node.
//!
//! The rule each attempt keeps is the one a driver's own timer keeps: the timer wakes the
//! attempt no later than its cut. Moving the timer earlier keeps it for every attempt on
//! it. Moving it later could break it for another, so it is moved later only:
//!
//! - when it elapsed: it woke the run's waker then, and every attempt still waiting on it
//!   is polled after that;
//! - when no attempt was counted on it since its last move: those armed before that move
//!   check it again at their next poll, which comes after this move.
//!
//! Each move later is counted, and an attempt remembers the count when it last checked
//! the timer against its cut ([`Held::seen`]). An attempt that sees the count moved
//! checks again: if the timer now runs past its cut, it moves it back to its cut, or, when
//! that cut has passed, is cut. An attempt that cannot arm on the shared timer without
//! moving it later under another one uses its driver's own timer. An attempt keeps the
//! count's low 13 bits: every attempt armed on the timer is polled at each pass, and
//! between two of its polls each of the at most seven other drivers is polled at most
//! twice, starts at most `INLINE_MAX` nodes a poll, and each of those first attempts moves
//! the timer later at most twice: fewer moves than 8 192 ([`MOVES_BETWEEN_POLLS`]).
//!
//! A driver polled alone uses its own timer, as a chain's does, until the shared one is
//! made; drivers past the eighth, each woken on its own, and drivers moved out of the
//! run's future use theirs.

use std::task::{Context, Poll};

use tokio::time::Instant;

use super::held::{Armed, Held, seen_bits};
use crate::engine::driver::INLINE_MAX;
use crate::engine::run::joined::POLLED_TOGETHER;
use crate::engine::run::state::RunState;
use crate::policy::deadline::{KeptTimer, Sharers};

/// The most times the shared timer moves later between two polls of an attempt armed on it;
/// see the module's docs. Fewer than the 2^13 values of [`Held::seen`].
const MOVES_BETWEEN_POLLS: usize = 2 * (POLLED_TOGETHER - 1) * INLINE_MAX as usize * 2;
const _: () = assert!(MOVES_BETWEEN_POLLS < 1 << 13);

/// The timer the drivers an inline run's future polls together share. What its attempts
/// need to keep their cuts, its [`Sharers`], is kept in the timer's allocation: how often
/// it was moved later or made, and how many attempts were armed on it since its last move
/// and have not ended (more, never fewer, when an attempt ends without saying so, as a
/// cancelled one does). See the module's docs.
#[derive(Debug, Default)]
pub(in crate::engine) struct SharedTimer(KeptTimer);

impl SharedTimer {
    /// Whether the timer was made: once it is, the drivers polled together use it, however
    /// few they are.
    #[inline]
    pub(in crate::engine) fn is_made(&self) -> bool {
        self.0.is_made()
    }

    /// The timer, to be kept for a later run, running or as an empty box, as the run's
    /// future is dropped.
    pub(in crate::engine) fn take_timer(&mut self) -> KeptTimer {
        std::mem::take(&mut self.0)
    }

    /// The timer's counters; zero before it is made.
    #[inline]
    fn sharers(&mut self) -> Sharers {
        self.0.sharers().map_or_else(Sharers::default, |s| *s)
    }

    /// The timer was moved later or made: attempts armed on it check it again.
    #[inline]
    fn moved(&mut self) {
        if let Some(sharers) = self.0.sharers() {
            sharers.moves = sharers.moves.wrapping_add(1);
            sharers.armed = 0;
        }
    }

    /// `held`'s attempt is armed on the timer as it is now.
    #[inline]
    fn count(&mut self, held: &mut Held) {
        held.set_armed(Armed::Shared);
        if let Some(sharers) = self.0.sharers() {
            held.set_seen(sharers.moves);
            sharers.armed += 1;
        }
    }

    /// Whether `held`'s attempt checked the timer since its last move.
    #[inline]
    fn seen_by(&mut self, held: Held) -> bool {
        held.seen() == seen_bits(self.sharers().moves)
    }
}

/// Arms node `id`'s first attempt, started at `start` and cut at `until`, on `shared`,
/// unless that would move the timer later under another attempt: returns whether it did.
pub(super) fn arm<I: Send + Sync + 'static>(
    run: &RunState<I>,
    (id, start, until): (u32, Instant, Instant),
    held: &mut Held,
    shared: &mut SharedTimer,
) -> bool {
    // Wakes the attempt by its cut, or early enough (`deadline::reach`).
    if shared.0.stands_for(until) {
        shared.count(held);
        return true;
    }
    let running = shared
        .0
        .get()
        .filter(|t| !t.is_elapsed())
        .map(|t| t.deadline());
    let others = shared.sharers().armed > 0;
    match running {
        Some(at) if at > until => super::set_unfloored(run, &mut shared.0, id, start, until),
        Some(_) if others => return false,
        // Running earlier for no attempt, elapsed, or never made.
        _ => {
            super::set_unfloored(run, &mut shared.0, id, start, until);
            shared.moved();
        }
    }
    shared.count(held);
    true
}

/// [`first_attempt::wait`](super::wait), for an attempt armed on `shared`.
#[inline]
pub(super) fn wait<I: Send + Sync + 'static>(
    run: &RunState<I>,
    (id, start): (u32, Instant),
    held: &mut Held,
    shared: &mut SharedTimer,
    cx: &mut Context<'_>,
) -> Poll<()> {
    if !shared.seen_by(*held) {
        // Moved later since this attempt looked: perhaps past its cut.
        let until = cut(run, id, start);
        let past = shared
            .0
            .get()
            .filter(|t| !t.is_elapsed() && t.deadline() > until);
        if past.is_some() {
            if until <= run.core.now() {
                return Poll::Ready(());
            }
            super::set_unfloored(run, &mut shared.0, id, start, until);
        }
        shared.count(held);
    }
    poll(run, (id, start), held, shared, cx)
}

/// Polls the shared timer for an attempt armed on it, which checked it since its last
/// move: `Ready` when the attempt's cut passed.
#[inline]
pub(super) fn poll<I: Send + Sync + 'static>(
    run: &RunState<I>,
    (id, start): (u32, Instant),
    held: &mut Held,
    shared: &mut SharedTimer,
    cx: &mut Context<'_>,
) -> Poll<()> {
    if shared.0.poll(cx).is_none_or(|polled| polled.is_pending()) {
        return Poll::Pending;
    }
    // Elapsed: at this attempt's cut, or at an earlier instant, another's.
    let until = cut(run, id, start);
    match shared.0.get() {
        Some(t) if t.deadline() < until => {
            super::set_unfloored(run, &mut shared.0, id, start, until);
            shared.moved();
            shared.count(held);
            shared.0.poll(cx).unwrap_or(Poll::Pending)
        }
        _ => Poll::Ready(()),
    }
}

/// Node `id`'s first attempt, armed on `shared` or not, ended or was handed to the onion.
#[inline]
pub(in crate::engine) fn leave(held: Held, shared: &mut SharedTimer) {
    if held.armed() == Armed::Shared && shared.seen_by(held) {
        if let Some(sharers) = shared.0.sharers() {
            debug_assert!(
                sharers.armed > 0,
                "an attempt counted on the timer leaves it"
            );
            sharers.armed = sharers.armed.saturating_sub(1);
        }
    }
}

/// The cut of an attempt that was armed with one: the same function of its start, its
/// policy and the run's deadline each time.
fn cut<I: Send + Sync + 'static>(run: &RunState<I>, id: u32, start: Instant) -> Instant {
    match super::cut(run, id, start) {
        Some(until) => until,
        None => unreachable!("an attempt armed on a timer has a cut"),
    }
}
