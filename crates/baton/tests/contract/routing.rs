//! Conditional routing (`docs/contract.md`, rule 12): the chosen branch runs with its own
//! policies and its value becomes the router's; the others end `NotTaken`.

use std::time::Duration;

use baton_graph::{BoxError, Fallback, Graph, GraphBuilder, NodeError, Outcome, Retry};
use tokio::time::sleep;

use crate::ms;

fn dispatch_graph(
    stock: u32,
) -> (
    Graph<()>,
    baton_graph::Node<String>,
    baton_graph::Node<String>,
) {
    let mut g = Graph::<()>::builder();
    let stock = g.node("stock").task(move |_ctx, ()| async move {
        sleep(ms(150)).await;
        Ok::<_, BoxError>(stock)
    });
    let dispatch = g
        .router("dispatch")
        .after(stock)
        .select(|_input, stock| if **stock > 0 { "ship" } else { "shortage" })
        .branch("ship", |b| {
            b.task(|_ctx, stock| async move {
                sleep(ms(80)).await;
                Ok::<_, BoxError>(format!("shipped {stock}"))
            })
        })
        .branch("shortage", |b| {
            b.retry(Retry::new(2)).task(|_ctx, _stock| async {
                sleep(ms(80)).await;
                Ok::<_, BoxError>("backordered".to_owned())
            })
        })
        .finish();
    let notify = g.node("notify").after(dispatch).task(|_ctx, d| async move {
        sleep(ms(50)).await;
        Ok::<_, BoxError>(format!("told the user: {d}"))
    });
    (g.build().unwrap(), dispatch, notify)
}

#[tokio::test(start_paused = true)]
async fn the_chosen_branch_runs_and_its_value_becomes_the_routers() {
    let (graph, dispatch, notify) = dispatch_graph(3);
    let report = graph.run(()).await.unwrap();
    assert_eq!(report.get(dispatch).map(String::as_str), Some("shipped 3"));
    assert_eq!(
        report.get(notify).map(String::as_str),
        Some("told the user: shipped 3")
    );
    let outcome = |name: &str| report.by_name(name).unwrap().outcome();
    assert_eq!(outcome("ship"), Outcome::Succeeded);
    assert_eq!(outcome("shortage"), Outcome::NotTaken);
    assert_eq!(outcome("dispatch"), Outcome::Succeeded);
    // stock 150 → ship 80 → notify 50.
    assert_eq!(report.makespan(), ms(280));
    let ship = report.by_name("ship").unwrap();
    assert_eq!((ship.start(), ship.end()), (Some(ms(150)), ms(230)));
    assert!(report.is_clean());
}

#[tokio::test(start_paused = true)]
async fn the_other_branch_for_the_other_key() {
    let (graph, dispatch, _) = dispatch_graph(0);
    let report = graph.run(()).await.unwrap();
    assert_eq!(
        report.get(dispatch).map(String::as_str),
        Some("backordered")
    );
    assert_eq!(report.by_name("ship").unwrap().outcome(), Outcome::NotTaken);
    assert_eq!(
        report.by_name("shortage").unwrap().outcome(),
        Outcome::Succeeded
    );
    assert_eq!(report.counts().not_taken, 1);
}

#[tokio::test(start_paused = true)]
async fn an_unknown_key_fails_the_router_naming_the_key_and_the_known_keys() {
    let mut g = Graph::<()>::builder();
    let r = g
        .router("r")
        .select(|_input, ()| "teleport")
        .branch("ship", |b| {
            b.task(|_ctx, ()| async { Ok::<_, BoxError>(1) })
        })
        .branch("shortage", |b| {
            b.task(|_ctx, ()| async { Ok::<_, BoxError>(2) })
        })
        .finish();
    let after = g
        .node("after")
        .after(r)
        .task(|_ctx, v| async move { Ok::<_, BoxError>(*v) });
    let report = g.build().unwrap().run(()).await.unwrap();
    let router = report.node(r).unwrap();
    assert_eq!(router.outcome(), Outcome::Failed);
    assert_eq!(
        router.error().unwrap().to_string(),
        "router `r` chose unknown branch `teleport` (known: ship, shortage)"
    );
    assert!(matches!(
        router.error(),
        Some(NodeError::UnknownBranch { .. })
    ));
    assert_eq!(report.by_name("ship").unwrap().outcome(), Outcome::NotTaken);
    assert_eq!(
        report.by_name("shortage").unwrap().outcome(),
        Outcome::NotTaken
    );
    assert_eq!(report.node(after).unwrap().outcome(), Outcome::Skipped);
}

