//! Fallback: only after the inner layers failed, with the error they ended with; the node
//! ends `Recovered` and the report keeps the error (`docs/contract.md`, rule 9).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use baton_graph::{Backoff, BoxError, Fallback, Graph, NodeError, Outcome, Retry};
use tokio::time::sleep;

use crate::ms;

#[tokio::test(start_paused = true)]
async fn fallback_value_recovers_and_keeps_the_error() {
    let mut g = Graph::<()>::builder();
    let stock = g
        .node("stock")
        .retry(Retry::new(2).backoff(Backoff::constant(ms(10))))
        .fallback(Fallback::value(0u32))
        .task(|_ctx, ()| async { Err::<u32, BoxError>("inventory answered 503".into()) });
    let ship = g
        .node("ship")
        .after(stock)
        .task(|_ctx, s| async move { Ok::<_, BoxError>(*s + 1) });
    let report = g.build().unwrap().run(()).await.unwrap();
    let node = report.node(stock).unwrap();
    assert_eq!(node.outcome(), Outcome::Recovered);
    assert_eq!(report.get(stock), Some(&0));
    assert_eq!(
        report.get(ship),
        Some(&1),
        "downstreams run on the fallback value"
    );
    assert_eq!(node.attempts(), 2);
    let err = node.error().unwrap();
    assert_eq!(
        err.task_error().unwrap().to_string(),
        "inventory answered 503"
    );
    assert!(report.is_clean());
}

/// `.fallback(v)` with the value itself is `Fallback::value(v)`; the task's type sets the
/// node's, so the fallback's `Default::default()` is a `u32` here.
#[tokio::test(start_paused = true)]
async fn a_plain_value_is_a_fallback_value() {
    let mut g = Graph::<()>::builder();
    let plain = g
        .node("plain")
        .fallback(7_u32)
        .task(|_ctx, ()| async { Err::<u32, _>("down") });
    let inferred = g
        .node("inferred")
        .fallback(Fallback::value(Default::default()))
        .task(|_ctx, ()| async { Err::<u32, _>("down") });
    let report = g.build().unwrap().run(()).await.unwrap();
    assert_eq!(report.get(plain), Some(&7));
    assert_eq!(report.get(inferred), Some(&0));
    assert_eq!(report.node(plain).unwrap().outcome(), Outcome::Recovered);
    let error = report.node(plain).unwrap().error().unwrap();
    assert_eq!(error.task_error().unwrap().to_string(), "down");
}

