//! Property test over random DAGs of up to 200 nodes (edges only from lower to higher
//! index, so acyclic), with random sleeps and random failures: every node has exactly one
//! outcome, none starts before its upstreams end, a node is skipped exactly when an upstream
//! produced no value, and values computed from upstream values are correct. On the paused
//! clock every start and end time is checked exactly against a model; on a multi-thread
//! runtime the tasks yield instead of sleeping and the ordering checks use the report.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use baton_graph::{
    BoxError, FailureMode, Graph, Node, Outcome, Report, RunError, RunOptions, run::StartMode,
};
use proptest::prelude::*;
use proptest::sample::Index;

#[derive(Debug, Clone)]
struct Spec {
    ups: Vec<usize>,
    sleep_ms: u64,
    fails: bool,
}

fn dag() -> impl Strategy<Value = Vec<Spec>> {
    let node = (
        prop::collection::vec((any::<Index>(), any::<bool>()), 0..4),
        0_u64..20,
        prop::bool::weighted(0.06),
    );
    prop::collection::vec(node, 1..=200).prop_map(|raw| {
        raw.into_iter()
            .enumerate()
            .map(|(i, (ups, sleep_ms, fails))| Spec {
                // Upstreams are earlier nodes; half of them among the last 8, for depth.
                // Duplicates are allowed: a node may name the same upstream twice.
                ups: if i == 0 {
                    Vec::new()
                } else {
                    ups.iter()
                        .map(|(ix, near)| {
                            if *near {
                                i - 1 - ix.index(i.min(8))
                            } else {
                                ix.index(i)
                            }
                        })
                        .collect()
                },
                sleep_ms,
                fails,
            })
            .collect()
    })
}