#[tokio::test(start_paused = true)]
async fn a_router_whose_upstream_failed_is_skipped_and_its_branches_not_taken() {
    let mut g = Graph::<()>::builder();
    let up = g
        .node("stock")
        .task(|_ctx, ()| async { Err::<u32, BoxError>("inventory down".into()) });
    let r = g
        .router("dispatch")
        .after(up)
        .select(|_input, _v| "ship")
        .branch("ship", |b| {
            b.task(|_ctx, _v| async { Ok::<_, BoxError>(()) })
        })
        .finish();
    let report = g.build().unwrap().run(()).await.unwrap();
    let router = report.node(r).unwrap();
    assert_eq!(router.outcome(), Outcome::Skipped);
    assert_eq!(router.skipped_because().unwrap().name(), "stock");
    assert_eq!(report.by_name("ship").unwrap().outcome(), Outcome::NotTaken);
    assert_eq!(report.by_name("ship").unwrap().attempts(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_failing_branch_fails_the_router_and_branch_policies_apply() {
    let mut g = Graph::<()>::builder();
    let r = g
        .router("dispatch")
        .select(|_input, ()| "ship")
        .branch("ship", |b| {
            b.retry(Retry::new(2).backoff(baton_graph::Backoff::constant(ms(10))))
                .task(|_ctx, ()| async { Err::<u8, BoxError>("carrier down".into()) })
        })
        .finish();
    let r2 = g
        .router("dispatch2")
        .select(|_input, ()| "ship2")
        .branch("ship2", |b| {
            b.fallback(Fallback::value(9))
                .task(|_ctx, ()| async { Err::<u8, BoxError>("carrier down".into()) })
        })
        .finish();
    let report = g.build().unwrap().run(()).await.unwrap();
    let router = report.node(r).unwrap();
    assert_eq!(router.outcome(), Outcome::Failed);
    assert_eq!(report.by_name("ship").unwrap().attempts(), 2);
    assert_eq!(
        router.message().unwrap(),
        "router `dispatch`: branch `ship` failed: node `ship` gave up after 2 attempt(s) in 10 ms (max attempts reached): carrier down"
    );
    assert_eq!(report.get(r2), Some(&9));
    assert_eq!(
        report.by_name("ship2").unwrap().outcome(),
        Outcome::Recovered
    );
}

#[tokio::test(start_paused = true)]
async fn routers_work_with_name_based_upstreams() {
    let mut g = Graph::<()>::builder();
    let _ = g
        .node("a")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(5i64) });
    let r = g
        .router("r")
        .after_names::<i64>(["a"])
        .select(|_input, inputs| {
            if **inputs.get("a").unwrap() > 3 {
                "big"
            } else {
                "small"
            }
        })
        .branch("big", |b| {
            b.task(|_ctx, inputs| async move {
                Ok::<_, BoxError>(*inputs.get("a").unwrap().as_ref() * 10)
            })
        })
        .branch("small", |b| {
            b.task(|_ctx, _inputs| async { Ok::<_, BoxError>(0i64) })
        })
        .finish();
    let report = g.build().unwrap().run(()).await.unwrap();
    assert_eq!(report.get(r), Some(&50));
}

#[test]
fn duplicate_branch_keys_are_duplicate_names() {
    let mut g = Graph::<()>::builder();
    let _ = g
        .router("r")
        .select(|_input, ()| "x")
        .branch("x", |b| b.task(|_ctx, ()| async { Ok::<_, BoxError>(()) }))
        .branch("x", |b| b.task(|_ctx, ()| async { Ok::<_, BoxError>(()) }))
        .finish();
    assert_eq!(
        g.build().unwrap_err().to_string(),
        "duplicate node name `x`: every node of a graph needs its own name"
    );
}

/// A failed router is `failed`, not a skip: its downstreams name it as the cause.
#[tokio::test(start_paused = true)]
async fn downstreams_of_a_failed_router_name_the_router() {
    let mut g = Graph::<()>::builder();
    let r = g
        .router("dispatch")
        .select(|_input, ()| "ship")
        .branch("ship", |b| {
            b.task(|_ctx, ()| async { Err::<u8, BoxError>("carrier down".into()) })
        })
        .finish();
    let notify = g
        .node("notify")
        .after(r)
        .task(|_ctx, v| async move { Ok::<_, BoxError>(*v) });
    let report = g.build().unwrap().run(()).await.unwrap();
    let router = report.node(r).unwrap();
    assert_eq!(router.outcome(), Outcome::Failed);
    assert!(router.skipped_because().is_none());
    let n = report.node(notify).unwrap();
    assert_eq!(n.skipped_because().unwrap().name(), "dispatch");
    assert_eq!(
        n.message().unwrap(),
        "upstream `dispatch` failed: router `dispatch`: branch `ship` failed: carrier down"
    );
}

/// Under fail-fast, a failing branch fails its router, whose pending downstreams end
/// `Skipped` (not `Cancelled`), like any failure's.
#[tokio::test(start_paused = true)]
async fn fail_fast_through_a_branch_skips_the_routers_downstreams() {
    let mut g = Graph::<()>::builder();
    g.failure_mode(baton_graph::FailureMode::FailFast);
    let r = g
        .router("dispatch")
        .select(|_input, ()| "ship")
        .branch("ship", |b| {
            b.task(|_ctx, ()| async {
                sleep(ms(10)).await;
                Err::<u8, BoxError>("carrier down".into())
            })
        })
        .finish();
    let notify = g
        .node("notify")
        .after(r)
        .task(|_ctx, v| async move { Ok::<_, BoxError>(*v) });
    let other = g.node("other").task(|_ctx, ()| async {
        sleep(ms(100)).await;
        Ok::<_, BoxError>(0u8)
    });
    let err = g.build().unwrap().run(()).await.unwrap_err();
    let report = err.report().unwrap();
    assert_eq!(report.node(notify).unwrap().outcome(), Outcome::Skipped);
    assert_eq!(report.node(other).unwrap().outcome(), Outcome::Cancelled);
    assert_eq!(report.node(r).unwrap().outcome(), Outcome::Failed);
}

/// A node that depends on a branch itself (by name) runs after the branch when it is taken,
/// and is not taken with it otherwise; the run never waits for it forever.
#[tokio::test(start_paused = true)]
async fn a_node_after_a_branch_runs_when_the_branch_is_taken() {
    for (stock, ship_taken) in [(3u32, true), (0, false)] {
        let mut g = Graph::<()>::builder();
        let s = g
            .node("stock")
            .task(move |_ctx, ()| async move { Ok::<_, BoxError>(stock) });
        let _router = g
            .router("dispatch")
            .after(s)
            .select(|_input, stock| if **stock > 0 { "ship" } else { "shortage" })
            .branch("ship", |b| {
                b.task(|_ctx, _s| async { Ok::<_, BoxError>("shipped".to_owned()) })
            })
            .branch("shortage", |b| {
                b.task(|_ctx, _s| async { Ok::<_, BoxError>("backordered".to_owned()) })
            })
            .finish();
        let label = g
            .node("label")
            .after_names::<String>(["ship"])
            .task(|_ctx, ship| async move {
                Ok::<_, BoxError>(format!("label for {}", ship.get("ship").unwrap()))
            });
        let graph = g.build().unwrap();
        // On the paused clock a stuck run makes the timeout fire at once instead of hanging.
        let report = tokio::time::timeout(Duration::from_secs(60), graph.run(()))
            .await
            .expect("the run ends")
            .unwrap();
        let label = report.node(label).unwrap();
        if ship_taken {
            assert_eq!(label.outcome(), Outcome::Succeeded);
        } else {
            assert_eq!(label.outcome(), Outcome::NotTaken);
        }
    }
}

/// A router makes no attempt of its own: its report names the branch it ran, its timeline
/// row counts the branch's tries (not 0) and names the branch, and so does its JSON.
#[tokio::test(start_paused = true)]
async fn a_routers_row_shows_what_its_branch_did() {
    let mut g = Graph::<()>::builder();
    let r = g
        .router("dispatch")
        .select(|_input, ()| "ship")
        .branch("ship", |b| {
            b.retry(Retry::new(3).backoff(baton_graph::Backoff::constant(ms(10))))
                .task(|ctx, ()| async move {
                    if ctx.attempt() < 3 {
                        return Err::<u8, BoxError>("carrier busy".into());
                    }
                    Ok(1)
                })
        })
        .branch("hold", |b| {
            b.task(|_ctx, ()| async { Ok::<_, BoxError>(0_u8) })
        })
        .finish();
    let report = g.build().unwrap().run(()).await.unwrap();
    let router = report.node(r).unwrap();
    assert_eq!(router.attempts(), 0, "the router itself calls no task");
    let branch = router.branch().expect("the branch it ran");
    assert_eq!((branch.name(), branch.attempts()), ("ship", 3));
    assert!(report.by_name("hold").unwrap().branch().is_none());
    let text = report.to_string();
    let row = text
        .lines()
        .find(|l| l.starts_with("dispatch"))
        .expect("the router's row");
    assert!(row.ends_with("  3  (branch ship)"), "{row}");
    #[cfg(feature = "serde")]
    {
        let v = serde_json::to_value(&report).unwrap();
        assert_eq!(v["nodes"][0]["branch"], "ship");
        assert_eq!(v["nodes"][1]["branch"], serde_json::Value::Null);
    }
}

/// The chosen branch starts with its router and the router ends with it; a branch not
/// taken ends as the router starts.
#[tokio::test(start_paused = true)]
async fn a_branch_starts_and_ends_with_its_router() {
    let (graph, _dispatch, _notify) = dispatch_graph(3);
    let report = graph.run(()).await.unwrap();
    let row = |name: &str| {
        let n = report.by_name(name).unwrap();
        (n.start(), n.end())
    };
    assert_eq!(row("dispatch"), (Some(ms(150)), ms(230)));
    assert_eq!(row("ship"), row("dispatch"));
    assert_eq!(row("shortage"), (None, ms(150)));
}

/// On the real clock, with a selector that takes a while: the branch still starts at its
/// router's start, the branch not taken ends then, and the router ends with its branch.
#[tokio::test]
async fn a_slow_selector_counts_in_the_router_and_its_branch() {
    let mut g = Graph::<()>::builder();
    let up = g
        .node("up")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    g.router("dispatch")
        .after(up)
        .select(|_input, _up| {
            std::thread::sleep(Duration::from_millis(2));
            "ship"
        })
        .branch("ship", |b| {
            b.timeout(ms(1_000))
                .task(|_ctx, _up| async { Ok::<_, BoxError>(1_u8) })
        })
        .branch("hold", |b| {
            b.task(|_ctx, _up| async { Ok::<_, BoxError>(0_u8) })
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
}

/// A run cancelled as its router starts runs no selector and no branch; one cancelled by
/// the selector itself runs no branch, which ends `Cancelled` unstarted.
#[tokio::test(start_paused = true)]
async fn a_cancelled_run_runs_no_selector_and_no_branch() {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Arc, Mutex};

    use baton_graph::Orchestrator;
    use baton_graph::observe::{Event, Observer};
    use baton_graph::run::RunCanceller;

    type Slot = Arc<Mutex<Option<RunCanceller>>>;
    struct CancelAtStart(Slot, bool);
    impl Observer for CancelAtStart {
        fn on_event(&self, event: &Event<'_>) {
            if let Event::NodeStarted {
                node: "dispatch", ..
            } = event
            {
                if self.1 {
                    if let Some(c) = self.0.lock().unwrap().as_ref() {
                        c.cancel();
                    }
                }
            }
        }
    }
    for at_start in [true, false] {
        let slot: Slot = Arc::default();
        let (selected, shipped) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
        let orch = Orchestrator::builder()
            .observer(CancelAtStart(Arc::clone(&slot), at_start))
            .build();
        let mut g = orch.graph::<()>();
        let (in_selector, selected_in) = (Arc::clone(&slot), Arc::clone(&selected));
        let shipped_in = Arc::clone(&shipped);
        g.router("dispatch")
            .select(move |_input, ()| {
                selected_in.fetch_add(1, Ordering::SeqCst);
                if let Some(c) = in_selector.lock().unwrap().as_ref() {
                    c.cancel();
                }
                "ship"
            })
            .branch("ship", move |b| {
                b.task(move |_ctx, ()| {
                    shipped_in.fetch_add(1, Ordering::SeqCst);
                    async { Ok::<_, BoxError>(1_u8) }
                })
            })
            .branch("hold", |b| {
                b.task(|_ctx, ()| async { Ok::<_, BoxError>(0_u8) })
            })
            .finish();
        let graph = g.build().unwrap();
        let run = graph.run(());
        *slot.lock().unwrap() = Some(run.canceller());
        let err = run.await.unwrap_err();
        let report = err.report().expect("the cancelled run's report");
        let ship = report.by_name("ship").unwrap();
        assert_eq!(ship.outcome(), Outcome::Cancelled, "at start: {at_start}");
        assert_eq!(ship.start(), None, "at start: {at_start}");
        assert_eq!(
            report.by_name("dispatch").unwrap().outcome(),
            Outcome::Cancelled
        );
        if at_start {
            // The cancel's sweep ended both branches: the router chose none.
            let hold = report.by_name("hold").unwrap().outcome();
            assert_eq!(hold, Outcome::Cancelled);
        }
        let expected_selections = u32::from(!at_start);
        assert_eq!(selected.load(Ordering::SeqCst), expected_selections);
        assert_eq!(shipped.load(Ordering::SeqCst), 0, "at start: {at_start}");
    }
}

/// A router whose branch waits: a root router, so that the run's first driver chooses
/// the branch and hands it on when it waits, and a router after a node that waits. The
/// branch has policies, or none. Every start mode, on one thread and on two workers: the
/// router ends with its branch's value; on one thread no task is left.
#[test]
fn a_router_whose_branch_waits_ends_with_its_value_in_every_mode() {
    use baton_graph::{RunOptions, run::StartMode};
    for policies in [false, true] {
        let mut g = Graph::<()>::builder();
        let up = g.node("up").task(|_ctx, ()| async {
            tokio::task::yield_now().await;
            Ok::<_, BoxError>(2_u32)
        });
        let after = g
            .router("after")
            .after(up)
            .select(|_input, _n| "wait")
            .branch("wait", |b| {
                let b = if policies {
                    b.timeout(ms(500)).retry(Retry::new(2))
                } else {
                    b
                };
                b.task(|_ctx, n| async move {
                    sleep(ms(20)).await;
                    Ok::<_, BoxError>(*n * 10)
                })
            })
            .branch("other", |b| {
                b.task(|_ctx, _n| async { Ok::<_, BoxError>(0) })
            })
            .finish();
        let root = g
            .router("root")
            .select(|_input, ()| "root-wait")
            .branch("root-wait", |b| {
                let b = if policies { b.timeout(ms(500)) } else { b };
                b.task(|_ctx, ()| async {
                    sleep(ms(30)).await;
                    Ok::<_, BoxError>(7_u32)
                })
            })
            .finish();
        let graph = g.build().unwrap();
        for (workers, mode) in [
            (1, StartMode::Inline),
            (1, StartMode::Spread),
            (2, StartMode::Inline),
            (2, StartMode::Spread),
        ] {
            let rt = if workers == 1 {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
            } else {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
            }
            .unwrap();
            let run = graph.run_with((), RunOptions::new().start_mode(mode));
            let report = rt
                .block_on(async { tokio::time::timeout(Duration::from_secs(10), run).await })
                .expect("the run ends")
                .unwrap();
            let case = format!("policies {policies}, {workers} worker(s), {mode:?}");
            assert_eq!(report.get(after), Some(&20), "{case}");
            assert_eq!(report.get(root), Some(&7), "{case}");
            let outcome = |name: &str| report.by_name(name).unwrap().outcome();
            assert_eq!(outcome("wait"), Outcome::Succeeded, "{case}");
            assert_eq!(outcome("other"), Outcome::NotTaken, "{case}");
            assert_eq!(outcome("root-wait"), Outcome::Succeeded, "{case}");
            assert!(report.is_clean(), "{case}");
            if workers == 1 {
                assert_eq!(rt.metrics().num_alive_tasks(), 0, "{case}");
            }
        }
    }
}

/// Adds router `dispatch` to `g`, which chooses `ship`, a branch that waits 200 ms, with a
/// timeout and a retry when `policies`, over `hold`.
fn add_waiting_dispatch(g: &mut GraphBuilder<()>, policies: bool) {
    g.router("dispatch")
        .select(|_input, ()| "ship")
        .branch("ship", |b| {
            let b = if policies {
                b.timeout(ms(500)).retry(Retry::new(3))
            } else {
                b
            };
            b.task(|_ctx, ()| async {
                sleep(ms(200)).await;
                Ok::<_, BoxError>(1_u8)
            })
        })
        .branch("hold", |b| {
            b.task(|_ctx, ()| async { Ok::<_, BoxError>(0_u8) })
        })
        .finish();
}

/// A run cancelled while a branch waits: the branch and its router end `Cancelled`, both
/// started, whether the branch has policies or not.
#[tokio::test(start_paused = true)]
async fn a_cancel_while_a_branch_waits_cancels_it_and_its_router() {
    for policies in [false, true] {
        let mut g = Graph::<()>::builder();
        add_waiting_dispatch(&mut g, policies);
        let graph = g.build().unwrap();
        let run = graph.run(());
        let canceller = run.canceller();
        tokio::spawn(async move {
            sleep(ms(50)).await;
            canceller.cancel();
        });
        let err = run.await.unwrap_err();
        let report = err.report().expect("the cancelled run's report");
        for name in ["dispatch", "ship"] {
            let n = report.by_name(name).unwrap();
            assert_eq!(
                n.outcome(),
                Outcome::Cancelled,
                "{name}, policies {policies}"
            );
            assert_eq!(n.start(), Some(ms(0)), "{name}, policies {policies}");
        }
        assert_eq!(report.by_name("hold").unwrap().outcome(), Outcome::NotTaken);
    }
}

/// Observers see a branch and its router end `Cancelled` when the run's future is
/// dropped while the branch waits, and the branch's attempt is dropped with it.
#[tokio::test(start_paused = true)]
async fn dropping_a_run_while_a_branch_waits_ends_it_and_its_router() {
    use std::sync::{Arc, Mutex};

    use baton_graph::Orchestrator;
    use baton_graph::observe::{Event, Observer};

    struct Finished(Arc<Mutex<Vec<(String, Outcome)>>>);
    impl Observer for Finished {
        fn on_event(&self, event: &Event<'_>) {
            if let Event::NodeFinished { node, outcome, .. } = event {
                self.0.lock().unwrap().push(((*node).to_owned(), *outcome));
            }
        }
    }
    let finished = Arc::new(Mutex::new(Vec::new()));
    let orch = Orchestrator::builder()
        .observer(Finished(Arc::clone(&finished)))
        .build();
    let mut g = orch.graph::<()>();
    add_waiting_dispatch(&mut g, true);
    let graph = g.build().unwrap();
    let cut = tokio::time::timeout(ms(50), graph.run(())).await;
    assert!(cut.is_err(), "the run was still waiting for its branch");
    let mut seen = finished.lock().unwrap().clone();
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        seen,
        [
            ("dispatch".to_owned(), Outcome::Cancelled),
            ("hold".to_owned(), Outcome::NotTaken),
            ("ship".to_owned(), Outcome::Cancelled),
        ]
    );
}
