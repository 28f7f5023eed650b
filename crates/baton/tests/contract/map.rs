//! Map nodes: one item per element of the upstream's list, at most `concurrency` at once,
//! each through the node's policies, done by a completion rule; one report row per item.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_graph::{
    BoxError, BuildError, CircuitBreaker, FailureMode, Fallback, Graph, Node, NodeError,
    Orchestrator, Outcome, Retry, RunOptions,
    map::{Completion, MapFailed},
    observe::{Event, Observer},
};
use tokio::time::{Instant, sleep};

use crate::ms;

/// A root node whose value is `list`.
fn list<T: Clone + Send + Sync + 'static>(
    g: &mut baton_graph::GraphBuilder<()>,
    list: Vec<T>,
) -> Node<Vec<T>> {
    g.node("list").task(move |_ctx, ()| {
        let list = list.clone();
        async move { Ok::<_, BoxError>(list) }
    })
}

/// Counts the items running at once, and the most there were.
#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    max: AtomicUsize,
}

impl Gauge {
    fn enter(self: &Arc<Self>) -> impl Drop + use<> {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(now, Ordering::SeqCst);
        struct Leave(Arc<Gauge>);
        impl Drop for Leave {
            fn drop(&mut self) {
                self.0.now.fetch_sub(1, Ordering::SeqCst);
            }
        }
        Leave(Arc::clone(self))
    }
}

#[tokio::test(start_paused = true)]
async fn items_run_in_input_order_with_bounded_concurrency() {
    let gauge = Arc::new(Gauge::default());
    let g_ = Arc::clone(&gauge);
    let mut g = Graph::<()>::builder();
    let items = list(&mut g, (0..10_u64).collect());
    // Later items are quicker: the values still come in input order.
    let doubled = g
        .node("double")
        .after(items)
        .concurrency(3)
        .map(move |_item, n: u64| {
            let gauge = Arc::clone(&g_);
            async move {
                let _in = gauge.enter();
                sleep(ms(100 - n * 5)).await;
                Ok::<_, BoxError>(n * 2)
            }
        });
    let t0 = Instant::now();
    let report = g.build().unwrap().run(()).await.unwrap();
    assert_eq!(
        report.get(doubled),
        Some(&(0..10).map(|n| n * 2).collect::<Vec<u64>>())
    );
    assert_eq!(gauge.max.load(Ordering::SeqCst), 3);
    // Four waves of at most 3 items, each under 100 ms: under 400 ms, over 300.
    let took = t0.elapsed();
    assert!(took > ms(200) && took <= ms(400), "{took:?}");
    let items = report.items(doubled).unwrap();
    assert_eq!(items.len(), 10);
    assert!(items.iter().enumerate().all(|(i, item)| item.index() == i
        && item.outcome() == Outcome::Succeeded
        && item.attempts() == 1));
    // An item starts only when one of the three running ended.
    assert_eq!(
        items.get(3).and_then(|i| i.start()),
        items.get(2).map(|i| i.end())
    );
    // The default concurrency is finite.
    assert_eq!(baton_graph::map::DEFAULT_MAP_CONCURRENCY, 16);
}

#[tokio::test(start_paused = true)]
async fn an_empty_list_succeeds_with_an_empty_value() {
    let mut g = Graph::<()>::builder();
    let items = list::<u32>(&mut g, Vec::new());
    let mapped = g
        .node("each")
        .after(items)
        .map(|_item, n: u32| async move { Ok::<_, BoxError>(n) });
    let first = g
        .node("first")
        .after(items)
        .map_settled(Completion::FirstSuccess, |_item, n: u32| async move {
            Ok::<_, BoxError>(n)
        });
    let report = g.build().unwrap().run(()).await.unwrap();
    assert_eq!(report.get(mapped), Some(&Vec::new()));
    assert_eq!(report.get(first).map(Vec::len), Some(0));
    let items = report.items(mapped).unwrap();
    assert!(items.is_empty());
    assert!(items.decision().met);
}

