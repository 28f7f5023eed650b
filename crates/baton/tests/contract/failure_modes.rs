//! Failure modes (`docs/contract.md`, rule 11): `PreservePartial` returns the report, `FailAll` makes the
//! run an error that still carries every node, `FailFast` cancels what is in flight; set per
//! graph and per run.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use baton_graph::{
    BoxError, FailureMode, Graph, GraphBuilder, Node, Outcome, Report, RunError, RunOptions,
    run::CancelReason,
};
use tokio::time::sleep;

use crate::ms;

/// Sets its flag when dropped: proves a task's future was dropped.
struct DropFlag(Arc<AtomicBool>);
impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

struct Probes {
    calls: Arc<AtomicUsize>,
    dropped: Arc<AtomicBool>,
    finished: Arc<AtomicBool>,
}

/// `fail` fails at 100 ms; `slow` runs 0..300 ms; `fail_down` is after `fail`;
/// `slow_down` is after `slow`; `quick` succeeds at 50 ms; `quick_down` after `quick`
/// runs 50..60 ms.
struct Shape {
    graph: Graph<()>,
    fail: Node<u32>,
    slow: Node<u32>,
    fail_down: Node<u32>,
    slow_down: Node<u32>,
    quick: Node<u32>,
    quick_down: Node<u32>,
    probes: Probes,
}

fn shape(mode: Option<FailureMode>) -> Shape {
    let probes = Probes {
        calls: Arc::new(AtomicUsize::new(0)),
        dropped: Arc::new(AtomicBool::new(false)),
        finished: Arc::new(AtomicBool::new(false)),
    };
    let mut g: GraphBuilder<()> = Graph::builder();
    if let Some(mode) = mode {
        g.failure_mode(mode);
    }
    let fail = g.node("fail").task(|_ctx, ()| async {
        sleep(ms(100)).await;
        Err::<u32, _>("payment declined")
    });
    let (dropped, finished) = (Arc::clone(&probes.dropped), Arc::clone(&probes.finished));
    let slow = g.node("slow").task(move |_ctx, ()| {
        let guard = DropFlag(Arc::clone(&dropped));
        let finished = Arc::clone(&finished);
        async move {
            let _guard = guard;
            sleep(ms(300)).await;
            finished.store(true, Ordering::SeqCst);
            Ok::<_, BoxError>(3)
        }
    });
    let calls = Arc::clone(&probes.calls);
    let fail_down = g
        .node("fail_down")
        .after(fail)
        .task(move |_ctx, v: Arc<u32>| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, BoxError>(*v) }
        });
    let calls = Arc::clone(&probes.calls);
    let slow_down = g
        .node("slow_down")
        .after(slow)
        .task(move |_ctx, v: Arc<u32>| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, BoxError>(*v) }
        });
    let quick = g.node("quick").task(|_ctx, ()| async {
        sleep(ms(50)).await;
        Ok::<_, BoxError>(5)
    });
    let quick_down = g
        .node("quick_down")
        .after(quick)
        .task(|_ctx, v: Arc<u32>| async move {
            sleep(ms(10)).await;
            Ok::<_, BoxError>(*v + 1)
        });
    Shape {
        graph: g.build().expect("valid"),
        fail,
        slow,
        fail_down,
        slow_down,
        quick,
        quick_down,
        probes,
    }
}

/// The outcomes of a run where everything that can run did.
fn assert_ran_all_that_could_run(s: &Shape, report: &Report) {
    assert_eq!(report.len(), 6);
    let n = |h: Node<u32>| report.node(h).expect("node");
    assert_eq!(n(s.fail).outcome(), Outcome::Failed);
    assert_eq!(n(s.fail).message().as_deref(), Some("payment declined"));
    assert_eq!(n(s.fail_down).outcome(), Outcome::Skipped);
    assert_eq!(n(s.slow).outcome(), Outcome::Succeeded);
    assert_eq!(n(s.slow).end(), ms(300));
    assert_eq!(report.get(s.slow), Some(&3));
    assert_eq!(report.get(s.slow_down), Some(&3));
    assert_eq!(report.get(s.quick), Some(&5));
    assert_eq!(report.get(s.quick_down), Some(&6));
    assert_eq!(report.makespan(), ms(300));
    let c = report.counts();
    assert_eq!(
        (c.succeeded, c.failed, c.skipped, c.cancelled, c.total()),
        (4, 1, 1, 0, 6)
    );
    assert_eq!(report.cancel_reason(), None);
    assert_eq!(s.probes.calls.load(Ordering::SeqCst), 1, "slow_down only");
    assert!(s.probes.finished.load(Ordering::SeqCst));
}

