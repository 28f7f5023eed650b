//! Bad inputs and odd moments: user code that panics outside the task, durations too large
//! for an instant, cancels racing a run's first poll, fallbacks running past the deadline,
//! misdefined routers, retry series that never wait. Each must end in a clear outcome or a
//! typed error — never a panic out of the run, a hang, or a leaked count.

mod blocking;
mod concurrency;
mod limits;
mod panic;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use baton_graph::{
    Backoff, BoxError, BuildError, Bulkhead, Fallback, Graph, NodeError, Orchestrator, Outcome,
    Retry, RunOptions, observe::Event,
};
use tokio::time::sleep;

use crate::ms;

/// A panicking retry predicate (or breaker filter, or backoff iterator) fails its node like
/// a panicking task, on the first root and in a spawned driver alike; downstreams skip.
#[tokio::test(start_paused = true)]
async fn panics_in_policy_callbacks_fail_the_node_and_the_run_goes_on() {
    let mut g = Graph::<()>::builder();
    let first = g
        .node("first")
        .retry(Retry::new(3).retry_if(|_| panic!("predicate bug")))
        .task(|_ctx, ()| async { Err::<u32, BoxError>("x".into()) });
    let b = g
        .node("b")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(1u32) });
    let t = g
        .node("t")
        .after(b)
        .retry(Retry::new(3).backoff(Backoff::custom(std::iter::from_fn(
            || -> Option<Duration> { panic!("iterator bug") },
        ))))
        .task(|_ctx, _| async { Err::<u32, BoxError>("y".into()) });
    let u = g
        .node("u")
        .after(t)
        .task(|_ctx, v| async move { Ok::<_, BoxError>(*v) });
    let report = tokio::time::timeout(Duration::from_secs(5), g.build().unwrap().run(()))
        .await
        .expect("the run resolves")
        .unwrap();
    for (node, message) in [(first, "predicate bug"), (t, "iterator bug")] {
        let n = report.node(node).unwrap();
        assert_eq!(n.outcome(), Outcome::Failed);
        assert!(
            matches!(n.error(), Some(NodeError::Panicked { message: m, .. }) if m == message),
            "{:?}",
            n.error()
        );
    }
    assert_eq!(report.node(u).unwrap().outcome(), Outcome::Skipped);
}

/// `Duration::MAX` means "no limit", wherever a duration bounds time.
#[tokio::test(start_paused = true)]
async fn duration_max_is_no_limit_not_a_panic() {
    let bulkhead = Bulkhead::new("b", 1, Duration::MAX);
    let mut g = Graph::<()>::builder();
    for i in 0..2 {
        let _ = g
            .node(format!("n{i}"))
            .timeout(Duration::MAX)
            .budget(Duration::MAX)
            .bulkhead(&bulkhead)
            .task(|_ctx, ()| async {
                sleep(ms(10)).await;
                Ok::<_, BoxError>(())
            });
    }
    let report = g
        .build()
        .unwrap()
        .run_with((), RunOptions::new().timeout(Duration::MAX))
        .await
        .unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.makespan(), ms(20));
}

/// A cancel landing while the run is being admitted still tells the orchestrator the run
/// ended: nothing stays "in flight", and shutdown returns.
#[test]
fn a_cancel_racing_the_first_poll_leaks_no_run() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let orch = Orchestrator::new();
        let mut g = orch.graph::<()>();
        for i in 0..4 {
            let _ = g
                .node(format!("n{i}"))
                .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
        }
        let graph = g.build().unwrap();
        for _ in 0..3_000 {
            let run = graph.run(());
            let c = run.canceller();
            let t = std::thread::spawn(move || c.cancel());
            let _ = run.await;
            t.join().unwrap();
        }
        for _ in 0..100 {
            if orch.runs_in_flight() == 0 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(orch.runs_in_flight(), 0);
        let s = orch.stats();
        assert_eq!(s.runs_started, s.runs_finished, "{s}");
        let report = tokio::time::timeout(Duration::from_secs(10), orch.shutdown(ms(10)))
            .await
            .expect("shutdown returns");
        assert_eq!(report.cancelled, 0);
    });
}

