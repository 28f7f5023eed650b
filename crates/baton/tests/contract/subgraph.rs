//! A graph as a node: the inner run gets its input from the upstreams, inherits the
//! attempt's deadline, cancellation and idempotency key, and its report is nested.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use baton_graph::{
    BoxError, FailureMode, Graph, Node, NodeError, Orchestrator, Outcome, RunError, RunOptions,
    observe::Event,
};
use tokio::time::sleep;

use crate::ms;

/// Counts its drops: an inner task that was cancelled.
struct Dropped(Arc<AtomicU32>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// An inner graph of one node that waits `wait` ms and returns its input doubled with its
/// idempotency key; its drops are counted in `dropped`.
fn inner(wait: u64, dropped: &Arc<AtomicU32>) -> (Graph<u64>, Node<(u64, String)>) {
    let dropped = Arc::clone(dropped);
    let mut g = Graph::<u64>::builder();
    g.failure_mode(FailureMode::FailAll);
    let double = g.node("double").task(move |ctx, ()| {
        let guard = Dropped(Arc::clone(&dropped));
        async move {
            sleep(ms(wait)).await;
            std::mem::forget(guard);
            Ok::<_, BoxError>((ctx.input() * 2, ctx.idempotency_key().to_string()))
        }
    });
    (g.build().unwrap(), double)
}

#[tokio::test(start_paused = true)]
async fn a_graph_runs_as_a_node_of_several_graphs_with_its_report_nested() {
    let dropped = Arc::new(AtomicU32::new(0));
    let (inner, double) = inner(10, &dropped);
    let outer = |name: &str| {
        let mut g = Graph::<()>::builder();
        let base = g
            .node("base")
            .task(|_ctx, ()| async { Ok::<_, BoxError>(21_u64) });
        let node = g.node(name).after(base).subgraph(
            &inner,
            |_: &(), base: Arc<u64>| *base,
            move |r| r.require(double).cloned(),
        );
        (g.build().unwrap(), node)
    };
    let (first, a) = outer("a");
    let (second, b) = outer("b");
    let report = first.run(()).await.unwrap();
    let (value, key) = report.get(a).unwrap().clone();
    assert_eq!(value, 42);
    // The inner run's keys are prefixed by the node's (node 1 of the outer graph).
    assert!(key.starts_with(&format!("{}-1-", report.run_id())), "{key}");
    let nested = report.inner(a).unwrap();
    assert_eq!(nested.node(double).map(|n| n.end()), Some(ms(10)));
    assert_eq!(
        report.node(a).and_then(|n| n.inner()).map(|r| r.len()),
        Some(1)
    );
    let text = report.to_string();
    assert!(text.lines().any(|l| l.starts_with("    double")), "{text}");
    #[cfg(feature = "serde")]
    {
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["nodes"][1]["inner"]["nodes"][0]["name"], "double");
    }
    assert_eq!(second.run(()).await.unwrap().get(b).map(|v| v.0), Some(42));
    assert_eq!(
        inner.run(5).await.unwrap().get(double).map(|v| v.0),
        Some(10)
    );
    assert_eq!(dropped.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn the_inner_run_has_the_attempts_deadline_and_the_nodes_timeout_cuts_it_alone() {
    let dropped = Arc::new(AtomicU32::new(0));
    let (inner, double) = inner(1_000, &dropped);
    let mut g = Graph::<()>::builder();
    let cut = g.node("cut").timeout(ms(50)).subgraph(
        &inner,
        |_: &(), ()| 1,
        move |r| r.require(double).cloned(),
    );
    let other = g.node("other").task(|_ctx, ()| async {
        sleep(ms(200)).await;
        Ok::<_, BoxError>(())
    });
    let graph = g.build().unwrap();
    let report = graph.run(()).await.unwrap();
    // The node's timeout cut its attempt and, with it, the inner run alone.
    let node = report.node(cut).unwrap();
    assert_eq!((node.outcome(), node.end()), (Outcome::Failed, ms(50)));
    assert_eq!(node.error().map(NodeError::kind), Some("timeout"));
    assert_eq!(dropped.load(Ordering::SeqCst), 1);
    assert_eq!(
        report.node(other).map(|n| n.outcome()),
        Some(Outcome::Succeeded)
    );

    // The run's deadline reaches the inner run: its task has the time the attempt had.
    let mut g = Graph::<()>::builder();
    let left = g
        .node("left")
        .task(|ctx, ()| async move { Ok::<_, BoxError>(ctx.remaining()) });
    let remaining = g.build().unwrap();
    let mut g = Graph::<()>::builder();
    let sub = g.node("sub").subgraph(
        &remaining,
        |_: &(), ()| (),
        move |r| r.require(left).copied(),
    );
    let options = RunOptions::new().timeout(ms(100));
    let report = g.build().unwrap().run_with((), options).await.unwrap();
    assert_eq!(report.get(sub), Some(&Some(ms(100))));
}

#[tokio::test(start_paused = true)]
async fn cancelling_the_outer_run_cancels_the_inner_one() {
    let dropped = Arc::new(AtomicU32::new(0));
    let (inner, double) = inner(1_000, &dropped);
    let mut g = Graph::<()>::builder();
    g.node("sub")
        .subgraph(&inner, |_: &(), ()| 1, move |r| r.require(double).cloned());
    let run = g.build().unwrap().run(());
    let canceller = run.canceller();
    tokio::spawn(async move {
        sleep(ms(10)).await;
        canceller.cancel();
    });
    assert!(matches!(run.await, Err(RunError::Cancelled { .. })));
    assert_eq!(dropped.load(Ordering::SeqCst), 1);
}

/// An inner graph: `quick` ends at 10 ms, `slow` would at 1 s, `after` waits for it.
fn quick_and_slow() -> (Graph<()>, Node<u32>) {
    let mut inner = Graph::<()>::builder();
    inner.failure_mode(FailureMode::FailAll);
    let quick = inner.node("quick").task(|_ctx, ()| async {
        sleep(ms(10)).await;
        Ok::<_, BoxError>(1_u32)
    });
    let slow = inner.node("slow").task(|_ctx, ()| async {
        sleep(ms(1_000)).await;
        Ok::<_, BoxError>(2_u32)
    });
    inner
        .node("after")
        .after(slow)
        .task(|_ctx, _| async { Ok::<_, BoxError>(()) });
    (inner.build().unwrap(), quick)
}

/// `report`'s node `name` holds what its inner run did until it was cut at `at`:
/// `quick` done, the rest ended there without a value (`rest`: `Cancelled`, or, when the
/// inner run's deadline cut `slow` at the same instant, `Failed` and `after` skipped);
/// in the timeline (indented) and the JSON (nested).
fn cut_at(report: &baton_graph::Report, name: &str, at: Duration, rest: [Outcome; 2]) {
    let nested = report
        .by_name(name)
        .and_then(|n| n.inner())
        .expect("the cut inner run's report");
    let outcome = |n: &str| nested.by_name(n).map(|n| (n.outcome(), n.end()));
    assert_eq!(outcome("quick"), Some((Outcome::Succeeded, ms(10))));
    assert_eq!(outcome("slow"), Some((rest[0], at)));
    assert_eq!(outcome("after"), Some((rest[1], at)));
    let text = report.to_string();
    assert!(text.lines().any(|l| l.starts_with("    quick")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("    slow")), "{text}");
    #[cfg(feature = "serde")]
    {
        let json = serde_json::to_value(report).unwrap();
        let node = json["nodes"]
            .as_array()
            .and_then(|nodes| nodes.iter().find(|n| n["name"] == name))
            .unwrap();
        assert_eq!(node["inner"]["nodes"][0]["name"], "quick");
        assert_eq!(
            node["inner"]["nodes"][1]["outcome"],
            rest[0].as_str(),
            "{json}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_cut_inner_run_keeps_its_report_until_the_cut() {
    // Cut by the node's timeout.
    let (inner, quick) = quick_and_slow();
    let mut g = Graph::<()>::builder();
    let cut = g.node("cut").timeout(ms(50)).subgraph(
        &inner,
        |_: &(), ()| (),
        move |r| r.require(quick).copied(),
    );
    let report = g.build().unwrap().run(()).await.unwrap();
    let node = report.node(cut).unwrap();
    assert_eq!(node.outcome(), Outcome::Failed, "{report}");
    assert_eq!(node.error().map(NodeError::kind), Some("timeout"));
    cut_at(&report, "cut", ms(50), [Outcome::Failed, Outcome::Skipped]);

    // Cut by a cancel of the outer run.
    let mut g = Graph::<()>::builder();
    g.node("sub")
        .subgraph(&inner, |_: &(), ()| (), move |r| r.require(quick).copied());
    let run = g.build().unwrap().run(());
    let canceller = run.canceller();
    tokio::spawn(async move {
        sleep(ms(30)).await;
        canceller.cancel();
    });
    let Err(RunError::Cancelled { report, .. }) = run.await else {
        panic!("the run was cancelled");
    };
    cut_at(&report, "sub", ms(30), [Outcome::Cancelled; 2]);
}

/// Records every event's run, node and kind, as `run node kind`.
fn recorder(
    log: &Arc<std::sync::Mutex<Vec<String>>>,
) -> impl Fn(&Event<'_>) + Send + Sync + 'static {
    let log = Arc::clone(log);
    move |e: &Event<'_>| {
        let kind = format!("{e:?}");
        let kind = kind.split([' ', '(']).next().unwrap_or_default().to_owned();
        let run = match e {
            Event::RunStarted { run, .. }
            | Event::RunFinished { run, .. }
            | Event::NodeStarted { run, .. }
            | Event::AttemptStarted { run, .. }
            | Event::NodeFinished { run, .. } => run.to_string(),
            _ => return,
        };
        let node = e.node().unwrap_or("-");
        log.lock().unwrap().push(format!("{run} {node} {kind}"));
    }
}

#[tokio::test(start_paused = true)]
async fn the_inner_runs_events_reach_the_outer_runs_observers() {
    type Log = Arc<std::sync::Mutex<Vec<String>>>;
    let (outer_log, inner_log): (Log, Log) = Default::default();
    // Graphs of two orchestrators, each with its observer.
    let inner_orch = Orchestrator::builder()
        .observer(recorder(&inner_log))
        .build();
    let mut inner = inner_orch.graph::<()>();
    let leaf = inner
        .node("leaf")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(1_u32) });
    let inner = inner.build().unwrap();
    let outer_orch = Orchestrator::builder()
        .observer(recorder(&outer_log))
        .build();
    let mut g = outer_orch.graph::<()>();
    let sub = g
        .node("sub")
        .subgraph(&inner, |_: &(), ()| (), move |r| r.require(leaf).copied());
    let report = g.build().unwrap().run(()).await.unwrap();
    let outer = report.run_id().to_string();
    let inner_run = report.inner(sub).unwrap().run_id().to_string();
    let outer_log = outer_log.lock().unwrap().clone();
    let expect = |lines: &[(&str, &str, &str)]| -> Vec<String> {
        lines
            .iter()
            .map(|(r, n, k)| format!("{r} {n} {k}"))
            .collect()
    };
    // The outer observer hears the inner nodes named `sub/leaf`, as the outer run's.
    assert_eq!(
        outer_log,
        expect(&[
            (&outer, "-", "RunStarted"),
            (&outer, "sub", "NodeStarted"),
            (&outer, "sub", "AttemptStarted"),
            (&outer, "sub/leaf", "NodeStarted"),
            (&outer, "sub/leaf", "AttemptStarted"),
            (&outer, "sub/leaf", "NodeFinished"),
            (&outer, "sub", "NodeFinished"),
            (&outer, "-", "RunFinished"),
        ])
    );
    // The inner graph's own observer hears its run as a run of its own.
    assert_eq!(
        inner_log.lock().unwrap().clone(),
        expect(&[
            (&inner_run, "-", "RunStarted"),
            (&inner_run, "leaf", "NodeStarted"),
            (&inner_run, "leaf", "AttemptStarted"),
            (&inner_run, "leaf", "NodeFinished"),
            (&inner_run, "-", "RunFinished"),
        ])
    );

    // Both graphs of one orchestrator: its observer hears each event once, as the outer
    // run's.
    let shared_log: Log = Log::default();
    let orch = Orchestrator::builder()
        .observer(recorder(&shared_log))
        .build();
    let mut inner = orch.graph::<()>();
    let leaf = inner
        .node("leaf")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(1_u32) });
    let inner = inner.build().unwrap();
    let mut g = orch.graph::<()>();
    g.node("sub")
        .subgraph(&inner, |_: &(), ()| (), move |r| r.require(leaf).copied());
    let report = g.build().unwrap().run(()).await.unwrap();
    let outer = report.run_id().to_string();
    assert_eq!(
        shared_log.lock().unwrap().clone(),
        expect(&[
            (&outer, "-", "RunStarted"),
            (&outer, "sub", "NodeStarted"),
            (&outer, "sub", "AttemptStarted"),
            (&outer, "sub/leaf", "NodeStarted"),
            (&outer, "sub/leaf", "AttemptStarted"),
            (&outer, "sub/leaf", "NodeFinished"),
            (&outer, "sub", "NodeFinished"),
            (&outer, "-", "RunFinished"),
        ])
    );
}

