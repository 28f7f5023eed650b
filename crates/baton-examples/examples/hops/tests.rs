//! One deadline across three real HTTP services on `127.0.0.1` (A → B → C, each a baton
//! graph): the budget shrinks at each hop, C's work is cut at the deadline A's caller set,
//! a downstream's 504 is not retried, and C's work never starts with less than its
//! minimum attempt time.
//!
//! Real sockets, so tokio's real clock: the assertions are on outcomes (statuses, node
//! outcomes, attempts, the order of the budgets), never on durations.

use std::time::Duration;

use crate::config::HopConfig;
use crate::reports::{HopReport, NodeEnd};
use crate::servers::HopServers;

fn node<'a>(report: &'a HopReport, name: &str) -> &'a NodeEnd {
    report
        .nodes
        .iter()
        .find(|n| n.node == name)
        .unwrap_or_else(|| panic!("{} has no node {name}: {report:?}", report.hop))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_callers_deadline_stops_every_hop() -> Result<(), baton_graph::BoxError> {
    // A margin that leaves each answer 30 ms to come back before the hop above is cut,
    // even on a loaded machine.
    let config = HopConfig {
        margin: Duration::from_millis(30),
        ..HopConfig::default()
    };
    let servers = HopServers::start(&config).await?;
    let client = reqwest::Client::new();
    let _ = servers.call(&client, Duration::from_millis(200)).await?; // connect
    let _ = servers.reports(Duration::from_secs(5)).await;

    let (status, _) = servers.call(&client, Duration::from_millis(300)).await?;
    assert_eq!(status, reqwest::StatusCode::GATEWAY_TIMEOUT);
    let reports = servers.reports(Duration::from_secs(5)).await;
    let hops: Vec<_> = reports.iter().map(|r| r.hop).collect();
    assert_eq!(hops, ["A", "B", "C"], "{reports:?}");
    let (a, b, c) = (&reports[0], &reports[1], &reports[2]);
    // C has no timeout of its own: only the deadline propagated from A's caller cuts its
    // 5 s of work.
    let work = node(c, "work");
    assert_eq!(
        (work.outcome.as_str(), work.error.as_deref(), work.attempts),
        ("failed", Some("deadline_exceeded"), 1),
        "{c:?}"
    );
    // At least once: when B's call first fails otherwise than with the 504 (seen under
    // heavy load) and is retried, C's first run is cancelled and another starts.
    assert!(c.work_started >= 1, "{reports:#?}");
    // B and A stop at the deadline too: with the 504 from below (a downstream's expired
    // deadline, which ends the series; the paused-clock contract tests count its attempts
    // exactly), or, when that answer comes late, cut at their own deadline.
    for hop in [a, b] {
        let call = node(hop, "call");
        let cut = call
            .error
            .as_deref()
            .is_some_and(|e| e.ends_with("deadline_exceeded"));
        assert!(call.downstream_expired || cut, "{hop:?}");
        assert_eq!(call.outcome, "failed", "{hop:?}");
    }
    // The budget shrinks at each hop.
    let budgets: Vec<_> = reports
        .iter()
        .map(|r| r.budget.unwrap_or_default())
        .collect();
    assert!(
        budgets[0] > budgets[1] && budgets[1] > budgets[2],
        "{budgets:?}"
    );

    // Too little left for C's minimum attempt time: its work never starts. Each hop above
    // C spends 20 ms of local work and keeps a 30 ms margin, so 160 ms at A leaves C at
    // most 60 ms, and `work` at most 40 ms after C's local work: under its 50 ms minimum
    // attempt time, yet (on an unloaded machine, about 30 ms) enough to start without it.
    let (status, _) = servers.call(&client, Duration::from_millis(160)).await?;
    assert_eq!(status, reqwest::StatusCode::GATEWAY_TIMEOUT);
    let reports = servers.reports(Duration::from_secs(5)).await;
    assert!(reports.iter().any(|r| r.hop == "C"), "{reports:#?}");
    for report in reports.iter().filter(|r| r.hop == "C") {
        let work = node(report, "work");
        assert_eq!(work.attempts, 0, "{report:?}");
        assert_eq!(report.work_started, 0, "{report:?}");
    }
    servers.shutdown().await?;
    Ok(())
}
