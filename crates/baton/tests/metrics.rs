//! `MetricsObserver` against a recorder that keeps every metric it is given: the names (and
//! that they follow Prometheus's conventions), the labels, and the values, for named and
//! unnamed graphs, a pipeline, breakers and a bulkhead.
//!
//! The recorder is installed for this thread only (`metrics::with_local_recorder`) and the
//! runs are driven on a current-thread runtime, so every event is recorded here.

#![cfg(feature = "metrics")]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_graph::observe::MetricsObserver;
use baton_graph::{
    Backoff, BoxError, Bulkhead, CircuitBreaker, Fallback, Orchestrator, Pipeline, Retry,
};
use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};

/// A metric's name and its labels, in the order given.
type Id = (String, Vec<(String, String)>);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Counters: their sum; gauges: their last value; histograms: every value.
#[derive(Default)]
struct Store {
    kinds: BTreeMap<Id, Kind>,
    counters: BTreeMap<Id, u64>,
    gauges: BTreeMap<Id, f64>,
    histograms: BTreeMap<Id, Vec<f64>>,
}

#[derive(Clone, Default)]
struct Keeper(Arc<Mutex<Store>>);

struct Handle {
    id: Id,
    store: Arc<Mutex<Store>>,
}

fn id(key: &Key) -> Id {
    let labels = key
        .labels()
        .map(|l| (l.key().to_owned(), l.value().to_owned()))
        .collect();
    (key.name().to_owned(), labels)
}

impl CounterFn for Handle {
    fn increment(&self, value: u64) {
        *self
            .store
            .lock()
            .unwrap()
            .counters
            .entry(self.id.clone())
            .or_default() += value;
    }

    fn absolute(&self, value: u64) {
        self.store
            .lock()
            .unwrap()
            .counters
            .insert(self.id.clone(), value);
    }
}

impl GaugeFn for Handle {
    fn increment(&self, value: f64) {
        *self
            .store
            .lock()
            .unwrap()
            .gauges
            .entry(self.id.clone())
            .or_default() += value;
    }

    fn decrement(&self, value: f64) {
        *self
            .store
            .lock()
            .unwrap()
            .gauges
            .entry(self.id.clone())
            .or_default() -= value;
    }

    fn set(&self, value: f64) {
        self.store
            .lock()
            .unwrap()
            .gauges
            .insert(self.id.clone(), value);
    }
}

impl HistogramFn for Handle {
    fn record(&self, value: f64) {
        let mut store = self.store.lock().unwrap();
        store
            .histograms
            .entry(self.id.clone())
            .or_default()
            .push(value);
    }
}

impl Keeper {
    fn handle(&self, key: &Key, kind: Kind) -> Arc<Handle> {
        let id = id(key);
        let previous = self.0.lock().unwrap().kinds.insert(id.clone(), kind);
        assert!(previous.is_none_or(|k| k == kind), "{id:?} is one kind");
        Arc::new(Handle {
            id,
            store: Arc::clone(&self.0),
        })
    }
}

impl Recorder for Keeper {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.handle(key, Kind::Counter))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.handle(key, Kind::Gauge))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.handle(key, Kind::Histogram))
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `name{labels}`, as the store keys it.
fn key(name: &str, labels: &[(&str, &str)]) -> Id {
    let labels = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    (name.to_owned(), labels)
}

/// A task that fails its first `failures` calls with `message`, then returns 1.
fn failing(
    failures: u32,
    message: &'static str,
) -> impl Fn(baton_graph::Ctx<()>, ()) -> std::future::Ready<Result<u8, BoxError>> + Send + Sync {
    let calls = Arc::new(Mutex::new(0));
    move |_ctx, ()| {
        let mut n = calls.lock().unwrap();
        *n += 1;
        std::future::ready(if *n <= failures {
            Err(message.into())
        } else {
            Ok(1)
        })
    }
}

/// Runs the scenario on a paused current-thread runtime, with `keeper` recording.
fn run_scenario(keeper: &Keeper) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    metrics::with_local_recorder(keeper, || rt.block_on(scenario()));
}

