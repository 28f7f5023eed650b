//! White-box tests of the run state: the timer floor, the driver cap, spare arrays,
//! prefetching, start reuse.

use std::future::{Ready, ready};

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use super::*;
use crate::engine::run::node_state::{NodeState, Slot};
use crate::engine::run::start::StartMode;
use crate::util::once::WriteOnce;
use crate::{BoxError, Ctx, Graph, Node};

fn noop<V>(_ctx: Ctx<()>, _values: V) -> Ready<Result<(), BoxError>> {
    ready(Ok(()))
}

/// A run of `graph` with the default options, not started.
fn run_of(graph: &Graph<()>) -> Arc<RunState<()>> {
    RunState::new(
        Arc::clone(&graph.inner),
        (),
        (FailureMode::default(), StartMode::default()),
        None,
        None,
        None,
        false,
    )
}

/// Runs `graph` once on a runtime with `workers` worker threads, from outside it; the
/// run's state, once the runtime shut down and the report was dropped.
fn run_on(graph: &Graph<()>, workers: usize) -> Arc<RunState<()>> {
    run_and_report(graph, workers).0
}

/// Runs `graph` once on a runtime with `workers` worker threads, from outside it, which
/// has shut down when this returns: the run's state and its report.
fn run_and_report(graph: &Graph<()>, workers: usize) -> (Arc<RunState<()>>, crate::Report) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("a runtime");
    let run = graph.run(());
    let state = Arc::clone(&run.state);
    let report = rt.block_on(run).expect("the run succeeds");
    (state, report)
}

/// A runtime of two worker threads, with its drivers.
fn two_workers() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Whether a run of `graph` on `workers` worker threads set its timer floor.
fn sets_a_floor(graph: &Graph<()>, workers: usize) -> bool {
    run_on(graph, workers).core.timer_floor().is_some()
}

/// One node with `timeout` and a retry without backoff, whose attempts run
/// `attempt(first)`.
fn timed_graph<F, Fut>(timeout: Duration, attempt: F) -> Graph<()>
where
    F: Fn(bool) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
{
    let calls = Arc::new(AtomicU32::new(0));
    let mut g = Graph::<()>::builder();
    let _: Node<()> = g
        .node("n")
        .timeout(timeout)
        .retry(crate::Retry::new(2).backoff(crate::Backoff::constant(Duration::ZERO)))
        .task(move |_ctx, ()| attempt(calls.fetch_add(1, Ordering::SeqCst) == 0));
    g.build().expect("a valid graph")
}

/// A node with a timeout whose attempts wait by yielding twice, and that fails its first
/// attempt at once when `retried`: its waiting attempt then runs on the policy path.
/// Twice, because a run that starts inline moves an attempt to a driver of its own at its
/// first `Pending`, and that driver sets its timer at the next.
fn waiting_graph(retried: bool) -> Graph<()> {
    timed_graph(Duration::from_secs(60), move |first| async move {
        if first && retried {
            return Err::<(), BoxError>("refused".into());
        }
        tokio::task::yield_now().await;
        tokio::task::yield_now().await;
        Ok(())
    })
}

/// The timer floor of `RunCore::floor_timers` is set where a policy node's attempt waits,
/// on the fast path and on the policy path alike, on a multi-thread runtime of two workers
/// or of one, and not on a current-thread runtime, which may run on tokio's paused clock.
#[test]
fn waiting_policy_attempts_set_the_timer_floor_on_a_multi_thread_runtime() {
    assert!(sets_a_floor(&waiting_graph(false), 2), "fast path");
    assert!(sets_a_floor(&waiting_graph(true), 2), "policy path");
    assert!(sets_a_floor(&waiting_graph(false), 1), "one worker");
    assert!(sets_a_floor(&waiting_graph(true), 1), "one worker");
    let current_thread = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    };
    for retried in [false, true] {
        let graph = waiting_graph(retried);
        let run = graph.run(());
        let state = Arc::clone(&run.state);
        current_thread().block_on(run).expect("the run succeeds");
        assert!(state.core.timer_floor().is_none(), "current thread");
    }
}

