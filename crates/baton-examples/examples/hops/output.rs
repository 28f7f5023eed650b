//! What the example prints for each call of A: A's answer, then a line per hop.

use std::time::Duration;

use baton_examples::millis;
use tokio::time::Instant;

use crate::reports::HopReport;

/// The first caller's `budget`, A's `status`, and a line per hop of `reports`, timed
/// against A's `deadline`.
pub(crate) fn print_call(
    budget: Duration,
    status: reqwest::StatusCode,
    deadline: Instant,
    reports: &[HopReport],
) {
    println!(
        "first caller's budget {} ms: A answered {status}",
        budget.as_millis()
    );
    println!("  hop  budget     stopped vs A's deadline  nodes");
    for report in reports {
        print_hop(report, deadline);
    }
}

/// One hop's line: its budget, when it stopped against A's `deadline`, its nodes' ends.
fn print_hop(report: &HopReport, deadline: Instant) {
    let budget = report
        .budget
        .map_or_else(|| "none".to_owned(), |b| format!("{:.1} ms", millis(b)));
    let lag = if report.stopped >= deadline {
        format!("+{:.1} ms", millis(report.stopped - deadline))
    } else {
        format!("-{:.1} ms", millis(deadline - report.stopped))
    };
    let nodes: Vec<String> = report
        .nodes
        .iter()
        .map(|n| match &n.error {
            None => format!("{} {} ({} att.)", n.node, n.outcome, n.attempts),
            Some(_) if n.downstream_expired => format!(
                "{} {}: next hop's deadline passed, not retried ({} att.)",
                n.node, n.outcome, n.attempts
            ),
            Some(e) => format!("{} {} {e} ({} att.)", n.node, n.outcome, n.attempts),
        })
        .collect();
    println!(
        "  {:<4} {budget:<10} {lag:<24} {}",
        report.hop,
        nodes.join(", ")
    );
    if report.hop == "C" {
        println!("       C's work started {} time(s)", report.work_started);
    }
}
