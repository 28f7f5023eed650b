//! The ready queue's drivers take turns and never strand a node. Tested here: a cancel
//! landing while a run starts, cancels soon after the start under stress, and computing
//! nodes on two workers after a node that waited, with more roots than workers, or after a
//! router branch. A node that would start a request, ready beside long chains of nodes that
//! end at once, starts at the drivers' next yield instead of after the chains.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use super::common;
use crate::observe::Event;
use crate::{BoxError, Graph, Node, Orchestrator, Outcome, RunError, run::StartMode};

// ---------------------------------------------------------------------------------------
// A cancel that lands while `start` queues the roots.
// ---------------------------------------------------------------------------------------

/// `start` queues the roots beyond the first few, then gives each first root a driver. A
/// cancel in between sweeps first roots not yet claimed, and `start` then spawns a driver
/// for the queued ones itself; they would wait forever otherwise. The observer tells a
/// thread the run started, since `RunStarted` comes just before the roots are claimed; the
/// thread cancels while the 20 000 roots are being queued.
#[test]
fn cancel_while_start_queues_roots_does_not_hang() {
    for round in 0..20 {
        let started = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&started);
        let orch = Orchestrator::builder()
            .observer(move |e: &Event<'_>| {
                if matches!(e, Event::RunStarted { .. }) {
                    flag.store(true, Ordering::SeqCst);
                }
            })
            .build();
        let mut g = orch.graph::<()>();
        for i in 0..20_000 {
            g.node(format!("r{i}"))
                .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
        }
        let graph = g.build().unwrap();
        let rt = super::common::two_workers();
        let run = graph.run(());
        let canceller = run.canceller();
        let t = std::thread::spawn(move || {
            while !started.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
            canceller.cancel();
        });
        let result = rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(10), run)
                .await
                .unwrap_or_else(|_| panic!("round {round}: the run hangs"))
        });
        t.join().unwrap();
        match result {
            Ok(report) => assert!(report.is_clean()),
            Err(RunError::Cancelled { report, .. }) => {
                assert_eq!(report.nodes().count(), 20_000);
            }
            Err(other) => panic!("{other}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Concurrency of computing nodes on a two-worker runtime, in `StartMode::Spread`. In the
// default `Inline`, computing nodes ready together run one after another, as in `join!`.
// ---------------------------------------------------------------------------------------

/// A fan-out of CPU-bound nodes made ready by a node that waited first. Its driver is no
/// longer counted active when it finishes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_fan_out_after_a_waiting_node_uses_both_workers() {
    for _ in 0..20 {
        let started = Arc::new(AtomicUsize::new(0));
        let mut g = Graph::<()>::builder();
        g.start_mode(StartMode::Spread);
        let x: Node<()> = g.node("x").task(|_ctx, ()| async {
            tokio::task::yield_now().await;
            Ok::<_, BoxError>(())
        });
        for i in 0..3 {
            let started = Arc::clone(&started);
            g.node(format!("cpu{i}"))
                .after(x)
                .task(move |_ctx, _x| common::compute_beside_another(&started));
        }
        let report = g.build().unwrap().run(()).await.expect("run");
        assert!(report.is_clean(), "{report}");
    }
}

/// More CPU-bound roots than workers, run from inside a worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_roots_use_both_workers() {
    for _ in 0..20 {
        let res = tokio::spawn(async {
            let started = Arc::new(AtomicUsize::new(0));
            let mut g = Graph::<()>::builder();
            g.start_mode(StartMode::Spread);
            for i in 0..5 {
                let started = Arc::clone(&started);
                g.node(format!("cpu{i}")).task(move |_ctx, ()| {
                    let started = Arc::clone(&started);
                    async move {
                        let me = started.fetch_add(1, Ordering::SeqCst) + 1;
                        // each one waits until another one is running beside it
                        common::spin_until(&started, me.max(2))
                    }
                });
            }
            g.build().unwrap().run(()).await
        })
        .await
        .unwrap();
        let report = res.expect("run");
        assert!(report.is_clean(), "{report}");
    }
}

