//! The scheduler's fast path for nodes with policies: a first attempt that succeeds, on its
//! first poll or after waiting within its cut, ends the node there; a first attempt that
//! fails, panics or is cut is handed to the full path with its breaker permit, and the
//! series goes on exactly as if the full path had started it.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::time::{advance, sleep};

use crate::{
    BoxError, CircuitBreaker, Fallback, Graph, Node, NodeError, Outcome, Report, Retry,
    breaker::BreakerState, report::AttemptReport,
};

use crate::util::ms;

fn breaker(threshold: u32) -> CircuitBreaker {
    CircuitBreaker::builder("stock")
        .consecutive_failures(threshold)
        .open_duration(ms(100))
        .build()
        .unwrap()
}

/// A breaker with threshold 1, tripped by one failure, its cooldown over: the next call
/// probes. Options that run the graph's nodes in tasks of the run's own.
fn spread() -> crate::RunOptions {
    crate::RunOptions::new().start_mode(crate::run::StartMode::Spread)
}

async fn half_open() -> CircuitBreaker {
    let b = breaker(1);
    b.try_acquire().unwrap().failure(ms(1));
    advance(ms(100)).await;
    b
}

/// Every policy configured, none triggered: one attempt, `Succeeded`, no attempt log, and
/// the breaker was told of one success. A later failure alone does not trip a threshold of
/// two.
#[tokio::test(start_paused = true)]
async fn idle_policies_succeed_in_one_attempt_and_tell_the_breaker() {
    let b = breaker(2);
    let mut g = Graph::<()>::builder();
    let stock = g
        .node("stock")
        .timeout(ms(50))
        .retry(Retry::new(3))
        .budget(ms(500))
        .breaker(&b)
        .fallback(Fallback::value(0u32))
        .task(|_ctx, ()| async { Ok::<_, BoxError>(7u32) });
    let report = g.build().unwrap().run(()).await.unwrap();
    let node = report.node(stock).unwrap();
    assert_eq!(node.outcome(), Outcome::Succeeded);
    assert_eq!(report.get(stock), Some(&7));
    assert_eq!(node.attempts(), 1);
    assert!(node.attempt_log().is_empty());
    assert!(node.error().is_none());
    b.try_acquire().unwrap().failure(ms(1));
    assert_eq!(b.state(), BreakerState::Closed);
}

/// A first attempt that waits, on a timer here as it would on I/O, and succeeds within its
/// timeout ends the node on the fast path exactly as the full path would. One attempt, no
/// log, its start and end where the wait put them, and the breaker told of one success. A
/// later failure alone does not trip a threshold of two; a permit dropped uncounted would
/// leave the first failure standing, and a second would trip it.
#[tokio::test(start_paused = true)]
async fn a_first_attempt_that_waits_and_succeeds_tells_the_breaker() {
    let b = breaker(2);
    b.try_acquire().unwrap().failure(ms(1));
    let mut g = Graph::<()>::builder();
    let stock = g
        .node("stock")
        .timeout(ms(50))
        .retry(Retry::new(3))
        .breaker(&b)
        .task(|_ctx, ()| async {
            sleep(ms(30)).await;
            Ok::<_, BoxError>(7u32)
        });
    let report = g.build().unwrap().run(()).await.unwrap();
    let node = report.node(stock).unwrap();
    assert_eq!(node.outcome(), Outcome::Succeeded);
    assert_eq!(report.get(stock), Some(&7));
    assert_eq!(node.attempts(), 1);
    assert!(node.attempt_log().is_empty());
    assert_eq!(node.duration(), ms(30));
    b.try_acquire().unwrap().failure(ms(1));
    assert_eq!(
        b.state(),
        BreakerState::Closed,
        "the success reset the count"
    );
}

