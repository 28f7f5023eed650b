//! [`UserCode`] says which code panicked, and [`CancelReason`] why a run was cancelled.

use std::fmt;

/// Which code a caught panic came from, as carried by
/// [`NodeError::Panicked`](super::NodeError::Panicked).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UserCode {
    /// The node's task: calling it, or polling the future it returned.
    Task,
    /// The node's fallback.
    Fallback,
    /// A router's selector.
    Selector,
    /// The retry predicate, `Retry::retry_if`.
    RetryPredicate,
    /// The breaker's error filter, `breaker_ignore`.
    BreakerFilter,
    /// A custom backoff's sequence of delays.
    Backoff,
    /// The closure that reads a retry's delay from the error, `Retry::delay_from`.
    RetryDelay,
    /// None of the above: code the scheduler called around them, such as a `tracing`
    /// subscriber, or a bug in baton. Please report it with the message.
    Scheduler,
}

impl fmt::Display for UserCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UserCode::Task => "task",
            UserCode::Fallback => "fallback",
            UserCode::Selector => "router selector",
            UserCode::RetryPredicate => "retry predicate",
            UserCode::BreakerFilter => "breaker filter",
            UserCode::Backoff => "backoff",
            UserCode::RetryDelay => "retry delay",
            UserCode::Scheduler => "the scheduler",
        })
    }
}

/// Why a run was cancelled.
///
/// ```
/// use baton_graph::run::CancelReason;
///
/// let reason = CancelReason::FailFast { node: "stock".into() };
/// assert_eq!(reason.to_string(), "fail-fast after `stock` failed");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelReason {
    /// [`RunCanceller::cancel`](crate::run::RunCanceller::cancel) was called.
    Requested,
    /// The run's future was dropped before it finished.
    Dropped,
    /// [`FailureMode::FailFast`](crate::FailureMode::FailFast): the named node failed first.
    FailFast {
        /// The node whose failure cancelled the run.
        node: String,
    },
    /// [`Orchestrator::cancel_all`](crate::Orchestrator::cancel_all) was called.
    CancelAll,
    /// [`Orchestrator::shutdown`](crate::Orchestrator::shutdown)'s grace period ended before
    /// the run did.
    Shutdown,
    /// The tokio runtime that ran the run's nodes shut down and dropped their tasks while the
    /// run's future was still awaited, for example from another runtime.
    RuntimeShutdown,
}

impl fmt::Display for CancelReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CancelReason::Requested => f.write_str("cancelled through its handle"),
            CancelReason::Dropped => f.write_str("run future dropped"),
            CancelReason::FailFast { node } => write!(f, "fail-fast after `{node}` failed"),
            CancelReason::CancelAll => f.write_str("orchestrator cancelled all runs"),
            CancelReason::Shutdown => f.write_str("orchestrator shut down"),
            CancelReason::RuntimeShutdown => f.write_str("the runtime running its nodes shut down"),
        }
    }
}
