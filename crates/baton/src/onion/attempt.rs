//! One attempt: a bulkhead permit, then the task under its cut, with panics caught.

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::time::Instant;

use super::{FirstAttempt, Host, Policies};
use crate::error::{BoxError, NodeError, UserCode};
use crate::observe::trace;
use crate::policy::bulkhead::BulkheadPermit;
use crate::policy::deadline::{Cut, Deadline};

/// Attempt `number` of a series that started at `started`: a bulkhead permit, then the
/// task, both under the attempt's cut (`min(timeout, deadline)`), with its events and span.
/// `resumed`: the first attempt, which the fast path started.
pub(super) async fn attempt<H: Host>(
    host: &H,
    policies: &Policies,
    number: u32,
    deadline: Option<Instant>,
    started: Instant,
    resumed: Option<FirstAttempt<H::Attempt>>,
) -> Attempted<H::Value> {
    // An attempt begins when it asks for its bulkhead permit: the wait counts toward its
    // timeout. The first one of a series begins when the series did.
    let now = if number == 1 { started } else { Instant::now() };
    let cut = policies.cut(now, deadline);
    let budget = cut.until.map(|u| u.saturating_duration_since(now));
    if resumed.is_none() {
        host.attempt_started(number, budget);
    }
    let span = trace::attempt_span(host.name(), number, budget);
    let limits = Limits { cut, deadline, now };
    let attempted = trace::within(
        span.clone(),
        permitted(host, policies, number, limits, started, resumed),
    )
    .await;
    trace::record_attempt(&span, attempted.out.as_ref().err());
    attempted
}

/// When an attempt began, and what limits it.
#[derive(Clone, Copy)]
struct Limits {
    /// The attempt's cut.
    cut: Cut,
    /// The node's deadline.
    deadline: Option<Instant>,
    /// When the attempt began.
    now: Instant,
}

impl Limits {
    /// Until when the attempt may wait for a bulkhead permit, and the cut that applies
    /// when the wait ends there: its cut, or earlier the instant that leaves the task the
    /// minimum attempt time before the deadline (a permit got later would leave the task
    /// too little time to be worth starting).
    fn wait(self, min_attempt: Duration) -> (Option<Instant>, Cut) {
        let room = self.deadline.and_then(|d| d.checked_sub(min_attempt));
        match (self.cut.until, room) {
            (Some(until), Some(room)) if room < until => (
                Some(room),
                Cut {
                    until: Some(room),
                    by_deadline: true,
                },
            ),
            _ => (self.cut.until, self.cut),
        }
    }
}

/// The attempt that began at `limits.now`, inside its span: its bulkhead permit, then its
/// task; a failure is told to the host there.
async fn permitted<H: Host>(
    host: &H,
    policies: &Policies,
    number: u32,
    limits: Limits,
    started: Instant,
    resumed: Option<FirstAttempt<H::Attempt>>,
) -> Attempted<H::Value> {
    let Limits { cut, now, .. } = limits;
    let budget = cut.until.map(|u| u.saturating_duration_since(now));
    let (wait_until, wait_cut) = limits.wait(policies.min_attempt);
    let (permit, waited) = match &policies.bulkhead {
        // The fast path takes no node with a bulkhead.
        _ if resumed.is_some() => (None, Duration::ZERO),
        None => (None, Duration::ZERO),
        Some(bulkhead) => match bulkhead.acquire(wait_until).await {
            Ok((permit, waited)) => {
                host.permit_waited(number, bulkhead.name(), waited, true);
                (Some(permit), waited)
            }
            Err(refused) => {
                host.permit_waited(number, bulkhead.name(), refused.waited, false);
                let error = if refused.cut {
                    cut_error(host, policies, number, wait_cut, started)
                } else {
                    NodeError::BulkheadFull {
                        node: host.name().to_owned(),
                        attempt: number,
                        bulkhead: bulkhead.name().to_owned(),
                        waited: refused.waited,
                    }
                };
                let out = Err(failed(host, number, budget, error));
                return Attempted {
                    out,
                    start: now,
                    waited: refused.waited,
                };
            }
        },
    };
    let out = call(host, policies, number, cut, started, permit, resumed).await;
    let out = out.map_err(|error| failed(host, number, budget, error));
    Attempted {
        out,
        start: now,
        waited,
    }
}

