//! A retry can take its delay from the error (an HTTP 429 or 503 `Retry-After`): the
//! error's delay replaces the backoff's, and the deadline clips it like any backoff.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use baton_graph::{
    Backoff, BoxError, Graph, Node, NodeError, Outcome, Report, Retry, RunOptions,
    retry::StopReason,
};

use crate::ms;

/// A downstream's "try again later", as an HTTP client would return it.
#[derive(Debug)]
struct Unavailable {
    retry_after: Option<Duration>,
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("503 Service Unavailable")
    }
}

impl std::error::Error for Unavailable {}

/// The delay an `Unavailable` error asks for.
fn retry_after(error: &NodeError) -> Option<Duration> {
    error
        .task_error()?
        .downcast_ref::<Unavailable>()?
        .retry_after
}

/// One node whose attempt `k` fails with `answers[k - 1]` (`Some(hint)`: an `Unavailable`
/// with that hint, `None`: a plain error), and succeeds after them.
fn graph(
    answers: Vec<Option<Option<Duration>>>,
    retry: Retry,
    min: Duration,
) -> (Graph<()>, Node<u32>) {
    let calls = Arc::new(AtomicU32::new(0));
    let mut g = Graph::<()>::builder();
    let node = g
        .node("prices")
        .retry(retry.delay_from(retry_after))
        .min_attempt_time(min)
        .task(move |_ctx, ()| {
            let n = calls.fetch_add(1, Ordering::SeqCst) as usize;
            let answer = answers.get(n).copied();
            async move {
                match answer {
                    Some(Some(retry_after)) => {
                        Err::<u32, BoxError>(Box::new(Unavailable { retry_after }))
                    }
                    Some(None) => Err("connection reset".into()),
                    None => Ok(n as u32 + 1),
                }
            }
        });
    (g.build().expect("a valid graph"), node)
}

async fn run(graph: &Graph<()>, timeout: Option<Duration>) -> Report {
    let options = match timeout {
        Some(t) => RunOptions::new().timeout(t),
        None => RunOptions::new(),
    };
    graph.run_with((), options).await.expect("preserve-partial")
}

fn delays(report: &Report, node: Node<u32>) -> Vec<Duration> {
    let n = report.node(node).expect("the node");
    n.attempt_log().iter().map(|a| a.delay_before).collect()
}

/// The error's delay is taken when it has one (2 s, then nothing in a `Retry-After` without
/// a value), and the backoff's otherwise (200 ms before attempt 3 of an exponential backoff
/// from 100 ms: the backoff advances with every retry, hinted or not).
#[tokio::test(start_paused = true)]
async fn a_delay_from_the_error_replaces_the_backoff() {
    let retry = Retry::new(4).backoff(Backoff::exponential(ms(100)));
    let answers = vec![Some(Some(ms(2_000))), Some(None), Some(Some(ms(700)))];
    let (graph, node) = graph(answers, retry, ms(10));
    let report = run(&graph, None).await;
    let n = report.node(node).expect("the node");
    assert_eq!((n.outcome(), n.attempts()), (Outcome::Succeeded, 4));
    assert_eq!(delays(&report, node), [ms(0), ms(2_000), ms(200), ms(700)]);
    assert_eq!(n.end(), ms(2_900));
}

/// Under a 1 s run timeout, a `Retry-After` of 5 s is clipped to 990 ms (the minimum
/// attempt time, 10 ms, is left for the attempt after it), and that attempt is the last:
/// it fails and the series ends with reason `DeadlineExceeded`.
#[tokio::test(start_paused = true)]
async fn a_delay_from_the_error_is_clipped_by_the_deadline() {
    let hint = Some(Some(ms(5_000)));
    let retry = Retry::new(5).backoff(Backoff::constant(ms(1)));
    let (failing, node) = graph(vec![hint, hint, hint], retry, ms(10));
    let report = run(&failing, Some(ms(1_000))).await;
    let n = report.node(node).expect("the node");
    assert_eq!(delays(&report, node), [ms(0), ms(990)]);
    assert_eq!((n.outcome(), n.attempts()), (Outcome::Failed, 2));
    match n.error() {
        Some(NodeError::GaveUp { reason, .. }) => assert_eq!(reason, &StopReason::DeadlineExceeded),
        other => panic!("expected GaveUp, got {other:?}"),
    }
    // The same clipped delay, and the attempt it made room for answers.
    let retry = Retry::new(5).backoff(Backoff::constant(ms(1)));
    let (answers, node) = graph(vec![hint], retry, ms(10));
    let report = run(&answers, Some(ms(1_000))).await;
    assert_eq!(report.get(node), Some(&2));
    assert_eq!(delays(&report, node), [ms(0), ms(990)]);
}

/// On a real clock, a `Retry-After` longer than the run's 600 ms timeout is clipped, and
/// the attempt after the clipped wait still runs and answers, though the timer fired a
/// little late. (Three runs on a multi-thread runtime with a minimum attempt time of
/// 200 ms, so that a loaded machine's late timer still leaves time; the outcome and the
/// attempt count are asserted, not the time.)
#[test]
fn on_a_real_clock_a_clipped_delay_from_the_error_leaves_the_last_attempt() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    for _ in 0..3 {
        let retry = Retry::new(3).backoff(Backoff::constant(ms(1)));
        let (graph, node) = graph(vec![Some(Some(Duration::from_secs(10)))], retry, ms(200));
        let report = rt.block_on(run(&graph, Some(ms(600))));
        let n = report.node(node).expect("the node");
        assert_eq!(
            (n.outcome(), n.attempts()),
            (Outcome::Succeeded, 2),
            "{:?}",
            n.message()
        );
        assert!(delays(&report, node)[1] <= ms(400));
    }
}