/// A first attempt that fails at once is retried by the full path; the series' single
/// result goes to the breaker.
#[tokio::test(start_paused = true)]
async fn a_first_attempt_that_fails_at_once_is_retried() {
    let b = breaker(1);
    let calls = Arc::new(AtomicU32::new(0));
    let c = Arc::clone(&calls);
    let mut g = Graph::<()>::builder();
    let stock = g
        .node("stock")
        .retry(Retry::new(3))
        .breaker(&b)
        .task(move |_ctx, ()| {
            let n = c.fetch_add(1, Ordering::SeqCst);
            async move {
                if n == 0 {
                    Err::<u32, BoxError>("flaky".into())
                } else {
                    Ok(7)
                }
            }
        });
    let report = g.build().unwrap().run(()).await.unwrap();
    let node = report.node(stock).unwrap();
    assert_eq!(node.outcome(), Outcome::Succeeded);
    assert_eq!(node.attempts(), 2);
    assert_eq!(node.attempt_log().len(), 2);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the first attempt ran once"
    );
    assert_eq!(b.state(), BreakerState::Closed, "one series, one success");
}

/// A first attempt that is still running is cut by its timeout in the full path, retried,
/// and, every attempt timing out, recovered by the fallback; the breaker, with threshold 1,
/// opens on the series' failure.
#[tokio::test(start_paused = true)]
async fn a_running_first_attempt_is_cut_retried_and_recovered() {
    let b = breaker(1);
    let mut g = Graph::<()>::builder();
    let stock = g
        .node("stock")
        .timeout(ms(10))
        .retry(Retry::new(2))
        .breaker(&b)
        .fallback(Fallback::value(0u32))
        .task(|_ctx, ()| async {
            sleep(ms(1_000)).await;
            Ok::<_, BoxError>(7u32)
        });
    let report = g.build().unwrap().run(()).await.unwrap();
    let node = report.node(stock).unwrap();
    assert_eq!(node.outcome(), Outcome::Recovered);
    assert_eq!(report.get(stock), Some(&0));
    assert_eq!(node.attempts(), 2);
    assert!(
        node.attempt_log()
            .iter()
            .all(|a| a.error.as_deref().is_some_and(|e| e.contains("timed out"))),
        "{:?}",
        node.attempt_log()
    );
    assert!(matches!(node.error(), Some(NodeError::GaveUp { .. })));
    assert_eq!(b.state(), BreakerState::Open);
}

/// A half-open probe taken by the fast path and handed over with a still-running attempt
/// is given back when the run is cancelled: the next caller may probe. Inline, the attempt
/// is dropped with the run's future; spread, by its driver's task once it is woken.
#[tokio::test(start_paused = true)]
async fn a_handed_over_probe_is_given_back_when_the_run_is_cancelled() {
    for mode in [crate::run::StartMode::Inline, crate::run::StartMode::Spread] {
        probe_given_back_when_cancelled(mode).await;
    }
}

async fn probe_given_back_when_cancelled(mode: crate::run::StartMode) {
    let b = half_open().await;
    let mut g = Graph::<()>::builder();
    let _ = g.node("stock").breaker(&b).task(|_ctx, ()| async {
        sleep(ms(1_000)).await;
        Ok::<_, BoxError>(7u32)
    });
    let graph = g.build().unwrap();
    let run = graph.run_with((), crate::RunOptions::new().start_mode(mode));
    tokio::select! {
        _ = run => panic!("the attempt sleeps for a second"),
        () = sleep(ms(20)) => {} // dropping the run cancels it
    }
    if mode == crate::run::StartMode::Spread {
        assert!(
            b.try_acquire().is_err(),
            "the probe is out while the attempt runs"
        );
        sleep(ms(1)).await; // the cancelled run's driver drops the attempt and the permit
    }
    assert_eq!(b.state(), BreakerState::HalfOpen);
    let probe = b.try_acquire().expect("the probe's slot was given back");
    assert!(probe.is_probe());
    probe.success(ms(1));
    assert_eq!(b.state(), BreakerState::Closed);
}

/// A policy node whose first attempt is running when the run is cancelled, here by the task
/// itself during its first poll, did start: its report has a start, like a node without
/// policies.
#[tokio::test(start_paused = true)]
async fn a_node_cancelled_during_its_first_attempt_has_started() {
    let slot: Arc<std::sync::OnceLock<crate::run::RunCanceller>> = Arc::default();
    let s = Arc::clone(&slot);
    let mut g = Graph::<()>::builder();
    let n = g.node("n").timeout(ms(1_000)).task(move |_ctx, ()| {
        let s = Arc::clone(&s);
        async move {
            if let Some(c) = s.get() {
                c.cancel();
            }
            sleep(ms(500)).await;
            Ok::<_, BoxError>(1u32)
        }
    });
    let graph = g.build().unwrap();
    let run = graph.run(());
    let _ = slot.set(run.canceller());
    let report = run.await.unwrap_err().into_report().unwrap();
    let node = report.node(n).unwrap();
    assert_eq!(node.outcome(), Outcome::Cancelled);
    assert_eq!(node.attempts(), 1);
    assert!(
        node.start().is_some(),
        "the attempt ran, so the node started"
    );
}

