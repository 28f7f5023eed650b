//! Shared breakers against a real `redis-server`. Real time is unavoidable here: the tests
//! assert outcomes, wait with generous bounds, and never assert a duration tighter than the
//! backend's timeout times a large margin.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use baton_graph::{
    BoxError, CircuitBreaker, Fallback, Orchestrator, Outcome,
    breaker::{BreakerState, TransitionReason},
};
use baton_redis::{Quorum, RedisBreakers, RedisOptions, SCRIPT};
use common::{Server, any_server, connect, logged, ms, unique, until};

use BreakerState::{Closed, HalfOpen, Isolated, Open};

fn rules(name: &str) -> baton_graph::breaker::CircuitBreakerBuilder {
    CircuitBreaker::builder(name)
        .consecutive_failures(3)
        .open_duration(ms(200))
}

fn fail(b: &CircuitBreaker) {
    b.try_acquire().unwrap().failure(ms(1));
}

/// A permit, asking until one is granted (a shared breaker's first caller after the
/// cooldown asks Redis for a probe and is rejected).
async fn permit(b: &CircuitBreaker) -> baton_graph::breaker::BreakerPermit<'_> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(p) = b.try_acquire() {
            return p;
        }
        assert!(Instant::now() < deadline, "no permit");
        tokio::time::sleep(ms(5)).await;
    }
}

/// The state machine's scenario: trip, probe, close; trip, failed probe, open; isolate,
/// reset. The transitions it records.
async fn scenario(b: &CircuitBreaker) -> Vec<(BreakerState, BreakerState, TransitionReason)> {
    let log = logged(b);
    for _ in 0..3 {
        fail(b);
    }
    until("open", || b.state() == Open).await;
    assert_eq!(b.try_acquire().unwrap_err().state(), Open);
    tokio::time::sleep(ms(200)).await;
    let probe = permit(b).await;
    assert!(probe.is_probe());
    probe.success(ms(1));
    until("closed", || b.state() == Closed).await;
    for _ in 0..3 {
        fail(b);
    }
    until("open again", || b.state() == Open).await;
    tokio::time::sleep(ms(200)).await;
    permit(b).await.failure(ms(1));
    until("open after the probe failed", || {
        log.lock().unwrap().last().map(|t| t.2) == Some(TransitionReason::ProbeFailed)
    })
    .await;
    b.isolate().await;
    assert_eq!(b.state(), Isolated);
    b.reset().await;
    assert_eq!(b.state(), Closed);
    // The listener hears of a shared breaker's transitions from its backend's task.
    until("the reset is delivered", || {
        log.lock().unwrap().last().map(|t| t.2) == Some(TransitionReason::Reset)
    })
    .await;
    log.lock().unwrap().clone()
}

/// One suite, both backends: the local breaker and the shared one go through the same
/// transitions with the same reasons.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_machine_is_the_same_on_both_backends() {
    let Some((url, _server)) = any_server("the_state_machine_is_the_same_on_both_backends") else {
        return;
    };
    let local = scenario(&rules("inventory").build().unwrap()).await;
    let redis = connect(&url).await;
    let name = unique("inventory");
    let shared = rules(&name).shared(redis.backend()).build().unwrap();
    until("following", || shared.follows_shared_state()).await;
    let remote = scenario(&shared).await;
    use TransitionReason as R;
    let expected = [
        (Closed, Open, R::ConsecutiveFailures { count: 3 }),
        (Open, HalfOpen, R::CooldownElapsed),
        (HalfOpen, Closed, R::ProbesSucceeded { probes: 1 }),
        (Closed, Open, R::ConsecutiveFailures { count: 3 }),
        (Open, HalfOpen, R::CooldownElapsed),
        (HalfOpen, Open, R::ProbeFailed),
        (Open, Isolated, R::Isolated),
        (Isolated, Closed, R::Reset),
    ];
    assert_eq!(local, expected);
    assert_eq!(remote, expected);
    // What the shared breaker cannot keep is refused by name.
    let e = CircuitBreaker::builder(&name)
        .failure_rate(0.5, baton_graph::breaker::BreakerWindow::Count(10), 5)
        .shared(redis.backend())
        .build()
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("circuit breaker `{name}`: its shared state cannot keep `failure_rate.window`")
    );
}

