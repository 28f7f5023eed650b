//! The onion with the circuit breaker (`docs/contract.md`, rule 3): attempt (task +
//! timeout) → retry → breaker → fallback. The breaker is asked once per series and told one
//! result per series; an open breaker rejects without running the task; a breaker rejection
//! is never retried; a series stops early when its breaker opens meanwhile.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use baton_graph::{
    Backoff, BoxError, CircuitBreaker, Fallback, Graph, NodeError, Orchestrator, Outcome, Retry,
    breaker::BreakerState, retry::StopReason,
};
use tokio::time::sleep;

use crate::ms;

fn breaker(name: &str, failures: u32) -> CircuitBreaker {
    CircuitBreaker::builder(name)
        .consecutive_failures(failures)
        .open_duration(Duration::from_secs(3))
        .build()
        .unwrap()
}

fn always_failing(calls: &Arc<AtomicU32>, retry: Retry, b: &CircuitBreaker) -> Graph<()> {
    let mut g = Graph::<()>::builder();
    let calls = Arc::clone(calls);
    let _ = g
        .node("stock")
        .retry(retry)
        .breaker(b)
        .task(move |_ctx, ()| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err::<u32, BoxError>("inventory 503".into()) }
        });
    g.build().unwrap()
}

/// Counter-example two: a breaker inside the retry would count every attempt and trip after
/// one request. Outside, one request of four attempts counts once.
#[tokio::test(start_paused = true)]
async fn the_breaker_counts_one_result_per_retry_series() {
    let b = breaker("inventory", 3);
    let calls = Arc::new(AtomicU32::new(0));
    let graph = always_failing(&calls, Retry::new(4).backoff(Backoff::constant(ms(10))), &b);
    graph.run(()).await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    assert_eq!(
        b.state(),
        BreakerState::Closed,
        "four attempts, one failure"
    );
    graph.run(()).await.unwrap();
    assert_eq!(b.state(), BreakerState::Closed);
    graph.run(()).await.unwrap();
    assert_eq!(
        b.state(),
        BreakerState::Open,
        "the third failed series trips it"
    );
}

/// An open breaker rejects without running the task; the rejection is not retried and names
/// the breaker; the fallback still serves.
#[tokio::test(start_paused = true)]
async fn an_open_breaker_rejects_without_running_the_task() {
    let b = breaker("inventory", 1);
    let calls = Arc::new(AtomicU32::new(0));
    let graph = always_failing(&calls, Retry::new(3).backoff(Backoff::constant(ms(1))), &b);
    graph.run(()).await.unwrap();
    assert_eq!(b.state(), BreakerState::Open);
    let before = calls.load(Ordering::SeqCst);
    let report = graph.run(()).await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), before, "the task did not run");
    let node = report.by_name("stock").unwrap();
    assert_eq!(node.attempts(), 0);
    assert_eq!(node.end(), Duration::ZERO);
    match node.error() {
        Some(NodeError::BreakerOpen {
            breaker,
            retry_after,
            ..
        }) => {
            assert_eq!(breaker, "inventory");
            assert_eq!(*retry_after, Some(Duration::from_secs(3)));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        node.message().unwrap(),
        "node `stock` rejected: circuit breaker `inventory` is open"
    );

    let mut g = Graph::<()>::builder();
    let n = g
        .node("stock")
        .breaker(&b)
        .fallback(Fallback::value(0u32))
        .task(|_ctx, ()| async { Ok::<_, BoxError>(5u32) });
    let report = g.build().unwrap().run(()).await.unwrap();
    assert_eq!(report.get(n), Some(&0));
    assert_eq!(report.node(n).unwrap().outcome(), Outcome::Recovered);
}

/// A retry series stops early when its breaker opens meanwhile (other nodes' failures).
#[tokio::test(start_paused = true)]
async fn a_series_stops_when_its_breaker_opens_meanwhile() {
    let b = breaker("shared", 2);
    let mut g = Graph::<()>::builder();
    // Two quick failures elsewhere open the breaker at 10 ms.
    for name in ["x", "y"] {
        let _ = g.node(name).breaker(&b).task(|_ctx, ()| async {
            sleep(ms(10)).await;
            Err::<(), BoxError>("down".into())
        });
    }
    let slow = g
        .node("slow")
        .breaker(&b)
        .retry(Retry::new(10).backoff(Backoff::constant(ms(50))))
        .task(|_ctx, ()| async {
            sleep(ms(20)).await;
            Err::<(), BoxError>("down".into())
        });
    let report = g.build().unwrap().run(()).await.unwrap();
    let node = report.node(slow).unwrap();
    assert_eq!(node.attempts(), 1);
    assert!(matches!(
        node.error(),
        Some(NodeError::GaveUp {
            reason: StopReason::BreakerOpened,
            attempts: 1,
            ..
        })
    ));
}