/// A router's chosen branch makes two CPU-bound nodes, depending on it by name, ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_nodes_after_a_router_branch_use_both_workers() {
    for _ in 0..20 {
        let started = Arc::new(AtomicUsize::new(0));
        let mut g = Graph::<()>::builder();
        g.start_mode(StartMode::Spread);
        let x: Node<u32> = g
            .node("x")
            .task(|_ctx, ()| async { Ok::<_, BoxError>(1u32) });
        g.router("r")
            .after(x)
            .select(|_i, _x| "a")
            .branch("a", |b| {
                b.task(|_ctx, x| async move { Ok::<_, BoxError>(*x) })
            })
            .branch("b", |b| {
                b.task(|_ctx, x| async move { Ok::<_, BoxError>(*x) })
            })
            .finish();
        for i in 0..2 {
            let started = Arc::clone(&started);
            g.node(format!("cpu{i}"))
                .after_names::<u32>(["a"])
                .task(move |_ctx, _a| common::compute_beside_another(&started));
        }
        let report = g.build().unwrap().run(()).await.expect("run");
        assert!(report.is_clean(), "{report}");
    }
}

// ---------------------------------------------------------------------------------------
// Drivers take turns at each yield: a node that waits is not held behind long chains.
// ---------------------------------------------------------------------------------------

/// One worker. `root` makes `chain0` and `io` ready. `chain0` heads a chain of 2 000 nodes
/// that end at once; `io` would start a request, and sleeps. The driver runs `chain0`
/// inline and keeps `io` on its own stack. When it yields to tokio, its budget of 128
/// nodes per poll spent, the oldest node of its stack goes first, so `io` starts within
/// the first few hundred chain nodes, not after all of them.
#[tokio::test(start_paused = true)]
async fn one_worker_independent_node_is_not_held_behind_a_long_chain() {
    let progress = Arc::new(AtomicUsize::new(0));
    let io_started_at = Arc::new(AtomicUsize::new(usize::MAX));
    let mut g = Graph::<()>::builder();
    let root: Node<()> = g
        .node("root")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    let mut prev = root;
    for i in 0..2_000 {
        let progress = Arc::clone(&progress);
        prev = g
            .node(format!("chain{i}"))
            .after(prev)
            .task(move |_ctx, _| {
                progress.fetch_add(1, Ordering::SeqCst);
                async { Ok::<_, BoxError>(()) }
            });
    }
    {
        let progress = Arc::clone(&progress);
        let at = Arc::clone(&io_started_at);
        g.node("io").after(root).task(move |_ctx, _| {
            at.store(progress.load(Ordering::SeqCst), Ordering::SeqCst);
            async {
                tokio::time::sleep(Duration::from_millis(10)).await;
                Ok::<_, BoxError>(())
            }
        });
    }
    let report = g.build().unwrap().run(()).await.expect("run");
    assert!(report.is_clean());
    let at = io_started_at.load(Ordering::SeqCst);
    assert!(at < 500, "`io` started after {at} of 2000 chain nodes");
}

// ---------------------------------------------------------------------------------------
// Stress: random cancels on a multi-thread runtime, every node ends exactly once.
// ---------------------------------------------------------------------------------------

