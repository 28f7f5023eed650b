//! The ready queue of `engine/ready/mod.rs` and its drivers under stress. Nodes that
//! compute fan out to every worker in `StartMode::Spread`. No queued node is stranded in
//! either start mode, with random graphs mixing immediate, yielding, blocking and sleeping
//! nodes, concurrent runs, and runtimes dropped mid-run. Large graphs reuse their queue,
//! router branches are never left running, and nested runs complete.
//!
//! A node that blocks its thread without awaiting, even inside `block_in_place`, holds its
//! driver, and at most as many drivers as the runtime has workers drain the queue. Such
//! work belongs in `blocking_task`, whose nodes wait like any other, as tested below.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::common;
use crate::{BoxError, Graph, Node, Outcome, RunOptions, run::StartMode};

use crate::util::ms;

// ---------------------------------------------------------------------------------------
// Loss of concurrency: a fan-out behind a node doing synchronous work.
// ---------------------------------------------------------------------------------------

/// `StartMode::Spread`: `x` makes three CPU-bound nodes ready at once. The driver runs one
/// inline and queues the others, for which it spawns a driver. Tokio puts that driver in
/// the worker's LIFO slot, which the idle worker cannot steal from, so the driver yields
/// once before running its node, in `RunState::schedule`. Each node waits until a second
/// one runs beside it, which only happens if both workers are used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpu_bound_fan_out_uses_both_workers() {
    let report = cpu_fan_out(3).run(()).await.expect("run");
    assert!(report.is_clean(), "{report}");
}

/// The same, with the run awaited in a spawned task, so that `start` itself runs on a
/// worker, and four nodes ready at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpu_bound_fan_out_uses_both_workers_when_run_from_a_task() {
    let report = tokio::spawn(async { cpu_fan_out(4).run(()).await })
        .await
        .unwrap()
        .expect("run");
    assert!(report.is_clean(), "{report}");
}

/// `x`, then `width` nodes after it, each computing without awaiting until a second one of
/// them runs beside it. A node fails if none does within 10 s of wall time; only a failure
/// waits that long. Spread: computing nodes ready together run one after another in the
/// default `StartMode::Inline`, as in `tokio::join!`, and would all fail.
fn cpu_fan_out(width: usize) -> Graph<()> {
    let started = Arc::new(AtomicUsize::new(0));
    let mut g = Graph::<()>::builder();
    g.start_mode(StartMode::Spread);
    let x: Node<()> = g.node("x").task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    for i in 0..width {
        let started = Arc::clone(&started);
        g.node(format!("cpu{i}"))
            .after(x)
            .task(move |_ctx, _x| common::compute_beside_another(&started));
    }
    g.build().unwrap()
}

// ---------------------------------------------------------------------------------------
// Lost work / hangs: stress the push/leave protocol on a multi-thread runtime.
// ---------------------------------------------------------------------------------------

/// A layered graph: `width` nodes per layer, each depending on 1-2 nodes of the previous
/// layer; nodes end at once, after a yield, or on the blocking pool. Each value is the sum of
/// its upstreams' plus one, checked against a sequential evaluation.
fn layered(width: usize, layers: usize, seed: u64) -> (Graph<()>, Vec<Node<u64>>, Vec<u64>) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut g = Graph::<()>::builder();
    let mut nodes: Vec<Node<u64>> = Vec::new();
    let mut expect: Vec<u64> = Vec::new();
    let mut prev: Vec<usize> = Vec::new();
    for layer in 0..layers {
        let mut cur = Vec::new();
        for i in 0..width {
            let kind = rng.u8(0..10);
            let name = format!("l{layer}n{i}");
            let idx = nodes.len();
            let node = if prev.is_empty() {
                expect.push(1);
                g.node(name).task(move |_ctx, ()| async move {
                    work(kind).await;
                    Ok::<_, BoxError>(1u64)
                })
            } else {
                let a = prev[rng.usize(0..prev.len())];
                let b = prev[rng.usize(0..prev.len())];
                let ups: Vec<Node<u64>> = if a == b {
                    vec![nodes[a]]
                } else {
                    vec![nodes[a], nodes[b]]
                };
                let e = ups.iter().map(|n| expect[n.index()]).sum::<u64>() + 1;
                expect.push(e);
                g.node(name)
                    .after(ups)
                    .task(move |_ctx, vals: Vec<Arc<u64>>| async move {
                        work(kind).await;
                        Ok::<_, BoxError>(vals.iter().map(|v| **v).sum::<u64>() + 1)
                    })
            };
            assert_eq!(node.index(), idx);
            nodes.push(node);
            cur.push(idx);
        }
        prev = cur;
    }
    (g.build().unwrap(), nodes, expect)
}