#[tokio::test(start_paused = true)]
async fn preserve_partial_is_the_default_and_returns_ok() {
    let s = shape(None);
    assert_eq!(s.graph.failure_mode(), FailureMode::PreservePartial);
    assert_eq!(FailureMode::default(), FailureMode::PreservePartial);
    let report = s.graph.run(()).await.expect("Ok despite failures");
    assert_ran_all_that_could_run(&s, &report);
}

#[tokio::test(start_paused = true)]
async fn fail_all_runs_everything_then_errs_with_the_whole_report() {
    let s = shape(Some(FailureMode::FailAll));
    assert_eq!(s.graph.failure_mode(), FailureMode::FailAll);
    let err = s.graph.run(()).await.expect_err("fail-all");
    assert_eq!(
        err.to_string(),
        "run failed: node `fail` failed (1 failed, 1 skipped, 0 cancelled)"
    );
    let RunError::Failed {
        node,
        failed,
        skipped,
        cancelled,
        report,
    } = &err
    else {
        panic!("expected RunError::Failed, got {err:?}");
    };
    assert_eq!(
        (node.as_str(), *failed, *skipped, *cancelled),
        ("fail", 1, 1, 0)
    );
    assert_ran_all_that_could_run(&s, report);
    assert_ran_all_that_could_run(&s, err.report().expect("report"));
    let owned = err.into_report().expect("report");
    assert_ran_all_that_could_run(&s, &owned);
}

#[tokio::test(start_paused = true)]
async fn fail_all_with_no_failure_is_ok() {
    let mut g = Graph::<()>::builder();
    g.failure_mode(FailureMode::FailAll);
    let a = g.node("a").task(|_ctx, ()| async {
        sleep(ms(10)).await;
        Ok::<_, BoxError>(1)
    });
    let report = g.build().expect("valid").run(()).await.expect("clean");
    assert_eq!(report.get(a), Some(&1));
    assert!(report.is_clean());
}

fn assert_fail_fast(s: &Shape, err: &RunError) {
    assert_eq!(
        err.to_string(),
        "run failed: node `fail` failed (1 failed, 1 skipped, 2 cancelled)"
    );
    let RunError::Failed {
        node,
        failed,
        skipped,
        cancelled,
        report,
    } = err
    else {
        panic!("expected RunError::Failed, got {err:?}");
    };
    assert_eq!(
        (node.as_str(), *failed, *skipped, *cancelled),
        ("fail", 1, 1, 2)
    );
    assert_eq!(report.len(), 6);
    let n = |h: Node<u32>| report.node(h).expect("node");

    // The failure.
    assert_eq!(n(s.fail).outcome(), Outcome::Failed);
    assert_eq!(n(s.fail).end(), ms(100));

    // In flight when it failed: cancelled, with a start, its future dropped, never finished.
    let slow = n(s.slow);
    assert_eq!(slow.outcome(), Outcome::Cancelled);
    assert_eq!(slow.start(), Some(ms(0)));
    assert_eq!(slow.end(), ms(100));
    assert_eq!(slow.attempts(), 1);
    assert_eq!(
        slow.message().as_deref(),
        Some("fail-fast after `fail` failed")
    );
    assert!(
        s.probes.dropped.load(Ordering::SeqCst),
        "slow's future dropped"
    );
    assert!(!s.probes.finished.load(Ordering::SeqCst));

    // Pending downstream of the failure: skipped.
    let fd = n(s.fail_down);
    assert_eq!(fd.outcome(), Outcome::Skipped);
    assert_eq!(fd.skipped_because().map(|u| u.name()), Some("fail"));
    assert_eq!(fd.start(), None);
    assert_eq!(fd.attempts(), 0);

    // Other pending node: cancelled, never started.
    let sd = n(s.slow_down);
    assert_eq!(sd.outcome(), Outcome::Cancelled);
    assert_eq!(sd.start(), None);
    assert_eq!(sd.attempts(), 0);
    assert_eq!(sd.end(), ms(100));
    assert_eq!(s.probes.calls.load(Ordering::SeqCst), 0);

    // What finished before the failure is kept.
    assert_eq!(report.get(s.quick), Some(&5));
    assert_eq!(report.get(s.quick_down), Some(&6));
    assert_eq!(n(s.quick_down).end(), ms(60));

    assert_eq!(report.makespan(), ms(100));
    assert_eq!(
        report.cancel_reason(),
        Some(&CancelReason::FailFast {
            node: "fail".to_owned()
        })
    );
    let c = report.counts();
    assert_eq!(
        (c.succeeded, c.failed, c.skipped, c.cancelled, c.total()),
        (2, 1, 1, 2, 6)
    );
}