#[tokio::test(start_paused = true)]
async fn fallback_never_runs_on_success() {
    let calls = Arc::new(AtomicU32::new(0));
    let c = Arc::clone(&calls);
    let mut g = Graph::<()>::builder();
    let n = g
        .node("n")
        .fallback(Fallback::from_fn(move |_e| {
            c.fetch_add(1, Ordering::SeqCst);
            0u32
        }))
        .task(|_ctx, ()| async { Ok::<_, BoxError>(5u32) });
    let graph = g.build().unwrap();
    for _ in 0..10 {
        let report = graph.run(()).await.unwrap();
        assert_eq!(report.get(n), Some(&5));
        assert_eq!(report.node(n).unwrap().outcome(), Outcome::Succeeded);
        assert!(report.node(n).unwrap().error().is_none());
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn fallback_fn_receives_the_unwrapped_error_once_per_failure() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    let mut g = Graph::<()>::builder();
    let n = g
        .node("n")
        .timeout(ms(50))
        .fallback(Fallback::from_fn(move |e: &NodeError| {
            s.lock().unwrap().push(e.to_string());
            "cached".to_owned()
        }))
        .task(|_ctx, ()| async {
            sleep(ms(100)).await;
            Ok::<_, BoxError>("fresh".to_owned())
        });
    let report = g.build().unwrap().run(()).await.unwrap();
    assert_eq!(report.get(n).map(String::as_str), Some("cached"));
    assert_eq!(
        *seen.lock().unwrap(),
        ["node `n` attempt 1 timed out after 50 ms"]
    );
    assert!(report.node(n).unwrap().error().unwrap().is_timeout());
}

#[tokio::test(start_paused = true)]
async fn async_fallback_that_fails_leaves_the_node_failed_with_both_errors() {
    let mut g = Graph::<()>::builder();
    let n = g
        .node("notify")
        .fallback(Fallback::from_async(|_e| async {
            sleep(ms(5)).await;
            Err::<String, BoxError>("in-app queue full".into())
        }))
        .task(|_ctx, ()| async { Err::<String, BoxError>("sms gateway down".into()) });
    let report = g.build().unwrap().run(()).await.unwrap();
    let node = report.node(n).unwrap();
    assert_eq!(node.outcome(), Outcome::Failed);
    assert_eq!(
        node.message().unwrap(),
        "node `notify` fallback failed: in-app queue full; it was recovering from: sms gateway down"
    );
    assert_eq!(node.end(), ms(5));
}

#[tokio::test(start_paused = true)]
async fn a_panicking_fallback_is_caught() {
    let mut g = Graph::<()>::builder();
    let n = g
        .node("n")
        .fallback(Fallback::from_fn(|_e| -> u8 { panic!("fallback bug") }))
        .task(|_ctx, ()| async { Err::<u8, BoxError>("down".into()) });
    let report = g.build().unwrap().run(()).await.unwrap();
    assert!(matches!(
        report.node(n).unwrap().error(),
        Some(NodeError::FallbackFailed { error, .. }) if matches!(**error, NodeError::Panicked { .. })
    ));
}

/// `fallback_with` is given the run input, the upstream values, the number of attempts that
/// ran and the error; the node ends `Recovered` with its value.
#[tokio::test(start_paused = true)]
async fn fallback_with_sees_the_input_the_upstreams_and_the_attempts() {
    let mut g = Graph::<String>::builder();
    let user = g
        .node("user")
        .task(|ctx, ()| async move { Ok::<_, BoxError>(format!("user-{}", ctx.input())) });
    let region = g
        .node("region")
        .task(|_ctx, ()| async { Ok::<_, BoxError>("eu") });
    let offers = g
        .node("offers")
        .after((user, region))
        .retry(Retry::new(3).backoff(Backoff::constant(ms(10))))
        .fallback_with(|ctx, (user, region), error| async move {
            Ok::<_, BoxError>(format!(
                "{} {user} {region} after {} attempts: {}",
                ctx.input(),
                ctx.attempt(),
                error
                    .task_error()
                    .map(ToString::to_string)
                    .unwrap_or_default()
            ))
        })
        .task(|_ctx, _| async { Err::<String, BoxError>("offers answered 503".into()) });
    let report = g.build().unwrap().run("42".to_owned()).await.unwrap();
    let node = report.node(offers).unwrap();
    assert_eq!(node.outcome(), Outcome::Recovered);
    assert_eq!(node.attempts(), 3);
    assert_eq!(
        report.get(offers).map(String::as_str),
        Some("42 user-42 eu after 3 attempts: offers answered 503")
    );
}

/// A node the circuit breaker rejects runs no attempt: its fallback sees 0 attempts and
/// the breaker's error.
#[tokio::test(start_paused = true)]
async fn fallback_with_after_a_rejection_sees_no_attempt() {
    let breaker = baton_graph::CircuitBreaker::builder("offers")
        .consecutive_failures(1)
        .open_duration(Duration::from_secs(60))
        .build()
        .unwrap();
    breaker.try_acquire().unwrap().failure(ms(1));
    let mut g = Graph::<()>::builder();
    let offers = g
        .node("offers")
        .breaker(breaker)
        .fallback_with(|ctx, (), error| async move {
            let open = matches!(*error, NodeError::BreakerOpen { .. });
            Ok::<_, BoxError>((ctx.attempt(), open))
        })
        .task(|_ctx, ()| async { Ok::<_, BoxError>((99, false)) });
    let report = g.build().unwrap().run(()).await.unwrap();
    assert_eq!(report.get(offers), Some(&(0, true)));
    assert_eq!(report.node(offers).unwrap().attempts(), 0);
}

/// A fallback set before `.after(..)` is kept, and a blocking task's fallback sees the
/// context too.
#[tokio::test(start_paused = true)]
async fn fallback_with_before_after_and_on_a_blocking_task() {
    let mut g = Graph::<u32>::builder();
    let base = g
        .node("base")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(1u32) });
    let early = g
        .node("early")
        .fallback_with(|ctx, (), _error| async move { Ok::<_, BoxError>(*ctx.input() * 10) })
        .after(base)
        .task(|_ctx, _b| async { Err::<u32, BoxError>("down".into()) });
    let blocking = g
        .node("blocking")
        .after(base)
        .fallback_with(
            |ctx, b: Arc<u32>, _error| async move { Ok::<_, BoxError>(*ctx.input() + *b) },
        )
        .blocking_task(|_ctx, _b| Err::<u32, BoxError>("disk full".into()));
    let report = g.build().unwrap().run(7).await.unwrap();
    assert_eq!(report.get(early), Some(&70));
    assert_eq!(report.get(blocking), Some(&8));
}

