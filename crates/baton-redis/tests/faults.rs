//! The Redis backend under faults, each against a real `redis-server`: a paused server, a
//! partition, a store that refuses the script, a flood of published transitions, a server
//! that is down at start-up. Real time is unavoidable here: the tests assert outcomes and
//! wait with generous bounds.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use baton_graph::shared::Unreachable;
use baton_graph::{
    BoxError, CircuitBreaker, Fallback, Orchestrator, Outcome,
    breaker::{BreakerState, TransitionReason},
};
use baton_redis::{ConnectError, OptionsError, RedisBreakers, RedisOptions};
use common::proxy::Proxy;
use common::{Server, any_server, connect, logged, ms, unique, until};

use BreakerState::{Closed, Isolated, Open};

fn rules(name: &str) -> baton_graph::breaker::CircuitBreakerBuilder {
    CircuitBreaker::builder(name)
        .consecutive_failures(3)
        .open_duration(ms(200))
}

fn fail(b: &CircuitBreaker) {
    b.try_acquire().unwrap().failure(ms(1));
}

/// A probe request queued while Redis is paused (`SIGSTOP`) reaches it after its caller
/// gave up: it must not take the fleet's probe slot. With the slot held for the probe
/// timeout (30 s here), every replica would stay half-open with no probe running; instead
/// a caller's probe after the resume closes the fleet at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_request_queued_during_a_pause_takes_no_slot() {
    let Some(server) = Server::start("a_probe_request_queued_during_a_pause_takes_no_slot") else {
        return;
    };
    let name = unique("stuck");
    let options = RedisOptions::default().timeout(ms(100));
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let redis = RedisBreakers::connect(&server.url(), options.clone())
            .await
            .unwrap();
        let b = rules(&name)
            .half_open_max_wait(Duration::from_secs(30))
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
    tokio::time::sleep(ms(250)).await; // past the cooldown
    server.pause();
    // One caller asks for a probe and is rejected: its request waits in the socket.
    assert!(replicas[0].try_acquire().is_err());
    until("lost", || !replicas[0].follows_shared_state()).await;
    tokio::time::sleep(ms(300)).await;
    server.resume();
    let resumed = Instant::now();
    for b in &replicas {
        until("following again", || b.follows_shared_state()).await;
    }
    // Callers go on: a probe is granted somewhere in the fleet, and it succeeds.
    let deadline = resumed + Duration::from_secs(5);
    'probe: loop {
        assert!(
            Instant::now() < deadline,
            "no probe in 5 s after the resume: a slot is held by nobody"
        );
        for b in &replicas {
            if let Ok(p) = b.try_acquire() {
                p.success(ms(1));
                break 'probe;
            }
        }
        tokio::time::sleep(ms(5)).await;
    }
    for b in &replicas {
        until("closed", || b.state() == Closed && b.follows_shared_state()).await;
    }
    eprintln!(
        "from the resume to a closed, following fleet: {:?}",
        resumed.elapsed()
    );
}

/// The fleet's probe slot lives no longer than the attempt it was claimed for: a caller
/// with a 300 ms timeout asks for a probe (its node is rejected and falls back), and the
/// slot it claimed expires with that timeout, not after the 30 s half-open wait, so that
/// another replica probes and closes the fleet soon after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_slot_expires_with_its_callers_attempt_deadline() {
    let Some(server) = Server::start("a_probe_slot_expires_with_its_callers_attempt_deadline")
    else {
        return;
    };
    let name = unique("slot");
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let redis = connect(&server.url()).await;
        let b = rules(&name)
            .half_open_max_wait(Duration::from_secs(30))
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
    tokio::time::sleep(ms(250)).await; // past the cooldown
    let orch = Orchestrator::builder().build();
    let mut g = orch.graph::<()>();
    let node = g
        .node("stock")
        .breaker(&replicas[0])
        .timeout(ms(300))
        .fallback(Fallback::value(0u32))
        .task(|_ctx, ()| async { Ok::<u32, BoxError>(7) });
    let graph = g.build().unwrap();
    let r = graph.run(()).await.unwrap();
    assert_eq!(r.node(node).unwrap().outcome(), Outcome::Recovered);
    let mut conn = redis::Client::open(server.url().as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let pattern = format!("baton:{{{name}}}:p:*");
    let mut slots: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while slots.is_empty() {
        assert!(Instant::now() < deadline, "no probe slot was claimed");
        tokio::time::sleep(ms(5)).await;
        slots = redis::cmd("KEYS")
            .arg(&pattern)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&slots[0])
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        (0..=300).contains(&ttl),
        "the slot {} lives {ttl} ms, past its caller's 300 ms timeout",
        slots[0]
    );
    // Once it expired, another replica gets the slot, probes, and closes the fleet.
    let deadline = Instant::now() + Duration::from_secs(5);
    'probe: loop {
        assert!(
            Instant::now() < deadline,
            "no probe in 5 s: the slot is still held"
        );
        if let Ok(p) = replicas[1].try_acquire() {
            p.success(ms(1));
            break 'probe;
        }
        tokio::time::sleep(ms(5)).await;
    }
    for b in &replicas {
        until("closed", || b.state() == Closed && b.follows_shared_state()).await;
    }
}

