//! Unit tests of the state machine's internals, with time passed explicitly.

use std::sync::Mutex;
use std::sync::atomic::Ordering::Release;

use super::*;
use crate::policy::breaker::CircuitBreakerBuilder;
use crate::util::sync::StdSync;

type M = Machine<StdSync>;

use crate::util::ms;

fn machine(b: CircuitBreakerBuilder) -> (M, Instant) {
    let t0 = Instant::now();
    let config = b.validate().unwrap();
    (Machine::new(Arc::from("m"), config, t0), t0)
}

fn builder() -> CircuitBreakerBuilder {
    CircuitBreakerBuilder::new("m".to_owned())
}

fn core<R>(m: &M, f: impl FnOnce(&mut Core) -> R) -> R {
    m.core.with(f)
}

/// Trips, at `t`, a machine that trips on one consecutive failure.
fn trip(m: &M, t: Instant) {
    m.acquire(|| t)
        .unwrap()
        .finish(Outcome::Failure(ms(1)), || t);
    assert_eq!(m.state(), BreakerState::Open);
}

#[test]
fn word_packing_round_trips() {
    let w = pack(HALF_OPEN, GEN_MASK, 0xFFFF);
    assert_eq!(kind_of(w), HALF_OPEN);
    assert_eq!(gen_of(w), GEN_MASK);
    assert_eq!(w & FREE_MASK, 0xFFFF);
    let w = pack(OPEN, GEN_MASK + 5, 7);
    assert_eq!((kind_of(w), gen_of(w), w & FREE_MASK), (OPEN, 4, 7));
}

#[test]
fn the_closed_path_changes_nothing_shared() {
    let (m, t0) = machine(builder());
    let before = (m.word.load(Acquire), m.consecutive.load(Acquire));
    for _ in 0..10 {
        let p = m
            .acquire(|| panic!("the closed path must not read the clock"))
            .unwrap();
        p.finish(Outcome::Success(ms(1)), || panic!("nor here"));
        let p = m.acquire(|| panic!("nor here")).unwrap();
        drop(p);
        let p = m.acquire(|| panic!("nor here")).unwrap();
        p.finish(Outcome::Released, || panic!("nor here"));
    }
    assert_eq!((m.word.load(Acquire), m.consecutive.load(Acquire)), before);
    // A failure goes through the lock and shows in the mirror; the next success resets it.
    m.acquire(|| t0)
        .unwrap()
        .finish(Outcome::Failure(ms(1)), || t0);
    assert_eq!(m.consecutive.load(Acquire), 1);
    m.acquire(|| t0)
        .unwrap()
        .finish(Outcome::Success(ms(1)), || t0);
    assert_eq!(m.consecutive.load(Acquire), 0);
    assert!(core(&m, |c| c.outbox.is_empty()));
}

#[test]
fn lock_free_and_locked_rejections_agree() {
    let (m, t0) = machine(builder().consecutive_failures(1).open_duration(ms(200)));
    trip(&m, t0);
    let fast = m.acquire(|| t0 + ms(50)).unwrap_err();
    assert_eq!(fast.retry_after(), Some(ms(150)));
    // Corrupt the tag: the fast path must notice and take the lock, with the same answer.
    let tagged = m.deadline.load(Acquire);
    m.deadline.store(tagged ^ 1, Release);
    let slow = m.acquire(|| t0 + ms(50)).unwrap_err();
    assert_eq!(slow, fast);
    // Sub-microsecond precision is the locked path's job.
    let e = m
        .acquire(|| t0 + ms(200) - Duration::from_nanos(1))
        .unwrap_err();
    assert_eq!(e.retry_after(), Some(Duration::from_nanos(1)));
    assert!(m.acquire(|| t0 + ms(200)).unwrap().ticket().probe);
}

#[test]
fn far_future_deadlines_fall_back_to_the_lock() {
    let (m, t0) = machine(builder().consecutive_failures(1).open_duration(ms(200)));
    // 2^48 µs is about 8.9 years; past it the microsecond clock saturates.
    let late = t0 + Duration::from_secs(10 * 365 * 24 * 3600);
    assert_eq!(m.micros(late), MAX_MICROS);
    trip(&m, late);
    let e = m.acquire(|| late + ms(50)).unwrap_err();
    assert_eq!(e.retry_after(), Some(ms(150)));
    assert!(m.acquire(|| late + ms(200)).is_ok());
}