#[test]
fn zero_concurrency_and_impossible_rules_are_build_errors() {
    let mut g = Graph::<()>::builder();
    let items = list(&mut g, vec![1_u32]);
    g.node("each")
        .after(items)
        .concurrency(0)
        .map(|_item, n: u32| async move { Ok::<_, BoxError>(n) });
    let err = g.build().unwrap_err();
    assert!(
        matches!(&err, BuildError::InvalidPolicy { node, policy: "concurrency", .. } if node == "each"),
        "{err}"
    );

    let mut g = Graph::<()>::builder();
    let items = list(&mut g, vec![1_u32]);
    g.node("each").after(items).map_settled(
        Completion::AtMostFailedPercent(101),
        |_item, n: u32| async move { Ok::<_, BoxError>(n) },
    );
    let err = g.build().unwrap_err();
    assert!(
        matches!(
            &err,
            BuildError::InvalidPolicy {
                policy: "completion",
                ..
            }
        ),
        "{err}"
    );

    // A concurrency on a node that is not a map node.
    let mut g = Graph::<()>::builder();
    g.node("plain")
        .concurrency(4)
        .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    let err = g.build().unwrap_err();
    assert!(
        matches!(
            &err,
            BuildError::InvalidPolicy {
                policy: "concurrency",
                ..
            }
        ),
        "{err}"
    );

    // A fallback given the node's context cannot answer one item.
    let mut g = Graph::<()>::builder();
    let items = list(&mut g, vec![1_u32]);
    g.node("each")
        .after(items)
        .fallback_with(|_ctx, _list, _e| async { Ok::<u32, BoxError>(0) })
        .map(|_item, n: u32| async move { Ok::<_, BoxError>(n) });
    let err = g.build().unwrap_err();
    assert!(
        matches!(
            &err,
            BuildError::InvalidPolicy {
                policy: "fallback",
                ..
            }
        ),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_nodes_policies_apply_to_each_item() {
    let mut g = Graph::<()>::builder();
    let items = list(&mut g, vec![0_u64, 1, 2, 3]);
    // Item 1 fails once (retried), item 2 is too slow every time (cut, then its fallback
    // answers), item 3 fails every time (its fallback answers); item 0 succeeds at once.
    let prices = g
        .node("prices")
        .after(items)
        .timeout(ms(100))
        .retry(Retry::new(2))
        .fallback(Fallback::value(0_u64))
        .map(|item, n: u64| async move {
            match (n, item.attempt()) {
                (1, 1) | (3, _) => Err::<u64, BoxError>("503".into()),
                (2, _) => {
                    sleep(ms(1_000)).await;
                    Ok(2)
                }
                _ => Ok(n * 10 + 1),
            }
        });
    let report = g.build().unwrap().run(()).await.unwrap();
    assert_eq!(report.get(prices), Some(&vec![1, 11, 0, 0]));
    let items = report.items(prices).unwrap();
    let row = |i: usize| items.get(i).unwrap();
    assert_eq!(
        (row(0).outcome(), row(0).attempts()),
        (Outcome::Succeeded, 1)
    );
    assert_eq!(
        (row(1).outcome(), row(1).attempts()),
        (Outcome::Succeeded, 2)
    );
    assert_eq!(row(1).attempt_log()[1].delay_before, ms(100));
    assert_eq!(
        (row(2).outcome(), row(2).attempts()),
        (Outcome::Recovered, 2)
    );
    assert!(row(2).error().is_some_and(NodeError::is_timeout));
    assert_eq!(
        row(2).attempt_log()[0].end - row(2).attempt_log()[0].start,
        ms(100)
    );
    assert_eq!(row(3).outcome(), Outcome::Recovered);
    assert_eq!(
        report.node(prices).map(|n| n.outcome()),
        Some(Outcome::Succeeded)
    );
}

#[tokio::test(start_paused = true)]
async fn a_breaker_guards_each_item_and_hedges_race_per_item() {
    let breaker = CircuitBreaker::builder("pricing")
        .consecutive_failures(2)
        .build()
        .unwrap();
    let mut g = Graph::<()>::builder();
    let items = list(&mut g, vec![0_u32, 1, 2, 3]);
    let failing = g
        .node("failing")
        .after(items)
        .concurrency(1)
        .breaker(&breaker)
        .map_settled(Completion::AllComplete, |_item, _n: u32| async move {
            Err::<u32, BoxError>("down".into())
        });
    let hedged = g
        .node("hedged")
        .after(items)
        .hedge(baton_graph::Hedge::new(ms(50)))
        .map(|item, n: u32| async move {
            // Every first attempt hangs: each item's hedge wins at 50 ms.
            if item.attempt() == 1 {
                sleep(ms(10_000)).await;
            }
            Ok::<_, BoxError>(n)
        });
    let report = g.build().unwrap().run(()).await.unwrap();
    let results = report.get(failing).unwrap();
    let kinds: Vec<&str> = results
        .iter()
        .map(|r| r.as_ref().unwrap_err().kind())
        .collect();
    assert_eq!(kinds, ["task", "task", "breaker_open", "breaker_open"]);
    assert_eq!(report.get(hedged), Some(&vec![0, 1, 2, 3]));
    let items = report.items(hedged).unwrap();
    assert!(items.iter().all(|i| i.attempts() == 2 && i.end() == ms(50)));
}

#[tokio::test(start_paused = true)]
async fn the_first_failure_cancels_the_items_in_flight() {
    let dropped = Arc::new(AtomicUsize::new(0));
    let d = Arc::clone(&dropped);
    let mut g = Graph::<()>::builder();
    g.failure_mode(FailureMode::FailFast);
    let items = list(&mut g, vec![0_u64, 1, 2, 3]);
    let each = g
        .node("each")
        .after(items)
        .concurrency(2)
        .map(move |_item, n: u64| {
            let d = Arc::clone(&d);
            async move {
                struct OnDrop(Arc<AtomicUsize>);
                impl Drop for OnDrop {
                    fn drop(&mut self) {
                        self.0.fetch_add(1, Ordering::SeqCst);
                    }
                }
                let _guard = OnDrop(d);
                if n == 0 {
                    sleep(ms(10)).await;
                    return Err::<u64, BoxError>("bad item".into());
                }
                sleep(ms(1_000)).await;
                Ok(n)
            }
        });
    let after = g
        .node("after")
        .after(each)
        .task(|_ctx, _| async { Ok::<_, BoxError>(()) });
    let err = g.build().unwrap().run(()).await.unwrap_err();
    let report = err.report().unwrap();
    let node = report.node(each).unwrap();
    assert_eq!((node.outcome(), node.end()), (Outcome::Failed, ms(10)));
    let failed = node
        .error()
        .and_then(|e| e.task_error()?.downcast_ref::<MapFailed>())
        .unwrap();
    assert_eq!(
        (failed.completion, failed.first_failed),
        (Completion::AllSucceed, Some(0))
    );
    assert_eq!((failed.decision.failed, failed.decision.cancelled), (1, 3));
    assert_eq!(
        report.node(after).map(|n| n.outcome()),
        Some(Outcome::Skipped)
    );
    let items = report.items(each).unwrap();
    let outcomes: Vec<Outcome> = items.iter().map(|i| i.outcome()).collect();
    use Outcome::{Cancelled, Failed};
    assert_eq!(outcomes, [Failed, Cancelled, Cancelled, Cancelled]);
    // Item 1 was running (cancelled at 10 ms), items 2 and 3 never started.
    assert_eq!(items.get(1).and_then(|i| i.start()), Some(Duration::ZERO));
    assert_eq!(items.get(2).and_then(|i| i.start()), None);
    assert_eq!(items.get(1).map(|i| i.end()), Some(ms(10)));
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        2,
        "items 0 and 1 ran and were dropped"
    );
    assert!(!items.decision().met);
}

/// Runs a map of items that succeed when `ok(index)` says, each item `i` taking `10 · (i + 1)`
/// ms, under `rule`: the node's outcome, the items' outcomes, and the value.
async fn under(
    rule: Completion,
    ok: fn(u64) -> bool,
) -> (Outcome, Vec<Outcome>, Option<Vec<bool>>) {
    let mut g = Graph::<()>::builder();
    let items = list(&mut g, vec![0_u64, 1, 2, 3]);
    let each = g
        .node("each")
        .after(items)
        .map_settled(rule, move |_item, n: u64| async move {
            sleep(ms(10 * (n + 1))).await;
            if ok(n) {
                Ok::<_, BoxError>(n)
            } else {
                Err("no".into())
            }
        });
    let report = g.build().unwrap().run(()).await.unwrap();
    let items = report.items(each).unwrap();
    assert_eq!(items.completion(), rule);
    let outcomes = items.iter().map(|i| i.outcome()).collect();
    let value = report
        .get(each)
        .map(|v| v.iter().map(Result::is_ok).collect());
    (report.node(each).unwrap().outcome(), outcomes, value)
}

#[tokio::test(start_paused = true)]
async fn each_completion_rule_decides_as_documented() {
    use Outcome::{Cancelled as C, Failed as F, Succeeded as S};
    let odd = |n: u64| n % 2 == 1;
    // All complete: every item ends, the node succeeds with each result.
    let got = under(Completion::AllComplete, odd).await;
    assert_eq!(
        got,
        (S, vec![F, S, F, S], Some(vec![false, true, false, true]))
    );
    // At least 2 succeed: met, every item runs.
    let got = under(Completion::AtLeast(2), odd).await;
    assert_eq!(
        got,
        (S, vec![F, S, F, S], Some(vec![false, true, false, true]))
    );
    // At least 3: cannot be met once two failed; item 3, running, is cancelled.
    let got = under(Completion::AtLeast(3), odd).await;
    assert_eq!((got.0, got.1), (F, vec![F, S, F, C]));
    // At most 1 fails: the second failure decides.
    let got = under(Completion::AtMostFailed(1), odd).await;
    assert_eq!((got.0, got.1), (F, vec![F, S, F, C]));
    // At most 50 % fail: met.
    let got = under(Completion::AtMostFailedPercent(50), odd).await;
    assert_eq!(got.0, S);
    // First success wins: item 1's; the others, still running, are cancelled.
    let got = under(Completion::FirstSuccess, odd).await;
    assert_eq!(
        got,
        (S, vec![F, S, C, C], Some(vec![false, true, false, false]))
    );
    // First success with none: the node fails.
    let got = under(Completion::FirstSuccess, |_| false).await;
    assert_eq!((got.0, got.1), (F, vec![F, F, F, F]));
}

struct Names(Arc<Mutex<Vec<String>>>);

impl Observer for Names {
    fn on_event(&self, event: &Event<'_>) {
        if let Event::AttemptStarted { node, attempt, .. } = event {
            self.0.lock().unwrap().push(format!("{node}#{attempt}"));
        }
    }
}

#[tokio::test(start_paused = true)]
async fn each_item_has_its_row_its_events_its_key_and_its_stats() {
    let names = Arc::new(Mutex::new(Vec::new()));
    let orch = Orchestrator::builder()
        .observer(Names(Arc::clone(&names)))
        .build();
    let mut g = orch.graph::<()>();
    let items = g
        .node("cart")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(vec!["a", "b"]) });
    let keys = g.node("prices").after(items).retry(Retry::new(2)).map(
        |item, sku: &'static str| async move {
            if sku == "b" && item.attempt() == 1 {
                return Err::<String, BoxError>("503".into());
            }
            Ok(item.idempotency_key().to_string())
        },
    );
    let report = g.build().unwrap().run(()).await.unwrap();
    let keys = report.get(keys).unwrap();
    assert_eq!(
        keys,
        &[
            format!("{}-1.0", report.run_id()),
            format!("{}-1.1", report.run_id())
        ]
    );
    let mut seen = names.lock().unwrap().clone();
    seen.sort();
    assert_eq!(
        seen,
        [
            "cart#1",
            "prices#1",
            "prices[0]#1",
            "prices[1]#1",
            "prices[1]#2"
        ]
    );
    let stats = orch.stats();
    assert_eq!((stats.attempts, stats.retries), (5, 1));
    let text = report.to_string();
    assert!(
        text.contains("  prices: completion \"all must succeed\" met: 2 of 2 succeeded"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("  prices[1]") && l.contains("succeeded")),
        "{text}"
    );
    #[cfg(feature = "serde")]
    {
        let json = serde_json::to_value(&report).unwrap();
        let node = &json["nodes"][1];
        assert_eq!(node["completion"]["rule"], "all_succeed");
        assert_eq!(node["items"][1]["index"], 1);
        assert_eq!(node["items"][1]["name"], "prices[1]");
        assert_eq!(node["items"][1]["attempts"], 2);
    }
}

