//! The timer that the drivers an inline run's future polls together share
//! (`paths/first_attempt/shared.rs`): whatever their timeouts and whenever they start, each
//! first attempt armed on it is cut exactly at its own cut, and those that end in time are
//! not cut.

use std::time::Duration;

use proptest::prelude::*;
use tokio::time::sleep;

use crate::{BoxError, Fallback, Graph, Node, Outcome};

use crate::util::ms;

/// One timed node of a case: its first attempt, under `timeout` ms, wakes itself every
/// `tick` ms and ends after `work` ms, if ever. The first node of a chain starts once a
/// gate node, with no policies, has slept `delay` ms; the others start when the node
/// before them ends (`delay` unused).
#[derive(Debug, Clone, Copy)]
struct Timed {
    delay: u64,
    timeout: u64,
    tick: u64,
    work: Option<u64>,
}

fn timed() -> impl Strategy<Value = Timed> {
    (
        0u64..60,
        5u64..80,
        1u64..12,
        proptest::option::of(1u64..120),
    )
        .prop_map(|(delay, timeout, tick, work)| Timed {
            delay,
            timeout,
            tick,
            // An attempt that ends exactly at its cut races the timer; keep them apart.
            work: work.filter(|&w| w != timeout),
        })
}

/// What the report says of a timed node: its outcome, how long it took from its start, and
/// each attempt's duration and whether it timed out.
type Seen = (Outcome, Option<Duration>, Vec<(Duration, bool)>);

/// Runs one case, chains of timed nodes, each chain in a driver of its own, on a paused
/// current-thread runtime, twice, the second run as the first ended, with what the first
/// left to the graph's spares: what each report says of each timed node, chain after
/// chain.
fn run_case(chains: &[Vec<Timed>]) -> [Vec<Seen>; 2] {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime");
    let mut g = Graph::<()>::builder();
    let mut timed: Vec<Node<u32>> = Vec::new();
    for (c, chain) in chains.iter().enumerate() {
        let delay = chain.first().map_or(0, |t| t.delay);
        let gate = g.node(format!("gate{c}")).task(move |_ctx, ()| async move {
            sleep(ms(delay)).await;
            Ok::<_, BoxError>(0u32)
        });
        let mut before = gate;
        for (i, t) in chain.iter().enumerate() {
            let (tick, work) = (t.tick, t.work);
            let node = g
                .node(format!("timed{c}.{i}"))
                .after(before)
                .timeout(ms(t.timeout))
                .fallback(Fallback::value(0u32))
                .task(move |_ctx, _before| async move {
                    let mut spent = 0;
                    loop {
                        if work.is_some_and(|w| spent >= w) {
                            return Ok::<_, BoxError>(1u32);
                        }
                        let step = work.map_or(tick, |w| tick.min(w - spent));
                        sleep(ms(step)).await;
                        spent += step;
                    }
                });
            timed.push(node);
            before = node;
        }
    }
    let graph = g.build().expect("a graph");
    [(); 2].map(|()| {
        let report = rt
            .block_on(async { tokio::time::timeout(ms(60_000), graph.run(())).await })
            .expect("every attempt ends or is cut")
            .expect("the run succeeds");
        timed
            .iter()
            .map(|&node| {
                let node = report.node(node).expect("a timed node");
                let log = node
                    .attempt_log()
                    .iter()
                    .map(|a| (a.end - a.start, super::fast_path::timed_out(a)))
                    .collect();
                (node.outcome(), node.start().map(|s| node.end() - s), log)
            })
            .collect()
    })
}

