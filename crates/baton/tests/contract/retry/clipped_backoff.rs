//! A backoff the deadline clipped is followed by exactly one more attempt: it runs with
//! whatever time is left, on a real clock as on the paused one, and no attempt follows it.
//! So is a backoff whose timer fired late, leaving less than the minimum attempt time.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use baton_graph::{
    Backoff, BoxError, Graph, Node, NodeError, Outcome, Report, Retry, RunOptions,
    retry::StopReason,
};

use crate::ms;

/// One node whose first `failures` attempts fail at once and whose next ones succeed, with
/// `retry` and a minimum attempt time of `min_attempt`.
fn graph(failures: u32, retry: Retry, min_attempt: Duration) -> (Graph<()>, Node<u32>) {
    let mut g = Graph::<()>::builder();
    let node = g
        .node("stock")
        .retry(retry)
        .min_attempt_time(min_attempt)
        .task(failing_first(failures));
    (g.build().expect("a valid graph"), node)
}

/// A task whose first `failures` calls fail at once and whose next ones succeed with the
/// call's number.
fn failing_first(
    failures: u32,
) -> impl Fn(baton_graph::Ctx<()>, ()) -> std::future::Ready<Result<u32, BoxError>> + Send + Sync {
    let calls = Arc::new(AtomicU32::new(0));
    move |_ctx, ()| {
        let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
        std::future::ready(if n <= failures {
            Err("503".into())
        } else {
            Ok(n)
        })
    }
}

/// Runs the graph of [`graph`] (one failure, then success) twice on a two-worker runtime
/// with a real clock, under a run timeout of `timeout`: each run succeeds at its second
/// attempt. Outcomes are asserted, not times.
fn succeeds_on_a_real_clock(retry: &Retry, min_attempt: Duration, timeout: Duration) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    for _ in 0..2 {
        let (graph, node) = graph(1, retry.clone(), min_attempt);
        let report = rt.block_on(run(&graph, timeout));
        let n = report.node(node).expect("the node");
        assert_eq!(
            (n.outcome(), n.attempts()),
            (Outcome::Succeeded, 2),
            "{:?}",
            n.message()
        );
    }
}

async fn run(graph: &Graph<()>, timeout: Duration) -> Report {
    graph
        .run_with((), RunOptions::new().timeout(timeout))
        .await
        .expect("preserve-partial")
}

/// A 1 s backoff under a 300 ms run timeout is clipped to 290 ms (the minimum attempt time,
/// 10 ms, is left for the last attempt), which then succeeds.
#[tokio::test(start_paused = true)]
async fn the_attempt_a_clipped_backoff_made_room_for_runs() {
    let (graph, node) = graph(
        1,
        Retry::new(2).backoff(Backoff::constant(ms(1_000))),
        ms(10),
    );
    let report = run(&graph, ms(300)).await;
    let n = report.node(node).expect("the node");
    assert_eq!(n.outcome(), Outcome::Succeeded);
    assert_eq!(report.get(node), Some(&2));
    assert_eq!(n.attempts(), 2);
    assert_eq!(n.attempt_log()[1].start, ms(290));
    assert_eq!(n.attempt_log()[1].delay_before, ms(290));
}

/// On a real clock the clipped wait ends a little late, with less than the minimum
/// attempt time left: the attempt still runs. (Two runs of 1 s on a multi-thread runtime,
/// with a minimum attempt time of 400 ms, so that a loaded machine that fires the timer up
/// to 400 ms late still leaves the last attempt some time; the outcome and the
/// attempt count are asserted, not the time. Requiring the whole minimum after the wait,
/// as before, fails every run: any lateness at all leaves less.)
#[test]
fn on_a_real_clock_the_attempt_after_a_clipped_backoff_still_runs() {
    let retry = Retry::new(2).backoff(Backoff::constant(ms(2_000)));
    succeeds_on_a_real_clock(&retry, ms(400), ms(1_000));
}

