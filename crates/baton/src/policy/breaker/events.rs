//! States, transitions, and how transitions reach listeners.
//!
//! # Delivery: exactly once, in order, outside the lock
//!
//! A transition is decided and numbered under the breaker's mutex: its `seq` is the
//! breaker's generation after the change. That is 1 for the first transition, then 2, 3, …
//! with no gaps. It is appended to an outbox in the same critical section, so the outbox is
//! always in `seq` order. After releasing the mutex, the thread that made a transition
//! becomes the *deliverer* unless another thread already is: it takes the whole outbox,
//! calls every listener for each transition in order with no lock held, and loops until
//! the outbox is empty under the mutex before giving up the role. Hence:
//!
//! - each transition is delivered exactly once, as it leaves the outbox exactly once;
//! - in transition order, as there is one deliverer at a time and the outbox is in `seq`
//!   order;
//! - nothing is lost when two threads transition at once: the late one finds a deliverer
//!   at work, which sees its transition before stepping down;
//! - listener code never runs under the state lock, and a listener may call back into the
//!   breaker, with `state()` or `try_acquire()`: a transition it causes is queued and
//!   delivered right after it returns, on the same thread, not deadlocked.
//!
//! A listener that panics is caught, logged with `tracing::error!`, and changes nothing:
//! the other listeners and later transitions are still delivered.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

/// The states of a circuit breaker.
///
/// `Display` prints `closed`, `open`, `half_open`, `recovering`, `isolated` and
/// `forced_closed`.
///
/// ```
/// use baton_graph::{CircuitBreaker, breaker::BreakerState};
///
/// let breaker = CircuitBreaker::builder("inventory").build()?;
/// assert_eq!(breaker.state(), BreakerState::Closed);
/// assert_eq!(BreakerState::HalfOpen.to_string(), "half_open");
/// # Ok::<(), baton_graph::breaker::BreakerConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BreakerState {
    /// Calls pass; failures are counted against the trip rules.
    Closed,
    /// Calls are rejected until the open duration, the cooldown, has elapsed.
    Open,
    /// A limited number of probe calls pass; their results decide between closed and open.
    HalfOpen,
    /// Only with a [recovery ramp](super::CircuitBreakerBuilder::recovery_ramp): the probes
    /// succeeded, and a share of calls rising over the ramp passes while the rest are
    /// rejected. Failures are counted against the trip rules, as when closed.
    Recovering,
    /// Open by hand with [`CircuitBreaker::isolate`](super::CircuitBreaker::isolate): every
    /// call is rejected, and no cooldown ends it; only
    /// [`reset`](super::CircuitBreaker::reset) or `force_closed` does.
    Isolated,
    /// Closed by hand with [`CircuitBreaker::force_closed`](super::CircuitBreaker::force_closed):
    /// every call passes, no result is counted, nothing trips it until
    /// [`reset`](super::CircuitBreaker::reset) or `isolate`.
    ForcedClosed,
}

impl BreakerState {
    /// `"closed"`, `"open"`, `"half_open"`, `"recovering"`, `"isolated"` or
    /// `"forced_closed"`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
            BreakerState::Recovering => "recovering",
            BreakerState::Isolated => "isolated",
            BreakerState::ForcedClosed => "forced_closed",
        }
    }
}

