//! Hedging: a slow attempt gets a parallel hedge after a delay; the first success wins, the
//! others are dropped; hedges count against the retry and its budget, and respect the
//! deadline and the breaker.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_graph::{
    BoxError, CircuitBreaker, Graph, Hedge, Node, NodeError, Orchestrator, Outcome, Pipeline,
    Report, Retry, breaker::BreakerState, hedge::MAX_HEDGES, observe::Event, retry::RetryBudget,
};
use tokio::time::{Instant, sleep};

use crate::ms;

/// Sets its flag when dropped: an attempt that was cancelled.
struct Dropped(Arc<Mutex<Vec<(u32, Duration)>>>, u32, Instant);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.lock().unwrap().push((self.1, self.2.elapsed()));
    }
}

/// A node whose attempt `k` takes `took[k - 1]` ms (the last entry for later ones) and
/// then succeeds with `k`, or fails when `fails` says so; every attempt's future records
/// when it was dropped in `drops`.
fn slow_node(
    g: &mut baton_graph::GraphBuilder<()>,
    hedge: Hedge,
    retry: Option<Retry>,
    took: Vec<u64>,
    fails: fn(u32) -> bool,
    drops: &Arc<Mutex<Vec<(u32, Duration)>>>,
) -> Node<u32> {
    let drops = Arc::clone(drops);
    let t0 = Instant::now();
    let node = g.node("price").hedge(hedge);
    let node = match retry {
        Some(retry) => node.retry(retry),
        None => node,
    };
    node.task(move |ctx, ()| {
        let k = ctx.attempt();
        let took = took[(k as usize - 1).min(took.len() - 1)];
        let guard = Dropped(Arc::clone(&drops), k, t0);
        async move {
            sleep(ms(took)).await;
            drop(guard);
            if fails(k) {
                return Err::<u32, BoxError>(format!("attempt {k} failed").into());
            }
            Ok(k)
        }
    })
}

fn never(_: u32) -> bool {
    false
}

fn the_hedge(k: u32) -> bool {
    k == 2
}

fn log(report: &Report, node: Node<u32>) -> Vec<(u32, u128, bool, bool, bool)> {
    let n = report.node(node).unwrap();
    n.attempt_log()
        .iter()
        .map(|a| {
            let end = a.end.as_millis();
            (a.number, end, a.hedge, a.cancelled, a.error.is_some())
        })
        .collect()
}

/// The first attempt is stuck; the hedge starts 20 ms later and answers in 5 ms: it wins
/// at 25 ms, the first attempt is dropped then (cancelled, not failed), the report says
/// attempt 2 won, and the hedge is counted and told as an event.
#[tokio::test(start_paused = true)]
async fn the_first_success_wins_and_the_slow_attempt_is_cancelled() {
    let events: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = Arc::clone(&events);
    let orch = Orchestrator::builder()
        .observer(move |e: &Event<'_>| {
            if let Event::HedgeStarted { .. } | Event::AttemptFailed { .. } = e {
                seen.lock().unwrap().push(e.to_string());
            }
        })
        .build();
    let drops = Arc::default();
    let mut g = orch.graph::<()>();
    let hedge = Hedge::new(ms(20));
    let price = slow_node(&mut g, hedge, None, vec![1_000, 5], never, &drops);
    let report = g.build().unwrap().run(()).await.unwrap();
    assert_eq!(report.get(price), Some(&2));
    let n = report.node(price).unwrap();
    assert_eq!(
        (n.outcome(), n.winner(), n.end()),
        (Outcome::Succeeded, Some(2), ms(25))
    );
    assert_eq!(
        log(&report, price),
        [(1, 25, false, true, false), (2, 25, true, false, false)]
    );
    assert_eq!(*drops.lock().unwrap(), [(2, ms(25)), (1, ms(25))]);
    assert_eq!(orch.stats().hedges, 1);
    assert_eq!(
        *events.lock().unwrap(),
        ["`price` hedge attempt 2 after 20 ms"]
    );
}

