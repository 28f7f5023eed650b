//! The onion: one node's execution with its policies, inner to outer — attempt (bulkhead
//! permit, task, per-attempt timeout) → retry (backoff inside the deadline budget, retry
//! budget) → circuit breaker (asked once, told once) → fallback.
//!
//! The deadline of an attempt is the earliest of the run's deadline and the node's budget
//! (from the node's start); its timeout is `min(per-attempt timeout, time left)`. A backoff
//! is `min(computed, time left - minimum attempt time)`, and no attempt starts with less than
//! the minimum attempt time left (seed 000).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::time::Instant;

use super::NodePolicy;
use super::backoff::BackoffIter;
use super::breaker::{BreakerPermit, OwnedPermit};
use super::bulkhead::BulkheadPermit;
use super::deadline::Deadline;
use crate::error::{BoxError, NodeError, StopReason};
use crate::observe::{Event, trace};
use crate::report::AttemptReport;
use crate::run::{AttemptGuard, RunState};
use crate::task::{AttemptFuture, Value};

/// The attempt log keeps at most this many attempts (a retry policy may allow millions).
pub(crate) const MAX_ATTEMPT_LOG: usize = 1_000;

/// What one node's execution produced.
pub(crate) struct Execution {
    /// The value, from the task or from the fallback; or the final error.
    pub(crate) result: Result<Value, Arc<NodeError>>,
    /// Set when the fallback produced the value: the error it recovered from.
    pub(crate) recovered_from: Option<Arc<NodeError>>,
    /// One entry per attempt that started.
    pub(crate) attempts: Vec<AttemptReport>,
}

/// The first attempt of a node as the scheduler's fast path hands it over, when it failed,
/// panicked or reached its cut (a first attempt that succeeds, at once or after waiting,
/// never comes here): the fast path already took the breaker permit, counted the attempt
/// and deposited in the retry budget; the onion goes on from there.
pub(crate) struct First {
    pub(crate) attempt: FirstAttempt,
    pub(crate) permit: Option<OwnedPermit>,
}

/// Where the handed-over first attempt is.
pub(crate) enum FirstAttempt {
    /// Still running at its cut (the onion polls it once more, then reports it cut).
    Running(AttemptFuture),
    /// It ended, at once or after waiting, with an error or a panic. (A panic making or
    /// moving the driver's timer does not come here: the driver fails the node itself.)
    Ended(std::thread::Result<Result<Value, BoxError>>),
    /// The task panicked before returning its future.
    NotStarted(NodeError),
}

