//! Manual control of a circuit breaker (`docs/contract.md`, rule 8): isolate, force closed,
//! reset, and the read-only snapshot. Each manual change is a transition with its own
//! reason and event. On tokio's paused clock.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_graph::{
    Backoff, BoxError, CircuitBreaker, Fallback, NodeError, Orchestrator, Outcome, Retry,
    breaker::{BreakerState, BreakerTransition, BreakerWindow, TransitionReason},
    observe::Event,
    retry::StopReason,
};
use tokio::time::advance;

use BreakerState::{Closed, ForcedClosed, HalfOpen, Isolated, Open};

use crate::ms;

type Log = Arc<Mutex<Vec<BreakerTransition>>>;

fn logged(b: &CircuitBreaker) -> Log {
    let log: Log = Arc::default();
    let l = Arc::clone(&log);
    b.on_transition(move |t, _| l.lock().unwrap().push(t.clone()));
    log
}

fn shape(log: &Log) -> Vec<(u64, BreakerState, BreakerState, TransitionReason)> {
    let log = log.lock().unwrap();
    log.iter()
        .map(|t| (t.seq(), t.from(), t.to(), t.reason()))
        .collect()
}

fn consecutive(n: u32) -> CircuitBreaker {
    CircuitBreaker::builder("inventory")
        .consecutive_failures(n)
        .open_duration(ms(100))
        .build()
        .unwrap()
}

fn fail(b: &CircuitBreaker) {
    b.try_acquire().unwrap().failure(ms(1));
}

/// Isolated, the breaker rejects every call for as long as it takes (no cooldown ends it),
/// a call admitted before is ignored, and only a reset closes it again.
#[tokio::test(start_paused = true)]
async fn isolate_rejects_every_call_until_a_reset() {
    let b = consecutive(2);
    let log = logged(&b);
    let before = b.try_acquire().unwrap();
    b.isolate().await;
    assert_eq!(b.state(), Isolated);
    assert!(b.is_open());
    b.isolate().await; // already isolated: nothing
    advance(Duration::from_secs(3_600)).await;
    for _ in 0..3 {
        let e = b.try_acquire().unwrap_err();
        assert_eq!((e.state(), e.retry_after()), (Isolated, None));
        assert_eq!(
            e.to_string(),
            "circuit breaker `inventory` is isolated (every call is rejected)"
        );
    }
    assert!(!before.is_current());
    before.failure(ms(1)); // from before the isolation: ignored
    assert_eq!(b.state(), Isolated);
    b.reset().await;
    assert_eq!(b.state(), Closed);
    fail(&b);
    assert_eq!(b.state(), Closed, "counting starts afresh");
    fail(&b);
    assert_eq!(b.state(), Open);
    assert_eq!(
        shape(&log),
        [
            (1, Closed, Isolated, TransitionReason::Isolated),
            (2, Isolated, Closed, TransitionReason::Reset),
            (
                3,
                Closed,
                Open,
                TransitionReason::ConsecutiveFailures { count: 2 }
            ),
        ]
    );
    assert_eq!(
        log.lock().unwrap()[0].to_string(),
        "circuit breaker `inventory` #1: closed -> isolated (isolated by hand)"
    );
}