/// A node whose only policy is its timeout, in a run with a deadline: the first attempt's
/// cut is the earlier of the two, also as its task sees it. `Ctx::deadline` computes the
/// timeout's cut only when the run has no deadline. A run deadline too close to leave the
/// minimum attempt time of 10 ms fails the node before its task is called.
#[tokio::test(start_paused = true)]
async fn a_run_deadline_earlier_than_the_timeout_is_the_first_attempt_s_cut() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    let mut g = Graph::<()>::builder();
    let n = g.node("n").timeout(ms(100)).task(move |ctx, ()| {
        let start = tokio::time::Instant::now();
        s.lock()
            .unwrap()
            .push((ctx.deadline().map(|d| d - start), ctx.remaining()));
        async { Ok::<_, BoxError>(1u32) }
    });
    let graph = g.build().unwrap();
    let options = |t| crate::RunOptions::new().timeout(t);
    let report = graph.run_with((), options(ms(30))).await.unwrap();
    assert_eq!(report.node(n).unwrap().outcome(), Outcome::Succeeded);
    assert_eq!(*seen.lock().unwrap(), [(Some(ms(30)), Some(ms(30)))]);
    let report = graph.run_with((), options(ms(5))).await;
    let report = report.unwrap_or_else(|e| e.into_report().unwrap());
    let r = report.node(n).unwrap();
    assert_eq!((r.outcome(), r.attempts()), (Outcome::Failed, 0), "{r:?}");
    assert_eq!(seen.lock().unwrap().len(), 1, "the task was not called");
}

/// Policies without a budget, the fast path's shortest form, where the attempt's cut is its
/// timeout alone. The task sees that cut as its deadline, a first attempt still running at
/// the timeout is cut, exactly then, and retried, and the breaker hears one success for the
/// series.
#[tokio::test(start_paused = true)]
async fn without_a_budget_the_first_attempt_is_cut_by_its_timeout() {
    let b = breaker(1);
    let calls = Arc::new(AtomicU32::new(0));
    let c = Arc::clone(&calls);
    let mut g = Graph::<()>::builder();
    let stock = g
        .node("stock")
        .timeout(ms(50))
        .retry(Retry::new(3))
        .breaker(&b)
        .task(move |ctx, ()| {
            let n = c.fetch_add(1, Ordering::SeqCst);
            let left = ctx.remaining();
            async move {
                assert_eq!(left, Some(ms(50)), "attempt {n}: the cut is the timeout");
                if n == 0 {
                    sleep(ms(80)).await;
                }
                Ok::<_, BoxError>(7u32)
            }
        });
    let report = g.build().unwrap().run(()).await.unwrap();
    let node = report.node(stock).unwrap();
    assert_eq!(node.outcome(), Outcome::Succeeded);
    assert_eq!(node.attempts(), 2);
    assert!(
        node.attempt_log()[0]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("timed out")),
        "{:?}",
        node.attempt_log()
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // Cut exactly at the timeout, counted from the node's start, by the fast path's timer
    // made at the attempt's first wait; then the backoff, then a second attempt that ends
    // at once.
    let log = node.attempt_log();
    assert_eq!(log[0].end - log[0].start, ms(50), "{log:?}");
    assert_eq!(node.duration(), ms(50) + log[1].delay_before, "{log:?}");
    assert_eq!(b.state(), BreakerState::Closed, "one series, one success");
    b.try_acquire().unwrap().failure(ms(1));
    assert_eq!(
        b.state(),
        BreakerState::Open,
        "threshold 1: the series did not count as a failure"
    );
}

type Attempt = std::pin::Pin<Box<dyn Future<Output = Result<u32, BoxError>> + Send>>;

