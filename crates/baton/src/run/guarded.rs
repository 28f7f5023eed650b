//! The fast path of a node with policies: most attempts succeed on their first poll, and
//! such a node should cost little more than a bare one (no boxed onion future, no extra
//! clock read, no reference count touched).
//!
//! The driver starts the first attempt here, exactly as the onion would (deadline check,
//! breaker permit, retry-budget deposit, the attempt counted, its cut computed), and polls it
//! once. When it succeeds at once, the node is done: the breaker is told, the record is
//! written. Otherwise the attempt, still running or ended, is handed to the onion with the
//! permit ([`First`]), and the series goes on there as if the onion had started it: timeouts
//! and deadlines, retries, the breaker's verdict, the fallback.
//!
//! Not taken for routers, branches, nodes with a bulkhead (whose permit is awaited), nodes
//! whose deadline leaves less than the minimum attempt time, an open breaker (the onion
//! reports it), or when `tracing` spans are made.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::time::Instant;

use super::state::{Record, RunState};
use crate::graph::NodeKind;
use crate::policy::onion::{self, First, FirstAttempt};
use crate::report::Outcome;

/// Runs node `id`'s first attempt up to its first poll: `Some(Ok(record))` when it
/// succeeded, `Some(Err(first))` to hand it to the onion, `None` when the node does not take
/// this path (nothing was done).
pub(super) fn first_attempt<I: Send + Sync + 'static>(
    run: &Arc<RunState<I>>,
    id: u32,
    start: Instant,
    span: &tracing::Span,
    cx: &mut Context<'_>,
) -> Option<Result<Record, First>> {
    let graph = &run.graph;
    if !span.is_disabled() || !matches!(graph.kind(id), NodeKind::Task) {
        return None;
    }
    let policy = graph.policy(id)?;
    if policy.bulkhead.is_some() {
        return None;
    }
    let core = &run.core;
    // The same deadline, check and cut as the onion's first attempt.
    let deadline = onion::node_deadline(core.deadline(), policy, start);
    if onion::too_late(policy, deadline, start) {
        return None;
    }
    let permit = match &policy.breaker {
        None => None,
        Some(breaker) => Some((breaker, breaker.try_acquire().ok()?)),
    };

    super::exec::started(run, id);
    onion::deposit(policy);
    let until = onion::Cut::new(policy, start, deadline).until;
    run.attempt_started_with(id, 1, || until.map(|u| u.saturating_duration_since(start)));
    let attempt = match run.call_task(id, 1, until, None) {
        Err(error) => FirstAttempt::NotStarted(error),
        Ok(mut fut) => match std::panic::catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx))) {
            Ok(Poll::Ready(Ok(value))) => {
                let end = core.now();
                if let Some((breaker, permit)) = permit {
                    // Only a slow-call rule reads the duration: skip the arithmetic otherwise.
                    let elapsed = if breaker.times_calls() {
                        end.saturating_duration_since(start)
                    } else {
                        std::time::Duration::ZERO
                    };
                    permit.success(elapsed);
                }
                let record = Record::ended(Outcome::Succeeded, Some(value), Some(start), end);
                return Some(Ok(record));
            }
            Ok(Poll::Ready(Err(error))) => FirstAttempt::Ended(Ok(Err(error))),
            Err(panic) => FirstAttempt::Ended(Err(panic)),
            Ok(Poll::Pending) => FirstAttempt::Running(fut),
        },
    };
    Some(Err(First {
        attempt,
        permit: permit.map(|(breaker, p)| p.into_owned(breaker)),
    }))
}