/// With exactly the minimum attempt time left the backoff is clipped to zero: one attempt
/// follows it, not a zero-delay loop until the attempts run out.
#[tokio::test(start_paused = true)]
async fn a_budget_never_becomes_a_zero_delay_loop() {
    let (graph, node) = graph(
        u32::MAX,
        Retry::new(1_000).backoff(Backoff::constant(ms(500))),
        ms(10),
    );
    let report = run(&graph, ms(1_010)).await;
    let n = report.node(node).expect("the node");
    assert_eq!(n.outcome(), Outcome::Failed);
    // At 0, 500 and 1 000 ms (backoffs of 500 and 500), then at 1 000 ms after a backoff
    // clipped to zero: the last.
    assert_eq!(n.attempts(), 4);
    let delays: Vec<Duration> = n.attempt_log().iter().map(|a| a.delay_before).collect();
    assert_eq!(delays, [ms(0), ms(500), ms(500), ms(0)]);
    match n.error() {
        Some(NodeError::GaveUp {
            attempts, reason, ..
        }) => assert_eq!((*attempts, reason), (4, &StopReason::DeadlineExceeded)),
        other => panic!("expected GaveUp, got {other:?}"),
    }
}

/// A graph of `stock` (whose first `failures` attempts fail at once, retried with a
/// constant 89 ms backoff under a 100 ms budget: 90 ms of room, so not clipped) and
/// `clock`, which at 85 ms moves the paused clock 12 ms at once, as a late timer would:
/// the backoff's timer fires at 97 ms, with 3 ms left, under the 10 ms minimum.
fn late_timer_graph(failures: u32) -> (Graph<()>, Node<u32>) {
    let mut g = Graph::<()>::builder();
    let stock = g
        .node("stock")
        .budget(ms(100))
        .retry(Retry::new(5).backoff(Backoff::constant(ms(89))))
        .task(failing_first(failures));
    let _clock = g.node("clock").task(|_ctx, ()| async {
        tokio::time::sleep(ms(85)).await;
        tokio::time::advance(ms(12)).await;
        Ok::<_, BoxError>(())
    });
    (g.build().expect("a valid graph"), stock)
}

/// A backoff the deadline did not clip leaves the next attempt the minimum attempt time;
/// when its timer fires late and leaves less, the attempt still runs.
#[tokio::test(start_paused = true)]
async fn the_attempt_after_a_late_backoff_timer_still_runs() {
    let (graph, stock) = late_timer_graph(1);
    let report = graph.run(()).await.expect("preserve-partial");
    let n = report.node(stock).expect("the node");
    assert_eq!((n.outcome(), n.attempts()), (Outcome::Succeeded, 2));
    assert_eq!(n.attempt_log()[1].start, ms(97));
}

/// That attempt, started with less than the minimum left, is the series' last.
#[tokio::test(start_paused = true)]
async fn the_attempt_after_a_late_backoff_timer_is_the_last() {
    let (graph, stock) = late_timer_graph(u32::MAX);
    let report = graph.run(()).await.expect("preserve-partial");
    let n = report.node(stock).expect("the node");
    assert_eq!(n.outcome(), Outcome::Failed);
    match n.error() {
        Some(NodeError::GaveUp {
            attempts, reason, ..
        }) => assert_eq!((*attempts, reason), (2, &StopReason::DeadlineExceeded)),
        other => panic!("expected GaveUp, got {other:?}"),
    }
}

/// On a real clock a backoff that fills its room exactly (199 ms of 200: a 300 ms budget
/// less a 100 ms minimum attempt time) ends a little late, with a little less than the
/// minimum left: the attempt after it still runs. (Two runs on a multi-thread runtime; the
/// outcome is asserted, not the time.)
#[test]
fn on_a_real_clock_the_attempt_after_a_backoff_that_fills_its_room_runs() {
    let retry = Retry::new(2).backoff(Backoff::constant(ms(199)));
    succeeds_on_a_real_clock(&retry, ms(100), ms(300));
}
