//! A graph reuses the per-run arrays of its ended runs: every run still starts from fresh
//! counters, and nothing of an ended run (values, records) outlives it. Large graphs keep
//! one set of arrays, small ones (64 nodes or fewer) a set per thread stripe: both kinds
//! are checked.

use std::sync::Arc;

use baton::{BoxError, Graph, Node, Outcome};

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
