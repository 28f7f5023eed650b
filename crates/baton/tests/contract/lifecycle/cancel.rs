//! Lifecycle (`docs/contract.md`, rule 14): dropping a run's future cancels its nodes and leaves no task
//! behind; `RunCanceller::cancel` ends a run with `RunError::Cancelled` and its report;
//! cancelling before the first poll or after completion.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;

use baton_graph::{BoxError, Graph, Node, Outcome, RunError, run::CancelReason};
use tokio::time::sleep;

use crate::ms;

/// Counts live task futures: +1 when a task is called, -1 when its future is dropped.
#[derive(Default)]
struct Probe {
    alive: AtomicUsize,
    calls: AtomicUsize,
    dropped: AtomicUsize,
    finished: AtomicUsize,
}

struct Guard(Arc<Probe>);
impl Guard {
    fn new(probe: &Arc<Probe>) -> Self {
        probe.calls.fetch_add(1, Ordering::SeqCst);
        probe.alive.fetch_add(1, Ordering::SeqCst);
        Guard(Arc::clone(probe))
    }
}
impl Drop for Guard {
    fn drop(&mut self) {
        self.0.alive.fetch_sub(1, Ordering::SeqCst);
        self.0.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

/// The run input: holds a marker whose strong count shows whether the run's state is alive.
type Input = Arc<()>;

/// A node that sleeps `wait` ms inside a guarded future, then produces `()`.
fn guarded(
    g: &mut baton_graph::GraphBuilder<Input>,
    name: &str,
    ups: Vec<Node<()>>,
    wait: u64,
    probe: &Arc<Probe>,
) -> Node<()> {
    let probe = Arc::clone(probe);
    g.node(name)
        .after(ups)
        .task(move |_ctx, _ups: Vec<Arc<()>>| {
            let guard = Guard::new(&probe);
            async move {
                sleep(ms(wait)).await;
                guard.0.finished.fetch_add(1, Ordering::SeqCst);
                drop(guard);
                Ok::<_, BoxError>(())
            }
        })
}

/// `fast` 0..50, `after_fast` 50..550, `slow` 0..1000, `after_slow` 1000..1010.
struct Shape {
    graph: Graph<Input>,
    fast: Probe4,
}

struct Probe4 {
    fast: Arc<Probe>,
    after_fast: Arc<Probe>,
    slow: Arc<Probe>,
    after_slow: Arc<Probe>,
}

fn shape() -> Shape {
    let p = Probe4 {
        fast: Arc::default(),
        after_fast: Arc::default(),
        slow: Arc::default(),
        after_slow: Arc::default(),
    };
    let mut g = Graph::<Input>::builder();
    let fast = guarded(&mut g, "fast", vec![], 50, &p.fast);
    guarded(&mut g, "after_fast", vec![fast], 500, &p.after_fast);
    let slow = guarded(&mut g, "slow", vec![], 1000, &p.slow);
    guarded(&mut g, "after_slow", vec![slow], 10, &p.after_slow);
    Shape {
        graph: g.build().expect("valid"),
        fast: p,
    }
}

fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// Yields to the runtime until no spawned task is left (bounded: no wall clock involved).
async fn settle() {
    for _ in 0..100 {
        if alive_tasks() == 0 {
            return;
        }
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn dropping_a_run_mid_flight_cancels_running_nodes_and_starts_no_pending_one() {
    let s = shape();
    let p = &s.fast;
    let marker: Input = Arc::new(());
    let run = s.graph.run(Arc::clone(&marker));
    let canceller = run.canceller();
    // At 200 ms: fast is done, after_fast and slow are running, after_slow is pending.
    let elapsed = tokio::time::timeout(ms(200), run).await;
    assert!(elapsed.is_err(), "the run was still going at 200 ms");
    assert!(canceller.is_cancelled(), "dropping the run cancelled it");
    drop(canceller);

    settle().await;
    assert_eq!(alive_tasks(), 0, "no spawned task stays alive");
    assert_eq!(Arc::strong_count(&marker), 1, "the run's state is freed");
    assert_eq!(
        p.slow.alive.load(Ordering::SeqCst),
        0,
        "slow's future was dropped"
    );
    assert_eq!(p.after_fast.alive.load(Ordering::SeqCst), 0);
    assert_eq!(p.slow.dropped.load(Ordering::SeqCst), 1);
    assert_eq!(p.after_fast.dropped.load(Ordering::SeqCst), 1);

    // Long after every sleep would have ended, nothing resumed and nothing started.
    sleep(ms(5_000)).await;
    assert_eq!(p.fast.finished.load(Ordering::SeqCst), 1);
    assert_eq!(p.after_fast.finished.load(Ordering::SeqCst), 0);
    assert_eq!(p.slow.finished.load(Ordering::SeqCst), 0);
    assert_eq!(
        p.after_slow.calls.load(Ordering::SeqCst),
        0,
        "never started"
    );
    assert_eq!(p.slow.calls.load(Ordering::SeqCst), 1);
    assert_eq!(p.after_fast.calls.load(Ordering::SeqCst), 1);
    assert_eq!(alive_tasks(), 0);
}

/// On a one-worker runtime the run's first poll starts the roots in the awaiting task
/// itself (the embedded driver); each root's attempt waits, so it moves to a task of its
/// own. Dropping the run right then cancels them: neither finishes, no downstream is ever
/// called, no task is left and the input is released.
#[tokio::test(start_paused = true)]
async fn dropping_a_run_right_after_its_first_poll_cancels_the_roots_it_started() {
    let s = shape();
    let p = &s.fast;
    let marker: Input = Arc::new(());
    let mut run = s.graph.run(Arc::clone(&marker));
    assert!(futures::poll!(&mut run).is_pending());
    assert_eq!(
        p.fast.calls.load(Ordering::SeqCst),
        1,
        "started by the first poll"
    );
    assert_eq!(
        p.slow.calls.load(Ordering::SeqCst),
        1,
        "started by the first poll"
    );
    drop(run);
    settle().await;
    sleep(ms(5_000)).await;
    assert_eq!(alive_tasks(), 0);
    assert_eq!(Arc::strong_count(&marker), 1);
    for probe in [&p.fast, &p.slow] {
        assert_eq!(probe.finished.load(Ordering::SeqCst), 0, "cancelled");
    }
    for probe in [&p.after_fast, &p.after_slow] {
        assert_eq!(probe.calls.load(Ordering::SeqCst), 0, "never started");
    }
}

#[tokio::test(start_paused = true)]
async fn dropping_a_run_polled_a_few_times_cancels_what_runs() {
    let s = shape();
    let p = &s.fast;
    let marker: Input = Arc::new(());
    let mut run = s.graph.run(Arc::clone(&marker));
    // Poll by hand, letting the drivers run in between, until both roots are running.
    for _ in 0..20 {
        assert!(futures::poll!(&mut run).is_pending());
        if p.slow.alive.load(Ordering::SeqCst) == 1 && p.fast.alive.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(p.slow.alive.load(Ordering::SeqCst), 1, "slow is running");
    drop(run);
    settle().await;
    assert_eq!(alive_tasks(), 0);
    assert_eq!(Arc::strong_count(&marker), 1);
    assert_eq!(p.slow.alive.load(Ordering::SeqCst), 0);
    assert_eq!(p.fast.alive.load(Ordering::SeqCst), 0);
    sleep(ms(5_000)).await;
    assert_eq!(p.fast.finished.load(Ordering::SeqCst), 0);
    assert_eq!(p.slow.finished.load(Ordering::SeqCst), 0);
    assert_eq!(p.after_fast.calls.load(Ordering::SeqCst), 0);
    assert_eq!(p.after_slow.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn dropping_a_run_that_was_never_polled_runs_nothing() {
    let s = shape();
    let marker: Input = Arc::new(());
    let run = s.graph.run(Arc::clone(&marker));
    assert_eq!(Arc::strong_count(&marker), 2);
    drop(run);
    assert_eq!(Arc::strong_count(&marker), 1);
    sleep(ms(5_000)).await;
    assert_eq!(s.fast.fast.calls.load(Ordering::SeqCst), 0);
    assert_eq!(alive_tasks(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dropping_a_run_on_a_multi_thread_runtime_drops_the_running_task() {
    struct SendOnDrop(Option<tokio::sync::oneshot::Sender<()>>);
    impl Drop for SendOnDrop {
        fn drop(&mut self) {
            if let Some(tx) = self.0.take() {
                let _ = tx.send(());
            }
        }
    }
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
    let (dropped_tx, dropped_rx) = tokio::sync::oneshot::channel::<()>();
    let slots = Arc::new(std::sync::Mutex::new((Some(started_tx), Some(dropped_tx))));
    let downstream_calls = Arc::new(AtomicUsize::new(0));
    let mut g = Graph::<Input>::builder();
    let hang = g.node("hang").task(move |_ctx, ()| {
        let (started, dropped) = {
            let mut s = slots.lock().expect("lock");
            (s.0.take(), s.1.take())
        };
        async move {
            let _guard = SendOnDrop(dropped);
            if let Some(tx) = started {
                let _ = tx.send(());
            }
            std::future::pending::<()>().await;
            Ok::<_, BoxError>(())
        }
    });
    let calls = Arc::clone(&downstream_calls);
    g.node("after").after(hang).task(move |_ctx, _h: Arc<()>| {
        calls.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, BoxError>(()) }
    });
    let graph = g.build().expect("valid");
    let marker: Input = Arc::new(());
    let mut run = graph.run(Arc::clone(&marker));
    tokio::select! {
        _ = &mut run => panic!("a run with a pending task cannot finish"),
        started = started_rx => started.expect("hang started"),
    }
    drop(run);
    // A hang guard only: the assertion is that the drop arrives at all.
    tokio::time::timeout(Duration::from_secs(30), dropped_rx)
        .await
        .expect("the running task's future was dropped")
        .expect("sent by the guard");
    tokio::time::timeout(Duration::from_secs(30), async {
        while Arc::strong_count(&marker) > 1 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the run's state is freed");
    assert_eq!(downstream_calls.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn canceller_ends_the_run_with_cancelled_and_its_report() {
    let probes = shape().fast;
    let mut g = Graph::<Input>::builder();
    let fast = guarded(&mut g, "fast", vec![], 50, &probes.fast);
    let after_fast = guarded(&mut g, "after_fast", vec![fast], 500, &probes.after_fast);
    let slow = guarded(&mut g, "slow", vec![], 1000, &probes.slow);
    let after_slow = guarded(&mut g, "after_slow", vec![slow], 10, &probes.after_slow);
    let bad = g.node("bad").task(|_ctx, ()| async {
        sleep(ms(10)).await;
        Err::<(), _>("bad")
    });
    let bad_down = g
        .node("bad_down")
        .after(bad)
        .task(|_ctx, _b: Arc<()>| async { Ok::<_, BoxError>(()) });
    let graph = g.build().expect("valid");

    let marker: Input = Arc::new(());
    let run = graph.run(Arc::clone(&marker));
    let canceller = run.canceller();
    assert!(!canceller.is_cancelled());
    let cancel = canceller.clone();
    let (result, ()) = tokio::join!(run, async move {
        sleep(ms(150)).await;
        cancel.cancel();
        cancel.cancel(); // twice does nothing more
    });
    let err = result.expect_err("cancelled");
    assert_eq!(
        err.to_string(),
        "run cancelled: cancelled through its handle"
    );
    let RunError::Cancelled { reason, report } = &err else {
        panic!("expected Cancelled, got {err:?}");
    };
    assert_eq!(reason, &CancelReason::Requested);
    assert_eq!(report.cancel_reason(), Some(&CancelReason::Requested));
    assert!(canceller.is_cancelled());
    assert_eq!(report.len(), 6);

    let n = |h: Node<()>| report.node(h).expect("node");
    assert_eq!(n(fast).outcome(), Outcome::Succeeded);
    assert_eq!(n(fast).end(), ms(50));
    for (h, start) in [(after_fast, 50), (slow, 0)] {
        let node = n(h);
        assert_eq!(node.outcome(), Outcome::Cancelled, "{}", node.name());
        assert_eq!(node.start(), Some(ms(start)), "{}", node.name());
        assert_eq!(node.end(), ms(150), "{}", node.name());
        assert_eq!(node.attempts(), 1, "{}", node.name());
        assert_eq!(
            node.message().as_deref(),
            Some("cancelled through its handle")
        );
    }
    let pending = n(after_slow);
    assert_eq!(pending.outcome(), Outcome::Cancelled);
    assert_eq!(pending.start(), None);
    assert_eq!(pending.attempts(), 0);
    assert_eq!(pending.end(), ms(150));
    assert_eq!(n(bad).outcome(), Outcome::Failed);
    assert_eq!(n(bad_down).outcome(), Outcome::Skipped);
    let c = report.counts();
    assert_eq!(
        (c.succeeded, c.failed, c.skipped, c.cancelled, c.total()),
        (1, 1, 1, 3, 6)
    );
    assert_eq!(report.makespan(), ms(150));

    assert_eq!(probes.slow.alive.load(Ordering::SeqCst), 0);
    assert_eq!(probes.after_fast.alive.load(Ordering::SeqCst), 0);
    sleep(ms(5_000)).await;
    assert_eq!(probes.after_slow.calls.load(Ordering::SeqCst), 0);
    assert_eq!(probes.slow.finished.load(Ordering::SeqCst), 0);
    drop(err);
    drop(canceller);
    settle().await;
    assert_eq!(alive_tasks(), 0);
    assert_eq!(Arc::strong_count(&marker), 1);
}

#[tokio::test(start_paused = true)]
async fn cancelling_before_the_first_poll_runs_nothing() {
    let s = shape();
    let run = s.graph.run(Arc::new(()));
    let canceller = run.canceller();
    canceller.cancel();
    assert!(canceller.is_cancelled());
    let err = run.await.expect_err("cancelled");
    let RunError::Cancelled { reason, report } = &err else {
        panic!("expected Cancelled, got {err:?}");
    };
    assert_eq!(reason, &CancelReason::Requested);
    assert_eq!(report.len(), 4);
    for node in report.nodes() {
        assert_eq!(node.outcome(), Outcome::Cancelled, "{}", node.name());
        assert_eq!(node.start(), None);
        assert_eq!(node.attempts(), 0);
        assert_eq!(node.end(), Duration::ZERO);
    }
    assert_eq!(report.counts().cancelled, 4);
    settle().await;
    sleep(ms(5_000)).await;
    let p = &s.fast;
    for probe in [&p.fast, &p.after_fast, &p.slow, &p.after_slow] {
        assert_eq!(probe.calls.load(Ordering::SeqCst), 0);
    }
    assert_eq!(alive_tasks(), 0);
}

/// A run's future first polled in one task, then awaited in another, while its `nodes`
/// nodes wait: a cancel wakes the task that awaits it now. The waiting nodes, the first
/// ones polled together with the awaiting task's waker and those past them each with a
/// waker of its own, registered the first task's waker at their first wait; the second
/// task's polls must replace it, or the cancel would wake a task that no longer polls the
/// run.
async fn cancel_after_the_run_moved(nodes: usize) {
    let mut g = Graph::<()>::builder();
    for i in 0..nodes {
        g.node(format!("wait{i}"))
            .task(|_ctx, ()| std::future::pending::<Result<(), BoxError>>());
    }
    let graph = g.build().expect("valid");
    let mut run = Box::pin(graph.run(()));
    let canceller = run.canceller();
    // The first task polls it once: every node starts and waits.
    #[allow(
        clippy::async_yields_async,
        reason = "the run is handed back unfinished, to be awaited here"
    )]
    let first = tokio::spawn(async move {
        assert!(futures::poll!(run.as_mut()).is_pending());
        run
    });
    let run = first.await.expect("the first task");
    let cancel = tokio::spawn(async move {
        sleep(ms(10)).await;
        canceller.cancel();
    });
    // This task awaits it now; the cancel must wake it at 10 ms. A timeout polls the run
    // when it fires, which would end it too, late: the paused clock tells them apart.
    let awaited = tokio::time::Instant::now();
    let ended = tokio::time::timeout(ms(1000), run).await;
    let woken_after = awaited.elapsed();
    cancel.await.expect("the cancelling task");
    assert_eq!(
        woken_after,
        ms(10),
        "{nodes} nodes: the cancel did not wake the awaiting task"
    );
    let Ok(Err(RunError::Cancelled { reason, report })) = ended else {
        panic!("{nodes} nodes: the run did not end cancelled: {ended:?}");
    };
    assert_eq!(reason, CancelReason::Requested);
    assert_eq!(report.counts().cancelled, nodes);
}

#[tokio::test(start_paused = true)]
async fn a_cancel_wakes_the_task_a_run_of_few_waiting_nodes_moved_to() {
    cancel_after_the_run_moved(4).await;
}

#[tokio::test(start_paused = true)]
async fn a_cancel_wakes_the_task_a_run_of_many_waiting_nodes_moved_to() {
    cancel_after_the_run_moved(12).await;
}

#[tokio::test(start_paused = true)]
async fn cancelling_after_completion_changes_nothing() {
    let s = shape();
    let run = s.graph.run(Arc::new(()));
    let canceller = run.canceller();
    let report = run.await.expect("clean run");
    let before = format!("{report:?}");
    canceller.cancel();
    assert!(!canceller.is_cancelled());
    assert_eq!(report.cancel_reason(), None);
    assert!(report.is_clean());
    assert_eq!(report.counts().succeeded, 4);
    assert_eq!(report.makespan(), ms(1010));
    assert_eq!(format!("{report:?}"), before);
}

#[tokio::test(start_paused = true)]
async fn an_attempts_cancellation_token_follows_the_attempt_and_the_run() {
    // A child task the attempt hands the token to stops when the run is cancelled.
    let child_stopped = Arc::new(AtomicBool::new(false));
    let stopped = Arc::clone(&child_stopped);
    let mut g = Graph::<()>::builder();
    let tok = g
        .node("token")
        .task(|ctx, ()| async move { Ok::<_, BoxError>(ctx.cancellation_token()) });
    g.node("spawner").task(move |ctx, ()| {
        let stopped = Arc::clone(&stopped);
        async move {
            let token = ctx.cancellation_token();
            tokio::spawn(async move {
                token.cancelled().await;
                stopped.store(true, Ordering::SeqCst);
            });
            sleep(ms(1_000)).await;
            Ok::<_, BoxError>(())
        }
    });
    let graph = g.build().expect("valid");
    let run = graph.run(());
    let canceller = run.canceller();
    let (result, ()) = tokio::join!(run, async move {
        sleep(ms(100)).await;
        canceller.cancel();
    });
    let report = result
        .expect_err("cancelled")
        .into_report()
        .expect("report");
    settle().await;
    assert!(child_stopped.load(Ordering::SeqCst));
    // An attempt that completed cancels its token too.
    let token = report.get(tok).expect("token node succeeded");
    assert!(token.is_cancelled());
    assert_eq!(alive_tasks(), 0);
}

#[test]
fn a_run_polled_outside_a_tokio_runtime_is_no_runtime() {
    let mut g = Graph::<()>::builder();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&calls);
    g.node("a").task(move |_ctx, ()| {
        c.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, BoxError>(()) }
    });
    let graph = g.build().expect("valid");
    let err = futures::executor::block_on(graph.run(())).expect_err("no runtime");
    assert!(matches!(err, RunError::NoRuntime));
    assert!(err.report().is_none());
    assert_eq!(
        err.to_string(),
        "no tokio runtime: a baton run must be awaited inside a tokio runtime"
    );
    // Polled by hand: ready at the first poll, not pending forever.
    let mut run = graph.run(());
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    assert!(matches!(
        std::pin::Pin::new(&mut run).poll(&mut cx),
        Poll::Ready(Err(RunError::NoRuntime))
    ));
    drop(run);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    // The same graph still runs inside a runtime.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let report = rt.block_on(graph.run(())).expect("run");
    assert_eq!(report.counts().succeeded, 1);
}

#[tokio::test(start_paused = true)]
async fn a_finished_run_leaves_no_task_and_its_report_holds_the_state() {
    let s = shape();
    let marker: Input = Arc::new(());
    let report = s.graph.run(Arc::clone(&marker)).await.expect("run");
    assert_eq!(alive_tasks(), 0, "every driver ended with the run");
    assert_eq!(
        Arc::strong_count(&marker),
        2,
        "the report keeps the run's state"
    );
    let clone = report.clone();
    drop(report);
    assert_eq!(Arc::strong_count(&marker), 2);
    drop(clone);
    assert_eq!(Arc::strong_count(&marker), 1, "nothing else holds it");
    for probe in [
        &s.fast.fast,
        &s.fast.after_fast,
        &s.fast.slow,
        &s.fast.after_slow,
    ] {
        assert_eq!(probe.alive.load(Ordering::SeqCst), 0);
        assert_eq!(probe.finished.load(Ordering::SeqCst), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn a_token_taken_before_the_async_block_stays_live_until_the_attempt_ends() {
    // `Ctx::cancellation_token`: "cancelled when this attempt ends in any way". Taking it
    // in the closure's synchronous part (without moving `ctx` into the future) is a
    // common shape; the attempt has not ended while its future runs.
    let mut g = Graph::<()>::builder();
    let n = g.node("n").task(|ctx, ()| {
        let token = ctx.cancellation_token();
        async move {
            let at_start = token.is_cancelled();
            sleep(ms(10)).await;
            let after_sleep = token.is_cancelled();
            Ok::<_, BoxError>((at_start, after_sleep, token))
        }
    });
    let report = g.build().expect("valid").run(()).await.expect("run");
    let (at_start, after_sleep, token) = report.get(n).expect("value");
    assert!(!at_start, "token cancelled before the attempt's first poll");
    assert!(
        !after_sleep,
        "token cancelled while the attempt was running"
    );
    assert!(token.is_cancelled(), "cancelled once the attempt ended");
}

/// How many runs the cancel-race stress test makes (`BATON_STRESS_RUNS` overrides).
fn stress_runs() -> u32 {
    std::env::var("BATON_STRESS_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000)
}

#[test]
fn a_cancel_racing_the_last_node_is_never_ok_with_cancelled_nodes() {
    // A run whose report has a `Cancelled` node was cancelled: it must resolve to
    // `RunError::Cancelled`, never to `Ok` (preserve-partial) or to `RunError::Failed`
    // without a failed node (fail-all). Cancels land at varying points, including just as
    // the last node ends.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_time()
        .build()
        .expect("runtime");
    let mut g = Graph::<()>::builder();
    g.node("a").task(|_ctx, ()| async {
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        Ok::<_, BoxError>(())
    });
    let graph = g.build().expect("valid");
    for i in 0..stress_runs() {
        let mode = if i % 2 == 0 {
            baton_graph::FailureMode::PreservePartial
        } else {
            baton_graph::FailureMode::FailAll
        };
        let run = graph.run_with((), baton_graph::RunOptions::new().failure_mode(mode));
        let canceller = run.canceller();
        let result = rt.block_on(async move {
            let cancel = tokio::spawn(async move {
                for _ in 0..i % 5 {
                    tokio::task::yield_now().await;
                }
                canceller.cancel();
            });
            let result = run.await;
            cancel.await.expect("canceller");
            result
        });
        match result {
            Ok(report) => assert_eq!(
                report.counts().cancelled,
                0,
                "run {i} ({mode}) is Ok but has a cancelled node: {report:?}"
            ),
            Err(RunError::Cancelled { reason, report }) => {
                assert_eq!(reason, CancelReason::Requested);
                assert_eq!(report.counts().cancelled, 1, "run {i}");
            }
            Err(other) => panic!("run {i} ({mode}): expected Ok or Cancelled, got {other}"),
        }
    }
}