impl fmt::Display for BreakerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a breaker changed state.
///
/// Rates are fractions in `[0, 1]`, where `0.5` is 50 %.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum TransitionReason {
    /// Closed → open: `count` failures in a row.
    ConsecutiveFailures {
        /// The number of consecutive failures that tripped it: the configured threshold.
        count: u32,
    },
    /// Closed → open: the failure rate over the sliding window reached its threshold, as
    /// resilience4j's `failureRateThreshold`.
    FailureRate {
        /// Failed calls / calls in the window.
        rate: f64,
        /// Calls in the window when it tripped; at least `min_calls`.
        calls: u32,
    },
    /// Closed → open: the share of slow calls over the window reached its threshold; or
    /// half-open → open: the share of slow probes did. As resilience4j's
    /// `slowCallRateThreshold`.
    SlowCallRate {
        /// Slow calls / calls. Calls are those in the window when closed, and the configured
        /// probes when half-open.
        rate: f64,
        /// The denominator of `rate`.
        calls: u32,
    },
    /// Open → half-open: the open duration elapsed and a caller asked for a permit; that
    /// caller holds the first probe.
    CooldownElapsed,
    /// Half-open → open: a probe failed. The cooldown starts afresh.
    ProbeFailed,
    /// Half-open → closed, or → recovering with a recovery ramp: every probe of the
    /// half-open period succeeded.
    ProbesSucceeded {
        /// How many probes succeeded: the configured `half_open_probes`.
        probes: u32,
    },
    /// Half-open → open: probes stayed unanswered for `half_open_max_wait`; counted as a
    /// failure, as resilience4j's `maxWaitDurationInHalfOpenState`.
    ProbeTimedOut {
        /// The configured `half_open_max_wait`.
        waited: Duration,
    },
    /// Recovering → closed: the recovery ramp ended without a trip.
    RampCompleted {
        /// The configured ramp.
        ramp: Duration,
    },
    /// Any state → isolated: [`CircuitBreaker::isolate`](super::CircuitBreaker::isolate).
    Isolated,
    /// Any state → forced closed:
    /// [`CircuitBreaker::force_closed`](super::CircuitBreaker::force_closed).
    ForcedClosed,
    /// Any state → closed, every count and the cooldown's growth cleared:
    /// [`CircuitBreaker::reset`](super::CircuitBreaker::reset).
    Reset,
    /// A shared breaker lost its shared state because the store is down or slow. It judges
    /// alone, or admits or rejects everything, as its [`Unreachable`](super::Unreachable)
    /// setting says. `to` may equal `from`.
    SharedStateLost,
    /// A shared breaker reached its shared state again and follows it. `to` may equal
    /// `from`.
    SharedStateResynced,
    /// Closed → open: a shared breaker in a quorum mode opened fleet-wide because this
    /// many replicas tripped by their own counts within the quorum's window.
    ReplicasTripped {
        /// The replicas that had tripped; at least the quorum.
        replicas: u32,
    },
}

impl fmt::Display for TransitionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransitionReason::ConsecutiveFailures { count } => {
                write!(f, "{count} consecutive failures")
            }
            TransitionReason::FailureRate { rate, calls } => {
                write!(f, "failure rate {:.1} % over {calls} calls", rate * 100.0)
            }
            TransitionReason::SlowCallRate { rate, calls } => {
                write!(f, "slow-call rate {:.1} % over {calls} calls", rate * 100.0)
            }
            TransitionReason::CooldownElapsed => f.write_str("open duration elapsed"),
            TransitionReason::ProbeFailed => f.write_str("probe failed"),
            TransitionReason::ProbesSucceeded { probes } => {
                write!(f, "{probes} of {probes} probes succeeded")
            }
            TransitionReason::ProbeTimedOut { waited } => {
                write!(f, "probes unanswered after {waited:?}")
            }
            TransitionReason::RampCompleted { ramp } => {
                write!(f, "recovery ramp of {ramp:?} completed")
            }
            TransitionReason::Isolated => f.write_str("isolated by hand"),
            TransitionReason::ForcedClosed => f.write_str("forced closed by hand"),
            TransitionReason::Reset => f.write_str("reset by hand"),
            TransitionReason::SharedStateLost => f.write_str("shared state lost, judged locally"),
            TransitionReason::SharedStateResynced => f.write_str("shared state reached again"),
            TransitionReason::ReplicasTripped { replicas } => {
                write!(f, "{replicas} replicas tripped")
            }
        }
    }
}