/// Forced closed, the breaker admits every call and counts nothing: a dead downstream does
/// not trip it, whatever the rules. A reset puts the rules back.
#[tokio::test(start_paused = true)]
async fn force_closed_admits_every_call_and_counts_nothing() {
    let b = CircuitBreaker::builder("inventory")
        .consecutive_failures(2)
        .failure_rate(0.5, BreakerWindow::Count(4), 2)
        .open_duration(ms(100))
        .build()
        .unwrap();
    let log = logged(&b);
    fail(&b);
    fail(&b);
    assert_eq!(b.state(), Open);
    b.force_closed().await;
    assert_eq!(b.state(), ForcedClosed);
    assert!(!b.is_open());
    for _ in 0..50 {
        fail(&b);
        b.try_acquire().unwrap().success(ms(1));
    }
    assert_eq!(b.state(), ForcedClosed);
    let s = b.snapshot();
    assert_eq!(s.consecutive_failures, 0);
    assert_eq!(s.window.map(|w| w.calls), Some(0));
    b.force_closed().await; // already: nothing
    b.reset().await;
    fail(&b);
    fail(&b);
    assert_eq!(b.state(), Open);
    let to: Vec<_> = shape(&log).into_iter().map(|s| (s.2, s.3)).collect();
    assert_eq!(
        to,
        [
            (Open, TransitionReason::ConsecutiveFailures { count: 2 }),
            (ForcedClosed, TransitionReason::ForcedClosed),
            (Closed, TransitionReason::Reset),
            (Open, TransitionReason::ConsecutiveFailures { count: 2 }),
        ]
    );
}

/// A reset clears the consecutive count and the trips that grew the open duration; it is a
/// transition even from closed. Isolate and force closed replace each other directly.
#[tokio::test(start_paused = true)]
async fn reset_clears_the_counts_and_the_cooldown_growth() {
    let b = CircuitBreaker::builder("inventory")
        .consecutive_failures(3)
        .open_duration(ms(100))
        .open_duration_growth(2.0, ms(800))
        .build()
        .unwrap();
    let log = logged(&b);
    fail(&b);
    fail(&b);
    assert_eq!(b.snapshot().consecutive_failures, 2);
    b.reset().await;
    assert_eq!(b.snapshot().consecutive_failures, 0);
    fail(&b);
    fail(&b);
    assert_eq!(b.state(), Closed, "the two before the reset are forgotten");
    fail(&b);
    // Trip, the probe fails twice: the open duration grew to 400 ms.
    for _ in 0..2 {
        let wait = b.try_acquire().unwrap_err().retry_after().unwrap();
        advance(wait).await;
        fail(&b);
    }
    assert_eq!(b.snapshot().trips, 3);
    assert_eq!(b.try_acquire().unwrap_err().retry_after(), Some(ms(400)));
    b.reset().await;
    assert_eq!(b.snapshot().trips, 0);
    for _ in 0..3 {
        fail(&b);
    }
    assert_eq!(b.try_acquire().unwrap_err().retry_after(), Some(ms(100)));
    b.isolate().await;
    b.force_closed().await;
    b.isolate().await;
    let last: Vec<_> = shape(&log)
        .into_iter()
        .rev()
        .take(3)
        .map(|s| (s.1, s.2, s.3))
        .collect();
    assert_eq!(
        last,
        [
            (ForcedClosed, Isolated, TransitionReason::Isolated),
            (Isolated, ForcedClosed, TransitionReason::ForcedClosed),
            (Open, Isolated, TransitionReason::Isolated),
        ]
    );
    let seqs: Vec<u64> = shape(&log).iter().map(|s| s.0).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    assert_eq!(shape(&log)[0].3, TransitionReason::Reset);
    assert_eq!(shape(&log)[0].1, Closed);
}

/// A snapshot reads the state and counts and changes nothing: an open breaker whose
/// cooldown has elapsed still reads open (with no time left) until a caller asks.
#[tokio::test(start_paused = true)]
async fn a_snapshot_is_read_only() {
    let b = CircuitBreaker::builder("inventory")
        .failure_rate(0.5, BreakerWindow::Count(10), 4)
        .open_duration(ms(100))
        .half_open_probes(2)
        .build()
        .unwrap();
    let log = logged(&b);
    b.try_acquire().unwrap().success(ms(1));
    fail(&b);
    let s = b.snapshot();
    assert_eq!(
        (s.state, s.generation, s.consecutive_failures),
        (Closed, 0, 1)
    );
    let w = s.window.unwrap();
    assert_eq!((w.calls, w.failures, w.slow), (2, 1, 0));
    fail(&b);
    fail(&b);
    assert_eq!(b.state(), Open);
    advance(ms(30)).await;
    assert_eq!(b.snapshot().retry_after, Some(ms(70)));
    advance(ms(500)).await;
    for _ in 0..3 {
        let s = b.snapshot();
        assert_eq!((s.state, s.retry_after), (Open, Some(Duration::ZERO)));
    }
    assert_eq!(shape(&log).len(), 1, "no transition from a snapshot");
    let probe = b.try_acquire().unwrap();
    let s = b.snapshot();
    assert_eq!(
        (s.state, s.generation, s.probes_free, s.probes_in_flight),
        (HalfOpen, 2, 1, 1)
    );
    assert_eq!(s.window.map(|w| w.calls), Some(0));
    drop(probe);
}

