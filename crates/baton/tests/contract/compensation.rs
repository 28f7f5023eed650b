//! Compensation: when a run fails by the graph's trigger, the compensations of the nodes
//! that succeeded run, downstreams first, each with its own timeout and retry, even after
//! the run's deadline, a cancel or a dropped future; the run's error and report say how
//! it went.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_graph::{
    BoxError, FailureMode, Graph, GraphBuilder, Node, Outcome, Retry, RunError, RunOptions,
    compensate::CompensationTrigger,
};
use tokio::time::{Instant, sleep};

use crate::ms;

type Log = Arc<Mutex<Vec<(String, Duration)>>>;

/// A node that succeeds with `()` after `took` ms, whose compensation takes 10 ms and logs
/// its name and when it started, from `t0`.
fn undoable<U: baton_graph::Upstreams>(
    g: &mut GraphBuilder<()>,
    name: &str,
    after: U,
    took: u64,
    log: &Log,
    t0: Instant,
) -> Node<()> {
    let log = Arc::clone(log);
    g.node(name)
        .after(after)
        .compensate(move |ctx, _value: Arc<()>| {
            let log = Arc::clone(&log);
            async move {
                log.lock()
                    .unwrap()
                    .push((ctx.node_name().to_owned(), t0.elapsed()));
                sleep(ms(10)).await;
                Ok::<_, BoxError>(())
            }
        })
        .task(move |_ctx, _| async move {
            sleep(ms(took)).await;
            Ok::<_, BoxError>(())
        })
}