#[tokio::test(start_paused = true)]
async fn fail_fast_cancels_in_flight_and_pending_nodes() {
    let s = shape(Some(FailureMode::FailFast));
    let before = tokio::time::Instant::now();
    let err = s.graph.run(()).await.expect_err("fail-fast");
    assert_eq!(before.elapsed(), ms(100), "the run ends with the failure");
    assert_fail_fast(&s, &err);
    // Nothing wakes up later: the slow task never resumes.
    sleep(ms(1000)).await;
    assert!(!s.probes.finished.load(Ordering::SeqCst));
    assert_eq!(s.probes.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn run_options_override_the_graph_failure_mode() {
    // Graph says fail-fast; the run says preserve-partial.
    let s = shape(Some(FailureMode::FailFast));
    let report = s
        .graph
        .run_with(
            (),
            RunOptions::new().failure_mode(FailureMode::PreservePartial),
        )
        .await
        .expect("preserve-partial");
    assert_ran_all_that_could_run(&s, &report);

    // Graph says preserve-partial; the run says fail-fast.
    let s = shape(None);
    let err = s
        .graph
        .run_with((), RunOptions::new().failure_mode(FailureMode::FailFast))
        .await
        .expect_err("fail-fast");
    assert_fail_fast(&s, &err);

    // Graph says preserve-partial; the run says fail-all.
    let s = shape(None);
    let err = s
        .graph
        .run_with((), RunOptions::new().failure_mode(FailureMode::FailAll))
        .await
        .expect_err("fail-all");
    assert_ran_all_that_could_run(&s, err.report().expect("report"));

    // Options that set nothing keep the graph's mode.
    let s = shape(Some(FailureMode::FailAll));
    let err = s
        .graph
        .run_with((), RunOptions::new())
        .await
        .expect_err("graph's fail-all");
    assert!(matches!(err, RunError::Failed { .. }));
}

#[tokio::test(start_paused = true)]
async fn fail_fast_names_the_first_failure_by_end_time() {
    let mut g = Graph::<()>::builder();
    g.failure_mode(FailureMode::FailAll);
    g.node("late").task(|_ctx, ()| async {
        sleep(ms(30)).await;
        Err::<(), _>("late")
    });
    g.node("early").task(|_ctx, ()| async {
        sleep(ms(10)).await;
        Err::<(), _>("early")
    });
    let graph = g.build().expect("valid");
    let err = graph.run(()).await.expect_err("fail-all");
    assert!(matches!(&err, RunError::Failed { node, failed: 2, .. } if node == "early"));

    let err = graph
        .run_with((), RunOptions::new().failure_mode(FailureMode::FailFast))
        .await
        .expect_err("fail-fast");
    let report = err.report().expect("report");
    assert!(
        matches!(&err, RunError::Failed { node, failed: 1, cancelled: 1, .. } if node == "early")
    );
    assert_eq!(
        report.by_name("late").map(|n| n.outcome()),
        Some(Outcome::Cancelled)
    );
    assert_eq!(report.by_name("late").and_then(|n| n.start()), Some(ms(0)));
}

#[test]
fn failure_mode_parses_and_displays() {
    for (text, mode) in [
        ("preserve-partial", FailureMode::PreservePartial),
        ("fail-all", FailureMode::FailAll),
        ("fail-fast", FailureMode::FailFast),
    ] {
        assert_eq!(mode.to_string(), text);
        assert_eq!(text.parse::<FailureMode>(), Ok(mode));
        assert_eq!(text.replace('-', "_").parse::<FailureMode>(), Ok(mode));
    }
    assert_eq!(
        "fail-slow".parse::<FailureMode>(),
        Err(
            "unknown failure mode `fail-slow` (expected preserve-partial, fail-all or fail-fast)"
                .to_owned()
        )
    );
}
