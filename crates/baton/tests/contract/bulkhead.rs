//! Bulkhead: a concurrency limit shared by the nodes that call one downstream, with a bounded
//! wait; a waiter that gives up never leaks a permit, and a permit is held until the attempt
//! has really stopped.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use baton_graph::{
    Backoff, BoxError, Bulkhead, Graph, Node, NodeError, Orchestrator, Outcome, Retry,
};
use tokio::time::sleep;

use crate::ms;

#[tokio::test(start_paused = true)]
async fn bulkhead_limits_concurrency_and_bounds_the_wait() {
    let bulkhead = Bulkhead::new("inventory", 2, ms(150));
    let in_flight = Arc::new(AtomicU32::new(0));
    let peak = Arc::new(AtomicU32::new(0));
    let mut g = Graph::<()>::builder();
    for i in 0..5 {
        let (in_flight, peak) = (Arc::clone(&in_flight), Arc::clone(&peak));
        let _ = g
            .node(format!("n{i}"))
            .bulkhead(&bulkhead)
            .task(move |_ctx, ()| {
                let (in_flight, peak) = (Arc::clone(&in_flight), Arc::clone(&peak));
                async move {
                    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    sleep(ms(100)).await;
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    Ok::<_, BoxError>(())
                }
            });
    }
    let report = g.build().unwrap().run(()).await.unwrap();
    assert_eq!(peak.load(Ordering::SeqCst), 2);
    // Two run at 0-100, two more at 100-200; the fifth waits 150 ms and gives up.
    let counts = report.counts();
    assert_eq!(counts.succeeded, 4, "{report}");
    assert_eq!(counts.failed, 1, "{report}");
    let failed = report
        .nodes()
        .find(|n| n.outcome() == Outcome::Failed)
        .unwrap();
    assert!(matches!(
        failed.error(),
        Some(NodeError::BulkheadFull { bulkhead, waited, .. }) if bulkhead == "inventory" && *waited == ms(150)
    ));
    assert_eq!(failed.end(), ms(150));
    // Nobody leaked a permit.
    assert_eq!(bulkhead.available(), 2);
    assert_eq!(bulkhead.waiting(), 0);
}