/// The first attempt, slower than the delay but faster than its hedge, still wins; the
/// hedge is the one cancelled. In a pipeline call the same.
#[tokio::test(start_paused = true)]
async fn the_attempt_that_succeeds_first_wins_in_a_node_and_a_call() {
    let drops = Arc::default();
    let mut g = Graph::<()>::builder();
    let price = slow_node(
        &mut g,
        Hedge::new(ms(20)),
        None,
        vec![30, 50],
        never,
        &drops,
    );
    let report = g.build().unwrap().run(()).await.unwrap();
    assert_eq!(report.get(price), Some(&1));
    assert_eq!(report.node(price).unwrap().winner(), Some(1));
    assert_eq!(
        log(&report, price),
        [(1, 30, false, false, false), (2, 30, true, true, false)]
    );
    let pipeline = Pipeline::<u32>::builder("price")
        .hedge(Hedge::new(ms(20)))
        .build()
        .unwrap();
    let call = pipeline
        .run(|attempt| async move {
            let took = if attempt.number() == 1 { 30 } else { 50 };
            sleep(ms(took)).await;
            Ok::<_, BoxError>(attempt.number())
        })
        .await;
    assert_eq!(
        (call.value(), call.winner(), call.attempts()),
        (Some(&1), Some(1), 2)
    );
    let flags: Vec<_> = call
        .attempt_log()
        .iter()
        .map(|a| (a.hedge, a.cancelled))
        .collect();
    assert_eq!(flags, [(false, false), (true, true)]);
}

/// A hedge that fails does not end the race: the attempt still running wins.
#[tokio::test(start_paused = true)]
async fn a_failed_hedge_leaves_the_race_to_the_attempts_still_running() {
    let drops = Arc::default();
    let mut g = Graph::<()>::builder();
    let hedge = Hedge::new(ms(10));
    let price = slow_node(&mut g, hedge, None, vec![30, 5], the_hedge, &drops);
    let report = g.build().unwrap().run(()).await.unwrap();
    assert_eq!(report.get(price), Some(&1));
    assert_eq!(
        log(&report, price),
        [(1, 30, false, false, false), (2, 15, true, false, true)]
    );
}

/// A breaker that opened while the attempt ran stops its hedge: another node's failure
/// opens it at 5 ms, and the hedge due at 10 ms does not start.
#[tokio::test(start_paused = true)]
async fn a_breaker_that_opened_stops_the_hedges() {
    let breaker = CircuitBreaker::builder("prices")
        .consecutive_failures(1)
        .build()
        .unwrap();
    let mut g = Graph::<()>::builder();
    let _ = g.node("quote").breaker(&breaker).task(|_ctx, ()| async {
        sleep(ms(5)).await;
        Err::<u32, BoxError>("503".into())
    });
    let price = g
        .node("price")
        .breaker(&breaker)
        .hedge(Hedge::new(ms(10)))
        .task(|_ctx, ()| async {
            sleep(ms(30)).await;
            Ok::<_, BoxError>(1_u32)
        });
    let report = g.build().unwrap().run(()).await.unwrap();
    let n = report.node(price).unwrap();
    assert_eq!((n.attempts(), n.winner(), n.end()), (1, Some(1), ms(30)));
}

/// Hedges are attempts: with `Retry::new(3)` and up to 5 hedges 10 ms apart, only three
/// attempts ever start; with a retry budget that has no retry to give, no hedge starts.
#[tokio::test(start_paused = true)]
async fn hedges_count_against_max_attempts_and_the_retry_budget() {
    let drops = Arc::default();
    let mut g = Graph::<()>::builder();
    let hedge = Hedge::new(ms(10)).max_hedges(5);
    let price = slow_node(&mut g, hedge, Some(Retry::new(3)), vec![100], never, &drops);
    let report = g.build().unwrap().run(()).await.unwrap();
    let n = report.node(price).unwrap();
    assert_eq!((n.attempts(), n.winner(), n.end()), (3, Some(1), ms(100)));
    let starts: Vec<_> = n
        .attempt_log()
        .iter()
        .map(|a| a.start.as_millis())
        .collect();
    assert_eq!(starts, [0, 10, 20]);

    let empty = RetryBudget::with("prices", Duration::from_secs(10), 0, 0.0);
    let mut g = Graph::<()>::builder();
    let retry = Retry::new(3).budget(empty);
    let price = slow_node(
        &mut g,
        Hedge::new(ms(10)),
        Some(retry),
        vec![100],
        never,
        &drops,
    );
    let report = g.build().unwrap().run(()).await.unwrap();
    let n = report.node(price).unwrap();
    assert_eq!(
        (n.attempts(), n.end()),
        (1, ms(100)),
        "no hedge: no retry in the budget"
    );
}

