//! Skip propagation: a node whose upstream produced no value is `Skipped`, never started,
//! and names both the immediate upstream and the root cause, through several levels
//! (`docs/contract.md`, rule 2).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use baton_graph::{BoxError, Graph, Node, NodeError, Outcome, Report};
use tokio::time::sleep;

use crate::ms;

#[derive(Debug)]
struct Refused;
impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("connection refused")
    }
}
impl std::error::Error for Refused {}

#[derive(Debug)]
struct DbDown {
    source: Refused,
}
impl fmt::Display for DbDown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("database down")
    }
}
impl std::error::Error for DbDown {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// A task that counts its invocations and would produce `()` after `ms`.
fn counted(
    g: &mut baton_graph::GraphBuilder<()>,
    name: &str,
    ups: Vec<Node<()>>,
    wait: u64,
    calls: &Arc<AtomicUsize>,
) -> Node<()> {
    let calls = Arc::clone(calls);
    g.node(name)
        .after(ups)
        .task(move |_ctx, _ups: Vec<Arc<()>>| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move {
                sleep(ms(wait)).await;
                Ok::<_, BoxError>(())
            }
        })
}

fn assert_skipped(report: &Report, name: &str, because: &str, root: &str, message: &str, end: u64) {
    let n = report.by_name(name).expect("node");
    assert_eq!(n.outcome(), Outcome::Skipped, "{name}");
    assert_eq!(
        n.skipped_because().map(|u| u.name()),
        Some(because),
        "{name} because"
    );
    assert_eq!(n.root_cause().map(|u| u.name()), Some(root), "{name} root");
    assert_eq!(n.message().as_deref(), Some(message), "{name} message");
    assert_eq!(n.attempts(), 0, "{name} attempts");
    assert_eq!(n.start(), None, "{name} start");
    assert_eq!(n.end(), ms(end), "{name} end");
    assert_eq!(n.duration(), Duration::ZERO, "{name} duration");
    assert!(n.error().is_none(), "{name} has no error of its own");
}

#[tokio::test(start_paused = true)]
async fn skip_propagates_through_several_levels_with_root_cause() {
    let calls = Arc::new(AtomicUsize::new(0));
    let mut g = Graph::<()>::builder();
    let a = g.node("a").task(|_ctx, ()| async {
        sleep(ms(100)).await;
        Err::<(), _>(DbDown { source: Refused })
    });
    let b = counted(&mut g, "b", vec![a], 10, &calls);
    let c = counted(&mut g, "c", vec![b], 10, &calls);
    let d = counted(&mut g, "d", vec![c], 10, &calls);
    // Two upstreams, one fails: the other succeeds after the failure ...
    let x = counted(&mut g, "x", vec![], 300, &calls);
    let both_late = counted(&mut g, "both_late", vec![x, a], 10, &calls);
    // ... or before it.
    let y = counted(&mut g, "y", vec![], 50, &calls);
    let both_early = counted(&mut g, "both_early", vec![a, y], 10, &calls);
    // A node after a skipped node and a succeeded one.
    let e = counted(&mut g, "e", vec![y, d], 10, &calls);
    let graph = g.build().expect("valid");

    let report = graph.run(()).await.expect("preserve-partial returns Ok");

    let fa = report.node(a).expect("a");
    assert_eq!(fa.outcome(), Outcome::Failed);
    assert_eq!(fa.attempts(), 1);
    assert_eq!(fa.start(), Some(ms(0)));
    assert_eq!(fa.end(), ms(100));
    assert!(fa.skipped_because().is_none());
    assert!(fa.root_cause().is_none());
    assert_eq!(
        fa.message().as_deref(),
        Some("database down: connection refused")
    );
    let err = fa.error().expect("error");
    assert!(matches!(err, NodeError::Task(_)));
    assert_eq!(err.to_string(), "database down");
    let db = err
        .task_error()
        .and_then(|e| e.downcast_ref::<DbDown>())
        .expect("the task's own error, downcastable");
    assert_eq!(db.source.to_string(), "connection refused");
    assert_eq!(
        fa.error_chain().map(|e| e.to_string()).collect::<Vec<_>>(),
        ["database down", "connection refused"]
    );

    let direct = "upstream `a` failed: database down: connection refused";
    assert_skipped(&report, "b", "a", "a", direct, 100);
    assert_skipped(
        &report,
        "c",
        "b",
        "a",
        "upstream `b` skipped; root cause `a` failed: database down: connection refused",
        100,
    );
    assert_skipped(
        &report,
        "d",
        "c",
        "a",
        "upstream `c` skipped; root cause `a` failed: database down: connection refused",
        100,
    );
    assert_skipped(&report, "both_late", "a", "a", direct, 100);
    assert_skipped(&report, "both_early", "a", "a", direct, 100);
    assert_skipped(
        &report,
        "e",
        "d",
        "a",
        "upstream `d` skipped; root cause `a` failed: database down: connection refused",
        100,
    );

    for (node, end) in [(x, 300), (y, 50)] {
        let n = report.node(node).expect("node");
        assert_eq!(n.outcome(), Outcome::Succeeded);
        assert_eq!(n.end(), ms(end));
        assert!(n.skipped_because().is_none());
        assert!(n.message().is_none());
    }
    assert_eq!(report.get(x), Some(&()));
    for node in [b, c, d, both_late, both_early, e] {
        assert_eq!(report.get(node), None);
    }
    // Only x and y ever ran.
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let counts = report.counts();
    assert_eq!(
        (
            counts.succeeded,
            counts.failed,
            counts.skipped,
            counts.total()
        ),
        (2, 1, 6, 9)
    );
    assert_eq!(report.makespan(), ms(300));
    assert!(!report.is_clean());
}