/// Failures on several replicas add up to one trip of all of them; a failure rate over a
/// time window is counted fleet-wide too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_trip_together() {
    let Some((url, _server)) = any_server("replicas_trip_together") else {
        return;
    };
    let name = unique("payments");
    let mut replicas = Vec::new();
    for _ in 0..3 {
        let redis = connect(&url).await;
        let b = rules(&name).shared(redis.backend()).build().unwrap();
        until("following", || b.follows_shared_state()).await;
        replicas.push(b);
    }
    for b in &replicas {
        fail(b);
    }
    for b in &replicas {
        until("every replica open", || b.state() == Open).await;
    }
    let name = unique("ledger");
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let b = CircuitBreaker::builder(&name)
            .failure_rate(
                0.5,
                baton_graph::breaker::BreakerWindow::Time(Duration::from_secs(10)),
                8,
            )
            .shared(connect(&url).await.backend())
            .build()
            .unwrap();
        until("following", || b.follows_shared_state()).await;
        replicas.push(b);
    }
    for b in &replicas {
        for ok in [true, false, true, false] {
            let p = b.try_acquire().unwrap();
            if ok {
                p.success(ms(1))
            } else {
                p.failure(ms(1))
            }
        }
    }
    for b in &replicas {
        until("tripped by the fleet's rate", || b.state() == Open).await;
    }
}

/// Five replicas (each its own connection and orchestrator's breaker) race for the probes
/// of one half-open period: exactly `half_open_probes` are admitted across all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_n_probes_across_replicas() {
    let Some((url, _server)) = any_server("exactly_n_probes_across_replicas") else {
        return;
    };
    let name = unique("search");
    let mut replicas = Vec::new();
    for _ in 0..5 {
        let redis = connect(&url).await;
        let b = rules(&name)
            .half_open_probes(2)
            .shared(redis.backend())
            .build()
            .unwrap();
        until("following", || b.follows_shared_state()).await;
        replicas.push(b);
    }
    for _ in 0..3 {
        fail(&replicas[0]);
    }
    for b in &replicas {
        until("open", || b.state() == Open).await;
    }
    tokio::time::sleep(ms(250)).await;
    let probes = Arc::new(AtomicU32::new(0));
    let mut racers = Vec::new();
    for b in replicas.clone() {
        let probes = Arc::clone(&probes);
        racers.push(tokio::spawn(async move {
            let mut held = Vec::new();
            let end = Instant::now() + Duration::from_millis(1_500);
            while Instant::now() < end {
                if let Ok(p) = b.try_acquire() {
                    assert!(p.is_probe());
                    probes.fetch_add(1, Ordering::SeqCst);
                    held.push(p.generation()); // never answered
                    std::mem::forget(p);
                }
                tokio::time::sleep(ms(1)).await;
            }
            held.len()
        }));
    }
    let mut total = 0;
    for r in racers {
        total += r.await.unwrap();
    }
    assert!(
        replicas.iter().all(CircuitBreaker::follows_shared_state),
        "a replica lost Redis and probed on its own"
    );
    assert_eq!(probes.load(Ordering::SeqCst), 2);
    assert_eq!(total, 2);
}

