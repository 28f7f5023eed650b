//! The closed path of a shared breaker and of a local one (ask for a permit, report a
//! success), in a loop to count instructions with callgrind:
//! `valgrind --tool=callgrind --toggle-collect=closed_path::hot_loop <binary> shared 100000`.
//! Needs `BATON_REDIS_URL`.

use std::hint::black_box;
use std::time::Duration;

use baton_graph::CircuitBreaker;
use baton_redis::{RedisBreakers, RedisOptions};

/// `n` closed-path calls on `b`.
#[inline(never)]
fn hot_loop(b: &CircuitBreaker, n: u64) {
    for _ in 0..n {
        if let Ok(p) = black_box(b).try_acquire() {
            p.success(Duration::ZERO);
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_else(|| "shared".into());
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let Ok(url) = std::env::var("BATON_REDIS_URL") else {
        eprintln!("set BATON_REDIS_URL");
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let redis = rt
        .block_on(RedisBreakers::connect(&url, RedisOptions::default()))
        .unwrap();
    let builder = CircuitBreaker::builder(format!("closed-path-{which}"))
        .consecutive_failures(5)
        .open_duration(Duration::from_secs(5));
    let b = if which == "shared" {
        builder.shared(redis.backend()).build().unwrap()
    } else {
        builder.build().unwrap()
    };
    while which == "shared" && !b.follows_shared_state() {
        std::thread::sleep(Duration::from_millis(5));
    }
    hot_loop(&b, n);
}