#[test]
fn stress_cancel_soon_after_start_many_roots() {
    let rt = super::common::two_workers();
    for round in 0..200u64 {
        let ended = Arc::new(AtomicUsize::new(0));
        let mut g = Graph::<()>::builder();
        let n = 50 + (round as usize % 50);
        let mut prev: Vec<Node<()>> = Vec::new();
        for i in 0..n {
            let ended = Arc::clone(&ended);
            let b = g.node(format!("n{i}")).on_complete(move |_| {
                ended.fetch_add(1, Ordering::SeqCst);
            });
            let node = if i % 3 == 0 || prev.is_empty() {
                b.task(|_ctx, ()| async {
                    tokio::task::yield_now().await;
                    Ok::<_, BoxError>(())
                })
            } else {
                b.after(prev[i / 2])
                    .task(|_ctx, _| async { Ok::<_, BoxError>(()) })
            };
            prev.push(node);
        }
        let graph = g.build().unwrap();
        let run = graph.run(());
        let c = run.canceller();
        let yields = round % 7;
        let result = rt.block_on(async move {
            let t = tokio::spawn(async move {
                for _ in 0..yields {
                    tokio::task::yield_now().await;
                }
                c.cancel();
            });
            let r = tokio::time::timeout(Duration::from_secs(10), run)
                .await
                .unwrap_or_else(|_| panic!("round {round} hung"));
            t.await.unwrap();
            r
        });
        let report = match result {
            Ok(r) => r,
            Err(RunError::Cancelled { report, .. }) => *report,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(report.nodes().count(), n);
        assert_eq!(
            ended.load(Ordering::SeqCst),
            n,
            "round {round}: on_complete count"
        );
        assert!(report.nodes().all(|x| x.outcome() != Outcome::NotTaken));
    }
}

/// Two workers, two long chains of nodes that end at once, and one node that waits, `io`,
/// all made ready by `root`. The driver runs chain `a` inline, queues `b0` and `io`, and
/// spawns a second driver, which takes `b0` and runs chain `b` inline. When a driver yields
/// to tokio with nodes waiting in the queue, its chain's next node joins the queue and the
/// oldest queued node goes first: `io` starts long before a whole chain has run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_worker_queued_node_is_not_held_behind_two_long_chains() {
    const LEN: usize = 10_000;
    let pa = Arc::new(AtomicUsize::new(0));
    let pb = Arc::new(AtomicUsize::new(0));
    let io_at = Arc::new(AtomicUsize::new(usize::MAX));
    let mut g = Graph::<()>::builder();
    let root: Node<()> = g
        .node("root")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    let a0: Node<()> = g
        .node("a0")
        .after(root)
        .task(|_ctx, _| async { Ok::<_, BoxError>(()) });
    let b0: Node<()> = g
        .node("b0")
        .after(root)
        .task(|_ctx, _| async { Ok::<_, BoxError>(()) });
    {
        let (pa, pb, at) = (Arc::clone(&pa), Arc::clone(&pb), Arc::clone(&io_at));
        g.node("io").after(root).task(move |_ctx, _| {
            at.store(
                pa.load(Ordering::SeqCst).max(pb.load(Ordering::SeqCst)),
                Ordering::SeqCst,
            );
            async {
                tokio::task::yield_now().await;
                Ok::<_, BoxError>(())
            }
        });
    }
    for (head, p, name) in [(a0, &pa, "a"), (b0, &pb, "b")] {
        let mut prev = head;
        for i in 1..=LEN {
            let p = Arc::clone(p);
            prev = g
                .node(format!("{name}{i}"))
                .after(prev)
                .task(move |_ctx, _| {
                    p.fetch_add(1, Ordering::SeqCst);
                    async { Ok::<_, BoxError>(()) }
                });
        }
    }
    let graph = g.build().unwrap();
    let report = tokio::time::timeout(Duration::from_secs(30), graph.run(()))
        .await
        .expect("hang")
        .expect("run");
    assert!(report.is_clean());
    let at = io_at.load(Ordering::SeqCst);
    assert!(
        at < LEN,
        "`io` started only after a whole chain of {LEN} ran ({at})"
    );
}

/// One worker: a driver that yields with nodes queued hands its chain's next node to the
/// queue and goes idle; the nodes on its own stack go to the queue with it. Here another
/// driver, woken from a wait, empties the queue first, and the first one then ends: had it
/// kept `x` on its stack, `x` would never run and the run would never end.
#[tokio::test(start_paused = true)]
async fn one_worker_stack_is_not_lost_when_a_driver_takes_turns() {
    let notify = Arc::new(tokio::sync::Notify::new());
    let mut g = Graph::<()>::builder();
    {
        // The first root has a driver of its own; it waits, and its driver spawns another.
        let n = Arc::clone(&notify);
        g.node("w").task(move |_ctx, ()| {
            let n = Arc::clone(&n);
            async move {
                n.notified().await;
                Ok::<_, BoxError>(())
            }
        });
    }
    let a: Node<()> = g.node("a").task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    // A second queued root keeps the queue non-empty.
    g.node("b").task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    let mut prev = a;
    // A chain run inline; the driver's budget runs out around its 128th node.
    for i in 1..=300 {
        let n = Arc::clone(&notify);
        prev = g.node(format!("c{i}")).after(prev).task(move |_ctx, _| {
            if i == 5 {
                n.notify_one();
            }
            async { Ok::<_, BoxError>(()) }
        });
    }
    // Made ready with `c1`: it goes on the driver's stack.
    g.node("x")
        .after(a)
        .task(|_ctx, _| async { Ok::<_, BoxError>(()) });
    let graph = g.build().unwrap();
    let report = tokio::time::timeout(Duration::from_secs(60), graph.run(()))
        .await
        .expect("every node ran, the run ended")
        .expect("run");
    assert!(report.is_clean(), "{report}");
}