#[tokio::test(start_paused = true)]
async fn compensations_run_in_reverse_dependency_order_once_a_run_fails() {
    let log: Log = Arc::default();
    let t0 = Instant::now();
    let mut g = Graph::<()>::builder();
    g.failure_mode(FailureMode::FailAll);
    let a = undoable(&mut g, "a", (), 10, &log, t0);
    let b = undoable(&mut g, "b", a, 10, &log, t0);
    g.node("c")
        .after(b)
        .task(|_ctx, _| async { Err::<(), BoxError>("503".into()) });
    undoable(&mut g, "d", (), 10, &log, t0);
    g.node("e").task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    let err = g.build().unwrap().run(()).await.unwrap_err();
    let RunError::Compensated {
        compensated: 3,
        report,
    } = err
    else {
        panic!("not compensated: {err:?}");
    };
    // b and d end at 20 ms and 10 ms, c fails at 20 ms: d (no downstream) first, then b
    // (above the failed c), then a; each takes 10 ms.
    let got = log.lock().unwrap().clone();
    let expected: Vec<(String, Duration)> = [("d", 20), ("b", 30), ("a", 40)]
        .iter()
        .map(|(n, t)| ((*n).to_owned(), ms(*t)))
        .collect();
    assert_eq!(got, expected);
    let compensation = report.compensation().unwrap();
    assert!(compensation.complete());
    assert_eq!(
        compensation.iter().map(|c| c.node()).collect::<Vec<_>>(),
        ["d", "b", "a"]
    );
    assert_eq!(compensation.not_compensated().collect::<Vec<_>>(), ["e"]);
    let a = compensation.get("a").unwrap();
    assert_eq!(
        (a.outcome(), a.attempts(), a.start(), a.end()),
        (Outcome::Succeeded, 1, ms(40), ms(50))
    );
    let text = report.to_string();
    assert!(text.contains("compensation (complete):"), "{text}");
    assert!(text.contains("not compensated: e"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn every_compensation_runs_even_if_one_fails_and_the_error_says_so() {
    let ran = Arc::new(AtomicU32::new(0));
    let mut g = Graph::<()>::builder();
    g.failure_mode(FailureMode::FailAll);
    let r = Arc::clone(&ran);
    g.node("bad")
        .compensate(move |_ctx, _: Arc<()>| {
            let r = Arc::clone(&r);
            async move {
                r.fetch_add(1, Ordering::SeqCst);
                Err::<(), BoxError>("refund service down".into())
            }
        })
        .compensate_policies(ms(100), Retry::new(2))
        .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    let r = Arc::clone(&ran);
    g.node("good")
        .compensate(move |_ctx, _: Arc<()>| {
            let r = Arc::clone(&r);
            async move {
                r.fetch_add(10, Ordering::SeqCst);
                Ok::<_, BoxError>(())
            }
        })
        .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    g.node("fails")
        .task(|_ctx, ()| async { Err::<(), BoxError>("503".into()) });
    let err = g.build().unwrap().run(()).await.unwrap_err();
    assert_eq!(ran.load(Ordering::SeqCst), 12, "bad twice, good once");
    let RunError::PartiallyCompensated { failed, report } = err else {
        panic!("not partially compensated: {err:?}");
    };
    assert_eq!(failed, ["bad"]);
    let compensation = report.compensation().unwrap();
    assert!(!compensation.complete());
    let bad = compensation.get("bad").unwrap();
    assert_eq!((bad.outcome(), bad.attempts()), (Outcome::Failed, 2));
    assert_eq!(bad.error().map(|e| e.kind()), Some("gave_up"));
    assert_eq!(
        compensation.get("good").map(|c| c.outcome()),
        Some(Outcome::Succeeded)
    );
    assert!(err_text(&report).contains("partial"));
}

fn err_text(report: &baton_graph::Report) -> String {
    report.to_string()
}

/// A graph of `reserve` (with a compensation that sets `undone`) and `ship` (fails).
fn reserve_and_ship(trigger: Option<CompensationTrigger>, undone: &Arc<AtomicBool>) -> Graph<()> {
    let mut g = Graph::<()>::builder();
    if let Some(trigger) = trigger {
        g.compensate_when(trigger);
    }
    let undone = Arc::clone(undone);
    let reserve = g
        .node("reserve")
        .compensate(move |_ctx, _: Arc<u32>| {
            let undone = Arc::clone(&undone);
            async move {
                undone.store(true, Ordering::SeqCst);
                Ok::<_, BoxError>(())
            }
        })
        .task(|_ctx, ()| async { Ok::<_, BoxError>(1_u32) });
    g.node("ship")
        .after(reserve)
        .task(|_ctx, _| async { Err::<(), BoxError>("503".into()) });
    g.build().unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_trigger_is_the_users_choice() {
    // Default: the run must be an error under its failure mode. In preserve-partial a
    // failed node leaves the run `Ok`: nothing is compensated.
    let undone = Arc::new(AtomicBool::new(false));
    let graph = reserve_and_ship(None, &undone);
    let report = graph.run(()).await.unwrap();
    assert!(report.compensation().is_none());
    assert!(!undone.load(Ordering::SeqCst));
    // In fail-all it is an error: compensated.
    let options = RunOptions::new().failure_mode(FailureMode::FailAll);
    let err = graph.run_with((), options).await.unwrap_err();
    assert!(matches!(err, RunError::Compensated { .. }), "{err}");
    assert!(undone.swap(false, Ordering::SeqCst));
    // Named nodes, in preserve-partial.
    let graph = reserve_and_ship(Some(CompensationTrigger::nodes_failed(["ship"])), &undone);
    assert!(matches!(
        graph.run(()).await,
        Err(RunError::Compensated { .. })
    ));
    assert!(undone.swap(false, Ordering::SeqCst));
    let graph = reserve_and_ship(
        Some(CompensationTrigger::nodes_failed(["reserve"])),
        &undone,
    );
    assert!(graph.run(()).await.is_ok());
    assert!(!undone.load(Ordering::SeqCst));
    // A predicate on the report.
    let trigger = CompensationTrigger::when(|report| report.counts().failed > 0);
    let graph = reserve_and_ship(Some(trigger), &undone);
    assert!(matches!(
        graph.run(()).await,
        Err(RunError::Compensated { .. })
    ));
    assert!(undone.load(Ordering::SeqCst));
}

/// `reserve` (compensated), then a router choosing `shortage` over `ship`.
fn reserve_then_route(undone: &Arc<AtomicBool>) -> Graph<()> {
    let mut g = Graph::<()>::builder();
    g.compensate_when(CompensationTrigger::nodes_failed(["ship"]));
    let undone = Arc::clone(undone);
    let reserve = g
        .node("reserve")
        .compensate(move |_ctx, _: Arc<u32>| {
            let undone = Arc::clone(&undone);
            async move {
                undone.store(true, Ordering::SeqCst);
                Ok::<_, BoxError>(())
            }
        })
        .task(|_ctx, ()| async { Ok::<_, BoxError>(0_u32) });
    g.router("dispatch")
        .after(reserve)
        .select(|_input, left| if **left > 0 { "ship" } else { "shortage" })
        .branch("ship", |b| {
            b.task(|_ctx, _| async { Ok::<_, BoxError>(()) })
        })
        .branch("shortage", |b| {
            b.task(|_ctx, _| async { Ok::<_, BoxError>(()) })
        })
        .finish();
    g.build().unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_branch_its_router_did_not_choose_has_not_failed() {
    let undone = Arc::new(AtomicBool::new(false));
    let report = reserve_then_route(&undone).run(()).await.unwrap();
    assert_eq!(report.by_name("ship").unwrap().outcome(), Outcome::NotTaken);
    assert!(report.compensation().is_none());
    assert!(!undone.load(Ordering::SeqCst));
}

#[tokio::test(start_paused = true)]
async fn compensations_run_after_a_spent_deadline_a_cancel_and_a_dropped_run() {
    let undone = Arc::new(AtomicU32::new(0));
    let keys = Arc::new(Mutex::new(Vec::new()));
    let mut g = Graph::<()>::builder();
    g.failure_mode(FailureMode::FailAll);
    let (u, k, k2) = (Arc::clone(&undone), Arc::clone(&keys), Arc::clone(&keys));
    g.node("quick")
        .compensate(move |ctx, _: Arc<()>| {
            let (u, k) = (Arc::clone(&u), Arc::clone(&k));
            async move {
                // It has its own time: the run's deadline is spent by now.
                sleep(ms(50)).await;
                k.lock().unwrap().push(ctx.idempotency_key().to_string());
                u.fetch_add(1, Ordering::SeqCst);
                Ok::<_, BoxError>(())
            }
        })
        .task(move |ctx, ()| {
            let k2 = Arc::clone(&k2);
            async move {
                k2.lock().unwrap().push(ctx.idempotency_key().to_string());
                Ok::<_, BoxError>(())
            }
        });
    g.node("slow").task(|_ctx, ()| async {
        sleep(ms(1_000)).await;
        Ok::<_, BoxError>(())
    });
    let graph = g.build().unwrap();

    // A spent deadline.
    let err = graph
        .run_with((), RunOptions::new().timeout(ms(100)))
        .await
        .unwrap_err();
    let RunError::Compensated { report, .. } = err else {
        panic!("{err:?}")
    };
    let c = report.compensation().unwrap();
    assert_eq!(
        (
            c.get("quick").unwrap().start(),
            c.get("quick").unwrap().end()
        ),
        (ms(100), ms(150))
    );
    assert_eq!(undone.load(Ordering::SeqCst), 1);
    {
        let keys = keys.lock().unwrap();
        assert_eq!(
            keys[0], keys[1],
            "the compensation has the node's idempotency key"
        );
    }

    // A cancel.
    let run = graph.run(());
    let canceller = run.canceller();
    tokio::spawn(async move {
        sleep(ms(10)).await;
        canceller.cancel();
    });
    assert!(matches!(run.await, Err(RunError::Compensated { .. })));
    assert_eq!(undone.load(Ordering::SeqCst), 2);

    // A dropped run: its compensation runs on a task of its own.
    let run = graph.run(());
    let _ = tokio::time::timeout(ms(10), run).await;
    sleep(ms(100)).await;
    assert_eq!(undone.load(Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_real_clock_a_compensation_runs_after_a_spent_deadline() {
    let undone = Arc::new(AtomicBool::new(false));
    let u = Arc::clone(&undone);
    let mut g = Graph::<()>::builder();
    g.failure_mode(FailureMode::FailAll);
    g.node("quick")
        .compensate(move |ctx, _: Arc<()>| {
            let u = Arc::clone(&u);
            async move {
                assert!(ctx.remaining().is_some_and(|r| r > ms(1_000)));
                sleep(ms(5)).await;
                u.store(true, Ordering::SeqCst);
                Ok::<_, BoxError>(())
            }
        })
        .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    g.node("slow").task(|_ctx, ()| async {
        sleep(ms(10_000)).await;
        Ok::<_, BoxError>(())
    });
    let run = g
        .build()
        .unwrap()
        .run_with((), RunOptions::new().timeout(ms(20)));
    let err = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(err, RunError::Compensated { compensated: 1, .. }),
        "{err}"
    );
    assert!(undone.load(Ordering::SeqCst));
}

#[tokio::test(start_paused = true)]
async fn compensations_are_told_in_events_and_counted_in_stats() {
    let events: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = Arc::clone(&events);
    let orch = baton_graph::Orchestrator::builder()
        .observer(move |e: &baton_graph::observe::Event<'_>| {
            let line = match e {
                baton_graph::observe::Event::CompensationStarted { node, .. } => {
                    format!("{node} started")
                }
                baton_graph::observe::Event::CompensationFinished {
                    node,
                    outcome,
                    attempts,
                    ..
                } => format!("{node} {} {attempts}", outcome.as_str()),
                baton_graph::observe::Event::NodeFinished { node, .. } => format!("{node} ended"),
                baton_graph::observe::Event::RunFinished { .. } => "run finished".to_owned(),
                _ => return,
            };
            seen.lock().unwrap().push(line);
        })
        .build();
    let mut g = orch.graph::<()>();
    g.failure_mode(FailureMode::FailAll);
    let kept = g
        .node("kept")
        .compensate(|_ctx, _v: Arc<u32>| async { Ok::<_, BoxError>(()) })
        .task(|_ctx, ()| async { Ok::<_, BoxError>(1_u32) });
    let lost = g
        .node("lost")
        .compensate(|_ctx, _v: Arc<u32>| async { Err::<(), BoxError>("still down".into()) })
        .compensate_policies(ms(100), Retry::new(2))
        .task(|_ctx, ()| async { Ok::<_, BoxError>(2_u32) });
    g.node("ship")
        .after((kept, lost))
        .task(|_ctx, _| async { Err::<(), BoxError>("carrier down".into()) });
    let err = g.build().unwrap().run(()).await.unwrap_err();
    assert!(
        matches!(err, RunError::PartiallyCompensated { .. }),
        "{err}"
    );
    let events = events.lock().unwrap().clone();
    // After every node ended, before the run finished: each compensation's start and end.
    assert_eq!(events.len(), 8, "{events:?}");
    assert!(
        events[..3].iter().all(|e| e.ends_with("ended")),
        "{events:?}"
    );
    let mut middle = events[3..7].to_vec();
    middle.sort();
    assert_eq!(
        middle,
        [
            "kept started",
            "kept succeeded 1",
            "lost failed 2",
            "lost started"
        ],
        "{events:?}"
    );
    assert_eq!(events[7], "run finished");
    let stats = orch.stats();
    assert_eq!(
        (stats.compensations_succeeded, stats.compensations_failed),
        (1, 1)
    );
    assert!(
        stats
            .to_string()
            .contains(" compensations[succeeded 1 failed 1] "),
        "{stats}"
    );
}
