//! A graph stores its tasks by type, side by side, not in a box each: every node still runs
//! its own task with what that task captured, tasks of several types interleaved find
//! theirs, and dropping the graph drops each task once.

use std::sync::Arc;

use baton::{BoxError, Graph, Node};

/// Nodes alternate between two closure types (each capturing its node's index and a clone
/// of `witness`), and every seventh is a blocking task: three columns, interleaved.
fn interleaved(n: u64, witness: &Arc<()>) -> (Graph<u64>, Vec<(Node<u64>, u64)>) {
    let mut g = Graph::<u64>::builder();
    let mut nodes = Vec::new();
    for i in 0..n {
        let w = Arc::clone(witness);
        let name = format!("n{i}");
        let node = if i % 7 == 0 {
            g.node(name).blocking_task(move |ctx, ()| {
                let _ = &w;
                Ok::<_, BoxError>(*ctx.input() + i)
            })
        } else if i % 2 == 0 {
            g.node(name).task(move |ctx, ()| {
                let _ = &w;
                let v = *ctx.input() + i;
                async move { Ok::<_, BoxError>(v) }
            })
        } else {
            // Another type: it captures a `String` too.
            let label = format!("odd {i}");
            g.node(name).task(move |ctx, ()| {
                let _ = (&w, &label);
                let v = *ctx.input() * 2 + i;
                async move { Ok::<_, BoxError>(v) }
            })
        };
        let expected = |input: u64| {
            if i % 7 != 0 && i % 2 == 1 {
                input * 2 + i
            } else {
                input + i
            }
        };
        nodes.push((node, expected(1_000)));
    }
    (g.build().unwrap(), nodes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_runs_its_own_task_and_the_graph_drops_each_task_once() {
    let witness = Arc::new(());
    // Enough nodes for many chunks per type (1, 2, 4, ... 2 048 tasks).
    let (graph, nodes) = interleaved(5_000, &witness);
    assert_eq!(Arc::strong_count(&witness), 5_001, "one clone per task");
    for _ in 0..2 {
        let report = graph.run(1_000).await.unwrap();
        for (i, (node, expected)) in nodes.iter().enumerate() {
            assert_eq!(report.get(*node), Some(expected), "node n{i}");
        }
    }
    assert_eq!(Arc::strong_count(&witness), 5_001, "runs clone no task");
    drop(graph);
    assert_eq!(
        Arc::strong_count(&witness),
        1,
        "dropping the graph drops every task, once"
    );
}

#[test]
fn a_graph_that_fails_to_build_drops_its_tasks() {
    let witness = Arc::new(());
    let mut g = Graph::<()>::builder();
    for name in ["a", "b", "a"] {
        let w = Arc::clone(&witness);
        let _ = g.node(name).task(move |_ctx, ()| {
            let _ = &w;
            async { Ok::<_, BoxError>(()) }
        });
    }
    assert!(g.build().is_err(), "a duplicate name");
    assert_eq!(Arc::strong_count(&witness), 1);
}
