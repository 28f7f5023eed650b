//! The retry series, and the circuit breaker around it: asked once before the series, told
//! one result after it. An open breaker rejects the series without running the task.

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use tokio::time::Instant;

use super::hedged_attempt::{self, Gate, Race, Raced};
use super::single_attempt::{Waits, attempt};
use super::{FirstAttempt, Host, MAX_ATTEMPT_LOG, ResolvedPolicies, Retry};
use crate::error::{NodeError, UserCode};
use crate::policy::breaker::{
    BreakerOpen, BreakerPermit, BreakerState, CircuitBreaker, OwnedPermit, Ticket,
};
use crate::policy::retry::backoff::BackoffIter;
use crate::policy::retry::stop::{self, Failed, Next, StopReason};
use crate::report::AttemptReport;

/// What a series records of its attempts.
#[derive(Debug, Default)]
pub(super) struct AttemptLog {
    /// The report's entries: at most [`MAX_ATTEMPT_LOG`], none for a first attempt that
    /// succeeded at once.
    pub(super) entries: Vec<AttemptReport>,
    /// How many attempts started.
    pub(super) started: u32,
    /// Whether a shared breaker judged the series alone; see `Execution`.
    pub(super) breaker_local: bool,
}

impl AttemptLog {
    /// Adds `entry`, while the log has room.
    pub(super) fn push(&mut self, entry: AttemptReport) {
        if self.entries.len() < MAX_ATTEMPT_LOG {
            self.entries.push(entry);
        }
    }
}

/// The series under the breaker, if the policies have one: `held` is the permit the fast
/// path took for its first attempt.
pub(super) async fn guarded<H: Host>(
    host: &H,
    policies: &ResolvedPolicies,
    deadline: Option<Instant>,
    started: Instant,
    log: &mut AttemptLog,
    first: Option<FirstAttempt<H::Attempt>>,
    mut held: Option<OwnedPermit>,
) -> Result<H::Value, NodeError> {
    let Some(breaker) = &policies.breaker else {
        return series(host, policies, Guard::None, deadline, started, log, first).await;
    };
    // A permit held from the fast path was given while following the shared state.
    log.breaker_local = held.is_none() && breaker.judges_alone();
    if breaker.counts_every_attempt() {
        let held = held.and_then(OwnedPermit::into_ticket);
        let guard = Guard::Attempts { breaker, held };
        return series(host, policies, guard, deadline, started, log, first).await;
    }
    let acquired = match held.as_mut().and_then(OwnedPermit::take) {
        Some(permit) => Ok(permit),
        // A single attempt is cut by its timeout too; a series with retries by its deadline.
        None if policies.declared.retry.is_none() => {
            breaker.try_acquire_until(|| policies.cut(started, deadline).until)
        }
        None => breaker.try_acquire_until(|| deadline),
    };
    let permit = match acquired {
        Ok(permit) => permit,
        Err(open) => return Err(rejected(host, breaker, &open, 1, started, None)),
    };
    // Dropping `permit`, when the run was cancelled mid-series, releases it uncounted.
    let guard = Guard::Series(&permit);
    let out = series(host, policies, guard, deadline, started, log, first).await;
    tell(permit, policies, out, started)
}

/// Tells `permit` how the call it admitted, begun at `started`, ended: `out`, or the
/// panic of the breaker's error filter.
pub(super) fn tell<V>(
    permit: BreakerPermit<'_>,
    policies: &ResolvedPolicies,
    out: Result<V, NodeError>,
    started: Instant,
) -> Result<V, NodeError> {
    let elapsed = started.elapsed();
    let error = match out {
        Ok(value) => {
            permit.success(elapsed);
            return Ok(value);
        }
        Err(error) => error,
    };
    let ignored = match &policies.declared.breaker_ignore {
        None => false,
        // A filter that panics tells the breaker nothing, releasing the permit uncounted,
        // and fails the node with its panic.
        Some(filter) => catch(UserCode::BreakerFilter, || filter(&error))?,
    };
    if ignored {
        permit.ignore();
    } else {
        permit.failure(elapsed);
    }
    Err(error)
}

