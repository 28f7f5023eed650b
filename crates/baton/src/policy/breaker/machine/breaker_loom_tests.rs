//! Model checking with loom: every interleaving of 2–3 threads racing on one breaker.
//!
//! The machine is instantiated with [`LoomSync`], loom's atomics and mutex, through the
//! sync shim, so these run under a plain `cargo test`; no `--cfg loom`. Time is passed
//! explicitly, so the models are deterministic apart from the interleavings.

use std::sync::Mutex as StdMutex;

use super::*;
use crate::policy::breaker::CircuitBreakerBuilder;
use crate::util::sync::LoomSync;

type M = Machine<LoomSync>;
type Log = Arc<StdMutex<Vec<(u64, BreakerState, BreakerState)>>>;

const COOLDOWN: Duration = Duration::from_millis(10);

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(f);
}

/// A machine that trips on one failure, already tripped at `t0`, with a transition log.
fn tripped(probes: u32, cooldown: Duration, t0: Instant) -> (Arc<M>, Log) {
    let config = CircuitBreakerBuilder::new("loom".to_owned())
        .consecutive_failures(1)
        .open_duration(cooldown)
        .half_open_probes(probes)
        .validate()
        .unwrap();
    let m = Arc::new(Machine::<LoomSync>::new(Arc::from("loom"), config, t0));
    let log: Log = Arc::default();
    let log2 = Arc::clone(&log);
    m.add_listener(Arc::new(move |t: &BreakerTransition| {
        log2.lock().unwrap().push((t.seq(), t.from(), t.to()));
    }));
    let ticket = m.try_acquire(|| t0).unwrap();
    m.complete(ticket, Outcome::Failure(Duration::ZERO), || t0);
    assert_eq!(m.state(), BreakerState::Open);
    (m, log)
}

/// The log is gap-free from seq 1, each transition starts where the previous ended, and
/// the last one is the machine's current state.
fn check_log(m: &M, log: &Log) -> Vec<(u64, BreakerState, BreakerState)> {
    let log = log.lock().unwrap().clone();
    let mut state = BreakerState::Closed;
    for (i, &(seq, from, to)) in log.iter().enumerate() {
        assert_eq!(seq, i as u64 + 1, "gap or duplicate in {log:?}");
        assert_eq!(from, state, "broken chain in {log:?}");
        state = to;
    }
    assert_eq!(
        state,
        m.state(),
        "last delivered transition is not the state: {log:?}"
    );
    assert_eq!(
        m.core.with(|c| c.seq),
        log.len() as u64,
        "undelivered: {log:?}"
    );
    log
}

/// `threads` callers race for permits once the cooldown has elapsed; each keeps its permit,
/// forgotten as if the call never returned. Exactly `probes` of them get one.
fn race_for_probes(probes: u32, threads: usize) {
    let t0 = Instant::now();
    model(move || {
        let (m, log) = tripped(probes, COOLDOWN, t0);
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let m = Arc::clone(&m);
                loom::thread::spawn(move || match m.acquire(|| t0 + COOLDOWN) {
                    Ok(p) => {
                        assert!(p.ticket().probe);
                        std::mem::forget(p);
                        1
                    }
                    Err(e) => {
                        assert_eq!(e.state(), BreakerState::HalfOpen);
                        0
                    }
                })
            })
            .collect();
        let admitted: u32 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(admitted, probes.min(threads as u32));
        let log = check_log(&m, &log);
        assert_eq!(log.len(), 2, "exactly one open -> half_open: {log:?}");
    });
}

#[test]
fn one_probe_among_three_racing_callers() {
    race_for_probes(1, 3);
}

#[test]
fn two_probes_among_three_racing_callers() {
    race_for_probes(2, 3);
}

/// A probe given back by a drop while two others ask: exactly one more caller probes.
#[test]
fn a_dropped_probe_admits_exactly_one_other_caller() {
    let t0 = Instant::now();
    model(move || {
        let (m, log) = tripped(1, COOLDOWN, t0);
        let now = t0 + COOLDOWN;
        let probe = m.try_acquire(|| now).unwrap();
        assert!(probe.probe);
        let dropper = {
            let m = Arc::clone(&m);
            loom::thread::spawn(move || m.complete(probe, Outcome::Released, || now))
        };
        let racers: Vec<_> = (0..2)
            .map(|_| {
                let m = Arc::clone(&m);
                loom::thread::spawn(move || match m.acquire(|| now) {
                    Ok(p) => {
                        std::mem::forget(p);
                        1
                    }
                    Err(_) => 0,
                })
            })
            .collect();
        dropper.join().unwrap();
        let admitted: u32 = racers.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(admitted <= 1, "{admitted} callers took one given-back slot");
        // Whoever comes next gets the slot iff nobody took it.
        let late = m.acquire(|| now);
        assert_eq!(late.is_ok(), admitted == 0);
        if let Ok(p) = late {
            std::mem::forget(p);
        }
        check_log(&m, &log);
    });
}

