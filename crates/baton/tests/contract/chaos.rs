//! Fault injection: latency and errors injected at configured rates from a seeded
//! generator, so that a test replays the same faults on the paused clock.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_graph::{
    BoxError, Graph, NodeError, Orchestrator, Outcome, Pipeline, Retry,
    chaos::{Chaos, InjectedFault},
    observe::Event,
};
use tokio::time::sleep;

use crate::ms;

/// What one run under chaos did, node by node: outcome, end, and per attempt the injected
/// latency and error.
type Trace = Vec<(Outcome, Duration, Vec<(u128, bool)>)>;

async fn run_with(chaos: &Chaos) -> Trace {
    let mut g = Graph::<()>::builder();
    for i in 0..8 {
        let _ = g
            .node(format!("n{i}"))
            .chaos(chaos)
            .retry(Retry::new(3))
            .task(|_ctx, ()| async {
                sleep(ms(10)).await;
                Ok::<_, BoxError>(())
            });
    }
    let report = g.build().unwrap().run(()).await.unwrap();
    report
        .nodes()
        .map(|n| {
            let log = n.attempt_log().iter();
            let faults = log
                .map(|a| (a.injected_latency.as_millis(), a.injected_error))
                .collect();
            (n.outcome(), n.end(), faults)
        })
        .collect()
}

/// The same seed injects the same faults, at the same attempts, and the run ends the same;
/// another seed injects others.
#[tokio::test(start_paused = true)]
async fn the_same_seed_injects_the_same_faults() {
    let chaos = |seed| Chaos::new(seed).latency(0.5, ms(30)).error(0.4);
    let first = run_with(&chaos(11)).await;
    assert_eq!(first, run_with(&chaos(11)).await);
    assert_ne!(first, run_with(&chaos(12)).await);
    let injected: usize = first.iter().map(|(_, _, f)| f.len()).sum();
    assert!(injected > 0, "{first:?}");
    assert!(first.iter().any(|(_, _, f)| f.iter().any(|a| a.1)));
    assert!(first.iter().any(|(_, _, f)| f.iter().any(|a| a.0 == 30)));
}

/// The injected latency belongs to the attempt: under a 50 ms timeout, 100 ms of it cuts
/// the attempt at 50 ms without calling the task; 20 ms of it before a 10 ms task ends
/// the node at 30 ms.
#[tokio::test(start_paused = true)]
async fn injected_latency_counts_toward_the_attempts_timeout() {
    let calls = Arc::new(AtomicU32::new(0));
    let run = |latency: u64| {
        let calls = Arc::clone(&calls);
        async move {
            let mut g = Graph::<()>::builder();
            let node = g
                .node("price")
                .chaos(&Chaos::new(3).latency(1.0, ms(latency)))
                .timeout(ms(50))
                .task(move |_ctx, ()| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    async {
                        sleep(ms(10)).await;
                        Ok::<_, BoxError>(1_u32)
                    }
                });
            let report = g.build().unwrap().run(()).await.unwrap();
            let n = report.node(node).unwrap();
            let log = n.attempt_log()[0].clone();
            (
                n.error().map(NodeError::kind),
                n.end(),
                log.injected_latency,
            )
        }
    };
    assert_eq!(run(100).await, (Some("timeout"), ms(50), ms(100)));
    assert_eq!(calls.load(Ordering::SeqCst), 0, "cut before the task");
    assert_eq!(run(20).await, (None, ms(30), ms(20)));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// A downstream's error of the test's choosing.
#[derive(Debug, thiserror::Error)]
#[error("503 Service Unavailable")]
struct Unavailable;

/// An injected error replaces the task's run and is retried like a downstream's; the
/// default one is an `InjectedFault`, a custom one the test's own type. Faults are counted
/// and told as events, and a chaos policy turned off injects nothing. A pipeline call the
/// same.
#[tokio::test(start_paused = true)]
async fn injected_errors_are_retried_counted_and_can_be_turned_off() {
    let events: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = Arc::clone(&events);
    let orch = Orchestrator::builder()
        .observer(move |e: &Event<'_>| {
            if let Event::FaultInjected { .. } = e {
                seen.lock().unwrap().push(e.to_string());
            }
        })
        .build();
    let chaos = Chaos::new(5).error(1.0);
    let mut g = orch.graph::<()>();
    let price = g
        .node("price")
        .chaos(&chaos)
        .retry(Retry::new(2))
        .task(|_ctx, ()| async { Ok::<_, BoxError>(1_u32) });
    let graph = g.build().unwrap();
    let report = graph.run(()).await.unwrap();
    let n = report.node(price).unwrap();
    assert_eq!((n.outcome(), n.attempts()), (Outcome::Failed, 2));
    let last = n.error().unwrap().last_attempt().task_error().unwrap();
    assert_eq!(
        last.downcast_ref::<InjectedFault>(),
        Some(&InjectedFault { attempt: 2 })
    );
    assert_eq!(orch.stats().faults_injected, 2);
    assert_eq!(
        events.lock().unwrap()[0],
        "`price` attempt 1: injected 0 ms latency and an error"
    );
    chaos.set_enabled(false);
    assert_eq!(graph.run(()).await.unwrap().get(price), Some(&1));
    assert_eq!(orch.stats().faults_injected, 2, "off: nothing injected");

    let chaos = Chaos::new(5).error_with(1.0, |_attempt| Box::new(Unavailable));
    let pipeline = Pipeline::<u32>::builder("price")
        .chaos(&chaos)
        .build()
        .unwrap();
    let call = pipeline.run(|_| async { Ok::<_, BoxError>(1) }).await;
    let error = call.error().unwrap().task_error().unwrap();
    assert!(error.downcast_ref::<Unavailable>().is_some());
}

/// A rate outside `[0, 1]` is a build error naming the node.
#[test]
fn an_impossible_chaos_rate_is_a_build_error() {
    let mut g = Graph::<()>::builder();
    let _ = g
        .node("price")
        .chaos(&Chaos::new(1).error(2.0))
        .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    assert_eq!(
        g.build().map(|_| ()).unwrap_err().to_string(),
        "node `price`: invalid chaos policy: the chaos error rate must be in [0, 1], got 2"
    );
}