/// How a series reports to its circuit breaker.
enum Guard<'a, 'p> {
    /// No breaker.
    None,
    /// One permit for the whole series, told its result when the series ends.
    Series(&'a BreakerPermit<'p>),
    /// A permit per attempt, told its result when the attempt ends; `held` is the ticket
    /// the fast path took for the first attempt.
    Attempts {
        breaker: &'a CircuitBreaker,
        held: Option<Ticket>,
    },
}

impl<'a> Guard<'a, '_> {
    /// The permit for attempt `number`, when the breaker is told every attempt; the
    /// breaker's error when it rejects the attempt. `last` is the error of the attempt
    /// before.
    fn attempt_permit<H: Host>(
        &mut self,
        host: &H,
        number: u32,
        started: Instant,
        until: impl FnOnce() -> Option<Instant>,
        last: &mut Option<NodeError>,
    ) -> Result<Option<BreakerPermit<'a>>, NodeError> {
        let Guard::Attempts { breaker, held } = self else {
            return Ok(None);
        };
        let breaker: &'a CircuitBreaker = breaker;
        if let Some(ticket) = held.take() {
            return Ok(Some(breaker.resume(ticket)));
        }
        match breaker.try_acquire_until(until) {
            Ok(permit) => Ok(Some(permit)),
            Err(open) => Err(rejected(host, breaker, &open, number, started, last.take())),
        }
    }

    /// What the breaker says to a hedge about to start. Shut when it moved on since it
    /// admitted the series. Open without a permit when it is closed, since the race's
    /// permit covers it. Otherwise, half-open or recovering, a hedge is a call of its own
    /// and needs a permit of its own, a probe when half-open, and does not start without
    /// one.
    fn hedge_gate<'p>(&self, breaker: Option<&'p CircuitBreaker>) -> Gate<'p> {
        let Some(breaker) = breaker else {
            return Gate::Open(None);
        };
        if self.opened() {
            return Gate::Shut;
        }
        match breaker.state() {
            BreakerState::Closed | BreakerState::ForcedClosed => Gate::Open(None),
            _ => match breaker.try_acquire() {
                Ok(permit) => Gate::Open(Some(permit)),
                Err(_) => Gate::Shut,
            },
        }
    }

    /// Whether the breaker opened since the series began: it should stop.
    fn opened(&self) -> bool {
        match self {
            Guard::None => false,
            Guard::Series(permit) => !permit.is_current(),
            Guard::Attempts { breaker, .. } => breaker.is_open(),
        }
    }
}

/// The breaker's error for a series whose attempt `number` it rejected; `last` is the
/// error of the attempt before.
fn rejected<H: Host>(
    host: &H,
    breaker: &CircuitBreaker,
    open: &BreakerOpen,
    number: u32,
    started: Instant,
    last: Option<NodeError>,
) -> NodeError {
    host.rejected(breaker.name(), open.state());
    let error = NodeError::BreakerOpen {
        node: host.name().to_owned(),
        breaker: breaker.name().to_owned(),
        state: open.state(),
        retry_after: open.retry_after(),
    };
    match last {
        Some(last) if number > 1 => {
            give_up(host, number - 1, started, StopReason::BreakerOpened, last)
        }
        _ => error,
    }
}