async fn scenario() {
    let orch = Orchestrator::builder()
        .observer(MetricsObserver::new())
        .build();
    let payments = CircuitBreaker::builder("payments")
        .consecutive_failures(1)
        .build()
        .unwrap();
    let pool = Bulkhead::new("pool", 1, ms(100));

    // `checkout`: a retry that recovers, a timeout, a failure that trips `payments`, a
    // fallback, and two nodes that share a one-permit bulkhead (`waiter` waits 50 ms).
    let mut g = orch.graph::<()>();
    g.name("checkout");
    g.node("flaky")
        .retry(Retry::new(2).backoff(Backoff::constant(ms(5))))
        .task(failing(1, "first"));
    g.node("slow").timeout(ms(10)).task(|_ctx, ()| async {
        tokio::time::sleep(ms(1000)).await;
        Ok::<u8, BoxError>(1)
    });
    g.node("charge")
        .breaker(&payments)
        .task(failing(u32::MAX, "declined"));
    g.node("rescued")
        .fallback(Fallback::value(0))
        .task(failing(u32::MAX, "down"));
    g.node("holder").bulkhead(&pool).task(|_ctx, ()| async {
        tokio::time::sleep(ms(50)).await;
        Ok::<u8, BoxError>(1)
    });
    g.node("waiter")
        .bulkhead(&pool)
        .task(|_ctx, ()| async { Ok::<u8, BoxError>(1) });
    g.build().unwrap().run(()).await.unwrap();

    // `refund` finds `payments` open: rejected.
    let mut g = orch.graph::<()>();
    g.name("refund");
    g.node("refund")
        .breaker(&payments)
        .task(|_ctx, ()| async { Ok::<u8, BoxError>(1) });
    g.build().unwrap().run(()).await.unwrap();

    // An unnamed graph, and a pipeline call: no `graph` label.
    let mut g = orch.graph::<()>();
    g.node("plain")
        .task(|_ctx, ()| async { Ok::<u8, BoxError>(1) });
    g.build().unwrap().run(()).await.unwrap();
    let prices = Pipeline::builder("prices")
        .orchestrator(&orch)
        .build()
        .unwrap();
    prices
        .call(|_| async { Ok::<u8, BoxError>(1) })
        .await
        .unwrap();

    // Once open for its duration, `payments` admits a probe, which closes it.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let mut g = orch.graph::<()>();
    g.name("refund");
    g.node("refund")
        .breaker(&payments)
        .task(|_ctx, ()| async { Ok::<u8, BoxError>(1) });
    g.build().unwrap().run(()).await.unwrap();
}

