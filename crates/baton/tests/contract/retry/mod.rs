//! Retry, backoff and deadline budget on tokio's paused clock (`docs/contract.md`, rules
//! 5, 6 and 7).

mod clipped_backoff;
mod jitter;
mod retry_after;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use baton_graph::{
    Backoff, BoxError, Graph, NodeError, Outcome, Retry, RunOptions, retry::StopReason,
};
use tokio::time::{Instant, sleep};

use crate::ms;

/// The classic experiment: one worker thread, two nodes that each fail twice with a 1 s
/// backoff. Waiting holds no thread, so both finish at 2 s, not 4 s.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn backoff_holds_no_thread_two_retrying_nodes_finish_in_two_seconds() {
    let mut g = Graph::<()>::builder();
    for name in ["a", "b"] {
        let calls = Arc::new(AtomicU32::new(0));
        let _ = g
            .node(name)
            .retry(Retry::new(3).backoff(Backoff::constant(Duration::from_secs(1))))
            .task(move |_ctx, ()| {
                let calls = Arc::clone(&calls);
                async move {
                    if calls.fetch_add(1, Ordering::SeqCst) < 2 {
                        Err::<u32, BoxError>("payment provider hiccup".into())
                    } else {
                        Ok(7)
                    }
                }
            });
    }
    let graph = g.build().unwrap();
    let started = Instant::now();
    let report = graph.run(()).await.unwrap();
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    assert_eq!(report.makespan(), Duration::from_secs(2));
    for node in report.nodes() {
        assert_eq!(node.outcome(), Outcome::Succeeded);
        assert_eq!(node.attempts(), 3);
        let delays: Vec<_> = node.attempt_log().iter().map(|a| a.delay_before).collect();
        assert_eq!(delays, [ms(0), ms(1000), ms(1000)]);
    }
}

/// A classic run: a 300 ms budget, three attempts of 80, 90 and 120 ms, a 15 ms base
/// backoff. The third attempt gets only what is left and is cut at the deadline: the series
/// ends at 300 ms exactly, not 8 ms after.
#[tokio::test(start_paused = true)]
async fn a_300ms_budget_cuts_the_third_attempt_at_the_deadline() {
    let mut g = Graph::<()>::builder();
    let budgets = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&budgets);
    let notify = g
        .node("notify")
        .budget(ms(300))
        .retry(Retry::new(3).backoff(Backoff::exponential(ms(15))))
        .task(move |ctx, ()| {
            seen.lock().unwrap().push(ctx.remaining().unwrap());
            let took = match ctx.attempt() {
                1 => 80,
                2 => 90,
                _ => 120,
            };
            async move {
                sleep(ms(took)).await;
                Err::<(), BoxError>("downstream 503".into())
            }
        });
    let graph = g.build().unwrap();
    let report = graph.run(()).await.unwrap();
    let node = report.node(notify).unwrap();
    assert_eq!(node.outcome(), Outcome::Failed);
    assert_eq!(node.end(), ms(300));
    assert_eq!(node.attempts(), 3);
    let log: Vec<_> = node
        .attempt_log()
        .iter()
        .map(|a| (a.start, a.end, a.delay_before))
        .collect();
    assert_eq!(
        log,
        [
            (ms(0), ms(80), ms(0)),
            (ms(95), ms(185), ms(15)),
            (ms(215), ms(300), ms(30)),
        ]
    );
    // Each attempt saw the budget that was left when it started.
    assert_eq!(*budgets.lock().unwrap(), [ms(300), ms(205), ms(85)]);
    match node.error().unwrap() {
        NodeError::GaveUp {
            attempts,
            elapsed,
            reason,
            last,
            ..
        } => {
            assert_eq!(*attempts, 3);
            assert_eq!(*elapsed, ms(300));
            assert_eq!(*reason, StopReason::DeadlineExceeded);
            assert!(matches!(
                **last,
                NodeError::DeadlineExceeded { attempts: 3, .. }
            ));
        }
        other => panic!("unexpected error {other:?}"),
    }
    assert!(
        node.message()
            .unwrap()
            .contains("gave up after 3 attempt(s) in 300 ms")
    );
}

/// Backoff is clipped so that the next attempt keeps its minimum attempt time, and no
/// attempt starts with less than that left.
#[tokio::test(start_paused = true)]
async fn backoff_is_clipped_to_the_budget_minus_the_minimum_attempt_time() {
    let mut g = Graph::<()>::builder();
    let n = g
        .node("n")
        .budget(ms(100))
        .min_attempt_time(ms(20))
        .retry(Retry::new(10).backoff(Backoff::constant(ms(500))))
        .task(|_ctx, ()| async {
            sleep(ms(30)).await;
            Err::<(), BoxError>("no".into())
        });
    let report = g.build().unwrap().run(()).await.unwrap();
    let node = report.node(n).unwrap();
    let log: Vec<_> = node
        .attempt_log()
        .iter()
        .map(|a| (a.start, a.end, a.delay_before))
        .collect();
    // 0-30 fails; 70 ms left: backoff min(500, 70-20) = 50; 80-100 is cut at the deadline.
    assert_eq!(log, [(ms(0), ms(30), ms(0)), (ms(80), ms(100), ms(50))]);
    assert_eq!(node.end(), ms(100));
}