/// A fallback that panics (before or after its first `.await`) or fails leaves the node
/// `Failed` with `FallbackFailed`, keeping the original error.
#[tokio::test(start_paused = true)]
async fn fallback_with_that_panics_or_fails_leaves_the_node_failed() {
    let mut g = Graph::<()>::builder();
    g.node("early")
        .fallback_with(
            |_ctx, (), _e| -> std::future::Ready<Result<u32, BoxError>> {
                panic!("no cache configured")
            },
        )
        .task(|_ctx, ()| async { Err::<u32, BoxError>("down".into()) });
    g.node("late")
        .fallback_with(|_ctx, (), _e| async {
            sleep(ms(1)).await;
            if true {
                panic!("cache corrupt");
            }
            Ok::<u32, BoxError>(0)
        })
        .task(|_ctx, ()| async { Err::<u32, BoxError>("down".into()) });
    g.node("failing")
        .fallback_with(|_ctx, (), _e| async { Err::<u32, BoxError>("cache miss".into()) })
        .task(|_ctx, ()| async { Err::<u32, BoxError>("down".into()) });
    let report = g.build().unwrap().run(()).await.unwrap();
    for (node, inner) in [
        ("early", "no cache configured"),
        ("late", "cache corrupt"),
        ("failing", "cache miss"),
    ] {
        let entry = report.by_name(node).unwrap();
        assert_eq!(entry.outcome(), Outcome::Failed, "{}", entry.name());
        let Some(NodeError::FallbackFailed {
            error, original, ..
        }) = entry.error()
        else {
            panic!("{}: {:?}", entry.name(), entry.error());
        };
        assert!(
            error.to_string().contains(inner),
            "{}: {error}",
            entry.name()
        );
        assert_eq!(original.task_error().unwrap().to_string(), "down");
    }
}

/// The fallback's cancellation token is live while it runs and cancelled once it ended;
/// the fallback is cut at the node's deadline like any other.
#[tokio::test(start_paused = true)]
async fn fallback_with_has_a_token_and_is_cut_at_the_deadline() {
    let seen = Arc::new(std::sync::Mutex::new(None));
    let s = Arc::clone(&seen);
    let mut g = Graph::<()>::builder();
    let quick = g
        .node("quick")
        .retry(Retry::new(2).backoff(Backoff::constant(ms(1))))
        .fallback_with(move |ctx, (), _e| {
            let s = Arc::clone(&s);
            async move {
                let token = ctx.cancellation_token();
                let live = !token.is_cancelled();
                *s.lock().unwrap() = Some(token);
                Ok::<_, BoxError>(live)
            }
        })
        .task(|_ctx, ()| async { Err::<bool, BoxError>("down".into()) });
    let s = Arc::clone(&seen);
    let after_quick = g.node("after_quick").after(quick).task(move |_ctx, _| {
        let token = s.lock().unwrap().clone();
        async move { Ok::<_, BoxError>(token.is_some_and(|t| t.is_cancelled())) }
    });
    let slow = g
        .node("slow")
        .budget(ms(100))
        .fallback_with(|ctx, (), _e| async move {
            assert!(
                ctx.deadline().is_some(),
                "the fallback sees the node's deadline"
            );
            sleep(ms(500)).await;
            Ok::<_, BoxError>(true)
        })
        .task(|_ctx, ()| async { Err::<bool, BoxError>("down".into()) });
    let report = g.build().unwrap().run(()).await.unwrap();
    assert_eq!(
        report.get(quick),
        Some(&true),
        "live while the fallback runs"
    );
    assert_eq!(
        report.get(after_quick),
        Some(&true),
        "cancelled once the fallback ended, before the run ends"
    );
    let entry = report.node(slow).unwrap();
    let Some(NodeError::FallbackFailed { error, .. }) = entry.error() else {
        panic!("{:?}", entry.error());
    };
    assert!(
        matches!(**error, NodeError::DeadlineExceeded { .. }),
        "{error}"
    );
}