#[test]
fn generations_wrap_at_46_bits_without_confusing_permits() {
    let (m, t0) = machine(builder().consecutive_failures(1).open_duration(ms(0)));
    core(&m, |c| {
        c.seq = GEN_MASK - 1;
        m.publish(c);
    });
    let stale = m.acquire(|| t0).unwrap();
    assert_eq!(stale.ticket().generation, GEN_MASK - 1);
    trip(&m, t0); // seq = GEN_MASK
    let probe = m.acquire(|| t0).unwrap(); // seq wraps to 0 in the word
    assert_eq!(probe.ticket().generation, 0);
    probe.finish(Outcome::Success(ms(1)), || t0);
    assert_eq!(m.state(), BreakerState::Closed);
    // The permit from two generations ago is stale, even across the wrap.
    stale.finish(Outcome::Failure(ms(1)), || t0);
    assert_eq!(m.state(), BreakerState::Closed);
    assert_eq!(core(&m, |c| c.seq), GEN_MASK + 2);
}

#[test]
fn a_stale_probe_does_not_give_a_slot_to_the_next_period() {
    let (m, t0) = machine(
        builder()
            .consecutive_failures(1)
            .open_duration(ms(10))
            .half_open_max_wait(ms(1)),
    );
    trip(&m, t0);
    let old_probe = m.acquire(|| t0 + ms(10)).unwrap();
    // The half-open period ends by timeout, as old_probe is unanswered.
    let e = m.acquire(|| t0 + ms(11)).unwrap_err();
    assert_eq!(e.state(), BreakerState::Open);
    let new_probe = m.acquire(|| t0 + ms(100)).unwrap();
    drop(old_probe); // must not free a slot of the new period
    assert!(m.acquire(|| t0 + ms(100)).is_err());
    assert_eq!(core(&m, |c| (c.free, c.outstanding)), (0, 1));
    drop(new_probe);
    assert_eq!(core(&m, |c| (c.free, c.outstanding)), (1, 0));
}

#[test]
fn a_listener_may_call_the_breaker_and_trigger_transitions() {
    let (m, t0) = machine(builder().consecutive_failures(1).open_duration(ms(0)));
    let m = Arc::new(m);
    let log = Arc::new(Mutex::new(Vec::new()));
    let (m2, log2) = (Arc::clone(&m), Arc::clone(&log));
    m.add_listener(Arc::new(move |t: &BreakerTransition| {
        log2.lock().unwrap().push((t.seq(), t.to()));
        if t.to() == BreakerState::Open {
            // Re-entrant: takes the probe of the half-open period this starts.
            let p = m2.acquire(|| t0).unwrap();
            p.finish(Outcome::Success(ms(1)), || t0);
        }
    }));
    m.acquire(|| t0)
        .unwrap()
        .finish(Outcome::Failure(ms(1)), || t0);
    assert_eq!(m.state(), BreakerState::Closed);
    let log = log.lock().unwrap().clone();
    assert_eq!(
        log,
        [
            (1, BreakerState::Open),
            (2, BreakerState::HalfOpen),
            (3, BreakerState::Closed)
        ]
    );
}

