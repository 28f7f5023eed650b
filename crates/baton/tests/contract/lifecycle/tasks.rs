//! Which tasks a run uses (`docs/contract.md`, rules 1, 14 and 29): in the default start
//! mode, only the one that awaits it, waiting nodes included, until the run spreads (several
//! workers, and more nodes to start in one poll of its future than its budget of 128).
//! Counted with tokio's own metrics (`num_alive_tasks`) and task ids.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use baton_graph::{BoxError, Graph, GraphBuilder, Node, Retry, RunOptions, run::StartMode};
use tokio::sync::{Semaphore, oneshot};
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

/// An inline run whose last node ends in its future's poll wakes no task for its end: the
/// awaiting task is polled once to start the run and once when the nodes' timers fire,
/// then waits on a oneshot. A wake-up at the run's end, from inside that poll, would have
/// tokio poll it a third time for nothing. One node is polled among the few polled
/// together; twelve fill those eight places and put four in the run's ready set.
#[tokio::test(start_paused = true)]
async fn inline_a_run_that_ends_in_its_own_poll_wakes_no_task() {
    for width in [1, 12] {
        let mut g = Graph::<()>::builder();
        for i in 0..width {
            g.node(format!("wait{i}")).task(|_ctx, ()| async {
                tokio::time::sleep(ms(10)).await;
                Ok::<_, BoxError>(())
            });
        }
        let graph = g.build().unwrap();
        let polls = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = oneshot::channel::<()>();
        let mut body = Box::pin(async move {
            let clean = graph.run(()).await.map(|r| r.is_clean());
            let _ = rx.await;
            clean
        });
        let counted = Arc::clone(&polls);
        let task = tokio::spawn(std::future::poll_fn(move |cx| {
            counted.fetch_add(1, Ordering::SeqCst);
            body.as_mut().poll(cx)
        }));
        tokio::time::sleep(ms(50)).await;
        assert_eq!(polls.load(Ordering::SeqCst), 2, "{width} nodes");
        tx.send(()).unwrap();
        assert!(task.await.unwrap().expect("run"));
        assert_eq!(polls.load(Ordering::SeqCst), 3, "{width} nodes");
    }
}

/// `width` roots, a node after them all, then a chain of `len` nodes. The roots and the
/// chain's nodes wake their own task and return `Pending` at their first `wakes` polls (as
/// a future whose I/O is ready at once); every node records in `seen` where it ended.
fn self_waking(width: usize, len: usize, wakes: usize, seen: &Seen) -> Graph<()> {
    let mut g = Graph::<()>::builder();
    let node = |g: &mut GraphBuilder<()>, name: String, after: Option<Node<()>>| {
        let seen = Arc::clone(seen);
        let task = move |_ctx, _ups| {
            let (seen, mut left) = (Arc::clone(&seen), wakes);
            std::future::poll_fn(move |cx| {
                if left == 0 {
                    record(&seen, String::new());
                    return std::task::Poll::Ready(Ok::<_, BoxError>(()));
                }
                left -= 1;
                cx.waker().wake_by_ref();
                std::task::Poll::Pending
            })
        };
        match after {
            None => g.node(name.as_str()).task(move |ctx, ()| task(ctx, ())),
            Some(up) => g
                .node(name.as_str())
                .after(up)
                .task(move |ctx, _| task(ctx, ())),
        }
    };
    let roots: Vec<Node<()>> = (0..width)
        .map(|i| node(&mut g, format!("root{i}"), None))
        .collect();
    let seen_after = Arc::clone(seen);
    let mut up: Node<()> = g.node("after roots").after(roots).task(move |_ctx, _| {
        record(&seen_after, String::new());
        async { Ok::<_, BoxError>(()) }
    });
    for i in 0..len {
        up = node(&mut g, format!("n{i}"), Some(up));
    }
    g.build().expect("valid")
}