/// A hedge starts only when the deadline leaves it the minimum attempt time: under a
/// 50 ms budget, a hedge due at 45 ms does not start and the attempt is cut at 50 ms; one
/// due at 30 ms starts, and is cut at the deadline with it.
#[tokio::test(start_paused = true)]
async fn hedges_respect_the_deadline() {
    let drops = Arc::default();
    let run = |delay: u64| {
        let drops = Arc::clone(&drops);
        async move {
            let mut g = Graph::<()>::builder();
            let hedge = Hedge::new(ms(delay));
            let node = g
                .node("price")
                .budget(ms(50))
                .hedge(hedge)
                .task(move |ctx, ()| {
                    let guard = Dropped(Arc::clone(&drops), ctx.attempt(), Instant::now());
                    async move {
                        sleep(ms(1_000)).await;
                        drop(guard);
                        Ok::<_, BoxError>(1_u32)
                    }
                });
            let report = g.build().unwrap().run(()).await.unwrap();
            let n = report.node(node).unwrap();
            (n.attempts(), n.end(), n.error().map(NodeError::kind))
        }
    };
    assert_eq!(run(45).await, (1, ms(50), Some("deadline_exceeded")));
    assert_eq!(run(30).await, (2, ms(50), Some("deadline_exceeded")));
}