/// Runs node `id` of `run` through its policies; `first` is the first attempt when the
/// scheduler's fast path started it.
pub(crate) async fn execute<I: Send + Sync + 'static>(
    run: &Arc<RunState<I>>,
    id: u32,
    policy: &NodePolicy,
    started: Instant,
    first: Option<First>,
) -> Execution {
    let node = run.graph.meta.name(id);
    // `checked_add`: a budget too large for an instant (`Duration::MAX`) is no budget.
    let deadline = node_deadline(run.core.deadline(), policy, started);
    let mut attempts = Vec::new();
    let (first, mut held) = match first {
        Some(First { attempt, permit }) => (Some(attempt), permit),
        None => (None, None),
    };

    let series = match &policy.breaker {
        None => {
            series(
                run,
                id,
                policy,
                None,
                deadline,
                started,
                &mut attempts,
                first,
            )
            .await
        }
        Some(breaker) => match held
            .as_mut()
            .and_then(OwnedPermit::take)
            .map_or_else(|| breaker.try_acquire(), Ok)
        {
            Err(open) => {
                run.graph
                    .orchestrator
                    .counters()
                    .local()
                    .breaker_rejections
                    .incr();
                Err(NodeError::BreakerOpen {
                    node: node.to_owned(),
                    breaker: breaker.name().to_owned(),
                    state: open.state(),
                    retry_after: open.retry_after(),
                })
            }
            Ok(permit) => {
                // Dropping `permit` (the run was cancelled mid-series) releases it uncounted.
                let out = series(
                    run,
                    id,
                    policy,
                    Some(&permit),
                    deadline,
                    started,
                    &mut attempts,
                    first,
                )
                .await;
                let elapsed = started.elapsed();
                match &out {
                    Ok(_) => permit.success(elapsed),
                    Err(e) if policy.breaker_ignore.as_ref().is_some_and(|f| f(e)) => {
                        permit.ignore();
                    }
                    Err(_) => permit.failure(elapsed),
                }
                out
            }
        },
    };

    let error = match series {
        Ok(value) => {
            return Execution {
                result: Ok(value),
                recovered_from: None,
                attempts,
            };
        }
        Err(e) => Arc::new(e),
    };
    let Some(task) = run.graph.task(id) else {
        return Execution {
            result: Err(error),
            recovered_from: None,
            attempts,
        };
    };
    let recover = task.fallback(node, Arc::clone(&error));
    if recover.is_some() {
        run.graph.orchestrator.counters().local().fallbacks.incr();
        if run.observed() {
            run.emit(&Event::FallbackUsed {
                run: run.core.run_id,
                node,
                error: &error,
            });
        }
    }
    match recover {
        None => Execution {
            result: Err(error),
            recovered_from: None,
            attempts,
        },
        Some(recover) => {
            // The fallback is bound by the node's deadline too (one deadline, everything
            // derived): a fallback still running at the deadline fails the node.
            let recovered = match deadline {
                None => recover.await,
                Some(until) => match Deadline::new(recover, until).await {
                    Some(out) => out,
                    None => Err(NodeError::FallbackFailed {
                        node: node.to_owned(),
                        error: Box::new(NodeError::DeadlineExceeded {
                            node: node.to_owned(),
                            attempts: attempts.len() as u32,
                            elapsed: started.elapsed(),
                        }),
                        original: Arc::clone(&error),
                    }),
                },
            };
            match recovered {
                Ok(value) => Execution {
                    result: Ok(value),
                    recovered_from: Some(error),
                    attempts,
                },
                Err(failed) => Execution {
                    result: Err(Arc::new(failed)),
                    recovered_from: None,
                    attempts,
                },
            }
        }
    }
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The retry series (a single attempt when the node has no retry policy); `first` is its
/// first attempt when the fast path started it.
#[allow(clippy::too_many_arguments)]
async fn series<I: Send + Sync + 'static>(
    run: &Arc<RunState<I>>,
    id: u32,
    policy: &NodePolicy,
    permit: Option<&BreakerPermit<'_>>,
    deadline: Option<Instant>,
    started: Instant,
    log: &mut Vec<AttemptReport>,
    mut first: Option<FirstAttempt>,
) -> Result<Value, NodeError> {
    let node = run.graph.meta.name(id);
    let retry = policy.retry.as_ref();
    // Made on the first retry: a series that succeeds at once never needs it.
    let mut backoff: Option<BackoffIter> = None;
    if first.is_none() {
        deposit(policy);
    }
    let deadline_error = |attempts: u32| NodeError::DeadlineExceeded {
        node: node.to_owned(),
        attempts,
        elapsed: started.elapsed(),
    };
    let mut delay_before = Duration::ZERO;
    let mut number = 0u32;
    loop {
        number += 1;
        let resumed = first.take();
        // (A resumed first attempt passed this check on the fast path.)
        if resumed.is_none() && too_late(policy, deadline, Instant::now()) {
            let err = deadline_error(number - 1);
            return Err(match retry {
                Some(_) if number > 1 => {
                    give_up(node, number - 1, started, StopReason::DeadlineExceeded, err)
                }
                _ => err,
            });
        }
        let (out, attempt_start) =
            attempt(run, id, policy, number, deadline, started, resumed).await;
        // A series that succeeds at its first attempt has nothing to add to the node's own
        // start and end: its log stays empty (and costs nothing).
        if (number > 1 || out.is_err()) && log.len() < MAX_ATTEMPT_LOG {
            let core = &run.core;
            log.push(AttemptReport {
                number,
                start: core.offset(attempt_start),
                end: core.elapsed(),
                delay_before,
                error: out.as_ref().err().map(ToString::to_string),
            });
        }
        let error = match out {
            Ok(value) => return Ok(value),
            Err(e) => e,
        };
        let Some(retry) = retry else {
            return Err(error);
        };
        let stop = |reason: StopReason, error: NodeError| {
            Err(give_up(node, number, started, reason, error))
        };
        if matches!(error, NodeError::DeadlineExceeded { .. }) {
            return stop(StopReason::DeadlineExceeded, error);
        }
        if number >= retry.max_attempts {
            return stop(StopReason::MaxAttempts, error);
        }
        if !retry.is_retryable(&error) {
            return stop(StopReason::NotRetryable, error);
        }
        // The breaker moved on (opened, or is probing again) since this series was admitted:
        // its result would be ignored, and the downstream is presumed down.
        if permit.is_some_and(|p| !p.is_current()) {
            return stop(StopReason::BreakerOpened, error);
        }
        let Some(mut delay) = backoff.get_or_insert_with(|| retry.backoff.iter()).next() else {
            return stop(StopReason::BackoffExhausted, error);
        };
        if let Some(d) = deadline {
            let left = d.saturating_duration_since(Instant::now());
            if left < policy.min_attempt {
                return stop(StopReason::DeadlineExceeded, error);
            }
            delay = delay.min(left - policy.min_attempt);
        }
        if let Some(budget) = retry.budget.as_ref() {
            if !budget.try_withdraw() {
                let reason = StopReason::RetryBudgetExhausted {
                    budget: budget.name().to_owned(),
                };
                return stop(reason, error);
            }
        }
        tracing::debug!(node, attempt = number, ?delay, error = %error, "retry scheduled");
        if run.observed() {
            run.emit(&Event::RetryScheduled {
                run: run.core.run_id,
                node,
                attempt: number + 1,
                delay,
                remaining: deadline.map(|d| d.saturating_duration_since(Instant::now())),
            });
        }
        delay_before = delay;
        if delay.is_zero() {
            // A series with no backoff still lets its worker run other tasks (and notice a
            // cancelled run) now and then.
            tokio::task::consume_budget().await;
        } else {
            tokio::time::sleep(delay).await;
            // The breaker may have opened while we waited.
            if permit.is_some_and(|p| !p.is_current()) {
                return stop(StopReason::BreakerOpened, error);
            }
        }
    }
}

