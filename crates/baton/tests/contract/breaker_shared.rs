//! A breaker whose state is shared (`docs/contract.md`, rule 8): trips, probes and manual
//! transitions decided by a shared backend, the local machine as cache and fallback. The
//! backend here is an in-memory stand-in for a store (the Redis one is tested in
//! `crates/baton-redis`). On tokio's paused clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_graph::shared::{
    BreakerMirror, SharedBreakerState, SharedFuture, SharedOutcome, SharedRecord, SharedView,
    Unreachable,
};
use baton_graph::{BreakerState, CircuitBreaker, ManualControl, TransitionReason};
use tokio::time::{Instant, advance};

use BreakerState::{Closed, HalfOpen, Isolated, Open};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The shared state: consecutive failures and fleet-wide probes, like a store would keep.
#[derive(Debug)]
struct Store {
    state: BreakerState,
    reason: TransitionReason,
    consecutive: u32,
    open_until: Instant,
    probes_taken: u32,
    probes_ok: u32,
    reachable: bool,
    /// Each replica's mirror and the local generation of its last adoption.
    mirrors: Vec<(BreakerMirror, u64)>,
}

const THRESHOLD: u32 = 3;
const PROBES: u32 = 1;

impl Store {
    fn view(&self, probes: u32) -> SharedView {
        let mut v = SharedView::new(self.state, self.reason);
        v.open_for = self.open_until.saturating_duration_since(Instant::now());
        v.probes = probes;
        v
    }

    fn to(&mut self, state: BreakerState, reason: TransitionReason) {
        self.state = state;
        self.reason = reason;
        self.consecutive = 0;
        self.probes_taken = 0;
        self.probes_ok = 0;
        if state == Open {
            self.open_until = Instant::now() + ms(100);
        }
        let view = self.view(0);
        for (mirror, generation) in &mut self.mirrors {
            *generation = mirror.adopt(view).unwrap();
        }
    }
}

#[derive(Debug, Clone)]
struct Replica {
    store: Arc<Mutex<Store>>,
    index: Arc<Mutex<usize>>,
}

fn store() -> Arc<Mutex<Store>> {
    Arc::new(Mutex::new(Store {
        state: Closed,
        reason: TransitionReason::Reset,
        consecutive: 0,
        open_until: Instant::now(),
        probes_taken: 0,
        probes_ok: 0,
        reachable: true,
        mirrors: Vec::new(),
    }))
}

impl SharedBreakerState for Replica {
    fn attach(&self, mirror: BreakerMirror) {
        let mut s = self.store.lock().unwrap();
        let generation = mirror.adopt(s.view(0)).unwrap();
        *self.index.lock().unwrap() = s.mirrors.len();
        s.mirrors.push((mirror, generation));
    }

    fn record(&self, r: SharedRecord) {
        let mut s = self.store.lock().unwrap();
        let i = *self.index.lock().unwrap();
        if !s.reachable {
            s.mirrors[i].0.lose(Unreachable::Local);
            return;
        }
        if r.generation != s.mirrors[i].1 {
            return; // stale
        }
        match (s.state, r.probe, r.outcome) {
            (Closed, false, SharedOutcome::Success(_)) => s.consecutive = 0,
            (Closed, false, SharedOutcome::Failure(_)) => {
                s.consecutive += 1;
                if s.consecutive >= THRESHOLD {
                    let count = THRESHOLD;
                    s.to(Open, TransitionReason::ConsecutiveFailures { count });
                }
            }
            (HalfOpen, true, SharedOutcome::Success(_)) => {
                s.probes_ok += 1;
                if s.probes_ok == PROBES {
                    let probes = PROBES;
                    s.to(Closed, TransitionReason::ProbesSucceeded { probes });
                }
            }
            (HalfOpen, true, SharedOutcome::Failure(_)) => {
                s.to(Open, TransitionReason::ProbeFailed)
            }
            (HalfOpen, true, SharedOutcome::Released) => s.probes_taken -= 1,
            _ => {}
        }
    }

    fn wants_probe(&self) {
        let mut s = self.store.lock().unwrap();
        if s.state == Open && Instant::now() >= s.open_until {
            s.to(HalfOpen, TransitionReason::CooldownElapsed);
        }
        if s.state == HalfOpen && s.probes_taken < PROBES {
            s.probes_taken += 1;
            let i = *self.index.lock().unwrap();
            let (mirror, generation) = &s.mirrors[i];
            assert!(mirror.grant_probes(*generation, 1));
        }
    }

    fn control(&self, op: ManualControl) -> SharedFuture<'_, bool> {
        Box::pin(async move {
            let mut s = self.store.lock().unwrap();
            if !s.reachable {
                return false;
            }
            match op {
                ManualControl::Isolate => s.to(Isolated, TransitionReason::Isolated),
                _ => s.to(Closed, TransitionReason::Reset),
            }
            true
        })
    }
}

fn replica(store: &Arc<Mutex<Store>>) -> CircuitBreaker {
    let backend = Replica {
        store: Arc::clone(store),
        index: Arc::default(),
    };
    CircuitBreaker::builder("inventory")
        .consecutive_failures(THRESHOLD)
        .open_duration(ms(100))
        .shared(backend)
        .build()
        .unwrap()
}