/// A node that cannot start an attempt before its deadline fails at once, with zero
/// attempts, and says so.
#[tokio::test(start_paused = true)]
async fn run_deadline_fails_nodes_that_cannot_start_and_cuts_running_ones() {
    let mut g = Graph::<()>::builder();
    let slow = g.node("slow").task(|_ctx, ()| async {
        sleep(ms(500)).await;
        Ok::<_, BoxError>(1)
    });
    let after = g
        .node("after")
        .after(slow)
        .task(|_ctx, v| async move { Ok::<_, BoxError>(*v) });
    let late = g.node("late").task(|_ctx, ()| async {
        sleep(ms(50)).await;
        Ok::<_, BoxError>(2)
    });
    let graph = g.build().unwrap();
    let report = graph
        .run_with((), RunOptions::new().timeout(ms(200)))
        .await
        .unwrap();
    let slow_r = report.node(slow).unwrap();
    assert_eq!(slow_r.outcome(), Outcome::Failed);
    assert_eq!(slow_r.end(), ms(200));
    assert!(matches!(
        slow_r.error(),
        Some(NodeError::DeadlineExceeded { attempts: 1, .. })
    ));
    assert_eq!(report.node(after).unwrap().outcome(), Outcome::Skipped);
    assert_eq!(report.get(late), Some(&2));
}

/// Timeouts sit inside the retry: each attempt gets a full timeout, and the series goes on
/// (a timeout outside the retry would kill the series).
#[tokio::test(start_paused = true)]
async fn each_attempt_gets_its_own_timeout_inside_the_retry() {
    let mut g = Graph::<()>::builder();
    let n = g
        .node("stock")
        .timeout(ms(100))
        .retry(Retry::new(3).backoff(Backoff::constant(ms(200))))
        .task(|ctx, ()| async move {
            let took = if ctx.attempt() < 3 { 150 } else { 50 };
            sleep(ms(took)).await;
            Ok::<_, BoxError>(ctx.attempt())
        });
    let report = g.build().unwrap().run(()).await.unwrap();
    let node = report.node(n).unwrap();
    assert_eq!(report.get(n), Some(&3));
    assert_eq!(node.end(), ms(100 + 200 + 100 + 200 + 50));
    let errors: Vec<_> = node.attempt_log().iter().map(|a| a.error.clone()).collect();
    assert_eq!(
        errors,
        [
            Some("node `stock` attempt 1 timed out after 100 ms".to_owned()),
            Some("node `stock` attempt 2 timed out after 100 ms".to_owned()),
            None
        ]
    );
}

