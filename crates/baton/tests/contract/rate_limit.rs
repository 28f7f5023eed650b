//! Rate limiter: at most so many attempts per period to one downstream, shared by name, with
//! a bounded wait that belongs to the attempt, and a typed refusal when no permit comes in
//! time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_graph::{
    BoxError, BuildError, Graph, Node, NodeError, Orchestrator, Outcome, Pipeline, RateLimiter,
    Retry, observe::Event,
};
use tokio::time::{Instant, sleep};

use crate::ms;

/// 10 permits per second, bursts of 2, each attempt waiting up to 10 s: forty calls asked
/// at once are served two at once, then one every 100 ms, and no window of a second holds
/// more than 2 + 10 of them. Two graphs and a pipeline share the limiter by name.
#[tokio::test(start_paused = true)]
async fn a_rate_limiter_holds_its_rate_over_a_window() {
    let orch = Orchestrator::new();
    let limiter = RateLimiter::new("inventory", 10, Duration::from_secs(1))
        .burst(2)
        .max_wait(Duration::from_secs(10));
    orch.add_rate_limiter(&limiter).unwrap();
    let calls: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let t0 = Instant::now();
    let graph = |orch: &Orchestrator| {
        let mut g = orch.graph::<()>();
        for i in 0..15 {
            let calls = Arc::clone(&calls);
            let _ = g
                .node(format!("n{i}"))
                .rate_limit("inventory")
                .task(move |_ctx, ()| {
                    calls.lock().unwrap().push(t0.elapsed());
                    async { Ok::<_, BoxError>(()) }
                });
        }
        g.build().unwrap()
    };
    let (a, b) = (graph(&orch), graph(&orch));
    let pipeline = Pipeline::<()>::builder("inventory-call")
        .rate_limit(&limiter)
        .orchestrator(&orch)
        .build()
        .unwrap();
    let pipeline_calls = (0..10).map(|_| {
        let calls = Arc::clone(&calls);
        let pipeline = pipeline.clone();
        async move {
            pipeline
                .call(|_| {
                    calls.lock().unwrap().push(t0.elapsed());
                    async { Ok::<_, BoxError>(()) }
                })
                .await
        }
    });
    let (ra, rb, rp) = tokio::join!(
        a.run(()),
        b.run(()),
        futures::future::join_all(pipeline_calls)
    );
    assert!(ra.unwrap().is_clean() && rb.unwrap().is_clean());
    assert!(rp.iter().all(Result::is_ok));
    let mut at = calls.lock().unwrap().clone();
    at.sort();
    let expected: Vec<Duration> = [0, 0]
        .into_iter()
        .chain((1..39).map(|k| k * 100))
        .map(ms)
        .collect();
    assert_eq!(at, expected, "two at once, then one every 100 ms");
    for (i, &from) in at.iter().enumerate() {
        let within = at[i..].iter().filter(|&&t| t < from + ms(1_000)).count();
        assert!(within <= 12, "{within} calls in the second from {from:?}");
    }
    assert_eq!(orch.stats().rate_limited, 0, "nobody was refused");
}

/// The wait for a permit belongs to the attempt: with one permit per 100 ms, an attempt
/// with a 150 ms timeout that waits 100 ms for its permit has 50 ms left, and a task of
/// 80 ms is cut at 150 ms. One with a 50 ms timeout would wait 200 ms: it is refused at
/// once, with `RateLimited` saying when a permit would have come.
#[tokio::test(start_paused = true)]
async fn the_wait_for_a_rate_limit_permit_counts_toward_the_attempts_timeout() {
    let limiter = RateLimiter::new("mail", 10, Duration::from_secs(1))
        .burst(1)
        .max_wait(Duration::from_secs(1));
    let mut g = Graph::<()>::builder();
    let task = |took: u64| {
        move |_ctx, ()| async move {
            sleep(ms(took)).await;
            Ok::<_, BoxError>(())
        }
    };
    let first: Node<()> = g.node("first").rate_limit(&limiter).task(task(10));
    let waiter: Node<()> = g
        .node("waiter")
        .rate_limit(&limiter)
        .timeout(ms(150))
        .task(task(80));
    let hasty: Node<()> = g
        .node("hasty")
        .rate_limit(&limiter)
        .timeout(ms(50))
        .task(task(1));
    let report = g.build().unwrap().run(()).await.unwrap();
    assert_eq!(report.node(first).unwrap().end(), ms(10));
    let w = report.node(waiter).unwrap();
    assert!(
        matches!(w.error(), Some(NodeError::Timeout { attempt: 1, .. })),
        "{:?}",
        w.error()
    );
    assert_eq!(w.end(), ms(150));
    let log = &w.attempt_log()[0];
    assert_eq!((log.start, log.rate_limit_wait), (ms(0), ms(100)));
    let h = report.node(hasty).unwrap();
    assert_eq!(
        (h.outcome(), h.attempts(), h.end()),
        (Outcome::Failed, 1, ms(0))
    );
    match h.error() {
        Some(NodeError::RateLimited {
            limiter,
            attempt,
            retry_after,
            ..
        }) => assert_eq!(
            (limiter.as_str(), *attempt, *retry_after),
            ("mail", 1, ms(200))
        ),
        other => panic!("expected RateLimited, got {other:?}"),
    }
    assert_eq!(h.error().and_then(NodeError::retry_after), Some(ms(200)));
}