/// A task whose first attempt yields once, then sleeps `d`, its polls counted in `polls`;
/// its later attempts end at once.
fn counted<U>(
    d: Duration,
    polls: &Arc<AtomicU32>,
) -> impl Fn(crate::Ctx<()>, U) -> Attempt + Clone + use<U> {
    let calls = Arc::new(AtomicU32::new(0));
    let polls = Arc::clone(polls);
    move |_ctx, _up| {
        let n = calls.fetch_add(1, Ordering::SeqCst);
        let polls = Arc::clone(&polls);
        let mut wait = Box::pin(async move {
            tokio::task::yield_now().await;
            sleep(d).await;
        });
        Box::pin(std::future::poll_fn(move |cx| {
            if n > 0 {
                return std::task::Poll::Ready(Ok(n));
            }
            polls.fetch_add(1, Ordering::SeqCst);
            wait.as_mut().poll(cx).map(|()| Ok(n))
        }))
    }
}

/// Node `node` succeeded at its first attempt, which took `took`.
fn assert_succeeded_at_once<T>(report: &Report, node: Node<T>, took: Duration) {
    let r = report.node(node).unwrap();
    assert_eq!(r.outcome(), Outcome::Succeeded, "{r:?}");
    assert_eq!((r.attempts(), r.duration()), (1, took), "{r:?}");
}

/// Node `node`'s first attempt was cut by its timeout `after` its start, and its second
/// succeeded; the first attempt's record.
fn assert_cut_then_recovered<T>(report: &Report, node: Node<T>, after: Duration) -> AttemptReport {
    let r = report.node(node).unwrap();
    let attempts = (r.outcome(), r.attempts());
    assert_eq!(attempts, (Outcome::Succeeded, 2), "{r:?}");
    let first = r.attempt_log()[0].clone();
    let error = first.error.as_deref().unwrap_or_default();
    assert!(error.contains("timed out"), "{first:?}");
    assert_eq!(first.end - first.start, after, "{first:?}");
    first
}

/// One driver runs a chain of policy nodes whose first attempts wait, and keeps one timer
/// for their cuts: each attempt is cut at its own cut, and goes to the policy path then and
/// never before. The policy path polls an attempt it takes over once more, so poll counts
/// show a hand-over too early, which outcomes cannot: the policy path would still cut the
/// attempt at its own cut. `b`'s cut is earlier than `a`'s, so the timer is moved back,
/// since `a`'s instant would let `b` run on and succeed; it cuts `b` at exactly 50 ms. `u`
/// has no timeout and must not look at the timer `b`'s cut left elapsed. `x` waits after
/// it, so the timer is registered again. `c`'s cut is later than `x`'s by more than 1/64
/// of `c`'s time, so `c` gets a timer at its own cut.
#[tokio::test(start_paused = true)]
async fn one_driver_cuts_each_waiting_attempt_at_its_own_cut() {
    let polls: [Arc<AtomicU32>; 5] = std::array::from_fn(|_| Arc::new(AtomicU32::new(0)));
    let [pa, pb, pu, px, pc] = &polls;
    let mut g = Graph::<()>::builder();
    let retry = || Retry::new(2);
    let a = g.node("a").timeout(ms(100)).retry(retry());
    let a = a.task(counted(ms(10), pa));
    let b = g.node("b").after(a).timeout(ms(50)).retry(retry());
    let b = b.task(counted(ms(80), pb));
    let u = g.node("u").after(b).breaker(breaker(1));
    let u = u.task(counted(ms(300), pu));
    let x = g.node("x").after(u).timeout(ms(2_000)).retry(retry());
    let x = x.task(counted(ms(1_500), px));
    let c = g.node("c").after(x).timeout(ms(1_000)).retry(retry());
    let c = c.task(counted(ms(100), pc));
    // Spread: in a task of its own, the driver is polled only when woken. Inline, a node
    // the run's future takes in is polled once more at once, which these counts would show.
    let report = g.build().unwrap().run_with((), spread()).await.unwrap();
    for (node, took) in [(a, ms(10)), (u, ms(300)), (x, ms(1_500)), (c, ms(100))] {
        assert_succeeded_at_once(&report, node, took);
    }
    assert_cut_then_recovered(&report, b, ms(50));
    // Yield, sleep, end: three polls each; `b`'s third is at its cut, and the policy path's
    // one more is the fourth.
    let polls = polls.each_ref().map(|p| p.load(Ordering::SeqCst));
    assert_eq!(polls, [3, 4, 3, 3, 3], "polls of a b u x c");
}