/// How many times the task awaiting `graph`'s run was polled before the run resolved, and
/// that task's id.
async fn polls_of_the_awaiting_task(graph: Graph<()>) -> (usize, Id) {
    tokio::spawn(async move {
        let polls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&polls);
        let mut run = Box::pin(graph.run(()));
        std::future::poll_fn(move |cx| {
            counted.fetch_add(1, Ordering::SeqCst);
            run.as_mut().poll(cx)
        })
        .await
        .expect("run");
        (polls.load(Ordering::SeqCst), tokio::task::id())
    })
    .await
    .unwrap()
}

/// Nodes woken during their own poll (ready again at once) are polled again in the same
/// poll of the run's future, which wakes no task for them: a request whose twenty nodes,
/// five of them polled together and past them in the run's ready set, wake themselves
/// twice each resolves in one poll of its task, on one worker and on two.
#[test]
fn inline_nodes_woken_during_the_run_s_poll_are_polled_again_in_it() {
    for workers in [1, 2] {
        let rt = match workers {
            1 => tokio::runtime::Builder::new_current_thread(),
            _ => {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(2);
                b
            }
        }
        .enable_all()
        .build()
        .unwrap();
        rt.block_on(async {
            for width in [4, 12] {
                let seen: Seen = Arc::default();
                let graph = self_waking(width, 6, 2, &seen);
                let (polls, task) = polls_of_the_awaiting_task(graph).await;
                assert_eq!(polls, 1, "{width} roots on {workers} worker(s)");
                let seen = seen.lock().unwrap();
                assert_eq!(seen.len(), width + 7);
                assert!(seen.iter().all(|(_, t)| *t == Some(task)));
            }
        });
    }
}

/// A node that wakes itself at every poll does not hold the run's task: its future
/// polls again at most a budget of times (1 024 polls after the first pass), then gives
/// the task's turn back, and the run goes on at its next poll.
#[tokio::test]
async fn inline_a_node_that_keeps_waking_itself_gets_the_task_s_turn_given_back() {
    let seen: Seen = Arc::default();
    let graph = self_waking(1, 0, 10_000, &seen);
    let (polls, _) = polls_of_the_awaiting_task(graph).await;
    assert!(
        polls >= 10_000 / 1_025,
        "{polls} polls of the awaiting task"
    );
}

/// Nodes started in passes after the first spend the passes' budget and one unit of
/// tokio's coop budget per eight: twenty roots that each wake themselves three times, each
/// followed by a chain of 100 nodes that end at once, start far more than 128 chained
/// nodes in the first poll of the awaiting task (one unit per node would have allowed
/// about 107), and at most 1 024.
#[tokio::test]
async fn inline_nodes_started_in_passes_after_the_first_spend_the_passes_budget() {
    let per_poll = starts_per_poll(1).await;
    assert_eq!(per_poll.iter().sum::<usize>(), 2_000);
    assert!(
        (512..=1_024).contains(&per_poll[1]),
        "nodes started per poll: {per_poll:?}"
    );
}

/// The coop units those passes spend are the task's: eight runs awaited side by side in
/// one task start no more nodes per poll of it, together, than one run may.
#[tokio::test]
async fn inline_runs_awaited_together_share_the_task_s_budget() {
    let per_poll = starts_per_poll(8).await;
    assert_eq!(per_poll.iter().sum::<usize>(), 16_000);
    let most = per_poll.iter().max().copied().unwrap_or_default();
    assert!(
        most <= 1_024 + 8 * 8,
        "nodes started per poll: {per_poll:?}"
    );
}