/// Runs `graph` once on `rt`, from outside it, and returns once the run's state was
/// dropped: its drivers, which may end just after its future, on a worker, let go of it,
/// and it drops here.
fn run_until_its_state_drops(graph: &Graph<()>, rt: &tokio::runtime::Runtime) {
    let run = graph.run(());
    let state = Arc::clone(&run.state);
    rt.block_on(run).expect("the run succeeds");
    let waited = std::time::Instant::now();
    while Arc::strong_count(&state) > 1 {
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "the run's state"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A run's timer floor outlives it (`Spares::keep_standing`): the next run of the graph on
/// the same runtime, whose first cut is within the reach of the floor left
/// (`deadline::reach`), takes that floor as it runs, without setting it again. So on a
/// multi-thread runtime of two workers and of one.
#[test]
fn a_run_s_timer_floor_is_the_next_run_s() {
    for workers in [2, 1] {
        a_run_s_timer_floor_is_the_next_run_s_on(workers);
    }
}

fn a_run_s_timer_floor_is_the_next_run_s_on(workers: usize) {
    let graph = waiting_graph(false);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("a runtime");
    let (spare, id) = (&graph.inner.spare, rt.handle().id());
    let home = spare.home();
    // Runs the graph; the instant of the running timer it left once its state was dropped;
    // put back as it was.
    let run_and_floor = || {
        run_until_its_state_drops(&graph, &rt);
        let timer = spare.take_standing(home, id).expect("a running floor");
        let at = timer.get().map(tokio::time::Sleep::deadline);
        spare.keep_standing(home, Some(id), timer);
        at
    };
    let first = run_and_floor();
    assert!(first.is_some(), "{workers} worker(s)");
    assert_eq!(run_and_floor(), first, "the same floor, not set again");
}

/// The timers of a run's drivers outlive it too (`Spares::keep_standing`): a run of ten
/// waiting roots with a timeout, on a multi-thread runtime of one worker, leaves running
/// the timers of the two drivers past the eight polled together, the one those eight
/// shared and its floor. The next run, whose cuts they stand for (`deadline::reach`),
/// takes them as they run, without setting any again.
#[test]
fn a_run_s_drivers_timers_are_the_next_run_s() {
    let graph = parallel_waiting(10);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let spare = &graph.inner.spare;
    let (home, id) = (spare.home(), rt.handle().id());
    // Runs the graph; the instants of the running timers it left once its state was
    // dropped; put back as they were.
    let run_and_timers = || {
        run_until_its_state_drops(&graph, &rt);
        let timers: Vec<_> = std::iter::from_fn(|| spare.take_standing(home, id)).collect();
        let mut at: Vec<_> = timers
            .iter()
            .filter_map(|t| t.get().map(tokio::time::Sleep::deadline))
            .collect();
        for timer in timers.into_iter().rev() {
            spare.keep_standing(home, Some(id), timer);
        }
        at.sort();
        at
    };
    let first = run_and_timers();
    assert_eq!(first.len(), 4, "two drivers', the shared one and the floor");
    assert_eq!(run_and_timers(), first, "the same timers, none set again");
}

/// A run makes a timer floor only when no other run of its orchestrator in flight holds
/// one: one alone makes it; another, started while the first waits, makes none; once the
/// first ended, and once a run holding it was dropped while it waited, the next run makes
/// one again.
#[test]
fn one_run_in_flight_holds_a_timer_floor() {
    let gate = Arc::new(tokio::sync::Notify::new());
    let mut g = Graph::<bool>::builder();
    let _: Node<()> = g.node("n").timeout(Duration::from_secs(60)).task({
        let gate = Arc::clone(&gate);
        move |ctx, ()| {
            let (hold, gate) = (*ctx.input(), Arc::clone(&gate));
            async move {
                if hold {
                    gate.notified().await;
                } else {
                    tokio::task::yield_now().await;
                    tokio::task::yield_now().await;
                }
                Ok::<(), BoxError>(())
            }
        }
    });
    let graph = g.build().expect("a valid graph");
    let rt = two_workers();
    // Starts a run that waits at the gate, once its floor is set.
    let held = || {
        let run = graph.run(true);
        let state = Arc::clone(&run.state);
        let task = rt.spawn(run);
        let waited = std::time::Instant::now();
        while state.core.timer_floor().is_none() {
            assert!(
                waited.elapsed() < Duration::from_secs(10),
                "the held run's floor"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        task
    };
    let floored = || {
        let run = graph.run(false);
        let state = Arc::clone(&run.state);
        rt.block_on(run).expect("the run succeeds");
        state.core.timer_floor().is_some()
    };
    let first = held();
    assert!(!floored(), "another run holds a floor");
    gate.notify_one();
    rt.block_on(first)
        .expect("the held run's task")
        .expect("the held run succeeds");
    assert!(floored(), "given back when the held run ended");
    let dropped = held();
    dropped.abort();
    assert!(rt.block_on(dropped).is_err(), "aborted");
    assert!(floored(), "given back when the held run was dropped");
}

/// A run alone whose subgraph node's inner run is of the same orchestrator: the inner run,
/// whose attempt waits first, is granted the floor, which stands for both; given back
/// when the runs end.
#[test]
fn a_run_and_its_inner_run_hold_one_timer_floor() {
    let orchestrator = crate::Orchestrator::new();
    let held = Arc::new(AtomicU32::new(u32::MAX));
    let mut inner = orchestrator.graph::<()>();
    let _: Node<()> = inner.node("leaf").timeout(Duration::from_secs(60)).task({
        let (orchestrator, held) = (orchestrator.clone(), Arc::clone(&held));
        move |_ctx, ()| {
            let (orchestrator, held) = (orchestrator.clone(), Arc::clone(&held));
            async move {
                // Moved to a driver of its own at its first wait, which sets its timer, and
                // asks for the floor, at the next.
                tokio::task::yield_now().await;
                tokio::task::yield_now().await;
                held.store(orchestrator.timer_floors_held() as u32, Ordering::SeqCst);
                Ok::<(), BoxError>(())
            }
        }
    });
    let inner = inner.build().expect("a valid inner graph");
    let mut g = orchestrator.graph::<()>();
    let _: Node<()> = g.node("sub").timeout(Duration::from_secs(60)).subgraph(
        &inner,
        |_: &(), ()| (),
        |_report| Ok::<(), BoxError>(()),
    );
    let graph = g.build().expect("a valid graph");
    drop(run_on(&graph, 2));
    assert_eq!(held.load(Ordering::SeqCst), 1, "one floor, the inner run's");
    assert_eq!(orchestrator.timer_floors_held(), 0, "given back");
}

/// How many nodes of `report` succeeded.
fn succeeded(report: &crate::Report) -> usize {
    report
        .nodes()
        .filter(|n| n.outcome() == crate::Outcome::Succeeded)
        .count()
}

/// A run whose ten roots wait leaves the places of its set of drivers, those past the
/// eight polled together, with its waker; the next run's set takes them, as its nodes all
/// run, and leaves them again.
#[test]
fn a_run_leaves_the_places_of_its_set_with_its_waker() {
    let mut g = Graph::<()>::builder();
    for i in 0..10 {
        let _: Node<()> = g.node(format!("root {i}")).task(|_ctx, ()| async {
            tokio::task::yield_now().await;
            Ok::<(), BoxError>(())
        });
    }
    let graph = g.build().expect("a valid graph");
    let spare = &graph.inner.spare;
    let home = spare.home();
    drop(run_on(&graph, 1));
    let woken = spare.take_waker(home).expect("the waker is kept");
    assert_eq!(
        woken.places(),
        2,
        "the places of the two drivers past eight"
    );
    assert!(woken.is_unused(), "unused, holding no task");
    spare.keep_waker(home, woken);
    let (second, report) = run_and_report(&graph, 1);
    assert!(spare.take_waker(home).is_none(), "the second run took it");
    assert_eq!(succeeded(&report), 10, "every node ran");
    drop((second, report));
    let woken = spare.take_waker(home).expect("kept again");
    assert_eq!(woken.places(), 2, "and its places");
}

/// A run whose runtime shut down, which fired its timers, leaves the graph the boxes of its
/// timers, its driver's and its floor's, with no timer in them, and its joined drivers'
/// waker, unused and holding no task; the next run makes its timers and its waker of them,
/// and sets its floor at its own cut, not the last run's. A driver leaves its timer when
/// it ends, running while its runtime runs; once it fired, a later run (here, one on a
/// current-thread runtime, told by this test) drops it and keeps its box. The run leaves
/// its floor's box and its waker when its state is dropped.
#[test]
fn a_run_leaves_its_timers_and_waker_to_the_next_run_empty() {
    let graph = waiting_graph(false);
    let spare = &graph.inner.spare;
    let home = spare.home();
    let timers = || std::iter::from_fn(|| spare.take_timer(home)).collect::<Vec<_>>();
    // Runs the graph on a runtime of its own, shut down when this returns: the run's
    // state, and the driver's timer, which it left running, now fired.
    let run = || {
        let rt = two_workers();
        let id = rt.handle().id();
        let run = graph.run(());
        let state = Arc::clone(&run.state);
        rt.block_on(run).expect("the run succeeds");
        drop(rt);
        let driver_s = spare.take_standing(home, id).expect("the driver's timer");
        assert!(
            driver_s.get().is_some_and(tokio::time::Sleep::is_elapsed),
            "fired as its runtime shut down"
        );
        (state, driver_s)
    };
    let (first, driver_s) = run();
    spare.keep_standing(home, None, driver_s);
    let first_floor = first.core.timer_floor().expect("the first run's floor").0;
    drop(first);
    let kept = timers();
    assert_eq!(kept.len(), 2, "the driver's timer's box and the floor's");
    assert!(
        kept.iter().all(|t| t.is_made() && t.get().is_none()),
        "no timer in them"
    );
    let woken = spare.take_waker(home).expect("the waker is kept");
    assert!(woken.is_unused(), "unused, holding no task");
    for timer in kept {
        spare.keep_timer(home, timer);
    }
    spare.keep_waker(home, woken);
    std::thread::sleep(Duration::from_millis(2));
    let (second, _) = run();
    assert!(
        timers().is_empty(),
        "the driver's timer and the floor made of the boxes"
    );
    assert!(spare.take_waker(home).is_none(), "and the waker");
    let second_floor = second.core.timer_floor().expect("the second run's floor").0;
    assert!(second_floor > first_floor, "set at the second run's cut");
    drop(second);
    assert_eq!(timers().len(), 1, "the floor's box is kept again");
    assert!(spare.take_waker(home).is_some(), "and the waker");
}

/// A run cancelled, or dropped, while its nodes wait leaves its joined drivers' waker to
/// later runs too: its future drops its drivers and its waker before its own reference to
/// the run's state, which the state, dropped with it, would otherwise find still held.
#[test]
fn a_cancelled_or_dropped_run_leaves_its_waker() {
    let mut g = Graph::<()>::builder();
    for name in ["a", "b", "c"] {
        let _: Node<()> = g.node(name).task(|_ctx, ()| async {
            tokio::time::sleep(Duration::from_secs(10)).await;
            Ok::<_, BoxError>(())
        });
    }
    let graph = g.build().expect("a valid graph");
    let spare = &graph.inner.spare;
    let home = spare.home();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let mut run = Box::pin(graph.run(()));
        assert!(futures_util::poll!(&mut run).is_pending(), "the nodes wait");
        run.canceller().cancel();
        let _ = run.await;
    });
    assert!(
        spare.take_waker(home).is_some(),
        "a cancelled run leaves its waker"
    );
    rt.block_on(async {
        let mut run = Box::pin(graph.run(()));
        assert!(futures_util::poll!(&mut run).is_pending(), "the nodes wait");
        drop(run);
    });
    assert!(
        spare.take_waker(home).is_some(),
        "a dropped run leaves its waker"
    );
}

/// A chain of two nodes with `timeout`, `a` then `b`, each waiting by yielding twice, `a`
/// also sleeping `a_sleeps` between, run on two workers: the floor's instant, and `a`'s
/// and `b`'s cuts, from the run's origin.
fn floor_of_a_chain(timeout: Duration, a_sleeps: Duration) -> (Duration, Duration, Duration) {
    let mut g = Graph::<()>::builder();
    let a: Node<()> = g
        .node("a")
        .timeout(timeout)
        .task(move |_ctx, ()| async move {
            tokio::task::yield_now().await;
            tokio::time::sleep(a_sleeps).await;
            tokio::task::yield_now().await;
            Ok::<_, BoxError>(())
        });
    let b: Node<()> = g
        .node("b")
        .after(a)
        .timeout(timeout)
        .task(|_ctx, _a| async {
            tokio::task::yield_now().await;
            tokio::task::yield_now().await;
            Ok::<_, BoxError>(())
        });
    let (state, report) = run_and_report(&g.build().expect("a valid graph"), 2);
    let cut = |node| report.node(node).and_then(|n| n.start()).expect("started") + timeout;
    let (floor, _) = state.core.timer_floor().expect("a floor was set");
    (state.core.offset(floor), cut(a), cut(b))
}

/// The floor moves up to the cut of a later attempt when the floor would fire in its time,
/// earlier than its last 1/64: `b` starts at least 20 ms after `a`, more than 1/64 of its
/// 500 ms. Attempts that follow each other quickly keep one floor: `b` starts well within
/// 1/64 of a 60 s timeout after `a`.
#[test]
fn the_floor_moves_up_to_the_cut_of_an_attempt_after_one_that_took_a_while() {
    let (floor, _, b) = floor_of_a_chain(Duration::from_millis(500), Duration::from_millis(20));
    assert_eq!(floor, b, "moved up to b's cut");
    let (floor, a, _) = floor_of_a_chain(Duration::from_secs(60), Duration::ZERO);
    assert_eq!(floor, a, "left at a's cut");
}

/// An inline run counts one driver while its future drives it; once the future stops,
/// every worker's. A 300-node chain makes it stop: it hands off after its first nodes.
/// Spread runs count every worker from the start, and one worker is one either way.
#[test]
fn an_inline_run_spreads_once_its_future_stops_driving_it() {
    let chain = |start: StartMode| {
        let mut g = Graph::<()>::builder();
        g.start_mode(start);
        let mut prev: Node<()> = g.node("c0").task(noop);
        for i in 1..300 {
            prev = g.node(format!("c{i}")).after(prev).task(noop);
        }
        g.build().expect("a valid graph")
    };
    let inline = chain(StartMode::Inline);
    let state = RunState::new(
        Arc::clone(&inline.inner),
        (),
        (FailureMode::default(), StartMode::Inline),
        None,
        None,
        None,
        false,
    );
    assert_eq!(state.workers(), 1, "not started");
    assert_eq!(run_on(&inline, 2).workers(), 2, "inline, two workers");
    assert_eq!(run_on(&inline, 1).workers(), 1, "inline, one worker");
    assert_eq!(run_on(&chain(StartMode::Spread), 2).workers(), 2, "spread");
}

/// Holds both workers of `rt`: spawns two tasks that block their worker until `release`
/// is set. True when both are running within 10 s; false when one worker took both. That
/// worker then runs them one after the other, and they are released at once.
fn hold_both_workers(rt: &tokio::runtime::Runtime, release: &Arc<AtomicBool>) -> bool {
    let holding = Arc::new(AtomicU32::new(0));
    for _ in 0..2 {
        let (holding, release) = (Arc::clone(&holding), Arc::clone(release));
        rt.spawn(async move {
            holding.fetch_add(1, Ordering::SeqCst);
            while !release.load(Ordering::SeqCst) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        });
    }
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while holding.load(Ordering::SeqCst) < 2 {
        if std::time::Instant::now() > give_up {
            release.store(true, Ordering::SeqCst);
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    true
}

/// An inline run's future that hands off a run with nodes still queued gives them a
/// driver per worker. With both workers of the runtime held, so that no spawned driver
/// runs and leaves, the first poll of a run of 300 roots that end at once runs the
/// first ones, then hands off, and two drivers are counted active. Without the hand-off's
/// spawns for queued nodes, or without `spread`, only one would be. The workers are held with a
/// bounded wait, so the test fails instead of hanging when they cannot be.
#[test]
fn an_inline_hand_off_gives_queued_nodes_a_driver_per_worker() {
    let mut g = Graph::<()>::builder();
    g.start_mode(StartMode::Inline);
    for i in 0..300 {
        let _: Node<()> = g.node(format!("r{i}")).task(noop);
    }
    let graph = g.build().expect("a valid graph");
    for _ in 0..5 {
        let rt = two_workers();
        let release = Arc::new(AtomicBool::new(false));
        if !hold_both_workers(&rt, &release) {
            continue;
        }
        let mut run = graph.run(());
        let state = Arc::clone(&run.state);
        rt.block_on(async {
            assert!(futures::poll!(&mut run).is_pending(), "it handed off");
        });
        let queued = !state.core.ready().is_empty();
        let active = state.core.ready().active();
        release.store(true, Ordering::SeqCst);
        let report = rt.block_on(run).expect("the run succeeds");
        assert_eq!(report.len(), 300);
        assert!(queued, "roots were left queued");
        assert_eq!(active, 2, "a driver per worker for the queued roots");
        return;
    }
    panic!("could not hold both workers of a two-worker runtime in 5 tries");
}

/// The floor is registered when the attempt that sets it spent the task's coop budget
/// before its first `Pending`, its one poll being made outside the budget: it fires with
/// the attempt's cut, at the same instant, before the run can end. The cut is 5 ms on a
/// multi-thread runtime, whose clock cannot be paused. Nothing is timed: the run ends
/// after its cut whatever the machine.
#[test]
fn a_floor_set_with_the_coop_budget_spent_is_registered() {
    let graph = timed_graph(Duration::from_millis(5), |first| async move {
        if first {
            while tokio::task::coop::has_budget_remaining() {
                tokio::task::coop::consume_budget().await;
            }
            std::future::pending::<()>().await;
        }
        Ok(())
    });
    let state = run_on(&graph, 2);
    let (_, elapsed) = state.core.timer_floor().expect("a floor was set");
    assert!(elapsed, "the floor was never registered");
}

/// What a node costs per run, beside its join counter of 8 bytes, its value cell of
/// 24 bytes and its ready-queue cell of 4 bytes: about 130 bytes per node in all.
#[cfg(target_pointer_width = "64")]
#[test]
fn a_slot_is_96_bytes_and_its_record_48() {
    assert_eq!(std::mem::size_of::<Settled>(), 48);
    assert_eq!(std::mem::size_of::<Slot>(), 96);
    assert_eq!(std::mem::size_of::<NodeState>(), 8);
    assert_eq!(std::mem::size_of::<WriteOnce<Value>>(), 24);
}

/// A run's arrays go back to the set of the thread that created it, not to that of the
/// thread that drops it, as a run spread over the workers often ends on another. The next
/// run created here finds them.
#[test]
fn a_run_gives_its_arrays_back_to_its_home_set() {
    let mut g = Graph::<()>::builder();
    let _a: Node<()> = g.node("a").task(noop);
    let graph = g.build().unwrap();
    let home = graph.inner.spare.home();
    let mut run = Some(run_of(&graph));
    let mut elsewhere = None;
    // Threads alive at once hold distinct stripes: one of the next few is not this
    // thread's set. Each stays alive until the end, so that the next takes a new stripe.
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let wait = Arc::new(std::sync::Mutex::new(wait));
    let mut alive = Vec::new();
    for _ in 0..=crate::util::striped::STRIPES {
        let Some(r) = run.take() else { break };
        let inner = Arc::clone(&graph.inner);
        let (tx, rx) = std::sync::mpsc::channel();
        let wait = Arc::clone(&wait);
        alive.push(std::thread::spawn(move || {
            let other = inner.spare.home();
            if other == home {
                tx.send((Some(r), None)).unwrap();
            } else {
                drop(r);
                tx.send((None, Some(other))).unwrap();
            }
            drop(inner);
            let _ = wait.lock().unwrap().recv();
        }));
        (run, elsewhere) = rx.recv().unwrap();
    }
    drop(done);
    for t in alive {
        t.join().unwrap();
    }
    let other = elsewhere.expect("a thread of another stripe dropped the run");
    assert!(graph.inner.spare.take(other).is_none(), "the dropper's set");
    assert!(graph.inner.spare.take(home).is_some(), "the home set");
}

/// A run prefetches only on a graph that is both large, its arrays outgrowing the caches,
/// and scattered, some edge joining nodes that are not neighbours. It does not on a small
/// graph, nor on a long chain or many independent nodes, whose entries the hardware streams.
#[test]
fn only_large_scattered_graphs_prefetch() {
    fn prefetches(graph: &Graph<()>) -> bool {
        run_of(graph).core.prefetch()
    }
    let n = PREFETCH_MIN_NODES;
    // A chain, then one edge back to the first node: the only scattered edge.
    let chain = |len: usize, back: bool| {
        let mut g = Graph::<()>::builder();
        let first: Node<()> = g.node("n0").task(noop);
        let mut last = first;
        for i in 1..len {
            last = g.node(format!("n{i}")).after(last).task(noop);
        }
        if back {
            g.node("back").after(first).task(noop);
        }
        g.build().unwrap()
    };
    let parallel = {
        let mut g = Graph::<()>::builder();
        for i in 0..n {
            g.node(format!("n{i}")).task(noop);
        }
        g.build().unwrap()
    };
    assert!(!prefetches(&chain(n, false)), "a long chain");
    assert!(!prefetches(&parallel), "independent nodes");
    assert!(!prefetches(&chain(16, true)), "a small scattered graph");
    assert!(prefetches(&chain(n, true)), "a large scattered graph");
}

/// The graph marks the nodes that produce `()`, whose cells a run does not prefetch for
/// their downstreams: past 64 nodes too, and a router by its branches' type.
#[test]
fn a_graph_marks_the_nodes_that_produce_unit() {
    let mut g = Graph::<()>::builder();
    let mut units = Vec::new();
    for i in 0..70 {
        if i % 3 == 0 {
            g.node(format!("n{i}"))
                .task(|_, ()| async { Ok::<_, BoxError>(7_u64) });
        } else {
            units.push(g.node(format!("n{i}")).task(noop).index);
        }
    }
    let routed = g
        .router("route")
        .select(|_, ()| "a")
        .branch("a", |b| b.task(|_, ()| async { Ok::<_, BoxError>(1_u8) }))
        .finish()
        .index;
    let graph = g.build().unwrap();
    let meta = &graph.inner.meta;
    for i in 0..70_u32 {
        assert_eq!(meta.produces_unit(i), units.contains(&i), "node {i}");
    }
    assert!(!meta.produces_unit(routed), "a router of u8 branches");
    assert!(!meta.produces_unit(u32::MAX), "no such node");
}

/// A node continued inline reuses its upstream's end as its start only when nothing but
/// the scheduler's bookkeeping can have run in between: no callbacks on the upstream, at
/// most one other downstream released, or fifteen in a local run, whose driver pushes
/// them on its own stack. In a local run, one thread ended every upstream, the last at
/// that end: it is the start. In a run spread over workers, another upstream may
/// have ended later on another worker: at most two upstreams, the other one's record
/// written and without callbacks, and the later of the two ends.
#[test]
fn a_start_is_reused_only_when_no_user_code_ran_in_between() {
    let mut g = Graph::<()>::builder();
    let a: Node<()> = g.node("a").task(noop);
    let b: Node<()> = g.node("b").after(a).task(noop);
    let c: Node<()> = g.node("c").on_success(|_: &()| {}).task(noop);
    let d: Node<()> = g.node("d").after(c).task(noop);
    let e: Node<()> = g.node("e").after((a, c)).task(noop);
    let f: Node<()> = g.node("f").task(noop);
    let fan: Vec<Node<()>> = (0..3)
        .map(|i| g.node(format!("f{i}")).after(f).task(noop))
        .collect();
    let w: Node<()> = g.node("w").task(noop);
    let wide: Vec<Node<()>> = (0..17)
        .map(|i| g.node(format!("w{i}")).after(w).task(noop))
        .collect();
    let h: Node<()> = g.node("h").task(noop);
    let k: Node<()> = g.node("k").after((b, h)).task(noop);
    let graph = g.build().unwrap();
    let local = run_of(&graph);
    assert!(local.core.is_local());
    let t = Instant::now();
    assert_eq!(local.ready_at(c.index, d.index, t), None, "callbacks ran");
    assert_eq!(
        local.ready_at(f.index, fan[0].index, t),
        Some(t),
        "local: two others pushed on the driver's stack"
    );
    assert_eq!(
        local.ready_at(w.index, wide[0].index, t),
        None,
        "local: sixteen others pushed"
    );
    assert_eq!(
        local.ready_at(a.index, e.index, t),
        Some(t),
        "local: the last end"
    );
    assert_eq!(
        local.ready_at(b.index, k.index, t),
        Some(t),
        "local: the last end"
    );
    let run = RunState::new(
        Arc::clone(&graph.inner),
        (),
        (FailureMode::default(), StartMode::Spread),
        None,
        None,
        None,
        false,
    );
    assert!(!run.core.is_local());
    assert_eq!(run.ready_at(a.index, b.index, t), Some(t), "a chain");
    assert_eq!(run.ready_at(c.index, d.index, t), None, "callbacks ran");
    assert_eq!(
        run.ready_at(a.index, e.index, t),
        None,
        "the other's callbacks"
    );
    assert_eq!(
        run.ready_at(f.index, fan[0].index, t),
        None,
        "others spawned"
    );
    assert_eq!(
        run.ready_at(b.index, k.index, t),
        None,
        "the other's end unknown"
    );
    let later = t + Duration::from_millis(5);
    let slot = run.core.slot(h.index).expect("a slot");
    // SAFETY: the run is not started; this test is the slot's only writer.
    #[allow(unsafe_code)]
    unsafe {
        slot.set_record(Settled::empty(Outcome::Succeeded, later));
    }
    assert_eq!(
        run.ready_at(b.index, k.index, t),
        Some(later),
        "the later end"
    );
}

/// `nodes` nodes with a timeout longer than any test, none after another, that wait by
/// yielding twice.
fn parallel_waiting(nodes: usize) -> Graph<()> {
    let mut g = Graph::<()>::builder();
    for i in 0..nodes {
        let _: Node<()> = g
            .node(format!("n{i}"))
            .timeout(Duration::from_secs(60))
            .task(|_ctx, ()| async {
                tokio::task::yield_now().await;
                tokio::task::yield_now().await;
                Ok::<_, BoxError>(())
            });
    }
    g.build().expect("a valid graph")
}

/// The first attempts of nodes that the run's future polls together are armed on one
/// timer (`first_attempt/shared.rs`): after a run of six such nodes on a current-thread
/// runtime, the graph keeps the box of one timer, where a timer each would leave six, and,
/// there, no timer running (`RunCore::standing_runtime`). A node polled alone uses its
/// driver's own timer: one box after a run of one such node.
#[test]
fn nodes_polled_together_share_one_timer() {
    for nodes in [6, 1] {
        let graph = parallel_waiting(nodes);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        rt.block_on(graph.run(())).expect("the run succeeds");
        let spare = &graph.inner.spare;
        let home = spare.home();
        let boxes = std::iter::from_fn(|| spare.take_timer(home)).count();
        let running = spare.take_standing(home, rt.handle().id());
        assert_eq!((boxes, running.is_some()), (1, false), "{nodes} node(s)");
    }
}

/// On tokio's paused clock, a current-thread runtime whose tasks all wait on something
/// other than a timer moves its clock to the next timer. A run there leaves none running
/// (`RunCore::standing_runtime`): once a run of nodes with long timeouts ended, waiting on
/// a channel that a thread fills a little later takes no time on the paused clock. So
/// whether its nodes waited on the timer they shared (six), on their drivers' own (one),
/// or both (ten).
#[test]
fn a_run_on_a_current_thread_runtime_leaves_no_timer_to_move_the_paused_clock_to() {
    for nodes in [6, 1, 10] {
        leaves_no_timer_to_move_the_paused_clock_to(nodes);
    }
}

fn leaves_no_timer_to_move_the_paused_clock_to(nodes: usize) {
    let graph = parallel_waiting(nodes);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime");
    let waited = rt.block_on(async {
        graph.run(()).await.expect("the run succeeds");
        let (tx, rx) = tokio::sync::oneshot::channel();
        let filler = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            let _ = tx.send(());
        });
        let start = tokio::time::Instant::now();
        rx.await.expect("the thread sends");
        filler.join().expect("the thread ends");
        start.elapsed()
    });
    assert_eq!(
        waited,
        Duration::ZERO,
        "the paused clock stood still ({nodes} nodes)"
    );
}

/// The running timer a run's joined drivers leave (`Spares::keep_standing`) is the next
/// run's, on a runtime of two workers: two nodes polled together, with a timeout, wait
/// twice and end in the first run, which leaves their timer at its cut. The second run,
/// started then, arms its attempts, which never end, on that same timer, whose reach
/// (`deadline::reach`) takes in their cuts: they are cut by their timeout. The timer
/// elapsed then, so the graph keeps its box, with no timer in it, and no other.
#[test]
fn a_later_run_arms_its_attempts_on_the_timer_an_earlier_run_left() {
    let calls = Arc::new(AtomicU32::new(0));
    let mut g = Graph::<()>::builder();
    let nodes: Vec<Node<u32>> = (0..2)
        .map(|i| {
            let calls = Arc::clone(&calls);
            g.node(format!("n{i}"))
                .timeout(Duration::from_millis(640))
                .fallback(crate::Fallback::value(0u32))
                .task(move |_ctx, ()| {
                    let first_run = calls.fetch_add(1, Ordering::SeqCst) < 2;
                    async move {
                        tokio::task::yield_now().await;
                        tokio::task::yield_now().await;
                        if !first_run {
                            std::future::pending::<()>().await;
                        }
                        Ok::<_, BoxError>(1u32)
                    }
                })
        })
        .collect();
    let graph = g.build().expect("a valid graph");
    let rt = two_workers();
    let spare = &graph.inner.spare;
    let (home, id) = (spare.home(), rt.handle().id());
    let run = || {
        rt.block_on(rt.spawn(graph.run(())))
            .expect("the run's task")
            .expect("the run succeeds")
    };
    let before = tokio::time::Instant::now();
    let _ = run();
    let after = tokio::time::Instant::now();
    let timer = spare.take_standing(home, id).expect("a running timer kept");
    let at = timer.get().map(tokio::time::Sleep::deadline).expect("set");
    let timeout = Duration::from_millis(640);
    assert!(before + timeout <= at && at <= after + timeout, "its cut");
    spare.keep_standing(home, Some(id), timer);
    let report = run();
    for node in nodes {
        let node = report.node(node).expect("a node");
        assert_eq!(node.outcome(), crate::Outcome::Recovered);
        let log: Vec<_> = node
            .attempt_log()
            .iter()
            .map(|a| {
                let timed_out = a.error.as_deref().is_some_and(|e| e.contains("timed out"));
                (a.end - a.start >= timeout, timed_out)
            })
            .collect();
        assert_eq!(log, [(true, true)], "cut by its timeout");
    }
    assert!(
        spare.take_standing(home, id).is_none(),
        "taken, and elapsed"
    );
    let boxes = std::iter::from_fn(|| spare.take_timer(home)).count();
    assert_eq!(boxes, 1, "one timer for both runs");
}

/// The timer that nodes polled together share stands for the run's timer floor
/// (`RunCore::floor_timers`): on two workers, a run of six such nodes, awaited in a task,
/// makes no floor, where a run of one node, on its own timer, makes one.
#[test]
fn nodes_on_the_shared_timer_make_no_timer_floor() {
    for (nodes, floored) in [(6, false), (1, true)] {
        let graph = parallel_waiting(nodes);
        let rt = two_workers();
        let run = graph.run(());
        let state = Arc::clone(&run.state);
        rt.block_on(rt.spawn(run))
            .expect("the run's task")
            .expect("the run succeeds");
        assert_eq!(
            state.core.timer_floor().is_some(),
            floored,
            "{nodes} node(s)"
        );
    }
}

/// What the roots of the test below share: how many of them wait, how many polls
/// the run's future made of them, and the waker one left.
#[derive(Default)]
struct Leaving {
    waiting: AtomicU32,
    polls: AtomicU32,
    waker: std::sync::Mutex<Option<Waker>>,
}

/// Root `.0`, which ends at once unless it is among the first `waiting`: then it
/// returns `Pending` twice, waking itself; the second time, when the run's future polls
/// it, it counts its poll, and the 80th such poll of the test leaves a clone of its waker,
/// as a socket it registered with would keep it.
struct LeaveWaker(u32, u8, Arc<Leaving>);

impl std::future::Future for LeaveWaker {
    type Output = Result<(), BoxError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        if self.1 == 2 || self.0 >= self.2.waiting.load(Ordering::Relaxed) {
            return std::task::Poll::Ready(Ok(()));
        }
        self.1 += 1;
        if self.1 == 2 && self.2.polls.fetch_add(1, Ordering::Relaxed) == 79 {
            *self.2.waker.lock().unwrap() = Some(cx.waker().clone());
        }
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

/// A graph of `roots` roots, root `i` running `LeaveWaker(i, 0, shared)`.
fn leaving_roots(roots: u32, shared: &Arc<Leaving>) -> Graph<()> {
    let mut g = Graph::<()>::builder();
    for i in 0..roots {
        let shared = Arc::clone(shared);
        let _: Node<()> = g
            .node(format!("root {i}"))
            .task(move |_ctx, ()| LeaveWaker(i, 0, Arc::clone(&shared)));
    }
    g.build().expect("a valid graph")
}

/// A run of 80 waiting roots has 72 places in its set, of which it leaves at most
/// 32; the last root its set polled, at place 71, past them, leaves its waker elsewhere.
/// That waker holds the run's waker: the run leaves neither, and its late wake-up, before
/// the next run (of 20 waiting roots, 12 places), reaches no place or waker of that run,
/// which runs every node.
#[test]
fn a_late_wake_up_of_a_place_past_those_kept_reaches_no_later_run() {
    let shared: Arc<Leaving> = Arc::default();
    shared.waiting.store(80, Ordering::Relaxed);
    let graph = leaving_roots(80, &shared);
    drop(run_on(&graph, 1));
    let late = shared
        .waker
        .lock()
        .unwrap()
        .take()
        .expect("a root left its waker");
    late.wake_by_ref();
    shared.waiting.store(20, Ordering::Relaxed);
    let (second, report) = run_and_report(&graph, 1);
    assert_eq!(succeeded(&report), 80, "every node ran");
    drop((second, report));
    late.wake();
}

/// A run whose waker came with places, and which needs no set (two roots wait),
/// passes them on with its waker.
#[test]
fn a_run_that_makes_no_set_passes_on_the_places_its_waker_came_with() {
    let shared: Arc<Leaving> = Arc::default();
    shared.polls.store(1000, Ordering::Relaxed);
    shared.waiting.store(10, Ordering::Relaxed);
    let graph = leaving_roots(10, &shared);
    let spare = &graph.inner.spare;
    let home = spare.home();
    drop(run_on(&graph, 1));
    shared.waiting.store(2, Ordering::Relaxed);
    drop(run_on(&graph, 1));
    let woken = spare.take_waker(home).expect("the waker is kept");
    assert_eq!(woken.places(), 2, "with the places it came with");
    assert!(woken.is_unused());
}
