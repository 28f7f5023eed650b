//! One deadline across three services on `127.0.0.1`, A → B → C, each a baton graph (see
//! `baton_examples::hops`): the first caller gives A a budget in `grpc-timeout`; each hop
//! does 20 ms of local work and passes what is left, less a 5 ms margin, to the next; C's
//! work would take 5 s.
//!
//! It prints, per hop, the budget it started with, when it stopped relative to A's
//! deadline (negative: before it), and how its nodes ended: once with a budget C's work
//! can start in (it is cut at C's deadline, and nobody retries a 504), once with one too
//! short for C's minimum attempt time (C's work never starts).
//!
//! ```text
//! cargo run --release -p baton-examples --example hops
//! ```

use std::time::Duration;

use baton_examples::hops::{HopConfig, HopReport, HopServers};
use baton_examples::{millis, ms};
use baton_graph::BoxError;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let config = HopConfig::default();
    let servers = HopServers::start(&config).await?;
    let client = reqwest::Client::new();
    // Open the pooled connections first, so that the budgets shown are not spent connecting.
    let _ = servers.call(&client, ms(200)).await?;
    let _ = servers.reports(Duration::from_secs(1)).await;

    for budget in [ms(300), ms(80)] {
        let (status, deadline) = servers.call(&client, budget).await?;
        println!(
            "first caller's budget {} ms: A answered {status}",
            budget.as_millis()
        );
        println!("  hop  budget     stopped vs A's deadline  nodes");
        for report in servers.reports(Duration::from_secs(1)).await {
            print_hop(&report, deadline);
        }
    }
    servers.shutdown().await?;
    Ok(())
}

/// One hop's line: its budget, when it stopped against A's `deadline`, its nodes' ends.
fn print_hop(report: &HopReport, deadline: tokio::time::Instant) {
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