/// A poll whose task has no coop budget left starts no node, in any pass: a run of 100
/// roots that each wake themselves once, each followed by a chain of 8, polled every other
/// time after its task's budget was spent, starts nothing in those polls and every node
/// in the others.
#[tokio::test]
async fn inline_a_poll_without_coop_budget_starts_no_node() {
    let polls = Arc::new(AtomicUsize::new(0));
    let started_in = Arc::new(Mutex::new(Vec::new()));
    let graph = self_waking_chains((100, 1, 8), &polls, &started_in);
    let mut run = Box::pin(graph.run(()));
    let counted = Arc::clone(&polls);
    std::future::poll_fn(move |cx| {
        let poll = counted.fetch_add(1, Ordering::SeqCst) + 1;
        if poll % 2 == 0 {
            // Spends what is left of the task's budget (tokio wakes the task when none is).
            while let std::task::Poll::Ready(coop) = tokio::task::coop::poll_proceed(cx) {
                coop.made_progress();
            }
        }
        run.as_mut().poll(cx)
    })
    .await
    .expect("run");
    let started_in = started_in.lock().unwrap();
    assert_eq!(started_in.len(), 800);
    let in_spent = started_in.iter().filter(|p| *p % 2 == 0).count();
    assert_eq!(in_spent, 0, "nodes started in polls without budget");
}

/// The units a run's start paid for and its first poll did not use do not carry over: a
/// later poll that begins with the awaiting task's budget spent starts no node either. The
/// root waits on a `futures` oneshot, which spends no coop budget, so the root ends in that
/// poll and its twenty downstreams are ready there.
#[tokio::test]
async fn inline_a_later_poll_without_coop_budget_starts_no_node() {
    let started = Arc::new(AtomicUsize::new(0));
    let (open, gate) = futures::channel::oneshot::channel::<()>();
    let gate = Mutex::new(Some(gate));
    let mut g = Graph::<()>::builder();
    let root: Node<()> = g.node("root").task(move |_ctx, ()| {
        let gate = gate.lock().unwrap().take();
        async move {
            if let Some(gate) = gate {
                let _ = gate.await;
            }
            Ok::<_, BoxError>(())
        }
    });
    for i in 0..20 {
        let started = Arc::clone(&started);
        let _: Node<()> = g.node(format!("n{i}")).after(root).task(move |_ctx, _| {
            started.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, BoxError>(()) }
        });
    }
    let graph = g.build().expect("valid");
    let mut run = Box::pin(graph.run(()));
    assert!(futures::poll!(run.as_mut()).is_pending(), "the root waits");
    tokio::task::yield_now().await;
    open.send(()).unwrap();
    while tokio::task::coop::has_budget_remaining() {
        tokio::task::consume_budget().await;
    }
    assert!(futures::poll!(run.as_mut()).is_pending());
    assert_eq!(started.load(Ordering::SeqCst), 0, "started with no budget");
    run.await.expect("run");
    assert_eq!(started.load(Ordering::SeqCst), 20);
}

/// How many chained nodes start in each poll of one task that awaits `runs` runs side by
/// side, each of a graph of twenty roots that wake themselves three times, each followed by
/// a chain of 100 nodes that end at once. Index `p` counts those started in poll `p`.
async fn starts_per_poll(runs: usize) -> Vec<usize> {
    let polls = Arc::new(AtomicUsize::new(0));
    let started_in = Arc::new(Mutex::new(Vec::new()));
    let graph = self_waking_chains((20, 3, 100), &polls, &started_in);
    let mut all = Box::pin(futures::future::join_all((0..runs).map(|_| graph.run(()))));
    let counted = Arc::clone(&polls);
    let reports = std::future::poll_fn(move |cx| {
        counted.fetch_add(1, Ordering::SeqCst);
        all.as_mut().poll(cx)
    })
    .await;
    assert!(reports.iter().all(Result::is_ok));
    let mut per_poll = vec![0; polls.load(Ordering::SeqCst) + 1];
    for &p in started_in.lock().unwrap().iter() {
        per_poll[p] += 1;
    }
    per_poll
}