/// The value node `i` computes from its upstreams' values, order-sensitive.
fn combine(i: usize, ups: &[u64]) -> u64 {
    ups.iter().fold(
        (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        |acc, v| acc.rotate_left(5) ^ v,
    )
}

/// What a run in preserve-partial mode must produce, on the paused clock.
#[derive(Debug)]
struct Model {
    value: Vec<Option<u64>>,
    outcome: Vec<Outcome>,
    start: Vec<Option<Duration>>,
    end: Vec<Duration>,
}

fn model(specs: &[Spec]) -> Model {
    let n = specs.len();
    let mut m = Model {
        value: Vec::with_capacity(n),
        outcome: Vec::with_capacity(n),
        start: Vec::with_capacity(n),
        end: Vec::with_capacity(n),
    };
    for (i, spec) in specs.iter().enumerate() {
        let missing: Vec<usize> = spec
            .ups
            .iter()
            .copied()
            .filter(|&u| m.value[u].is_none())
            .collect();
        if missing.is_empty() {
            let start = spec
                .ups
                .iter()
                .map(|&u| m.end[u])
                .max()
                .unwrap_or(Duration::ZERO);
            m.start.push(Some(start));
            m.end.push(start + Duration::from_millis(spec.sleep_ms));
            if spec.fails {
                m.value.push(None);
                m.outcome.push(Outcome::Failed);
            } else {
                let vals: Vec<u64> = spec.ups.iter().map(|&u| m.value[u].unwrap_or(0)).collect();
                m.value.push(Some(combine(i, &vals)));
                m.outcome.push(Outcome::Succeeded);
            }
        } else {
            // Skipped the moment the first upstream without a value ended.
            let end = missing.iter().map(|&u| m.end[u]).min().unwrap_or_default();
            m.start.push(None);
            m.end.push(end);
            m.value.push(None);
            m.outcome.push(Outcome::Skipped);
        }
    }
    m
}

struct Built {
    graph: Graph<()>,
    nodes: Vec<Node<u64>>,
    calls: Arc<Vec<AtomicUsize>>,
}

/// Builds the graph; tasks sleep on the paused clock, or only yield when `sleeping` is
/// false (multi-thread runtime: no real sleeps).
fn build(specs: &[Spec], sleeping: bool) -> Built {
    let calls: Arc<Vec<AtomicUsize>> =
        Arc::new((0..specs.len()).map(|_| AtomicUsize::new(0)).collect());
    let mut g = Graph::<()>::builder();
    let mut nodes: Vec<Node<u64>> = Vec::with_capacity(specs.len());
    for (i, spec) in specs.iter().enumerate() {
        let ups: Vec<Node<u64>> = spec.ups.iter().map(|&u| nodes[u]).collect();
        let (sleep_ms, fails) = (spec.sleep_ms, spec.fails);
        let calls = Arc::clone(&calls);
        let node = g
            .node(format!("n{i}"))
            .after(ups)
            .task(move |_ctx, vals: Vec<Arc<u64>>| {
                calls[i].fetch_add(1, Ordering::SeqCst);
                async move {
                    if sleeping {
                        tokio::time::sleep(Duration::from_millis(sleep_ms)).await;
                    } else {
                        for _ in 0..sleep_ms % 4 {
                            tokio::task::yield_now().await;
                        }
                    }
                    if fails {
                        return Err(format!("n{i} failed").into());
                    }
                    let vals: Vec<u64> = vals.iter().map(|v| **v).collect();
                    Ok::<_, BoxError>(combine(i, &vals))
                }
            });
        nodes.push(node);
    }
    Built {
        graph: g.build().expect("an acyclic graph builds"),
        nodes,
        calls,
    }
}

/// [`build`], with tasks that sleep up to a millisecond on the real clock, and count in the
/// second value how many tokio tasks were alive at their starts (summed).
fn build_real_sleeps(specs: &[Spec]) -> (Built, Arc<AtomicUsize>) {
    let alive = Arc::new(AtomicUsize::new(0));
    let calls: Arc<Vec<AtomicUsize>> =
        Arc::new((0..specs.len()).map(|_| AtomicUsize::new(0)).collect());
    let mut g = Graph::<()>::builder();
    let mut nodes: Vec<Node<u64>> = Vec::with_capacity(specs.len());
    for (i, spec) in specs.iter().enumerate() {
        let ups: Vec<Node<u64>> = spec.ups.iter().map(|&u| nodes[u]).collect();
        let (sleep_us, fails) = (spec.sleep_ms * 50, spec.fails);
        let (calls, alive) = (Arc::clone(&calls), Arc::clone(&alive));
        let node = g
            .node(format!("n{i}"))
            .after(ups)
            .task(move |_ctx, vals: Vec<Arc<u64>>| {
                calls[i].fetch_add(1, Ordering::SeqCst);
                let tasks = tokio::runtime::Handle::current()
                    .metrics()
                    .num_alive_tasks();
                alive.fetch_add(tasks, Ordering::SeqCst);
                async move {
                    tokio::time::sleep(Duration::from_micros(sleep_us)).await;
                    if fails {
                        return Err(format!("n{i} failed").into());
                    }
                    let vals: Vec<u64> = vals.iter().map(|v| **v).collect();
                    Ok::<_, BoxError>(combine(i, &vals))
                }
            });
        nodes.push(node);
    }
    let built = Built {
        graph: g.build().expect("an acyclic graph builds"),
        nodes,
        calls,
    };
    (built, alive)
}

/// Checks that hold in every failure mode and on every runtime.
fn check_structure(specs: &[Spec], b: &Built, report: &Report, m: &Model) {
    let n = specs.len();
    assert_eq!(report.len(), n);
    assert_eq!(b.graph.len(), n);
    assert_eq!(report.nodes().len(), n);
    assert_eq!(
        report.counts().total(),
        n,
        "every node has exactly one outcome"
    );
    for (i, node) in report.nodes().enumerate() {
        let name = format!("n{i}");
        assert_eq!(node.name(), name);
        assert_eq!(node.index(), i);
        let calls = b.calls[i].load(Ordering::SeqCst);
        assert!(calls <= 1, "{name} called {calls} times");
        let value = report.get(b.nodes[i]).copied();
        assert_eq!(value.is_some(), node.outcome().has_value(), "{name}");
        if let Some(v) = value {
            assert_eq!(
                Some(v),
                m.value[i],
                "{name}: value computed from upstream values"
            );
        }
        // None started before its upstreams ended.
        if let Some(start) = node.start() {
            for &u in &specs[i].ups {
                let up = report.nodes().nth(u).expect("upstream");
                assert!(
                    up.outcome().has_value(),
                    "{name} started but upstream n{u} is {}",
                    up.outcome()
                );
                assert!(start >= up.end(), "{name} started before n{u} ended");
            }
            assert!(node.end() >= start, "{name} ends after it starts");
        }
        let missing = specs[i]
            .ups
            .iter()
            .any(|&u| report.get(b.nodes[u]).is_none());
        match node.outcome() {
            Outcome::Skipped => {
                assert!(missing, "{name} skipped though every upstream has a value");
                assert_eq!(node.start(), None, "{name}");
                assert_eq!(node.attempts(), 0, "{name}");
                assert_eq!(calls, 0, "{name}");
                let because = node.skipped_because().expect("because");
                assert!(specs[i].ups.contains(&because.index()), "{name}");
                assert!(!because.outcome().has_value(), "{name}");
                let root = node.root_cause().expect("root cause");
                assert!(
                    matches!(root.outcome(), Outcome::Failed | Outcome::Cancelled),
                    "{name}: root cause {} is {}",
                    root.name(),
                    root.outcome()
                );
                assert!(node.message().expect("message").contains(root.name()));
            }
            Outcome::Succeeded => {
                assert!(!missing, "{name}");
                assert_eq!(node.attempts(), 1, "{name}");
                assert_eq!(calls, 1, "{name}");
            }
            Outcome::Failed => {
                assert!(!missing, "{name}");
                assert!(specs[i].fails, "{name} failed but was not meant to");
                assert_eq!(node.attempts(), 1, "{name}");
                assert_eq!(node.message(), Some(format!("{name} failed")));
            }
            Outcome::Cancelled => {
                let expected = u32::from(node.start().is_some());
                assert_eq!(node.attempts(), expected, "{name}");
                assert_eq!(calls as u32, expected, "{name}");
                assert_eq!(report.get(b.nodes[i]), None, "{name}");
            }
            other => panic!("{name}: unexpected outcome {other}"),
        }
    }
}

/// Preserve-partial: the report is exactly the model, times included when `timed`.
fn check_preserve_partial(specs: &[Spec], b: &Built, report: &Report, m: &Model, timed: bool) {
    check_structure(specs, b, report, m);
    for (i, node) in report.nodes().enumerate() {
        assert_eq!(node.outcome(), m.outcome[i], "n{i}");
        if timed {
            assert_eq!(node.start(), m.start[i], "start of n{i}");
            assert_eq!(node.end(), m.end[i], "end of n{i}");
            if let Some(because) = node.skipped_because() {
                assert_eq!(
                    because.end(),
                    node.end(),
                    "n{i} skipped when n{} ended",
                    because.index()
                );
            }
        } else {
            assert_eq!(node.start().is_some(), m.start[i].is_some(), "n{i}");
        }
    }
    if timed {
        assert_eq!(
            report.makespan(),
            m.end.iter().copied().max().unwrap_or_default()
        );
    }
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime")
}

fn multi_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_time()
        .build()
        .expect("runtime")
}

