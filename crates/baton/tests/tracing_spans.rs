//! The `tracing` span tree of a run: `run` → `node` → `attempt`, with the fields events
//! carry, checked with a real subscriber (tracing-subscriber's registry and a layer that
//! records each span's parent).

// A test binary of its own: `set_default` makes `tracing::dispatcher::has_been_set()` true
// for the rest of the process, and from then on baton makes spans in every run.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_graph::{Backoff, BoxError, Graph, Retry};
use tracing::Subscriber;
use tracing::span::{Attributes, Id};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;

/// A span as recorded: its name, its parent (name and fields), its own fields.
type Recorded = (String, Option<String>, String);

#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<Recorded>>>);

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() != "run_id" {
            self.0.push_str(&format!("{}={:?} ", field.name(), value));
        }
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let parent = span.parent().map(|p| {
            let mut name = p.name().to_owned();
            if let Some(f) = p.extensions().get::<String>() {
                name.push_str(&format!("({})", f.trim()));
            }
            name
        });
        let mut fields = Fields(String::new());
        attrs.record(&mut fields);
        span.extensions_mut().insert(fields.0.clone());
        self.0
            .lock()
            .unwrap()
            .push((span.name().to_owned(), parent, fields.0.trim().to_owned()));
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_run_has_a_span_per_run_node_and_attempt() {
    let spans = Spans::default();
    let _guard = tracing_subscriber::registry()
        .with(spans.clone())
        .set_default();
    let mut g = Graph::<()>::builder();
    let calls = Arc::new(Mutex::new(0));
    let a = g.node("a").task(|_ctx, ()| async { Ok::<_, BoxError>(1) });
    let _b = g
        .node("b")
        .after(a)
        .retry(Retry::new(2).backoff(Backoff::constant(Duration::from_millis(5))))
        .task(move |_ctx, _| {
            let calls = Arc::clone(&calls);
            async move {
                let mut n = calls.lock().unwrap();
                *n += 1;
                if *n == 1 {
                    Err::<u8, BoxError>("first".into())
                } else {
                    Ok(2)
                }
            }
        });
    g.build().unwrap().run(()).await.unwrap();
    let got = spans.0.lock().unwrap().clone();
    assert_eq!(
        got,
        [
            ("run".into(), None, "nodes=2".into()),
            (
                "node".into(),
                Some("run(nodes=2)".into()),
                "node=\"a\"".into()
            ),
            (
                "attempt".into(),
                Some("node(node=\"a\")".into()),
                "node=\"a\" attempt=1".into()
            ),
            (
                "node".into(),
                Some("run(nodes=2)".into()),
                "node=\"b\"".into()
            ),
            (
                "attempt".into(),
                Some("node(node=\"b\")".into()),
                "node=\"b\" attempt=1".into()
            ),
            (
                "attempt".into(),
                Some("node(node=\"b\")".into()),
                "node=\"b\" attempt=2".into()
            ),
        ]
    );
}