/// A graph of `roots` roots, each waking itself `wakes` times before it ends, each followed
/// by a chain of `chain` nodes that end at once. Each chained node pushes onto `started_in`
/// the value of `polls` when it starts.
fn self_waking_chains(
    (roots, wakes, chain): (usize, usize, usize),
    polls: &Arc<AtomicUsize>,
    started_in: &Arc<Mutex<Vec<usize>>>,
) -> Graph<()> {
    let mut g = Graph::<()>::builder();
    for r in 0..roots {
        let mut up = g.node(format!("root{r}")).task(move |_ctx, ()| {
            let mut wakes = wakes;
            std::future::poll_fn(move |cx| {
                if wakes == 0 {
                    return std::task::Poll::Ready(Ok::<_, BoxError>(()));
                }
                wakes -= 1;
                cx.waker().wake_by_ref();
                std::task::Poll::Pending
            })
        });
        for i in 0..chain {
            let (polls, started_in) = (Arc::clone(polls), Arc::clone(started_in));
            up = g.node(format!("r{r}n{i}")).after(up).task(move |_ctx, _| {
                started_in
                    .lock()
                    .unwrap()
                    .push(polls.load(Ordering::SeqCst));
                async { Ok::<_, BoxError>(()) }
            });
        }
    }
    g.build().expect("valid")
}

/// The spread rule counts the nodes a poll of the run's future starts in its first pass
/// over its drivers, not those it starts when it polls again drivers woken during that
/// poll: that work would have waited for the task's next poll. A chain of 400 nodes that
/// each wake themselves once starts more than 128 nodes per poll of its task, on two
/// workers, and never spreads: every node ends in the awaiting task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_on_two_workers_nodes_polled_again_in_a_poll_never_spread_it() {
    let seen: Seen = Arc::default();
    let graph = self_waking(1, 400, 1, &seen);
    let (polls, task) = polls_of_the_awaiting_task(graph).await;
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 402);
    assert!(seen.iter().all(|(_, t)| *t == Some(task)), "spread");
    assert!(polls < 402, "{polls} polls of the awaiting task");
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

/// Records, in `seen`, that `label` ran in the current task.
fn record(seen: &Seen, label: String) {
    seen.lock().unwrap().push((label, tokio::task::try_id()));
}

/// A request handler's graph whose nodes all wait: `timers` roots on a timer each (1 to 3
/// ms), one root on a oneshot `rx`, and a last node after them all, on a timer too. Each
/// records where it was called and where it resumed.
fn all_waiting(timers: u64, rx: oneshot::Receiver<()>, seen: &Seen) -> Graph<()> {
    let mut g = Graph::<()>::builder();
    let timer = |g: &mut GraphBuilder<()>, i: u64, after: Vec<Node<()>>| {
        let name = if after.is_empty() {
            format!("timer{i}")
        } else {
            "last".to_owned()
        };
        let (seen, label, wait) = (Arc::clone(seen), name.clone(), ms(1 + i % 3));
        let body = move || {
            let (seen, name) = (Arc::clone(&seen), label.clone());
            record(&seen, name.clone());
            async move {
                tokio::time::sleep(wait).await;
                record(&seen, format!("{name} resumed"));
                Ok::<_, BoxError>(())
            }
        };
        match after.is_empty() {
            true => g.node(name.as_str()).task(move |_ctx, ()| body()),
            false => g
                .node(name.as_str())
                .after(after)
                .task(move |_ctx, _| body()),
        }
    };
    let mut roots: Vec<Node<()>> = (0..timers).map(|i| timer(&mut g, i, Vec::new())).collect();
    let (rx, seen_rx) = (Arc::new(Mutex::new(Some(rx))), Arc::clone(seen));
    roots.push(g.node("oneshot").task(move |_ctx, ()| {
        let (rx, seen) = (rx.lock().unwrap().take(), Arc::clone(&seen_rx));
        record(&seen, "oneshot".to_owned());
        async move {
            rx.ok_or("called twice")?.await?;
            record(&seen, "oneshot resumed".to_owned());
            Ok::<_, BoxError>(())
        }
    }));
    timer(&mut g, 0, roots);
    g.build().expect("valid")
}

