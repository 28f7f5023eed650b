//! Which tasks a run uses (`docs/contract.md`, rules 1, 14 and 29): in the default start
//! mode, only the one that awaits it, waiting nodes included, until the run spreads (several
//! workers, and more nodes to start in one poll of its future than its budget of 128).
//! Counted with tokio's own metrics (`num_alive_tasks`) and task ids.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use baton_graph::{BoxError, Graph, GraphBuilder, Node, Retry, RunOptions, run::StartMode};
use tokio::sync::Semaphore;
use tokio::task::Id;

use crate::ms;

/// Where each node's code ran: the tokio task (`None`: no task, e.g. a runtime's
/// `block_on`) when its task was called, and when its future resumed after its wait.
type Seen = Arc<Mutex<Vec<(String, Option<Id>)>>>;

fn alive() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// A node that records where it is called, waits for a permit of `gate` (or `wait` on the
/// clock without a gate), and records where it resumed.
fn waiting(
    g: &mut GraphBuilder<()>,
    name: &str,
    after: &[Node<()>],
    gate: Option<&Arc<Semaphore>>,
    waiting: &Arc<AtomicUsize>,
    seen: &Seen,
) -> Node<()> {
    let (seen, label, gate, count) = (
        Arc::clone(seen),
        name.to_owned(),
        gate.cloned(),
        Arc::clone(waiting),
    );
    let body = move || {
        let (seen, label, gate, count) = (
            Arc::clone(&seen),
            label.clone(),
            gate.clone(),
            Arc::clone(&count),
        );
        seen.lock()
            .unwrap()
            .push((label.clone(), tokio::task::try_id()));
        async move {
            count.fetch_add(1, Ordering::SeqCst);
            match gate {
                Some(gate) => drop(gate.acquire().await.map_err(|e| e.to_string())?),
                None => tokio::time::sleep(ms(3)).await,
            }
            seen.lock()
                .unwrap()
                .push((format!("{label} resumed"), tokio::task::try_id()));
            Ok::<_, BoxError>(())
        }
    };
    let node = g.node(name).timeout(ms(60_000)).retry(Retry::new(2));
    match after {
        [] => node.task(move |_ctx, ()| body()),
        ups => node.after(ups.to_vec()).task(move |_ctx, _| body()),
    }
}

/// A request handler's graph: six calls that wait (three roots, then three more behind
/// them), the last joining them.
fn order_flow(gate: Option<&Arc<Semaphore>>, count: &Arc<AtomicUsize>, seen: &Seen) -> Graph<()> {
    let mut g = Graph::<()>::builder();
    let user = waiting(&mut g, "user", &[], gate, count, seen);
    let sku = waiting(&mut g, "sku", &[], gate, count, seen);
    let cart = waiting(&mut g, "cart", &[], gate, count, seen);
    let stock = waiting(&mut g, "stock", &[sku], gate, count, seen);
    let price = waiting(&mut g, "price", &[sku, cart], gate, count, seen);
    waiting(&mut g, "charge", &[user, stock, price], gate, count, seen);
    g.build().expect("valid")
}

/// Every node's code ran in `task`: its call and its resumption after the wait.
fn all_in(seen: &Seen, task: Option<Id>) {
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 12, "six nodes, called and resumed: {seen:?}");
    assert!(seen.iter().all(|(_, t)| *t == task), "{seen:?}");
}

/// One task per request on a current-thread runtime: a run awaited in a task of its own
/// (a server's request) runs every node in that task, those that wait included; while it
/// waits, and once it resolved, no other task of the run is alive.
#[tokio::test(start_paused = true)]
async fn inline_one_task_per_request_on_a_current_thread_runtime() {
    let (seen, count): (Seen, _) = (Arc::default(), Arc::default());
    let graph = order_flow(None, &count, &seen);
    let before = alive();
    let request = tokio::spawn(async move {
        graph.run(()).await.expect("run");
        tokio::task::id()
    });
    for _ in 0..20 {
        tokio::time::sleep(ms(1)).await;
        assert!(alive() <= before + 1, "{} tasks alive", alive() - before);
    }
    let awaiting = request.await.unwrap();
    assert_eq!(alive(), before);
    all_in(&seen, Some(awaiting));
}

/// The same on a two-worker runtime, the run awaited from the runtime's `block_on` (no
/// task): while all three roots wait, no task is alive; every node runs, and resumes, where
/// the run is awaited; once it resolved, still no task is alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_one_task_per_request_on_two_workers() {
    let (seen, count): (Seen, _) = (Arc::default(), Arc::default());
    let gate = Arc::new(Semaphore::new(0));
    let graph = order_flow(Some(&gate), &count, &seen);
    assert_eq!(alive(), 0);
    let run = graph.run(());
    let (report, ()) = tokio::join!(run, async {
        while count.load(Ordering::SeqCst) < 3 {
            tokio::task::yield_now().await;
        }
        assert_eq!(alive(), 0, "the three roots wait: no task for them");
        gate.add_permits(6);
    });
    assert!(report.expect("run").is_clean());
    assert_eq!(alive(), 0, "the run leaves no task behind");
    all_in(&seen, None);
}

/// `width` nodes after one root, each recording where it ran; they end at once.
fn fan_out(width: usize, seen: &Seen) -> Graph<()> {
    let mut g = Graph::<()>::builder();
    let root: Node<()> = g
        .node("root")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    for i in 0..width {
        let seen = Arc::clone(seen);
        let _: Node<()> = g.node(format!("n{i}")).after(root).task(move |_ctx, _| {
            seen.lock()
                .unwrap()
                .push((String::new(), tokio::task::try_id()));
            async { Ok::<_, BoxError>(()) }
        });
    }
    g.build().expect("valid")
}

