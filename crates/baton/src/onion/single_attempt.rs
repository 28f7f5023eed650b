//! One attempt: a rate-limit permit, a bulkhead permit, then the task under its cut, with
//! panics caught.

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::time::Instant;

use super::{FirstAttempt, Host, ResolvedPolicies};
use crate::error::{BoxError, NodeError, UserCode};
use crate::observe::trace;
use crate::policy::Chaos;
use crate::policy::deadline::{Cut, Deadline};
use crate::policy::limit::bulkhead::BulkheadPermit;

/// Attempt `number` of a series that started at `started`: a rate-limit permit, a bulkhead
/// permit, then the task, all under the attempt's cut, `min(timeout, deadline)`, with its
/// events and span.
/// `resumed`: the first attempt, which the fast path started.
pub(super) async fn attempt<H: Host>(
    host: &H,
    policies: &ResolvedPolicies,
    number: u32,
    deadline: Option<Instant>,
    started: Instant,
    resumed: Option<FirstAttempt<H::Attempt>>,
) -> Attempted<H::Value> {
    // An attempt begins when it asks for its first permit: the waits count toward its
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
    /// Until when the attempt may wait for a bulkhead permit, and the cut that applies when
    /// the wait ends there. That is its cut, or earlier, the instant that leaves the task
    /// the minimum attempt time before the deadline: a permit got later would leave the
    /// task too little time to be worth starting.
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

/// The attempt that began at `limits.now`, inside its span: its rate-limit permit, its
/// bulkhead permit, the faults injected into it, then its task; a failure is told to the
/// host there.
async fn permitted<H: Host>(
    host: &H,
    policies: &ResolvedPolicies,
    number: u32,
    limits: Limits,
    started: Instant,
    resumed: Option<FirstAttempt<H::Attempt>>,
) -> Attempted<H::Value> {
    let Limits { cut, now, .. } = limits;
    let budget = cut.until.map(|u| u.saturating_duration_since(now));
    let (wait_until, wait_cut) = limits.wait(policies.min_attempt);
    let mut waits = Waits::default();
    let ended = |out: Result<H::Value, NodeError>, waits: Waits| Attempted {
        out: out.map_err(|error| failed(host, number, budget, error)),
        start: now,
        waits,
    };
    if let Some(permit) = rate_permit(host, policies, number, cut) {
        match permit.await {
            Ok(waited) => waits.rate_limit = waited,
            Err(error) => return ended(Err(error), waits),
        }
    }
    let permit = match &policies.bulkhead {
        // The fast path takes no node with a bulkhead.
        _ if resumed.is_some() => None,
        None => None,
        Some(bulkhead) => match bulkhead.acquire(wait_until).await {
            Ok((permit, waited)) => {
                host.permit_waited(number, bulkhead.name(), waited, true);
                waits.permit = waited;
                Some(permit)
            }
            Err(refused) => {
                host.permit_waited(number, bulkhead.name(), refused.waited, false);
                waits.permit = refused.waited;
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
                return ended(Err(error), waits);
            }
        },
    };
    if let Some(chaos) = &policies.declared.chaos {
        if let Err(error) = inject(host, policies, chaos, number, cut, started, &mut waits).await {
            return ended(Err(error), waits);
        }
    }
    let out = call(host, policies, number, cut, started, permit, resumed).await;
    // A task that computed past its cut without yielding could not be cut: it keeps its
    // value, and its log entry says by how much it overran.
    if let (Ok(_), Some(until)) = (&out, cut.until) {
        waits.overran = Instant::now().saturating_duration_since(until);
    }
    ended(out, waits)
}

/// Injects the faults `chaos` draws for attempt `number`: a latency, slept under the
/// attempt's `cut`, then an error that replaces the task's run. The attempt fails as cut
/// when the cut comes first.
async fn inject<H: Host>(
    host: &H,
    policies: &ResolvedPolicies,
    chaos: &Chaos,
    number: u32,
    cut: Cut,
    started: Instant,
    waits: &mut Waits,
) -> Result<(), NodeError> {
    let Some(fault) = chaos.draw(number) else {
        return Ok(());
    };
    host.fault_injected(number, fault.latency, fault.error.is_some());
    waits.injected_latency = fault.latency;
    waits.injected_error = fault.error.is_some();
    if !fault.latency.is_zero() {
        let wake = Instant::now() + fault.latency;
        match cut.until {
            Some(until) if until <= wake => {
                tokio::time::sleep_until(until).await;
                return Err(cut_error(host, policies, number, cut, started));
            }
            _ => tokio::time::sleep_until(wake).await,
        }
    }
    match fault.error {
        Some(error) => Err(NodeError::Task(error)),
        None => Ok(()),
    }
}

/// The wait for attempt `number`'s rate-limit permit, if the policies have a rate limiter:
/// how long it waited, or the attempt's error when the limiter refused it because its
/// permit would not have come within its maximum wait or before the attempt's `cut`.
fn rate_permit<'a, H: Host>(
    host: &'a H,
    policies: &'a ResolvedPolicies,
    number: u32,
    cut: Cut,
) -> Option<impl std::future::Future<Output = Result<Duration, NodeError>> + 'a> {
    let limiter = policies.rate_limit.as_ref()?;
    Some(async move {
        match limiter.acquire(cut.until).await {
            Ok(waited) => {
                host.rate_limited(number, limiter.name(), waited, true);
                Ok(waited)
            }
            Err(after) => {
                host.rate_limited(number, limiter.name(), after, false);
                Err(NodeError::RateLimited {
                    node: host.name().to_owned(),
                    attempt: number,
                    limiter: limiter.name().to_owned(),
                    retry_after: after,
                })
            }
        }
    })
}