/// The script itself ignores outcomes sent for an older generation: a batch of failures
/// from before a reset changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_generations_are_ignored() {
    let Some((url, _server)) = any_server("stale_generations_are_ignored") else {
        return;
    };
    let client = redis::Client::open(url.as_str()).unwrap();
    let conn = client.get_multiplexed_async_connection().await.unwrap();
    let script = redis::Script::new(SCRIPT);
    let name = unique("stale");
    let state = format!("baton:{{{name}}}:state");
    let prefix = format!("baton:{{{name}}}:");
    let call = |args: &[&str]| {
        let mut inv = script.key(&state);
        inv.key(&prefix).arg(args);
        let mut conn = conn.clone();
        async move {
            let r: Vec<redis::Value> = inv.invoke_async(&mut conn).await.unwrap();
            let field = |name: &str| {
                let i = r
                    .iter()
                    .position(|v| matches!(v, redis::Value::BulkString(b) if b == name.as_bytes()))
                    .unwrap();
                match &r[i + 1] {
                    redis::Value::Int(n) => *n,
                    v => panic!("{v:?}"),
                }
            };
            (field("state"), field("gen"))
        }
    };
    // Threshold 3, no rate rule, 200 ms open, no growth, 1 probe, 30 s max wait.
    let rules = [
        "configure",
        "threshold",
        "3",
        "open_ms",
        "200",
        "probes",
        "1",
        "max_wait_ms",
        "30000",
    ];
    assert_eq!(call(&rules).await, (0, 0));
    let record = |generation: &'static str, batch: &'static str, failures: &'static str| {
        [
            "record",
            "gen",
            generation,
            "replica",
            "r",
            "batch",
            batch,
            "tail_failures",
            failures,
            "failures",
            failures,
            "calls",
            failures,
        ]
    };
    assert_eq!(call(&record("0", "1", "2")).await, (0, 0));
    assert_eq!(
        call(&["control", "to", "closed"]).await,
        (0, 1),
        "reset: generation 1"
    );
    // Five failures of generation 0, after the reset: ignored.
    assert_eq!(call(&record("0", "2", "5")).await, (0, 1));
    let consecutive: u32 = redis::cmd("HGET")
        .arg(&state)
        .arg("consec")
        .query_async(&mut conn.clone())
        .await
        .unwrap();
    assert_eq!(consecutive, 0);
    // A batch already acknowledged (a resend) is not counted twice.
    assert_eq!(call(&record("1", "3", "2")).await, (0, 1));
    assert_eq!(call(&record("1", "3", "2")).await, (0, 1), "a resend");
    // The current generation counts: one more trips it.
    assert_eq!(call(&record("1", "4", "1")).await, (1, 2));
    // A probe result of an older generation is ignored too.
    assert_eq!(
        call(&["probe_end", "gen", "1", "slot", "1", "result", "succeeded"]).await,
        (1, 2)
    );
}

/// Redis stopped mid-run: runs go on, judged by the local breaker, every report intact;
/// once it is back the breaker resyncs and follows the shared state again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_and_restarted() {
    let Some(mut server) = Server::start("redis_stopped_and_restarted") else {
        return;
    };
    let redis = connect(&server.url()).await;
    let breaker = rules(&unique("stock"))
        .shared(redis.backend())
        .build()
        .unwrap();
    until("following", || breaker.follows_shared_state()).await;
    let log = logged(&breaker);
    let down = Arc::new(AtomicBool::new(false));
    let orch = Orchestrator::builder().build();
    let mut g = orch.graph::<()>();
    let d = Arc::clone(&down);
    let stock = g
        .node("stock")
        .breaker(&breaker)
        .fallback(Fallback::value(0u32))
        .task(move |_ctx, ()| {
            let down = d.load(Ordering::SeqCst);
            async move {
                if down {
                    Err::<u32, BoxError>("503".into())
                } else {
                    Ok(7)
                }
            }
        });
    let graph = g.build().unwrap();
    let mut reports = 0;
    for _ in 0..10 {
        let r = graph.run(()).await.unwrap();
        assert_eq!(r.node(stock).unwrap().outcome(), Outcome::Succeeded);
        assert!(
            !r.node(stock).unwrap().breaker_local(),
            "judged by the shared state"
        );
        reports += 1;
    }
    server.stop();
    // Runs go on while the breaker finds out.
    let deadline = Instant::now() + Duration::from_secs(10);
    while breaker.follows_shared_state() {
        assert!(Instant::now() < deadline, "the loss was never noticed");
        let r = graph.run(()).await.unwrap();
        assert_eq!(r.node(stock).unwrap().outcome(), Outcome::Succeeded);
        reports += 1;
        tokio::time::sleep(ms(5)).await;
    }
    assert_eq!(
        log.lock().unwrap().last().map(|t| t.2),
        Some(TransitionReason::SharedStateLost)
    );
    // The downstream fails: the local breaker trips by itself, the fallback serves.
    down.store(true, Ordering::SeqCst);
    let mut recovered = 0;
    for i in 0..10 {
        let r = graph.run(()).await.unwrap();
        assert_eq!(r.node(stock).unwrap().outcome(), Outcome::Recovered);
        assert!(
            r.node(stock).unwrap().breaker_local(),
            "run {i}: judged locally"
        );
        recovered += 1;
    }
    assert_eq!(breaker.state(), Open, "tripped locally");
    assert_eq!((reports >= 10, recovered), (true, 10), "every run reported");
    down.store(false, Ordering::SeqCst);
    server.restart();
    until("resynced", || breaker.follows_shared_state()).await;
    assert_eq!(
        breaker.state(),
        Closed,
        "the shared state (a fresh server's) is closed"
    );
    let log = log.lock().unwrap().clone();
    assert_eq!(
        log.last().map(|t| t.2),
        Some(TransitionReason::SharedStateResynced),
        "{log:?}"
    );
    let r = graph.run(()).await.unwrap();
    assert_eq!(r.node(stock).unwrap().outcome(), Outcome::Succeeded);
    assert!(!r.node(stock).unwrap().breaker_local(), "shared again");
}

