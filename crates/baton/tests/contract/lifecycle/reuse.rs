//! A graph reuses the per-run arrays of its ended runs: every run still starts from fresh
//! counters, and nothing of an ended run (values, records) outlives it. Large graphs keep
//! one set of arrays, small ones (64 nodes or fewer) a set per thread stripe: both kinds
//! are checked.

use std::sync::Arc;

use std::time::Duration;

use baton_graph::{Backoff, BoxError, Fallback, Graph, Node, Outcome, Retry};

/// A large graph (one set of arrays) and a small one (a set per stripe).
const SIZES: [usize; 2] = [5_000, 8];

/// `first`, then a chain of `n` nodes that each also read `first`'s value.
fn chain_with_fan_in(n: usize) -> (Graph<u64>, Node<u64>, Arc<Vec<u8>>) {
    let probe = Arc::new(vec![0u8; 16]);
    let mut g = Graph::<u64>::builder();
    let p = Arc::clone(&probe);
    let first: Node<Arc<Vec<u8>>> = g.node("first").task(move |_ctx, ()| {
        let p = Arc::clone(&p);
        async move { Ok::<_, BoxError>(p) }
    });
    let mut prev: Node<u64> = g
        .node("n0")
        .after(first)
        .task(|ctx, _probe| async move { Ok::<_, BoxError>(*ctx.input()) });
    for i in 1..n {
        prev = g
            .node(format!("n{i}"))
            .after((prev, first))
            .task(|_ctx, (v, _probe)| async move { Ok::<_, BoxError>(*v + 1) });
    }
    (g.build().unwrap(), prev, probe)
}

/// On one thread, so that every driver has dropped its handle to the run when the run
/// resolves (on several, the last one may still be doing so).
#[tokio::test]
async fn every_run_starts_afresh_and_keeps_nothing() {
    for n in SIZES {
        every_run_of(n).await;
    }
}

async fn every_run_of(n: usize) {
    let (graph, last, probe) = chain_with_fan_in(n);
    for input in [10u64, 1_000, 7] {
        let report = graph.run(input).await.unwrap();
        assert_eq!(report.len(), n + 1);
        assert!(report.nodes().all(|n| n.outcome() == Outcome::Succeeded));
        assert_eq!(report.get(last), Some(&(input + n as u64 - 1)));
        assert!(report.nodes().all(|n| n.attempts() == 1));
        assert!(Arc::strong_count(&probe) > 2, "the report holds the value");
        drop(report);
        // The graph's closure holds one reference, the test one: the ended run none.
        assert_eq!(
            Arc::strong_count(&probe),
            2,
            "an ended run's value outlived it"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_runs_do_not_share_state() {
    for n in SIZES {
        concurrent_runs_of(n).await;
    }
}

async fn concurrent_runs_of(n: usize) {
    let (graph, last, _probe) = chain_with_fan_in(n);
    let runs: Vec<_> = (0..4u64)
        .map(|k| {
            let graph = graph.clone();
            tokio::spawn(async move { (k, graph.run(k * 100).await.unwrap()) })
        })
        .collect();
    for run in runs {
        let (k, report) = run.await.unwrap();
        assert_eq!(report.get(last), Some(&(k * 100 + n as u64 - 1)));
    }
    let report = graph.run(1).await.unwrap();
    assert_eq!(report.get(last), Some(&(n as u64)));
}

/// A small graph with a retried node, a failure that skips its downstreams, a router and
/// a fallback, and the handles of the nodes with values.
fn mixed() -> (Graph<u64>, Vec<Node<u64>>) {
    let mut g = Graph::<u64>::builder();
    // Fails its first `input % 3` attempts: 0 succeeds at once, 1 after a retry, 2 never
    // (two attempts allowed).
    let a: Node<u64> = g
        .node("a")
        .retry(Retry::new(2).backoff(Backoff::constant(Duration::from_millis(5))))
        .task(|ctx, ()| async move {
            let input = *ctx.input();
            if u64::from(ctx.attempt()) <= input % 3 {
                Err::<u64, BoxError>(format!("attempt {} of {input}", ctx.attempt()).into())
            } else {
                Ok(input)
            }
        });
    let b: Node<u64> = g
        .node("b")
        .after(a)
        .task(|_ctx, a| async move { Ok::<_, BoxError>(*a + 1) });
    let r: Node<u64> = g
        .router("r")
        .after(b)
        .select(|input, _b| if *input % 2 == 0 { "even" } else { "odd" })
        .branch("even", |n| {
            n.task(|_ctx, b| async move { Ok::<_, BoxError>(*b * 2) })
        })
        .branch("odd", |n| {
            n.task(|_ctx, b| async move { Ok::<_, BoxError>(*b * 3) })
        })
        .finish();
    let c: Node<u64> =
        g.node("c")
            .after(a)
            .fallback(Fallback::value(99))
            .task(|_ctx, a| async move {
                if *a % 4 == 0 {
                    Err::<u64, BoxError>("multiple of four".into())
                } else {
                    Ok(*a)
                }
            });
    (g.build().unwrap(), vec![a, b, r, c])
}

/// Each node's name, outcome, attempts, attempt-log length, error message and skip cause,
/// then the values of `nodes`: a run's report in a form that compares across graphs.
fn summary(report: &baton_graph::Report, nodes: &[Node<u64>]) -> Vec<String> {
    let mut lines: Vec<String> = report
        .nodes()
        .map(|n| {
            format!(
                "{} {:?} {} {} {:?} {:?}",
                n.name(),
                n.outcome(),
                n.attempts(),
                n.attempt_log().len(),
                n.error().map(ToString::to_string),
                n.skipped_because().map(|s| s.name().to_owned()),
            )
        })
        .collect();
    lines.extend(nodes.iter().map(|&n| format!("{:?}", report.get(n))));
    lines
}

/// Runs that failed, retried, skipped, took one branch or recovered leave nothing for the
/// next: a graph that reuses its arrays reports each input as a fresh graph does.
#[tokio::test(start_paused = true)]
async fn a_reused_graph_reports_what_a_fresh_one_does() {
    let (reused, handles) = mixed();
    assert!(reused.len() <= 64, "a small graph: one set per stripe");
    let mut outcomes = std::collections::BTreeSet::new();
    for input in [2u64, 0, 1, 4, 5, 3, 8, 7, 2, 6] {
        let (graph, fresh_handles) = mixed();
        let fresh = graph.run(input).await.unwrap();
        let again = reused.run(input).await.unwrap();
        assert_eq!(
            summary(&again, &handles),
            summary(&fresh, &fresh_handles),
            "input {input}"
        );
        outcomes.extend(again.nodes().map(|n| format!("{:?}", n.outcome())));
    }
    // The inputs cover every path the graph has.
    for outcome in ["Succeeded", "Failed", "Skipped", "NotTaken", "Recovered"] {
        assert!(outcomes.contains(outcome), "no run had a node {outcome}");
    }
}