/// What one request used, from [`one_request`].
struct Used {
    /// The most tasks seen alive at once besides the request's, while the run waited.
    most: usize,
    /// The tasks alive besides the request's, once the run resolved (seen from the request).
    after: usize,
    /// The request's task.
    request: Id,
    /// Where each node was called and resumed.
    seen: Vec<(String, Option<Id>)>,
}

/// Runs [`all_waiting`] (twelve timers) on `rt`, started as `start`, in a task of its own (a
/// server's request). It counts the tasks alive while the run waits: at each step of the
/// clock until every root was called and the timers' roots resumed, then while only the
/// oneshot's node waits; then it sends on the oneshot.
fn one_request(rt: &tokio::runtime::Runtime, start: StartMode) -> Used {
    rt.block_on(async {
        let (tx, rx) = oneshot::channel();
        let seen: Seen = Arc::default();
        let graph = all_waiting(12, rx, &seen);
        let before = alive();
        let options = RunOptions::new().start_mode(start);
        let request = tokio::spawn(async move {
            graph.run_with((), options).await.expect("run");
            (tokio::task::id(), alive() - before - 1)
        });
        let mut most = 0;
        let mut sample = || most = most.max(alive().saturating_sub(before + 1));
        while seen.lock().unwrap().len() < 13 + 12 {
            sample();
            tokio::time::sleep(ms(1)).await;
        }
        for _ in 0..5 {
            sample();
            tokio::task::yield_now().await;
        }
        sample();
        tx.send(()).unwrap();
        let (request, after) = request.await.unwrap();
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen.len(),
            2 * 14,
            "fourteen nodes, called and resumed: {seen:?}"
        );
        Used {
            most,
            after,
            request,
            seen,
        }
    })
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
}

fn two_workers() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Asserts that `used` saw no task alive besides the request's, while the run waited or
/// after it, and every node called and resumed in the request's task.
fn only_the_requests_task(used: &Used) {
    assert_eq!(used.most, 0, "tasks alive besides the request's");
    assert_eq!(used.after, 0);
    let elsewhere: Vec<_> = used
        .seen
        .iter()
        .filter(|(_, t)| *t != Some(used.request))
        .collect();
    assert!(
        elsewhere.is_empty(),
        "ran outside the request's task: {elsewhere:?}"
    );
}

/// One task per request, counted with tokio's task metrics, on a current-thread runtime: a
/// run whose nodes all wait (twelve on timers, one on a oneshot, more than the eight polled
/// together) spawns no task at all in the default mode, and every node is called, and
/// resumes, in the request's task.
#[test]
fn inline_nodes_waiting_on_timers_and_a_oneshot_spawn_no_task_on_a_current_thread_runtime() {
    only_the_requests_task(&one_request(&current_thread(), StartMode::Inline));
}

/// The same on a two-worker runtime: no task besides the request's, and every node in it.
#[test]
fn inline_nodes_waiting_on_timers_and_a_oneshot_spawn_no_task_on_two_workers() {
    only_the_requests_task(&one_request(&two_workers(), StartMode::Inline));
}

/// `StartMode::Spread`, the same request: its nodes wait in tasks of the run's own. On a
/// current-thread runtime the first nodes are called in the request's task and the oneshot's
/// node resumes in another; on two workers no node runs in the request's task.
#[test]
fn spread_nodes_waiting_on_timers_and_a_oneshot_wait_in_tasks_of_their_own() {
    let used = one_request(&current_thread(), StartMode::Spread);
    assert!(used.most >= 1, "a task waits for the oneshot");
    let resumed = used.seen.iter().find(|(l, _)| l == "oneshot resumed");
    assert!(resumed.is_some_and(|(_, t)| t.is_some() && *t != Some(used.request)));
    let used = one_request(&two_workers(), StartMode::Spread);
    assert!(used.most >= 1, "a task waits for the oneshot");
    let here: Vec<_> = used
        .seen
        .iter()
        .filter(|(_, t)| *t == Some(used.request))
        .collect();
    assert!(here.is_empty(), "ran in the request's task: {here:?}");
}