/// A per-attempt timeout drops the attempt: its future stops at the next `.await`.
#[tokio::test(start_paused = true)]
async fn a_timed_out_attempt_is_dropped() {
    struct Flag(Arc<AtomicU32>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let dropped = Arc::new(AtomicU32::new(0));
    let finished = Arc::new(AtomicU32::new(0));
    let (d, f) = (Arc::clone(&dropped), Arc::clone(&finished));
    let mut g = Graph::<()>::builder();
    let n = g.node("n").timeout(ms(100)).task(move |_ctx, ()| {
        let (d, f) = (Arc::clone(&d), Arc::clone(&f));
        async move {
            let _flag = Flag(d);
            sleep(ms(1000)).await;
            f.fetch_add(1, Ordering::SeqCst);
            Ok::<_, BoxError>(())
        }
    });
    let report = g.build().unwrap().run(()).await.unwrap();
    let node = report.node(n).unwrap();
    assert!(matches!(
        node.error(),
        Some(NodeError::Timeout { attempt: 1, limit, .. }) if *limit == ms(100)
    ));
    assert_eq!(node.end(), ms(100));
    assert_eq!(dropped.load(Ordering::SeqCst), 1);
    sleep(ms(2000)).await;
    assert_eq!(finished.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn non_retryable_errors_stop_the_series_at_once() {
    let mut g = Graph::<()>::builder();
    let n = g
        .node("n")
        .retry(Retry::new(5).retry_if(|e| !e.to_string().contains("400")))
        .task(|_ctx, ()| async { Err::<(), BoxError>("HTTP 400 bad request".into()) });
    let report = g.build().unwrap().run(()).await.unwrap();
    let node = report.node(n).unwrap();
    assert_eq!(node.attempts(), 1);
    assert!(matches!(
        node.error(),
        Some(NodeError::GaveUp {
            reason: StopReason::NotRetryable,
            attempts: 1,
            ..
        })
    ));
}

/// A task body that panics (a function, so that no code after the panic is unreachable).
fn bug() -> Result<(), BoxError> {
    panic!("bug")
}

#[tokio::test(start_paused = true)]
async fn panics_are_not_retried_by_default_and_custom_backoffs_can_run_out() {
    let mut g = Graph::<()>::builder();
    let p = g
        .node("p")
        .retry(Retry::new(5))
        .task(|_ctx, ()| async { bug() });
    let c = g
        .node("c")
        .retry(Retry::new(10).backoff(Backoff::custom([ms(5), ms(7)])))
        .task(|_ctx, ()| async { Err::<(), BoxError>("no".into()) });
    let report = g.build().unwrap().run(()).await.unwrap();
    assert_eq!(report.node(p).unwrap().attempts(), 1);
    let c = report.node(c).unwrap();
    assert_eq!(c.attempts(), 3);
    assert_eq!(c.end(), ms(12));
    assert!(matches!(
        c.error(),
        Some(NodeError::GaveUp {
            reason: StopReason::BackoffExhausted,
            ..
        })
    ));
}

#[tokio::test(start_paused = true)]
async fn retry_budget_shared_by_nodes_caps_retries() {
    // No floor, 50 % ratio: 4 first attempts allow 2 retries in all.
    let budget =
        baton_graph::retry::RetryBudget::with("inventory", Duration::from_secs(10), 0, 0.5);
    let mut g = Graph::<()>::builder();
    let calls = Arc::new(AtomicU32::new(0));
    for i in 0..4 {
        let calls = Arc::clone(&calls);
        let _ = g
            .node(format!("n{i}"))
            .retry(
                Retry::new(3)
                    .backoff(Backoff::constant(ms(10 * (i + 1))))
                    .budget(budget.clone()),
            )
            .task(move |_ctx, ()| {
                calls.fetch_add(1, Ordering::SeqCst);
                async { Err::<(), BoxError>("down".into()) }
            });
    }
    let report = g.build().unwrap().run(()).await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 4 + 2);
    let exhausted = report
        .nodes()
        .filter(|n| {
            matches!(
                n.error(),
                Some(NodeError::GaveUp { reason: StopReason::RetryBudgetExhausted { budget }, .. }) if budget == "inventory"
            )
        })
        .count();
    assert!(exhausted >= 2, "{report}");
}

#[test]
fn invalid_policies_are_build_errors_naming_the_node() {
    let mut g = Graph::<()>::builder();
    let _ = g
        .node("n")
        .retry(Retry::new(0))
        .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    let err = g.build().unwrap_err();
    assert_eq!(
        err.to_string(),
        "node `n`: invalid retry policy: retry needs at least 1 attempt, got 0"
    );
    let mut g = Graph::<()>::builder();
    let _ = g
        .node("m")
        .retry(Retry::new(2).backoff(Backoff::exponential(ms(1)).multiplier(0.5)))
        .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    assert!(
        g.build()
            .unwrap_err()
            .to_string()
            .contains("multiplier must be a finite number >= 1.0")
    );
    let mut g = Graph::<()>::builder();
    let _ = g
        .node("t")
        .timeout(Duration::ZERO)
        .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    assert!(
        g.build()
            .unwrap_err()
            .to_string()
            .starts_with("node `t`: invalid timeout policy")
    );
}

/// A task that passes `ctx.remaining()` on as its own timeout gives up in the same tick as
/// baton's cut: the attempt still counts as a timeout, not as the task's error.
#[tokio::test(start_paused = true)]
async fn a_task_timing_out_on_its_own_remaining_budget_counts_as_a_timeout() {
    let mut g = Graph::<()>::builder();
    let n = g.node("stock").timeout(ms(300)).task(|ctx, ()| async move {
        let budget = ctx.remaining().unwrap();
        match tokio::time::timeout(budget, sleep(ms(1000))).await {
            Ok(()) => Ok(()),
            Err(_) => Err::<(), BoxError>("client timed out".into()),
        }
    });
    let report = g.build().unwrap().run(()).await.unwrap();
    let node = report.node(n).unwrap();
    assert!(
        matches!(node.error(), Some(NodeError::Timeout { limit, .. }) if *limit == ms(300)),
        "{:?}",
        node.error()
    );
    assert_eq!(node.end(), ms(300));
}

/// A retry budget whose window or ratio is out of range is a typed build error naming the
/// node and the budget, not a budget quietly set to the nearest valid value.
#[test]
fn a_retry_budget_out_of_range_is_a_build_error() {
    use baton_graph::{BuildError, Graph, Node, Retry, retry::RetryBudget};
    let cases = [
        (
            RetryBudget::with("short", Duration::from_millis(10), 1, 0.2),
            "a ttl of 10ms",
        ),
        (
            RetryBudget::with("nan", Duration::from_secs(10), 1, f64::NAN),
            "a ratio of NaN",
        ),
        (
            RetryBudget::with("neg", Duration::from_secs(10), 1, -1.0),
            "a ratio of -1",
        ),
    ];
    for (budget, why) in cases {
        let mut g = Graph::<()>::builder();
        let _: Node<()> = g
            .node("stock")
            .retry(Retry::new(3).budget(budget))
            .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
        match g.build() {
            Err(BuildError::InvalidPolicy {
                node,
                policy,
                reason,
            }) => {
                assert_eq!((node.as_str(), policy), ("stock", "retry"));
                assert!(reason.contains(why), "{reason}");
            }
            other => panic!("expected an invalid retry policy, got {other:?}"),
        }
    }
}
