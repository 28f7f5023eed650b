//! Property test: over random graphs with random failures, timeouts, retries, fallbacks,
//! routers and cancellation, every node's callbacks fire exactly once per run (in the
//! right kind for its outcome), and every node's observer events come in order: started →
//! attempts → finished, with exactly one `NodeFinished`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_graph::{
    Backoff, BoxError, FailureMode, Fallback, Node, NodeReport, Orchestrator, Outcome, Retry,
    RunOptions, observe::Event,
};
use proptest::prelude::*;
use proptest::sample::Index;

#[derive(Debug, Clone)]
struct Spec {
    ups: Vec<Index>,
    sleep_ms: u64,
    fail_attempts: u8,
    timeout: bool,
    retry: bool,
    fallback: bool,
    router: bool,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        prop::collection::vec(any::<Index>(), 0..3),
        0u64..30,
        0u8..4,
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.4),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.15),
    )
        .prop_map(
            |(ups, sleep_ms, fail_attempts, timeout, retry, fallback, router)| Spec {
                ups,
                sleep_ms,
                fail_attempts,
                timeout,
                retry,
                fallback,
                router,
            },
        )
}

#[derive(Default)]
struct Tally {
    success: AtomicU32,
    failure: AtomicU32,
    complete: AtomicU32,
}

type Events = Arc<Mutex<HashMap<String, Vec<&'static str>>>>;

fn observer(events: &Events) -> impl Fn(&Event<'_>) + Send + Sync + 'static {
    let events = Arc::clone(events);
    move |e: &Event<'_>| {
        let (node, kind) = match e {
            Event::NodeStarted { node, .. } => (*node, "started"),
            Event::AttemptStarted { node, .. } => (*node, "attempt"),
            Event::AttemptFailed { node, .. } => (*node, "attempt_failed"),
            Event::Timeout { node, .. } => (*node, "timeout"),
            Event::RetryScheduled { node, .. } => (*node, "retry"),
            Event::FallbackUsed { node, .. } => (*node, "fallback"),
            Event::NodeFinished { node, .. } => (*node, "finished"),
            _ => return,
        };
        events
            .lock()
            .unwrap()
            .entry(node.to_owned())
            .or_default()
            .push(kind);
    }
}

