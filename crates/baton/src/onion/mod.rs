//! The onion: one execution with its policies, inner to outer, in a fixed order:
//!
//! 1. **attempt**: a [`RateLimiter`](crate::RateLimiter) permit, a
//!    [`Bulkhead`](crate::Bulkhead) permit, then the task under its cut,
//!    `min(per-attempt timeout, time left before the deadline)`;
//! 2. **retry**: [`Retry`], each backoff clipped to the deadline minus the minimum attempt
//!    time, each retry drawn from the [`RetryBudget`](crate::retry::RetryBudget) if there
//!    is one;
//! 3. **circuit breaker**: asked once before the series, told one result per series;
//! 4. **fallback**: [`Fallback`], when the inner layers failed.
//!
//! The order is not configurable. A timeout outside the retry would cut the whole series
//! at the first attempt's limit; a breaker inside the retry would count every attempt, and
//! one request retried three times would trip a breaker set to trip after three failures.
//!
//! The onion knows no graph and no run. It calls the task and reports what happens through
//! a [`Host`]: the engine's for a graph node, the [`Pipeline`]'s for a single call. Both run
//! this same code, so a node and a pipeline call with the same policies behave alike.

mod call;
mod declared;
mod fallback;
mod hedged_attempt;
mod pipeline;
mod policies;
pub(crate) mod reload;
#[cfg(feature = "serde")]
mod resolve_set;
mod retry;
mod series;
mod single_attempt;
pub(crate) mod tell;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

pub(crate) use call::Held;
pub use call::{Attempt, Call};
pub(crate) use declared::policy_setters;
pub use declared::{Policies, PolicyRef};
pub use fallback::{Fallback, IntoFallback};
pub(crate) use fallback::{Recovered, recover_async};
pub use pipeline::{Pipeline, PipelineBuilder};
pub(crate) use policies::{ErrorFilter, ResolvedPolicies};
pub use retry::Retry;

use crate::error::{BoxError, NodeError};
use crate::policy::breaker::{BreakerState, OwnedPermit};
use crate::policy::deadline::{Deadline, TimerHook};
use crate::policy::limit::bulkhead::BulkheadPermit;
use crate::report::AttemptReport;

/// The attempt log keeps at most this many attempts. A retry policy may allow millions.
pub(crate) const MAX_ATTEMPT_LOG: usize = 1_000;

/// What the onion needs from whoever runs it: how to call the task and the fallback, and
/// where to report what happens, as counters and events. Generic, so that each host's calls
/// are direct. The reports that every host counts and tells alike have their one definition
/// here, through the host's [`Teller`](tell::Teller).
pub(crate) trait Host: tell::Teller {
    /// What the task produces.
    type Value;
    /// One attempt of the task.
    type Attempt: Future<Output = Result<Self::Value, BoxError>>;
    /// One run of the fallback.
    type Recover: Future<Output = Result<Self::Value, NodeError>>;

    /// The name errors and events carry: the node's, or the pipeline's.
    fn name(&self) -> &str;

    /// Calls the task for attempt `number`, cut at `cut`; the attempt holds `permit` until
    /// it has really stopped. `Err` when the task panicked before returning its future.
    fn call(
        &self,
        number: u32,
        cut: Option<Instant>,
        permit: Option<BulkheadPermit>,
    ) -> Result<Self::Attempt, NodeError>;

    /// The fallback's run for `error`, if there is a fallback; `attempts` ran, and the
    /// fallback is cut at `deadline`.
    fn fallback(
        &self,
        error: &Arc<NodeError>,
        attempts: u32,
        deadline: Option<Instant>,
    ) -> Option<Self::Recover>;

    /// Told before an attempt's timer is made.
    fn timer_hook(&self) -> Option<&dyn TimerHook>;

    /// `at` as an offset from the start of the run or call, for the attempt log.
    fn offset(&self, at: Instant) -> Duration;

    /// Attempt `number` starts, with `budget` before it is cut.
    fn attempt_started(&self, number: u32, budget: Option<Duration>);

    /// Attempt `number` ended, in any way, also by being dropped.
    fn attempt_ended(&self, number: u32);

    /// Attempt `number` failed with `error`.
    fn attempt_failed(&self, number: u32, error: &NodeError);

    /// Attempt `number` was cut after `limit`.
    fn attempt_cut(&self, number: u32, limit: Duration) {
        tell::attempt_cut(self, number, limit);
    }

    /// Attempt `next` will start after `delay`; `remaining` is the time left then.
    fn retry_scheduled(&self, next: u32, delay: Duration, remaining: Option<Duration>) {
        tell::retry_scheduled(self, next, delay, remaining);
    }

    /// Attempt `number` got a permit of `bulkhead` after waiting `waited`, when `acquired`,
    /// or gave up waiting for one.
    fn permit_waited(&self, number: u32, bulkhead: &str, waited: Duration, acquired: bool) {
        tell::permit_waited(self, number, bulkhead, waited, acquired);
    }

