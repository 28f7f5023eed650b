//! The timer that the drivers an inline run's future polls together share
//! (`paths/first_attempt/shared.rs`): whatever their timeouts and whenever they start, each
//! first attempt armed on it is cut exactly at its own cut, and those that end in time are
//! not cut.

use std::time::Duration;

use proptest::prelude::*;
use tokio::time::sleep;

use crate::{BoxError, Fallback, Graph, Node, Outcome};

use crate::util::ms;

/// One timed node of a case: it starts once a gate node, with no policies, has slept
/// `delay` ms; its first attempt, under `timeout` ms, wakes itself every `tick` ms and
/// ends after `work` ms, if ever.
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

/// Runs one case on a paused current-thread runtime: what the report says of each timed
/// node.
fn run_case(nodes: &[Timed]) -> Vec<Seen> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime");
    let mut g = Graph::<()>::builder();
    let timed: Vec<Node<u32>> = nodes
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let delay = t.delay;
            let gate = g.node(format!("gate{i}")).task(move |_ctx, ()| async move {
                sleep(ms(delay)).await;
                Ok::<_, BoxError>(())
            });
            let (tick, work) = (t.tick, t.work);
            g.node(format!("timed{i}"))
                .after(gate)
                .timeout(ms(t.timeout))
                .fallback(Fallback::value(0u32))
                .task(move |_ctx, _gate| async move {
                    let mut spent = 0;
                    loop {
                        if work.is_some_and(|w| spent >= w) {
                            return Ok::<_, BoxError>(1u32);
                        }
                        let step = work.map_or(tick, |w| tick.min(w - spent));
                        sleep(ms(step)).await;
                        spent += step;
                    }
                })
        })
        .collect();
    let graph = g.build().expect("a graph");
    let report = rt
        .block_on(async { tokio::time::timeout(ms(60_000), graph.run(())).await })
        .expect("every attempt ends or is cut")
        .expect("the run succeeds");
    timed
        .into_iter()
        .map(|node| {
            let node = report.node(node).expect("a timed node");
            let log = node
                .attempt_log()
                .iter()
                .map(|a| (a.end - a.start, super::fast_path::timed_out(a)))
                .collect();
            (node.outcome(), node.start().map(|s| node.end() - s), log)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Timed nodes polled together, started at different instants, each is cut at its own
    /// timeout if its work outlasts it, and ends when its work does otherwise.
    #[test]
    fn each_attempt_polled_together_is_cut_at_its_own_timeout(
        nodes in proptest::collection::vec(timed(), 2..10),
    ) {
        for (t, (outcome, took, log)) in nodes.iter().zip(run_case(&nodes)) {
            match t.work.filter(|&w| w < t.timeout) {
                Some(work) => {
                    prop_assert_eq!(outcome, Outcome::Succeeded, "{:?}", t);
                    prop_assert_eq!(took, Some(ms(work)), "{:?}", t);
                }
                None => {
                    prop_assert_eq!(outcome, Outcome::Recovered, "{:?}", t);
                    prop_assert_eq!(log.len(), 1, "{:?}", t);
                    prop_assert_eq!(log[0], (ms(t.timeout), true), "{:?}", t);
                }
            }
        }
    }
}

/// Cases that take each of the shared timer's moves: a later node with an earlier cut
/// moves it earlier; cuts that pass one after another move it later, each time under the
/// attempts still armed on it; a node whose cut is far past the running timer's while
/// others are armed on it takes a timer of its own.
#[test]
fn the_shared_timer_s_moves_keep_every_cut() {
    let t = |delay, timeout, work| Timed {
        delay,
        timeout,
        tick: 3,
        work,
    };
    let cases = [
        vec![
            t(0, 60, None),
            t(0, 20, None),
            t(0, 50, None),
            t(5, 10, None),
        ],
        vec![
            t(0, 30, Some(10)),
            t(0, 40, None),
            t(12, 5, None),
            t(12, 70, None),
        ],
        vec![
            t(0, 20, None),
            t(0, 20, None),
            t(1, 20, None),
            t(30, 20, Some(5)),
        ],
        vec![
            t(0, 40, None),
            t(3, 200, None),
            t(3, 200, Some(150)),
            t(0, 41, None),
        ],
        vec![
            Timed {
                tick: 4,
                ..t(11, 6, None)
            },
            t(15, 5, None),
        ],
    ];
    for nodes in cases {
        for (t, (outcome, took, log)) in nodes.iter().zip(run_case(&nodes)) {
            match t.work.filter(|&w| w < t.timeout) {
                Some(work) => assert_eq!((outcome, took), (Outcome::Succeeded, Some(ms(work)))),
                None => {
                    assert_eq!(outcome, Outcome::Recovered, "{t:?}");
                    assert_eq!(log, [(ms(t.timeout), true)], "{t:?}");
                }
            }
        }
    }
}
