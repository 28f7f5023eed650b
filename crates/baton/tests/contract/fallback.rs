//! Fallback: only after the inner layers failed, with the error they ended with; the node
//! ends `Recovered` and the report keeps the error (`docs/contract.md`, rule 9).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use baton_graph::{Backoff, BoxError, Fallback, Graph, NodeError, Outcome, Retry};
use tokio::time::sleep;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

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