/// Cancelled series (the run was dropped) are not failures, and ignored errors do not count.
#[tokio::test(start_paused = true)]
async fn cancellation_and_ignored_errors_do_not_count() {
    let b = breaker("b", 1);
    let mut g = Graph::<()>::builder();
    let _ = g.node("long").breaker(&b).task(|_ctx, ()| async {
        sleep(Duration::from_secs(60)).await;
        Err::<(), BoxError>("never reached".into())
    });
    let graph = g.build().unwrap();
    let _ = tokio::time::timeout(ms(10), graph.run(())).await;
    for _ in 0..5 {
        tokio::task::yield_now().await;
    }
    assert_eq!(b.state(), BreakerState::Closed);

    let mut g = Graph::<()>::builder();
    let _ = g
        .node("bad_request")
        .breaker(&b)
        .breaker_ignore(|e| e.to_string().contains("400"))
        .task(|_ctx, ()| async { Err::<(), BoxError>("HTTP 400".into()) });
    let graph = g.build().unwrap();
    for _ in 0..3 {
        graph.run(()).await.unwrap();
    }
    assert_eq!(b.state(), BreakerState::Closed);
}

/// Breakers are shared by name through the orchestrator: two graphs, one breaker.
#[tokio::test(start_paused = true)]
async fn breakers_are_shared_by_name_across_graphs_and_runs() {
    let orch = Orchestrator::new();
    orch.add_breaker(&breaker("inventory", 2)).unwrap();
    let make = || {
        let mut g = orch.graph::<()>();
        let _ = g
            .node("stock")
            .breaker("inventory")
            .task(|_ctx, ()| async { Err::<(), BoxError>("503".into()) });
        g.build().unwrap()
    };
    let (a, b) = (make(), make());
    a.run(()).await.unwrap();
    b.run(()).await.unwrap();
    assert_eq!(
        orch.breaker("inventory").unwrap().state(),
        BreakerState::Open
    );
    let report = a.run(()).await.unwrap();
    assert!(matches!(
        report.by_name("stock").unwrap().error(),
        Some(NodeError::BreakerOpen { .. })
    ));
    assert_eq!(orch.stats().breaker_rejections, 1);

    let mut g = orch.graph::<()>();
    let _ = g
        .node("n")
        .breaker(breaker("inventory", 9))
        .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    assert!(matches!(
        g.build(),
        Err(baton_graph::BuildError::PolicyConflict {
            kind: "circuit breaker",
            ..
        })
    ));
}

/// The breaker is checked again after each backoff: a series whose breaker opened while it
/// waited makes no further call (`docs/contract.md`, rule 3).
#[tokio::test(start_paused = true)]
async fn a_breaker_that_opens_during_the_backoff_stops_the_series() {
    let b = breaker("mail", 1);
    let calls = Arc::new(AtomicU32::new(0));
    let c = Arc::clone(&calls);
    let mut g = Graph::<()>::builder();
    let slow = g
        .node("slow")
        .breaker(&b)
        .retry(Retry::new(5).backoff(Backoff::constant(ms(100))))
        .task(move |_ctx, ()| {
            c.fetch_add(1, Ordering::SeqCst);
            async { Err::<(), BoxError>("down".into()) }
        });
    // Another node's failure opens the breaker at 50 ms, in the middle of the first backoff.
    let _other = g.node("other").breaker(&b).task(|_ctx, ()| async {
        sleep(ms(50)).await;
        Err::<(), BoxError>("down".into())
    });
    let report = g.build().unwrap().run(()).await.unwrap();
    let node = report.node(slow).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(node.end(), ms(100));
    assert!(matches!(
        node.error(),
        Some(NodeError::GaveUp {
            reason: StopReason::BreakerOpened,
            attempts: 1,
            ..
        })
    ));
}
