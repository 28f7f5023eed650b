//! The `tracing` side of a run, checked with a real subscriber (tracing-subscriber's
//! registry and a layer that records every span, with its parent and the fields recorded
//! on it, and every event, with its level and the span it happened in): the span tree
//! `run` → `node` → `attempt` and where it hangs, how spans say a node or an attempt
//! ended, and what is logged at which level.

// A test binary of its own: `set_default` makes `tracing::dispatcher::has_been_set()` true
// for the rest of the process, and from then on baton makes spans in every run.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_graph::{
    Backoff, BoxError, Bulkhead, CircuitBreaker, Fallback, Graph, Orchestrator, Retry, RunOptions,
};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Instrument, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;

/// A span as recorded: its label (`name{fields given at its creation}`), its parent's
/// label, and every field it has by the end (the ones recorded later included).
#[derive(Debug, Clone)]
struct SpanRec {
    label: String,
    parent: Option<String>,
    fields: BTreeMap<String, String>,
}

/// An event as recorded: its level, message, other fields, and the label of the span it
/// happened in.
#[derive(Debug, Clone)]
struct EventRec {
    level: Level,
    message: String,
    fields: BTreeMap<String, String>,
    span: Option<String>,
}

#[derive(Clone, Default)]
struct Capture {
    spans: Arc<Mutex<Vec<SpanRec>>>,
    events: Arc<Mutex<Vec<EventRec>>>,
}

/// Where a span's record is, in `Capture::spans` (kept in the span's extensions).
struct At(usize);

/// Fields in the order they come, strings without quotes.
#[derive(Default)]
struct Fields(Vec<(String, String)>);

impl tracing::field::Visit for Fields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.push((field.name().to_owned(), value.to_owned()));
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }
}

impl Capture {
    fn spans(&self) -> Vec<SpanRec> {
        self.spans.lock().unwrap().clone()
    }

    fn events(&self) -> Vec<EventRec> {
        self.events.lock().unwrap().clone()
    }

    /// The one span labelled `label`.
    fn span(&self, label: &str) -> SpanRec {
        let spans = self.spans();
        let found: Vec<_> = spans.iter().filter(|s| s.label == label).collect();
        assert_eq!(found.len(), 1, "one span {label} in {spans:#?}");
        found[0].clone()
    }

    /// The events whose message is `message`.
    fn events_saying(&self, message: &str) -> Vec<EventRec> {
        self.events()
            .into_iter()
            .filter(|e| e.message == message)
            .collect()
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let parent = span
            .parent()
            .and_then(|p| p.extensions().get::<At>().map(|at| at.0))
            .map(|at| self.spans.lock().unwrap()[at].label.clone());
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        let shown: Vec<String> = fields
            .0
            .iter()
            .filter(|(k, _)| k != "run_id")
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let label = format!("{}{{{}}}", span.name(), shown.join(" "));
        let mut spans = self.spans.lock().unwrap();
        span.extensions_mut().insert(At(spans.len()));
        spans.push(SpanRec {
            label,
            parent,
            fields: fields.0.into_iter().collect(),
        });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let Some(at) = span.extensions().get::<At>().map(|at| at.0) else {
            return;
        };
        let mut fields = Fields::default();
        values.record(&mut fields);
        self.spans.lock().unwrap()[at].fields.extend(fields.0);
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let span = ctx
            .event_span(event)
            .and_then(|s| s.extensions().get::<At>().map(|at| at.0))
            .map(|at| self.spans.lock().unwrap()[at].label.clone());
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut fields: BTreeMap<String, String> = fields.0.into_iter().collect();
        let message = fields.remove("message").unwrap_or_default();
        self.events.lock().unwrap().push(EventRec {
            level: *event.metadata().level(),
            message,
            fields,
            span,
        });
    }
}

