//! The run's own future as a driver. In the default `StartMode::Inline`, on any runtime, a
//! run's nodes run inside the task that awaits it, those that wait too, until the run
//! spreads. They are polled there by `run/joined.rs`. A run spreads when it has several
//! workers and starts more nodes in one poll than its budget. In `StartMode::Spread`, where
//! one thread runs every task, a run's first nodes start in that task and a node that waits
//! moves to a task of its own, so a run whose future is not polled still makes progress.
//! One thread runs every task on a current-thread runtime, or with one worker awaited from
//! a task. With more workers, nodes always run in tasks of the run's own.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::Id;

use super::common;
use crate::{BoxError, Graph, GraphBuilder, Node, RunOptions, run::StartMode};

use crate::util::ms;

/// Where each node ran: its name and the tokio task that ran it. `None` when it was not a
/// task, for example the runtime's `block_on`.
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

/// A chain of `n` nodes `c0`, `c1`, … that end at once.
fn chain(n: usize, seen: &Seen) -> Graph<()> {
    let mut g = Graph::<()>::builder();
    let mut prev = node(&mut g, "c0", &[], None, seen);
    for i in 1..n {
        prev = node(&mut g, &format!("c{i}"), &[prev], None, seen);
    }
    g.build().expect("valid")
}

/// Options that spread the run's nodes over the workers.
fn spread() -> RunOptions {
    RunOptions::new().start_mode(StartMode::Spread)
}

/// Runs `graph` in a task spawned for it; that task's id.
async fn run_in_a_task(graph: Graph<()>) -> Id {
    run_in_a_task_with(graph, RunOptions::new()).await
}

/// Runs `graph` with `options` in a task spawned for it; that task's id.
async fn run_in_a_task_with(graph: Graph<()>, options: RunOptions) -> Id {
    tokio::spawn(async move {
        let report = graph.run_with((), options).await.expect("run");
        assert!(report.is_clean(), "{report}");
        tokio::task::id()
    })
    .await
    .unwrap()
}

/// After the run's first poll from the runtime's `block_on`, which is no task: exactly the
/// order graph's two roots ran, both there.
fn both_roots_ran_in_the_first_poll_outside_any_task(seen: &Seen) {
    let seen = seen.lock().unwrap();
    let names: Vec<_> = seen.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        ["user", "sku"],
        "both roots started in the first poll"
    );
    assert!(seen.iter().all(|(_, task)| task.is_none()), "{seen:?}");
}

/// How many of the first nodes in `seen` ran in task `awaiting`, one after another.
fn first_in(seen: &Seen, awaiting: Id) -> usize {
    let seen = seen.lock().unwrap();
    seen.iter()
        .take_while(|(_, task)| *task == Some(awaiting))
        .count()
}

/// Whether every node in `seen` ran in task `awaiting`, and whether none did.
fn all_and_none(seen: &Seen, awaiting: Id) -> (bool, bool) {
    let seen = seen.lock().unwrap();
    let here = |(_, task): &(String, Option<Id>)| *task == Some(awaiting);
    (seen.iter().all(here), !seen.iter().any(here))
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

/// Spread, on a runtime with more workers: nodes run in tasks of the run's own, never in
/// the task that awaits it. A node that computes must not hold up that task, with its
/// timeout and the other futures it joins, while another worker could run the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spread_on_two_workers_nodes_run_in_tasks_of_the_runs_own() {
    let seen: Seen = Arc::default();
    let awaiting = run_in_a_task_with(chain(4, &seen), spread()).await;
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 4);
    assert!(
        seen.iter()
            .all(|(_, task)| task.is_some() && *task != Some(awaiting)),
        "{seen:?}"
    );
}

/// Spread, one computing node that spins until released, up to `common::PATIENCE`: a
/// timeout the caller puts around the run fires while the node computes, on another worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spread_a_callers_timeout_fires_while_a_node_computes() {
    let release = Arc::new(AtomicUsize::new(0));
    let mut g = Graph::<()>::builder();
    let r = Arc::clone(&release);
    let _: Node<()> = g.node("compute").task(move |_ctx, ()| {
        let r = Arc::clone(&r);
        async move { common::spin_until(&r, 1) }
    });
    let graph = g.build().expect("valid");
    let out = tokio::time::timeout(ms(20), graph.run_with((), spread())).await;
    let released = release.fetch_add(1, Ordering::SeqCst);
    assert!(out.is_err(), "the run ended first: {out:?}");
    assert_eq!(released, 0, "the timeout fired while the node computed");
}

