//! A graph as a node: the inner run gets its input from the upstreams, inherits the
//! attempt's deadline, cancellation and idempotency key, and its report is nested.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use baton_graph::{BoxError, FailureMode, Graph, Node, NodeError, Outcome, RunError, RunOptions};
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