/// The retry series, a single attempt without a retry policy; `first` is its first attempt
/// when the fast path started it.
async fn series<H: Host>(
    host: &H,
    policies: &ResolvedPolicies,
    mut guard: Guard<'_, '_>,
    deadline: Option<Instant>,
    started: Instant,
    log: &mut AttemptLog,
    mut first: Option<FirstAttempt<H::Attempt>>,
) -> Result<H::Value, NodeError> {
    let retry = policies.declared.retry.as_ref();
    // Made on the first retry: a series that succeeds at once never needs it.
    let mut backoff: Option<BackoffIter> = None;
    if first.is_none() {
        policies.deposit();
    }
    let mut delay_before = Duration::ZERO;
    let mut number = 0u32;
    // The last backoff was clipped by the deadline: this attempt is the last.
    let mut after_clip = false;
    // The error of the attempt before, once one failed.
    let mut last: Option<NodeError> = None;
    loop {
        number += 1;
        let resumed = first.take();
        // A retry follows a backoff sized to leave it the minimum attempt time; when the
        // backoff's timer fired late and left less, the attempt still starts, as the last.
        let now = Instant::now();
        if number > 1 && policies.too_late(deadline, now) {
            after_clip = true;
        }
        // A resumed first attempt passed this check on the fast path.
        if resumed.is_none() && !policies.may_start(deadline, now, after_clip) {
            let error = out_of_time(host, number - 1, started);
            return Err(match retry {
                Some(_) if number > 1 => give_up(
                    host,
                    number - 1,
                    started,
                    StopReason::DeadlineExceeded,
                    error,
                ),
                _ => error,
            });
        }
        let until = || policies.cut(now, deadline).until;
        let permit = guard.attempt_permit(host, number, started, until, &mut last)?;
        let at = Race {
            first: number,
            max: 0,
            deadline,
            started,
            delay_before,
        };
        let (out, start, waits);
        (out, start, number, waits) = step(host, policies, &guard, at, resumed, log).await;
        let out = match permit {
            Some(permit) => tell(permit, policies, out, start),
            None => out,
        };
        // A series that succeeds at its first attempt, at once, has nothing to add to the
        // node's own start and end: its log stays empty, and costs nothing.
        if let Some(w) = waits.filter(|w| number > 1 || out.is_err() || !w.is_none()) {
            log.push(log_entry(host, number, start, w, delay_before, &out));
        }
        let error = match out {
            Ok(value) => return Ok(value),
            Err(e) => e,
        };
        let Some(retry) = retry else {
            return Err(error);
        };
        let failed = Failed {
            number,
            max_attempts: retry.max_attempts,
            out_of_time: matches!(error, NodeError::DeadlineExceeded { .. }),
            after_clip,
            deadline,
            min_attempt: policies.min_attempt,
        };
        let (delay, clipped, error) =
            backoff_after(host, retry, &guard, failed, &mut backoff, started, error)?;
        after_clip = clipped;
        delay_before = delay;
        if delay.is_zero() {
            // A series with no backoff still lets its worker run other tasks, and notice a
            // cancelled run, now and then.
            tokio::task::consume_budget().await;
        } else {
            tokio::time::sleep(delay).await;
            // The breaker may have opened while we waited.
            if guard.opened() {
                let reason = StopReason::BreakerOpened;
                return Err(give_up(host, number, started, reason, error));
            }
        }
        last = Some(error);
    }
}

/// Attempt `at.first`, or with a hedge policy a race of it and its hedges. Returns its
/// output, when it began, the number of the last attempt started, and its waits for
/// permits; `None` for a race, which logs its attempts itself.
async fn step<H: Host>(
    host: &H,
    policies: &ResolvedPolicies,
    guard: &Guard<'_, '_>,
    mut at: Race,
    resumed: Option<FirstAttempt<H::Attempt>>,
    log: &mut AttemptLog,
) -> (Result<H::Value, NodeError>, Instant, u32, Option<Waits>) {
    let Some(hedge) = &policies.declared.hedge else {
        log.started = at.first;
        let number = at.first;
        let a = attempt(host, policies, number, at.deadline, at.started, resumed).await;
        return (a.out, a.start, number, Some(a.waits));
    };
    // A node with a hedge is never started on the fast path.
    debug_assert!(
        resumed.is_none(),
        "a hedged node's first attempt runs in the onion"
    );
    at.max = policies
        .declared
        .retry
        .as_ref()
        .map_or(hedge.hedges().saturating_add(1), |r| r.max_attempts);
    let gate = || guard.hedge_gate(policies.breaker.as_ref());
    let Raced { out, start, last } =
        hedged_attempt::race(host, policies, hedge, at, &gate, log).await;
    log.started = last;
    (out, start, last, None)
}