/// How many of `width` nodes after a root, which end at once, ran in the task that awaited
/// the run, on a two-worker runtime. With `left`, the run is awaited in a fresh task after
/// it spent all but `left` units of tokio's coop budget (128 per poll of a task); with
/// `None`, in the runtime's `block_on`, made unconstrained by that budget.
fn ran_where_awaited(width: usize, left: Option<usize>) -> usize {
    two_workers().block_on(async {
        let seen: Seen = Arc::default();
        let graph = fan_out(width, &seen);
        let awaiting = match left {
            Some(left) => tokio::spawn(async move {
                for _ in left..128 {
                    tokio::task::consume_budget().await;
                }
                graph.run(()).await.expect("run");
                tokio::task::try_id()
            })
            .await
            .unwrap(),
            None => {
                tokio::task::unconstrained(graph.run(()))
                    .await
                    .expect("run");
                None
            }
        };
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), width);
        seen.iter().filter(|(_, t)| *t == awaiting).count()
    })
}

/// The spread rule at its boundary, the budget of 128 nodes: awaited where tokio's coop
/// budget does not constrain it, a run whose future starts 128 nodes in one poll (a root
/// and 127 after it) runs them all there; one more node, and that one runs in a task of the
/// run's own.
#[test]
fn inline_on_two_workers_a_run_spreads_past_128_nodes_in_one_poll() {
    assert_eq!(ran_where_awaited(127, None), 127);
    assert_eq!(ran_where_awaited(128, None), 127, "the 129th node spreads");
    // In a fresh task the coop budget is no nearer: 128 nodes cost the run 16 units.
    assert_eq!(ran_where_awaited(127, Some(128)), 127);
    assert_eq!(
        ran_where_awaited(128, Some(128)),
        127,
        "the 129th node spreads"
    );
}

/// A run that spreads gives the awaiting task's turn away with its nodes: it spends what is
/// left of the task's coop budget (128 units per poll of a task, of which its start and its
/// 128 nodes spent 16), so the drivers it spawned go where the idle worker takes them rather than run
/// at once in the awaiting task's place. A run that ends in its poll leaves the rest.
#[test]
fn inline_on_two_workers_a_run_that_spreads_spends_the_rest_of_its_task_s_budget() {
    two_workers().block_on(async {
        let seen: Seen = Arc::default();
        let (small, large) = (fan_out(20, &seen), fan_out(400, &seen));
        let left = tokio::spawn(async move {
            small.run(()).await.expect("run");
            let after_small = tokio::task::coop::has_budget_remaining();
            let mut run = std::pin::pin!(large.run(()));
            assert!(
                futures::poll!(&mut run).is_pending(),
                "401 nodes: it spreads"
            );
            let after_large = tokio::task::coop::has_budget_remaining();
            run.await.expect("run");
            (after_small, after_large)
        })
        .await
        .unwrap();
        assert_eq!(left, (true, false), "budget left after each run's poll");
    });
}

/// The spread rule at its other boundary, the awaiting task's coop budget (tokio's 128
/// units per poll of a task): starting the run spends a unit, which pays for its first
/// eight nodes, and each eight after them spend one. Awaited with two units left, a run
/// starts 16 nodes (a root and 15 after it), and the next one spreads; with one left, 8.
#[test]
fn inline_on_two_workers_a_run_spreads_once_its_task_s_coop_budget_is_spent() {
    assert_eq!(ran_where_awaited(15, Some(2)), 15);
    assert_eq!(ran_where_awaited(16, Some(2)), 15, "the 17th node spreads");
    assert_eq!(ran_where_awaited(7, Some(1)), 7);
    assert_eq!(ran_where_awaited(8, Some(1)), 7, "the 9th node spreads");
}
