//! A graph stores its tasks by type, side by side, not in a box each: every node still runs
//! its own task with what that task captured, tasks of several types interleaved find
//! theirs, and dropping the graph drops each task once.

use std::sync::Arc;

use crate::{BoxError, BuildError, Graph, Node};

/// Nodes alternate between two closure types, each capturing its node's index and a clone
/// of `witness`, and every seventh is a blocking task: three columns, interleaved.
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

/// Two workers, so that tasks are read from both. Tests shut it down before dropping their
/// graph: a driver may still hold an ended run, and through it the graph, for a moment
/// after the run's future resolved.
fn two_workers() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn every_node_runs_its_own_task_and_the_graph_drops_each_task_once() {
    let witness = Arc::new(());
    // Enough nodes for many chunks per type: 1, 2, 4, ... 2 048 tasks.
    let (graph, nodes) = interleaved(5_000, &witness);
    assert_eq!(Arc::strong_count(&witness), 5_001, "one clone per task");
    let runtime = two_workers();
    runtime.block_on(async {
        for _ in 0..2 {
            let report = graph.run(1_000).await.unwrap();
            for (i, (node, expected)) in nodes.iter().enumerate() {
                assert_eq!(report.get(*node), Some(expected), "node n{i}");
            }
        }
    });
    drop(runtime);
    assert_eq!(Arc::strong_count(&witness), 5_001, "runs clone no task");
    drop(graph);
    assert_eq!(
        Arc::strong_count(&witness),
        1,
        "dropping the graph drops every task, once"
    );
}

/// A router and its branches, built between nodes of other task types: each branch's task
/// is found, and the router's value is its chosen branch's.
#[test]
fn a_router_between_other_nodes_runs_its_chosen_branch() {
    let witness = Arc::new(());
    let mut g = Graph::<u64>::builder();
    let mut before = Vec::new();
    for i in 0..50u64 {
        let w = Arc::clone(&witness);
        before.push(g.node(format!("a{i}")).task(move |ctx, ()| {
            let _ = &w;
            let v = *ctx.input() + i;
            async move { Ok::<_, BoxError>(v) }
        }));
    }
    let (w1, w2) = (Arc::clone(&witness), Arc::clone(&witness));
    let routed = g
        .router("route")
        .after(before[7])
        .select(|input: &u64, _| if *input % 2 == 0 { "even" } else { "odd" })
        .branch("even", move |b| {
            b.task(move |_ctx, v: Arc<u64>| {
                let _ = &w1;
                async move { Ok::<_, BoxError>(*v * 10) }
            })
        })
        .branch("odd", move |b| {
            b.blocking_task(move |_ctx, v: Arc<u64>| {
                let _ = &w2;
                Ok::<_, BoxError>(*v * 100)
            })
        })
        .finish();
    let after = g.node("after").after(routed).task(|_ctx, v| {
        let v = *v + 1;
        async move { Ok::<_, BoxError>(v) }
    });
    let graph = g.build().unwrap();
    let runtime = two_workers();
    runtime.block_on(async {
        for input in [4u64, 5] {
            let report = graph.run(input).await.unwrap();
            for (i, node) in before.iter().enumerate() {
                assert_eq!(report.get(*node), Some(&(input + i as u64)));
            }
            let chosen = if input % 2 == 0 {
                (input + 7) * 10
            } else {
                (input + 7) * 100
            };
            assert_eq!(report.get(routed), Some(&chosen));
            assert_eq!(report.get(after), Some(&(chosen + 1)));
        }
    });
    drop(runtime);
    drop(graph);
    assert_eq!(Arc::strong_count(&witness), 1);
}

/// A task that captures `witness` and reads its upstreams by name, for the failed builds
/// below.
fn capturing(
    witness: &Arc<()>,
) -> impl Fn(crate::Ctx<()>, crate::Inputs<u32>) -> std::future::Ready<Result<u32, BoxError>>
+ Send
+ Sync
+ 'static {
    let w = Arc::clone(witness);
    move |_ctx, inputs| {
        let _ = &w;
        std::future::ready(Ok(inputs.iter().count() as u32))
    }
}

#[test]
fn a_graph_that_fails_to_build_drops_its_tasks() {
    // A duplicate name, found before the graph is assembled.
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

    // A cycle through names, found once the graph is assembled and its tasks moved in, and
    // a type mismatch through a name, found while names are resolved, reading a task's
    // type.
    for (b_after, why) in [("a", "a cycle"), ("c", "a type mismatch")] {
        let witness = Arc::new(());
        let mut g = Graph::<()>::builder();
        let _ = g
            .node("a")
            .after_names::<u32>(["b"])
            .task(capturing(&witness));
        let _ = g
            .node("b")
            .after_names::<u32>([b_after])
            .task(capturing(&witness));
        let _ = g
            .node("c")
            .task(|_ctx, ()| async { Ok::<_, BoxError>("text") });
        let error = g.build().expect_err("the build fails");
        let found = match error {
            BuildError::Cycle { .. } => "a cycle",
            BuildError::TypeMismatch { .. } => "a type mismatch",
            _ => "another error",
        };
        assert_eq!(found, why, "{error}");
        assert_eq!(Arc::strong_count(&witness), 1, "{why}");
    }
}