/// Acknowledgements are per batch: an older batch (stuck on a dead connection) that
/// reaches Redis after a newer one is still counted, and a resend of either is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_batch_after_a_newer_one_is_counted() {
    let Some(server) = Server::start("an_older_batch_after_a_newer_one_is_counted") else {
        return;
    };
    let mut conn = redis::Client::open(server.url().as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let script = redis::Script::new(baton_redis::SCRIPT);
    let name = unique("batches");
    let state = format!("baton:{{{name}}}:state");
    let prefix = format!("baton:{{{name}}}:");
    let configure = [
        "configure",
        "threshold",
        "5",
        "open_ms",
        "200",
        "probes",
        "1",
    ];
    let record = |batch: &'static str| {
        let args = ["record", "gen", "0", "replica", "r", "batch", batch];
        let counts = ["tail_failures", "1", "failures", "1", "calls", "1"];
        [&args[..], &counts[..]].concat()
    };
    let mut call = async |args: &[&str]| {
        let mut inv = script.key(&state);
        inv.key(&prefix).arg(args);
        let _: redis::Value = inv.invoke_async(&mut conn).await.unwrap();
    };
    call(&configure).await;
    for batch in ["2", "1", "2", "1", "3"] {
        call(&record(batch)).await;
    }
    let consecutive: u32 = redis::cmd("HGET")
        .arg(&state)
        .arg("consec")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(consecutive, 3, "batches 1, 2 and 3, each counted once");
}

/// Outcomes whose batch was sent into a partition (the commands never reach Redis) are
/// kept and sent again once Redis answers: two failures before the partition and one
/// after trip the fleet's breaker with a threshold of three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_sent_into_a_partition_are_kept() {
    let Some((url, _server)) = any_server("outcomes_sent_into_a_partition_are_kept") else {
        return;
    };
    let port = url
        .trim_end_matches('/')
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let proxy = Proxy::start(port).await;
    let options = RedisOptions::default().timeout(ms(200));
    let redis = RedisBreakers::connect(&proxy.url(), options).await.unwrap();
    let name = unique("ledger");
    let b = rules(&name).shared(redis.backend()).build().unwrap();
    until("following", || b.follows_shared_state()).await;
    proxy.black_hole(true);
    fail(&b);
    fail(&b);
    until("lost", || !b.follows_shared_state()).await;
    proxy.black_hole(false);
    proxy.cut();
    until("following again", || b.follows_shared_state()).await;
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let state = format!("baton:{{{name}}}:state");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let consecutive: Option<u32> = redis::cmd("HGET")
            .arg(&state)
            .arg("consec")
            .query_async(&mut conn)
            .await
            .unwrap();
        if consecutive == Some(2) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the failures sent into the partition never reached Redis: {consecutive:?}"
        );
        tokio::time::sleep(ms(10)).await;
    }
    fail(&b);
    until("the fleet tripped", || {
        b.state() == Open && b.follows_shared_state()
    })
    .await;
}

/// A store that refuses the script from the very first call (an ACL user without
/// `EVALSHA` and `EVAL`) is lost like any: a transition, and fail-closed rejects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_refuses_every_call_is_lost() {
    let Some((url, _server)) = any_server("a_store_that_refuses_every_call_is_lost") else {
        return;
    };
    let user = unique("noscript");
    let mut admin = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    redis::cmd("ACL")
        .arg(
            &[
                "SETUSER",
                &user,
                "on",
                ">pw",
                "~*",
                "&*",
                "+@all",
                "-@scripting",
            ][..],
        )
        .exec_async(&mut admin)
        .await
        .unwrap();
    let limited = url.replacen("redis://", &format!("redis://{user}:pw@"), 1);
    let options = RedisOptions::default().unreachable(Unreachable::Reject);
    let redis = RedisBreakers::connect(&limited, options).await.unwrap();
    let b = rules(&unique("refused"))
        .shared(redis.backend())
        .build()
        .unwrap();
    let log = logged(&b);
    until("lost", || b.state() == Isolated).await;
    assert!(!b.follows_shared_state());
    assert!(b.try_acquire().is_err(), "fail-closed refuses");
    tokio::time::sleep(ms(600)).await; // past two retries: still one transition
    assert_eq!(
        *log.lock().unwrap(),
        [(Closed, Isolated, TransitionReason::SharedStateLost)]
    );
    redis::cmd("ACL")
        .arg(&["DELUSER", &user][..])
        .exec_async(&mut admin)
        .await
        .unwrap();
}

