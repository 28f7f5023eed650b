//! Panics in tasks (`docs/contract.md`, rule 15): caught, the node ends `Failed` with
//! `NodeError::Panicked` carrying the message, the other nodes are unaffected and the run
//! completes.

use std::sync::Arc;
use std::time::Duration;

use baton_graph::{BoxError, FailureMode, Graph, NodeError, Outcome, RunError};
use tokio::time::sleep;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn panic_message(report: &baton_graph::Report, name: &str) -> String {
    let node = report.by_name(name).expect("node");
    assert_eq!(node.outcome(), Outcome::Failed, "{name}");
    assert_eq!(node.attempts(), 1, "{name}");
    match node.error() {
        Some(NodeError::Panicked { message, .. }) => {
            assert_eq!(
                node.message(),
                Some(format!("task panicked: {message}")),
                "{name}"
            );
            message.clone()
        }
        other => panic!("{name}: expected a panic error, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn panics_before_and_after_the_first_await_fail_only_their_node() {
    let mut g = Graph::<()>::builder();
    // Panics in the closure itself, before it even returns a future.
    g.node("sync")
        .task(|_ctx, ()| -> std::future::Ready<Result<u8, BoxError>> { panic!("sync boom") });
    // Panics on the future's first poll, before any `.await`.
    g.node("before").task(|_ctx, ()| async {
        if true {
            panic!("before await");
        }
        Ok::<u8, BoxError>(0)
    });
    // Panics after an `.await`, with a formatted (String) payload.
    let after = g.node("after").task(|_ctx, ()| async {
        sleep(ms(30)).await;
        if true {
            panic!("after await at {} ms", 30);
        }
        Ok::<u8, BoxError>(0)
    });
    // A payload that is not a string.
    g.node("opaque").task(|_ctx, ()| async {
        sleep(ms(5)).await;
        if true {
            std::panic::panic_any(42_u32);
        }
        Ok::<u8, BoxError>(0)
    });
    let ok = g.node("ok").task(|_ctx, ()| async {
        sleep(ms(100)).await;
        Ok::<_, BoxError>(9_u8)
    });
    let ok_down = g
        .node("ok_down")
        .after(ok)
        .task(|_ctx, v: Arc<u8>| async move { Ok::<_, BoxError>(*v + 1) });
    let after_down = g
        .node("after_down")
        .after(after)
        .task(|_ctx, v: Arc<u8>| async move { Ok::<_, BoxError>(*v) });
    let graph = g.build().expect("valid");

    let report = graph.run(()).await.expect("the run completes");
    assert_eq!(panic_message(&report, "sync"), "sync boom");
    assert_eq!(panic_message(&report, "before"), "before await");
    assert_eq!(panic_message(&report, "after"), "after await at 30 ms");
    assert_eq!(
        panic_message(&report, "opaque"),
        "<non-string panic payload>"
    );
    assert_eq!(report.by_name("sync").and_then(|n| n.start()), Some(ms(0)));
    assert_eq!(report.by_name("after").map(|n| n.end()), Some(ms(30)));
    assert_eq!(report.by_name("opaque").map(|n| n.end()), Some(ms(5)));
    assert_eq!(
        report
            .by_name("before")
            .and_then(|n| n.error())
            .map(ToString::to_string),
        Some("task panicked: before await".to_owned())
    );
    assert_eq!(report.get(ok), Some(&9));
    assert_eq!(report.get(ok_down), Some(&10));
    let skipped = report.node(after_down).expect("after_down");
    assert_eq!(skipped.outcome(), Outcome::Skipped);
    assert_eq!(
        skipped.message().as_deref(),
        Some("upstream `after` failed: task panicked: after await at 30 ms")
    );
    let c = report.counts();
    assert_eq!((c.succeeded, c.failed, c.skipped, c.total()), (2, 4, 1, 7));
    assert_eq!(report.makespan(), ms(100));
}

#[tokio::test(start_paused = true)]
async fn a_panic_under_fail_all_is_a_failed_run_naming_the_node() {
    let mut g = Graph::<()>::builder();
    g.failure_mode(FailureMode::FailAll);
    g.node("p").task(|_ctx, ()| async {
        sleep(ms(10)).await;
        if true {
            panic!("kaboom");
        }
        Ok::<(), BoxError>(())
    });
    g.node("q").task(|_ctx, ()| async {
        sleep(ms(20)).await;
        Ok::<_, BoxError>(())
    });
    let err = g
        .build()
        .expect("valid")
        .run(())
        .await
        .expect_err("fail-all");
    assert_eq!(
        err.to_string(),
        "run failed: node `p` failed (1 failed, 0 skipped, 0 cancelled)"
    );
    let report = err.report().expect("report");
    assert_eq!(panic_message(report, "p"), "kaboom");
    assert_eq!(
        report.by_name("q").map(|n| n.outcome()),
        Some(Outcome::Succeeded)
    );
    assert!(matches!(err, RunError::Failed { .. }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panics_on_a_multi_thread_runtime_are_caught_too() {
    let mut g = Graph::<u32>::builder();
    for i in 0..16_u32 {
        g.node(format!("n{i}")).task(move |ctx, ()| async move {
            tokio::task::yield_now().await;
            if i % 2 == 1 {
                panic!("odd {i}");
            }
            Ok::<_, BoxError>(*ctx.input() + i)
        });
    }
    let graph = g.build().expect("valid");
    let report = graph.run(100).await.expect("run");
    for i in 0..16_u32 {
        let name = format!("n{i}");
        if i % 2 == 1 {
            assert_eq!(panic_message(&report, &name), format!("odd {i}"));
        } else {
            assert_eq!(
                report.by_name(&name).map(|n| n.outcome()),
                Some(Outcome::Succeeded)
            );
        }
    }
    assert_eq!(report.counts().failed, 8);
    assert_eq!(report.counts().succeeded, 8);
}

/// A caught panic names the code it came from, for a graph node and a pipeline call alike:
/// the task, the fallback, the router's selector, the retry predicate, the breaker's
/// filter, a custom backoff, the delay read from the error.
#[tokio::test(start_paused = true)]
async fn a_panic_names_the_code_that_panicked() {
    use baton_graph::{Backoff, CircuitBreaker, Fallback, Pipeline, Retry, UserCode};

    fn code_of(error: Option<&NodeError>) -> Option<UserCode> {
        match error? {
            NodeError::Panicked { code, .. } => Some(*code),
            NodeError::FallbackFailed { error, .. } => code_of(Some(error)),
            _ => None,
        }
    }
    let failing = || async { Err::<u32, BoxError>("503".into()) };
    let breaker = || CircuitBreaker::builder("b").build().unwrap();
    let mut g = Graph::<()>::builder();
    let task = g.node("task").task(|_ctx, ()| async {
        panic!("in the task");
        #[allow(unreachable_code)]
        Ok::<u32, BoxError>(0)
    });
    let fallback = g
        .node("fallback")
        .fallback(Fallback::from_fn(|_| panic!("in the fallback")))
        .task(move |_ctx, ()| failing());
    let predicate = g
        .node("predicate")
        .retry(Retry::new(2).retry_if(|_| panic!("in the predicate")))
        .task(move |_ctx, ()| failing());
    let filter = g
        .node("filter")
        .breaker(breaker())
        .breaker_ignore(|_| panic!("in the filter"))
        .task(move |_ctx, ()| failing());
    let backoff = g
        .node("backoff")
        .retry(Retry::new(2).backoff(Backoff::custom(std::iter::from_fn(
            || -> Option<Duration> { panic!("in the backoff") },
        ))))
        .task(move |_ctx, ()| failing());
    let delay = g
        .node("delay")
        .retry(Retry::new(2).delay_from(|_| panic!("in the delay")))
        .task(move |_ctx, ()| failing());
    let router = g
        .router::<u32>("router")
        .select(|_input, ()| -> &str { panic!("in the selector") })
        .branch("only", |b| {
            b.task(|_ctx, ()| async { Ok::<u32, BoxError>(1) })
        })
        .finish();
    let report = g.build().unwrap().run(()).await.unwrap();
    let expected = [
        (task, UserCode::Task, "task panicked: in the task"),
        (
            fallback,
            UserCode::Fallback,
            "fallback panicked: in the fallback",
        ),
        (
            predicate,
            UserCode::RetryPredicate,
            "retry predicate panicked: in the predicate",
        ),
        (
            filter,
            UserCode::BreakerFilter,
            "breaker filter panicked: in the filter",
        ),
        (
            backoff,
            UserCode::Backoff,
            "backoff panicked: in the backoff",
        ),
        (
            delay,
            UserCode::RetryDelay,
            "retry delay panicked: in the delay",
        ),
        (
            router,
            UserCode::Selector,
            "router selector panicked: in the selector",
        ),
    ];
    for (node, code, text) in expected {
        let n = report.node(node).unwrap();
        assert_eq!(n.outcome(), Outcome::Failed, "{}", n.name());
        assert_eq!(code_of(n.error()), Some(code), "{}", n.name());
        let message = n.message().unwrap_or_default();
        assert!(message.contains(text), "{}: {message}", n.name());
    }

    // The same policies around one call: the same codes, and no panic reaches the caller.
    let predicate = Pipeline::<u32>::builder("p")
        .retry(Retry::new(2).retry_if(|_| panic!("in the predicate")))
        .build()
        .unwrap();
    let call = predicate.run(move |_| failing()).await;
    assert_eq!(code_of(call.error()), Some(UserCode::RetryPredicate));
    let filter = Pipeline::<u32>::builder("p")
        .breaker(breaker())
        .breaker_ignore(|_| panic!("in the filter"))
        .build()
        .unwrap();
    let call = filter.run(move |_| failing()).await;
    assert_eq!(code_of(call.error()), Some(UserCode::BreakerFilter));
    let task = Pipeline::<u32>::builder("p").build().unwrap();
    let call = task
        .run(|_| async {
            panic!("in the task");
            #[allow(unreachable_code)]
            Ok::<u32, BoxError>(0)
        })
        .await;
    assert_eq!(code_of(call.error()), Some(UserCode::Task));
}

/// Panics when dropped.
struct PanicOnDrop;

impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        panic!("in the task's drop");
    }
}

/// An attempt cut by its timeout is dropped; a panic in its drop is the task's, for a
/// node and a pipeline call alike (it neither escapes the call nor blames baton).
#[tokio::test(start_paused = true)]
async fn a_panic_dropping_a_cut_attempt_is_the_tasks() {
    use baton_graph::{Pipeline, UserCode};

    async fn slow() -> Result<u32, BoxError> {
        let _guard = PanicOnDrop;
        sleep(ms(1_000)).await;
        Ok(1)
    }
    let mut g = Graph::<()>::builder();
    let node = g.node("slow").timeout(ms(10)).task(|_ctx, ()| slow());
    let report = g.build().unwrap().run(()).await.unwrap();
    let n = report.node(node).unwrap();
    assert!(
        matches!(n.error(), Some(NodeError::Panicked { code: UserCode::Task, message, .. })
            if message == "in the task's drop"),
        "{:?}",
        n.error()
    );
    let pipeline: Pipeline<u32> = Pipeline::builder("slow").timeout(ms(10)).build().unwrap();
    let error = pipeline.call(|_attempt| slow()).await.unwrap_err();
    assert!(
        matches!(
            &*error,
            NodeError::Panicked {
                code: UserCode::Task,
                ..
            }
        ),
        "{error:?}"
    );
}

/// A task future that never ends and panics when dropped.
struct PendingThenPanicOnDrop;

impl std::future::Future for PendingThenPanicOnDrop {
    type Output = Result<u64, BoxError>;
    fn poll(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::task::Poll::Pending
    }
}

impl Drop for PendingThenPanicOnDrop {
    fn drop(&mut self) {
        panic!("in the cancelled task's drop");
    }
}

/// A node cancelled by fail-fast (or a canceller) whose future panics as it is dropped:
/// the panic is caught, the node ends `Cancelled`, and the run ends.
#[tokio::test(start_paused = true)]
async fn a_panic_dropping_a_cancelled_attempt_does_not_hang_the_run() {
    use baton_graph::{Retry, RunOptions};

    for policies in [false, true] {
        let mut g = Graph::<()>::builder();
        let _bad = g.node("bad").task(|_ctx, ()| async {
            sleep(ms(5)).await;
            Err::<u64, BoxError>("503".into())
        });
        let victim = g.node("victim");
        let victim = if policies {
            victim.timeout(ms(1_000)).retry(Retry::new(2))
        } else {
            victim
        };
        let victim = victim.task(|_ctx, ()| PendingThenPanicOnDrop);
        let graph = g.build().unwrap();
        let options = RunOptions::new().failure_mode(FailureMode::FailFast);
        let run = tokio::time::timeout(Duration::from_secs(60), graph.run_with((), options));
        let Ok(Err(RunError::Failed { report, .. })) = run.await else {
            panic!("the run did not end as failed (policies: {policies})");
        };
        let v = report.node(victim).unwrap();
        assert_eq!(v.outcome(), Outcome::Cancelled, "policies: {policies}");
    }
}

/// A task future that ends at once and panics when dropped.
struct ReadyThenPanicOnDrop;

impl std::future::Future for ReadyThenPanicOnDrop {
    type Output = Result<u32, BoxError>;
    fn poll(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::task::Poll::Ready(Ok(1))
    }
}

impl Drop for ReadyThenPanicOnDrop {
    fn drop(&mut self) {
        panic!("in the ended task's drop");
    }
}

/// A pipeline call whose future ended, then panicked as it was dropped, fails with the
/// task's panic instead of unwinding into the caller, with or without a timeout.
#[tokio::test(start_paused = true)]
async fn a_panic_dropping_an_ended_attempt_does_not_reach_the_caller() {
    use baton_graph::{Pipeline, UserCode};

    for timeout in [None, Some(ms(100))] {
        let mut builder = Pipeline::<u32>::builder("p");
        if let Some(timeout) = timeout {
            builder = builder.timeout(timeout);
        }
        let pipeline = builder.build().unwrap();
        let error = pipeline
            .call(|_attempt| ReadyThenPanicOnDrop)
            .await
            .unwrap_err();
        assert!(
            matches!(
                &*error,
                NodeError::Panicked {
                    code: UserCode::Task,
                    ..
                }
            ),
            "{error:?}"
        );
    }
}