/// A refusal is retried by default, and a retry can wait exactly as long as the limiter
/// says: three calls at once against one permit per 100 ms and no waiting end at 0, 100
/// and 200 ms. The refusals are counted, and each attempt's permit is an event.
#[tokio::test(start_paused = true)]
async fn a_refused_attempt_is_retried_when_the_limiter_says() {
    let events: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = Arc::clone(&events);
    let orch = Orchestrator::builder()
        .observer(move |e: &Event<'_>| {
            if let Event::RateLimitWaited { .. } = e {
                seen.lock().unwrap().push(e.to_string());
            }
        })
        .build();
    let limiter = RateLimiter::new("sms", 10, Duration::from_secs(1)).burst(1);
    let mut g = orch.graph::<()>();
    for name in ["a", "b", "c"] {
        let _ = g
            .node(name)
            .rate_limit(&limiter)
            .retry(Retry::new(3).delay_from(NodeError::retry_after))
            .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    }
    let report = g.build().unwrap().run(()).await.unwrap();
    let mut ends: Vec<_> = report.nodes().map(|n| (n.end(), n.attempts())).collect();
    assert_eq!(ends[0], (ms(0), 1), "`a` takes the free permit");
    ends.sort();
    assert_eq!(ends, [(ms(0), 1), (ms(100), 2), (ms(200), 3)]);
    assert_eq!(orch.stats().rate_limited, 3);
    let events = events.lock().unwrap();
    assert_eq!(events.len(), 6, "{events:#?}");
    let refused = events.iter().filter(|e| e.contains("refused")).count();
    assert_eq!(refused, 3, "{events:#?}");
    assert_eq!(
        events[1],
        "`b` attempt 1 refused by rate limiter `sms` (next permit in 100 ms)"
    );
    assert_eq!(events[0], "`a` attempt 1 got rate limiter `sms` after 0 ms");
}

/// A limiter that could never grant a permit is a build error naming the node and the
/// limiter, for a graph and a pipeline; a limiter named but not registered, or two with
/// one name, are build errors too.
#[test]
fn an_impossible_rate_limiter_is_a_build_error() {
    let build = |limiter: RateLimiter| {
        let mut g = Graph::<()>::builder();
        let _ = g
            .node("stock")
            .rate_limit(limiter)
            .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
        g.build().map(|_| ()).unwrap_err().to_string()
    };
    let second = Duration::from_secs(1);
    assert_eq!(
        build(RateLimiter::new("inventory", 0, second)),
        "node `stock`: invalid rate limit policy: rate limiter `inventory` grants 0 permits: no attempt could ever run"
    );
    assert!(build(RateLimiter::new("inventory", 5, Duration::ZERO)).contains("a period of zero"));
    assert!(build(RateLimiter::new("inventory", 5, second).burst(0)).contains("a burst of 0"));
    // Permits are spaced in whole nanoseconds: a faster rate is refused, not clamped.
    assert_eq!(
        build(RateLimiter::new("inventory", u32::MAX, second)),
        "node `stock`: invalid rate limit policy: rate limiter `inventory` grants 4294967295 \
         permits per 1s, more than one per nanosecond"
    );
    let error = Pipeline::<()>::builder("stock")
        .rate_limit(RateLimiter::new("inventory", 0, second))
        .build()
        .unwrap_err();
    assert!(matches!(
        error,
        BuildError::InvalidPolicy {
            policy: "rate limit",
            ..
        }
    ));
    let orch = Orchestrator::new();
    let mut g = orch.graph::<()>();
    let _ = g
        .node("n")
        .rate_limit("nope")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    assert_eq!(
        g.build().unwrap_err().to_string(),
        "node `n` names rate limiter `nope`, which the orchestrator does not have"
    );
    orch.add_rate_limiter(&RateLimiter::new("sms", 1, second))
        .unwrap();
    let mut g = orch.graph::<()>();
    let _ = g
        .node("m")
        .rate_limit(RateLimiter::new("sms", 2, second))
        .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    assert!(
        g.build()
            .unwrap_err()
            .to_string()
            .contains("different rate limiter")
    );
}