/// The driver's timer, left at an ended attempt's cut in the last 1/64 of a later
/// attempt's time, wakes it before that attempt's cut: the attempt is not cut then, the
/// timer moves to its cut, and it is cut there. A cut earlier still is not left: the
/// attempt gets a timer at its own. `a`, `d` and `e` have a 1 s timeout each and run in one
/// driver. `a` ends at 10 ms, with its cut at 1 000. `d`, started at 10 with its cut at
/// 1 010, finds the timer 10 ms before its cut, less than 1/64 of its second: left there,
/// it wakes `d` at 1 000, polled once more for nothing, and `d` succeeds at 1 005. `e`,
/// started at 1 005 with its cut at 2 005, finds the timer at `d`'s cut, 995 ms before its
/// own: it gets a timer at its cut, is not woken at 1 010, and is cut at exactly 2 005,
/// 1 s after its start. `f`, started after `e`'s second attempt, finds the timer elapsed
/// at `e`'s cut, and is cut 1 s after its start.
#[tokio::test(start_paused = true)]
async fn a_timer_left_at_a_near_earlier_cut_moves_to_the_attempt_s_own_when_it_fires() {
    let polls: [Arc<AtomicU32>; 3] = std::array::from_fn(|_| Arc::new(AtomicU32::new(0)));
    let [pa, pd, pe] = &polls;
    let mut g = Graph::<()>::builder();
    let (t, retry) = (ms(1_000), || Retry::new(2));
    let a = g.node("a").timeout(t).retry(retry());
    let a = a.task(counted(ms(10), pa));
    let d = g.node("d").after(a).timeout(t).retry(retry());
    let d = d.task(counted(ms(995), pd));
    let e = g.node("e").after(d).timeout(t).retry(retry());
    let e = e.task(counted(ms(10_000), pe));
    // Its first attempt sleeps at its first poll: no wake-up of its own comes before the
    // timer, elapsed at `e`'s cut, is set for its cut.
    let calls = Arc::new(AtomicU32::new(0));
    let f = g.node("f").after(e).timeout(t).retry(retry());
    let f = f.task(move |_ctx, _e: Arc<u32>| {
        let n = calls.fetch_add(1, Ordering::SeqCst);
        async move {
            if n == 0 {
                sleep(ms(10_000)).await;
            }
            Ok::<_, BoxError>(n)
        }
    });
    let report = g.build().unwrap().run_with((), spread()).await.unwrap();
    for (node, took) in [(a, ms(10)), (d, ms(995))] {
        assert_succeeded_at_once(&report, node, took);
    }
    let first = assert_cut_then_recovered(&report, e, t);
    assert_eq!(first.start, report.node(d).unwrap().end(), "{first:?}");
    assert_cut_then_recovered(&report, f, t);
    // `d`: yield, sleep, the early wake-up, end. `e`: yield, sleep, the cut, the policy
    // path's one more; no early wake-up.
    let polls = polls.each_ref().map(|p| p.load(Ordering::SeqCst));
    assert_eq!(polls, [3, 4, 4], "polls of a d e");
}

/// Spends the task's coop budget: the next tokio resource the task polls returns `Pending`
/// without registering its waker, and wakes the task to poll it again.
async fn spend_coop_budget() {
    while tokio::task::coop::has_budget_remaining() {
        tokio::task::coop::consume_budget().await;
    }
}

/// A task whose first attempt runs `first` and then waits for a reply that never comes;
/// its later attempts end at once.
fn hangs_after<U, F>(
    first: impl Fn() -> F + Send + Sync + 'static,
) -> impl Fn(crate::Ctx<()>, U) -> Attempt
where
    F: Future<Output = ()> + Send + 'static,
{
    let calls = Arc::new(AtomicU32::new(0));
    move |_ctx, _up| {
        let n = calls.fetch_add(1, Ordering::SeqCst);
        let first = (n == 0).then(&first);
        Box::pin(async move {
            if let Some(first) = first {
                first.await;
                std::future::pending::<()>().await;
            }
            Ok(n)
        })
    }
}