/// Awaits `fut` on `rt`; the long timeout is a hang guard, not a timing assertion.
fn block_on_guarded<F: std::future::Future>(rt: &tokio::runtime::Runtime, fut: F) -> F::Output {
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(60), fut)
            .await
            .expect("the run hangs")
    })
}

/// The start mode a multi-thread case runs in: both must match the model.
fn start(inline: bool) -> StartMode {
    if inline {
        StartMode::Inline
    } else {
        StartMode::Spread
    }
}

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(64);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn random_dag_paused_clock_matches_the_model(specs in dag()) {
        let m = model(&specs);
        let b = build(&specs, true);
        let report = paused_runtime().block_on(b.graph.run(())).expect("preserve-partial");
        check_preserve_partial(&specs, &b, &report, &m, true);
    }

    #[test]
    fn random_dag_multi_thread_matches_the_model(specs in dag(), inline in any::<bool>()) {
        let m = model(&specs);
        let b = build(&specs, false);
        let options = RunOptions::new().start_mode(start(inline));
        let report = block_on_guarded(&multi_thread_runtime(), b.graph.run_with((), options))
            .expect("preserve-partial");
        check_preserve_partial(&specs, &b, &report, &m, false);
    }

    /// Inline on four workers, nodes that sleep briefly on the real clock (woken by the
    /// timer from a worker thread while the run is awaited from `block_on`): the run matches
    /// the model and, at most 50 nodes being within one poll's budget, never spreads: no
    /// task was alive at any of the nodes' starts, nor after the run.
    #[test]
    fn random_dag_inline_polls_its_waiting_nodes_itself(
        specs in dag().prop_map(|s| s.into_iter().take(50).collect::<Vec<_>>()),
    ) {
        let m = model(&specs);
        let b = build_real_sleeps(&specs);
        let rt = multi_thread_runtime();
        let report = block_on_guarded(&rt, b.0.graph.run(())).expect("preserve-partial");
        check_preserve_partial(&specs, &b.0, &report, &m, false);
        prop_assert_eq!(b.1.load(Ordering::SeqCst), 0, "tasks alive at a node's start");
        prop_assert_eq!(rt.metrics().num_alive_tasks(), 0);
    }

    #[test]
    fn random_dag_fail_fast_paused_clock(specs in dag()) {
        let m = model(&specs);
        let b = build(&specs, true);
        let result = paused_runtime().block_on(
            b.graph.run_with((), RunOptions::new().failure_mode(FailureMode::FailFast)),
        );
        // The first failure in the model is when fail-fast stops the run.
        let first = (0..specs.len())
            .filter(|&i| m.outcome[i] == Outcome::Failed)
            .map(|i| m.end[i])
            .min();
        match first {
            None => {
                let report = result.expect("no failure: Ok");
                check_preserve_partial(&specs, &b, &report, &m, true);
            }
            Some(t) => {
                let err = result.expect_err("a failure: Err");
                prop_assert!(matches!(err, RunError::Failed { .. }), "{err}");
                let report = err.report().expect("report");
                check_structure(&specs, &b, report, &m);
                prop_assert_eq!(report.makespan(), t);
                prop_assert!(report.counts().failed >= 1);
                for (i, node) in report.nodes().enumerate() {
                    prop_assert!(node.end() <= t, "n{} ends after the failure", i);
                    if m.end[i] < t {
                        // Ended before the first failure: exactly as without fail-fast.
                        prop_assert_eq!(node.outcome(), m.outcome[i], "n{}", i);
                        prop_assert_eq!(node.start(), m.start[i], "n{}", i);
                        prop_assert_eq!(node.end(), m.end[i], "n{}", i);
                    } else if m.end[i] > t {
                        prop_assert!(
                            matches!(node.outcome(), Outcome::Cancelled | Outcome::Skipped),
                            "n{} is {}", i, node.outcome()
                        );
                        prop_assert_eq!(node.end(), t, "n{}", i);
                        match m.start[i] {
                            Some(s) if s < t => {
                                prop_assert_eq!(node.outcome(), Outcome::Cancelled, "n{}", i);
                                prop_assert_eq!(node.start(), Some(s), "in flight n{}", i);
                            }
                            _ => prop_assert!(
                                node.start().is_none() || node.start() == Some(t),
                                "n{} started at {:?}", i, node.start()
                            ),
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn random_dag_fail_fast_multi_thread(specs in dag(), inline in any::<bool>()) {
        let m = model(&specs);
        let b = build(&specs, false);
        let options = RunOptions::new()
            .failure_mode(FailureMode::FailFast)
            .start_mode(start(inline));
        let result = block_on_guarded(&multi_thread_runtime(), b.graph.run_with((), options));
        if m.outcome.contains(&Outcome::Failed) {
            // Only a failure cancels, so the first failing node always gets to fail.
            let err = result.expect_err("a failure: Err");
            let RunError::Failed { failed, report, .. } = &err else {
                panic!("expected Failed, got {err}");
            };
            prop_assert!(*failed >= 1);
            check_structure(&specs, &b, report, &m);
        } else {
            let report = result.expect("no failure: Ok");
            check_preserve_partial(&specs, &b, &report, &m, false);
        }
    }

    #[test]
    fn random_dag_cancelled_at_a_random_point_multi_thread(
        specs in dag(),
        yields in 0_usize..40,
        inline in any::<bool>(),
    ) {
        let m = model(&specs);
        let b = build(&specs, false);
        let run = b.graph.run_with((), RunOptions::new().start_mode(start(inline)));
        let canceller = run.canceller();
        let result = block_on_guarded(&multi_thread_runtime(), async move {
            let cancel = tokio::spawn(async move {
                for _ in 0..yields {
                    tokio::task::yield_now().await;
                }
                canceller.cancel();
            });
            let result = run.await;
            cancel.await.expect("canceller task");
            result
        });
        match result {
            Ok(report) => check_preserve_partial(&specs, &b, &report, &m, false),
            Err(RunError::Cancelled { reason, report }) => {
                prop_assert_eq!(reason, baton_graph::run::CancelReason::Requested);
                check_structure(&specs, &b, &report, &m);
                prop_assert!(report.counts().cancelled >= 1);
                for (i, node) in report.nodes().enumerate() {
                    // What ended before the cancel ended as the model says.
                    if node.outcome() != Outcome::Cancelled && node.outcome() != Outcome::Skipped {
                        prop_assert_eq!(node.outcome(), m.outcome[i], "n{}", i);
                    }
                    if let Some(root) = node.root_cause() {
                        prop_assert_eq!(root.outcome(), Outcome::Failed, "n{}", i);
                    }
                }
            }
            Err(other) => panic!("unexpected {other}"),
        }
    }
}
