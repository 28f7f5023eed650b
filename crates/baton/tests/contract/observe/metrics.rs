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
