//! The fast path of a node with policies. Most attempts succeed on their first poll, and
//! such a node should cost little more than a bare one: no boxed onion future, no extra
//! clock read, no reference count touched.
//!
//! The driver prepares the first attempt here, exactly as the onion would: the deadline
//! check, the breaker permit, the retry-budget deposit, and its cut. It then counts and
//! calls the attempt and polls it as it does a bare node's attempt, holding the breaker's
//! permit as a [`Held`] ticket. An attempt that waits, returning `Pending`, is waited for
//! there too, as a bare node's is, under a timer that wakes the driver no later than its
//! cut, as the onion's `Deadline` would. [`wait`] does that, and a driver keeps one timer
//! from one such attempt to the next; the drivers an inline run's future polls together
//! share one (`first_attempt/shared.rs`). When the attempt succeeds, the node is done: the
//! breaker is told, the record is written.
//! If it failed, panicked, or its cut passed, the attempt, still running or ended, is
//! handed to the onion with the permit as a [`First`]. The series goes on there as if the
//! onion had started it: the timeout or deadline error, retries, the breaker's verdict, the
//! fallback.
//!
//! Not taken for nodes with a bulkhead or a rate limiter, whose permits are awaited. Nor
//! for nodes whose deadline leaves less than the minimum attempt time, for a breaker that
//! is not closed, which the onion asks once, or when `tracing` spans are made. A router's
//! branch takes it as any node does.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::run::state::RunState;
use crate::engine::task::ctx::{AttemptFuture, CtxCut};
use crate::onion::{First, FirstAttempt, ResolvedPolicies};
use crate::policy::CircuitBreaker;
use crate::policy::deadline::KeptTimer;
use crate::report::{AttemptReport, Record};

mod held;
mod shared;
use held::Armed;
pub(in crate::engine) use held::Held;
pub(in crate::engine) use shared::{SharedTimer, leave};

/// Prepares the first attempt of a task node with `policy`, starting at `start`: takes the
/// breaker's permit and deposits in the retry budget. Gives the attempt's cut, when it must
/// end, for its `Ctx`, and what the driver holds while it runs. With no budget and no run
/// deadline, the cut given is the start, to which `Ctx::deadline` adds the timeout if it is
/// asked. `None` when the node does not take this path; nothing was done then. The driver
/// then counts the node and the attempt and calls the task as for a bare node.
#[inline(always)]
pub(in crate::engine) fn prepare<I: Send + Sync + 'static>(
    run: &Arc<RunState<I>>,
    policy: &ResolvedPolicies,
    start: Instant,
) -> Option<(CtxCut, Held)> {
    let run_deadline = run.core.deadline();
    // The same deadline, check and cut as the onion's first attempt.
    let simple = policy.simple && run_deadline.is_none();
    let at = if simple {
        CtxCut::TimeoutAfter(start)
    } else {
        if policy.onion_only {
            return None;
        }
        let deadline = policy.deadline(run_deadline, start);
        if policy.too_late(deadline, start) {
            return None;
        }
        CtxCut::At(policy.cut(start, deadline).until)
    };
    let ticket = match &policy.breaker {
        None => None,
        // Only a closed breaker's: the onion asks a breaker in any other state, once.
        Some(breaker) => Some(breaker.closed_ticket()?),
    };
    if !policy.simple {
        policy.deposit();
    }
    Some((at, Held::new(ticket, simple)))
}

