//! The circuit breaker's contract (`docs/contract.md`, rule 8), on tokio's paused clock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_graph::{
    CircuitBreaker,
    breaker::{
        BreakerConfigError, BreakerState, BreakerTransition, BreakerWindow, TransitionReason,
    },
};
use tokio::time::{Instant, advance};

use BreakerState::{Closed, HalfOpen, Open};

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

fn fail(b: &CircuitBreaker) {
    b.try_acquire().unwrap().failure(ms(1));
}

fn succeed(b: &CircuitBreaker) {
    b.try_acquire().unwrap().success(ms(1));
}

fn consecutive(n: u32, cooldown: Duration) -> CircuitBreaker {
    CircuitBreaker::builder("inventory")
        .consecutive_failures(n)
        .open_duration(cooldown)
        .build()
        .unwrap()
}

/// A classic log: threshold 3, cooldown 200 ms. Closed → open after 3 failures,
/// rejections, half-open after 200 ms, the failed probe re-opens with a *fresh* cooldown,
/// the next probe succeeds → closed; then failures are counted again from zero.
#[tokio::test(start_paused = true)]
async fn a_threshold_of_three_and_a_200ms_cooldown_in_order() {
    let t0 = Instant::now();
    let b = consecutive(3, ms(200));
    let log = logged(&b);

    fail(&b);
    fail(&b);
    assert_eq!(b.state(), Closed);
    fail(&b);
    assert_eq!(b.state(), Open);
    for _ in 0..2 {
        let e = b.try_acquire().unwrap_err();
        assert_eq!((e.state(), e.retry_after()), (Open, Some(ms(200))));
    }

    advance(ms(200)).await;
    let probe = b.try_acquire().unwrap();
    assert!(probe.is_probe());
    assert_eq!(b.state(), HalfOpen);
    assert_eq!(b.try_acquire().unwrap_err().state(), HalfOpen); // one trial only
    advance(ms(1)).await;
    probe.failure(ms(1));
    // Fresh cooldown from the failed probe, not from the original trip.
    assert_eq!(b.try_acquire().unwrap_err().retry_after(), Some(ms(200)));
    advance(ms(199)).await;
    assert_eq!(b.try_acquire().unwrap_err().retry_after(), Some(ms(1)));

    advance(ms(1)).await;
    b.try_acquire().unwrap().success(ms(1));
    assert_eq!(b.state(), Closed);
    fail(&b); // counted: 1
    succeed(&b); // reset
    fail(&b);
    fail(&b);
    assert_eq!(b.state(), Closed);

    use TransitionReason::*;
    assert_eq!(
        shape(&log),
        [
            (1, Closed, Open, ConsecutiveFailures { count: 3 }),
            (2, Open, HalfOpen, CooldownElapsed),
            (3, HalfOpen, Open, ProbeFailed),
            (4, Open, HalfOpen, CooldownElapsed),
            (5, HalfOpen, Closed, ProbesSucceeded { probes: 1 }),
        ]
    );
    let at: Vec<Duration> = log.lock().unwrap().iter().map(|t| t.at() - t0).collect();
    assert_eq!(at, [ms(0), ms(200), ms(201), ms(401), ms(401)]);
    assert_eq!(
        log.lock().unwrap()[0].to_string(),
        "circuit breaker `inventory` #1: closed -> open (3 consecutive failures)"
    );
}

#[tokio::test(start_paused = true)]
async fn only_failures_count_and_a_success_resets_the_run() {
    let b = consecutive(3, ms(200));
    fail(&b);
    fail(&b);
    succeed(&b);
    fail(&b);
    fail(&b);
    // Ignored errors and cancelled calls neither count nor reset.
    b.try_acquire().unwrap().ignore();
    drop(b.try_acquire().unwrap());
    assert_eq!(b.state(), Closed);
    fail(&b);
    assert_eq!(b.state(), Open);
    assert!(b.is_open());
}

