//! The script's reply, and the codes it shares with the Rust side.

use std::time::Duration;

use baton_graph::shared::SharedView;
use baton_graph::{BreakerState, TransitionReason};
use redis::{FromRedisValue, ParsingError, Value};

/// A manual transition's code (`a1` of `ctl`).
pub(crate) fn control_code(op: baton_graph::ManualControl) -> u8 {
    match op {
        baton_graph::ManualControl::Isolate => 1,
        baton_graph::ManualControl::ForceClosed => 2,
        _ => 3,
    }
}

/// A probe result's code (`a2` of `pres`).
pub(crate) const PROBE_SUCCESS: u8 = 1;
pub(crate) const PROBE_FAILURE: u8 = 2;
pub(crate) const PROBE_RELEASED: u8 = 3;

/// `{state, generation, reason, reason argument, rate, open ms left, probe slot}`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reply {
    pub(crate) state: BreakerState,
    pub(crate) generation: u64,
    pub(crate) reason: TransitionReason,
    pub(crate) open_for: Duration,
    /// The probe slot granted (0: none).
    pub(crate) slot: u32,
}

impl Reply {
    pub(crate) fn view(&self) -> SharedView {
        let mut view = SharedView::new(self.state, self.reason);
        view.open_for = self.open_for;
        view
    }
}

fn state(code: i64) -> BreakerState {
    match code {
        1 => BreakerState::Open,
        2 => BreakerState::HalfOpen,
        4 => BreakerState::ForcedClosed,
        5 => BreakerState::Isolated,
        _ => BreakerState::Closed,
    }
}

fn reason(code: i64, arg: u32, rate: f64) -> TransitionReason {
    match code {
        1 => TransitionReason::ConsecutiveFailures { count: arg },
        2 => TransitionReason::FailureRate { rate, calls: arg },
        3 => TransitionReason::CooldownElapsed,
        4 => TransitionReason::ProbeFailed,
        5 => TransitionReason::ProbesSucceeded { probes: arg },
        7 => TransitionReason::Isolated,
        8 => TransitionReason::ForcedClosed,
        _ => TransitionReason::Reset,
    }
}

impl FromRedisValue for Reply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let (s, generation, r, arg, rate, left, slot): (i64, u64, i64, i64, String, u64, u32) =
            FromRedisValue::from_redis_value(v)?;
        let arg = u32::try_from(arg).unwrap_or(u32::MAX);
        Ok(Reply {
            state: state(s),
            generation,
            reason: reason(r, arg, rate.parse().unwrap_or(0.0)),
            open_for: Duration::from_millis(left),
            slot,
        })
    }
}