/// A poll of the driver's timer that finds the task's coop budget spent registers nothing
/// with tokio's timer. The timer is polled again at the attempt's next wait, so the cut
/// comes, also when the timer was just moved there after waking the driver early. `a`, cut
/// at 1 000 ms, ends at 10. `d`, started at 10 with its cut at 1 010, is woken at 1 000 by
/// the timer left at `a`'s cut, spends the budget, and waits: it is cut at 1 010. `b` finds
/// the timer elapsed, spends the budget before its timer's first poll, and waits: it is
/// cut 1 s after its start. Each yields first: on this one-thread runtime, the first wait of a
/// node started in the run's own future moves it to a driver task, without looking at a
/// timer.
#[tokio::test(start_paused = true)]
async fn a_timer_poll_that_finds_the_coop_budget_spent_is_made_again() {
    let mut g = Graph::<()>::builder();
    let (t, retry) = (ms(1_000), || Retry::new(2));
    let a = g.node("a").timeout(t).retry(retry());
    let a = a.task(counted(ms(10), &Arc::default()));
    let d = g.node("d").after(a).timeout(t).retry(retry());
    let d = d.task(hangs_after(|| async {
        tokio::task::yield_now().await;
        sleep(ms(990)).await;
        spend_coop_budget().await;
    }));
    let b = g.node("b").after(d).timeout(t).retry(retry());
    let b = b.task(hangs_after(|| async {
        tokio::task::yield_now().await;
        spend_coop_budget().await;
    }));
    let run = g.build().unwrap().run(());
    let report = tokio::time::timeout(ms(60_000), run)
        .await
        .expect("a cut never came");
    let report = report.unwrap();
    let first = assert_cut_then_recovered(&report, d, t);
    assert_eq!(first.start, ms(10), "{first:?}");
    assert_cut_then_recovered(&report, b, t);
}

/// An attempt that spends the whole coop budget at every poll, and wakes its task to be
/// polled again, is still cut: the driver polls its timer outside the budget, as tokio's
/// `Timeout` polls its delay. The clock moves by hand, 1 ms at a time. The busy attempt
/// keeps the runtime from ever idling, which is when a paused clock moves by itself.
#[tokio::test(start_paused = true)]
async fn an_attempt_that_spends_the_coop_budget_at_every_poll_is_cut() {
    let mut g = Graph::<()>::builder();
    let busy = g.node("busy").timeout(ms(100)).retry(Retry::new(2));
    let busy = busy.task(hangs_after(|| async {
        loop {
            tokio::task::yield_now().await;
            spend_coop_budget().await;
        }
    }));
    let graph = g.build().unwrap();
    let run = graph.run(());
    tokio::pin!(run);
    for _ in 0..1_000 {
        tokio::select! {
            biased;
            report = &mut run => {
                assert_cut_then_recovered(&report.unwrap(), busy, ms(100));
                return;
            }
            () = tokio::task::yield_now() => tokio::time::advance(ms(1)).await,
        }
    }
    panic!("not cut in 1 s");
}

/// A half-open probe taken by the fast path for an attempt that succeeds at once closes
/// the breaker.
#[tokio::test(start_paused = true)]
async fn a_probe_that_succeeds_at_once_closes_the_breaker() {
    let b = half_open().await;
    let mut g = Graph::<()>::builder();
    let stock = g
        .node("stock")
        .timeout(ms(50))
        .breaker(&b)
        .task(|_ctx, ()| async { Ok::<_, BoxError>(7u32) });
    let report = g.build().unwrap().run(()).await.unwrap();
    assert_eq!(report.node(stock).unwrap().outcome(), Outcome::Succeeded);
    assert_eq!(b.state(), BreakerState::Closed);
}

