//! The breaker script's reply: named fields, read into one typed value.

use std::time::Duration;

use baton_graph::breaker::{BreakerState, TransitionReason};
use baton_graph::shared::SharedView;
use redis::{FromRedisValue, ParsingError, Value};

/// What the script answers, whatever the operation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reply {
    pub(crate) state: BreakerState,
    /// The shared generation the reply answers with.
    pub(crate) generation: u64,
    /// The life of the shared state it belongs to (a new one after the server lost it).
    pub(crate) epoch: String,
    pub(crate) reason: TransitionReason,
    /// Open: the time left until the cooldown ends.
    pub(crate) open_for: Duration,
    /// The probe slot granted (0: none).
    pub(crate) slot: u32,
    /// Redis's clock when it answered, in milliseconds.
    pub(crate) now_ms: u64,
    /// Whether the breaker's rules were stored (if not, nothing changed).
    pub(crate) configured: bool,
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
        10 => TransitionReason::ReplicasTripped { replicas: arg },
        _ => TransitionReason::Reset,
    }
}

/// The fields of a reply by name, as the script sent them.
#[derive(Default)]
struct Fields {
    state: i64,
    generation: u64,
    epoch: String,
    reason: i64,
    rarg: i64,
    rate: String,
    open_ms: u64,
    slot: u32,
    now: u64,
    rules: i64,
}

impl FromRedisValue for Reply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let items: Vec<Value> = FromRedisValue::from_redis_value(v)?;
        let mut f = Fields::default();
        let mut it = items.into_iter();
        while let (Some(name), Some(value)) = (it.next(), it.next()) {
            let name: String = FromRedisValue::from_redis_value(name)?;
            match name.as_str() {
                "state" => f.state = FromRedisValue::from_redis_value(value)?,
                "gen" => f.generation = FromRedisValue::from_redis_value(value)?,
                "epoch" => f.epoch = FromRedisValue::from_redis_value(value)?,
                "reason" => f.reason = FromRedisValue::from_redis_value(value)?,
                "rarg" => f.rarg = FromRedisValue::from_redis_value(value)?,
                "rate" => f.rate = FromRedisValue::from_redis_value(value)?,
                "open_ms" => f.open_ms = FromRedisValue::from_redis_value(value)?,
                "slot" => f.slot = FromRedisValue::from_redis_value(value)?,
                "now" => f.now = FromRedisValue::from_redis_value(value)?,
                "rules" => f.rules = FromRedisValue::from_redis_value(value)?,
                _ => {}
            }
        }
        let arg = u32::try_from(f.rarg).unwrap_or(u32::MAX);
        Ok(Reply {
            state: state(f.state),
            generation: f.generation,
            epoch: f.epoch,
            reason: reason(f.reason, arg, f.rate.parse().unwrap_or(0.0)),
            open_for: Duration::from_millis(f.open_ms),
            slot: f.slot,
            now_ms: f.now,
            configured: f.rules == 1,
        })
    }
}
