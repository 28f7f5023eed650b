//! The fleet rate limiter's `baton_rate_limit_shared_state_reached` gauge against a real
//! `redis-server`: 1 while Redis decides, 0 once it is lost, 1 again when it answers. The
//! recorder is global (the transitions are made on the runtime's threads): this file holds
//! one test.

#![cfg(feature = "metrics")]

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use baton_graph::RateLimiter;
use baton_redis::{LimitFallback, RedisBreakers, RedisOptions};
use common::{Server, ms, unique};
use metrics::{
    Counter, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};

/// Every gauge's last value, by name and `limiter` label.
type Gauges = Arc<Mutex<BTreeMap<(String, String), f64>>>;

struct Keeper(Gauges);

struct Handle {
    id: (String, String),
    gauges: Gauges,
}

impl GaugeFn for Handle {
    fn increment(&self, value: f64) {
        *self
            .gauges
            .lock()
            .unwrap()
            .entry(self.id.clone())
            .or_default() += value;
    }

    fn decrement(&self, value: f64) {
        *self
            .gauges
            .lock()
            .unwrap()
            .entry(self.id.clone())
            .or_default() -= value;
    }

    fn set(&self, value: f64) {
        self.gauges.lock().unwrap().insert(self.id.clone(), value);
    }
}

impl Recorder for Keeper {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
        Counter::noop()
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let limiter = key
            .labels()
            .find(|l| l.key() == "limiter")
            .map(|l| l.value().to_owned())
            .unwrap_or_default();
        Gauge::from_arc(Arc::new(Handle {
            id: (key.name().to_owned(), limiter),
            gauges: Arc::clone(&self.0),
        }))
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

fn gauges() -> &'static Gauges {
    static GAUGES: OnceLock<Gauges> = OnceLock::new();
    GAUGES.get_or_init(|| {
        let gauges = Gauges::default();
        metrics::set_global_recorder(Keeper(Arc::clone(&gauges))).unwrap();
        gauges
    })
}

/// Waits (up to 10 s, asking for a permit every 10 ms) until the gauge reads `value`.
async fn until_gauge(limiter: &RateLimiter, name: &str, value: f64) {
    let id = (
        "baton_rate_limit_shared_state_reached".to_owned(),
        name.to_owned(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while gauges().lock().unwrap().get(&id) != Some(&value) {
        assert!(
            Instant::now() < deadline,
            "the gauge never read {value}: {:?}",
            gauges().lock().unwrap().get(&id)
        );
        let _ = limiter.acquire(None).await;
        tokio::time::sleep(ms(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_limiter_sets_a_shared_state_gauge() {
    let Some(mut server) = Server::start("the_fleet_limiter_sets_a_shared_state_gauge") else {
        return;
    };
    let _ = gauges();
    let name = unique("quota");
    let options = RedisOptions::default()
        .timeout(ms(100))
        .resync_every(ms(100));
    let redis = RedisBreakers::connect(&server.url(), options)
        .await
        .unwrap();
    let limiter = RateLimiter::new(&name, 1000, Duration::from_secs(1))
        .shared(redis.rate_limit(LimitFallback::Reject));
    assert!(limiter.acquire(None).await.is_ok());
    server.stop();
    until_gauge(&limiter, &name, 0.0).await;
    server.restart();
    until_gauge(&limiter, &name, 1.0).await;
}