#[tokio::test(start_paused = true)]
async fn failure_rate_over_a_count_window_waits_for_min_calls() {
    let b = CircuitBreaker::builder("rate")
        .failure_rate(0.5, BreakerWindow::Count(10), 6)
        .build()
        .unwrap();
    let log = logged(&b);
    for _ in 0..5 {
        fail(&b); // 100 % failures, but fewer than min_calls
    }
    assert_eq!(
        b.state(),
        Closed,
        "no default consecutive rule with a rate rule"
    );
    fail(&b); // 6 calls, 6 failures
    assert_eq!(b.state(), Open);
    assert_eq!(
        shape(&log)[0].3,
        TransitionReason::FailureRate {
            rate: 1.0,
            calls: 6
        }
    );

    // Only the last 10 calls count: 5 failures spread among successes.
    let b = CircuitBreaker::builder("rate")
        .failure_rate(0.5, BreakerWindow::Count(10), 10)
        .build()
        .unwrap();
    for i in 0..40 {
        if i % 3 == 0 { fail(&b) } else { succeed(&b) }
    }
    assert_eq!(b.state(), Closed); // at most 4 of any 10 consecutive calls failed
    let mut extra = 0;
    while b.state() == Closed {
        fail(&b);
        extra += 1;
    }
    assert_eq!(extra, 2); // calls 32..=41: 33, 36, 39, 40, 41 failed = 50 %
}

#[tokio::test(start_paused = true)]
async fn failure_rate_over_a_time_window_forgets_old_calls() {
    let b = CircuitBreaker::builder("rate")
        .failure_rate(0.5, BreakerWindow::Time(Duration::from_secs(1)), 4)
        .build()
        .unwrap();
    fail(&b);
    fail(&b);
    fail(&b);
    advance(Duration::from_secs(1)).await; // those three age out
    succeed(&b);
    fail(&b);
    succeed(&b);
    assert_eq!(b.state(), Closed); // 3 calls in the window < min_calls
    succeed(&b);
    assert_eq!(b.state(), Closed); // 1 of 4 failed
    fail(&b);
    assert_eq!(b.state(), Closed); // 2 of 5 = 40 %
    fail(&b);
    assert_eq!(b.state(), Open); // 3 of 6 = 50 %
}

#[tokio::test(start_paused = true)]
async fn slow_calls_trip_even_when_they_succeed() {
    let b = CircuitBreaker::builder("slow")
        .failure_rate(0.9, BreakerWindow::Count(4), 4)
        .slow_calls(ms(500), 0.75)
        .build()
        .unwrap();
    let log = logged(&b);
    let slow = || b.try_acquire().unwrap().success(ms(500));
    slow();
    slow();
    b.try_acquire().unwrap().success(ms(499));
    assert_eq!(b.state(), Closed);
    b.try_acquire().unwrap().failure(ms(800)); // slow failures are slow too
    assert_eq!(b.state(), Open);
    assert_eq!(
        shape(&log)[0].3,
        TransitionReason::SlowCallRate {
            rate: 0.75,
            calls: 4
        }
    );
}

#[tokio::test(start_paused = true)]
async fn open_rejects_until_the_cooldown_and_a_query_never_moves_time() {
    let b = consecutive(1, ms(300));
    fail(&b);
    advance(ms(120)).await;
    let e = b.try_acquire().unwrap_err();
    assert_eq!(e.breaker(), "inventory");
    assert_eq!(e.retry_after(), Some(ms(180)));
    assert_eq!(
        e.to_string(),
        "circuit breaker `inventory` is open (retry in 180 ms)"
    );
    advance(ms(10_000)).await;
    // Time-based transitions are lazy: queries do not make them.
    assert_eq!(b.state(), Open);
    assert!(b.is_open());
    let probe = b.try_acquire().unwrap();
    assert_eq!(b.state(), HalfOpen);
    assert!(!b.is_open(), "is_open is false while half-open");
    probe.success(ms(1));
}

