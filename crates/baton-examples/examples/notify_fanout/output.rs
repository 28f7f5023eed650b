//! The fan-out example's output: the settings, a table of how each request's channels
//! ended, and per channel what its breaker spared the service.
//!
//! As it happens, an observer given to the orchestrator prints (`log.rs`):
//! - every breaker transition, with its time since the start:
//!   closed → open after the threshold of failed requests, open → half-open when the open
//!   duration has elapsed and a request asks, half-open → open (probe failed, fresh
//!   cooldown) or → closed (probe succeeded);
//! - for the watched channels (the one down, the slowed ones; all with `--verbose`), each
//!   attempt with the budget it had when it started and what it used, each backoff with the
//!   budget left, and each request the open breaker rejected without calling.
//!
//! Then one line per request (what each channel did, attempts, time used of its budget),
//! the breakers' final states, how many calls each service received (against how many a
//! naive retry loop would have made) and the orchestrator's stats panel.

use std::time::Duration;

use baton_examples::{CallError, Channel, Downstreams, millis};
use baton_graph::{CircuitBreaker, NodeError, NodeReport, Outcome, Report, retry::StopReason};

use crate::args::Args;
use crate::log::cause;
use crate::{MAX_ATTEMPTS, settings};

/// One cell of the per-request table: `ok 1×151/2000 ms`, `failed 3×141/500 ms: 503 …`.
fn cell(node: &NodeReport<'_>, budget: Duration) -> String {
    let used = format!(
        "{}×{:.0}/{:.0} ms",
        node.attempts(),
        millis(node.duration()),
        millis(budget)
    );
    match (node.outcome(), node.error()) {
        (Outcome::Succeeded, _) => format!("ok {used}"),
        (Outcome::Failed, Some(NodeError::BreakerOpen { .. })) => "rejected, no call".to_owned(),
        (Outcome::Failed, Some(e @ NodeError::GaveUp { reason, .. })) => {
            let why = match reason {
                StopReason::MaxAttempts => {
                    match e.task_error().and_then(|t| t.downcast_ref::<CallError>()) {
                        Some(CallError::Status { status, .. }) => {
                            format!("{} ×{}", status.as_u16(), node.attempts())
                        }
                        _ => cause(e),
                    }
                }
                StopReason::BreakerOpened => "breaker opened".to_owned(),
                StopReason::DeadlineExceeded => "budget spent".to_owned(),
                other => other.to_string(),
            };
            format!("failed {used}: {why}")
        }
        (Outcome::Failed, Some(e)) => format!("failed {used}: {}", cause(e)),
        (outcome, _) => outcome.to_string(),
    }
}

/// The traffic, and each channel's budget, breaker and latency.
pub(crate) fn print_settings(args: &Args) {
    println!(
        "{} borrow notifications, {} ms apart; {}; breakers open for {} ms",
        args.requests,
        args.interval_ms,
        match (args.down.0, args.up_after) {
            (Some(c), Some(n)) => format!("{c} is down until request {n}"),
            (Some(c), None) => format!("{c} is down (503)"),
            (None, _) => "every channel is up".to_owned(),
        },
        args.open_ms
    );
    for channel in Channel::ALL {
        let (budget, trips) = settings(channel);
        println!(
            "  {channel:<4} budget {:>4.0} ms, breaker trips after {trips} failed requests, base latency {:.0} ms",
            millis(budget),
            millis(channel.service().base_latency())
        );
    }
    println!(
        "  retry: {MAX_ATTEMPTS} attempts, backoff 15 ms ×2 (cap 200 ms), no jitter, no attempt with < 10 ms left\n"
    );
}

/// A line per request: when it started, and a [`cell`] per channel.
pub(crate) fn print_table(reports: &[(u32, Duration, Report)]) {
    println!("\nper request (attempts×time used/budget):");
    println!(
        "{:>4}  {:>7}  {:<32}  {:<32}  push",
        "req", "at (ms)", "mail", "sms"
    );
    for (n, at, report) in reports {
        let cells: Vec<String> = Channel::ALL
            .iter()
            .map(|c| {
                report
                    .by_name(c.name())
                    .map(|node| cell(&node, settings(*c).0))
                    .unwrap_or_default()
            })
            .collect();
        println!(
            "{n:>4}  {:>7.1}  {:<32}  {:<32}  {}",
            millis(*at),
            cells[0],
            cells[1],
            cells[2]
        );
    }
}

/// Per channel: its breaker's state, what was delivered and rejected, and what its
/// service received (with `down`, against what retries without a breaker would send).
pub(crate) fn print_channels(
    reports: &[(u32, Duration, Report)],
    breakers: &[CircuitBreaker],
    downstreams: &Downstreams,
    down: Option<Channel>,
) {
    println!();
    for (channel, breaker) in Channel::ALL.iter().zip(breakers) {
        let ended = |done: &dyn Fn(&NodeReport<'_>) -> bool| {
            reports
                .iter()
                .filter(|(_, _, r)| r.by_name(channel.name()).is_some_and(|n| done(&n)))
                .count()
        };
        let delivered = ended(&|n| n.outcome() == Outcome::Succeeded);
        let rejected = ended(&|n| matches!(n.error(), Some(NodeError::BreakerOpen { .. })));
        let service = channel.service();
        let naive = if down == Some(*channel) {
            format!(
                " of {} possible ({MAX_ATTEMPTS} attempts × {} requests)",
                reports.len() as u32 * MAX_ATTEMPTS,
                reports.len()
            )
        } else {
            String::new()
        };
        println!(
            "{channel:<4} breaker {:<9}  delivered {delivered:>2}/{}  rejected by the breaker {rejected:>2}  \
             stopped by the server at the caller's deadline {}  calls received {}{naive}",
            breaker.state().as_str(),
            reports.len(),
            downstreams.stopped_early(service),
            downstreams.calls(service),
        );
    }
}