/// A half-open breaker is asked by the onion, not by the fast path, which takes closed
/// breakers only. Its probe is given back when the run is cancelled as the task is called,
/// here by the task itself: the next caller may probe.
#[tokio::test(start_paused = true)]
async fn a_probe_is_given_back_when_the_run_is_cancelled_as_its_task_is_called() {
    let b = half_open().await;
    let slot: Arc<std::sync::OnceLock<crate::run::RunCanceller>> = Arc::default();
    let s = Arc::clone(&slot);
    let mut g = Graph::<()>::builder();
    let stock = g.node("stock").breaker(&b).task(move |_ctx, ()| {
        if let Some(c) = s.get() {
            c.cancel();
        }
        async {
            sleep(ms(1_000)).await;
            Ok::<_, BoxError>(7u32)
        }
    });
    let graph = g.build().unwrap();
    let run = graph.run(());
    let _ = slot.set(run.canceller());
    let report = run.await.unwrap_err().into_report().unwrap();
    assert_eq!(report.node(stock).unwrap().outcome(), Outcome::Cancelled);
    assert_eq!(b.state(), BreakerState::HalfOpen, "nothing was reported");
    let probe = b.try_acquire().expect("the probe's slot was given back");
    assert!(probe.is_probe());
}

/// A run on a runtime with several workers registers a timer at its first waiting policy
/// attempt's cut, and keeps it until the run is dropped, with its report. That timer
/// outlives the runtime harmlessly: the report is read and dropped after the runtime has
/// shut down, on a thread outside it. The task waits by yielding, so no clock is involved.
#[test]
fn a_report_outlives_the_runtime_of_its_waiting_policy_nodes() {
    let rt = super::common::two_workers();
    let mut g = Graph::<()>::builder();
    let stock = g.node("stock").timeout(ms(60_000)).task(|_ctx, ()| async {
        tokio::task::yield_now().await;
        Ok::<_, BoxError>(7u32)
    });
    let graph = g.build().unwrap();
    let report = rt.block_on(graph.run(())).unwrap();
    drop(rt);
    assert_eq!(report.get(stock), Some(&7));
    assert_eq!(report.node(stock).unwrap().outcome(), Outcome::Succeeded);
    drop(report);
    drop(graph);
}

/// The same on the policy path: the first attempt fails at once, and the retry, run by the
/// onion under its timeout, waits; the timer floor is then set there.
#[test]
fn a_report_outlives_the_runtime_of_its_retried_waiting_nodes() {
    let rt = super::common::two_workers();
    let calls = Arc::new(AtomicU32::new(0));
    let c = Arc::clone(&calls);
    let mut g = Graph::<()>::builder();
    let stock = g
        .node("stock")
        .timeout(ms(60_000))
        .retry(Retry::new(2).backoff(crate::Backoff::constant(Duration::ZERO)))
        .task(move |_ctx, ()| {
            let first = c.fetch_add(1, Ordering::SeqCst) == 0;
            async move {
                if first {
                    return Err::<u32, BoxError>("refused".into());
                }
                tokio::task::yield_now().await;
                Ok(7u32)
            }
        });
    let graph = g.build().unwrap();
    let report = rt.block_on(graph.run(())).unwrap();
    drop(rt);
    assert_eq!(report.get(stock), Some(&7));
    assert_eq!(report.node(stock).unwrap().attempts(), 2);
    drop(report);
    drop(graph);
}

/// On a runtime built without timers, a run whose policies need them is refused with
/// `RunError::NoTimers` before any task runs. No attempt starts, and its breakers are left
/// as they were: a half-open breaker keeps its probe, a closed one its count. One worker
/// and two.
#[test]
fn a_run_that_needs_timers_is_refused_on_a_runtime_without_them() {
    for workers in [1, 2] {
        let rt = match workers {
            1 => tokio::runtime::Builder::new_current_thread().build(),
            _ => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers)
                .build(),
        }
        .unwrap();
        // Half-open by hand: no clock to advance here. A breaker that opens for nothing
        // lets the next call probe at once.
        let b = CircuitBreaker::builder("stock")
            .consecutive_failures(1)
            .open_duration(Duration::ZERO)
            .build()
            .unwrap();
        b.try_acquire().unwrap().failure(ms(1));
        let mut g = Graph::<()>::builder();
        let stock = g
            .node("stock")
            .timeout(ms(60_000))
            .breaker(&b)
            .task(|_ctx, ()| async {
                tokio::task::yield_now().await;
                tokio::task::yield_now().await;
                Ok::<_, BoxError>(7u32)
            });
        // A closed breaker one failure from opening: the panic must not count as one.
        let closed = CircuitBreaker::builder("price")
            .consecutive_failures(2)
            .build()
            .unwrap();
        closed.try_acquire().unwrap().failure(ms(1));
        let price = g
            .node("price")
            .timeout(ms(60_000))
            .breaker(&closed)
            .task(|_ctx, ()| async {
                tokio::task::yield_now().await;
                tokio::task::yield_now().await;
                Ok::<_, BoxError>(3u32)
            });
        let other = g.node("other").task(|_ctx, ()| async {
            tokio::task::yield_now().await;
            Ok::<_, BoxError>(2u32)
        });
        let graph = g.build().unwrap();
        let error = rt.block_on(graph.run(())).unwrap_err();
        assert!(
            matches!(error, crate::RunError::NoTimers),
            "{workers} worker(s): {error}"
        );
        assert!(error.to_string().contains("enable_time"), "{error}");
        let _ = (stock, price, other);
        assert_eq!(closed.state(), BreakerState::Closed, "untouched");
        let probe = b.try_acquire().expect("the probe is still free");
        assert!(probe.is_probe());
    }
}