/// One permit, three nodes asking at once: they get it in the order they asked. `a`'s
/// first attempt fails and its retry asks again 1 ms later, behind `b` and `c`.
#[tokio::test(start_paused = true)]
async fn permits_go_first_come_first_served_and_a_retry_asks_again_at_the_back() {
    let bulkhead = Bulkhead::new("inventory", 1, ms(10_000));
    let starts = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut g = Graph::<()>::builder();
    for name in ["a", "b", "c"] {
        let starts = Arc::clone(&starts);
        let _ = g
            .node(name)
            .bulkhead(&bulkhead)
            .retry(Retry::new(2).backoff(Backoff::constant(ms(1))))
            .task(move |ctx, ()| {
                let at = tokio::time::Instant::now();
                starts.lock().unwrap().push((name, ctx.attempt(), at));
                async move {
                    sleep(ms(100)).await;
                    if name == "a" && ctx.attempt() == 1 {
                        return Err::<(), BoxError>("503".into());
                    }
                    Ok(())
                }
            });
    }
    let t0 = tokio::time::Instant::now();
    let report = g.build().unwrap().run(()).await.unwrap();
    assert!(report.is_clean(), "{report}");
    let starts: Vec<_> = starts
        .lock()
        .unwrap()
        .iter()
        .map(|&(name, attempt, at)| (name, attempt, at - t0))
        .collect();
    assert_eq!(
        starts,
        [
            ("a", 1, ms(0)),
            ("b", 1, ms(100)),
            ("c", 1, ms(200)),
            ("a", 2, ms(300)),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn bulkheads_are_shared_by_name_through_the_orchestrator() {
    let orch = Orchestrator::new();
    orch.add_bulkhead(&Bulkhead::new("mail", 1, ms(1000)))
        .unwrap();
    let make = |orch: &Orchestrator| {
        let mut g = orch.graph::<()>();
        let n = g.node("send").bulkhead("mail").task(|_ctx, ()| async {
            sleep(ms(100)).await;
            Ok::<_, BoxError>(())
        });
        (g.build().unwrap(), n)
    };
    let (a, _) = make(&orch);
    let (b, _) = make(&orch);
    let (ra, rb) = tokio::join!(a.run(()), b.run(()));
    let ends = [
        ra.unwrap().by_name("send").unwrap().end(),
        rb.unwrap().by_name("send").unwrap().end(),
    ];
    let mut ends = ends.to_vec();
    ends.sort();
    assert_eq!(ends, [ms(100), ms(200)], "the two graphs share one permit");
}

#[test]
fn unknown_and_conflicting_names_are_build_errors() {
    let orch = Orchestrator::new();
    let mut g = orch.graph::<()>();
    let _ = g
        .node("n")
        .bulkhead("nope")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    assert_eq!(
        g.build().unwrap_err().to_string(),
        "node `n` names bulkhead `nope`, which the orchestrator does not have"
    );
    orch.add_bulkhead(&Bulkhead::new("mail", 1, ms(1))).unwrap();
    let mut g = orch.graph::<()>();
    let _ = g
        .node("m")
        .bulkhead(Bulkhead::new("mail", 3, ms(1)))
        .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    assert_eq!(
        g.build().unwrap_err().to_string(),
        "node `m` uses a bulkhead named `mail`, but the orchestrator already has a different bulkhead with that name"
    );
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_waiter_does_not_leak_its_place() {
    let bulkhead = Bulkhead::new("b", 1, Duration::from_secs(60));
    let mut g = Graph::<()>::builder();
    for i in 0..3 {
        let _ = g
            .node(format!("n{i}"))
            .bulkhead(&bulkhead)
            .task(|_ctx, ()| async {
                sleep(ms(1000)).await;
                Ok::<_, BoxError>(())
            });
    }
    let graph = g.build().unwrap();
    let run = graph.run(());
    // Drop the run while one node holds the permit and two wait.
    let _ = tokio::time::timeout(ms(10), run).await;
    tokio::task::yield_now().await;
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(bulkhead.waiting(), 0);
    assert_eq!(bulkhead.available(), 1);
}

/// The wait for a permit belongs to the attempt: a node with a 50 ms timeout whose permit
/// is held for a second fails with its timeout at 50 ms (not at 1 005 ms, after the
/// holder), and the attempt log says how long each attempt waited.
#[tokio::test(start_paused = true)]
async fn the_wait_for_a_permit_counts_toward_the_attempts_timeout() {
    let bulkhead = Bulkhead::new("pool", 1, Duration::from_secs(10));
    let mut g = Graph::<()>::builder();
    let _holder: Node<()> = g.node("holder").bulkhead(&bulkhead).task(|_ctx, ()| async {
        sleep(Duration::from_secs(1)).await;
        Ok::<_, BoxError>(())
    });
    let waiter: Node<()> =
        g.node("waiter")
            .bulkhead(&bulkhead)
            .timeout(ms(50))
            .task(|_ctx, ()| async {
                sleep(ms(5)).await;
                Ok::<_, BoxError>(())
            });
    let patient: Node<()> = g
        .node("patient")
        .bulkhead(&bulkhead)
        .timeout(ms(1_500))
        .task(|_ctx, ()| async {
            sleep(ms(5)).await;
            Ok::<_, BoxError>(())
        });
    let report = g.build().unwrap().run(()).await.unwrap();
    let w = report.node(waiter).unwrap();
    assert_eq!(w.outcome(), Outcome::Failed);
    assert!(
        matches!(w.error(), Some(NodeError::Timeout { attempt: 1, .. })),
        "{:?}",
        w.error()
    );
    assert_eq!(w.end(), ms(50));
    assert_eq!(w.attempts(), 1);
    assert_eq!(w.attempt_log()[0].permit_wait, ms(50));
    let p = report.node(patient).unwrap();
    assert_eq!(p.outcome(), Outcome::Succeeded);
    assert_eq!(p.end(), ms(1_005));
    let log = p.attempt_log();
    assert_eq!((log[0].start, log[0].permit_wait), (ms(0), ms(1_000)));
}

/// A permit got with less than the minimum attempt time left before the deadline would
/// leave the task too little time: the wait ends that much before the deadline, and the
/// task is never called. (Held 95 ms; a 100 ms budget and the 10 ms minimum: the waiter
/// fails at 90 ms with `DeadlineExceeded`.)
#[tokio::test(start_paused = true)]
async fn the_wait_for_a_permit_leaves_the_task_the_minimum_attempt_time() {
    let bulkhead = Bulkhead::new("pool", 1, Duration::from_secs(10));
    let calls = Arc::new(AtomicU32::new(0));
    let mut g = Graph::<()>::builder();
    let _holder: Node<()> = g.node("holder").bulkhead(&bulkhead).task(|_ctx, ()| async {
        sleep(ms(95)).await;
        Ok::<_, BoxError>(())
    });
    let c = Arc::clone(&calls);
    let waiter: Node<()> =
        g.node("waiter")
            .bulkhead(&bulkhead)
            .budget(ms(100))
            .task(move |_ctx, ()| {
                c.fetch_add(1, Ordering::SeqCst);
                async {
                    sleep(ms(8)).await;
                    Ok::<_, BoxError>(())
                }
            });
    let report = g.build().unwrap().run(()).await.unwrap();
    let w = report.node(waiter).unwrap();
    assert!(
        matches!(
            w.error(),
            Some(NodeError::DeadlineExceeded { attempts: 1, .. })
        ),
        "{:?}",
        w.error()
    );
    assert_eq!(w.end(), ms(90));
    assert_eq!(calls.load(Ordering::SeqCst), 0, "the task never ran");
}

/// A bulkhead that could never admit an attempt is a typed build error naming the node and
/// the bulkhead, for a graph and a pipeline alike, not a bulkhead quietly given 1 permit.
#[test]
fn a_bulkhead_without_permits_is_a_build_error() {
    let empty = Bulkhead::new("pool", 0, ms(10));
    let mut g = Graph::<()>::builder();
    let _: Node<()> = g
        .node("stock")
        .bulkhead(&empty)
        .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    let error = g.build().unwrap_err();
    assert_eq!(
        error.to_string(),
        "node `stock`: invalid bulkhead policy: bulkhead `pool` has 0 permits: no attempt could ever run"
    );
    let error = baton_graph::Pipeline::<()>::builder("stock")
        .bulkhead(&empty)
        .build()
        .unwrap_err();
    assert!(matches!(
        error,
        baton_graph::BuildError::InvalidPolicy {
            policy: "bulkhead",
            ..
        }
    ));
    let huge = Bulkhead::new("huge", usize::MAX, ms(10));
    let mut g = Graph::<()>::builder();
    let _: Node<()> = g
        .node("n")
        .bulkhead(&huge)
        .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    assert!(g.build().unwrap_err().to_string().contains("more than the"));
}