/// Spread: two runs of a one-node graph joined by one task run side by side on two
/// workers: each node computes until the other runs beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spread_runs_joined_in_one_task_compute_side_by_side() {
    let started = Arc::new(AtomicUsize::new(0));
    let computing = || {
        let started = Arc::clone(&started);
        let mut g = Graph::<()>::builder();
        let _: Node<()> = g
            .node("compute")
            .task(move |_ctx, ()| common::compute_beside_another(&started));
        g.build().expect("valid")
    };
    let (g1, g2) = (computing(), computing());
    let (r1, r2) = tokio::join!(g1.run_with((), spread()), g2.run_with((), spread()));
    let (r1, r2) = (r1.expect("run"), r2.expect("run"));
    assert!(r1.is_clean() && r2.is_clean(), "{r1}\n{r2}");
}

/// Inline, the default: a node whose attempt waits stays in the run's future, and so do the
/// nodes after it. The run does not go on while its future is not polled, and every node
/// runs where the future is polled: here the test's own, which is no tokio task.
#[tokio::test(start_paused = true)]
async fn inline_a_node_that_waits_stays_in_the_runs_future() {
    let seen: Seen = Arc::default();
    let graph = order(&seen, Some(ms(10)));
    let mut run = graph.run(());
    assert!(futures::poll!(&mut run).is_pending(), "user waits");
    both_roots_ran_in_the_first_poll_outside_any_task(&seen);
    tokio::time::sleep(ms(20)).await;
    assert_eq!(
        seen.lock().unwrap().len(),
        2,
        "nothing ran without the future"
    );
    let report = run.await.expect("run");
    assert!(report.is_clean(), "{report}");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 5);
    assert!(seen.iter().all(|(_, task)| task.is_none()), "{seen:?}");
}

/// Spread, where one thread runs every task: a node whose attempt waits moves to a task of
/// its own. The run goes on while its future is not polled: the waiting node ends and its
/// downstreams run. The nodes that end at once still run in the awaiting task: here the
/// test's own, which is no tokio task.
#[tokio::test(start_paused = true)]
async fn spread_a_node_that_waits_moves_to_a_task_and_the_run_goes_on_unpolled() {
    let seen: Seen = Arc::default();
    let graph = order(&seen, Some(ms(10)));
    let mut run = graph.run_with((), spread());
    assert!(futures::poll!(&mut run).is_pending(), "user waits");
    both_roots_ran_in_the_first_poll_outside_any_task(&seen);
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

/// A long chain on a one-worker runtime. Inline, it stays in the awaiting task, which
/// yields every 128 nodes; with one worker, no run spreads. Spread, the awaiting task runs
/// 128 nodes, its budget per poll, then hands the rest to a spawned driver.
#[tokio::test]
async fn a_long_chain_stays_inline_on_one_worker_and_is_handed_off_when_spread() {
    let seen: Seen = Arc::default();
    let awaiting = run_in_a_task(chain(1_000, &seen)).await;
    assert_eq!(
        first_in(&seen, awaiting),
        1_000,
        "inline: all in the awaiting task"
    );
    let seen: Seen = Arc::default();
    let awaiting = run_in_a_task_with(chain(1_000, &seen), spread()).await;
    let inline = first_in(&seen, awaiting);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1_000);
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

/// A task awaiting small runs back to back still yields to the other tasks of its worker.
/// Starting a run spends a unit of its coop budget of 128 per poll, like one operation on a
/// tokio resource, and a run that finds none left yields before it starts.
#[tokio::test]
async fn runs_back_to_back_yield_to_other_tasks() {
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

/// A chain of `n` nodes that end at once, each counting itself in `count`.
fn counting_chain(n: usize, count: &Arc<AtomicUsize>) -> Graph<()> {
    let mut g = Graph::<()>::builder();
    let mut prev: Option<Node<()>> = None;
    for i in 0..n {
        let c = Arc::clone(count);
        let body = move || {
            c.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, BoxError>(()) }
        };
        prev = Some(match prev {
            None => g.node(format!("c{i}")).task(move |_ctx, ()| body()),
            Some(p) => g.node(format!("c{i}")).after(p).task(move |_ctx, _| body()),
        });
    }
    g.build().expect("valid")
}

/// Runs `work` beside a task that yields in a loop on this one-thread runtime. Returns the
/// most nodes, counted in `count`, that ran between two of that task's turns.
async fn largest_gap(
    count: &Arc<AtomicUsize>,
    work: impl std::future::Future<Output = ()>,
) -> usize {
    let max_gap = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ticker = {
        let (count, max_gap, stop) = (count.clone(), max_gap.clone(), stop.clone());
        tokio::spawn(async move {
            let mut last = count.load(Ordering::SeqCst);
            while !stop.load(Ordering::SeqCst) {
                let now = count.load(Ordering::SeqCst);
                max_gap.fetch_max(now - last, Ordering::SeqCst);
                last = now;
                tokio::task::yield_now().await;
            }
        })
    };
    tokio::task::yield_now().await;
    work.await;
    // The ticker measures the last stretch before it stops.
    tokio::task::yield_now().await;
    stop.store(true, Ordering::SeqCst);
    ticker.await.unwrap();
    max_gap.load(Ordering::SeqCst)
}

/// A task awaiting runs back to back of a 128-node chain lets the other tasks of its worker
/// in at least every 1 024 nodes: each run's start spends a unit of the awaiting task's coop
/// budget of 128, which pays for its first eight nodes, and every eight nodes after them
/// spend one more.
#[tokio::test]
async fn runs_back_to_back_let_other_tasks_in_every_1024_nodes() {
    let count = Arc::new(AtomicUsize::new(0));
    let graph = counting_chain(128, &count);
    let gap = largest_gap(&count, async {
        for _ in 0..1_000 {
            graph.run(()).await.expect("run");
        }
    })
    .await;
    assert!(
        gap <= 1024,
        "{gap} nodes ran between two turns of the other task"
    );
}

/// The same for a long chain whose run is awaited in `tokio::task::unconstrained`, with no
/// coop budget: the run's future starts at most 128 nodes per poll, then yields, whatever
/// the awaiting task does.
#[tokio::test]
async fn an_unconstrained_run_still_lets_other_tasks_in() {
    let count = Arc::new(AtomicUsize::new(0));
    let graph = counting_chain(20_000, &count);
    let gap = largest_gap(&count, async {
        tokio::task::unconstrained(graph.run(()))
            .await
            .expect("run");
    })
    .await;
    assert!(
        gap <= 256,
        "{gap} nodes ran between two turns of the other task"
    );
}

/// `StartMode::Inline`, the default, on two workers: every node of a graph whose nodes end
/// at once runs in the task that awaits the run, as on one worker, both roots of the order
/// graph too, whether the run asks for it or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_on_two_workers_nodes_that_end_at_once_run_in_the_awaiting_task() {
    for options in [
        RunOptions::new(),
        RunOptions::new().start_mode(StartMode::Inline),
    ] {
        let seen: Seen = Arc::default();
        let graph = order(&seen, None);
        assert_eq!(graph.start_mode(), StartMode::Inline, "the default");
        let awaiting = run_in_a_task_with(graph, options).await;
        assert_eq!(seen.lock().unwrap().len(), 5);
        assert_eq!(all_and_none(&seen, awaiting), (true, false), "{seen:?}");
    }
}

