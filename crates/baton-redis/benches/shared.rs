//! The cost of a shared breaker: the closed path (ask for a permit, report a success)
//! next to a local breaker's, the round trip of a manual transition, and a permit of a rate
//! limiter of this process next to one of a limiter shared by the fleet. Needs a Redis
//! server: `BATON_REDIS_URL`, or a `redis-server` it starts on a free loopback port. Run
//! with `cargo bench -p baton-redis --bench shared`.

use std::hint::black_box;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use baton_graph::{CircuitBreaker, RateLimiter};
use baton_redis::{LimitFallback, RedisBreakers, RedisOptions};
use criterion::{Criterion, criterion_group, criterion_main};

/// A server of the bench's own, killed when dropped.
struct Server(Option<Child>);

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn server() -> (String, Server) {
    if let Ok(url) = std::env::var("BATON_REDIS_URL") {
        return (url, Server(None));
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server (or set BATON_REDIS_URL)");
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        std::thread::sleep(Duration::from_millis(10));
    }
    (format!("redis://127.0.0.1:{port}/"), Server(Some(child)))
}

fn builder(name: &str) -> baton_graph::breaker::CircuitBreakerBuilder {
    CircuitBreaker::builder(name)
        .consecutive_failures(5)
        .open_duration(Duration::from_secs(5))
}

fn bench(c: &mut Criterion) {
    let (url, _server) = server();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let redis = rt
        .block_on(RedisBreakers::connect(&url, RedisOptions::default()))
        .unwrap();
    let local = builder("bench-local").build().unwrap();
    let shared = builder("bench-shared")
        .shared(redis.backend())
        .build()
        .unwrap();
    while !shared.follows_shared_state() {
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut g = c.benchmark_group("breaker_closed");
    g.bench_function("local", |b| {
        b.iter(|| {
            black_box(&local)
                .try_acquire()
                .unwrap()
                .success(Duration::ZERO)
        });
    });
    g.bench_function("shared_redis", |b| {
        b.iter(|| {
            black_box(&shared)
                .try_acquire()
                .unwrap()
                .success(Duration::ZERO)
        });
    });
    g.finish();
    let mut g = c.benchmark_group("breaker_round_trip");
    g.bench_function("isolate_then_reset", |b| {
        b.to_async(&rt).iter(|| async {
            shared.isolate().await;
            shared.reset().await;
        });
    });
    g.finish();
    // A rate far above what the bench asks for: every permit is granted at once.
    let limiter = || RateLimiter::new("bench-quota", u32::MAX, Duration::from_secs(1));
    let local = limiter();
    let fleet = limiter().shared(redis.rate_limit(LimitFallback::Reject));
    let mut g = c.benchmark_group("rate_limit_permit");
    g.bench_function("local", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(&local).acquire(None).await.unwrap() });
    });
    g.bench_function("fleet_redis", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(&fleet).acquire(None).await.unwrap() });
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