/// The breaker is told once per series, however many attempts raced: a breaker that trips
/// after two failures stays closed after one series whose attempt and hedge both failed,
/// and opens after the second. The same with a breaker told every attempt, which is told
/// once per race. A breaker that opened stops further hedges.
#[tokio::test(start_paused = true)]
async fn the_breaker_is_told_once_per_hedged_series() {
    for every_attempt in [false, true] {
        let breaker = CircuitBreaker::builder("prices")
            .consecutive_failures(2)
            .count_every_attempt(every_attempt)
            .build()
            .unwrap();
        let mut g = Graph::<()>::builder();
        let calls = Arc::new(AtomicU32::new(0));
        let counted = Arc::clone(&calls);
        let price = g
            .node("price")
            .hedge(Hedge::new(ms(10)))
            .breaker(&breaker)
            .task(move |ctx, ()| {
                counted.fetch_add(1, Ordering::SeqCst);
                let took = if ctx.attempt() == 1 { 30 } else { 5 };
                async move {
                    sleep(ms(took)).await;
                    Err::<u32, BoxError>("503".into())
                }
            });
        let graph = g.build().unwrap();
        let report = graph.run(()).await.unwrap();
        assert_eq!(report.node(price).unwrap().attempts(), 2);
        assert_eq!(breaker.state(), BreakerState::Closed, "told once");
        let _ = graph.run(()).await.unwrap();
        assert_eq!(
            breaker.state(),
            BreakerState::Open,
            "told again: two failures"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    }
}

/// The delay can follow recent latencies: after ten calls of 30 ms, a percentile hedge
/// whose fixed delay is 100 ms hedges a stuck call at 30 ms.
#[tokio::test(start_paused = true)]
async fn a_percentile_hedge_follows_recent_latencies() {
    let hedge = Hedge::new(ms(100)).percentile(90.0, 10);
    let pipeline = Pipeline::<u32>::builder("price")
        .hedge(hedge)
        .build()
        .unwrap();
    for _ in 0..10 {
        let call = pipeline
            .run(|_| async {
                sleep(ms(30)).await;
                Ok::<_, BoxError>(0)
            })
            .await;
        assert_eq!(call.attempts(), 1);
    }
    let started = Instant::now();
    let call = pipeline
        .run(|attempt| async move {
            let took = if attempt.number() == 1 { 1_000 } else { 1 };
            sleep(ms(took)).await;
            Ok::<_, BoxError>(attempt.number())
        })
        .await;
    assert_eq!((call.winner(), started.elapsed()), (Some(2), ms(31)));
}

/// A hedge that could never start is a build error naming the node.
#[test]
fn an_impossible_hedge_is_a_build_error() {
    let mut g = Graph::<()>::builder();
    let _ = g
        .node("price")
        .hedge(Hedge::new(ms(1)).percentile(100.0, 5))
        .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    assert_eq!(
        g.build().map(|_| ()).unwrap_err().to_string(),
        "node `price`: invalid hedge policy: the hedge percentile must be in (0, 100), got 100"
    );
    let build = |hedge: Hedge| {
        Pipeline::<u32>::builder("price")
            .hedge(hedge)
            .build()
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        build(Hedge::new(ms(1)).max_hedges(u32::MAX)),
        "node `price`: invalid hedge policy: max_hedges is 4294967295, above the most a hedge \
         may start, 100"
    );
    assert!(build(Hedge::new(ms(1)).max_hedges(MAX_HEDGES + 1)).contains("max_hedges is 101"));
    assert_eq!(
        build(Hedge::new(Duration::ZERO)),
        "node `price`: invalid hedge policy: a hedge delay of zero starts every attempt at \
         once: use Hedge::all_at_once(attempts) to mean it"
    );
    assert!(build(Hedge::all_at_once(1)).contains("at least 2 attempts"));
    assert!(build(Hedge::all_at_once(u32::MAX)).contains("max_hedges is 4294967294"));
}

/// The largest hedge runs: `MAX_HEDGES` hedges after an attempt that never ends, and as
/// many under a retry of `u32::MAX` attempts, start and race without an overflow.
#[tokio::test(start_paused = true)]
async fn the_most_hedges_run_without_overflow() {
    for retry in [None, Some(Retry::new(u32::MAX))] {
        let drops = Arc::default();
        let mut g = Graph::<()>::builder();
        let hedge = Hedge::new(ms(1)).max_hedges(MAX_HEDGES);
        let price = slow_node(&mut g, hedge, retry, vec![1_000], never, &drops);
        let report = g.build().unwrap().run(()).await.unwrap();
        let n = report.node(price).unwrap();
        assert_eq!((n.attempts(), n.winner()), (1 + MAX_HEDGES, Some(1)));
    }
}

/// `Hedge::all_at_once(n)` starts `n` attempts at the same instant; the first to succeed
/// wins, the others are cancelled.
#[tokio::test(start_paused = true)]
async fn an_all_at_once_hedge_starts_every_attempt_at_once() {
    let drops = Arc::default();
    let mut g = Graph::<()>::builder();
    let price = slow_node(
        &mut g,
        Hedge::all_at_once(3),
        None,
        vec![30, 20, 10],
        never,
        &drops,
    );
    let report = g.build().unwrap().run(()).await.unwrap();
    let n = report.node(price).unwrap();
    assert_eq!((n.attempts(), n.winner(), n.end()), (3, Some(3), ms(10)));
    let starts: Vec<_> = n.attempt_log().iter().map(|a| a.start).collect();
    assert_eq!(starts, [ms(0); 3]);
}

/// A hedge is a call: in half-open it needs a probe permit of its own and does not start
/// without one. A breaker admitting one probe lets its probe run alone (the task is called
/// once, not twice); one admitting two lets the probe's hedge take the second permit and
/// never a third, and closes when both succeed. The same when the breaker is told every
/// attempt.
#[tokio::test(start_paused = true)]
async fn a_hedge_in_half_open_needs_a_probe_permit_of_its_own() {
    for every_attempt in [false, true] {
        for probes in [1_u32, 2] {
            let breaker = CircuitBreaker::builder("prices")
                .consecutive_failures(1)
                .open_duration(ms(100))
                .half_open_probes(probes)
                .count_every_attempt(every_attempt)
                .build()
                .unwrap();
            breaker.try_acquire().unwrap().failure(ms(1));
            assert_eq!(breaker.state(), BreakerState::Open);
            sleep(ms(100)).await;
            let calls = Arc::new(AtomicU32::new(0));
            let counted = Arc::clone(&calls);
            let mut g = Graph::<()>::builder();
            let price = g
                .node("price")
                .breaker(&breaker)
                .hedge(Hedge::new(ms(10)).max_hedges(3))
                .task(move |ctx, ()| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    let took = if ctx.attempt() == 1 { 50 } else { 5 };
                    async move {
                        sleep(ms(took)).await;
                        Ok::<_, BoxError>(ctx.attempt())
                    }
                });
            let report = g.build().unwrap().run(()).await.unwrap();
            let n = report.node(price).unwrap();
            let case = format!("{probes} probes, every attempt: {every_attempt}");
            assert_eq!(calls.load(Ordering::SeqCst), probes, "{case}");
            assert_eq!(n.attempts(), probes, "{case}");
            let winner = if probes == 1 { 1 } else { 2 };
            assert_eq!(n.winner(), Some(winner), "{case}");
            assert_eq!(breaker.state(), BreakerState::Closed, "{case}");
        }
    }
}