/// Node `id`'s first attempt, started at `start`, returned `Pending`: waits for its cut,
/// as the onion's `Deadline` does after its inner future, under the driver's `timer`, which
/// it keeps from one such attempt to the next. The timer may wake the driver before an
/// attempt's cut, never after it:
///
/// - At the attempt's first wait, the cut is computed as [`prepare`] did: the same function
///   of `start`, the policy and the run's deadline. A timer still running at an earlier
///   instant, an ended attempt's cut, is left there when this cut is within 1/64 of that
///   attempt's timeout after it (`deadline::reach`), as when attempts with one timeout
///   follow each other within microseconds. Otherwise it is set for the cut: moved
///   with [`Sleep::reset`](tokio::time::Sleep::reset) when it elapsed or runs later than the cut, made anew when it
///   runs earlier, which takes the old one out of tokio's wheel. An attempt with no cut
///   takes a running timer out too.
/// - At every wait, the timer is looked at through [`KeptTimer::poll`]: polled outside
///   tokio's coop budget, as any future a task waits on must be, unless it is registered
///   already with a waker that wakes the same task and has not elapsed. When it is
///   `Ready` at an instant earlier than the cut, because it was left there, it is moved to
///   the cut and polled again; at the cut, the cut has passed.
///
/// Attempts that follow each other quickly so share one timer, registered once: making a
/// timer per attempt would allocate it and take the lock of tokio's timer wheel twice, to
/// insert it and, when the attempt ends, to remove it. An attempt that outlives the earlier
/// cut left costs one wake-up of the driver, which polls its futures once more, as after
/// any spurious wake-up, and one move of the elapsed timer. Attempts that take a while, as
/// calls over the network do, each get a timer at their own cut: one left at an earlier
/// cut would fire while the next attempt runs, waking the driver's task and tokio's time
/// driver for nothing.
///
/// A driver that the run's future polls together with others passes their `shared` timer:
/// the attempt is armed on that one instead, unless arming it there would move it later
/// under another attempt (`first_attempt/shared.rs`). One armed there and then polled on its
/// own, by a driver moved out of the run's future, is armed again on its driver's timer.
///
/// `Ready` when the cut has passed: the driver then hands the attempt, still running, to
/// the onion, which polls it once more, then reports the timeout or deadline and goes on as
/// for any cut attempt. `Pending` otherwise, also for a node without a cut.
///
/// # Panics
///
/// Tokio panics making, moving or polling a timer on a runtime built without timers, or
/// shutting down; the driver catches it and fails the node.
pub(in crate::engine) fn wait<I: Send + Sync + 'static>(
    run: &RunState<I>,
    (id, start): (u32, Instant),
    held: &mut Held,
    timer: &mut KeptTimer,
    shared: Option<&mut SharedTimer>,
    cx: &mut Context<'_>,
) -> Poll<()> {
    match (held.armed(), shared) {
        (Armed::Untimed, _) => return Poll::Pending,
        (Armed::Yes, _) => {}
        (Armed::Shared, Some(shared)) => return shared::wait(run, (id, start), held, shared, cx),
        // Armed on the shared timer, now polled on its own: armed again on its timer.
        (Armed::Shared | Armed::No, shared) => {
            let Some(until) = cut(run, id, start) else {
                held.set_armed(Armed::Untimed);
                if timer.get().is_some_and(|t| !t.is_elapsed()) {
                    timer.clear();
                }
                return Poll::Pending;
            };
            if let Some(shared) = shared {
                if shared::arm(run, (id, start, until), held, shared) {
                    return shared::poll(run, (id, start), held, shared, cx);
                }
            }
            held.set_armed(Armed::Yes);
            // Running at an earlier cut near this one, it wakes the driver in time. One
            // that elapsed is moved now rather than after a poll that would say so.
            if !timer.stands_for(until) {
                set(run, timer, id, start, until);
            }
        }
    }
    if timer.poll(cx).is_none_or(|polled| polled.is_pending()) {
        return Poll::Pending;
    }
    // Elapsed: at the attempt's cut, or at an earlier one it was left at.
    match (cut(run, id, start), timer.get()) {
        (Some(until), Some(t)) if t.deadline() < until => {
            set(run, timer, id, start, until);
            timer.poll(cx).unwrap_or(Poll::Pending)
        }
        _ => Poll::Ready(()),
    }
}

/// Sets the driver's `timer` for `until`, the cut of node `id`'s first attempt, started at
/// `start`, after the run's timer floor (`RunCore::floor_timers`): see [`KeptTimer::set`].
fn set<I: Send + Sync + 'static>(
    run: &RunState<I>,
    timer: &mut KeptTimer,
    id: u32,
    start: Instant,
    until: Instant,
) {
    run.floor_timers(until, || time_given(run, id, start, until));
    set_unfloored(run, timer, id, start, until);
}

/// [`set`] without the run's timer floor: for the timer the drivers polled together share,
/// which stands for a floor while it is set, as it runs no later than any attempt armed on
/// it and stays in tokio's wheel until it fires or the run's future drops, and past that on
/// a multi-thread runtime (`first_attempt/shared.rs`, `Spares::keep_standing`). Made the
/// first time, it is the running timer an earlier run left, if the graph keeps one for this
/// run (`Spares::keep_standing`), left as it is when it stands for `until`.
fn set_unfloored<I: Send + Sync + 'static>(
    run: &RunState<I>,
    timer: &mut KeptTimer,
    id: u32,
    start: Instant,
    until: Instant,
) {
    if !timer.is_made() {
        let (spare, home) = (&run.graph.spare, run.core.home());
        let runtime = run.core.standing_runtime();
        match runtime.and_then(|runtime| spare.take_standing(home, runtime)) {
            Some(standing) => {
                *timer = standing;
                if timer.stands_for(until) {
                    return;
                }
            }
            None => {
                if let Some(kept) = spare.take_timer(home) {
                    *timer = kept;
                }
            }
        }
    }
    timer.set(until, time_given(run, id, start, until));
}