async fn work(kind: u8) {
    match kind {
        0..=5 => {}
        6..=7 => tokio::task::yield_now().await,
        8 => {
            let _ = tokio::task::spawn_blocking(|| std::hint::black_box(0)).await;
        }
        _ => tokio::time::sleep(Duration::from_micros(50)).await,
    }
}

/// Options for the `i`-th run of a stress test: the default start mode, inline, and spread
/// in turn.
fn alternate(i: u64) -> RunOptions {
    let mode = if i % 2 == 0 {
        StartMode::Inline
    } else {
        StartMode::Spread
    };
    RunOptions::new().start_mode(mode)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stress_no_node_is_ever_stranded() {
    for round in 0..300u64 {
        let (graph, nodes, expect) = layered(1 + (round as usize % 17), 6, round);
        let run = graph.run_with((), alternate(round / 17));
        let report = tokio::time::timeout(Duration::from_secs(20), run)
            .await
            .unwrap_or_else(|_| panic!("round {round} hung"))
            .expect("run");
        for (n, e) in nodes.iter().zip(&expect) {
            assert_eq!(report.get(*n), Some(e), "round {round}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stress_concurrent_runs_of_one_graph() {
    let (graph, nodes, expect) = layered(40, 8, 7);
    for round in 0..40 {
        let runs: Vec<_> = (0..6)
            .map(|i| tokio::spawn(graph.run_with((), alternate(i + round))))
            .collect();
        for r in runs {
            let report = tokio::time::timeout(Duration::from_secs(20), r)
                .await
                .unwrap_or_else(|_| panic!("round {round} hung"))
                .unwrap()
                .expect("run");
            for (n, e) in nodes.iter().zip(&expect) {
                assert_eq!(report.get(*n), Some(e));
            }
        }
    }
}

/// Graphs reuse their runs' arrays, queue included: runs one after the other, concurrently,
/// and after a run whose runtime was dropped mid-way. A large graph keeps one set of arrays,
/// a small one a set per thread stripe.
#[test]
fn large_graph_reuses_its_queue_across_runs_and_aborted_runs() {
    reuses_its_arrays_across_runs_and_aborted_runs(layered(700, 7, 42)); // 4900 nodes
}

#[test]
fn small_graph_reuses_its_queue_across_runs_and_aborted_runs() {
    reuses_its_arrays_across_runs_and_aborted_runs(layered(4, 3, 7)); // 12 nodes
}

fn reuses_its_arrays_across_runs_and_aborted_runs(
    (graph, nodes, expect): (Graph<()>, Vec<Node<u64>>, Vec<u64>),
) {
    let check = |report: &crate::Report| {
        for (n, e) in nodes.iter().zip(&expect) {
            assert_eq!(report.get(*n), Some(e));
        }
    };
    let rt = super::common::two_workers();
    for round in 0..6 {
        // One aborted run: its runtime is dropped while nodes are queued and running.
        {
            let mut run = graph.run(());
            let doomed = super::common::two_workers();
            doomed.block_on(async {
                let _ = futures::poll!(&mut run);
                tokio::time::sleep(Duration::from_micros(200 * round)).await;
            });
            drop(doomed);
            let res =
                rt.block_on(async { tokio::time::timeout(Duration::from_secs(20), run).await });
            let res = res.expect("an aborted run resolves");
            match res {
                Ok(report) => check(&report),
                Err(crate::RunError::Cancelled { report, .. }) => {
                    assert_eq!(report.len(), graph.len());
                    for n in report.nodes() {
                        assert!(
                            matches!(n.outcome(), Outcome::Succeeded | Outcome::Cancelled),
                            "{}: {:?}",
                            n.name(),
                            n.outcome()
                        );
                    }
                }
                Err(e) => panic!("{e}"),
            }
        }
        rt.block_on(async {
            let report = tokio::time::timeout(Duration::from_secs(20), graph.run(()))
                .await
                .expect("hung")
                .expect("run");
            check(&report);
            drop(report);
            let a = graph.run(());
            let b = graph.run(());
            let (a, b) =
                tokio::time::timeout(Duration::from_secs(20), async { tokio::join!(a, b) })
                    .await
                    .expect("hung");
            check(&a.expect("run"));
            check(&b.expect("run"));
        });
    }
}

// ---------------------------------------------------------------------------------------
// Runtime shutdown, cancellation.
// ---------------------------------------------------------------------------------------

/// A multi-thread runtime dropped while the run has queued, running and waiting nodes; the
/// run, awaited on another runtime, resolves with every node accounted for.
#[test]
fn stress_multi_thread_runtime_dropped_mid_run() {
    let (graph, _nodes, _expect) = layered(30, 5, 3);
    let other = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    for round in 0..200u64 {
        let doomed = || {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap()
        };
        let options = alternate(round / 7);
        let report = run_on_a_dropped_runtime(&graph, options, doomed, round % 7, &other);
        assert_eq!(report.len(), graph.len(), "round {round}");
    }
}

/// Starts a run of `graph` with `options` on the runtime `doomed` makes, lets it go on for
/// `yields` of the starting task, drops that runtime, and awaits the run on `other`.
/// Returns its report, ended or cancelled. Panics if the run never resolves.
fn run_on_a_dropped_runtime(
    graph: &Graph<()>,
    options: RunOptions,
    doomed: impl FnOnce() -> tokio::runtime::Runtime,
    yields: u64,
    other: &tokio::runtime::Runtime,
) -> crate::Report {
    let mut run = graph.run_with((), options);
    let doomed = doomed();
    doomed.block_on(async {
        let _ = futures::poll!(&mut run);
        for _ in 0..yields {
            tokio::task::yield_now().await;
        }
    });
    drop(doomed);
    let res = other
        .block_on(async { tokio::time::timeout(Duration::from_secs(10), run).await })
        .expect("the run resolves");
    match res {
        Ok(report) => report,
        Err(crate::RunError::Cancelled { report, .. }) => *report,
        Err(e) => panic!("{e}"),
    }
}

/// A router whose chosen branch is waiting when the runtime is dropped.
#[test]
fn runtime_dropped_while_a_router_branch_waits() {
    let mut g = Graph::<()>::builder();
    let up: Node<u32> = g
        .node("up")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(1u32) });
    let _r: Node<u32> = g
        .router("r")
        .after(up)
        .select(|_input, _v| "a")
        .branch("a", |b| {
            b.task(|_ctx, _v| async {
                std::future::pending::<()>().await;
                Ok::<_, BoxError>(1u32)
            })
        })
        .branch("b", |b| {
            b.task(|_ctx, _v| async { Ok::<_, BoxError>(2u32) })
        })
        .finish();
    let graph = g.build().unwrap();
    let doomed = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let other = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let report = run_on_a_dropped_runtime(&graph, RunOptions::new(), doomed, 10, &other);
    assert_eq!(report.len(), graph.len());
    assert_eq!(report.by_name("a").unwrap().outcome(), Outcome::Cancelled);
    assert_eq!(report.by_name("b").unwrap().outcome(), Outcome::NotTaken);
}

/// Fail-fast with many queued nodes behind waiting ones: the run ends promptly.
#[tokio::test(start_paused = true)]
async fn fail_fast_with_a_long_queue() {
    let mut g = Graph::<()>::builder();
    g.failure_mode(crate::FailureMode::FailFast);
    for i in 0..2_000 {
        g.node(format!("n{i}")).task(move |_ctx, ()| async move {
            if i == 1_500 {
                return Err::<(), BoxError>("boom".into());
            }
            tokio::time::sleep(ms(100)).await;
            Ok(())
        });
    }
    let t0 = tokio::time::Instant::now();
    let err = g.build().unwrap().run(()).await.expect_err("fails");
    assert_eq!(t0.elapsed(), Duration::ZERO, "{err}");
}

// ---------------------------------------------------------------------------------------
// Waiting nodes of every kind do not serialize.
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn waiting_nodes_of_every_kind_run_at_once() {
    let bulkhead = crate::Bulkhead::new("bh", 50, Duration::from_secs(60));
    let mut g = Graph::<()>::builder();
    for i in 0..50 {
        // Retries with backoff.
        let tries = Arc::new(AtomicUsize::new(0));
        g.node(format!("retry{i}"))
            .retry(crate::Retry::new(2).backoff(crate::Backoff::constant(ms(10))))
            .task(move |_ctx, ()| {
                let tries = Arc::clone(&tries);
                async move {
                    if tries.fetch_add(1, Ordering::SeqCst) == 0 {
                        return Err::<(), BoxError>("first".into());
                    }
                    tokio::time::sleep(ms(10)).await;
                    Ok(())
                }
            });
        // Timeouts that fire.
        g.node(format!("timeout{i}"))
            .timeout(ms(20))
            .task(|_ctx, ()| async {
                tokio::time::sleep(ms(1_000)).await;
                Ok::<_, BoxError>(())
            });
        // Bulkhead.
        g.node(format!("bulk{i}"))
            .bulkhead(&bulkhead)
            .task(|_ctx, ()| async {
                tokio::time::sleep(ms(20)).await;
                Ok::<_, BoxError>(())
            });
        // Routers whose branch waits.
        let up: Node<u32> = g
            .node(format!("up{i}"))
            .task(|_ctx, ()| async { Ok::<_, BoxError>(1u32) });
        let _: Node<u32> = g
            .router(format!("r{i}"))
            .after(up)
            .select(|_input, _v| "a")
            .branch(format!("a{i}"), |b| {
                b.task(|_ctx, _v| async {
                    tokio::time::sleep(ms(20)).await;
                    Ok::<_, BoxError>(1u32)
                })
            })
            .branch(format!("b{i}"), |b| {
                b.task(|_ctx, _v| async { Ok::<_, BoxError>(2u32) })
            })
            .finish();
    }
    let report = g.build().unwrap().run(()).await.expect("run");
    assert_eq!(report.makespan(), ms(20), "{report}");
}

/// Blocking nodes that wait for each other at a barrier on the blocking pool: they suspend
/// their drivers, so all of them start even on a one-thread runtime.
#[tokio::test]
async fn blocking_nodes_all_start_on_a_current_thread_runtime() {
    let started = Arc::new(AtomicUsize::new(0));
    let mut g = Graph::<()>::builder();
    for i in 0..8 {
        let started = Arc::clone(&started);
        g.node(format!("b{i}")).blocking_task(move |_ctx, ()| {
            started.fetch_add(1, Ordering::SeqCst);
            common::spin_until(&started, 8)
        });
    }
    let report = g.build().unwrap().run(()).await.expect("run");
    assert!(report.is_clean(), "{report}");
}

/// Nested runs: every outer node runs an inner graph, on a multi-thread runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_runs_all_complete() {
    let (inner, inner_nodes, inner_expect) = layered(20, 4, 11);
    let last = *inner_nodes.last().unwrap();
    let want = *inner_expect.last().unwrap();
    let mut g = Graph::<()>::builder();
    let mut outs = Vec::new();
    for i in 0..16 {
        let inner = inner.clone();
        outs.push(g.node(format!("o{i}")).task(move |_ctx, ()| {
            let inner = inner.clone();
            async move {
                let r = inner.run(()).await?;
                Ok::<_, BoxError>(*r.get(last).unwrap())
            }
        }));
    }
    let graph = g.build().unwrap();
    for _ in 0..20 {
        let report = tokio::time::timeout(Duration::from_secs(20), graph.run(()))
            .await
            .expect("hung")
            .expect("run");
        for o in &outs {
            assert_eq!(report.get(*o), Some(&want));
        }
    }
}

/// A panic in a router branch's policy code, its retry predicate, fails the branch with the
/// panic, and the router with the branch. The run resolves, where the branch used to stay
/// running forever.
#[tokio::test(start_paused = true)]
async fn a_panicking_retry_predicate_in_a_router_branch_does_not_hang_the_run() {
    let mut g = Graph::<()>::builder();
    let up: Node<u32> = g
        .node("up")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(1u32) });
    let _r: Node<u32> = g
        .router("r")
        .after(up)
        .select(|_input, _v| "a")
        .branch("a", |b| {
            b.retry(crate::Retry::new(2).retry_if(|_e| panic!("predicate boom")))
                .task(|_ctx, _v| async { Err::<u32, BoxError>("fails".into()) })
        })
        .branch("b", |b| {
            b.task(|_ctx, _v| async { Ok::<_, BoxError>(2u32) })
        })
        .finish();
    let graph = g.build().unwrap();
    let report = tokio::time::timeout(Duration::from_secs(5), graph.run(()))
        .await
        .expect("the run never resolved")
        .expect("preserve-partial");
    assert_eq!(report.by_name("r").unwrap().outcome(), Outcome::Failed);
    let a = report.by_name("a").unwrap();
    assert_eq!(a.outcome(), Outcome::Failed);
    assert!(
        a.error().unwrap().to_string().contains("predicate boom"),
        "{report}"
    );
    assert_eq!(report.by_name("b").unwrap().outcome(), Outcome::NotTaken);
}