/// An isolated breaker rejects a node's series, which its fallback serves; a series under
/// way whose breaker is isolated stops before its next attempt. The orchestrator's
/// observers receive the manual transitions as events.
#[tokio::test(start_paused = true)]
async fn an_isolated_breaker_sends_nodes_to_their_fallback() {
    let events = Arc::new(Mutex::new(Vec::new()));
    let e = Arc::clone(&events);
    let orch = Orchestrator::builder()
        .observer(move |ev: &Event<'_>| {
            if let Event::BreakerTransition(t) = ev {
                e.lock().unwrap().push((t.to(), t.reason()));
            }
        })
        .build();
    let b = CircuitBreaker::builder("inventory")
        .count_every_attempt(true)
        .build()
        .unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let c = Arc::clone(&calls);
    let breaker = b.clone();
    let mut g = orch.graph::<()>();
    let stock = g
        .node("stock")
        .retry(Retry::new(3).backoff(Backoff::constant(ms(50))))
        .breaker(&b)
        .fallback(Fallback::value(0u32))
        .task(move |_ctx, ()| {
            let (c, breaker) = (Arc::clone(&c), breaker.clone());
            async move {
                if c.fetch_add(1, Ordering::SeqCst) == 0 {
                    breaker.isolate().await; // an operator isolates it meanwhile
                }
                Err::<u32, BoxError>("503".into())
            }
        });
    let graph = g.build().unwrap();
    let report = graph.run(()).await.unwrap();
    let node = report.node(stock).unwrap();
    assert_eq!(node.outcome(), Outcome::Recovered);
    assert!(
        matches!(
            node.error(),
            Some(NodeError::GaveUp {
                attempts: 1,
                reason: StopReason::BreakerOpened,
                ..
            })
        ),
        "{:?}",
        node.error()
    );
    let report = graph.run(()).await.unwrap();
    let node = report.node(stock).unwrap();
    assert!(
        matches!(
            node.error(),
            Some(NodeError::BreakerOpen {
                state: BreakerState::Isolated,
                ..
            })
        ),
        "{:?}",
        node.error()
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    b.reset().await;
    assert_eq!(
        *events.lock().unwrap(),
        [
            (Isolated, TransitionReason::Isolated),
            (Closed, TransitionReason::Reset)
        ]
    );
}

/// `trips` counts since the last close, `trips_total` in the breaker's lifetime: after
/// three trips, two closes and a reset, the first reads 0 and the second 3.
#[tokio::test(start_paused = true)]
async fn a_snapshot_counts_the_trips_since_the_last_close_and_in_all() {
    let b = consecutive(1);
    for _ in 0..2 {
        fail(&b);
        advance(ms(100)).await;
        b.try_acquire().unwrap().success(ms(1)); // the probe closes it
    }
    fail(&b);
    let s = b.snapshot();
    assert_eq!((s.state, s.trips, s.trips_total), (Open, 1, 3));
    b.reset().await;
    let s = b.snapshot();
    assert_eq!((s.state, s.trips, s.trips_total), (Closed, 0, 3));
    assert_eq!(s.generation, 8, "every transition, the reset included");
}