/// Random operations; the half-open slot invariant and the word/core agreement hold after
/// each one.
#[test]
fn slot_invariant_holds_under_random_operations() {
    let (m, t0) = machine(
        builder()
            .consecutive_failures(2)
            .half_open_probes(3)
            .open_duration(ms(5))
            .half_open_max_wait(ms(40)),
    );
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let mut now = t0;
    let mut held = Vec::new();
    let mut transitions = 0;
    for _ in 0..20_000 {
        match next(6) {
            0 | 1 => {
                if let Ok(p) = m.acquire(|| now) {
                    held.push(p);
                }
            }
            2 if !held.is_empty() => {
                let i = usize::try_from(next(held.len() as u64)).unwrap();
                let p = held.swap_remove(i);
                let outcome = match next(3) {
                    0 => Outcome::Failure(ms(1)),
                    1 => Outcome::Success(ms(1)),
                    _ => Outcome::Released,
                };
                p.finish(outcome, || now);
            }
            3 if !held.is_empty() => {
                let i = usize::try_from(next(held.len() as u64)).unwrap();
                drop(held.swap_remove(i));
            }
            _ => now += ms(next(4)),
        }
        let word = m.word.load(Acquire);
        core(&m, |c| {
            assert_eq!(word, pack(c.kind, c.seq, c.free));
            if c.kind == HALF_OPEN {
                assert_eq!(c.free + c.outstanding + c.succeeded, 3);
                assert_eq!(
                    c.outstanding,
                    held.iter().filter(|p| p.is_current()).count() as u32
                );
            } else {
                assert_eq!((c.free, c.outstanding, c.succeeded), (0, 0, 0));
            }
            transitions = c.seq;
        });
    }
    assert!(transitions > 100, "only {transitions} transitions");
}

/// The fast path's success: with no failure counted and no rate rule, it reads neither
/// the clock nor the duration; after a failure it resets the count; a slow-call rule reads
/// the duration; a stale ticket's success changes nothing.
#[test]
fn a_closed_success_reads_only_what_it_needs() {
    let (m, t0) = machine(builder().consecutive_failures(2));
    let ticket = m.closed_ticket().unwrap();
    m.closed_success(ticket, || panic!("no rule reads the duration"));
    assert_eq!(m.consecutive.load(Acquire), 0);
    m.acquire(|| t0)
        .unwrap()
        .finish(Outcome::Failure(ms(1)), || t0);
    assert_eq!(m.consecutive.load(Acquire), 1);
    m.closed_success(m.closed_ticket().unwrap(), || panic!("nor here"));
    assert_eq!(m.consecutive.load(Acquire), 0);
    // A ticket from before a trip: its success neither resets nor closes anything.
    let stale = m.closed_ticket().unwrap();
    for _ in 0..2 {
        m.acquire(|| t0)
            .unwrap()
            .finish(Outcome::Failure(ms(1)), || t0);
    }
    assert_eq!(m.state(), BreakerState::Open);
    m.closed_success(stale, || ms(1));
    assert_eq!((m.state(), core(&m, |c| c.seq)), (BreakerState::Open, 1));

    let window = crate::breaker::BreakerWindow::Count(4);
    let slow = builder()
        .failure_rate(1.0, window, 4)
        .slow_calls(ms(100), 0.5);
    let (m, _) = machine(slow);
    let mut read = 0;
    for _ in 0..4 {
        m.closed_success(m.closed_ticket().unwrap(), || {
            read += 1;
            ms(200)
        });
    }
    assert_eq!(read, 4);
    assert_eq!(
        m.state(),
        BreakerState::Open,
        "four slow calls of four trip it"
    );
}

#[test]
fn only_a_slow_call_rule_times_calls() {
    assert!(!machine(builder()).0.times_calls());
    let rates = builder().failure_rate(0.5, crate::breaker::BreakerWindow::Count(10), 10);
    assert!(!machine(rates.clone()).0.times_calls());
    assert!(machine(rates.slow_calls(ms(100), 0.5)).0.times_calls());
}

/// Trips, at `t0`, a machine that trips on one consecutive failure, and has its one probe
/// succeed at `t0 + cooldown`.
fn recovered(m: &M, t0: Instant, cooldown: Duration) -> Instant {
    trip(m, t0);
    let t = t0 + cooldown;
    let probe = m.acquire(|| t).unwrap();
    probe.finish(Outcome::Success(ms(1)), || t);
    t
}