struct Flag(Arc<std::sync::atomic::AtomicBool>);
impl Drop for Flag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A run dropped mid-way, with queued, running and waiting-forever nodes: every driver
/// exits, so the run state and its input are freed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_dropped_mid_way_lets_every_driver_exit() {
    for round in 0..50 {
        let mut g = Graph::<Flag>::builder();
        for i in 0..500 {
            g.node(format!("n{i}")).task(move |_ctx, ()| async move {
                match i % 3 {
                    0 => std::future::pending::<()>().await,
                    1 => tokio::task::yield_now().await,
                    _ => {}
                }
                Ok::<_, BoxError>(())
            });
        }
        let graph = g.build().unwrap();
        let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut run = graph.run(Flag(Arc::clone(&dropped)));
        let _ = futures::poll!(&mut run);
        for _ in 0..(round % 5) {
            tokio::task::yield_now().await;
        }
        drop(run);
        tokio::time::timeout(Duration::from_secs(10), async {
            while !dropped.load(Ordering::SeqCst) {
                tokio::time::sleep(ms(1)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("round {round}: a driver never exited"));
    }
}

// ---------------------------------------------------------------------------------------
// One worker: a driver keeps the nodes it makes ready on a stack of its own.
// ---------------------------------------------------------------------------------------

/// On a one-thread runtime a fan-out's extra nodes stay with the driver that made them
/// ready; when the node it runs waits, they go to the queue for another driver. Here the
/// node run first waits for one run later: kept back, it would never end.
#[tokio::test(start_paused = true)]
async fn nodes_kept_by_a_driver_whose_node_waits_are_shared() {
    let signal = Arc::new(tokio::sync::Notify::new());
    let mut g = Graph::<()>::builder();
    let x: Node<()> = g.node("x").task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    let wait = Arc::clone(&signal);
    g.node("waits").after(x).task(move |_ctx, _x| {
        let wait = Arc::clone(&wait);
        async move {
            wait.notified().await;
            Ok::<_, BoxError>(())
        }
    });
    for i in 0..10 {
        g.node(format!("quick{i}"))
            .after(x)
            .task(|_ctx, _x| async { Ok::<_, BoxError>(()) });
    }
    let fire = Arc::clone(&signal);
    g.node("signals").after(x).task(move |_ctx, _x| {
        fire.notify_one();
        std::future::ready(Ok::<_, BoxError>(()))
    });
    let graph = g.build().unwrap();
    let report = tokio::time::timeout(Duration::from_secs(5), graph.run(()))
        .await
        .expect("the kept nodes were shared")
        .expect("run");
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.makespan(), Duration::ZERO);
}

/// A one-thread runtime dropped while a driver keeps nodes, having yielded on tokio's
/// budget in the middle of a wide fan-out: they end `Cancelled` with the rest, and the run,
/// awaited on another runtime, resolves with every node accounted for.
#[test]
fn a_runtime_dropped_while_a_driver_keeps_nodes_ends_them_cancelled() {
    let mut g = Graph::<()>::builder();
    let x: Node<()> = g.node("x").task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    for i in 0..1_000 {
        g.node(format!("n{i}"))
            .after(x)
            .task(|_ctx, _x| async { Ok::<_, BoxError>(()) });
    }
    let graph = g.build().unwrap();
    let other = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    for round in 0..8 {
        let doomed = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
        };
        let report = run_on_a_dropped_runtime(&graph, RunOptions::new(), doomed, round, &other);
        assert_eq!(report.len(), graph.len(), "round {round}");
    }
}