#[tokio::test(start_paused = true)]
async fn events_of_a_run_nested_twice_name_both_outer_nodes() {
    let log: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let orch = Orchestrator::builder().observer(recorder(&log)).build();
    let mut leaf_graph = orch.graph::<()>();
    let leaf = leaf_graph
        .node("leaf")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(1_u32) });
    let leaf_graph = leaf_graph.build().unwrap();
    let mut middle = orch.graph::<()>();
    let sub = middle.node("sub").subgraph(
        &leaf_graph,
        |_: &(), ()| (),
        move |r| r.require(leaf).copied(),
    );
    let middle = middle.build().unwrap();
    let mut top = orch.graph::<()>();
    top.node("top")
        .subgraph(&middle, |_: &(), ()| (), move |r| r.require(sub).copied());
    let report = top.build().unwrap().run(()).await.unwrap();
    let run = report.run_id().to_string();
    let log = log.lock().unwrap().clone();
    // One run told once, its nested nodes named through both outer nodes.
    assert_eq!(log.iter().filter(|l| l.ends_with("RunStarted")).count(), 1);
    assert!(log.iter().all(|l| l.starts_with(&run)), "{log:?}");
    assert!(
        log.contains(&format!("{run} top/sub/leaf NodeFinished")),
        "{log:?}"
    );
    assert!(
        log.contains(&format!("{run} top/sub NodeFinished")),
        "{log:?}"
    );
    assert_eq!(log.len(), 11, "{log:?}");
}
