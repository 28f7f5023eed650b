//! A hedged attempt: the attempt, and the hedges started after it while it runs; the first
//! to succeed wins and the others are dropped.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::time::{Instant, Sleep, sleep_until};

use super::attempt::{Attempted, Waits, attempt};
use super::series::{AttemptLog, log_entry};
use super::{Host, Policies};
use crate::error::NodeError;
use crate::policy::Hedge;

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

enum Step<V> {
    Ended(u32, Attempted<V>),
    Hedge,
}

/// Runs attempt `race.first` and, each time the hedge delay passes with attempts still
/// running, a hedge (while the series' maximum attempts, its deadline, its breaker and
/// its retry budget allow one). Logs every attempt, the cancelled ones too.
pub(super) async fn race<H: Host>(
    host: &H,
    policies: &Policies,
    hedge: &Hedge,
    race: Race,
    opened: &(dyn Fn() -> bool + Sync),
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
    running.push(numbered(host, policies, first, deadline, started));
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
                if !may_hedge(policies, deadline, now, opened) {
                    continue;
                }
                number += 1;
                host.hedged(number, delay);
                running.push(numbered(host, policies, number, deadline, started));
                flying.push((number, now));
                if number < max && number - first < hedge.hedges() {
                    delay = hedge.delay();
                    timer = Some(Box::pin(sleep_until(now + delay)));
                }
            }
        }
    }
}

/// Attempt `number`, with its number.
async fn numbered<H: Host>(
    host: &H,
    policies: &Policies,
    number: u32,
    deadline: Option<Instant>,
    started: Instant,
) -> (u32, Attempted<H::Value>) {
    (
        number,
        attempt(host, policies, number, deadline, started, None).await,
    )
}

/// Whether a hedge may start at `now`: the deadline leaves it the minimum attempt time,
/// the breaker has not opened, and the retry budget, if any, has a retry for it.
fn may_hedge(
    policies: &Policies,
    deadline: Option<Instant>,
    now: Instant,
    opened: &(dyn Fn() -> bool + Sync),
) -> bool {
    if !policies.may_start(deadline, now, false) || opened() {
        return false;
    }
    match policies.retry.as_ref().and_then(|r| r.budget.as_ref()) {
        Some(budget) => budget.try_withdraw(),
        None => true,
    }
}

/// Logs the attempts `flying` when the winner ended: cancelled. `first` is the race's
/// first attempt (the others are hedges).
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