/// What one attempt did: its output, when it began, and how long it waited for its
/// bulkhead permit.
pub(super) struct Attempted<V> {
    pub(super) out: Result<V, NodeError>,
    pub(super) start: Instant,
    pub(super) waited: Duration,
}

/// Attempt `number`, with `budget` before its cut, failed with `error`: the host is told
/// (its cut too, when it was cut).
fn failed<H: Host>(host: &H, number: u32, budget: Option<Duration>, error: NodeError) -> NodeError {
    if matches!(
        error,
        NodeError::Timeout { .. } | NodeError::DeadlineExceeded { .. }
    ) {
        host.attempt_cut(number, budget.unwrap_or_default());
    }
    host.attempt_failed(number, &error);
    error
}

/// Tells the host that attempt `number` ended when the attempt's future completes or is
/// dropped.
struct Ended<'a, H: Host> {
    host: &'a H,
    number: u32,
}

impl<H: Host> Drop for Ended<'_, H> {
    fn drop(&mut self) {
        self.host.attempt_ended(self.number);
    }
}

/// Calls the task under the attempt's cut, catching panics (or goes on with the attempt
/// the fast path started).
async fn call<H: Host>(
    host: &H,
    policies: &Policies,
    number: u32,
    cut: Cut,
    started: Instant,
    permit: Option<BulkheadPermit>,
    resumed: Option<FirstAttempt<H::Attempt>>,
) -> Result<H::Value, NodeError> {
    let _ended = Ended { host, number };
    let fut = match resumed {
        Some(FirstAttempt::NotStarted(error)) => return Err(error),
        Some(FirstAttempt::Failed(error)) => {
            return settle(host, policies, number, cut, started, Ok(Err(error)));
        }
        Some(FirstAttempt::Panicked(panic)) => {
            return settle(host, policies, number, cut, started, Err(panic));
        }
        Some(FirstAttempt::Running(fut)) => fut,
        None => host.call(number, cut.until, permit)?,
    };
    let fut = AssertUnwindSafe(fut).catch_unwind();
    let out = match cut.until {
        None => fut.await,
        Some(until) => {
            let mut slot = std::pin::pin!(Some(fut));
            let Some(running) = slot.as_mut().as_pin_mut() else {
                unreachable!("the attempt was just put in its slot")
            };
            match Deadline::new(running, until)
                .with_hook(host.timer_hook())
                .await
            {
                Some(out) => out,
                None => {
                    // The cut attempt is dropped here: its drop runs the task's code too.
                    let dropped = std::panic::catch_unwind(AssertUnwindSafe(|| slot.set(None)));
                    if let Err(panic) = dropped {
                        return Err(NodeError::from_panic(UserCode::Task, panic.as_ref()));
                    }
                    return Err(cut_error(host, policies, number, cut, started));
                }
            }
        }
    };
    settle(host, policies, number, cut, started, out)
}

/// What an attempt that ended (with `out`, or its panic) amounts to.
fn settle<H: Host>(
    host: &H,
    policies: &Policies,
    number: u32,
    cut: Cut,
    started: Instant,
    out: std::thread::Result<Result<H::Value, BoxError>>,
) -> Result<H::Value, NodeError> {
    match out {
        Ok(Ok(value)) => Ok(value),
        // The task gave up at (or after) the instant baton would have cut it — typically its
        // own timeout set from the time it had left, whose timer fired in the same tick as
        // ours: that is the cut, not a task error.
        Ok(Err(_)) if cut.until.is_some_and(|u| Instant::now() >= u) => {
            Err(cut_error(host, policies, number, cut, started))
        }
        Ok(Err(error)) => Err(NodeError::Task(error)),
        Err(panic) => Err(NodeError::from_panic(UserCode::Task, panic.as_ref())),
    }
}

/// The error of an attempt cut at `cut.until`.
fn cut_error<H: Host>(
    host: &H,
    policies: &Policies,
    number: u32,
    cut: Cut,
    started: Instant,
) -> NodeError {
    let node = host.name().to_owned();
    if cut.by_deadline {
        NodeError::DeadlineExceeded {
            node,
            attempts: number,
            elapsed: started.elapsed(),
        }
    } else {
        NodeError::Timeout {
            node,
            attempt: number,
            limit: policies.timeout.unwrap_or_default(),
        }
    }
}