/// A map node's callbacks are given its report, whose items name each item by index and
/// row name, with its outcome and attempts.
#[tokio::test(start_paused = true)]
async fn a_map_nodes_callbacks_see_each_item() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut g = Graph::<()>::builder();
    let cart = list(&mut g, vec![1_u32, 2, 3]);
    let record = Arc::clone(&seen);
    g.node("prices")
        .after(cart)
        .on_complete(move |node| {
            let items = node.items().expect("a map node has items");
            record.lock().unwrap().extend(
                items
                    .iter()
                    .map(|i| (i.index(), i.name(), i.outcome(), i.attempts())),
            );
        })
        .map(|_item, n: u32| async move {
            match n {
                2 => Err::<u32, BoxError>("503".into()),
                _ => Ok(n * 100),
            }
        });
    let options = RunOptions::new().failure_mode(FailureMode::PreservePartial);
    g.build().unwrap().run_with((), options).await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(seen[0], (0, "prices[0]".to_owned(), Outcome::Succeeded, 1));
    assert_eq!((seen[1].0, seen[1].1.as_str()), (1, "prices[1]"));
    assert_eq!(seen[1].2, Outcome::Failed);
}

#[tokio::test(start_paused = true)]
async fn the_runs_deadline_is_shared_by_the_items() {
    let mut g = Graph::<()>::builder();
    let items = list(&mut g, vec![0_u64, 1, 2]);
    let each = g
        .node("each")
        .after(items)
        .concurrency(1)
        .retry(Retry::new(5))
        .map_settled(Completion::AllComplete, |_item, n: u64| async move {
            sleep(ms(100)).await;
            if n == 0 {
                Err::<u64, BoxError>("503".into())
            } else {
                Ok(n)
            }
        });
    let options = RunOptions::new().timeout(ms(250));
    let report = g.build().unwrap().run_with((), options).await.unwrap();
    let node = report.node(each).unwrap();
    // Item 0 retries until the run's deadline, which cuts its second attempt; the items
    // behind it start with no time left and fail at once, without an attempt.
    assert_eq!((node.outcome(), node.end()), (Outcome::Succeeded, ms(250)));
    let items = report.items(each).unwrap();
    let first = items.get(0).unwrap();
    assert_eq!((first.outcome(), first.attempts()), (Outcome::Failed, 2));
    assert!(first.error().is_some_and(NodeError::is_timeout));
    for i in [1, 2] {
        let item = items.get(i).unwrap();
        assert_eq!((item.attempts(), item.end()), (0, ms(250)));
        assert_eq!(item.error().map(NodeError::kind), Some("deadline_exceeded"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_real_clock_item_timeouts_cut_each_item() {
    let mut g = Graph::<()>::builder();
    let items = list(&mut g, (0..8_u64).collect());
    let each = g
        .node("each")
        .after(items)
        .concurrency(4)
        .timeout(ms(20))
        .map_settled(Completion::AllComplete, |_item, n: u64| async move {
            if n % 2 == 0 {
                sleep(ms(10_000)).await;
            }
            Ok::<_, BoxError>(n)
        });
    let run = g.build().unwrap().run(());
    let report = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .unwrap()
        .unwrap();
    let items = report.items(each).unwrap();
    for item in items.iter() {
        if item.index() % 2 == 0 {
            assert_eq!(item.outcome(), Outcome::Failed);
            assert_eq!(item.error().map(NodeError::kind), Some("timeout"));
        } else {
            assert_eq!(item.outcome(), Outcome::Succeeded);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_stats_count_items_by_outcome() {
    let orch = Orchestrator::new();
    let mut g = orch.graph::<()>();
    g.failure_mode(FailureMode::FailAll);
    let three = list(&mut g, vec![0_u64, 1, 2]);
    // Item 1 fails and its fallback answers.
    g.node("priced")
        .after(three)
        .fallback(Fallback::value(0_u64))
        .map(|_item, n: u64| async move {
            if n == 1 {
                return Err::<u64, BoxError>("503".into());
            }
            Ok(n)
        });
    let four = g
        .node("four")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(vec![0_u64, 1, 2, 3]) });
    // Item 0 fails at 10 ms: item 1, running, and items 2 and 3, not started, are
    // cancelled.
    g.node("each")
        .after(four)
        .concurrency(2)
        .map(|_item, n: u64| async move {
            if n == 0 {
                sleep(ms(10)).await;
                return Err::<u64, BoxError>("bad item".into());
            }
            sleep(ms(1_000)).await;
            Ok(n)
        });
    g.build().unwrap().run(()).await.unwrap_err();
    let stats = orch.stats();
    assert_eq!(
        (
            stats.items_started,
            stats.items_succeeded,
            stats.items_recovered,
            stats.items_failed,
            stats.items_cancelled
        ),
        (5, 2, 1, 1, 3)
    );
    assert!(
        stats
            .to_string()
            .contains(" items[started 5 succeeded 2 recovered 1 failed 1 cancelled 3] "),
        "{stats}"
    );
}