/// How many recorded nodes ran outside any task (in the runtime's `block_on`).
fn outside_tasks(seen: &Seen) -> usize {
    let seen = seen.lock().unwrap();
    seen.iter().filter(|(_, task)| task.is_none()).count()
}

/// The spread rule, on two workers: a run whose future would start more nodes in one poll
/// than its budget (128) spreads the rest over tasks of its own; one below the budget
/// spreads nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_on_two_workers_a_run_spreads_past_its_poll_budget() {
    let seen: Seen = Arc::default();
    fan_out(100, &seen).run(()).await.expect("run");
    assert_eq!(
        outside_tasks(&seen),
        100,
        "101 nodes: within one poll's budget"
    );
    let seen: Seen = Arc::default();
    fan_out(400, &seen).run(()).await.expect("run");
    let here = outside_tasks(&seen);
    assert!(
        (1..400).contains(&here),
        "{here} of 400 ran where the run is awaited: the rest spread"
    );
}

/// On one worker (a current-thread runtime, or one worker awaited from a task) an inline run
/// never spreads: there is no other worker to run its nodes, and its future yields every
/// 128 nodes instead. Spread, the same run hands its nodes to a task of its own.
#[test]
fn on_one_worker_an_inline_run_never_spreads() {
    for flavor in ["current", "one worker"] {
        let rt = match flavor {
            "current" => tokio::runtime::Builder::new_current_thread(),
            _ => {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(1);
                b
            }
        }
        .enable_all()
        .build()
        .unwrap();
        rt.block_on(async {
            let seen: Seen = Arc::default();
            let graph = fan_out(400, &seen);
            let awaiting = tokio::spawn(async move {
                graph.run(()).await.expect("run");
                tokio::task::id()
            })
            .await
            .unwrap();
            let seen = seen.lock().unwrap();
            assert_eq!(seen.len(), 400);
            assert!(seen.iter().all(|(_, t)| *t == Some(awaiting)), "{flavor}");
        });
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let seen: Seen = Arc::default();
        let spread = RunOptions::new().start_mode(StartMode::Spread);
        fan_out(400, &seen).run_with((), spread).await.expect("run");
        assert!(outside_tasks(&seen) < 400, "spread: handed to a task");
    });
}

/// `width` roots, each waiting for a permit of a gate of its own; `polls` counts the polls
/// of their futures, `ended` those that got their permit.
fn gated_roots(
    width: usize,
    polls: &Arc<AtomicUsize>,
    ended: &Arc<AtomicUsize>,
) -> (Graph<()>, Vec<Arc<Semaphore>>) {
    let mut g = Graph::<()>::builder();
    let gates: Vec<_> = (0..width).map(|_| Arc::new(Semaphore::new(0))).collect();
    for (i, gate) in gates.iter().enumerate() {
        let (gate, polls, ended) = (Arc::clone(gate), Arc::clone(polls), Arc::clone(ended));
        let _: Node<()> = g.node(format!("root{i}")).task(move |_ctx, ()| {
            let (gate, polls, ended) = (Arc::clone(&gate), Arc::clone(&polls), Arc::clone(&ended));
            async move {
                let mut acquire = std::pin::pin!(gate.acquire());
                std::future::poll_fn(|cx| {
                    polls.fetch_add(1, Ordering::SeqCst);
                    acquire.as_mut().poll(cx)
                })
                .await
                .map_err(|e| e.to_string())?
                .forget();
                ended.fetch_add(1, Ordering::SeqCst);
                Ok::<_, BoxError>(())
            }
        });
    }
    (g.build().expect("valid"), gates)
}

/// A wake-up of an inline run polls the nodes it woke, and at most the eight nodes polled
/// together besides (as `tokio::join!` polls its futures): with forty nodes waiting, waking
/// one by one polls each woken node and never the thirty-odd others.
#[tokio::test]
async fn inline_a_wake_up_polls_what_it_woke_and_at_most_eight_others() {
    let (polls, ended) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (graph, gates) = gated_roots(40, &polls, &ended);
    let run = tokio::spawn(async move { graph.run(()).await.map(|r| r.is_clean()) });
    while polls.load(Ordering::SeqCst) < 40 {
        tokio::task::yield_now().await;
    }
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
    for (i, gate) in gates.iter().enumerate() {
        let before = polls.load(Ordering::SeqCst);
        gate.add_permits(1);
        while ended.load(Ordering::SeqCst) <= i {
            tokio::task::yield_now().await;
        }
        let polled = polls.load(Ordering::SeqCst) - before;
        assert!(
            (1..=9).contains(&polled),
            "waking root{i} polled {polled} nodes"
        );
    }
    assert!(run.await.unwrap().expect("run"));
}

/// A run's future is woken at the run's end in the task that polled it last: polled once
/// where it was made, then moved to a task of its own while its node (in a task of the run,
/// spread) waits, it resolves there when the node ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_moved_to_another_task_wakes_that_task_at_its_end() {
    let (polls, ended) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (graph, gates) = gated_roots(1, &polls, &ended);
    let spread = RunOptions::new().start_mode(StartMode::Spread);
    let mut run = graph.run_with((), spread);
    assert!(futures::poll!(&mut run).is_pending());
    let awaiting = tokio::spawn(async move { run.await.map(|r| r.is_clean()) });
    while polls.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    // The new task polls the run at least once before the node ends.
    tokio::time::sleep(ms(20)).await;
    gates[0].add_permits(1);
    let done = tokio::time::timeout(ms(10_000), awaiting).await;
    assert!(done.expect("woken at its end").unwrap().expect("run"));
}