#[test]
fn every_metric_has_its_name_labels_and_value() {
    let keeper = Keeper::default();
    run_scenario(&keeper);
    let store = keeper.0.lock().unwrap();
    let counter =
        |name: &str, labels: &[(&str, &str)]| store.counters.get(&key(name, labels)).copied();
    fn checkout(node: &str) -> [(&str, &str); 2] {
        [("graph", "checkout"), ("node", node)]
    }

    // Runs, by graph; an unnamed graph's have no `graph` label.
    let started = "baton_runs_started_total";
    assert_eq!(counter(started, &[("graph", "checkout")]), Some(1));
    assert_eq!(counter(started, &[("graph", "refund")]), Some(2));
    assert_eq!(counter(started, &[]), Some(1));
    let finished = "baton_runs_finished_total";
    assert_eq!(
        counter(finished, &[("graph", "checkout"), ("clean", "false")]),
        Some(1)
    );
    assert_eq!(counter(finished, &[("clean", "true")]), Some(1));
    let makespan = &store.histograms[&key("baton_run_makespan_seconds", &[("graph", "checkout")])];
    assert_eq!(makespan, &[0.05]);

    // Nodes and attempts.
    let nodes = "baton_nodes_finished_total";
    let with = |node: &str, outcome: &str| {
        counter(
            nodes,
            &[("graph", "checkout"), ("node", node), ("outcome", outcome)],
        )
    };
    assert_eq!(with("flaky", "succeeded"), Some(1));
    assert_eq!(with("slow", "failed"), Some(1));
    assert_eq!(with("charge", "failed"), Some(1));
    assert_eq!(with("rescued", "recovered"), Some(1));
    assert_eq!(
        store.histograms[&key(
            "baton_node_duration_seconds",
            &[
                ("graph", "checkout"),
                ("node", "slow"),
                ("outcome", "failed")
            ]
        )],
        [0.01]
    );
    assert_eq!(counter("baton_attempts_total", &checkout("flaky")), Some(2));
    assert_eq!(
        counter("baton_attempt_failures_total", &checkout("flaky")),
        Some(1)
    );
    assert_eq!(counter("baton_retries_total", &checkout("flaky")), Some(1));
    assert_eq!(
        store.histograms[&key("baton_retry_delay_seconds", &checkout("flaky"))],
        [0.005]
    );
    assert_eq!(counter("baton_timeouts_total", &checkout("slow")), Some(1));
    assert_eq!(
        counter("baton_fallbacks_total", &checkout("rescued")),
        Some(1)
    );
    assert_eq!(
        counter("baton_attempts_total", &[("node", "prices")]),
        Some(1),
        "a pipeline call is counted under its name, without a graph"
    );

    // The bulkhead: `holder` got the permit at once, `waiter` after `holder`'s 50 ms.
    let wait = |node: &str| {
        store.histograms[&key(
            "baton_bulkhead_wait_seconds",
            &[("graph", "checkout"), ("node", node), ("bulkhead", "pool")],
        )]
            .clone()
    };
    assert_eq!((wait("holder"), wait("waiter")), (vec![0.0], vec![0.05]));

    // The breaker: tripped by `charge`, rejected `refund`, probed and closed.
    assert_eq!(
        counter(
            "baton_breaker_rejections_total",
            &[
                ("graph", "refund"),
                ("node", "refund"),
                ("breaker", "payments")
            ]
        ),
        Some(1)
    );
    let transitions = "baton_breaker_transitions_total";
    let moved = |from: &str, to: &str| {
        counter(
            transitions,
            &[("breaker", "payments"), ("from", from), ("to", to)],
        )
    };
    assert_eq!(
        (
            moved("closed", "open"),
            moved("open", "half_open"),
            moved("half_open", "closed")
        ),
        (Some(1), Some(1), Some(1))
    );
    let state = store.gauges[&key("baton_breaker_state", &[("breaker", "payments")])];
    assert_eq!(state, 0.0, "closed again");
}

#[test]
fn metric_names_and_labels_follow_prometheus_conventions() {
    let keeper = Keeper::default();
    run_scenario(&keeper);
    let store = keeper.0.lock().unwrap();
    let snake = |s: &str| {
        !s.is_empty()
            && s.starts_with(|c: char| c.is_ascii_lowercase())
            && s.chars().all(|c| c.is_ascii_lowercase() || c == '_')
            && !s.ends_with('_')
            && !s.contains("__")
    };
    let label_names = [
        "graph", "node", "outcome", "clean", "breaker", "from", "to", "bulkhead",
    ];
    let mut names: Vec<(&str, Kind)> = Vec::new();
    for ((name, labels), kind) in &store.kinds {
        assert!(name.starts_with("baton_") && snake(name), "{name}");
        match kind {
            // Counters end in `_total`; histograms in their base unit; gauges in neither.
            Kind::Counter => assert!(name.ends_with("_total"), "{name}"),
            Kind::Histogram => assert!(name.ends_with("_seconds"), "{name}"),
            Kind::Gauge => assert!(!name.ends_with("_total"), "{name}"),
        }
        for (label, value) in labels {
            assert!(label_names.contains(&label.as_str()), "{name}: {label}");
            // Bounded: no label carries a run's id (32 hex digits).
            assert!(
                !(value.len() == 32 && value.chars().all(|c| c.is_ascii_hexdigit())),
                "{name}: {label}={value}"
            );
        }
        if names.last().is_none_or(|(n, _)| n != name) {
            names.push((name, *kind));
        }
    }
    // Every metric of the observer's table was recorded.
    let mut expected = vec![
        ("baton_attempt_failures_total", Kind::Counter),
        ("baton_attempts_total", Kind::Counter),
        ("baton_breaker_rejections_total", Kind::Counter),
        ("baton_breaker_state", Kind::Gauge),
        ("baton_breaker_transitions_total", Kind::Counter),
        ("baton_bulkhead_wait_seconds", Kind::Histogram),
        ("baton_fallbacks_total", Kind::Counter),
        ("baton_node_duration_seconds", Kind::Histogram),
        ("baton_nodes_finished_total", Kind::Counter),
        ("baton_retries_total", Kind::Counter),
        ("baton_retry_delay_seconds", Kind::Histogram),
        ("baton_run_makespan_seconds", Kind::Histogram),
        ("baton_runs_finished_total", Kind::Counter),
        ("baton_runs_started_total", Kind::Counter),
        ("baton_timeouts_total", Kind::Counter),
    ];
    expected.sort();
    assert_eq!(names, expected);
}