/// The graph's start mode applies to its runs, and a run's options override it either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_start_mode_overrides_the_graphs() {
    let with_mode = |mode: StartMode, seen: &Seen| {
        let mut g = Graph::<()>::builder();
        g.start_mode(mode);
        let mut prev = node(&mut g, "c0", &[], None, seen);
        for i in 1..4 {
            prev = node(&mut g, &format!("c{i}"), &[prev], None, seen);
        }
        g.build().expect("valid")
    };
    for (graph_mode, run_mode, in_awaiting) in [
        (StartMode::Inline, None, true),
        (StartMode::Inline, Some(StartMode::Spread), false),
        (StartMode::Spread, Some(StartMode::Inline), true),
        (StartMode::Spread, None, false),
    ] {
        let seen: Seen = Arc::default();
        let graph = with_mode(graph_mode, &seen);
        assert_eq!(graph.start_mode(), graph_mode);
        let mut options = RunOptions::new();
        if let Some(mode) = run_mode {
            options = options.start_mode(mode);
        }
        let awaiting = run_in_a_task_with(graph, options).await;
        let (all, none) = all_and_none(&seen, awaiting);
        let case = format!("graph {graph_mode}, run {run_mode:?}: {seen:?}");
        if in_awaiting {
            assert!(all, "every node in the awaiting task: {case}");
        } else {
            assert!(none, "no node in the awaiting task: {case}");
        }
    }
}

