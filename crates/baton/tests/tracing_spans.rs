//! The `tracing` side of a run, checked with a real subscriber (tracing-subscriber's
//! registry and a layer that records every span with its parent): the span tree `run` →
//! `node` → `attempt`, and where it hangs.

// A test binary of its own: `set_default` makes `tracing::dispatcher::has_been_set()` true
// for the rest of the process, and from then on baton makes spans in every run.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_graph::{Backoff, BoxError, Graph, Retry, RunOptions};
use tracing::span::{Attributes, Id};
use tracing::{Instrument, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;

/// A span as recorded: its label (`name{fields given at its creation}`) and its parent's.
#[derive(Debug, Clone)]
struct SpanRec {
    label: String,
    parent: Option<String>,
}

#[derive(Clone, Default)]
struct Capture {
    spans: Arc<Mutex<Vec<SpanRec>>>,
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
        spans.push(SpanRec { label, parent });
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