fn check(specs: Vec<Spec>, cancel_after: Option<u64>, fail_fast: bool) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let events: Events = Arc::default();
    let orch = Orchestrator::builder().observer(observer(&events)).build();
    let mut g = orch.graph::<()>();
    let mut handles: Vec<Node<u64>> = Vec::new();
    let mut tallies: HashMap<String, Arc<Tally>> = HashMap::new();
    for (i, s) in specs.iter().enumerate() {
        let ups: Vec<Node<u64>> = if handles.is_empty() {
            Vec::new()
        } else {
            s.ups
                .iter()
                .map(|ix| handles[ix.index(handles.len())])
                .collect()
        };
        let (sleep_ms, fail_attempts) = (s.sleep_ms, u32::from(s.fail_attempts));
        let task = move |ctx: baton_graph::Ctx<()>, vals: Vec<Arc<u64>>| async move {
            tokio::time::sleep(Duration::from_millis(sleep_ms)).await;
            if ctx.attempt() <= fail_attempts {
                Err::<u64, BoxError>("planned failure".into())
            } else {
                Ok(vals.iter().map(|v| **v).sum::<u64>() + 1)
            }
        };
        let name = format!("n{i}");
        let tally = Arc::new(Tally::default());
        let handle = if s.router {
            let tb = Arc::new(Tally::default());
            let tb2 = Arc::new(Tally::default());
            tallies.insert("a".to_owned(), Arc::clone(&tb));
            tallies.insert("b".to_owned(), Arc::clone(&tb2));
            let r = g
                .router(name.clone())
                .after(ups)
                .select(|_i, vals| if vals.len() % 2 == 0 { "a" } else { "b" })
                .branch("a", |b| {
                    with_callbacks(b.timeout(Duration::from_millis(20)), &tb).task(task)
                })
                .branch("b", |b| with_callbacks(b, &tb2).task(task))
                .finish();
            tallies.insert(name.clone(), Arc::clone(&tally));
            r
        } else {
            let mut b = with_callbacks(g.node(name.clone()).after(ups), &tally);
            if s.timeout {
                b = b.timeout(Duration::from_millis(15));
            }
            if s.retry {
                b = b.retry(Retry::new(3).backoff(Backoff::constant(Duration::from_millis(3))));
            }
            if s.fallback {
                b = b.fallback(Fallback::value(0));
            }
            b.task(task)
        };
        if !s.router {
            tallies.insert(name, tally);
        }
        handles.push(handle);
        // Only one router per graph: branch names "a"/"b" must stay unique.
        if s.router {
            break;
        }
    }
    let graph = match g.build() {
        Ok(graph) => graph,
        Err(e) => panic!("build: {e}"),
    };
    let mode = if fail_fast {
        FailureMode::FailFast
    } else {
        FailureMode::PreservePartial
    };
    let report = rt.block_on(async {
        let run = graph.run_with((), RunOptions::new().failure_mode(mode));
        let canceller = run.canceller();
        let task = tokio::spawn(run);
        if let Some(ms) = cancel_after {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            canceller.cancel();
        }
        match task.await.unwrap() {
            Ok(r) => r,
            Err(e) => e.into_report().unwrap(),
        }
    });
    let events = events.lock().unwrap();
    for node in report.nodes() {
        let name = node.name();
        if let Some(t) = tallies.get(name) {
            let (s, f, c) = (
                t.success.load(Ordering::SeqCst),
                t.failure.load(Ordering::SeqCst),
                t.complete.load(Ordering::SeqCst),
            );
            // A router has no callbacks of its own here: its tally stays at zero.
            let router = specs.iter().any(|s| s.router)
                && name == format!("n{}", specs.iter().position(|s| s.router).unwrap_or(0));
            if router {
                assert_eq!((s, f, c), (0, 0, 0));
            } else {
                assert_eq!(
                    c,
                    1,
                    "{name}: on_complete fired {c} times ({})",
                    node.outcome()
                );
                let expect = match node.outcome() {
                    Outcome::Succeeded | Outcome::Recovered => (1, 0),
                    Outcome::Failed | Outcome::Skipped => (0, 1),
                    _ => (0, 0),
                };
                assert_eq!((s, f), expect, "{name} {}", node.outcome());
            }
        }
        let seen = events.get(name).cloned().unwrap_or_default();
        assert_eq!(
            seen.iter().filter(|k| **k == "finished").count(),
            1,
            "{name}: {seen:?}"
        );
        assert_eq!(seen.last(), Some(&"finished"), "{name}: {seen:?}");
        if seen.len() > 1 {
            assert_eq!(seen[0], "started", "{name}: {seen:?}");
        }
        let attempts = seen.iter().filter(|k| **k == "attempt").count() as u32;
        assert_eq!(attempts, node.attempts(), "{name}: {seen:?}");
    }
}

fn with_callbacks<'g, U, T: Send + Sync + 'static>(
    b: baton_graph::NodeBuilder<'g, (), U, T>,
    tally: &Arc<Tally>,
) -> baton_graph::NodeBuilder<'g, (), U, T> {
    let (t1, t2, t3) = (Arc::clone(tally), Arc::clone(tally), Arc::clone(tally));
    b.on_success(move |_| {
        t1.success.fetch_add(1, Ordering::SeqCst);
    })
    .on_failure(move |_n: &NodeReport<'_>| {
        t2.failure.fetch_add(1, Ordering::SeqCst);
    })
    .on_complete(move |_n: &NodeReport<'_>| {
        t3.complete.fetch_add(1, Ordering::SeqCst);
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn callbacks_and_events_fire_once_in_order(
        specs in prop::collection::vec(spec(), 1..60),
        cancel_after in prop::option::weighted(0.3, 0u64..120),
        fail_fast in prop::bool::weighted(0.2),
    ) {
        check(specs, cancel_after, fail_fast);
    }
}
