//! [`Held`]: what the driver holds for a policy node's first attempt, in one word.

use std::num::NonZeroU64;

use crate::policy::breaker::Ticket;

/// What the driver holds for a policy node's first attempt while it polls it: the breaker
/// permit's ticket, when the node has a breaker, whether a timer wakes it in time for the
/// attempt's cut (the driver's own or the one the drivers polled together share, with the
/// low bits of that timer's moves the attempt last saw), and whether that cut is the
/// attempt's start plus its timeout. Only a closed breaker's ticket is held, never a
/// probe's, and it owns nothing.
///
/// Packed in one nonzero word, so that the driver moves it, and `Option<Held>`, as one
/// register: the ticket's generation in the low [`GENERATION`] bits, then flags, then the
/// 13 [`SEEN`] bits.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(in crate::engine) struct Held(NonZeroU64);

/// The ticket's generation. A breaker's generations are 45 bits wide.
const GENERATION: u64 = (1 << 45) - 1;
/// The node has a breaker: the generation is its ticket's.
const TICKET: u64 = 1 << 45;
/// [`Armed`], two bits.
const ARMED_SHIFT: u32 = 46;
const ARMED: u64 = 0b11 << ARMED_SHIFT;
/// The attempt's cut is its start plus its timeout: it has no budget and no run deadline.
const TIMEOUT_ONLY: u64 = 1 << 48;
/// The low bits of the shared timer's moves when the attempt last checked that timer
/// against its cut ([`Armed::Shared`]), 13 bits.
const SEEN_SHIFT: u32 = 49;
const SEEN: u64 = ((1 << 13) - 1) << SEEN_SHIFT;
/// Always set: a `Held` is never zero.
const PRESENT_BIT: NonZeroU64 = match NonZeroU64::new(1 << 63) {
    Some(bit) => bit,
    None => unreachable!(),
};

/// Whether the driver's timer wakes it in time for this attempt's cut; see
/// `first_attempt::wait`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Armed {
    /// The attempt has not waited yet. The timer, if the driver has one, is another
    /// attempt's, ended or handed to the onion, and may be running at an instant later
    /// than this attempt's cut, or have elapsed.
    No = 0,
    /// The attempt has no cut, because it has no timeout, deadline or budget: it waits
    /// untimed.
    Untimed = 1,
    /// The timer is set for this attempt's cut or, left there, for an earlier instant:
    /// another attempt's cut. It is moved to this one's when it elapses there.
    Yes = 2,
    /// As `Yes`, with the timer the drivers polled together share instead of the driver's
    /// own; see `first_attempt/shared.rs`.
    Shared = 3,
}

impl Held {
    /// Holds `ticket`, a closed breaker's or none, for an attempt that has not waited yet;
    /// `timeout_only`: its cut is its start plus its timeout.
    pub(super) fn new(ticket: Option<Ticket>, timeout_only: bool) -> Self {
        let mut bits = if timeout_only { TIMEOUT_ONLY } else { 0 };
        if let Some(ticket) = ticket {
            debug_assert!(!ticket.probe, "only a closed breaker's ticket is held");
            debug_assert!(ticket.generation <= GENERATION);
            bits |= TICKET | (ticket.generation & GENERATION);
        }
        Held(PRESENT_BIT | bits)
    }

    /// The breaker's ticket, if the node has a breaker.
    #[inline]
    pub(super) fn ticket(self) -> Option<Ticket> {
        let bits = self.0.get();
        (bits & TICKET != 0).then_some(Ticket {
            generation: bits & GENERATION,
            probe: false,
        })
    }

    #[inline]
    pub(super) fn armed(self) -> Armed {
        match (self.0.get() & ARMED) >> ARMED_SHIFT {
            0 => Armed::No,
            1 => Armed::Untimed,
            2 => Armed::Yes,
            _ => Armed::Shared,
        }
    }

    pub(super) fn set_armed(&mut self, armed: Armed) {
        let bits = (self.0.get() & !ARMED) | ((armed as u64) << ARMED_SHIFT);
        self.0 = PRESENT_BIT | bits;
    }

    /// The attempt's cut is its start plus its timeout, if it has one.
    #[inline]
    pub(super) fn timeout_only(self) -> bool {
        self.0.get() & TIMEOUT_ONLY != 0
    }

    /// The low 13 bits of the shared timer's moves when this attempt last checked it; see
    /// [`Armed::Shared`].
    #[inline]
    pub(super) fn seen(self) -> u32 {
        ((self.0.get() & SEEN) >> SEEN_SHIFT) as u32
    }

    /// Remembers the low 13 bits of `moves`, the shared timer's, as [`seen`](Self::seen).
    pub(super) fn set_seen(&mut self, moves: u32) {
        let seen = (u64::from(moves) << SEEN_SHIFT) & SEEN;
        self.0 = PRESENT_BIT | (self.0.get() & !SEEN) | seen;
    }
}

/// The low bits of `moves` that a [`Held`] keeps as [`Held::seen`].
#[inline]
pub(super) fn seen_bits(moves: u32) -> u32 {
    moves & ((1 << 13) - 1)
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("ticket", &self.ticket())
            .field("armed", &self.armed())
            .field("timeout_only", &self.timeout_only())
            .field("seen", &self.seen())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_keeps_its_ticket_and_flags_in_one_word() {
        assert_eq!(std::mem::size_of::<Option<Held>>(), 8);
        let ticket = Ticket {
            generation: GENERATION,
            probe: false,
        };
        let mut held = Held::new(Some(ticket), true);
        assert_eq!(
            (held.ticket(), held.armed(), held.timeout_only()),
            (Some(ticket), Armed::No, true)
        );
        held.set_armed(Armed::Yes);
        assert_eq!((held.ticket(), held.armed()), (Some(ticket), Armed::Yes));
        held.set_armed(Armed::Untimed);
        assert_eq!(held.armed(), Armed::Untimed);
        held.set_armed(Armed::Shared);
        held.set_seen(u32::MAX);
        assert_eq!(
            (
                held.ticket(),
                held.armed(),
                held.seen(),
                held.timeout_only()
            ),
            (Some(ticket), Armed::Shared, seen_bits(u32::MAX), true)
        );
        held.set_seen(1 << 13);
        assert_eq!((held.seen(), held.armed()), (0, Armed::Shared));
        let bare = Held::new(None, false);
        assert_eq!(
            (bare.ticket(), bare.armed(), bare.timeout_only()),
            (None, Armed::No, false)
        );
    }
}