/// A Redis that stalls (`DEBUG SLEEP`) does not slow the calls: they never wait on it, and
/// a manual transition gives up after the backend's timeout and applies locally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_redis_does_not_slow_calls() {
    let Some(server) = Server::start("a_slow_redis_does_not_slow_calls") else {
        return;
    };
    let timeout = ms(50);
    let options = RedisOptions::default().timeout(timeout);
    let redis = RedisBreakers::connect(&server.url(), options)
        .await
        .unwrap();
    let breaker = rules(&unique("quotes"))
        .shared(redis.backend())
        .build()
        .unwrap();
    until("following", || breaker.follows_shared_state()).await;
    let url = server.url();
    let sleeper = std::thread::spawn(move || {
        let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
        redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg(2)
            .exec(&mut conn)
            .unwrap();
    });
    tokio::time::sleep(ms(100)).await;
    let start = Instant::now();
    for _ in 0..1_000 {
        breaker.try_acquire().unwrap().success(ms(1));
        tokio::task::yield_now().await;
    }
    breaker.isolate().await;
    let took = start.elapsed();
    assert!(took < timeout * 20, "calls waited on Redis: {took:?}");
    assert_eq!(breaker.state(), Isolated, "isolated locally at least");
    until("lost", || !breaker.follows_shared_state()).await;
    sleeper.join().unwrap();
    until("resynced", || breaker.follows_shared_state()).await;
}

/// A probe that never answers frees its fleet-wide slot after `half_open_max_wait`: another
/// replica then probes, and its success closes every replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_probe_expires() {
    let Some((url, _server)) = any_server("an_unanswered_probe_expires") else {
        return;
    };
    let name = unique("pricing");
    let make = |redis: RedisBreakers| {
        rules(&name)
            .half_open_max_wait(Duration::from_secs(1))
            .shared(redis.backend())
            .build()
            .unwrap()
    };
    let (a, b) = (make(connect(&url).await), make(connect(&url).await));
    until("following", || {
        a.follows_shared_state() && b.follows_shared_state()
    })
    .await;
    for _ in 0..3 {
        fail(&a);
    }
    until("open", || b.state() == Open).await;
    tokio::time::sleep(ms(250)).await;
    std::mem::forget(permit(&a).await); // a probe that hangs forever
    for _ in 0..5 {
        assert!(
            b.try_acquire().is_err(),
            "b probed while a's probe was live"
        );
        tokio::time::sleep(ms(10)).await;
    }
    permit(&b).await.success(ms(1));
    until("both closed", || a.state() == Closed && b.state() == Closed).await;
}

/// Configured to fail closed, a breaker that loses Redis rejects every call until it
/// resyncs; the loss and the resync are transitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_closed_rejects_while_redis_is_down() {
    let Some(mut server) = Server::start("fail_closed_rejects_while_redis_is_down") else {
        return;
    };
    let options = RedisOptions::default().unreachable(baton_graph::shared::Unreachable::Reject);
    let redis = RedisBreakers::connect(&server.url(), options)
        .await
        .unwrap();
    let breaker = rules(&unique("fx"))
        .shared(redis.backend())
        .build()
        .unwrap();
    until("following", || breaker.follows_shared_state()).await;
    let log = logged(&breaker);
    server.stop();
    until("lost", || {
        if let Ok(p) = breaker.try_acquire() {
            p.success(ms(1));
        }
        !breaker.follows_shared_state()
    })
    .await;
    assert_eq!(breaker.state(), Isolated);
    assert!(breaker.try_acquire().is_err());
    server.restart();
    until("resynced", || breaker.follows_shared_state()).await;
    assert_eq!(breaker.state(), Closed);
    let log = log.lock().unwrap().clone();
    assert_eq!(
        log,
        [
            (Closed, Isolated, TransitionReason::SharedStateLost),
            (Isolated, Closed, TransitionReason::SharedStateResynced),
        ]
    );
}