/// The time node `id`'s first attempt, started at `start` and cut at `until`, is given:
/// its timeout, or, with none, the time from its start to its cut.
fn time_given<I: Send + Sync + 'static>(
    run: &RunState<I>,
    id: u32,
    start: Instant,
    until: Instant,
) -> Duration {
    run.policy(id)
        .and_then(|policy| policy.declared.timeout)
        .unwrap_or_else(|| until.saturating_duration_since(start))
}

/// When node `id`'s first attempt, started at `start`, is cut, as [`prepare`] computed it,
/// or would have had it been asked: see [`CtxCut::TimeoutAfter`].
pub(in crate::engine) fn cut<I: Send + Sync + 'static>(
    run: &RunState<I>,
    id: u32,
    start: Instant,
) -> Option<Instant> {
    run.policy(id)?.first_cut(run.core.deadline(), start)
}

/// Node `id`'s first attempt, started at `start`, succeeded at `end`, on its first poll or
/// after waiting within its cut: tells the breaker. Returns how long past its cut it ended,
/// when it did.
#[inline]
pub(in crate::engine) fn succeeded<I: Send + Sync + 'static>(
    run: &RunState<I>,
    id: u32,
    held: Held,
    start: Option<Instant>,
    end: Instant,
) -> Option<Duration> {
    let policy = run.policy(id)?;
    if let (Some(ticket), Some(breaker)) = (held.ticket(), policy.breaker.as_ref()) {
        // Only a slow-call rule reads the duration.
        breaker.closed_success(ticket, || {
            start.map_or(Duration::ZERO, |start| end.saturating_duration_since(start))
        });
    }
    let start = start?;
    let until = if held.timeout_only() {
        // What `first_cut` gives with no deadline, without its detour through one.
        let timeout = policy.declared.timeout?;
        start
            .into_std()
            .checked_add(timeout)
            .map(Instant::from_std)?
    } else {
        policy.first_cut(run.core.deadline(), start)?
    };
    (end > until).then(|| end.saturating_duration_since(until))
}

/// `record`, of a node whose first attempt overran its cut by `by`, with an attempt log
/// saying so. It computed without yielding, so it could not be cut.
#[cold]
pub(in crate::engine) fn overran<I: Send + Sync + 'static>(
    run: &RunState<I>,
    record: Record,
    by: Duration,
) -> Record {
    // An attempt overruns only from a known start.
    let Some(start) = record.start else {
        return record;
    };
    let (from, to) = (run.core.offset(start), run.core.offset(record.end));
    record.with_log(vec![AttemptReport::overran(1, from, to, by)])
}

/// Node `id`'s first attempt failed, panicked, or was cut: what the onion goes on with.
pub(in crate::engine) fn hand_over<I: Send + Sync + 'static>(
    run: &RunState<I>,
    id: u32,
    held: Held,
    attempt: FirstAttempt<AttemptFuture>,
) -> First<AttemptFuture> {
    // The driver keeps its timer for its next attempt that waits: the onion makes its own.
    let permit = match (held.ticket(), breaker(run, id)) {
        (Some(ticket), Some(breaker)) => Some(breaker.resume(ticket).into_owned(breaker)),
        _ => None,
    };
    First { attempt, permit }
}

/// Node `id`'s first attempt is abandoned, because the run was cancelled or the driver
/// dropped: the breaker's permit is released uncounted.
pub(in crate::engine) fn release<I: Send + Sync + 'static>(run: &RunState<I>, id: u32, held: Held) {
    if let (Some(ticket), Some(breaker)) = (held.ticket(), breaker(run, id)) {
        drop(breaker.resume(ticket));
    }
}

fn breaker<I: Send + Sync + 'static>(run: &RunState<I>, id: u32) -> Option<&CircuitBreaker> {
    run.policy(id)?.breaker.as_ref()
}
