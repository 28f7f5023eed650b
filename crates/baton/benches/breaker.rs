//! The closed path of a circuit breaker: ask for a permit, report a success.
//!
//! baton's `CircuitBreaker` next to the `failsafe` and `recloser` crates, configured
//! equivalently (trip on 5 consecutive failures, 5 s open), single-threaded and with a
//! second thread hammering the same breaker. Run with
//! `cargo bench -p baton-graph --bench breaker`; the medians land in
//! `target/criterion/breaker_closed_*/*/new/estimates.json`.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use baton_graph::{CircuitBreaker, breaker::BreakerWindow};
use criterion::{Criterion, criterion_group, criterion_main};
use failsafe::CircuitBreaker as _;

const OPEN: Duration = Duration::from_secs(5);

fn baton_consecutive() -> CircuitBreaker {
    CircuitBreaker::builder("bench")
        .consecutive_failures(5)
        .open_duration(OPEN)
        .build()
        .unwrap()
}

fn baton_rate_window() -> CircuitBreaker {
    CircuitBreaker::builder("bench")
        .failure_rate(0.5, BreakerWindow::Count(100), 20)
        .open_duration(OPEN)
        .build()
        .unwrap()
}

type Failsafe = failsafe::StateMachine<
    failsafe::failure_policy::ConsecutiveFailures<failsafe::backoff::Constant>,
    (),
>;

fn failsafe_consecutive() -> Failsafe {
    failsafe::Config::new()
        .failure_policy(failsafe::failure_policy::consecutive_failures(
            5,
            failsafe::backoff::constant(OPEN),
        ))
        .build()
}

/// recloser only has rate rules: "the last 5 calls all failed" is 5 consecutive failures.
fn recloser_consecutive() -> recloser::Recloser {
    recloser::Recloser::custom()
        .error_rate(1.0)
        .closed_len(5)
        .half_open_len(1)
        .open_wait(OPEN)
        .build()
}

#[inline]
fn baton_call(b: &CircuitBreaker) {
    let permit = b.try_acquire().unwrap();
    permit.success(black_box(Duration::ZERO));
}

#[inline]
fn failsafe_call(b: &Failsafe) {
    black_box(b.call(|| Ok::<u32, ()>(black_box(1)))).unwrap();
}

#[inline]
fn recloser_call(b: &recloser::Recloser) {
    black_box(b.call(|| Ok::<u32, ()>(black_box(1)))).unwrap();
}

/// Times `iters` calls on this thread while another thread makes calls on the same
/// breaker the whole time.
fn contended<B: Sync>(b: &B, call: impl Fn(&B) + Sync, iters: u64) -> Duration {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..64 {
                    call(b);
                }
            }
        });
        // Let the other thread get going.
        let warm = Instant::now();
        while warm.elapsed() < Duration::from_micros(200) {
            call(b);
        }
        let start = Instant::now();
        for _ in 0..iters {
            call(b);
        }
        let elapsed = start.elapsed();
        stop.store(true, Ordering::Relaxed);
        elapsed
    })
}

fn closed_path(c: &mut Criterion) {
    let consecutive = baton_consecutive();
    let rate = baton_rate_window();
    let fs = failsafe_consecutive();
    let rc = recloser_consecutive();

    let mut g = c.benchmark_group("breaker_closed_1_thread");
    g.bench_function("baton", |bch| bch.iter(|| baton_call(&consecutive)));
    g.bench_function("failsafe", |bch| bch.iter(|| failsafe_call(&fs)));
    g.bench_function("recloser", |bch| bch.iter(|| recloser_call(&rc)));
    g.bench_function("baton_rate_window", |bch| bch.iter(|| baton_call(&rate)));
    g.finish();

    let mut g = c.benchmark_group("breaker_closed_2_threads");
    g.bench_function("baton", |bch| {
        bch.iter_custom(|n| contended(&consecutive, baton_call, n));
    });
    g.bench_function("failsafe", |bch| {
        bch.iter_custom(|n| contended(&fs, failsafe_call, n));
    });
    g.bench_function("recloser", |bch| {
        bch.iter_custom(|n| contended(&rc, recloser_call, n));
    });
    g.bench_function("baton_rate_window", |bch| {
        bch.iter_custom(|n| contended(&rate, baton_call, n));
    });
    g.finish();

    // The breakers must still be closed: the benchmark measured the closed path.
    assert!(!consecutive.is_open() && !rate.is_open());
}

criterion_group!(benches, closed_path);
criterion_main!(benches);