/// The manual transitions are counted like the others and set the state gauge: 4 isolated,
/// 5 forced closed, 0 after a reset.
#[test]
fn manual_transitions_are_counted_and_set_the_state_gauge() {
    let keeper = Keeper::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let gauge = |keeper: &Keeper| {
        keeper.0.lock().unwrap().gauges[&key("baton_breaker_state", &[("breaker", "ledger")])]
    };
    let states = metrics::with_local_recorder(&keeper, || {
        rt.block_on(async {
            let orch = Orchestrator::builder()
                .observer(MetricsObserver::new())
                .build();
            let ledger = CircuitBreaker::builder("ledger").build().unwrap();
            let mut g = orch.graph::<()>();
            g.node("post")
                .breaker(&ledger)
                .task(|_ctx, ()| async { Ok::<u8, BoxError>(1) });
            g.build().unwrap().run(()).await.unwrap();
            let mut states = Vec::new();
            ledger.isolate().await;
            states.push(gauge(&keeper));
            ledger.force_closed().await;
            states.push(gauge(&keeper));
            ledger.reset().await;
            states.push(gauge(&keeper));
            states
        })
    });
    assert_eq!(states, [4.0, 5.0, 0.0]);
    let store = keeper.0.lock().unwrap();
    let moved = |from: &str, to: &str| {
        store.counters.get(&key(
            "baton_breaker_transitions_total",
            &[("breaker", "ledger"), ("from", from), ("to", to)],
        ))
    };
    assert_eq!(
        (
            moved("closed", "isolated"),
            moved("isolated", "forced_closed"),
            moved("forced_closed", "closed")
        ),
        (Some(&1), Some(&1), Some(&1))
    );
}

/// A shared breaker's store, reached once and then lost at the first outcome.
#[derive(Debug, Default)]
struct Flaky(Mutex<Option<baton_graph::shared::BreakerMirror>>);

impl baton_graph::shared::SharedBreakerState for Flaky {
    fn attach(&self, mirror: baton_graph::shared::BreakerMirror) {
        use baton_graph::breaker::{BreakerState, TransitionReason};
        let view =
            baton_graph::shared::SharedView::new(BreakerState::Closed, TransitionReason::Reset);
        let _ = mirror.adopt(view);
        *self.0.lock().unwrap() = Some(mirror);
    }
    fn record(&self, _: baton_graph::shared::SharedRecord) {
        let mirror = self.0.lock().unwrap().clone().unwrap();
        mirror.lose(baton_graph::shared::Unreachable::Local);
    }
    fn wants_probe(&self, _until: Option<tokio::time::Instant>) {}
    fn control(
        &self,
        _: baton_graph::breaker::ManualControl,
    ) -> baton_graph::shared::SharedFuture<'_, bool> {
        Box::pin(async { false })
    }
}

/// A shared breaker that loses its store says so in a gauge: 0 while it judges alone.
#[test]
fn a_lost_shared_state_is_a_gauge() {
    let keeper = Keeper::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    metrics::with_local_recorder(&keeper, || {
        rt.block_on(async {
            let orch = Orchestrator::builder()
                .observer(MetricsObserver::new())
                .build();
            let quotes = CircuitBreaker::builder("quotes")
                .shared(Flaky::default())
                .build()
                .unwrap();
            let mut g = orch.graph::<()>();
            g.node("quote")
                .breaker(&quotes)
                .task(|_ctx, ()| async { Ok::<u8, BoxError>(1) });
            g.build().unwrap().run(()).await.unwrap();
            assert!(!quotes.follows_shared_state());
        })
    });
    let store = keeper.0.lock().unwrap();
    let reached = key(
        "baton_breaker_shared_state_reached",
        &[("breaker", "quotes")],
    );
    assert_eq!(store.gauges.get(&reached), Some(&0.0));
}