#[test]
fn a_recovery_ramp_admits_a_rising_share_then_closes() {
    let ramp = ms(1_000);
    let (m, t0) = machine(
        builder()
            .consecutive_failures(1)
            .open_duration(ms(100))
            .recovery_ramp(ramp),
    );
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = Arc::clone(&log);
    m.add_listener(Arc::new(move |t: &BreakerTransition| {
        l.lock().unwrap().push((t.to, t.reason));
    }));
    let start = recovered(&m, t0, ms(100));
    assert_eq!(m.state(), BreakerState::Recovering);
    for step in 0..10u32 {
        let t = start + ramp * step / 10;
        let mut admitted = 0;
        for _ in 0..100 {
            match m.acquire(|| t) {
                Ok(p) => {
                    admitted += 1;
                    p.finish(Outcome::Success(ms(1)), || t);
                }
                Err(e) => {
                    assert_eq!(e.state(), BreakerState::Recovering);
                    assert_eq!(e.retry_after(), None);
                }
            }
        }
        let share = 0.1 + 0.9 * f64::from(step) / 10.0;
        let expected = 100.0 * share;
        assert!(
            (f64::from(admitted) - expected).abs() <= 1.0,
            "step {step}: {admitted} admitted, expected {expected}"
        );
        assert_eq!(m.state(), BreakerState::Recovering);
    }
    // The ramp is over: the next caller closes the breaker and is admitted.
    let end = start + ramp;
    assert!(m.acquire(|| end).is_ok());
    assert_eq!(m.state(), BreakerState::Closed);
    assert_eq!(
        log.lock().unwrap()[1..],
        [
            (BreakerState::HalfOpen, TransitionReason::CooldownElapsed),
            (
                BreakerState::Recovering,
                TransitionReason::ProbesSucceeded { probes: 1 }
            ),
            (
                BreakerState::Closed,
                TransitionReason::RampCompleted { ramp }
            ),
        ]
    );
}

#[test]
fn a_failure_while_recovering_trips_with_the_grown_cooldown() {
    let (m, t0) = machine(
        builder()
            .consecutive_failures(1)
            .open_duration(ms(100))
            .open_duration_growth(2.0, ms(10_000))
            .recovery_ramp(ms(1_000)),
    );
    let start = recovered(&m, t0, ms(100));
    let t = start + ms(10);
    m.acquire(|| t)
        .unwrap()
        .finish(Outcome::Failure(ms(1)), || t);
    assert_eq!(m.state(), BreakerState::Open);
    let e = m.acquire(|| t).unwrap_err();
    assert_eq!(
        e.retry_after(),
        Some(ms(200)),
        "the second trip waits twice as long"
    );
}

#[test]
fn a_result_from_the_ramp_reported_after_the_close_is_stale() {
    let ramp = ms(1_000);
    let (m, t0) = machine(
        builder()
            .consecutive_failures(1)
            .open_duration(ms(100))
            .recovery_ramp(ramp),
    );
    let start = recovered(&m, t0, ms(100));
    let during = m.acquire(|| start).unwrap();
    let end = start + ramp;
    drop(m.acquire(|| end).unwrap());
    assert_eq!(m.state(), BreakerState::Closed);
    during.finish(Outcome::Failure(ms(1)), || end);
    assert_eq!(
        m.state(),
        BreakerState::Closed,
        "the ramp's failure is stale"
    );
    assert_eq!(m.consecutive.load(Acquire), 0);
}

#[test]
fn probes_granted_past_what_the_state_word_holds_are_refused_whole() {
    use crate::policy::breaker::config::MAX_PROBES;
    let (m, t0) = machine(builder().consecutive_failures(1).open_duration(ms(10)));
    trip(&m, t0);
    let t = t0 + ms(10);
    let probe = m.acquire(|| t).unwrap();
    assert_eq!(m.state(), BreakerState::HalfOpen);
    let generation = core(&m, |c| c.seq & GEN_MASK);
    assert!(
        m.grant_probes(generation, MAX_PROBES, t),
        "65 535 free slots fit"
    );
    // One more would wrap the word's free count to 0 and reject every caller.
    assert!(!m.grant_probes(generation, 1, t));
    assert!(!m.grant_probes(generation, u32::MAX, t));
    assert_eq!(core(&m, |c| c.free), MAX_PROBES);
    assert!(m.acquire(|| t).is_ok(), "the granted probes still admit");
    drop(probe);
}