    /// Attempt `number` got a permit of rate limiter `limiter` after waiting `wait`, when
    /// `admitted`, or was refused one that would have come after `wait`.
    fn rate_limited(&self, number: u32, limiter: &str, wait: Duration, admitted: bool) {
        tell::rate_limited(self, number, limiter, wait, admitted);
    }

    /// Fault injection drew faults for attempt `number`: a `latency`, zero for none, and an
    /// `error` instead of the task.
    fn fault_injected(&self, number: u32, latency: Duration, error: bool) {
        tell::fault_injected(self, number, latency, error);
    }

    /// Hedge attempt `number` starts, `after` the attempt before it began.
    fn hedged(&self, number: u32, after: Duration) {
        tell::hedged(self, number, after);
    }

    /// The circuit breaker `breaker`, in `state`, rejected the series.
    fn rejected(&self, breaker: &str, state: BreakerState) {
        tell::rejected(self, breaker, state);
    }

    /// The fallback runs, recovering from `error`.
    fn fell_back(&self, error: &NodeError) {
        tell::fell_back(self, error);
    }
}

/// What one execution produced.
pub(crate) struct Execution<V> {
    /// The value, from the task or from the fallback; or the final error.
    pub(crate) result: Result<V, Arc<NodeError>>,
    /// Set when the fallback produced the value: the error it recovered from.
    pub(crate) recovered_from: Option<Arc<NodeError>>,
    /// One entry per attempt that started, for a series that retried or failed.
    pub(crate) attempts: Vec<AttemptReport>,
    /// Whether its shared circuit breaker judged it alone when it first asked, because the
    /// shared state could not be reached or the breaker tripped by its own counts.
    pub(crate) breaker_local: bool,
}

/// The first attempt as the scheduler's fast path hands it over, when it failed, panicked
/// or reached its cut. A first attempt that succeeds never comes here. The fast path
/// already took the breaker permit, counted the attempt and deposited in the retry budget;
/// the onion goes on from there.
pub(crate) struct First<A> {
    pub(crate) attempt: FirstAttempt<A>,
    pub(crate) permit: Option<OwnedPermit>,
}

/// Where the handed-over first attempt is.
pub(crate) enum FirstAttempt<A> {
    /// Still running at its cut. The onion polls it once more, then reports it cut.
    Running(A),
    /// It returned an error.
    Failed(BoxError),
    /// It panicked while polled.
    Panicked(Box<dyn std::any::Any + Send>),
    /// The task panicked before returning its future.
    NotStarted(NodeError),
}

/// Runs one execution through the policies: breaker, series, fallback. `started` is when
/// it began; `run_deadline` the deadline of its run, if any; `first` the first attempt
/// when the scheduler's fast path started it.
pub(crate) async fn execute<H: Host>(
    host: &H,
    policies: &ResolvedPolicies,
    run_deadline: Option<Instant>,
    started: Instant,
    first: Option<First<H::Attempt>>,
) -> Execution<H::Value> {
    let deadline = policies.deadline(run_deadline, started);
    let mut log = series::AttemptLog::default();
    let (first, held) = match first {
        Some(First { attempt, permit }) => (Some(attempt), permit),
        None => (None, None),
    };
    let series = series::guarded(host, policies, deadline, started, &mut log, first, held).await;
    let error = match series {
        Ok(value) => {
            return Execution {
                result: Ok(value),
                recovered_from: None,
                attempts: log.entries,
                breaker_local: log.breaker_local,
            };
        }
        Err(e) => Arc::new(e),
    };
    let series::AttemptLog {
        entries: attempts,
        started: ran,
        breaker_local,
    } = log;
    match recover(host, &error, deadline, started, ran).await {
        None => Execution {
            result: Err(error),
            recovered_from: None,
            attempts,
            breaker_local,
        },
        Some(Ok(value)) => Execution {
            result: Ok(value),
            recovered_from: Some(error),
            attempts,
            breaker_local,
        },
        Some(Err(failed)) => Execution {
            result: Err(Arc::new(failed)),
            recovered_from: None,
            attempts,
            breaker_local,
        },
    }
}

/// Runs the fallback for `error`, if there is one, bound by the `deadline` too: one
/// deadline, from which everything is derived. A fallback still running at the deadline
/// fails.
async fn recover<H: Host>(
    host: &H,
    error: &Arc<NodeError>,
    deadline: Option<Instant>,
    started: Instant,
    attempts: u32,
) -> Option<Result<H::Value, NodeError>> {
    let recover = host.fallback(error, attempts, deadline)?;
    host.fell_back(error);
    let Some(until) = deadline else {
        return Some(recover.await);
    };
    Some(match Deadline::new(recover, until).await {
        Some(out) => out,
        None => {
            let node = host.name();
            Err(NodeError::FallbackFailed {
                node: node.to_owned(),
                error: Box::new(NodeError::DeadlineExceeded {
                    node: node.to_owned(),
                    attempts,
                    elapsed: started.elapsed(),
                }),
                original: Arc::clone(error),
            })
        }
    })
}