/// An async fallback is bound by the node's deadline like everything else.
#[tokio::test(start_paused = true)]
async fn an_async_fallback_is_cut_at_the_deadline() {
    let mut g = Graph::<()>::builder();
    let n = g
        .node("n")
        .fallback(Fallback::from_async(|_e| async {
            sleep(Duration::from_secs(3600)).await;
            Ok::<u32, BoxError>(0)
        }))
        .task(|_ctx, ()| async { Err::<u32, BoxError>("down".into()) });
    let report = g
        .build()
        .unwrap()
        .run_with((), RunOptions::new().timeout(ms(200)))
        .await
        .unwrap();
    let node = report.node(n).unwrap();
    assert_eq!(node.outcome(), Outcome::Failed);
    assert_eq!(node.end(), ms(200));
    assert!(matches!(
        node.error(),
        Some(NodeError::FallbackFailed { error, .. }) if matches!(**error, NodeError::DeadlineExceeded { .. })
    ));
}

#[test]
fn misdefined_routers_are_build_errors() {
    let mut g = Graph::<()>::builder();
    let s = g
        .node("s")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(1u8) });
    let _: baton_graph::Node<u8> = g.router("r").after(s).select(|_i, _v| "x").finish();
    assert_eq!(
        g.build().unwrap_err(),
        BuildError::InvalidRouter {
            router: "r".into(),
            reason: "it has no branch".into()
        }
    );

    let mut g = Graph::<()>::builder();
    let other = g
        .node("other")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(1u8) });
    let _ = g
        .router("r")
        .select(|_i, ()| "x")
        .branch("x", |_b| other)
        .finish();
    assert!(matches!(
        g.build().unwrap_err(),
        BuildError::InvalidRouter { router, reason } if router == "r" && reason.contains("branch `x` must be defined by the builder")
    ));

    let mut g = Graph::<()>::builder();
    let slow = g
        .node("slow")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(1u8) });
    let _ = g
        .router("r")
        .select(|_i, ()| "x")
        .branch("x", |b| {
            b.after(slow)
                .task(|_ctx, v| async move { Ok::<_, BoxError>(*v) })
        })
        .finish();
    assert!(matches!(
        g.build().unwrap_err(),
        BuildError::InvalidRouter { reason, .. } if reason.contains("declares upstreams of its own")
    ));
}

/// Whatever depends directly on a branch that was not taken is not taken either (not
/// skipped, and not a failure under fail-all).
#[tokio::test(start_paused = true)]
async fn what_depends_on_a_branch_not_taken_is_not_taken() {
    let mut g = Graph::<()>::builder();
    g.failure_mode(baton_graph::FailureMode::FailAll);
    let mut ship = None;
    let _ = g
        .router("dispatch")
        .select(|_i, ()| "shortage")
        .branch("ship", |b| {
            let n = b.task(|_ctx, ()| async { Ok::<_, BoxError>(1u8) });
            ship = Some(n);
            n
        })
        .branch("shortage", |b| {
            b.task(|_ctx, ()| async { Ok::<_, BoxError>(0u8) })
        })
        .finish();
    let track = g
        .node("track")
        .after(ship.unwrap())
        .task(|_ctx, v| async move { Ok::<_, BoxError>(*v) });
    let report = g.build().unwrap().run(()).await.unwrap();
    assert_eq!(report.node(track).unwrap().outcome(), Outcome::NotTaken);
}

