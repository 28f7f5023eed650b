//! Concurrent runs of one graph share no state (build once, run many): each run gets its
//! own input, values, outcomes, run id and idempotency keys.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use baton_graph::{BoxError, Graph, Node, Outcome, graph::IdempotencyKey, run::RunId};

struct Keys {
    run: RunId,
    first: IdempotencyKey,
    again: IdempotencyKey,
    attempt: u32,
}

struct Shape {
    graph: Graph<u64>,
    double: Node<u64>,
    square: Node<u64>,
    sum: Node<u64>,
    keys: Vec<Node<Keys>>,
}

fn keys_node(g: &mut baton_graph::GraphBuilder<u64>, name: &str) -> Node<Keys> {
    g.node(name).task(|ctx, ()| async move {
        let first = ctx.idempotency_key();
        tokio::task::yield_now().await;
        Ok::<_, BoxError>(Keys {
            run: ctx.run_id(),
            first,
            again: ctx.idempotency_key(),
            attempt: ctx.attempt(),
        })
    })
}

fn shape() -> Shape {
    let mut g = Graph::<u64>::builder();
    let double = g.node("double").task(|ctx, ()| async move {
        tokio::task::yield_now().await;
        Ok::<_, BoxError>(ctx.input() * 2)
    });
    let square = g.node("square").task(|ctx, ()| async move {
        for _ in 0..(ctx.input() % 7) {
            tokio::task::yield_now().await;
        }
        Ok::<_, BoxError>(ctx.input() * ctx.input())
    });
    // Fails for odd inputs, so outcomes differ between concurrent runs.
    let even = g
        .node("even")
        .after(double)
        .task(|ctx, d: Arc<u64>| async move {
            tokio::task::yield_now().await;
            if ctx.input() % 2 == 1 {
                return Err(format!("odd input {}", ctx.input()).into());
            }
            Ok::<_, BoxError>(*d)
        });
    let sum = g.node("sum").after((double, square)).task(
        |ctx, (d, s): (Arc<u64>, Arc<u64>)| async move {
            tokio::task::yield_now().await;
            Ok::<_, BoxError>(*d + *s + ctx.input())
        },
    );
    g.node("after_even")
        .after((even, sum))
        .task(|_ctx, (e, s): (Arc<u64>, Arc<u64>)| async move { Ok::<_, BoxError>(*e + *s) });
    let keys = vec![keys_node(&mut g, "k0"), keys_node(&mut g, "k1")];
    Shape {
        graph: g.build().expect("valid"),
        double,
        square,
        sum,
        keys,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_concurrent_runs_each_get_their_own_values() {
    let s = Arc::new(shape());
    let handles: Vec<_> = (0..100_u64)
        .map(|i| {
            let s = Arc::clone(&s);
            tokio::spawn(async move {
                let run = s.graph.run(i);
                let id = run.id();
                (i, id, run.await.expect("preserve-partial"))
            })
        })
        .collect();
    let results = futures::future::join_all(handles).await;

    let mut run_ids = HashSet::new();
    let mut all_keys = HashSet::new();
    for result in results {
        let (i, id, report) = result.expect("task did not panic");
        assert_eq!(report.run_id(), id);
        assert!(run_ids.insert(id), "run ids differ");
        assert_eq!(report.get(s.double), Some(&(i * 2)));
        assert_eq!(report.get(s.square), Some(&(i * i)));
        assert_eq!(report.get(s.sum), Some(&(i * 2 + i * i + i)));
        let even = report.by_name("even").expect("even");
        let after = report.by_name("after_even").expect("after_even");
        if i % 2 == 1 {
            assert_eq!(even.outcome(), Outcome::Failed, "run {i}");
            assert_eq!(even.message(), Some(format!("odd input {i}")));
            assert_eq!(after.outcome(), Outcome::Skipped, "run {i}");
        } else {
            assert_eq!(even.outcome(), Outcome::Succeeded, "run {i}");
            assert_eq!(after.outcome(), Outcome::Succeeded, "run {i}");
        }
        assert_eq!(report.counts().total(), 7);
        for (index, &node) in s.keys.iter().enumerate() {
            let k = report.get(node).expect("keys");
            assert_eq!(k.run, id);
            assert_eq!(k.attempt, 1);
            assert_eq!(k.first, k.again, "stable within one attempt");
            assert_eq!(k.first.run_id(), id);
            assert_eq!(k.first.node_index(), node.index());
            assert_eq!(k.first.to_string(), format!("{id}-{}", 5 + index));
            assert!(
                all_keys.insert(k.first.clone()),
                "keys differ across nodes and runs"
            );
        }
    }
    assert_eq!(run_ids.len(), 100);
    assert_eq!(all_keys.len(), 200);
}

#[tokio::test(start_paused = true)]
async fn interleaved_runs_on_one_thread_keep_their_own_timing_and_values() {
    let mut g = Graph::<u64>::builder();
    let a = g.node("a").task(|ctx, ()| async move {
        tokio::time::sleep(Duration::from_millis(*ctx.input())).await;
        Ok::<_, BoxError>(*ctx.input())
    });
    let b = g.node("b").after(a).task(|ctx, a: Arc<u64>| async move {
        tokio::time::sleep(Duration::from_millis(10)).await;
        Ok::<_, BoxError>(*a + ctx.input())
    });
    let graph = g.build().expect("valid");
    let runs = (1..=20_u64).map(|i| graph.run(i * 10));
    let reports = futures::future::join_all(runs).await;
    for (i, report) in (1..=20_u64).zip(reports) {
        let report = report.expect("run");
        assert_eq!(report.get(b), Some(&(i * 20)));
        assert_eq!(report.makespan(), Duration::from_millis(i * 10 + 10));
        assert_eq!(
            report.node(b).and_then(|n| n.start()),
            Some(Duration::from_millis(i * 10))
        );
    }
}

#[test]
fn idempotency_keys_and_run_ids_display_as_documented() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let s = shape();
    let report = rt.block_on(s.graph.run(2)).expect("run");
    let id = report.run_id();
    let text = id.to_string();
    assert_eq!(text.len(), 32);
    assert!(
        text.chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
    assert_eq!(format!("{:032x}", id.as_u128()), text);
    let k0 = report.get(s.keys[0]).expect("k0").first.clone();
    let k1 = report.get(s.keys[1]).expect("k1").first.clone();
    assert_ne!(k0, k1);
    assert_eq!(k0.to_string(), format!("{text}-5"));
    assert_eq!(k1.to_string(), format!("{text}-6"));
    let again = rt.block_on(s.graph.run(2)).expect("run");
    assert_ne!(again.run_id(), id);
    assert_ne!(again.get(s.keys[0]).expect("k0").first, k0);
}

/// A caller's idempotency key replaces the run's id in every node's key: a retried request
/// (a new run given the same key) sends the same keys downstream; without one, each run's
/// keys are its own.
#[tokio::test]
async fn a_callers_idempotency_key_carries_into_every_node() {
    use baton_graph::RunOptions;
    let mut g = Graph::<()>::builder();
    let a = g
        .node("a")
        .task(|ctx, ()| async move { Ok::<_, BoxError>(ctx.idempotency_key()) });
    let b = g
        .node("b")
        .task(|ctx, ()| async move { Ok::<_, BoxError>(ctx.idempotency_key()) });
    let graph = g.build().unwrap();
    let keyed = || RunOptions::new().idempotency_key("req-42");
    let first = graph.run_with((), keyed()).await.unwrap();
    let again = graph.run_with((), keyed()).await.unwrap();
    let (ka, kb) = (first.get(a).unwrap(), first.get(b).unwrap());
    assert_eq!(ka.to_string(), "req-42-0");
    assert_eq!(kb.to_string(), "req-42-1");
    assert_eq!(ka.caller_key(), Some("req-42"));
    assert_eq!(again.get(a), Some(ka), "the same key for the same request");
    assert_ne!(
        ka.run_id(),
        again.get(a).unwrap().run_id(),
        "two runs all the same"
    );
    let plain = graph.run(()).await.unwrap();
    let kp = plain.get(a).unwrap();
    assert_eq!(kp.caller_key(), None);
    assert_eq!(kp.to_string(), format!("{}-0", plain.run_id()));
}