/// Under a flood of published transitions (each makes the backend read the shared state),
/// a reply slower than a manual transition's never moves the breaker back: a hundred
/// isolate, reset pairs make exactly two hundred transitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_older_than_the_adopted_generation_are_dropped() {
    let Some((url, _server)) = any_server("replies_older_than_the_adopted_generation_are_dropped")
    else {
        return;
    };
    let redis = connect(&url).await;
    let name = unique("flood");
    let b = rules(&name).shared(redis.backend()).build().unwrap();
    until("following", || b.follows_shared_state()).await;
    let log = logged(&b);
    let stop = Arc::new(AtomicBool::new(false));
    let mut flooders = Vec::new();
    for _ in 0..2 {
        let mut conn = redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let channel = format!("baton:{{{name}}}:transitions");
        let stop = Arc::clone(&stop);
        flooders.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let _: Result<(), _> = redis::cmd("PUBLISH")
                    .arg(&channel)
                    .arg(0)
                    .query_async(&mut conn)
                    .await;
            }
        }));
    }
    for _ in 0..100 {
        b.isolate().await;
        b.reset().await;
    }
    stop.store(true, Ordering::SeqCst);
    for f in flooders {
        f.await.unwrap();
    }
    until("the last reset is delivered", || {
        log.lock().unwrap().len() >= 200
    })
    .await;
    tokio::time::sleep(ms(600)).await; // past two resyncs
    assert!(
        b.follows_shared_state(),
        "Redis was lost: the test proves nothing"
    );
    let log = log.lock().unwrap().clone();
    assert_eq!(log.len(), 200, "extra transitions: {log:?}");
    for pair in log.chunks(2) {
        assert_eq!(
            pair,
            [
                (Closed, Isolated, TransitionReason::Isolated),
                (Isolated, Closed, TransitionReason::Reset)
            ]
        );
    }
}

/// Start-up: `connect` names Redis and the URL when the server is down, options with a
/// zero timeout or interval are refused with a typed error, and `connect_lazy` judges
/// alone until the server answers, then follows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_without_redis() {
    let Some(mut server) = Server::start("start_up_without_redis") else {
        return;
    };
    server.stop();
    let url = server.url();
    let e = RedisBreakers::connect(&url, RedisOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(e, ConnectError::Unreachable { .. }), "{e:?}");
    let message = e.to_string();
    assert!(
        message.starts_with(&format!("cannot reach Redis at `{url}`: ")),
        "{message}"
    );
    for (options, setting) in [
        (RedisOptions::default().timeout(Duration::ZERO), "timeout"),
        (
            RedisOptions::default().flush_every(Duration::ZERO),
            "flush_every",
        ),
        (
            RedisOptions::default().resync_every(Duration::ZERO),
            "resync_every",
        ),
    ] {
        let e = RedisBreakers::connect(&url, options).await.unwrap_err();
        assert!(
            matches!(e, ConnectError::Options(OptionsError::Zero { setting: s }) if s == setting),
            "{e:?}"
        );
    }
    let bad = RedisBreakers::connect("http://nowhere", RedisOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(bad, ConnectError::Url { .. }), "{bad:?}");
    let redis = RedisBreakers::connect_lazy(&url, RedisOptions::default()).unwrap();
    let b = rules(&unique("late"))
        .shared(redis.backend())
        .build()
        .unwrap();
    let log = logged(&b);
    until("lost", || !log.lock().unwrap().is_empty()).await;
    assert_eq!(
        b.try_acquire().map(|p| p.success(ms(1))),
        Ok(()),
        "judged alone"
    );
    server.restart();
    until("joined", || b.follows_shared_state()).await;
    assert_eq!(
        *log.lock().unwrap(),
        [
            (Closed, Closed, TransitionReason::SharedStateLost),
            (Closed, Closed, TransitionReason::SharedStateResynced),
        ]
    );
}