#[tokio::test(start_paused = true)]
async fn diamond_below_a_failure_is_skipped_once_with_root_cause() {
    let calls = Arc::new(AtomicUsize::new(0));
    let mut g = Graph::<()>::builder();
    let a = g.node("a").task(|_ctx, ()| async {
        sleep(ms(20)).await;
        Err::<(), _>("boom")
    });
    let b = counted(&mut g, "b", vec![a], 10, &calls);
    let c = counted(&mut g, "c", vec![a], 10, &calls);
    let d = counted(&mut g, "d", vec![b, c], 10, &calls);
    let report = g.build().expect("valid").run(()).await.expect("run");
    assert_skipped(&report, "b", "a", "a", "upstream `a` failed: boom", 20);
    assert_skipped(&report, "c", "a", "a", "upstream `a` failed: boom", 20);
    let nd = report.node(d).expect("d");
    assert_eq!(nd.outcome(), Outcome::Skipped);
    let because = nd.skipped_because().expect("because").name();
    assert!(["b", "c"].contains(&because), "because {because}");
    assert_eq!(nd.root_cause().map(|n| n.name()), Some("a"));
    assert_eq!(
        nd.message(),
        Some(format!(
            "upstream `{because}` skipped; root cause `a` failed: boom"
        ))
    );
    assert_eq!(nd.attempts(), 0);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(report.counts().skipped, 3);
    assert_eq!(report.counts().total(), 4);
}

#[tokio::test(start_paused = true)]
async fn string_and_str_errors_are_kept_as_task_errors() {
    let mut g = Graph::<()>::builder();
    let a = g
        .node("a")
        .task(|_ctx, ()| async { Err::<u8, _>(format!("status {}", 503)) });
    let b = g
        .node("b")
        .after(a)
        .task(|_ctx, _a| async { Ok::<_, BoxError>(1_u8) });
    let report = g.build().expect("valid").run(()).await.expect("run");
    let na = report.node(a).expect("a");
    assert_eq!(na.outcome(), Outcome::Failed);
    assert_eq!(na.message().as_deref(), Some("status 503"));
    assert_eq!(
        na.error()
            .and_then(|e| e.task_error())
            .map(|e| e.to_string()),
        Some("status 503".to_owned())
    );
    let nb = report.node(b).expect("b");
    assert_eq!(nb.outcome(), Outcome::Skipped);
    assert_eq!(
        nb.message().as_deref(),
        Some("upstream `a` failed: status 503")
    );
}

/// The root cause of a skip is kept with the skip, not found by walking the chain: a report
/// of a long chain that failed at its head prints in linear time (walking would be
/// quadratic: 10^10 steps here).
#[tokio::test(flavor = "current_thread")]
async fn root_causes_of_a_long_skipped_chain_are_read_in_constant_time() {
    const N: usize = 100_000;
    let mut g = Graph::<()>::builder();
    let mut prev = g
        .node("head")
        .task(|_ctx, ()| async { Err::<u32, BoxError>("head failed".into()) });
    for i in 1..N {
        prev = g
            .node(format!("n{i}"))
            .after(prev)
            .task(|_ctx, v| async move { Ok::<_, BoxError>(*v) });
    }
    let report = g.build().unwrap().run(()).await.unwrap();
    let last = report.node(prev).unwrap();
    assert_eq!(last.root_cause().unwrap().name(), "head");
    assert_eq!(
        last.skipped_because().unwrap().name(),
        format!("n{}", N - 2)
    );
    let text = report.to_string();
    assert_eq!(text.lines().count(), N + 2);
    assert!(text.contains("root cause `head` failed: head failed"));
}