/// What one attempt did: its output, when it began, and what it waited for.
pub(super) struct Attempted<V> {
    pub(super) out: Result<V, NodeError>,
    pub(super) start: Instant,
    pub(super) waits: Waits,
}

/// What an attempt waited for before its task: its permits, and the faults injected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Waits {
    /// The wait for the bulkhead permit.
    pub(super) permit: Duration,
    /// The wait for the rate-limit permit.
    pub(super) rate_limit: Duration,
    /// The latency fault injection added.
    pub(super) injected_latency: Duration,
    /// Fault injection failed the attempt; the task was not called.
    pub(super) injected_error: bool,
    /// How long past its cut the attempt succeeded; zero when in time.
    pub(super) overran: Duration,
}

impl Waits {
    /// Nothing waited for, nothing injected.
    pub(super) fn is_none(&self) -> bool {
        *self == Waits::default()
    }
}

/// Attempt `number`, with `budget` before its cut, failed with `error`: the host is told,
/// and also of its cut when it was cut.
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

/// Calls the task under the attempt's cut, catching panics, or goes on with the attempt the
/// fast path started.
async fn call<H: Host>(
    host: &H,
    policies: &ResolvedPolicies,
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
    let mut slot = std::pin::pin!(Some(fut));
    let Some(running) = slot.as_mut().as_pin_mut() else {
        unreachable!("the attempt was just put in its slot")
    };
    let out = match cut.until {
        None => Some(running.await),
        Some(until) => {
            Deadline::new(running, until)
                .with_hook(host.timer_hook())
                .await
        }
    };
    // The attempt's future is dropped here, ended or cut: its drop runs the task's code too.
    let dropped = std::panic::catch_unwind(AssertUnwindSafe(|| slot.set(None)));
    if let Err(panic) = dropped {
        return Err(NodeError::from_panic(UserCode::Task, panic.as_ref()));
    }
    let Some(out) = out else {
        return Err(cut_error(host, policies, number, cut, started));
    };
    settle(host, policies, number, cut, started, out)
}

/// What an attempt that ended, with `out` or its panic, amounts to.
fn settle<H: Host>(
    host: &H,
    policies: &ResolvedPolicies,
    number: u32,
    cut: Cut,
    started: Instant,
    out: std::thread::Result<Result<H::Value, BoxError>>,
) -> Result<H::Value, NodeError> {
    match out {
        Ok(Ok(value)) => Ok(value),
        // The task gave up at or after the instant baton would have cut it. Typically that
        // is its own timeout set from the time it had left, whose timer fired in the same
        // tick as ours: that is the cut, not a task error.
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
    policies: &ResolvedPolicies,
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
            limit: policies.declared.timeout.unwrap_or_default(),
        }
    }
}