/// One state change of a breaker, as listeners registered with
/// [`CircuitBreaker::on_transition`](super::CircuitBreaker::on_transition) receive it.
///
/// `Display`: ``circuit breaker `inventory` #1: closed -> open (3 consecutive failures)``.
///
/// ```
/// use std::sync::mpsc;
/// use std::time::Duration;
/// use baton_graph::{CircuitBreaker, breaker::{BreakerState, TransitionReason}};
///
/// let breaker = CircuitBreaker::builder("inventory").consecutive_failures(1).build()?;
/// let (tx, rx) = mpsc::channel();
/// breaker.on_transition(move |t, _| {
///     let _ = tx.send((t.from(), t.to(), t.reason()));
/// });
/// breaker.try_acquire()?.failure(Duration::from_millis(5));
/// let (from, to, reason) = rx.try_recv()?;
/// assert_eq!((from, to), (BreakerState::Closed, BreakerState::Open));
/// assert_eq!(reason, TransitionReason::ConsecutiveFailures { count: 1 });
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct BreakerTransition {
    pub(crate) breaker: Arc<str>,
    pub(crate) from: BreakerState,
    pub(crate) to: BreakerState,
    pub(crate) at: Instant,
    pub(crate) reason: TransitionReason,
    pub(crate) seq: u64,
}

impl BreakerTransition {
    /// The breaker's name.
    #[must_use]
    pub fn breaker(&self) -> &str {
        &self.breaker
    }

    /// The state before.
    #[must_use]
    pub fn from(&self) -> BreakerState {
        self.from
    }

    /// The state after.
    #[must_use]
    pub fn to(&self) -> BreakerState {
        self.to
    }

    /// When it happened, on tokio's clock, so tests on a paused clock see exact times.
    #[must_use]
    pub fn at(&self) -> Instant {
        self.at
    }

    /// Why it happened.
    #[must_use]
    pub fn reason(&self) -> TransitionReason {
        self.reason
    }

    /// The breaker's generation after this transition: 1 for its first transition, then
    /// 2, 3, … without gaps. Listeners receive transitions in increasing `seq`.
    /// [`BreakerPermit::generation`](super::BreakerPermit::generation) uses the same
    /// numbering.
    #[must_use]
    pub fn seq(&self) -> u64 {
        self.seq
    }
}

impl fmt::Display for BreakerTransition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "circuit breaker `{}` #{}: {} -> {} ({})",
            self.breaker, self.seq, self.from, self.to, self.reason
        )
    }
}

/// Logs `t` as a `tracing` event with fields `breaker`, `seq`, `from`, `to` and `reason`.
/// It logs at WARN when the breaker opens or is isolated, as calls are being rejected, or
/// is forced closed, as nothing then protects the downstream. It logs at INFO when the
/// breaker goes half-open, recovering or closed.
fn log(t: &BreakerTransition) {
    macro_rules! transition {
        ($level:ident, $message:literal) => {
            tracing::$level!(
                breaker = %t.breaker,
                seq = t.seq,
                from = %t.from,
                to = %t.to,
                reason = %t.reason,
                $message,
            )
        };
    }
    match t.to {
        BreakerState::Open => transition!(warn, "circuit breaker opened"),
        BreakerState::HalfOpen => transition!(info, "circuit breaker half-open"),
        BreakerState::Closed => transition!(info, "circuit breaker closed"),
        BreakerState::Recovering => transition!(info, "circuit breaker recovering"),
        BreakerState::Isolated => transition!(warn, "circuit breaker isolated"),
        BreakerState::ForcedClosed => transition!(warn, "circuit breaker forced closed"),
    }
}

/// A transition listener.
pub(crate) type Listener = Arc<dyn Fn(&BreakerTransition) + Send + Sync + 'static>;

/// Logs `t` and calls each listener on it, catching and logging panics. Never unwinds, so
/// the deliverer always gets to hand its role back.
pub(crate) fn notify(listeners: &[Listener], t: &BreakerTransition) {
    // A tracing subscriber is user code too.
    let _ = catch_unwind(|| log(t));
    for listener in listeners {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| listener(t))) {
            let message = payload
                .downcast_ref::<&'static str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "<non-string panic payload>".to_owned());
            tracing::error!(
                breaker = %t.breaker,
                seq = t.seq,
                panic = %message,
                "circuit breaker transition listener panicked; ignored",
            );
        }
    }
}
