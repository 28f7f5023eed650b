//! How the order example words a report: the timeline, each attempt with its backoff, how
//! `stock` ended, which branch ran, and what `notify` said.
//!
//! An observer given to the orchestrator prints every breaker transition as it happens.
//! After the runs the example prints the last run's timeline (the report's `Display`), the
//! attempts of nodes that retried with their backoffs, which branch ran and which was not
//! taken, and the orchestrator's stats panel.
//!
//! In the default happy path it also makes the same calls one after another, as a hand-written
//! handler would (user 200 + sku 200 + stock 150 + ship 80 + notify 50 = 680 ms),
//! and prints both figures; with any failure flag that comparison is dropped (the serial
//! code has no retry, breaker or fallback, so its figure would compare different work).

use std::time::Duration;

use baton_examples::{CallError, millis};
use baton_graph::{NodeError, NodeReport, Outcome, Report};

use crate::Nodes;

pub(crate) fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort_unstable();
    match xs.len() {
        0 => Duration::ZERO,
        n if n % 2 == 1 => xs[n / 2],
        n => (xs[n / 2 - 1] + xs[n / 2]) / 2,
    }
}

/// The last attempt's error, short: `timed out after 300 ms`, `503 Service Unavailable`.
pub(crate) fn short(error: &NodeError) -> String {
    // The task's own error is kept typed: downcast it to the client's error.
    let call = error
        .task_error()
        .and_then(|e| e.downcast_ref::<CallError>());
    if let Some(CallError::Status { status, .. }) = call {
        return status.to_string();
    }
    match error.last_attempt() {
        NodeError::Timeout { limit, .. } => format!("timed out after {:.0} ms", millis(*limit)),
        NodeError::DeadlineExceeded { .. } => "cut by the run's deadline".to_owned(),
        NodeError::BreakerOpen { breaker, .. } => {
            format!("breaker `{breaker}` open, no call made")
        }
        other => other.to_string(),
    }
}

/// How `stock` ended, in a few words.
pub(crate) fn stock_summary(node: &NodeReport<'_>, value: Option<u64>) -> String {
    let qty = value.map_or_else(String::new, |q| format!(" {q}"));
    match (node.outcome(), node.error()) {
        (Outcome::Succeeded, _) if node.attempts() > 1 => {
            format!("succeeded{qty} on attempt {}", node.attempts())
        }
        (Outcome::Succeeded, _) => format!("succeeded{qty}"),
        (Outcome::Recovered, Some(e @ NodeError::GaveUp { attempts, .. })) => format!(
            "fallback{qty} after {attempts} failed attempts ({})",
            short(e)
        ),
        (Outcome::Recovered, Some(e)) => format!("fallback{qty}: {}", short(e)),
        (outcome, _) => format!(
            "{outcome}: {}",
            node.message().unwrap_or_else(|| "-".to_owned())
        ),
    }
}

/// Which branch of `dispatch` ran.
pub(crate) fn branch_taken(report: &Report) -> &'static str {
    ["ship", "shortage"]
        .into_iter()
        .find(|b| {
            report
                .by_name(b)
                .is_some_and(|n| n.outcome() != Outcome::NotTaken)
        })
        .unwrap_or("no branch")
}

/// Each attempt of the nodes that made more than one, with the backoff before it:
///
/// ```text
/// stock  #1   202.4 →  354.1 ms  stock answered 503 Service Unavailable
///        backoff 100 ms
/// stock  #2   455.4 →  607.4 ms  ok
/// ```
pub(crate) fn attempt_lines(report: &Report) -> Vec<String> {
    let width = report.nodes().map(|n| n.name().len()).max().unwrap_or(0);
    let mut lines = Vec::new();
    for node in report.nodes() {
        let log = node.attempt_log();
        if log.len() < 2 {
            continue;
        }
        for (i, a) in log.iter().enumerate() {
            if i > 0 {
                lines.push(format!(
                    "{:width$}  backoff {:.0} ms",
                    "",
                    millis(a.delay_before)
                ));
            }
            let what = match &a.error {
                // The attempt's error is text; drop its "node `x` attempt n " prefix.
                Some(e) => {
                    let prefix = format!("node `{}` attempt {} ", node.name(), a.number);
                    e.strip_prefix(&prefix).unwrap_or(e).to_owned()
                }
                None => "ok".to_owned(),
            };
            let name = if i == 0 { node.name() } else { "" };
            lines.push(format!(
                "{name:width$}  #{} {:>7.1} → {:>7.1} ms  {what}",
                a.number,
                millis(a.start),
                millis(a.end)
            ));
        }
    }
    lines
}

/// The full account of one run: timeline, attempts, branch, fallbacks.
pub(crate) fn print_details(report: &Report, nodes: &Nodes) {
    print!("{report}");
    let attempts = attempt_lines(report);
    if !attempts.is_empty() {
        println!("attempts (from the run's start):");
        for line in attempts {
            println!("  {line}");
        }
    }
    if let Some(stock) = report.node(nodes.stock) {
        let qty = report.get(nodes.stock).copied();
        println!("stock: {}", stock_summary(&stock, qty));
    }
    if let Some(dispatch) = report.node(nodes.dispatch) {
        match report.get(nodes.dispatch) {
            Some(d) => {
                let taken = branch_taken(report);
                let other = if taken == "ship" { "shortage" } else { "ship" };
                println!(
                    "dispatch: chose `{taken}` ({} {}); `{other}` not taken",
                    d.status, d.reference
                );
            }
            None => println!(
                "dispatch: {} ({})",
                dispatch.outcome(),
                dispatch.message().unwrap_or_default()
            ),
        }
    }
    if let Some(notify) = report.node(nodes.notify) {
        match (notify.outcome(), report.get(nodes.notify)) {
            (Outcome::Recovered, Some(msg)) => println!(
                "notify: fallback \"{msg}\" (after: {})",
                notify.error().map(short).unwrap_or_default()
            ),
            (_, Some(msg)) => println!("notify: \"{msg}\""),
            (outcome, None) => println!(
                "notify: {outcome} ({})",
                notify.message().unwrap_or_default()
            ),
        }
    }
}
