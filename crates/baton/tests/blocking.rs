//! Blocking (synchronous) tasks: run on tokio's blocking pool; on timeout the node moves on,
//! the attempt's cancellation token fires, and the report counts the attempt as abandoned.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use baton::{BoxError, Bulkhead, Graph, NodeError, Outcome};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(start_paused = true)]
async fn blocking_task_returns_its_value() {
    let mut g = Graph::<u64>::builder();
    let n = g
        .node("hash")
        .blocking_task(|ctx, ()| Ok::<_, BoxError>(ctx.input() * 2));
    let report = g.build().unwrap().run(21).await.unwrap();
    assert_eq!(report.get(n), Some(&42));
}

/// The task never yields (it is a blocking loop), yet the timeout fires on time: the node
/// moves on at the limit and the attempt is counted as abandoned while it still runs.
#[tokio::test(start_paused = true)]
async fn timed_out_blocking_attempt_is_abandoned_and_told_to_stop() {
    let saw_cancel = Arc::new(AtomicBool::new(false));
    let saw = Arc::clone(&saw_cancel);
    let bulkhead = Bulkhead::new("cpu", 1, Duration::ZERO);
    let mut g = Graph::<()>::builder();
    let n = g
        .node("crunch")
        .timeout(ms(100))
        .bulkhead(&bulkhead)
        .blocking_task(move |ctx, ()| {
            let token = ctx.cancellation_token();
            while !token.is_cancelled() {
                std::thread::sleep(Duration::from_millis(1));
            }
            saw.store(true, Ordering::SeqCst);
            Err::<(), BoxError>("stopped".into())
        });
    let graph = g.build().unwrap();
    let run = tokio::spawn(graph.run(()));
    // Blocking tasks keep tokio's paused clock from auto-advancing: move it by hand.
    tokio::task::yield_now().await;
    tokio::time::advance(ms(100)).await;
    let report = run.await.unwrap().unwrap();
    let node = report.node(n).unwrap();
    assert_eq!(node.outcome(), Outcome::Failed);
    assert!(matches!(node.error(), Some(NodeError::Timeout { limit, .. }) if *limit == ms(100)));
    assert_eq!(node.end(), ms(100));
    assert_eq!(node.abandoned(), 1);
    // The closure was told to stop, and its bulkhead permit comes back only once it did.
    for _ in 0..2000 {
        if saw_cancel.load(Ordering::SeqCst) && bulkhead.available() == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(saw_cancel.load(Ordering::SeqCst));
    assert_eq!(bulkhead.available(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_blocking_task_fails_the_node() {
    let mut g = Graph::<()>::builder();
    let n = g
        .node("p")
        .blocking_task(|_ctx, ()| -> Result<(), BoxError> { panic!("blocking bug") });
    let report = g.build().unwrap().run(()).await.unwrap();
    assert!(matches!(
        report.node(n).unwrap().error(),
        Some(NodeError::Panicked { message }) if message == "blocking bug"
    ));
}