/// Checks what the report says of timed node `t`: cut exactly at its timeout if its work
/// outlasts it, ended when its work did otherwise.
fn check(t: &Timed, (outcome, took, log): &Seen) -> Result<(), TestCaseError> {
    match t.work.filter(|&w| w < t.timeout) {
        Some(work) => {
            prop_assert_eq!(*outcome, Outcome::Succeeded, "{:?}", t);
            prop_assert_eq!(*took, Some(ms(work)), "{:?}", t);
        }
        None => {
            prop_assert_eq!(*outcome, Outcome::Recovered, "{:?}", t);
            prop_assert_eq!(log.as_slice(), &[(ms(t.timeout), true)], "{:?}", t);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Chains of timed nodes, each in a driver of its own, polled together (past eight,
    /// each on its own waker), started at different instants: each first attempt is cut at
    /// its own timeout if its work outlasts it, and ends when its work does otherwise, in
    /// a run and in the next.
    #[test]
    fn each_attempt_polled_together_is_cut_at_its_own_timeout(
        chains in proptest::collection::vec(proptest::collection::vec(timed(), 1..4), 2..11),
    ) {
        for seen in run_case(&chains) {
            for (t, seen) in chains.iter().flatten().zip(&seen) {
                check(t, seen)?;
            }
        }
    }
}

/// Cases that take each of the shared timer's moves: a later node with an earlier cut
/// moves it earlier; cuts that pass one after another move it later, each time under the
/// attempts still armed on it; a node whose cut is far past the running timer's while
/// others are armed on it takes a timer of its own; a driver that goes on to the next
/// node of its chain arms it again.
#[test]
fn the_shared_timer_s_moves_keep_every_cut() {
    let t = |delay, timeout, work| Timed {
        delay,
        timeout,
        tick: 3,
        work,
    };
    let one = |nodes: Vec<Timed>| nodes.into_iter().map(|t| vec![t]).collect::<Vec<_>>();
    let cases = [
        one(vec![
            t(0, 60, None),
            t(0, 20, None),
            t(0, 50, None),
            t(5, 10, None),
        ]),
        one(vec![
            t(0, 30, Some(10)),
            t(0, 40, None),
            t(12, 5, None),
            t(12, 70, None),
        ]),
        one(vec![
            t(0, 20, None),
            t(0, 20, None),
            t(1, 20, None),
            t(30, 20, Some(5)),
        ]),
        one(vec![
            t(0, 40, None),
            t(3, 200, None),
            t(3, 200, Some(150)),
            t(0, 41, None),
        ]),
        one(vec![
            Timed {
                tick: 4,
                ..t(11, 6, None)
            },
            t(15, 5, None),
        ]),
        vec![
            vec![t(0, 30, Some(8)), t(0, 12, None), t(0, 40, Some(20))],
            vec![t(2, 25, None), t(0, 9, Some(4))],
            vec![t(5, 50, None)],
        ],
    ];
    for chains in cases {
        for seen in run_case(&chains) {
            for (t, seen) in chains.iter().flatten().zip(&seen) {
                if let Err(e) = check(t, seen) {
                    panic!("{e}");
                }
            }
        }
    }
}

/// On the real clock, on two workers: runs of two nodes polled together follow each
/// other, each taking the timer the one before left running (`Spares::keep_standing`), as
/// it is or moved, and every other run's attempts never end. Each of those is cut by its
/// timeout and recovered, and the attempts of the runs between end with their work.
#[test]
fn runs_that_follow_each_other_on_one_timer_keep_their_cuts_on_the_real_clock() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    let calls = Arc::new(AtomicU32::new(0));
    let mut g = Graph::<()>::builder();
    let nodes: Vec<Node<u32>> = (0..2)
        .map(|i| {
            let calls = Arc::clone(&calls);
            g.node(format!("n{i}"))
                .timeout(ms(40))
                .fallback(Fallback::value(0u32))
                .task(move |_ctx, ()| {
                    let hangs = calls.fetch_add(1, Ordering::SeqCst) / 2 % 2 == 1;
                    async move {
                        tokio::task::yield_now().await;
                        if hangs {
                            std::future::pending::<()>().await;
                        }
                        Ok::<_, BoxError>(1u32)
                    }
                })
        })
        .collect();
    let graph = g.build().expect("a graph");
    let rt = super::common::two_workers();
    for run in 0..6 {
        let report = rt
            .block_on(rt.spawn(graph.run(())))
            .expect("the run's task")
            .expect("the run succeeds");
        for &node in &nodes {
            let node = report.node(node).expect("a node");
            if run % 2 == 0 {
                assert_eq!(node.outcome(), Outcome::Succeeded, "run {run}");
                continue;
            }
            assert_eq!(node.outcome(), Outcome::Recovered, "run {run}");
            let attempts = node.attempt_log();
            let [attempt] = attempts else {
                panic!("run {run}: one attempt, not {attempts:?}");
            };
            assert!(super::fast_path::timed_out(attempt), "run {run}");
            assert!(attempt.end - attempt.start >= ms(40), "run {run}");
        }
    }
}

/// A graph lets go of a runtime it no longer runs on: the timers a run left running hold
/// its runtime's handle (`Spares::keep_standing`), and with it whatever the runtime's
/// hooks hold, after that runtime is dropped; the graph's next run on another
/// multi-thread runtime drops those timers when it looks for one, even when its own
/// attempts are cut, so that its timer, elapsed, is not kept running in its place. So on
/// runtimes of two workers and of one.
#[test]
fn a_run_on_another_runtime_lets_go_of_the_last_one() {
    for workers in [2, 1] {
        lets_go_of_the_last_runtime(workers);
    }
}

fn lets_go_of_the_last_runtime(workers: usize) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    let calls = Arc::new(AtomicU32::new(0));
    let mut g = Graph::<()>::builder();
    for i in 0..4 {
        let calls = Arc::clone(&calls);
        let _: Node<u32> = g
            .node(format!("n{i}"))
            .timeout(ms(300))
            .fallback(Fallback::value(0u32))
            .task(move |_ctx, ()| {
                let hangs = calls.fetch_add(1, Ordering::SeqCst) >= 4;
                async move {
                    tokio::task::yield_now().await;
                    tokio::task::yield_now().await;
                    if hangs {
                        std::future::pending::<()>().await;
                    }
                    Ok::<_, BoxError>(1u32)
                }
            });
    }
    let graph = g.build().expect("a graph");
    let runtime = |held: &Arc<()>| {
        let held = Arc::clone(held);
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .on_thread_park(move || drop(Arc::clone(&held)))
            .build()
            .expect("a runtime")
    };
    let (first, second) = (Arc::new(()), Arc::new(()));
    let rt = runtime(&first);
    rt.block_on(rt.spawn(graph.run(())))
        .expect("the run's task")
        .expect("the first run succeeds");
    drop(rt);
    assert_eq!(
        Arc::strong_count(&first),
        2,
        "held by the timer left running"
    );
    let rt = runtime(&second);
    rt.block_on(rt.spawn(graph.run(())))
        .expect("the run's task")
        .expect("the second run succeeds");
    assert_eq!(Arc::strong_count(&first), 1, "let go ({workers} worker(s))");
}
