//! The run's own future as a driver: when a run starts with one driver (one root, or one
//! worker), its first nodes run inside the task that awaits the run, while they end at once;
//! a node that waits moves to a task of its own, so a run whose future is not polled still
//! makes progress.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton::{BoxError, Graph, GraphBuilder, Node};
use tokio::task::Id;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Where each node ran: its name and the tokio task that ran it (`None`: not a task, e.g.
/// the runtime's `block_on`).
type Seen = Arc<Mutex<Vec<(String, Option<Id>)>>>;

fn node(
    g: &mut GraphBuilder<()>,
    name: &str,
    after: &[Node<()>],
    wait: Option<Duration>,
    seen: &Seen,
) -> Node<()> {
    let seen = Arc::clone(seen);
    let label = name.to_owned();
    let body = move || {
        seen.lock()
            .unwrap()
            .push((label.clone(), tokio::task::try_id()));
        async move {
            if let Some(wait) = wait {
                tokio::time::sleep(wait).await;
            }
            Ok::<_, BoxError>(())
        }
    };
    match after {
        [] => g.node(name).task(move |_ctx, ()| body()),
        ups => g
            .node(name)
            .after(ups.to_vec())
            .task(move |_ctx, _ups| body()),
    }
}

/// The order graph's shape: two roots, a join, a chain.
fn order(seen: &Seen, wait_user: Option<Duration>) -> Graph<()> {
    let mut g = Graph::<()>::builder();
    let user = node(&mut g, "user", &[], wait_user, seen);
    let sku = node(&mut g, "sku", &[], None, seen);
    let stock = node(&mut g, "stock", &[user, sku], None, seen);
    let promo = node(&mut g, "promo", &[stock], None, seen);
    node(&mut g, "notify", &[promo], None, seen);
    g.build().expect("valid")
}

/// On a one-worker runtime every node of a graph whose nodes end at once runs in the task
/// that awaits the run: no task is spawned for it.
#[tokio::test]
async fn nodes_that_end_at_once_run_in_the_awaiting_task() {
    let seen: Seen = Arc::default();
    let graph = order(&seen, None);
    let (awaiting, report) = tokio::spawn(async move {
        let report = graph.run(()).await.expect("run");
        (tokio::task::id(), report)
    })
    .await
    .unwrap();
    assert!(report.is_clean(), "{report}");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 5);
    for (name, task) in seen.iter() {
        assert_eq!(*task, Some(awaiting), "{name} ran in another task");
    }
}

/// The same for a single-root graph on a two-worker runtime: one driver starts it, the
/// run's future.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_runs_in_the_awaiting_task_on_two_workers() {
    let seen: Seen = Arc::default();
    let mut g = Graph::<()>::builder();
    let mut prev = node(&mut g, "a", &[], None, &seen);
    for name in ["b", "c", "d"] {
        prev = node(&mut g, name, &[prev], None, &seen);
    }
    let graph = g.build().expect("valid");
    let awaiting = tokio::spawn(async move {
        graph.run(()).await.expect("run");
        tokio::task::id()
    })
    .await
    .unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 4);
    assert!(
        seen.iter().all(|(_, task)| *task == Some(awaiting)),
        "{seen:?}"
    );
}

/// A node whose attempt waits moves to a task of its own: the run goes on while its future
/// is not polled (the waiting node ends and its downstreams run), and the nodes that end
/// at once still run in the awaiting task (here the test's own, which is no tokio task).
#[tokio::test(start_paused = true)]
async fn a_node_that_waits_moves_to_a_task_and_the_run_goes_on_unpolled() {
    let seen: Seen = Arc::default();
    let graph = order(&seen, Some(ms(10)));
    let mut run = graph.run(());
    assert!(futures::poll!(&mut run).is_pending(), "user waits");
    {
        let seen = seen.lock().unwrap();
        let names: Vec<_> = seen.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names,
            ["user", "sku"],
            "both roots started in the first poll"
        );
        assert!(seen.iter().all(|(_, task)| task.is_none()), "{seen:?}");
    }
    // The run's future is left alone while time passes.
    tokio::time::sleep(ms(20)).await;
    {
        let seen = seen.lock().unwrap();
        assert_eq!(
            seen.len(),
            5,
            "the run went on without its future: {seen:?}"
        );
        for (name, task) in &seen[2..] {
            assert!(task.is_some(), "{name} ran in the task user moved to");
        }
    }
    let report = run.await.expect("run");
    assert!(report.is_clean(), "{report}");
}

/// A long chain on a one-worker runtime: the awaiting task runs its first nodes (at most
/// 128), then hands the rest to a spawned driver, which yields on tokio's coop budget like
/// any task (the awaiting task never holds a node while it waits).
#[tokio::test]
async fn a_long_chain_is_handed_to_a_task_after_its_first_nodes() {
    let seen: Seen = Arc::default();
    let mut g = Graph::<()>::builder();
    let mut prev = node(&mut g, "c0", &[], None, &seen);
    for i in 1..1_000 {
        prev = node(&mut g, &format!("c{i}"), &[prev], None, &seen);
    }
    let graph = g.build().expect("valid");
    let awaiting = tokio::spawn(async move {
        graph.run(()).await.expect("run");
        tokio::task::id()
    })
    .await
    .unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1_000);
    let inline = seen
        .iter()
        .take_while(|(_, task)| *task == Some(awaiting))
        .count();
    assert!(
        (1..1_000).contains(&inline),
        "{inline} nodes ran in the awaiting task"
    );
    assert!(
        seen[inline..]
            .iter()
            .all(|(_, task)| *task != Some(awaiting)),
        "once handed off, the chain stays away from the awaiting task"
    );
}

/// A task awaiting small runs back to back still yields to the other tasks of its worker:
/// starting a run spends a unit of its coop budget (128 per poll), like one operation on a
/// tokio resource, and a run that finds none left yields before it starts.
#[tokio::test]
async fn runs_back_to_back_yield_to_other_tasks() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let ticks = Arc::new(AtomicUsize::new(0));
    let ticker = {
        let ticks = Arc::clone(&ticks);
        tokio::spawn(async move {
            loop {
                ticks.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
            }
        })
    };
    let seen: Seen = Arc::default();
    let graph = order(&seen, None);
    let before = ticks.load(Ordering::SeqCst);
    for _ in 0..1_000 {
        graph.run(()).await.expect("run");
    }
    let ticked = ticks.load(Ordering::SeqCst) - before;
    ticker.abort();
    assert_eq!(seen.lock().unwrap().len(), 5_000);
    assert!(ticked >= 1_000 / 128 - 1, "the ticker ran {ticked} times");
}
