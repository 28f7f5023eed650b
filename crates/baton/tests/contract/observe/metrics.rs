//! Metrics through the `metrics` facade: label values stay bounded by the graph's
//! definition, however long the list a map node maps.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use baton_graph::{BoxError, Orchestrator, Retry, observe::MetricsObserver};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};

/// Records the `node` label of every metric registered.
#[derive(Default)]
struct NodeLabels(Arc<Mutex<BTreeSet<(String, String)>>>);

impl NodeLabels {
    fn note(&self, key: &Key) {
        for label in key.labels().filter(|l| l.key() == "node") {
            let entry = (key.name().to_owned(), label.value().to_owned());
            self.0.lock().unwrap().insert(entry);
        }
    }
}

impl Recorder for NodeLabels {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        self.note(key);
        Counter::noop()
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        self.note(key);
        Gauge::noop()
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        self.note(key);
        Histogram::noop()
    }
}

#[test]
fn item_metrics_are_labelled_with_their_nodes_name() {
    let orch = Orchestrator::builder()
        .observer(MetricsObserver::new())
        .build();
    let mut g = orch.graph::<()>();
    g.name("checkout");
    let cart = g
        .node("cart")
        .task(|_ctx, ()| async { Ok::<_, BoxError>((0..50_u64).collect::<Vec<_>>()) });
    g.node("prices")
        .after(cart)
        .retry(Retry::new(2))
        .map(|ctx, i: u64| async move {
            if i % 7 == 0 && ctx.attempt() == 1 {
                return Err::<u64, BoxError>("503".into());
            }
            Ok(i)
        });
    let graph = g.build().unwrap();
    let recorder = NodeLabels::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let report = metrics::with_local_recorder(&recorder, || rt.block_on(graph.run(())));
    assert!(report.unwrap().is_clean());
    let seen = recorder.0.lock().unwrap().clone();
    let values: BTreeSet<&str> = seen.iter().map(|(_, v)| v.as_str()).collect();
    assert_eq!(values, BTreeSet::from(["cart", "prices"]), "{seen:?}");
    for metric in [
        "baton_attempts_total",
        "baton_attempt_failures_total",
        "baton_retries_total",
    ] {
        assert!(
            seen.contains(&(metric.to_owned(), "prices".to_owned())),
            "{metric}: {seen:?}"
        );
    }
}

/// Runs `run` on a paused current-thread runtime with `recorder` installed.
fn record<T>(recorder: &NodeLabels, run: impl std::future::Future<Output = T>) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    metrics::with_local_recorder(recorder, || rt.block_on(run))
}

#[test]
fn a_nodes_label_is_its_whole_name_even_with_brackets() {
    let orch = Orchestrator::builder()
        .observer(MetricsObserver::new())
        .build();
    let mut g = orch.graph::<()>();
    // A node whose name looks like an item's, and a map node whose name does too.
    let list = g
        .node("x[3]")
        .retry(Retry::new(2))
        .task(|ctx, ()| async move {
            if ctx.attempt() == 1 {
                return Err::<Vec<u64>, BoxError>("503".into());
            }
            Ok(vec![1, 2])
        });
    g.node("y[0]")
        .after(list)
        .map(|_item, i: u64| async move { Ok::<_, BoxError>(i) });
    let graph = g.build().unwrap();
    let recorder = NodeLabels::default();
    assert!(record(&recorder, graph.run(())).unwrap().is_clean());
    let seen = recorder.0.lock().unwrap().clone();
    let values: BTreeSet<&str> = seen.iter().map(|(_, v)| v.as_str()).collect();
    assert_eq!(values, BTreeSet::from(["x[3]", "y[0]"]), "{seen:?}");
    assert!(seen.contains(&("baton_attempt_failures_total".to_owned(), "x[3]".to_owned())));
    assert!(seen.contains(&("baton_attempts_total".to_owned(), "y[0]".to_owned())));
}

#[test]
fn compensations_are_counted_by_node_and_outcome() {
    let orch = Orchestrator::builder()
        .observer(MetricsObserver::new())
        .build();
    let mut g = orch.graph::<()>();
    g.failure_mode(baton_graph::FailureMode::FailAll);
    let stock = g
        .node("stock")
        .compensate(|_ctx, _n| async { Ok::<_, BoxError>(()) })
        .task(|_ctx, ()| async { Ok::<_, BoxError>(3_u32) });
    g.node("ship")
        .after(stock)
        .task(|_ctx, _n| async { Err::<(), BoxError>("down".into()) });
    let graph = g.build().unwrap();
    let recorder = NodeLabels::default();
    assert!(record(&recorder, graph.run(())).is_err());
    let seen = recorder.0.lock().unwrap().clone();
    assert!(
        seen.contains(&("baton_compensations_total".to_owned(), "stock".to_owned())),
        "{seen:?}"
    );
}
