//! A breaker whose state is shared (`docs/contract.md`, rule 8): trips, probes and manual
//! transitions decided by a shared backend, the local machine as cache and fallback. The
//! backend here is an in-memory stand-in for a store (the Redis one is tested in
//! `crates/baton-redis`). On tokio's paused clock.

use std::sync::{Arc, Mutex};

use baton_graph::shared::{
    BreakerMirror, SharedBreakerState, SharedFuture, SharedOutcome, SharedRecord, SharedView,
    Unreachable,
};
use baton_graph::{
    CircuitBreaker,
    breaker::{BreakerState, ManualControl, TransitionReason},
};
use tokio::time::{Instant, advance};

use BreakerState::{Closed, HalfOpen, Isolated, Open};

use crate::ms;

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
    /// Quorum mode: trips the replicas reported.
    tripped: u32,
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
    /// Quorum mode: the fleet opens once this many trips were reported.
    quorum: Option<u32>,
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
        tripped: 0,
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

    fn trips_locally(&self) -> bool {
        self.quorum.is_some()
    }

    fn tripped(&self) {
        let mut s = self.store.lock().unwrap();
        s.tripped += 1;
        if self.quorum.is_some_and(|q| s.tripped >= q) && s.state == Closed {
            let replicas = s.tripped;
            s.to(Open, TransitionReason::ReplicasTripped { replicas });
        }
    }

    fn record(&self, r: SharedRecord) {
        if self.quorum.is_some() && !r.probe {
            return; // each replica trips by its own counts
        }
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

    fn wants_probe(&self, _until: Option<tokio::time::Instant>) {
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
    quorum_replica(store, None)
}

fn quorum_replica(store: &Arc<Mutex<Store>>, quorum: Option<u32>) -> CircuitBreaker {
    let backend = Replica {
        store: Arc::clone(store),
        index: Arc::default(),
        quorum,
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
    b.on_transition(move |t, _| l.lock().unwrap().push((t.from(), t.to(), t.reason())));
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

/// Quorum mode: a replica's own trip opens it at once and alone (its own cooldown and
/// probe), failures are not pooled, and the fleet opens once the quorum of trips is
/// reported; a replica already open by its own trip makes no second transition.
#[tokio::test(start_paused = true)]
async fn a_quorum_opens_the_fleet_only_when_enough_replicas_trip() {
    let store = store();
    let [a, b, c] = [0, 1, 2].map(|_| quorum_replica(&store, Some(2)));
    let [la, lb, lc] = [&a, &b, &c].map(logged);
    for _ in 0..3 {
        fail(&a);
    }
    assert_eq!((a.state(), b.state(), c.state()), (Open, Closed, Closed));
    assert!(
        !a.follows_shared_state(),
        "a judges alone after its own trip"
    );
    assert_eq!(store.lock().unwrap().tripped, 1, "its trip was reported");
    for r in [&b, &c, &b, &c] {
        fail(r);
    }
    assert_eq!((b.state(), c.state()), (Closed, Closed), "nothing pooled");
    // a's own cooldown and probe: it closes by itself, the fleet never opened.
    advance(ms(100)).await;
    a.try_acquire().unwrap().success(ms(1));
    assert_eq!(a.state(), Closed);
    // A second replica trips: the quorum opens every replica.
    fail(&b);
    assert_eq!((a.state(), b.state(), c.state()), (Open, Open, Open));
    assert!([&a, &b, &c].iter().all(|r| r.follows_shared_state()));
    let fleet = (
        Closed,
        Open,
        TransitionReason::ReplicasTripped { replicas: 2 },
    );
    let own = (
        Closed,
        Open,
        TransitionReason::ConsecutiveFailures { count: 3 },
    );
    assert_eq!(*lb.lock().unwrap(), [own]);
    assert_eq!(*lc.lock().unwrap(), [fleet]);
    assert_eq!(la.lock().unwrap()[0], own);
    assert_eq!(la.lock().unwrap().last(), Some(&fleet));
}

/// A node whose shared breaker judged it alone (the store cannot be reached) says so in its
/// report, in JSON and in the timeline; while the breaker follows the store, it does not.
#[tokio::test(start_paused = true)]
async fn a_node_judged_by_the_local_breaker_says_so() {
    let store = store();
    let b = replica(&store);
    let mut g = baton_graph::Graph::<()>::builder();
    let stock = g
        .node("stock")
        .breaker(&b)
        .task(|_ctx, ()| async { Ok::<_, baton_graph::BoxError>(7u32) });
    let graph = g.build().unwrap();
    let report = graph.run(()).await.unwrap();
    assert!(!report.node(stock).unwrap().breaker_local());
    store.lock().unwrap().reachable = false;
    fail(&b); // the backend finds the store unreachable: the breaker judges alone
    assert!(!b.follows_shared_state());
    let report = graph.run(()).await.unwrap();
    let node = report.node(stock).unwrap();
    assert_eq!(node.outcome(), baton_graph::Outcome::Succeeded);
    assert!(node.breaker_local(), "judged locally");
    assert!(report.to_string().contains("(breaker judged locally)"));
    #[cfg(feature = "serde")]
    {
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["nodes"][0]["breaker_local"], true);
    }
    // A breaker of this process alone never reports it.
    let local = CircuitBreaker::builder("alone").build().unwrap();
    let mut g = baton_graph::Graph::<()>::builder();
    let n = g
        .node("n")
        .breaker(&local)
        .task(|_ctx, ()| async { Ok::<_, baton_graph::BoxError>(1u32) });
    let report = g.build().unwrap().run(()).await.unwrap();
    assert!(!report.node(n).unwrap().breaker_local());
}

/// A breaker whose state the fleet shares cannot take new settings from a configuration:
/// `apply` refuses them, naming the key, and changes nothing.
#[cfg(feature = "serde")]
#[test]
fn a_shared_breaker_refuses_new_settings_from_a_configuration() {
    use baton_graph::config::{Config, ConfigErrorKind};
    let orch = baton_graph::Orchestrator::new();
    let breaker = replica(&store());
    orch.add_breaker(&breaker).unwrap();
    let text = r#"{ "breakers": { "inventory": { "consecutive_failures": 9 } } }"#;
    let config = Config::from_deserializer(&mut serde_json::Deserializer::from_str(text)).unwrap();
    let e = orch.apply(&config).unwrap_err();
    assert_eq!(
        (e.path(), e.kind()),
        ("breakers.inventory", &ConfigErrorKind::NotInPlace)
    );
    for _ in 0..THRESHOLD {
        fail(&breaker);
    }
    assert!(breaker.is_open(), "still its old threshold");
}