/// With a zero cooldown, two callers each make a transition concurrently: open →
/// half-open, then the probe's result, or a failed closed call. Whatever the interleaving, every
/// transition is delivered once, in order, and each half-open period admitted exactly one
/// probe.
#[test]
fn no_transition_is_lost_or_duplicated() {
    let t0 = Instant::now();
    model(move || {
        let (m, log) = tripped(1, Duration::ZERO, t0);
        let handles: Vec<_> = (0..2)
            .map(|i| {
                let m = Arc::clone(&m);
                loom::thread::spawn(move || match m.acquire(|| t0) {
                    Ok(p) => {
                        let probe = p.ticket().probe;
                        let outcome = if i == 0 {
                            Outcome::Success(Duration::ZERO)
                        } else {
                            Outcome::Failure(Duration::ZERO)
                        };
                        p.finish(outcome, || t0);
                        u64::from(probe)
                    }
                    Err(_) => 0,
                })
            })
            .collect();
        let probes: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        let log = check_log(&m, &log);
        let half_opens = log
            .iter()
            .filter(|&&(_, _, to)| to == BreakerState::HalfOpen)
            .count() as u64;
        assert_eq!(probes, half_opens, "{log:?}");
    });
}

/// A closed-state success racing the failure that trips the breaker is either applied
/// before the trip or ignored as stale: it never closes the open breaker.
#[test]
fn a_stale_success_never_closes_the_breaker() {
    let t0 = Instant::now();
    model(move || {
        let config = CircuitBreakerBuilder::new("loom".to_owned())
            .consecutive_failures(1)
            .open_duration(COOLDOWN)
            .validate()
            .unwrap();
        let m = Arc::new(Machine::<LoomSync>::new(Arc::from("loom"), config, t0));
        let slow = m.try_acquire(|| t0).unwrap();
        let succeeder = {
            let m = Arc::clone(&m);
            loom::thread::spawn(move || m.complete(slow, Outcome::Success(Duration::ZERO), || t0))
        };
        let failer = {
            let m = Arc::clone(&m);
            loom::thread::spawn(move || {
                let p = m.acquire(|| t0).unwrap();
                p.finish(Outcome::Failure(Duration::ZERO), || t0);
            })
        };
        succeeder.join().unwrap();
        failer.join().unwrap();
        assert_eq!(m.state(), BreakerState::Open);
        assert_eq!(m.core.with(|c| c.seq), 1);
    });
}

/// While recovering, a ramp call's failure races the caller that ends the ramp: either the
/// failure trips the breaker and the late caller is rejected, or the breaker closes and the
/// failure, now stale, is ignored; never both, and no transition is lost.
#[test]
fn a_ramp_failure_races_the_end_of_the_ramp() {
    const RAMP: Duration = Duration::from_millis(5);
    let t0 = Instant::now();
    model(move || {
        let config = CircuitBreakerBuilder::new("loom".to_owned())
            .consecutive_failures(1)
            .open_duration(COOLDOWN)
            .recovery_ramp(RAMP)
            .validate()
            .unwrap();
        let m = Arc::new(Machine::<LoomSync>::new(Arc::from("loom"), config, t0));
        let log: Log = Arc::default();
        let log2 = Arc::clone(&log);
        m.add_listener(Arc::new(move |t: &BreakerTransition| {
            log2.lock().unwrap().push((t.seq(), t.from(), t.to()));
        }));
        let tripping = m.try_acquire(|| t0).unwrap();
        m.complete(tripping, Outcome::Failure(Duration::ZERO), || t0);
        let t1 = t0 + COOLDOWN;
        let probe = m.try_acquire(|| t1).unwrap();
        m.complete(probe, Outcome::Success(Duration::ZERO), || t1);
        assert_eq!(m.state(), BreakerState::Recovering);
        let ramp_call = m.try_acquire(|| t1).unwrap();
        let failing = {
            let m = Arc::clone(&m);
            loom::thread::spawn(move || {
                m.complete(ramp_call, Outcome::Failure(Duration::ZERO), || t1);
            })
        };
        let late = {
            let m = Arc::clone(&m);
            loom::thread::spawn(move || m.try_acquire(|| t1 + RAMP).is_ok())
        };
        failing.join().unwrap();
        let admitted = late.join().unwrap();
        check_log(&m, &log);
        match m.state() {
            BreakerState::Open => assert!(!admitted, "tripped, yet admitted"),
            BreakerState::Closed => assert!(admitted, "closed by a rejected caller"),
            other => panic!("ended {other}"),
        }
    });
}

/// A fast-path success racing a failure after one failure was counted, with two to trip.
/// The success is `closed_success`, which reads no state word when no failure is counted.
/// Either the success resets the count first and the failure counts one, or the failure
/// trips the breaker and the success, now stale, is ignored. Never a lost reset or a lost
/// trip.
#[test]
fn a_closed_success_races_a_failure() {
    let t0 = Instant::now();
    model(move || {
        let config = CircuitBreakerBuilder::new("loom".to_owned())
            .consecutive_failures(2)
            .open_duration(COOLDOWN)
            .validate()
            .unwrap();
        let m = Arc::new(Machine::<LoomSync>::new(Arc::from("loom"), config, t0));
        let first = m.try_acquire(|| t0).unwrap();
        m.complete(first, Outcome::Failure(Duration::ZERO), || t0);
        let ticket = m.closed_ticket().unwrap();
        let failing = m.try_acquire(|| t0).unwrap();
        let succeeder = {
            let m = Arc::clone(&m);
            loom::thread::spawn(move || m.closed_success(ticket, || Duration::ZERO))
        };
        let failer = {
            let m = Arc::clone(&m);
            loom::thread::spawn(move || {
                m.complete(failing, Outcome::Failure(Duration::ZERO), || t0);
            })
        };
        succeeder.join().unwrap();
        failer.join().unwrap();
        match m.state() {
            BreakerState::Closed => assert_eq!(m.core.with(|c| c.consecutive), 1),
            BreakerState::Open => assert_eq!(m.core.with(|c| c.seq), 1),
            other => panic!("ended {other}"),
        }
    });
}