/// A fleet's store for the tests: grants a permit after 30 ms of wait when the wait fits,
/// refuses otherwise, and records what it was asked.
#[derive(Debug, Default)]
struct FakeFleet {
    asked: Mutex<Vec<Duration>>,
    attached: Mutex<Vec<baton_graph::shared::SharedLimit>>,
}

#[derive(Debug, Clone, Default)]
struct Fleet(Arc<FakeFleet>);

impl baton_graph::shared::SharedRateLimit for Fleet {
    fn attach(&self, limit: baton_graph::shared::SharedLimit) {
        self.0.attached.lock().unwrap().push(limit);
    }

    fn reserve(
        &self,
        max_wait: Duration,
    ) -> baton_graph::shared::SharedFuture<'_, Result<Duration, Duration>> {
        self.0.asked.lock().unwrap().push(max_wait);
        Box::pin(async move {
            if max_wait >= ms(30) {
                Ok(ms(30))
            } else {
                Err(ms(30))
            }
        })
    }

    fn try_reserve(&self) -> Result<(), Duration> {
        Err(ms(7))
    }
}

/// A shared limiter takes every permit from its backend, with the attempt's wait bound,
/// sleeps the wait it is given, and is refused as any limiter (the same error, events and
/// retry-after); the backend learns the limiter's settings, again when they change.
#[tokio::test(start_paused = true)]
async fn a_shared_limiter_takes_every_permit_from_its_backend() {
    let fleet = Fleet::default();
    let limiter = RateLimiter::new("quota", 100, Duration::from_secs(1))
        .shared(fleet.clone())
        .max_wait(ms(50));
    assert!(limiter.is_shared());
    assert_eq!(
        fleet.0.attached.lock().unwrap().len(),
        2,
        "again after max_wait"
    );
    assert_eq!(limiter.try_acquire(), Err(ms(7)));
    let mut g = Graph::<()>::builder();
    let waited = g
        .node("waits")
        .rate_limit(&limiter)
        .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    let cut = g
        .node("cut")
        .rate_limit(&limiter)
        .timeout(ms(20))
        .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    let report = g.build().unwrap().run(()).await.unwrap();
    let waited = report.node(waited).unwrap();
    assert_eq!(
        (waited.outcome(), waited.end()),
        (Outcome::Succeeded, ms(30))
    );
    let cut = report.node(cut).unwrap();
    assert_eq!(cut.outcome(), Outcome::Failed);
    assert_eq!(
        cut.error().and_then(NodeError::retry_after),
        Some(ms(30)),
        "{:?}",
        cut.error()
    );
    let mut asked = fleet.0.asked.lock().unwrap().clone();
    asked.sort();
    assert!(asked[0] < ms(20) && asked[1] == ms(50), "{asked:?}");
    assert!(!RateLimiter::new("alone", 1, ms(1)).is_shared());
}

/// A rate limiter whose permits come from a fleet's store cannot take a new rate from a
/// configuration: `apply` refuses it, naming the key, and the store is not told again.
#[cfg(feature = "serde")]
#[test]
fn a_shared_limiter_refuses_a_new_rate_from_a_configuration() {
    use baton_graph::config::{Config, ConfigErrorKind};
    let fleet = Fleet::default();
    let limiter = RateLimiter::new("quota", 100, Duration::from_secs(1)).shared(fleet.clone());
    let orch = baton_graph::Orchestrator::new();
    orch.add_rate_limiter(&limiter).unwrap();
    let attached = fleet.0.attached.lock().unwrap().len();
    let text = r#"{ "rate_limiters": { "quota": { "permits": 5, "per": "1s" } } }"#;
    let config = Config::from_deserializer(&mut serde_json::Deserializer::from_str(text)).unwrap();
    let e = orch.apply(&config).unwrap_err();
    assert_eq!(
        (e.path(), e.kind()),
        ("rate_limiters.quota", &ConfigErrorKind::NotInPlace)
    );
    assert_eq!(fleet.0.attached.lock().unwrap().len(), attached);
}