/// Quorum mode against the real server, four replicas, quorum 2: one bad replica opens its
/// own breaker at once and no other (and the others' failures are not pooled); a second
/// bad replica opens all four, with the quorum as the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_of_bad_replicas_opens_the_fleet() {
    let Some((url, _server)) = any_server("a_quorum_of_bad_replicas_opens_the_fleet") else {
        return;
    };
    let name = unique("catalog");
    let quorum = Quorum::new(2, Duration::from_secs(30)).unwrap();
    let options = RedisOptions::default()
        .timeout(Duration::from_secs(1))
        .quorum(quorum);
    let mut replicas = Vec::new();
    for _ in 0..4 {
        let redis = RedisBreakers::connect(&url, options.clone()).await.unwrap();
        let b = CircuitBreaker::builder(&name)
            .consecutive_failures(3)
            .open_duration(Duration::from_secs(30))
            .shared(redis.backend())
            .build()
            .unwrap();
        until("following", || b.follows_shared_state()).await;
        replicas.push(b);
    }
    let logs: Vec<_> = replicas.iter().map(logged).collect();
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let set = format!("baton:{{{name}}}:q");
    for _ in 0..3 {
        fail(&replicas[0]);
    }
    assert_eq!(replicas[0].state(), Open, "its own trip opens it at once");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n: u32 = redis::cmd("ZCARD")
            .arg(&set)
            .query_async(&mut conn)
            .await
            .unwrap();
        if n == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "the trip never reached Redis");
        tokio::time::sleep(ms(5)).await;
    }
    // Two failures on each healthy replica: six in the fleet, none trips.
    for b in &replicas[1..] {
        fail(b);
        fail(b);
    }
    tokio::time::sleep(ms(600)).await; // past two resyncs
    for b in &replicas[1..] {
        assert_eq!(b.state(), Closed, "one bad replica opened another");
    }
    assert_eq!(replicas[0].state(), Open);
    // A second bad replica: the quorum is reached, every replica opens.
    fail(&replicas[1]);
    for b in &replicas {
        until("every replica open", || {
            b.state() == Open && b.follows_shared_state()
        })
        .await;
    }
    let own = (
        Closed,
        Open,
        TransitionReason::ConsecutiveFailures { count: 3 },
    );
    let fleet = (
        Closed,
        Open,
        TransitionReason::ReplicasTripped { replicas: 2 },
    );
    assert_eq!(*logs[0].lock().unwrap(), [own], "no second transition");
    assert_eq!(*logs[1].lock().unwrap(), [own]);
    for log in &logs[2..] {
        assert_eq!(*log.lock().unwrap(), [fleet]);
    }
    assert!(Quorum::new(0, Duration::from_secs(1)).is_err());
}

/// Quorum mode: a replica open by its own trip probes on its own after its cooldown, and
/// once its probe closes it, it follows the shared state again (which never opened).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_open_alone_closes_and_follows_again() {
    let Some((url, _server)) = any_server("a_replica_open_alone_closes_and_follows_again") else {
        return;
    };
    let name = unique("reviews");
    let quorum = Quorum::new(2, Duration::from_secs(30)).unwrap();
    let options = RedisOptions::default()
        .timeout(Duration::from_secs(1))
        .quorum(quorum);
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let redis = RedisBreakers::connect(&url, options.clone()).await.unwrap();
        let b = rules(&name).shared(redis.backend()).build().unwrap();
        until("following", || b.follows_shared_state()).await;
        replicas.push(b);
    }
    let (a, b) = (&replicas[0], &replicas[1]);
    let log = logged(b);
    for _ in 0..3 {
        fail(a);
    }
    assert_eq!(a.state(), Open);
    assert!(!a.follows_shared_state(), "judges alone");
    tokio::time::sleep(ms(250)).await;
    let probe = a.try_acquire().expect("its own probe, at once");
    assert!(probe.is_probe());
    probe.success(ms(1));
    assert_eq!(a.state(), Closed);
    until("following again", || a.follows_shared_state()).await;
    assert_eq!(b.state(), Closed);
    assert!(log.lock().unwrap().is_empty(), "the fleet never moved");
}