/// A series starts: it earns its share of the retry budget, if any (tower's deposit).
pub(crate) fn deposit(policy: &NodePolicy) {
    if let Some(budget) = policy.retry.as_ref().and_then(|r| r.budget.as_ref()) {
        budget.deposit();
    }
}

fn give_up(
    node: &str,
    attempts: u32,
    started: Instant,
    reason: StopReason,
    last: NodeError,
) -> NodeError {
    NodeError::GaveUp {
        node: node.to_owned(),
        attempts,
        elapsed: started.elapsed(),
        reason,
        last: Box::new(last),
    }
}

/// One attempt: a bulkhead permit, then the task under `min(timeout, deadline)`, with its
/// counters, events and span.
async fn attempt<I: Send + Sync + 'static>(
    run: &Arc<RunState<I>>,
    id: u32,
    policy: &NodePolicy,
    number: u32,
    deadline: Option<Instant>,
    started: Instant,
    resumed: Option<FirstAttempt>,
) -> (Result<Value, NodeError>, Instant) {
    let node = run.graph.meta.name(id);
    let permit = match &policy.bulkhead {
        // The fast path takes no node with a bulkhead.
        _ if resumed.is_some() => None,
        None => None,
        Some(bulkhead) => match bulkhead.acquire(deadline).await {
            Ok(p) => Some(p),
            Err(waited) => {
                let error = NodeError::BulkheadFull {
                    node: node.to_owned(),
                    attempt: number,
                    bulkhead: bulkhead.name().to_owned(),
                    waited,
                };
                return (Err(error), Instant::now());
            }
        },
    };
    // The first attempt of a node without a bulkhead starts when the node did.
    let now = if number == 1 && policy.bulkhead.is_none() {
        started
    } else {
        Instant::now()
    };
    let cut = Cut::new(policy, now, deadline);
    let budget = cut.until.map(|u| u.saturating_duration_since(now));
    if resumed.is_none() {
        run.attempt_started(id, number, budget);
    }
    let out = trace::within(
        trace::attempt_span(node, number, budget),
        call(run, id, policy, number, cut, started, permit, resumed),
    )
    .await;
    if let Err(error) = &out {
        if matches!(
            error,
            NodeError::Timeout { .. } | NodeError::DeadlineExceeded { .. }
        ) {
            run.graph.orchestrator.counters().local().timeouts.incr();
            if run.observed() {
                run.emit(&Event::Timeout {
                    run: run.core.run_id,
                    node,
                    attempt: number,
                    limit: budget.unwrap_or_default(),
                });
            }
        }
        run.attempt_failed(id, number, error);
    }
    (out, now)
}

