//! A rate limiter shared by the fleet, against a real `redis-server`: four replicas under
//! a fleet limit of 100 per second admit 1 000 requests in 10 s (within 5 %) with Redis
//! healthy, paused for 3 s (`SIGSTOP`), and stopped for 3 s then restarted; each replica
//! reports its fallback and its return as transitions. Real time is unavoidable here: the
//! tests count what was admitted, with a tolerance far above the scheduling noise.

mod common;

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_graph::RateLimiter;
use baton_redis::{LimitFallback, RedisBreakers, RedisOptions};
use common::{Server, any_server, ms, unique};

const REPLICAS: u32 = 4;

/// Runs four replicas for 10 s, each asking for a permit every 2 ms; `fault` is called at
/// the start of every second (0 to 9). What they admitted, and each one's transitions.
async fn fleet(url: &str, mut fault: impl FnMut(u32)) -> (u32, Vec<Vec<bool>>) {
    let name = unique("quota");
    let options = RedisOptions::default().timeout(ms(100));
    let share = LimitFallback::Share(NonZeroU32::new(REPLICAS).unwrap());
    let admitted = Arc::new(AtomicU32::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    let mut logs = Vec::new();
    for _ in 0..REPLICAS {
        let redis = RedisBreakers::connect(url, options.clone()).await.unwrap();
        let backend = redis.rate_limit(share);
        let log = Arc::new(Mutex::new(Vec::new()));
        let l = Arc::clone(&log);
        backend.on_transition(move |t| l.lock().unwrap().push(t.shared));
        logs.push(log);
        let limiter = RateLimiter::new(&name, 100, Duration::from_secs(1))
            .burst(REPLICAS)
            .shared(backend);
        let (admitted, stop) = (Arc::clone(&admitted), Arc::clone(&stop));
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                if limiter.acquire(None).await.is_ok() {
                    admitted.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(ms(2)).await;
            }
        }));
    }
    for second in 0..10 {
        fault(second);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await.unwrap();
    }
    let logs = logs.iter().map(|l| l.lock().unwrap().clone()).collect();
    (admitted.load(Ordering::SeqCst), logs)
}

fn assert_within_5_percent(admitted: u32) {
    assert!(
        (950..=1050).contains(&admitted),
        "admitted {admitted} in 10 s, not 1000 ± 5 %"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_limit_holds_with_redis_healthy() {
    let Some((url, _server)) = any_server("the_fleet_limit_holds_with_redis_healthy") else {
        return;
    };
    let (admitted, logs) = fleet(&url, |_| {}).await;
    eprintln!("healthy: admitted {admitted} in 10 s");
    assert_within_5_percent(admitted);
    assert!(logs.iter().all(Vec::is_empty), "Redis was lost: {logs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_limit_holds_with_redis_paused() {
    let Some(server) = Server::start("the_fleet_limit_holds_with_redis_paused") else {
        return;
    };
    let (admitted, logs) = fleet(&server.url(), |second| match second {
        3 => server.pause(),
        6 => server.resume(),
        _ => {}
    })
    .await;
    eprintln!("paused 3 s: admitted {admitted} in 10 s");
    assert_within_5_percent(admitted);
    for log in logs {
        assert_eq!(log, [false, true], "lost, then shared again");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_limit_holds_with_redis_restarted() {
    let Some(mut server) = Server::start("the_fleet_limit_holds_with_redis_restarted") else {
        return;
    };
    let (admitted, logs) = fleet(&server.url(), |second| match second {
        3 => server.stop(),
        6 => server.restart(),
        _ => {}
    })
    .await;
    eprintln!("stopped 3 s: admitted {admitted} in 10 s");
    assert_within_5_percent(admitted);
    for log in logs {
        assert_eq!(log, [false, true], "lost, then shared again");
    }
}