#[tokio::test(start_paused = true)]
async fn half_open_admits_exactly_n_probes_and_closes_when_all_succeed() {
    let b = CircuitBreaker::builder("probes")
        .consecutive_failures(1)
        .open_duration(ms(100))
        .half_open_probes(3)
        .build()
        .unwrap();
    let log = logged(&b);
    fail(&b);
    advance(ms(100)).await;
    let probes: Vec<_> = (0..3).map(|_| b.try_acquire().unwrap()).collect();
    assert!(probes.iter().all(|p| p.is_probe()));
    for _ in 0..5 {
        let e = b.try_acquire().unwrap_err();
        assert_eq!((e.state(), e.retry_after()), (HalfOpen, None));
    }
    let mut probes = probes.into_iter();
    probes.next().unwrap().success(ms(1));
    probes.next().unwrap().success(ms(1));
    assert_eq!(b.state(), HalfOpen);
    assert!(
        b.try_acquire().is_err(),
        "a succeeded probe does not free a slot"
    );
    probes.next().unwrap().success(ms(1));
    assert_eq!(b.state(), Closed);
    assert_eq!(
        shape(&log)[2].3,
        TransitionReason::ProbesSucceeded { probes: 3 }
    );
}

#[tokio::test(start_paused = true)]
async fn any_failed_probe_reopens_with_a_fresh_cooldown() {
    let b = CircuitBreaker::builder("probes")
        .consecutive_failures(1)
        .open_duration(ms(100))
        .half_open_probes(2)
        .build()
        .unwrap();
    fail(&b);
    advance(ms(100)).await;
    let p1 = b.try_acquire().unwrap();
    let p2 = b.try_acquire().unwrap();
    p1.success(ms(1));
    advance(ms(30)).await;
    p2.failure(ms(30));
    assert_eq!(b.state(), Open);
    assert_eq!(b.try_acquire().unwrap_err().retry_after(), Some(ms(100)));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_or_ignored_probe_is_given_back() {
    let b = consecutive(1, ms(100));
    let log = logged(&b);
    fail(&b);
    advance(ms(100)).await;
    let probe = b.try_acquire().unwrap();
    assert!(b.try_acquire().is_err());
    drop(probe); // the probe's call was cancelled
    let probe = b.try_acquire().unwrap();
    assert!(probe.is_probe());
    probe.ignore(); // the probe's error is one the breaker ignores
    assert_eq!(b.state(), HalfOpen);
    b.try_acquire().unwrap().success(ms(1));
    assert_eq!(b.state(), Closed);
    assert_eq!(shape(&log).len(), 3, "no transition for give-backs");
}

#[tokio::test(start_paused = true)]
async fn unanswered_probes_time_out_after_half_open_max_wait() {
    let b = CircuitBreaker::builder("hung")
        .consecutive_failures(1)
        .open_duration(ms(100))
        .half_open_max_wait(Duration::from_secs(2))
        .build()
        .unwrap();
    let log = logged(&b);
    fail(&b);
    advance(ms(100)).await;
    let hung = b.try_acquire().unwrap();
    advance(ms(1_999)).await;
    assert_eq!(b.try_acquire().unwrap_err().state(), HalfOpen);
    advance(ms(1)).await;
    let e = b.try_acquire().unwrap_err();
    assert_eq!((e.state(), e.retry_after()), (Open, Some(ms(100))));
    assert_eq!(
        shape(&log)[2],
        (
            3,
            HalfOpen,
            Open,
            TransitionReason::ProbeTimedOut {
                waited: Duration::from_secs(2)
            }
        )
    );
    // The hung probe finally answers: too late, ignored.
    assert!(!hung.is_current());
    hung.success(ms(2_100));
    assert_eq!(b.state(), Open);
}

#[tokio::test(start_paused = true)]
async fn the_open_duration_grows_on_repeated_trips_and_resets_on_close() {
    let b = CircuitBreaker::builder("growth")
        .consecutive_failures(1)
        .open_duration(ms(100))
        .open_duration_growth(2.0, ms(350))
        .build()
        .unwrap();
    fail(&b);
    let mut waits = Vec::new();
    for _ in 0..4 {
        let wait = b.try_acquire().unwrap_err().retry_after().unwrap();
        waits.push(wait);
        advance(wait).await;
        b.try_acquire().unwrap().failure(ms(1)); // the probe fails: trip again
    }
    assert_eq!(waits, [ms(100), ms(200), ms(350), ms(350)]);
    let wait = b.try_acquire().unwrap_err().retry_after().unwrap();
    advance(wait).await;
    b.try_acquire().unwrap().success(ms(1));
    fail(&b);
    assert_eq!(b.try_acquire().unwrap_err().retry_after(), Some(ms(100)));
}

/// Polly #217/#218: a call started while closed that answers after the breaker moved on
/// must not change the new state.
#[tokio::test(start_paused = true)]
async fn results_from_before_a_transition_are_ignored() {
    let b = consecutive(2, ms(100));
    let log = logged(&b);
    let overhanging_ok = b.try_acquire().unwrap();
    let overhanging_err = b.try_acquire().unwrap();
    fail(&b);
    fail(&b);
    assert_eq!(b.state(), Open);
    assert!(!overhanging_ok.is_current());
    overhanging_err.failure(ms(5_000)); // no second "onBreak"
    advance(ms(100)).await;
    let probe = b.try_acquire().unwrap();
    overhanging_ok.success(ms(5_000)); // must not close the half-open breaker
    assert_eq!(b.state(), HalfOpen);
    probe.failure(ms(1));
    assert_eq!(b.state(), Open);
    assert_eq!(shape(&log).len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_probe_from_an_earlier_half_open_period_is_ignored() {
    let b = CircuitBreaker::builder("periods")
        .consecutive_failures(1)
        .open_duration(ms(100))
        .half_open_probes(2)
        .build()
        .unwrap();
    fail(&b);
    advance(ms(100)).await;
    let old_ok = b.try_acquire().unwrap();
    b.try_acquire().unwrap().failure(ms(1)); // period 1 ends: open
    advance(ms(100)).await;
    let p1 = b.try_acquire().unwrap();
    assert_ne!(p1.generation(), old_ok.generation());
    old_ok.success(ms(1)); // a success of period 1: not one of period 2's two
    let p2 = b.try_acquire().unwrap();
    p1.success(ms(1));
    assert_eq!(b.state(), HalfOpen);
    p2.success(ms(1));
    assert_eq!(b.state(), Closed);
}

#[tokio::test(start_paused = true)]
async fn slow_probes_reopen_the_breaker() {
    let b = CircuitBreaker::builder("slow")
        .consecutive_failures(1)
        .slow_calls(ms(500), 0.5)
        .open_duration(ms(100))
        .build()
        .unwrap();
    let log = logged(&b);
    fail(&b);
    advance(ms(100)).await;
    b.try_acquire().unwrap().success(ms(600));
    assert_eq!(b.state(), Open);
    assert_eq!(
        shape(&log)[2].3,
        TransitionReason::SlowCallRate {
            rate: 1.0,
            calls: 1
        }
    );
}

#[tokio::test(start_paused = true)]
async fn listeners_get_every_transition_once_in_order_and_a_panic_changes_nothing() {
    let b = consecutive(1, ms(10));
    let first = logged(&b);
    b.on_transition(|t, _| {
        if t.seq() == 2 {
            panic!("listener bug");
        }
    });
    let second = logged(&b);
    for _ in 0..3 {
        fail(&b);
        advance(ms(10)).await;
        b.try_acquire().unwrap().success(ms(1));
    }
    let expected: Vec<u64> = (1..=9).collect();
    for log in [&first, &second] {
        let seqs: Vec<u64> = shape(log).iter().map(|s| s.0).collect();
        assert_eq!(seqs, expected);
    }
    assert_eq!(b.state(), Closed);
}

#[tokio::test(start_paused = true)]
async fn config_errors_name_the_breaker_and_the_setting() {
    let err = |b: baton_graph::breaker::CircuitBreakerBuilder| b.build().unwrap_err();
    let e = err(CircuitBreaker::builder("inventory").half_open_probes(0));
    assert_eq!(e.breaker(), Some("inventory"));
    assert_eq!(
        e.to_string(),
        "circuit breaker `inventory`: `half_open_probes` must not be zero"
    );
    let e =
        err(CircuitBreaker::builder("inventory").failure_rate(1.5, BreakerWindow::Count(10), 5));
    assert!(
        matches!(e, BreakerConfigError::RateOutOfRange { .. }),
        "{e}"
    );
    assert!(e.to_string().contains("failure_rate.threshold"), "{e}");
    let e = err(CircuitBreaker::builder("inventory").open_duration_growth(f64::NAN, ms(1)));
    assert!(
        matches!(e, BreakerConfigError::InvalidMultiplier { .. }),
        "{e}"
    );
    let e = err(CircuitBreaker::builder(""));
    assert_eq!(e, BreakerConfigError::EmptyName);
}

#[tokio::test(start_paused = true)]
async fn the_handle_is_cheap_to_clone_and_shares_its_state() {
    fn assert_send_sync<T: Send + Sync + Clone + std::fmt::Debug>() {}
    assert_send_sync::<CircuitBreaker>();
    fn assert_send<T: Send>(_: &T) {}
    let b = consecutive(1, ms(10));
    let c = b.clone();
    let p = c.try_acquire().unwrap();
    assert_send(&p);
    p.failure(ms(1));
    assert_eq!(b.state(), Open);
    assert_eq!(c.name(), "inventory");
    let dbg = format!("{b:?}");
    assert!(dbg.contains("inventory") && dbg.contains("Open"), "{dbg}");
}

/// Thousands of concurrent callers on a multi-threaded runtime: every half-open period
/// admits exactly N probes, and the listener sees every transition once, in order.
#[test]
fn stress_exactly_n_probes_per_half_open_period() {
    const N: u32 = 2;
    const TASKS: usize = 2_000;
    const PERIODS: u64 = 1_000;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_time()
        .build()
        .unwrap();
    let b = CircuitBreaker::builder("stress")
        .consecutive_failures(1)
        .open_duration(Duration::ZERO)
        .half_open_probes(N)
        .half_open_max_wait(Duration::from_secs(3600))
        .build()
        .unwrap();
    let log: Arc<Mutex<Vec<(u64, BreakerState, BreakerState)>>> = Arc::default();
    let half_opens = Arc::new(AtomicU64::new(0));
    {
        let (log, half_opens) = (Arc::clone(&log), Arc::clone(&half_opens));
        b.on_transition(move |t, _| {
            log.lock().unwrap().push((t.seq(), t.from(), t.to()));
            if t.to() == HalfOpen {
                half_opens.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    fail(&b);
    // Per half-open period (by generation): probes held (given-back ones subtracted), and
    // probes given back.
    let admitted: Arc<Mutex<HashMap<u64, (u32, u32)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    rt.block_on(async {
        let tasks: Vec<_> = (0..TASKS)
            .map(|i| {
                let (b, admitted, stop, half_opens) = (
                    b.clone(),
                    Arc::clone(&admitted),
                    Arc::clone(&stop),
                    Arc::clone(&half_opens),
                );
                tokio::spawn(async move {
                    let mut rng = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                    while !stop.load(Ordering::Relaxed) {
                        if half_opens.load(Ordering::Relaxed) >= PERIODS {
                            stop.store(true, Ordering::Relaxed);
                            break;
                        }
                        let Ok(permit) = b.try_acquire() else {
                            tokio::task::yield_now().await;
                            continue;
                        };
                        if !permit.is_probe() {
                            permit.failure(Duration::ZERO); // trips it again
                            continue;
                        }
                        let g = permit.generation();
                        {
                            let mut admitted = admitted.lock().unwrap();
                            let held = &mut admitted.entry(g).or_default().0;
                            *held += 1;
                            assert!(*held <= N, "period {g}: {held} probes held at once");
                        }
                        // Hold the probe until the whole period's slots are taken.
                        while admitted.lock().unwrap()[&g].0 < N {
                            if stop.load(Ordering::Relaxed) {
                                break;
                            }
                            tokio::task::yield_now().await;
                        }
                        if stop.load(Ordering::Relaxed) {
                            // Give it back (another caller may take the slot): the last
                            // period stays unfinished.
                            let mut admitted = admitted.lock().unwrap();
                            let (held, given_back) = admitted.get_mut(&g).unwrap();
                            *held -= 1;
                            *given_back += 1;
                            drop(permit);
                            break;
                        }
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        if rng % 3 == 0 {
                            permit.success(Duration::ZERO);
                        } else {
                            permit.failure(Duration::ZERO);
                        }
                    }
                })
            })
            .collect();
        let all = futures_join(tasks);
        tokio::time::timeout(Duration::from_secs(120), all)
            .await
            .expect("stress test hung");
    });

    let log = log.lock().unwrap().clone();
    let admitted = admitted.lock().unwrap().clone();
    let mut state = Closed;
    for (i, &(seq, from, to)) in log.iter().enumerate() {
        assert_eq!(seq, i as u64 + 1, "gap or duplicate at {i}");
        assert_eq!(from, state, "broken chain at seq {seq}");
        state = to;
    }
    assert_eq!(state, b.state());
    let mut periods = 0;
    for &(seq, _, to) in &log {
        if to != HalfOpen {
            continue;
        }
        let (held, given_back) = admitted.get(&seq).copied().unwrap_or((0, 0));
        assert!(
            held <= N,
            "period {seq} of {} held {held} probes",
            log.len()
        );
        // Probes are only given back once the test is stopping; every other finished
        // period admitted exactly N.
        if seq < log.len() as u64 && given_back == 0 {
            assert_eq!(held, N, "finished period {seq} admitted {held} probes");
            periods += 1;
        }
    }
    // A few periods at the very end may see give-backs while the tasks wind down.
    assert!(
        periods >= PERIODS * 9 / 10,
        "only {periods} periods checked"
    );
    assert!(
        admitted
            .keys()
            .all(|g| log.iter().any(|&(s, _, to)| s == *g && to == HalfOpen)),
        "a probe outside a half-open period"
    );
}

async fn futures_join(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for t in tasks {
        t.await.unwrap();
    }
}

/// A listener is given its breaker: the obvious code, which reads the breaker in its
/// listener, holds no reference to it, and the breaker (with its listeners) is dropped
/// with its last handle.
#[tokio::test(start_paused = true)]
async fn a_listener_is_given_its_breaker_and_does_not_keep_it_alive() {
    let b = consecutive(1, ms(10));
    let token = Arc::new(());
    let alive = Arc::downgrade(&token);
    let seen: Arc<Mutex<Vec<(BreakerState, u64)>>> = Arc::default();
    let log = Arc::clone(&seen);
    b.on_transition(move |t, breaker| {
        let _held = &token; // dropped with the listener
        let trips = breaker.snapshot().trips_total;
        log.lock().unwrap().push((t.to(), trips));
    });
    fail(&b);
    assert_eq!(*seen.lock().unwrap(), [(Open, 1)]);
    drop(b);
    assert!(
        alive.upgrade().is_none(),
        "the breaker and its listener were dropped"
    );
}
