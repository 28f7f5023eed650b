//! A hedged attempt: the attempt, and the hedges started after it while it runs; the first
//! to succeed wins and the others are dropped.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::time::{Instant, Sleep, sleep_until};

use super::series::{AttemptLog, log_entry, tell};
use super::single_attempt::{Attempted, Waits, attempt};
use super::{Host, ResolvedPolicies};
use crate::error::NodeError;
use crate::policy::Hedge;
use crate::policy::breaker::BreakerPermit;

/// Where a race stands in its series.
pub(super) struct Race {
    /// The number of the race's first attempt.
    pub(super) first: u32,
    /// The series' maximum attempts: no hedge starts past it.
    pub(super) max: u32,
    pub(super) deadline: Option<Instant>,
    /// When the series started.
    pub(super) started: Instant,
    /// The backoff before the race's first attempt.
    pub(super) delay_before: Duration,
}

/// How a race ended: the winner's value, or the error of the attempt that failed last;
/// when that attempt began; the number of the last attempt started.
pub(super) struct Raced<V> {
    pub(super) out: Result<V, NodeError>,
    pub(super) start: Instant,
    pub(super) last: u32,
}

/// What the circuit breaker says to a hedge about to start.
pub(super) enum Gate<'p> {
    /// No hedge: the breaker moved on since it admitted the race, or it is half-open or
    /// recovering and has no permit to give.
    Shut,
    /// The hedge may start, holding the permit the breaker gave it when it needed one, as a
    /// half-open probe does. The permit is told the hedge's own result, or given back if
    /// the hedge is cancelled.
    Open(Option<BreakerPermit<'p>>),
}

enum Step<V> {
    Ended(u32, Attempted<V>),
    Hedge,
}

/// Runs attempt `race.first` and, each time the hedge delay passes with attempts still
/// running, a hedge, while the series' maximum attempts, its deadline, its breaker and its
/// retry budget allow one. Logs every attempt, the cancelled ones too.
pub(super) async fn race<'p, H: Host>(
    host: &H,
    policies: &'p ResolvedPolicies,
    hedge: &Hedge,
    race: Race,
    gate: &(dyn Fn() -> Gate<'p> + Sync),
    log: &mut AttemptLog,
) -> Raced<H::Value> {
    let Race {
        first,
        max,
        deadline,
        started,
        delay_before,
    } = race;
    // Attempts are logged as they end; the race's entries are put in order at its end.
    let mark = log.entries.len();
    let mut running = FuturesUnordered::new();
    running.push(numbered(host, policies, first, deadline, started, None));
    // The attempts in flight, and when each began.
    let begin = if first == 1 { started } else { Instant::now() };
    let mut flying = vec![(first, begin)];
    let mut number = first;
    let mut delay = hedge.delay();
    let mut timer: Option<Pin<Box<Sleep>>> =
        (number < max).then(|| Box::pin(sleep_until(Instant::now() + delay)));
    loop {
        let step = poll_fn(|cx| {
            if let Poll::Ready(Some((n, attempted))) = running.poll_next_unpin(cx) {
                return Poll::Ready(Step::Ended(n, attempted));
            }
            match timer.as_mut() {
                Some(t) => t.as_mut().poll(cx).map(|()| Step::Hedge),
                None => Poll::Pending,
            }
        })
        .await;
        match step {
            Step::Ended(n, attempted) => {
                flying.retain(|(m, _)| *m != n);
                let Attempted { out, start, waits } = attempted;
                let before = if n == first {
                    delay_before
                } else {
                    Duration::ZERO
                };
                let mut entry = log_entry(host, n, start, waits, before, &out);
                entry.hedge = n != first;
                if number > first || n > 1 || out.is_err() || !waits.is_none() {
                    log.push(entry);
                }
                if out.is_ok() {
                    hedge.record(start.elapsed());
                    // The losers are dropped: cancelled at their next `.await`.
                    running.clear();
                    cancelled(host, log, first, &flying);
                }
                if out.is_ok() || running.is_empty() {
                    let end = log.entries.len();
                    log.entries[mark.min(end)..].sort_by_key(|e| e.number);
                    return Raced {
                        out,
                        start,
                        last: number,
                    };
                }
            }
            Step::Hedge => {
                timer = None;
                let now = Instant::now();
                let Some(permit) = may_hedge(policies, deadline, now, gate) else {
                    continue;
                };
                number += 1;
                host.hedged(number, delay);
                running.push(numbered(host, policies, number, deadline, started, permit));
                flying.push((number, now));
                if number < max && number - first < hedge.hedges() {
                    delay = hedge.delay();
                    timer = Some(Box::pin(sleep_until(now + delay)));
                }
            }
        }
    }
}

/// Attempt `number`, with its number; `permit`, a hedge's own breaker permit, is told the
/// attempt's result, or given back if the attempt is dropped.
async fn numbered<H: Host>(
    host: &H,
    policies: &ResolvedPolicies,
    number: u32,
    deadline: Option<Instant>,
    started: Instant,
    permit: Option<BreakerPermit<'_>>,
) -> (u32, Attempted<H::Value>) {
    let mut attempted = attempt(host, policies, number, deadline, started, None).await;
    if let Some(permit) = permit {
        attempted.out = tell(permit, policies, attempted.out, attempted.start);
    }
    (number, attempted)
}

/// Whether a hedge may start at `now`, with the breaker permit it holds if it needs one:
/// the deadline leaves it the minimum attempt time, the breaker lets it through, and the
/// retry budget, if any, has a retry for it. `None`: it may not.
fn may_hedge<'p>(
    policies: &ResolvedPolicies,
    deadline: Option<Instant>,
    now: Instant,
    gate: &(dyn Fn() -> Gate<'p> + Sync),
) -> Option<Option<BreakerPermit<'p>>> {
    if !policies.may_start(deadline, now, false) {
        return None;
    }
    let Gate::Open(permit) = gate() else {
        return None;
    };
    // A permit taken for a hedge the budget refuses is dropped: given back, uncounted.
    match policies.retry_budget() {
        Some(budget) if !budget.try_withdraw() => None,
        _ => Some(permit),
    }
}

/// Logs the attempts `flying` when the winner ended: cancelled. `first` is the race's first
/// attempt; the others are hedges.
fn cancelled<H: Host>(host: &H, log: &mut AttemptLog, first: u32, flying: &[(u32, Instant)]) {
    let no_wait = Waits::default();
    for &(number, start) in flying {
        let mut entry = log_entry(
            host,
            number,
            start,
            no_wait,
            Duration::ZERO,
            &Ok::<(), _>(()),
        );
        entry.hedge = number != first;
        entry.cancelled = true;
        log.push(entry);
    }
}