/// A series without backoff still yields (and notices its run was cancelled), and the
/// attempt log is bounded.
#[tokio::test(flavor = "current_thread")]
async fn a_retry_series_without_backoff_yields_and_its_log_is_bounded() {
    let calls = Arc::new(AtomicU32::new(0));
    let c = Arc::clone(&calls);
    let mut g = Graph::<()>::builder();
    let _ = g
        .node("spin")
        .retry(Retry::new(2_000_000).backoff(Backoff::constant(Duration::ZERO)))
        .task(move |_ctx, ()| {
            c.fetch_add(1, Ordering::Relaxed);
            async { Err::<(), BoxError>("no".into()) }
        });
    let graph = g.build().unwrap();
    let run = graph.run(());
    let canceller = run.canceller();
    let handle = tokio::spawn(run);
    // Let the series run a little, then cancel: the cancel must land before 2 M attempts.
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
    canceller.cancel();
    let out = handle.await.unwrap();
    assert!(
        matches!(out, Err(baton_graph::RunError::Cancelled { .. })),
        "{out:?}"
    );
    assert!(calls.load(Ordering::Relaxed) < 2_000_000);

    let mut g = Graph::<()>::builder();
    let n = g
        .node("spin")
        .retry(Retry::new(5_000).backoff(Backoff::constant(Duration::ZERO)))
        .task(|_ctx, ()| async { Err::<(), BoxError>("no".into()) });
    let report = g.build().unwrap().run(()).await.unwrap();
    let node = report.node(n).unwrap();
    assert_eq!(node.attempts(), 5_000);
    assert_eq!(node.attempt_log().len(), 1_000);
}

#[test]
fn a_budget_below_the_minimum_attempt_time_is_a_build_error() {
    let mut g = Graph::<()>::builder();
    let _ = g
        .node("z")
        .budget(ms(5))
        .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    assert_eq!(
        g.build().unwrap_err().to_string(),
        "node `z`: invalid budget policy: a budget of 5 ms is below the minimum attempt time of 10 ms: no attempt could ever start"
    );
}

/// An empty graph's run is a run like any other: admitted, observed, counted.
#[tokio::test(start_paused = true)]
async fn an_empty_graphs_run_is_admitted_and_observed() {
    let seen = Arc::new(AtomicU32::new(0));
    let s = Arc::clone(&seen);
    let orch = Orchestrator::builder()
        .observer(move |e: &Event<'_>| {
            if matches!(e, Event::RunStarted { .. } | Event::RunFinished { .. }) {
                s.fetch_add(1, Ordering::SeqCst);
            }
        })
        .build();
    let graph = orch.graph::<()>().build().unwrap();
    let report = graph.run(()).await.unwrap();
    assert!(report.is_empty());
    assert_eq!(seen.load(Ordering::SeqCst), 2);
    let stats = orch.stats();
    assert_eq!((stats.runs_started, stats.runs_finished), (1, 1));
}

/// A branch served by its fallback makes its router `Recovered`, with the branch's error.
#[tokio::test(start_paused = true)]
async fn a_router_whose_branch_recovered_is_recovered() {
    let mut g = Graph::<()>::builder();
    let r = g
        .router("r")
        .select(|_i, ()| "x")
        .branch("x", |b| {
            b.fallback(Fallback::value(7u8))
                .task(|_ctx, ()| async { Err::<u8, BoxError>("down".into()) })
        })
        .finish();
    let report = g.build().unwrap().run(()).await.unwrap();
    let router = report.node(r).unwrap();
    assert_eq!(router.outcome(), Outcome::Recovered);
    assert_eq!(report.get(r), Some(&7));
    assert_eq!(router.error().unwrap().to_string(), "down");
}

/// On a runtime built without timers, a run whose policies or options need them is refused
/// with a typed error before any task runs; a run that needs none runs as usual.
#[test]
fn a_runtime_without_timers_refuses_runs_that_need_them() {
    use baton_graph::RunError;
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let mut g = Graph::<()>::builder();
    let _ = g.node("stock").timeout(ms(300)).task(move |_ctx, ()| {
        counted.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, BoxError>(1u32) }
    });
    let timed = g.build().unwrap();
    let error = rt.block_on(timed.run(())).unwrap_err();
    assert!(matches!(error, RunError::NoTimers), "{error}");
    assert_eq!(calls.load(Ordering::SeqCst), 0, "no task ran");

    let mut g = Graph::<()>::builder();
    let plain = g
        .node("plain")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(2u32) });
    let untimed = g.build().unwrap();
    let report = rt.block_on(untimed.run(())).unwrap();
    assert_eq!(report.get(plain), Some(&2));
    let with_timeout = untimed.run_with((), RunOptions::new().timeout(ms(10)));
    assert!(matches!(rt.block_on(with_timeout), Err(RunError::NoTimers)));
}
