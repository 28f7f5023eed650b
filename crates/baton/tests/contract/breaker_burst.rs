//! The circuit breaker under concurrent requests (`docs/contract.md`, rule 8): counting
//! every attempt stops the series under way, a recovery ramp admits its share, and every
//! rejected request goes to the node's fallback. On tokio's paused clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use baton_graph::{
    Backoff, BoxError, CircuitBreaker, Fallback, Graph, Node, NodeError, Outcome, Pipeline, Retry,
    breaker::BreakerState, retry::StopReason,
};
use tokio::task::JoinSet;
use tokio::time::{advance, sleep};

use crate::ms;

/// A graph of one `inventory` node calling a downstream that fails after 10 ms (or succeeds,
/// when `healthy`), with 4 attempts 50 ms apart, `breaker` and a fallback of 0; the calls
/// the downstream received are counted.
fn checkout(breaker: &CircuitBreaker, healthy: bool) -> (Graph<()>, Node<u32>, Arc<AtomicU32>) {
    let calls = Arc::new(AtomicU32::new(0));
    let c = Arc::clone(&calls);
    let mut g = Graph::<()>::builder();
    let inventory = g
        .node("inventory")
        .retry(Retry::new(4).backoff(Backoff::constant(ms(50))))
        .breaker(breaker)
        .fallback(Fallback::value(0u32))
        .task(move |_ctx, ()| {
            c.fetch_add(1, Ordering::SeqCst);
            async move {
                sleep(ms(10)).await;
                if healthy {
                    Ok(7u32)
                } else {
                    Err::<u32, BoxError>("inventory answered 503".into())
                }
            }
        });
    (g.build().unwrap(), inventory, calls)
}

/// Runs `n` requests at once; returns their `inventory` outcomes and errors.
async fn burst(graph: &Graph<()>, node: Node<u32>, n: usize) -> Vec<(Outcome, Option<Error>)> {
    let mut runs = JoinSet::new();
    for _ in 0..n {
        let run = graph.run(());
        runs.spawn(async move {
            let report = run.await.unwrap();
            let entry = report.node(node).unwrap();
            let error = entry.error().map(|e| match e {
                NodeError::GaveUp {
                    attempts, reason, ..
                } => Error::GaveUp(*attempts, reason.clone()),
                NodeError::BreakerOpen { state, .. } => Error::Rejected(*state),
                other => Error::Other(other.to_string()),
            });
            (entry.outcome(), error)
        });
    }
    runs.join_all().await
}

/// What a request's `inventory` node ended with, in short.
#[derive(Debug, Clone, PartialEq)]
enum Error {
    GaveUp(u32, StopReason),
    Rejected(BreakerState),
    Other(String),
}

fn tripping(count_every_attempt: bool) -> CircuitBreaker {
    CircuitBreaker::builder("inventory")
        .consecutive_failures(5)
        .open_duration(ms(500))
        .count_every_attempt(count_every_attempt)
        .build()
        .unwrap()
}

/// 20 requests at once against a dead downstream: told one result per series, the breaker
/// hears nothing until every series has made its 4 attempts (80 calls); told every attempt,
/// it opens on the first failures and the series under way stop before their second
/// attempt (20 calls). Every request is served by the fallback.
#[tokio::test(start_paused = true)]
async fn counting_every_attempt_stops_the_series_under_way() {
    for (every_attempt, expected_calls) in [(false, 80), (true, 20)] {
        let breaker = tripping(every_attempt);
        let (graph, inventory, calls) = checkout(&breaker, false);
        let outcomes = burst(&graph, inventory, 20).await;
        assert_eq!(
            calls.load(Ordering::SeqCst),
            expected_calls,
            "{every_attempt}"
        );
        assert_eq!(breaker.state(), BreakerState::Open);
        for (outcome, error) in &outcomes {
            assert_eq!(*outcome, Outcome::Recovered, "{error:?}");
            if every_attempt {
                assert_eq!(*error, Some(Error::GaveUp(1, StopReason::BreakerOpened)));
            }
        }
    }
}

/// Told every attempt, a half-open breaker's probe is one attempt: a failed probe re-opens
/// it, and the same series is rejected at its next attempt and served by the fallback.
#[tokio::test(start_paused = true)]
async fn a_probe_is_one_attempt_when_every_attempt_counts() {
    let breaker = tripping(true);
    for _ in 0..5 {
        breaker.try_acquire().unwrap().failure(ms(1));
    }
    advance(ms(500)).await;
    let (graph, inventory, calls) = checkout(&breaker, false);
    let outcomes = burst(&graph, inventory, 1).await;
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the probe, then a rejection"
    );
    assert_eq!(breaker.state(), BreakerState::Open);
    assert_eq!(outcomes[0].0, Outcome::Recovered);
}

/// A recovering breaker admits its share of a burst; the rest are rejected with the
/// breaker's error naming its state, and the fallback serves them.
#[tokio::test(start_paused = true)]
async fn a_recovering_breaker_admits_its_share_and_the_fallback_serves_the_rest() {
    let breaker = CircuitBreaker::builder("inventory")
        .consecutive_failures(5)
        .open_duration(ms(500))
        .recovery_ramp(ms(1_000))
        .build()
        .unwrap();
    for _ in 0..5 {
        breaker.try_acquire().unwrap().failure(ms(1));
    }
    advance(ms(500)).await;
    breaker.try_acquire().unwrap().success(ms(1));
    assert_eq!(breaker.state(), BreakerState::Recovering);
    let (graph, inventory, calls) = checkout(&breaker, true);
    // 100 requests at the ramp's start (10 %), then 100 halfway through (55 %): of the
    // 1 + 10 + 55 the share allows in all, the first burst takes 10 and the second 56.
    let first = burst(&graph, inventory, 100).await;
    advance(ms(490)).await;
    let second = burst(&graph, inventory, 100).await;
    let served = |outcomes: &[(Outcome, Option<Error>)]| {
        outcomes
            .iter()
            .filter(|(o, _)| *o == Outcome::Succeeded)
            .count()
    };
    assert_eq!((served(&first), served(&second)), (10, 56));
    assert_eq!(calls.load(Ordering::SeqCst), 66);
    for (outcome, error) in first.iter().chain(&second) {
        match outcome {
            Outcome::Succeeded => {}
            Outcome::Recovered => {
                assert_eq!(*error, Some(Error::Rejected(BreakerState::Recovering)));
            }
            other => panic!("{other:?}: {error:?}"),
        }
    }
    advance(ms(500)).await;
    let third = burst(&graph, inventory, 100).await;
    assert_eq!(served(&third), 100, "the ramp is over");
    assert_eq!(breaker.state(), BreakerState::Closed);
}

/// A pipeline whose breaker counts every attempt stops its series when the breaker opens.
#[tokio::test(start_paused = true)]
async fn a_pipeline_counts_every_attempt_too() {
    let breaker = CircuitBreaker::builder("inventory")
        .consecutive_failures(1)
        .count_every_attempt(true)
        .build()
        .unwrap();
    let p = Pipeline::<u32>::builder("inventory")
        .retry(Retry::new(4).backoff(Backoff::constant(ms(50))))
        .breaker(&breaker)
        .build()
        .unwrap();
    let calls = AtomicU32::new(0);
    let call = p
        .run(|_attempt| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err::<u32, BoxError>("inventory answered 503".into()) }
        })
        .await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(
        matches!(
            call.error(),
            Some(NodeError::GaveUp {
                reason: StopReason::BreakerOpened,
                ..
            })
        ),
        "{:?}",
        call.error()
    );
}
