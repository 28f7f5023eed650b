//! What an operator reads and does by hand: a read-only snapshot of a breaker, and the
//! manual transitions.

use std::time::Duration;

use super::events::BreakerState;

/// A manual transition of a breaker: what [`CircuitBreaker::isolate`],
/// [`force_closed`](super::CircuitBreaker::force_closed) and
/// [`reset`](super::CircuitBreaker::reset) do.
///
/// [`CircuitBreaker::isolate`]: super::CircuitBreaker::isolate
/// [`CircuitBreaker`]: super::CircuitBreaker
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ManualControl {
    /// To [`BreakerState::Isolated`]: reject every call until a reset.
    Isolate,
    /// To [`BreakerState::ForcedClosed`]: admit every call, count nothing, until a reset.
    ForceClosed,
    /// To [`BreakerState::Closed`], with every count and the cooldown's growth cleared.
    Reset,
}

impl ManualControl {
    /// `"isolate"`, `"force_closed"` or `"reset"`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            ManualControl::Isolate => "isolate",
            ManualControl::ForceClosed => "force_closed",
            ManualControl::Reset => "reset",
        }
    }
}

/// A breaker's state and counts at one instant, read without changing anything: taking a
/// snapshot makes no transition and counts no call. An open breaker whose cooldown has
/// elapsed still reads `Open`. From [`CircuitBreaker::snapshot`](super::CircuitBreaker::snapshot).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct BreakerSnapshot {
    /// The state.
    pub state: BreakerState,
    /// The generation: the [`seq`](super::BreakerTransition::seq) of the last transition,
    /// or 0 before any, masked to 45 bits.
    pub generation: u64,
    /// Failures in a row since the last success, transition or reset, when closed or
    /// recovering.
    pub consecutive_failures: u32,
    /// The sliding window's counts, when a rate rule is set and the breaker is closed or
    /// recovering. Empty otherwise: the window is cleared at every transition.
    pub window: Option<WindowCounts>,
    /// Open: how long until the next caller may probe; zero once the cooldown elapsed.
    /// `None` in any other state.
    pub retry_after: Option<Duration>,
    /// Half-open: probe permits still free.
    pub probes_free: u32,
    /// Half-open: probe permits taken and not yet answered.
    pub probes_in_flight: u32,
    /// Trips since the breaker last closed, which is the exponent of the cooldown's growth.
    /// 0 again once it closed. See `trips_total` for the lifetime count.
    pub trips: u32,
    /// Trips in the breaker's lifetime, that is every transition to open. Never reset, not even
    /// by [`reset`](super::CircuitBreaker::reset). The number of transitions of every kind
    /// is the `generation`.
    pub trips_total: u64,
}

/// Calls in a breaker's sliding window, and how many failed or were slow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct WindowCounts {
    /// Calls in the window.
    pub calls: u32,
    /// Of them, failed.
    pub failures: u32,
    /// Of them, slow: taking at least `slow_calls`' `slower_than`.
    pub slow: u32,
}