type Log = Arc<Mutex<Vec<(BreakerState, BreakerState, TransitionReason)>>>;

fn logged(b: &CircuitBreaker) -> Log {
    let log: Log = Arc::default();
    let l = Arc::clone(&log);
    b.on_transition(move |t| l.lock().unwrap().push((t.from(), t.to(), t.reason())));
    log
}

fn fail(b: &CircuitBreaker) {
    b.try_acquire().unwrap().failure(ms(1));
}

/// Failures on two replicas add up: the shared breaker trips both at the threshold,
/// where two local breakers with the same rules would not trip at all. Each replica's
/// listeners see the transition with the shared state's reason.
#[tokio::test(start_paused = true)]
async fn failures_on_every_replica_trip_every_replica() {
    let store = store();
    let (a, b) = (replica(&store), replica(&store));
    assert!(a.is_shared() && a.follows_shared_state());
    let (la, lb) = (logged(&a), logged(&b));
    // Three in a row on `a`, but `b`'s success in between resets the shared count: the
    // store decides, not `a`'s own count.
    fail(&a);
    fail(&a);
    b.try_acquire().unwrap().success(ms(1));
    fail(&a);
    assert_eq!(a.state(), Closed);
    b.try_acquire().unwrap().success(ms(1));
    fail(&a);
    fail(&b);
    b.try_acquire().unwrap().success(ms(1)); // a success resets the shared count
    fail(&a);
    fail(&b);
    assert_eq!((a.state(), b.state()), (Closed, Closed));
    fail(&a);
    assert_eq!((a.state(), b.state()), (Open, Open));
    let trip = (
        Closed,
        Open,
        TransitionReason::ConsecutiveFailures { count: 3 },
    );
    assert_eq!(*la.lock().unwrap(), [trip]);
    assert_eq!(*lb.lock().unwrap(), [trip]);
    // Local breakers with the same rules: three failures spread over two never trip.
    let local = || {
        CircuitBreaker::builder("inventory")
            .consecutive_failures(THRESHOLD)
            .build()
            .unwrap()
    };
    let (c, d) = (local(), local());
    assert!(!c.is_shared() && !c.follows_shared_state());
    for b in [&c, &d, &c, &d] {
        fail(b);
    }
    assert_eq!((c.state(), d.state()), (Closed, Closed));
}

/// After the cooldown, a replica's first caller asks the store for a probe and is
/// rejected; the next caller holds the fleet's one probe, the other replica gets none, and
/// the probe's success closes both.
#[tokio::test(start_paused = true)]
async fn one_probe_for_the_whole_fleet() {
    let store = store();
    let (a, b) = (replica(&store), replica(&store));
    for _ in 0..3 {
        fail(&a);
    }
    advance(ms(100)).await;
    let e = a.try_acquire().unwrap_err();
    assert_eq!(e.state(), Open, "the first caller asks for a probe");
    assert_eq!((a.state(), b.state()), (HalfOpen, HalfOpen));
    let probe = a.try_acquire().unwrap();
    assert!(probe.is_probe());
    assert!(a.try_acquire().is_err(), "one probe per fleet");
    for _ in 0..3 {
        assert_eq!(b.try_acquire().unwrap_err().state(), HalfOpen);
    }
    probe.success(ms(1));
    assert_eq!((a.state(), b.state()), (Closed, Closed));
}

/// A store that cannot be reached: the replica says so (a transition that keeps its
/// state), judges alone with its own rules, and follows the store again once resynced.
/// Manual control while unreachable applies locally.
#[tokio::test(start_paused = true)]
async fn an_unreachable_store_leaves_the_replica_judging_alone() {
    let store = store();
    let a = replica(&store);
    let log = logged(&a);
    fail(&a);
    store.lock().unwrap().reachable = false;
    fail(&a); // the backend cannot count it: the replica stops following
    assert!(!a.follows_shared_state());
    assert_eq!(
        log.lock().unwrap()[0],
        (Closed, Closed, TransitionReason::SharedStateLost)
    );
    for _ in 0..2 {
        fail(&a);
    }
    assert_eq!(a.state(), Closed, "the counts restarted at the loss");
    fail(&a);
    assert_eq!(a.state(), Open, "tripped by its own rule");
    a.reset().await;
    assert_eq!(a.state(), Closed, "reset locally");
    // The store is back: the backend resyncs and the replica follows it again.
    {
        let mut s = store.lock().unwrap();
        s.reachable = true;
        let view = SharedView::new(Closed, TransitionReason::SharedStateResynced);
        s.mirrors[0].1 = s.mirrors[0].0.adopt(view).unwrap();
    }
    assert!(a.follows_shared_state());
    a.isolate().await;
    assert_eq!(store.lock().unwrap().state, Isolated, "isolated fleet-wide");
    let reasons: Vec<_> = log.lock().unwrap().iter().map(|t| t.2).collect();
    assert_eq!(
        reasons,
        [
            TransitionReason::SharedStateLost,
            TransitionReason::ConsecutiveFailures { count: 3 },
            TransitionReason::Reset,
            TransitionReason::SharedStateResynced,
            TransitionReason::Isolated,
        ]
    );
}