/// The log entry of attempt `number`, which began at `start` after `delay_before`, waited
/// `waits` for permits and injected faults, and ended now with `out`.
pub(super) fn log_entry<H: Host, V>(
    host: &H,
    number: u32,
    start: Instant,
    waits: Waits,
    delay_before: Duration,
    out: &Result<V, NodeError>,
) -> AttemptReport {
    AttemptReport {
        number,
        start: host.offset(start),
        end: host.offset(Instant::now()),
        permit_wait: waits.permit,
        rate_limit_wait: waits.rate_limit,
        injected_latency: waits.injected_latency,
        injected_error: waits.injected_error,
        delay_before,
        error: out.as_ref().err().map(ToString::to_string),
        hedge: false,
        cancelled: false,
        overran: waits.overran,
    }
}

/// After an attempt `failed` with `error`: the backoff before the next attempt, whether the
/// deadline clipped it, making the next attempt the last, and the error kept for the
/// series' end; or the series' final error. Draws the retry from the retry budget, and
/// tells the host the retry is scheduled.
fn backoff_after<H: Host>(
    host: &H,
    retry: &Retry,
    guard: &Guard<'_, '_>,
    failed: Failed,
    backoff: &mut Option<BackoffIter>,
    started: Instant,
    error: NodeError,
) -> Result<(Duration, bool, NodeError), NodeError> {
    let number = failed.number;
    // The user's predicate and backoff may panic: the series ends with the panic.
    let panicked = std::cell::Cell::new(None);
    let next = stop::after_failure(
        failed,
        || {
            let retryable = catch(UserCode::RetryPredicate, || retry.is_retryable(&error));
            retryable.unwrap_or_else(|panic| {
                panicked.set(Some(panic));
                false
            })
        },
        || guard.opened(),
        || {
            let delays = backoff.get_or_insert_with(|| retry.backoff.iter());
            catch(UserCode::Backoff, || delays.next()).unwrap_or_else(|panic| {
                panicked.set(Some(panic));
                None
            })
        },
        || {
            let hint = retry.delay_from.as_ref()?;
            catch(UserCode::RetryDelay, || hint(&error)).unwrap_or_else(|panic| {
                panicked.set(Some(panic));
                None
            })
        },
        Instant::now,
    );
    if let Some(panic) = panicked.into_inner() {
        return Err(panic);
    }
    let (delay, last) = match next {
        Next::Retry { delay, last } => (delay, last),
        Next::Stop(reason) => return Err(give_up(host, number, started, reason, error)),
    };
    if let Some(budget) = retry.budget.as_ref() {
        if !budget.try_withdraw() {
            let reason = StopReason::RetryBudgetExhausted {
                budget: budget.name().to_owned(),
            };
            return Err(give_up(host, number, started, reason, error));
        }
    }
    let node = host.name();
    tracing::debug!(node, attempt = number, ?delay, error = %error, "retry scheduled");
    let remaining = failed
        .deadline
        .map(|d| d.saturating_duration_since(Instant::now()));
    host.retry_scheduled(number + 1, delay, remaining);
    Ok((delay, last, error))
}

/// Runs `f`, user code of kind `code`, catching a panic as that code's error.
fn catch<R>(code: UserCode, f: impl FnOnce() -> R) -> Result<R, NodeError> {
    std::panic::catch_unwind(AssertUnwindSafe(f))
        .map_err(|panic| NodeError::from_panic(code, panic.as_ref()))
}

/// The error of a series whose deadline left no room for attempt `attempts + 1`.
fn out_of_time<H: Host>(host: &H, attempts: u32, started: Instant) -> NodeError {
    NodeError::DeadlineExceeded {
        node: host.name().to_owned(),
        attempts,
        elapsed: started.elapsed(),
    }
}

fn give_up<H: Host>(
    host: &H,
    attempts: u32,
    started: Instant,
    reason: StopReason,
    last: NodeError,
) -> NodeError {
    NodeError::GaveUp {
        node: host.name().to_owned(),
        attempts,
        elapsed: started.elapsed(),
        reason,
        last: Box::new(last),
    }
}
