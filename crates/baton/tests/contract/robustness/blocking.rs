//! Blocking (synchronous) tasks: run on tokio's blocking pool; on timeout the node moves on,
//! the attempt's cancellation token fires, and the report counts the attempt as abandoned.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use baton_graph::{BoxError, Bulkhead, Graph, NodeError, Outcome};

use crate::ms;

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
    let started = Arc::new(AtomicBool::new(false));
    let on = Arc::clone(&started);
    let bulkhead = Bulkhead::new("cpu", 1, Duration::ZERO);
    let mut g = Graph::<()>::builder();
    let n = g
        .node("crunch")
        .timeout(ms(100))
        .bulkhead(&bulkhead)
        .blocking_task(move |ctx, ()| {
            on.store(true, Ordering::SeqCst);
            let token = ctx.cancellation_token();
            while !token.is_cancelled() {
                std::thread::sleep(Duration::from_millis(1));
            }
            saw.store(true, Ordering::SeqCst);
            Err::<(), BoxError>("stopped".into())
        });
    let graph = g.build().unwrap();
    let run = tokio::spawn(graph.run(()));
    // Blocking tasks keep tokio's paused clock from auto-advancing: move it by hand, once
    // the closure is running on its thread.
    for _ in 0..10_000 {
        if started.load(Ordering::SeqCst) {
            break;
        }
        tokio::task::yield_now().await;
        std::thread::sleep(Duration::from_micros(100));
    }
    assert!(started.load(Ordering::SeqCst));
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

/// tokio's paused clock does not auto-advance while a blocking closure runs: the closure
/// sleeps 50 ms of real time, more than its 10 ms timeout, yet the clock stands still, so
/// the timeout never fires and the attempt takes no time in the report. A sibling's timer
/// waits for the closure to return.
#[tokio::test(start_paused = true)]
async fn on_the_paused_clock_a_blocking_closure_takes_no_time() {
    let mut g = Graph::<()>::builder();
    let crunch = g.node("crunch").timeout(ms(10)).blocking_task(|_ctx, ()| {
        std::thread::sleep(ms(50));
        Ok::<_, BoxError>(())
    });
    let wait = g.node("wait").task(|_ctx, ()| async {
        tokio::time::sleep(ms(5)).await;
        Ok::<_, BoxError>(())
    });
    let start = tokio::time::Instant::now();
    let report = g.build().unwrap().run(()).await.unwrap();
    let node = report.node(crunch).unwrap();
    assert_eq!(node.outcome(), Outcome::Succeeded);
    assert_eq!((node.start(), node.end()), (Some(ms(0)), ms(0)));
    assert_eq!(report.node(wait).unwrap().end(), ms(5));
    assert_eq!(start.elapsed(), ms(5));
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
        Some(NodeError::Panicked { message, .. }) if message == "blocking bug"
    ));
}

/// A blocking attempt abandoned while it still waited for a thread of the blocking pool
/// never runs: a retry (or the report) has moved on without it.
#[test]
fn an_attempt_abandoned_in_the_queue_never_runs() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .max_blocking_threads(1)
        .build()
        .unwrap();
    let ran = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let release = Arc::new(AtomicBool::new(false));
    rt.block_on(async {
        // Occupy the only blocking thread until told to stop.
        let hold = Arc::clone(&release);
        let busy = tokio::task::spawn_blocking(move || {
            while !hold.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        let r = Arc::clone(&ran);
        let mut g = Graph::<()>::builder();
        let n = g
            .node("charge")
            .timeout(ms(50))
            .blocking_task(move |_ctx, ()| {
                r.fetch_add(1, Ordering::SeqCst);
                Ok::<_, BoxError>(())
            });
        let run = tokio::spawn(g.build().unwrap().run(()));
        tokio::task::yield_now().await;
        tokio::time::advance(ms(50)).await;
        let report = run.await.unwrap().unwrap();
        assert!(matches!(
            report.node(n).unwrap().error(),
            Some(NodeError::Timeout { .. })
        ));
        release.store(true, Ordering::SeqCst);
        busy.await.unwrap();
        // Give the pool the queued closure, if it were to run.
        for _ in 0..100 {
            tokio::task::yield_now().await;
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}