fn capture() -> (Capture, tracing::subscriber::DefaultGuard) {
    let capture = Capture::default();
    let guard = tracing_subscriber::registry()
        .with(capture.clone())
        .set_default();
    (capture, guard)
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

fn field<'a>(fields: &'a BTreeMap<String, String>, key: &str) -> Option<&'a str> {
    fields.get(key).map(String::as_str)
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_run_has_a_span_per_run_node_and_attempt() {
    let (capture, _guard) = capture();
    let mut g = Graph::<()>::builder();
    let a = g.node("a").task(|_ctx, ()| async { Ok::<_, BoxError>(1) });
    let _b = g
        .node("b")
        .after(a)
        .retry(Retry::new(2).backoff(Backoff::constant(Duration::from_millis(5))))
        .task({
            let task = failing(1, "first");
            move |ctx, _| task(ctx, ())
        });
    g.build().unwrap().run(()).await.unwrap();
    let got: Vec<(String, Option<String>)> = capture
        .spans()
        .into_iter()
        .map(|s| (s.label, s.parent))
        .collect();
    let run = "run{nodes=2}";
    let expected = [
        (run, None),
        ("node{node=a}", Some(run)),
        ("attempt{node=a attempt=1}", Some("node{node=a}")),
        ("node{node=b}", Some(run)),
        ("attempt{node=b attempt=1}", Some("node{node=b}")),
        ("attempt{node=b attempt=2}", Some("node{node=b}")),
    ]
    .map(|(s, p)| (s.to_owned(), p.map(str::to_owned)));
    assert_eq!(got, expected);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_run_span_is_a_child_of_the_span_that_awaits_it_unless_detached() {
    let (capture, _guard) = capture();
    let mut g = Graph::<()>::builder();
    g.node("a").task(|_ctx, ()| async { Ok::<_, BoxError>(1) });
    let graph = g.build().unwrap();
    let request = tracing::info_span!("request", id = 7);
    graph.run(()).instrument(request.clone()).await.unwrap();
    // Inside a handler: the span current where the run is first polled.
    async {
        graph.run(()).await.unwrap();
    }
    .instrument(tracing::info_span!("handler", id = 8))
    .await;
    let detached = RunOptions::new().detached_span(true);
    graph
        .run_with((), detached)
        .instrument(request)
        .await
        .unwrap();
    let runs: Vec<Option<String>> = capture
        .spans()
        .into_iter()
        .filter(|s| s.label == "run{nodes=1}")
        .map(|s| s.parent)
        .collect();
    assert_eq!(
        runs,
        [
            Some("request{id=7}".to_owned()),
            Some("handler{id=8}".to_owned()),
            None
        ]
    );
    // The nodes hang under their run, whatever it hangs under.
    for node in capture.spans().iter().filter(|s| s.label == "node{node=a}") {
        assert_eq!(node.parent.as_deref(), Some("run{nodes=1}"));
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_named_graphs_run_span_carries_its_name() {
    let (capture, _guard) = capture();
    let mut g = Graph::<()>::builder();
    g.name("checkout");
    g.node("a").task(|_ctx, ()| async { Ok::<_, BoxError>(1) });
    g.build().unwrap().run(()).await.unwrap();
    let labels: Vec<String> = capture.spans().into_iter().map(|s| s.label).collect();
    assert_eq!(
        labels,
        [
            "run{nodes=1 graph=checkout}",
            "node{node=a}",
            "attempt{node=a attempt=1}"
        ]
    );
}

/// A graph whose nodes end every way a span tells apart: succeeded after a failed attempt,
/// recovered by a fallback, failed, timed out, refused a bulkhead permit.
fn graph_of_every_ending(orch: &Orchestrator, breaker: &CircuitBreaker) -> Graph<()> {
    let mut g = orch.graph::<()>();
    let retry = || Retry::new(2).backoff(Backoff::constant(Duration::from_millis(5)));
    g.node("flaky").retry(retry()).task(failing(1, "first"));
    g.node("rescued")
        .fallback(Fallback::value(9))
        .task(failing(u32::MAX, "down"));
    g.node("broken")
        .breaker(breaker)
        .task(failing(u32::MAX, "boom"));
    g.node("slow")
        .timeout(Duration::from_millis(10))
        .task(|_ctx, ()| async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok::<u8, BoxError>(1)
        });
    // `holder` takes the only permit and waits; `crowded`, which may not wait, finds none.
    let pool = Bulkhead::new("pool", 1, Duration::ZERO);
    g.node("holder").bulkhead(&pool).task(|_ctx, ()| async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok::<u8, BoxError>(1)
    });
    g.node("crowded")
        .bulkhead(&pool)
        .task(|_ctx, ()| async { Ok::<u8, BoxError>(1) });
    g.build().unwrap()
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn spans_say_how_each_attempt_and_node_ended() {
    let (capture, _guard) = capture();
    let orch = Orchestrator::new();
    let breaker = CircuitBreaker::builder("payments").build().unwrap();
    graph_of_every_ending(&orch, &breaker)
        .run(())
        .await
        .unwrap();

    let status = |label: &str| {
        let span = capture.span(label);
        (
            field(&span.fields, "otel.status_code").map(str::to_owned),
            field(&span.fields, "error.type").map(str::to_owned),
            field(&span.fields, "otel.status_message").map(str::to_owned),
        )
    };
    let ok = (Some("OK".to_owned()), None, None);
    let error = |kind: &str, message: &str| {
        (
            Some("ERROR".to_owned()),
            Some(kind.to_owned()),
            Some(message.to_owned()),
        )
    };
    // A retry recovered: the failed attempt carries its error, the node is OK.
    assert_eq!(
        status("attempt{node=flaky attempt=1}"),
        error("task", "first")
    );
    assert_eq!(status("attempt{node=flaky attempt=2}"), ok);
    assert_eq!(status("node{node=flaky}"), ok);
    assert_eq!(
        field(&capture.span("node{node=flaky}").fields, "outcome"),
        Some("succeeded")
    );
    // A fallback recovered: the node is OK too.
    assert_eq!(
        status("attempt{node=rescued attempt=1}"),
        error("task", "down")
    );
    assert_eq!(status("node{node=rescued}"), ok);
    assert_eq!(
        field(&capture.span("node{node=rescued}").fields, "outcome"),
        Some("recovered")
    );
    // Nothing recovered: the node is an error, with its error.
    assert_eq!(
        status("attempt{node=broken attempt=1}"),
        error("task", "boom")
    );
    assert_eq!(status("node{node=broken}"), error("task", "boom"));
    let timed_out = "node `slow` attempt 1 timed out after 10 ms";
    assert_eq!(
        status("attempt{node=slow attempt=1 budget_ms=10.0}"),
        error("timeout", timed_out)
    );
    assert_eq!(status("node{node=slow}"), error("timeout", timed_out));
    // The attempt's span covers its wait for a permit: one refused a permit has one too.
    let full = "node `crowded` attempt 1: bulkhead `pool` full after waiting 0 ms";
    assert_eq!(
        status("attempt{node=crowded attempt=1}"),
        error("bulkhead_full", full)
    );
    assert_eq!(status("node{node=crowded}"), error("bulkhead_full", full));
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn failures_recoveries_and_breaker_transitions_are_logged_at_their_levels() {
    let (capture, _guard) = capture();
    let orch = Orchestrator::new();
    let breaker = CircuitBreaker::builder("payments")
        .consecutive_failures(1)
        .open_duration(Duration::from_secs(1))
        .build()
        .unwrap();
    let graph = graph_of_every_ending(&orch, &breaker);
    graph.run(()).await.unwrap();

    let one = |message: &str| {
        let found = capture.events_saying(message);
        assert_eq!(found.len(), 1, "one `{message}` in {:#?}", capture.events());
        found[0].clone()
    };
    let fields = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };

    let failed: Vec<EventRec> = capture.events_saying("attempt failed");
    let flaky = failed
        .iter()
        .find(|e| field(&e.fields, "node") == Some("flaky"))
        .expect("flaky's failed attempt is logged");
    assert_eq!(flaky.level, Level::DEBUG);
    assert_eq!(
        flaky.fields,
        fields(&[
            ("node", "flaky"),
            ("attempt", "1"),
            ("error.type", "task"),
            ("error", "first")
        ])
    );
    // In the span of the attempt that failed.
    assert_eq!(flaky.span.as_deref(), Some("attempt{node=flaky attempt=1}"));
    let retry = one("retry scheduled");
    assert_eq!(retry.level, Level::DEBUG);

    let cut = one("attempt timed out");
    assert_eq!(cut.level, Level::DEBUG);
    assert_eq!(field(&cut.fields, "error.type"), Some("timeout"));

    let recovered = one("node recovered");
    assert_eq!(recovered.level, Level::INFO);
    assert_eq!(
        recovered.fields,
        fields(&[
            ("node", "rescued"),
            ("error.type", "task"),
            ("error", "down")
        ])
    );
    assert_eq!(recovered.span.as_deref(), Some("node{node=rescued}"));

    let node_failed = capture.events_saying("node failed");
    let levels: Vec<(Level, Option<&str>)> = node_failed
        .iter()
        .map(|e| (e.level, field(&e.fields, "node")))
        .collect();
    assert_eq!(
        levels,
        [
            (Level::WARN, Some("broken")),
            (Level::WARN, Some("crowded")),
            (Level::WARN, Some("slow"))
        ]
    );
    assert_eq!(
        node_failed[0].fields,
        fields(&[
            ("node", "broken"),
            ("error.type", "task"),
            ("error", "boom")
        ])
    );
    assert_eq!(node_failed[0].span.as_deref(), Some("node{node=broken}"));

    // `broken` tripped its breaker: WARN. Once the breaker is half-open, a success closes
    // it: INFO, twice.
    let opened = one("circuit breaker opened");
    assert_eq!(opened.level, Level::WARN);
    assert_eq!(field(&opened.fields, "breaker"), Some("payments"));
    assert_eq!(field(&opened.fields, "from"), Some("closed"));
    assert_eq!(field(&opened.fields, "to"), Some("open"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut g = orch.graph::<()>();
    g.node("probe")
        .breaker(&breaker)
        .task(|_ctx, ()| async { Ok::<_, BoxError>(1) });
    g.build().unwrap().run(()).await.unwrap();
    let half_open = one("circuit breaker half-open");
    let closed = one("circuit breaker closed");
    assert_eq!((half_open.level, closed.level), (Level::INFO, Level::INFO));
    assert_eq!(field(&closed.fields, "from"), Some("half_open"));
    assert_eq!(field(&closed.fields, "to"), Some("closed"));
}

/// With spans, a router takes the full path and keeps the routing contract's times: its
/// branch starts at the router's start though the selector takes a while, the branch not
/// taken ends then, and the router ends with its branch. The branch's span is a node span
/// of the run.
#[tokio::test(flavor = "current_thread")]
async fn a_router_with_spans_keeps_its_branch_s_times() {
    let (capture, _guard) = capture();
    let mut g = Graph::<()>::builder();
    g.router("dispatch")
        .select(|_input, ()| {
            std::thread::sleep(Duration::from_millis(2));
            "ship"
        })
        .branch("ship", |b| {
            b.task(|_ctx, ()| async { Ok::<_, BoxError>(1_u8) })
        })
        .branch("hold", |b| {
            b.task(|_ctx, ()| async { Ok::<_, BoxError>(0_u8) })
        })
        .finish();
    let report = g.build().unwrap().run(()).await.unwrap();
    let (router, ship) = (
        report.by_name("dispatch").unwrap(),
        report.by_name("ship").unwrap(),
    );
    assert_eq!(ship.start(), router.start());
    assert_eq!(ship.end(), router.end());
    assert_eq!(Some(report.by_name("hold").unwrap().end()), router.start());
    let spans: Vec<(String, Option<String>)> = capture
        .spans()
        .into_iter()
        .map(|s| (s.label, s.parent))
        .collect();
    let run = "run{nodes=3}".to_owned();
    assert!(spans.contains(&("node{node=dispatch}".to_owned(), Some(run.clone()))));
    assert!(spans.contains(&("node{node=ship}".to_owned(), Some(run))));
}