/// When an attempt is cut, and whether by the deadline (rather than its own timeout).
#[derive(Clone, Copy)]
pub(crate) struct Cut {
    pub(crate) until: Option<Instant>,
    by_deadline: bool,
}

impl Cut {
    /// The cut of an attempt starting at `now` under the node's `deadline`: the earlier of
    /// its per-attempt timeout and the deadline.
    pub(crate) fn new(policy: &NodePolicy, now: Instant, deadline: Option<Instant>) -> Self {
        let by_timeout = policy.timeout.and_then(|t| now.checked_add(t));
        Cut {
            until: earliest(by_timeout, deadline),
            // Whether the deadline, not the per-attempt timeout, is what cuts the attempt.
            by_deadline: match (by_timeout, deadline) {
                (Some(t), Some(d)) => d < t,
                (None, Some(_)) => true,
                _ => false,
            },
        }
    }
}

/// A node's deadline: the earlier of the run's and the end of its budget, counted from its
/// start (`checked_add`: a budget too large for an instant, `Duration::MAX`, is no budget).
pub(crate) fn node_deadline(
    run_deadline: Option<Instant>,
    policy: &NodePolicy,
    started: Instant,
) -> Option<Instant> {
    match (run_deadline, policy.budget) {
        (None, None) => None,
        (run_deadline, budget) => {
            earliest(run_deadline, budget.and_then(|b| started.checked_add(b)))
        }
    }
}

/// Whether an attempt starting at `now` would have less than the minimum attempt time left
/// before `deadline` (seed 000: then it does not start).
pub(crate) fn too_late(policy: &NodePolicy, deadline: Option<Instant>, now: Instant) -> bool {
    deadline.is_some_and(|d| d.saturating_duration_since(now) < policy.min_attempt)
}

/// Calls the task under the attempt's cut, catching panics (or goes on with the attempt
/// the fast path started).
#[allow(clippy::too_many_arguments)]
async fn call<I: Send + Sync + 'static>(
    run: &Arc<RunState<I>>,
    id: u32,
    policy: &NodePolicy,
    number: u32,
    cut: Cut,
    started: Instant,
    permit: Option<BulkheadPermit>,
    resumed: Option<FirstAttempt>,
) -> Result<Value, NodeError> {
    let node = run.graph.meta.name(id);
    let _attempt = AttemptGuard {
        core: &run.core,
        node: id,
        attempt: number,
    };
    let fut = match resumed {
        Some(FirstAttempt::NotStarted(error)) => return Err(error),
        Some(FirstAttempt::Ended(out)) => return settle(node, policy, number, cut, started, out),
        Some(FirstAttempt::Running(fut)) => fut,
        None => run.call_task(id, number, cut.until, permit)?,
    };
    let fut = AssertUnwindSafe(fut).catch_unwind();
    let out = match cut.until {
        None => fut.await,
        Some(until) => match Deadline::new(fut, until).with_floor(&run.core).await {
            Some(out) => out,
            None => return Err(cut_error(node, policy, number, cut, started)),
        },
    };
    settle(node, policy, number, cut, started, out)
}

/// What an attempt that ended (with `out`, or its panic) amounts to.
fn settle(
    node: &str,
    policy: &NodePolicy,
    number: u32,
    cut: Cut,
    started: Instant,
    out: std::thread::Result<Result<Value, BoxError>>,
) -> Result<Value, NodeError> {
    match out {
        Ok(Ok(value)) => Ok(value),
        // The task gave up at (or after) the instant baton would have cut it — typically its
        // own timeout set from `ctx.remaining()`, whose timer fired in the same tick as ours:
        // that is the cut, not a task error.
        Ok(Err(_)) if cut.until.is_some_and(|u| Instant::now() >= u) => {
            Err(cut_error(node, policy, number, cut, started))
        }
        Ok(Err(error)) => Err(NodeError::Task(error)),
        Err(panic) => Err(NodeError::from_panic(panic.as_ref())),
    }
}

/// The error of an attempt cut at `cut.until`.
fn cut_error(
    node: &str,
    policy: &NodePolicy,
    number: u32,
    cut: Cut,
    started: Instant,
) -> NodeError {
    if cut.by_deadline {
        NodeError::DeadlineExceeded {
            node: node.to_owned(),
            attempts: number,
            elapsed: started.elapsed(),
        }
    } else {
        NodeError::Timeout {
            node: node.to_owned(),
            attempt: number,
            limit: policy.timeout.unwrap_or_default(),
        }
    }
}