/// `StartMode::Inline` on two workers: a node that waits stays in the run's future, and the
/// run does not go on while that future is not polled. Here it is awaited from the
/// runtime's `block_on`, which is no task. Once polled, its downstreams run there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_on_two_workers_a_node_that_waits_stays_in_the_runs_future() {
    let seen: Seen = Arc::default();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let rx = Arc::new(Mutex::new(Some(rx)));
    let mut g = Graph::<()>::builder();
    let s = Arc::clone(&seen);
    let user: Node<()> = g.node("user").task(move |_ctx, ()| {
        s.lock()
            .unwrap()
            .push(("user".to_owned(), tokio::task::try_id()));
        let rx = rx.lock().unwrap().take();
        async move {
            if let Some(rx) = rx {
                let _ = rx.await;
            }
            Ok::<_, BoxError>(())
        }
    });
    let sku = node(&mut g, "sku", &[], None, &seen);
    let stock = node(&mut g, "stock", &[user, sku], None, &seen);
    node(&mut g, "promo", &[stock], None, &seen);
    let graph = g.build().expect("valid");
    let mut run = graph.run_with((), RunOptions::new().start_mode(StartMode::Inline));
    assert!(futures::poll!(&mut run).is_pending(), "user waits");
    both_roots_ran_in_the_first_poll_outside_any_task(&seen);
    tx.send(()).expect("user waits for it");
    tokio::time::sleep(ms(5)).await;
    assert_eq!(
        seen.lock().unwrap().len(),
        2,
        "nothing ran without the future"
    );
    let report = run.await.expect("run");
    assert!(report.is_clean(), "{report}");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 4);
    assert!(seen.iter().all(|(_, task)| task.is_none()), "{seen:?}");
}

/// `StartMode::Spread` on two workers: nodes released by different nodes that waited run
/// where those nodes resumed, so two computing nodes behind two waiting roots run side by
/// side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spread_on_two_workers_nodes_behind_waiting_roots_compute_side_by_side() {
    let started = Arc::new(AtomicUsize::new(0));
    let mut g = Graph::<()>::builder();
    g.start_mode(StartMode::Spread);
    for i in 0..2 {
        let root: Node<()> = g.node(format!("wait{i}")).task(|_ctx, ()| async {
            tokio::time::sleep(ms(1)).await;
            Ok::<_, BoxError>(())
        });
        let started = Arc::clone(&started);
        let _: Node<()> = g
            .node(format!("compute{i}"))
            .after(root)
            .task(move |_ctx, _| common::compute_beside_another(&started));
    }
    let report = g.build().expect("valid").run(()).await.expect("run");
    assert!(report.is_clean(), "{report}");
}

/// `x`, then `width` nodes after it that compute without awaiting until a second one of
/// them runs beside it, up to `common::PATIENCE`.
fn computing_fan_out(g: &mut GraphBuilder<()>, x: Node<()>, width: usize) {
    let started = Arc::new(AtomicUsize::new(0));
    for i in 0..width {
        let started = Arc::clone(&started);
        let _: Node<()> = g
            .node(format!("compute{i}"))
            .after(x)
            .task(move |_ctx, _| common::compute_beside_another(&started));
    }
}

/// `StartMode::Spread` on two workers: computing nodes that a waiting root makes ready
/// together run side by side, not one after another in the root's task. No other driver is
/// active, so the root's driver shares them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spread_on_two_workers_a_fan_out_after_a_waiting_node_runs_side_by_side() {
    for _ in 0..10 {
        let mut g = Graph::<()>::builder();
        g.start_mode(StartMode::Spread);
        let root: Node<()> = g.node("wait").task(|_ctx, ()| async {
            tokio::time::sleep(ms(1)).await;
            Ok::<_, BoxError>(())
        });
        computing_fan_out(&mut g, root, 3);
        let report = g.build().expect("valid").run(()).await.expect("run");
        assert!(report.is_clean(), "{report}");
    }
}

/// `StartMode::Inline` on two workers: a long chain of nodes that end at once is handed off
/// by the run's future after its first 128 nodes, its budget per poll, and what is
/// left spreads: the computing nodes at its end, made ready together, run side by side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_on_two_workers_what_the_future_hands_off_spreads() {
    for _ in 0..10 {
        let seen: Seen = Arc::default();
        let mut g = Graph::<()>::builder();
        g.start_mode(StartMode::Inline);
        let mut prev = node(&mut g, "c0", &[], None, &seen);
        for i in 1..300 {
            prev = node(&mut g, &format!("c{i}"), &[prev], None, &seen);
        }
        computing_fan_out(&mut g, prev, 3);
        let graph = g.build().expect("valid");
        let awaiting = run_in_a_task(graph).await;
        let inline = first_in(&seen, awaiting);
        assert!(
            (1..300).contains(&inline),
            "{inline} nodes ran in the awaiting task: it handed off the rest"
        );
    }
}