/// Whether `attempt` ended by its timeout.
pub(super) fn timed_out(attempt: &AttemptReport) -> bool {
    attempt
        .error
        .as_deref()
        .is_some_and(|e| e.contains("timed out"))
}

/// An attempt woken many times before its cut, by timers of its own, is cut at its
/// timeout: its timer, registered at the first wait and not polled again with the same
/// waker, is found elapsed. The retry, which the full path runs, is cut the same way.
/// Inline and spread.
#[tokio::test(start_paused = true)]
async fn an_attempt_woken_many_times_is_cut_at_its_timeout() {
    for options in [crate::RunOptions::new(), spread()] {
        let mut g = Graph::<()>::builder();
        let stock = g
            .node("stock")
            .timeout(ms(50))
            .retry(Retry::new(2))
            .fallback(Fallback::value(0u32))
            .task(|_ctx, ()| async {
                loop {
                    sleep(ms(7)).await;
                }
                #[allow(unreachable_code)]
                Ok::<_, BoxError>(7u32)
            });
        let run = g.build().unwrap().run_with((), options);
        let report = tokio::time::timeout(ms(10_000), run)
            .await
            .expect("the attempts are cut")
            .unwrap();
        let node = report.node(stock).unwrap();
        assert_eq!(node.outcome(), Outcome::Recovered);
        assert_eq!(node.attempts(), 2);
        for attempt in node.attempt_log() {
            assert_eq!(attempt.end - attempt.start, ms(50), "{attempt:?}");
            assert!(timed_out(attempt), "{attempt:?}");
        }
    }
}

/// On the real clock and two workers, attempts that wake themselves again and again, by
/// yielding or by sleeping a few milliseconds, are cut, inline and spread: more nodes than
/// the run polls together, so that some are polled with the run's waker and the others
/// with wakers of their own. Outcomes only: every attempt timed out, none before its
/// timeout.
#[test]
fn attempts_woken_again_and_again_are_cut_on_two_workers() {
    let rt = super::common::two_workers();
    for round in 0..6 {
        let options = if round % 2 == 0 {
            crate::RunOptions::new()
        } else {
            spread()
        };
        let mut g = Graph::<()>::builder();
        let nodes: Vec<Node<u32>> = (0..20_u32)
            .map(|i| {
                g.node(format!("n{i}"))
                    .timeout(ms(30))
                    .retry(Retry::new(2))
                    .fallback(Fallback::value(0u32))
                    .task(move |_ctx, ()| async move {
                        loop {
                            if i % 2 == 0 {
                                tokio::task::yield_now().await;
                            } else {
                                sleep(ms(3)).await;
                            }
                        }
                        #[allow(unreachable_code)]
                        Ok::<_, BoxError>(7u32)
                    })
            })
            .collect();
        let run = g.build().unwrap().run_with((), options);
        let report = rt
            .block_on(async { tokio::time::timeout(ms(10_000), run).await })
            .expect("the attempts are cut")
            .unwrap();
        for node in nodes {
            let node = report.node(node).unwrap();
            assert_eq!((node.outcome(), node.attempts()), (Outcome::Recovered, 2));
            for attempt in node.attempt_log() {
                assert!(attempt.end - attempt.start >= ms(30), "{attempt:?}");
                assert!(timed_out(attempt), "{attempt:?}");
            }
        }
    }
}
