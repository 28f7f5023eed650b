//! Scheduling: makespan equals the critical path on tokio's paused clock, upstream values
//! arrive typed and shared, the run input reaches every task, and no node starts before its
//! upstreams ended (`docs/contract.md`, rule 1).

mod prop_dag;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_graph::{BoxError, Graph, Inputs, Node, Outcome, Report};
use tokio::time::{Instant, sleep};

use crate::ms;

/// Asserts a node's exact start and end (from the run's start).
fn assert_span(report: &Report, name: &str, start: u64, end: u64) {
    let node = report
        .by_name(name)
        .unwrap_or_else(|| panic!("no node `{name}`"));
    assert_eq!(node.outcome(), Outcome::Succeeded, "{name}");
    assert_eq!(node.start(), Some(ms(start)), "start of {name}");
    assert_eq!(node.end(), ms(end), "end of {name}");
    assert_eq!(node.attempts(), 1, "attempts of {name}");
}

#[derive(Debug)]
struct Order {
    user_id: u64,
    sku_id: u64,
}
#[derive(Debug)]
struct User {
    id: u64,
}
#[derive(Debug)]
struct Sku {
    id: u64,
    price_cents: u64,
}

struct OrderGraph {
    graph: Graph<Order>,
    user: Node<User>,
    sku: Node<Sku>,
    stock: Node<String>,
    promo: Node<u64>,
    notify: Node<String>,
}

fn order_graph() -> OrderGraph {
    let mut g = Graph::<Order>::builder();
    let user = g.node("user").task(|ctx, ()| async move {
        sleep(ms(200)).await;
        Ok::<_, BoxError>(User {
            id: ctx.input().user_id,
        })
    });
    let sku = g.node("sku").task(|ctx, ()| async move {
        sleep(ms(200)).await;
        Ok::<_, BoxError>(Sku {
            id: ctx.input().sku_id,
            price_cents: 59_900,
        })
    });
    let stock = g.node("stock").after((user, sku)).task(
        |_ctx, (user, sku): (Arc<User>, Arc<Sku>)| async move {
            sleep(ms(150)).await;
            Ok::<_, BoxError>(format!("reserved sku {} for user {}", sku.id, user.id))
        },
    );
    let promo = g.node("promo").after((stock, sku)).task(
        |_ctx, (_stock, sku): (Arc<String>, Arc<Sku>)| async move {
            sleep(ms(100)).await;
            Ok::<_, BoxError>(sku.price_cents / 100)
        },
    );
    let notify = g
        .node("notify")
        .after(promo)
        .task(|ctx, promo: Arc<u64>| async move {
            sleep(ms(50)).await;
            Ok::<_, BoxError>(format!("user {}: discount {promo}", ctx.input().user_id))
        });
    OrderGraph {
        graph: g.build().expect("valid graph"),
        user,
        sku,
        stock,
        promo,
        notify,
    }
}

#[tokio::test(start_paused = true)]
async fn order_graph_makespan_is_the_critical_path_500ms() {
    let o = order_graph();
    let before = Instant::now();
    let report = o
        .graph
        .run(Order {
            user_id: 7,
            sku_id: 42,
        })
        .await
        .expect("clean run");
    assert_eq!(before.elapsed(), ms(500), "the run itself took 500 ms");
    assert_eq!(report.makespan(), ms(500), "not 700 ms");
    assert_span(&report, "user", 0, 200);
    assert_span(&report, "sku", 0, 200);
    assert_span(&report, "stock", 200, 350);
    assert_span(&report, "promo", 350, 450);
    assert_span(&report, "notify", 450, 500);
    assert_eq!(report.get(o.user).map(|u| u.id), Some(7));
    assert_eq!(report.get(o.sku).map(|s| s.id), Some(42));
    assert_eq!(
        report.get(o.stock).map(String::as_str),
        Some("reserved sku 42 for user 7")
    );
    assert_eq!(report.get(o.promo), Some(&599));
    assert_eq!(
        report.get(o.notify).map(String::as_str),
        Some("user 7: discount 599")
    );
    assert!(report.is_clean());
}

#[tokio::test(start_paused = true)]
async fn runs_of_one_graph_get_their_own_input() {
    let o = order_graph();
    for (user_id, sku_id) in [(1, 2), (30, 40), (500, 600)] {
        let report = o.graph.run(Order { user_id, sku_id }).await.expect("run");
        assert_eq!(
            report.get(o.stock).cloned(),
            Some(format!("reserved sku {sku_id} for user {user_id}"))
        );
        assert_eq!(report.makespan(), ms(500));
    }
}

#[tokio::test(start_paused = true)]
async fn diamond_makespan_is_the_longer_branch() {
    //      a(100)
    //     /      \
    //  b(300)   c(50)
    //     \      /
    //      d(20)
    let mut g = Graph::<()>::builder();
    let a = g.node("a").task(|_ctx, ()| async {
        sleep(ms(100)).await;
        Ok::<_, BoxError>(1_u32)
    });
    let b = g.node("b").after(a).task(|_ctx, a: Arc<u32>| async move {
        sleep(ms(300)).await;
        Ok::<_, BoxError>(*a + 10)
    });
    let c = g.node("c").after(a).task(|_ctx, a: Arc<u32>| async move {
        sleep(ms(50)).await;
        Ok::<_, BoxError>(*a + 100)
    });
    let d = g
        .node("d")
        .after((b, c))
        .task(|_ctx, (b, c): (Arc<u32>, Arc<u32>)| async move {
            sleep(ms(20)).await;
            Ok::<_, BoxError>(*b * 1000 + *c)
        });
    let graph = g.build().expect("valid");
    let report = graph.run(()).await.expect("run");
    assert_eq!(report.makespan(), ms(420));
    assert_span(&report, "a", 0, 100);
    assert_span(&report, "b", 100, 400);
    assert_span(&report, "c", 100, 150);
    assert_span(&report, "d", 400, 420);
    assert_eq!(report.get(d), Some(&11_101));
}

#[tokio::test(start_paused = true)]
async fn wide_graph_makespan_and_every_start_is_its_last_upstream_end() {
    // 20 roots sleeping 10, 20, .., 200 ms; 20 middle nodes each after roots i and i+1
    // (mod 20) sleeping 7 ms; one sink after all middle nodes (a Vec) sleeping 1 ms.
    const N: usize = 20;
    let mut g = Graph::<()>::builder();
    let roots: Vec<Node<u64>> = (0..N)
        .map(|i| {
            g.node(format!("root{i}")).task(move |_ctx, ()| async move {
                sleep(ms(10 * (i as u64 + 1))).await;
                Ok::<_, BoxError>(i as u64)
            })
        })
        .collect();
    let mids: Vec<Node<u64>> = (0..N)
        .map(|i| {
            g.node(format!("mid{i}"))
                .after((roots[i], roots[(i + 1) % N]))
                .task(|_ctx, (x, y): (Arc<u64>, Arc<u64>)| async move {
                    sleep(ms(7)).await;
                    Ok::<_, BoxError>(*x * 100 + *y)
                })
        })
        .collect();
    let sink = g
        .node("sink")
        .after(mids.clone())
        .task(|_ctx, mids: Vec<Arc<u64>>| async move {
            sleep(ms(1)).await;
            Ok::<_, BoxError>(mids.iter().map(|m| **m).sum::<u64>())
        });
    let graph = g.build().expect("valid");
    assert_eq!(graph.len(), 2 * N + 1);
    let report = graph.run(()).await.expect("run");

    for i in 0..N {
        let end = 10 * (i as u64 + 1);
        assert_span(&report, &format!("root{i}"), 0, end);
        let start = end.max(10 * (((i + 1) % N) as u64 + 1));
        assert_span(&report, &format!("mid{i}"), start, start + 7);
    }
    assert_span(&report, "sink", 207, 208);
    assert_eq!(report.makespan(), ms(208));
    let expected: u64 = (0..N as u64).map(|i| i * 100 + (i + 1) % N as u64).sum();
    assert_eq!(report.get(sink), Some(&expected));
}

#[tokio::test(start_paused = true)]
async fn independent_nodes_all_run_at_once() {
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let mut g = Graph::<()>::builder();
    for i in 0..10 {
        let (running, peak) = (Arc::clone(&running), Arc::clone(&peak));
        g.node(format!("n{i}")).task(move |_ctx, ()| {
            let (running, peak) = (Arc::clone(&running), Arc::clone(&peak));
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                sleep(ms(100)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, BoxError>(())
            }
        });
    }
    let report = g.build().expect("valid").run(()).await.expect("run");
    assert_eq!(report.makespan(), ms(100));
    assert_eq!(peak.load(Ordering::SeqCst), 10);
    assert_eq!(running.load(Ordering::SeqCst), 0);
    for node in report.nodes() {
        assert_eq!(node.start(), Some(Duration::ZERO));
        assert_eq!(node.end(), ms(100));
    }
}

#[tokio::test(start_paused = true)]
async fn long_chain_runs_in_order_with_exact_timing() {
    // Longer than a task's tokio budget (128), so the driver yields in the middle of it.
    const N: u64 = 300;
    let mut g = Graph::<u64>::builder();
    let mut prev = g.node("c0").task(|ctx, ()| async move {
        sleep(ms(1)).await;
        Ok::<_, BoxError>(*ctx.input())
    });
    for i in 1..N {
        prev = g
            .node(format!("c{i}"))
            .after(prev)
            .task(|_ctx, p: Arc<u64>| async move {
                sleep(ms(1)).await;
                Ok::<_, BoxError>(*p + 1)
            });
    }
    let graph = g.build().expect("valid");
    let report = graph.run(1000).await.expect("run");
    assert_eq!(report.get(prev), Some(&(1000 + N - 1)));
    assert_eq!(report.makespan(), ms(N));
    for i in 0..N {
        assert_span(&report, &format!("c{i}"), i, i + 1);
    }
}

#[tokio::test(start_paused = true)]
async fn zero_duration_chain_starts_and_ends_at_zero() {
    let mut g = Graph::<()>::builder();
    let a = g
        .node("a")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(2_u8) });
    let b = g
        .node("b")
        .after(a)
        .task(|_ctx, a: Arc<u8>| async move { Ok::<_, BoxError>(*a * 3) });
    let report = g.build().expect("valid").run(()).await.expect("run");
    assert_eq!(report.get(b), Some(&6));
    assert_eq!(report.makespan(), Duration::ZERO);
    assert_span(&report, "a", 0, 0);
    assert_span(&report, "b", 0, 0);
}

#[tokio::test(start_paused = true)]
async fn tuple_upstreams_arrive_as_a_tuple_of_the_same_arcs() {
    type Seen = Arc<Mutex<Option<(Arc<u32>, Arc<String>, Arc<Vec<u8>>)>>>;
    let seen: Seen = Arc::default();
    let mut g = Graph::<()>::builder();
    let a = g
        .node("a")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(7_u32) });
    let b = g
        .node("b")
        .task(|_ctx, ()| async { Ok::<_, BoxError>("seven".to_owned()) });
    let c = g
        .node("c")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(vec![7_u8, 7]) });
    let seen_in = Arc::clone(&seen);
    let d = g.node("d").after((a, b, c)).task(
        move |_ctx, (a, b, c): (Arc<u32>, Arc<String>, Arc<Vec<u8>>)| {
            let seen = Arc::clone(&seen_in);
            async move {
                let out = format!("{a}/{b}/{}", c.len());
                *seen.lock().expect("lock") = Some((a, b, c));
                Ok::<_, BoxError>(out)
            }
        },
    );
    let report = g.build().expect("valid").run(()).await.expect("run");
    assert_eq!(report.get(d).map(String::as_str), Some("7/seven/2"));
    let (sa, sb, sc) = seen.lock().expect("lock").take().expect("d ran");
    // Values are shared with the report, never copied.
    assert!(Arc::ptr_eq(&sa, &report.value(a).expect("a")));
    assert!(Arc::ptr_eq(&sb, &report.value(b).expect("b")));
    assert!(Arc::ptr_eq(&sc, &report.value(c).expect("c")));
}

#[tokio::test(start_paused = true)]
async fn vec_upstreams_arrive_as_a_vec_in_declaration_order() {
    let mut g = Graph::<()>::builder();
    let leaves: Vec<Node<u64>> = (0..5_u64)
        .map(|i| {
            g.node(format!("leaf{i}")).task(move |_ctx, ()| async move {
                // Later leaves finish first, so end order differs from declaration order.
                sleep(ms(50 - 10 * i)).await;
                Ok::<_, BoxError>(i)
            })
        })
        .collect();
    let order = vec![leaves[3], leaves[0], leaves[4], leaves[1], leaves[2]];
    let joined = g
        .node("joined")
        .after(order)
        .task(|_ctx, values: Vec<Arc<u64>>| async move {
            Ok::<_, BoxError>(values.iter().map(|v| **v).collect::<Vec<u64>>())
        });
    let empty = g
        .node("empty")
        .after(Vec::<Node<u64>>::new())
        .task(|_ctx, values: Vec<Arc<u64>>| async move { Ok::<_, BoxError>(values.len()) });
    let graph = g.build().expect("valid");
    assert_eq!(
        graph.upstreams_of("joined"),
        Some(vec!["leaf3", "leaf0", "leaf4", "leaf1", "leaf2"])
    );
    assert_eq!(graph.upstreams_of("empty"), Some(vec![]));
    let report = graph.run(()).await.expect("run");
    assert_eq!(report.get(joined), Some(&vec![3, 0, 4, 1, 2]));
    assert_eq!(report.get(empty), Some(&0));
    assert_eq!(
        report.node(joined).and_then(|n| n.start()),
        Some(ms(50)),
        "joined starts when its slowest upstream ends"
    );
    assert_eq!(report.node(empty).and_then(|n| n.start()), Some(ms(0)));
}

#[tokio::test(start_paused = true)]
async fn named_upstreams_arrive_as_inputs_and_may_be_declared_later() {
    let mut g = Graph::<()>::builder();
    // `sum` names upstreams that are only added afterwards.
    let sum =
        g.node("sum")
            .after_names::<i64>(["y", "x"])
            .task(|_ctx, inputs: Inputs<i64>| async move {
                let names: Vec<String> = inputs.iter().map(|(n, _)| n.to_owned()).collect();
                let x = **inputs.get("x").ok_or("no x")?;
                let y = **inputs.get("y").ok_or("no y")?;
                let missing = inputs.get("z").is_none();
                Ok::<_, BoxError>((names, inputs.len(), x * 10 + y, missing))
            });
    let x = g.node("x").task(|_ctx, ()| async {
        sleep(ms(30)).await;
        Ok::<_, BoxError>(4_i64)
    });
    g.node("y").task(|_ctx, ()| async {
        sleep(ms(10)).await;
        Ok::<_, BoxError>(2_i64)
    });
    let graph = g.build().expect("valid");
    assert_eq!(graph.upstreams_of("sum"), Some(vec!["y", "x"]));
    assert_eq!(graph.upstreams_of("nope"), None);
    assert_eq!(graph.names().collect::<Vec<_>>(), ["sum", "x", "y"]);
    let report = graph.run(()).await.expect("run");
    assert_eq!(
        report.get(sum),
        Some(&(vec!["y".to_owned(), "x".to_owned()], 2, 42, true))
    );
    assert_eq!(report.get(x), Some(&4));
    let s = report.node(sum).expect("sum");
    assert_eq!(s.start(), Some(ms(30)));
    assert_eq!(s.end(), ms(30));
}

#[tokio::test(start_paused = true)]
async fn ctx_carries_input_name_attempt_and_run_id() {
    #[derive(Debug, PartialEq)]
    struct Seen {
        input: String,
        name: String,
        attempt: u32,
        run: baton_graph::run::RunId,
    }
    let mut g = Graph::<String>::builder();
    let a = g.node("alpha").task(|ctx, ()| async move {
        Ok::<_, BoxError>(Seen {
            input: ctx.input().clone(),
            name: ctx.node_name().to_owned(),
            attempt: ctx.attempt(),
            run: ctx.run_id(),
        })
    });
    let b = g.node("beta").after(a).task(|ctx, _a| async move {
        sleep(ms(5)).await;
        Ok::<_, BoxError>(Seen {
            input: ctx.input().clone(),
            name: ctx.node_name().to_owned(),
            attempt: ctx.attempt(),
            run: ctx.run_id(),
        })
    });
    let graph = g.build().expect("valid");
    let run = graph.run("request-1".to_owned());
    let id = run.id();
    let report = run.await.expect("run");
    assert_eq!(report.run_id(), id);
    assert_eq!(
        report.get(a),
        Some(&Seen {
            input: "request-1".into(),
            name: "alpha".into(),
            attempt: 1,
            run: id
        })
    );
    assert_eq!(
        report.get(b),
        Some(&Seen {
            input: "request-1".into(),
            name: "beta".into(),
            attempt: 1,
            run: id
        })
    );
}

/// A logical clock shared by the tasks of one graph: each task takes a tick when it starts
/// and when it ends, so "started after its upstreams ended" needs no wall clock.
#[derive(Default)]
struct Ticks {
    clock: AtomicUsize,
    spans: Mutex<HashMap<String, (usize, usize, Duration, Duration)>>,
}

/// A layered DAG where every node records its span from inside its task.
/// On the paused clock the tasks sleep; otherwise they only yield (no real sleeps).
fn recorded_dag(
    ticks: &Arc<Ticks>,
    origin: Instant,
    paused: bool,
) -> (Graph<()>, Vec<(String, Vec<String>)>) {
    let mut g = Graph::<()>::builder();
    let mut nodes: Vec<Node<u64>> = Vec::new();
    let mut edges = Vec::new();
    for i in 0..40_usize {
        // Upstreams: a deterministic pseudo-random subset of earlier nodes.
        let ups: Vec<usize> = (0..i)
            .filter(|j| (i * 7 + j * 13) % 5 == 0)
            .take(4)
            .collect();
        let handles: Vec<Node<u64>> = ups.iter().map(|&j| nodes[j]).collect();
        let name = format!("n{i}");
        edges.push((name.clone(), ups.iter().map(|j| format!("n{j}")).collect()));
        let ticks = Arc::clone(ticks);
        let sleep_ms = ((i * 37) % 23) as u64;
        let node = g
            .node(name.clone())
            .after(handles)
            .task(move |_ctx, ups: Vec<Arc<u64>>| {
                let ticks = Arc::clone(&ticks);
                let name = name.clone();
                async move {
                    let t0 = ticks.clock.fetch_add(1, Ordering::SeqCst);
                    let start = origin.elapsed();
                    if paused {
                        sleep(ms(sleep_ms)).await;
                    } else {
                        for _ in 0..sleep_ms % 5 {
                            tokio::task::yield_now().await;
                        }
                    }
                    let end = origin.elapsed();
                    let t1 = ticks.clock.fetch_add(1, Ordering::SeqCst);
                    ticks
                        .spans
                        .lock()
                        .expect("lock")
                        .insert(name, (t0, t1, start, end));
                    Ok::<_, BoxError>(ups.iter().map(|u| **u).sum::<u64>() + 1)
                }
            });
        nodes.push(node);
    }
    (g.build().expect("valid"), edges)
}

fn check_no_early_start(report: &Report, ticks: &Ticks, edges: &[(String, Vec<String>)]) {
    let spans = ticks.spans.lock().expect("lock");
    assert_eq!(spans.len(), edges.len(), "every task ran once");
    for (name, ups) in edges {
        let node = report.by_name(name).expect("node");
        assert_eq!(node.outcome(), Outcome::Succeeded);
        let start = node.start().expect("started");
        let (t0, _, _, _) = spans[name];
        for up in ups {
            let upr = report.by_name(up).expect("upstream");
            assert!(
                start >= upr.end(),
                "report: {name} started at {start:?} before {up} ended at {:?}",
                upr.end()
            );
            let (_, up_t1, _, _) = spans[up];
            assert!(
                t0 > up_t1,
                "tasks: {name} started (tick {t0}) before {up} ended (tick {up_t1})"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn no_node_starts_before_its_upstreams_end_paused_clock() {
    let ticks = Arc::new(Ticks::default());
    let origin = Instant::now();
    let (graph, edges) = recorded_dag(&ticks, origin, true);
    let report = graph.run(()).await.expect("run");
    check_no_early_start(&report, &ticks, &edges);
    // On the paused clock the times seen inside the tasks are the report's, exactly.
    let spans = ticks.spans.lock().expect("lock");
    for (name, ups) in &edges {
        let node = report.by_name(name).expect("node");
        let (_, _, start, end) = spans[name];
        assert_eq!(node.start(), Some(start), "{name}");
        assert_eq!(node.end(), end, "{name}");
        let last_up = ups
            .iter()
            .map(|u| report.by_name(u).expect("up").end())
            .max()
            .unwrap_or(Duration::ZERO);
        assert_eq!(
            start, last_up,
            "{name} starts the moment its last upstream ends"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_node_starts_before_its_upstreams_end_multi_thread() {
    // Tasks only yield; the checks use logical ticks and the report's own times, never a
    // wall-clock bound.
    for _ in 0..20 {
        let ticks = Arc::new(Ticks::default());
        let (graph, edges) = recorded_dag(&ticks, Instant::now(), false);
        let report = graph.run(()).await.expect("run");
        check_no_early_start(&report, &ticks, &edges);
    }
}

#[tokio::test(start_paused = true)]
async fn large_chain_and_large_fan_out_fan_in_complete() {
    // A chain of 10 000 nodes.
    let mut g = Graph::<()>::builder();
    let mut prev = g
        .node("c0")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(0_u64) });
    for i in 1..10_000 {
        prev = g
            .node(format!("c{i}"))
            .after(prev)
            .task(|_ctx, p: Arc<u64>| async move { Ok::<_, BoxError>(*p + 1) });
    }
    let report = g.build().expect("valid").run(()).await.expect("run");
    assert_eq!(report.get(prev), Some(&9_999));
    assert_eq!(report.counts().succeeded, 10_000);

    // One root, 10 000 nodes after it, one node after all of them.
    let mut g = Graph::<()>::builder();
    let root = g.node("root").task(|_ctx, ()| async {
        sleep(ms(1)).await;
        Ok::<_, BoxError>(1_u64)
    });
    let fan: Vec<Node<u64>> = (0..10_000_u64)
        .map(|i| {
            g.node(format!("f{i}"))
                .after(root)
                .task(move |_ctx, r: Arc<u64>| async move {
                    sleep(ms(i % 10)).await;
                    Ok::<_, BoxError>(*r + i)
                })
        })
        .collect();
    let sink = g
        .node("sink")
        .after(fan)
        .task(|_ctx, all: Vec<Arc<u64>>| async move {
            Ok::<_, BoxError>(all.iter().map(|v| **v).sum::<u64>())
        });
    let report = g.build().expect("valid").run(()).await.expect("run");
    assert_eq!(report.get(sink), Some(&(10_000 + 9_999 * 10_000 / 2)));
    assert_eq!(report.makespan(), ms(10));
    assert_eq!(report.node(sink).and_then(|n| n.start()), Some(ms(10)));
}

#[tokio::test(start_paused = true)]
async fn a_task_can_run_another_graph_and_propagate_its_error() {
    let mut inner = Graph::<u32>::builder();
    let double = inner.node("double").task(|ctx, ()| async move {
        sleep(ms(100)).await;
        if *ctx.input() == 0 {
            return Err("zero".into());
        }
        Ok::<_, BoxError>(*ctx.input() * 2)
    });
    inner.failure_mode(baton_graph::FailureMode::FailAll);
    let inner = inner.build().expect("valid");

    let mut g = Graph::<u32>::builder();
    let outer = g.node("outer").task(move |ctx, ()| {
        let inner = inner.clone();
        async move {
            sleep(ms(10)).await;
            // A failed inner run converts into the task's error with `?`.
            let report = inner.run(*ctx.input()).await?;
            Ok::<_, BoxError>(report.get(double).copied())
        }
    });
    let graph = g.build().expect("valid");
    let report = graph.run(21).await.expect("run");
    assert_eq!(report.get(outer), Some(&Some(42)));
    assert_eq!(report.makespan(), ms(110));

    let report = graph.run(0).await.expect("preserve-partial");
    let node = report.node(outer).expect("outer");
    assert_eq!(node.outcome(), Outcome::Failed);
    assert_eq!(
        node.message().as_deref(),
        Some("run failed: node `double` failed (1 failed, 0 skipped, 0 cancelled)")
    );
    assert_eq!(node.end(), ms(110));
}

/// Ready nodes wait in a queue that a few drivers drain; a node whose attempt waits must not
/// hold up the nodes queued behind it. Here the first root waits for the second one: run one
/// after the other, they would never end.
#[tokio::test(start_paused = true)]
async fn a_waiting_node_holds_up_no_node_queued_behind_it() {
    let signal = Arc::new(tokio::sync::Notify::new());
    let mut g = Graph::<()>::builder();
    let wait = Arc::clone(&signal);
    g.node("waits").task(move |_ctx, ()| {
        let wait = Arc::clone(&wait);
        async move {
            wait.notified().await;
            Ok::<_, BoxError>(())
        }
    });
    for i in 0..100 {
        g.node(format!("quick{i}"))
            .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    }
    let fire = Arc::clone(&signal);
    g.node("signals").task(move |_ctx, ()| {
        let fire = Arc::clone(&fire);
        async move {
            sleep(ms(5)).await;
            fire.notify_one();
            Ok::<_, BoxError>(())
        }
    });
    let graph = g.build().expect("valid");
    let report = tokio::time::timeout(ms(1_000), graph.run(()))
        .await
        .expect("the waiting root does not hold up the others")
        .expect("run");
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.makespan(), ms(5));
}

/// A task that counts how often it is polled, yielding between polls (deferred, like every
/// `yield_now`); started and waiting in tokio's queue when this returns.
async fn ticker() -> (Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    let ticks = Arc::new(AtomicUsize::new(0));
    let handle = {
        let ticks = Arc::clone(&ticks);
        tokio::spawn(async move {
            loop {
                ticks.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
            }
        })
    };
    tokio::task::yield_now().await;
    (ticks, handle)
}

/// Runs `graph`, whose tasks each push the ticker's count to `seen` as they run, beside a
/// ticker on this one-thread runtime; returns how often the ticker ran during the run.
async fn ticks_during(build: impl FnOnce(&Arc<AtomicUsize>, &Seen) -> Graph<()>) -> usize {
    let (ticks, ticker) = ticker().await;
    let seen: Seen = Arc::new(Mutex::new(Vec::new()));
    let graph = build(&ticks, &seen);
    let report = graph.run(()).await.expect("run");
    ticker.abort();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), report.len(), "every node ran once");
    seen.last().unwrap() - seen.first().unwrap()
}

type Seen = Arc<Mutex<Vec<usize>>>;

/// A run of many nodes that end at once does not keep its worker: other tasks on a
/// one-thread runtime get polled while it runs (the run's future starts at most 128 nodes
/// per poll).
#[tokio::test(start_paused = true)]
async fn a_long_queue_of_ready_nodes_yields_to_other_tasks() {
    let ticks = ticks_during(|ticks, seen| {
        let mut g = Graph::<()>::builder();
        for i in 0..1_000 {
            let (ticks, seen) = (Arc::clone(ticks), Arc::clone(seen));
            g.node(format!("n{i}")).task(move |_ctx, ()| {
                seen.lock().unwrap().push(ticks.load(Ordering::SeqCst));
                std::future::ready(Ok::<_, BoxError>(()))
            });
        }
        g.build().expect("valid")
    })
    .await;
    assert!(ticks >= 1_000 / 128 - 1, "the ticker ran {ticks} times");
}

/// The same for a long chain run inline by one driver.
#[tokio::test(start_paused = true)]
async fn a_long_chain_yields_to_other_tasks() {
    let ticks = ticks_during(|ticks, seen| {
        let mut g = Graph::<()>::builder();
        let mut prev: Option<Node<()>> = None;
        for i in 0..5_000 {
            let (ticks, seen) = (Arc::clone(ticks), Arc::clone(seen));
            let body = move || {
                seen.lock().unwrap().push(ticks.load(Ordering::SeqCst));
                std::future::ready(Ok::<_, BoxError>(()))
            };
            prev = Some(match prev {
                None => g.node(format!("c{i}")).task(move |_ctx, ()| body()),
                Some(p) => g
                    .node(format!("c{i}"))
                    .after(p)
                    .task(move |_ctx, _p| body()),
            });
        }
        g.build().expect("valid")
    })
    .await;
    assert!(ticks >= 5_000 / 128 - 1, "the ticker ran {ticks} times");
}

/// A runtime dropped while nodes wait in the run's queue (no driver has polled yet): they end
/// `Cancelled`, and the run, polled elsewhere, resolves with every node accounted for.
#[test]
fn a_runtime_dropped_with_nodes_still_queued_ends_them_cancelled() {
    const N: usize = 500;
    let mut g = Graph::<()>::builder();
    for i in 0..N {
        g.node(format!("n{i}"))
            .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    }
    let graph = g.build().expect("valid");
    let mut run = graph.run(());
    let first = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    first.block_on(async {
        // Starts the run: the run's future runs 128 nodes, its budget per poll, then hands
        // the rest, queued, to a driver spawned and not yet polled.
        assert!(futures::poll!(&mut run).is_pending());
    });
    drop(first);
    let second = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime");
    let err = second
        .block_on(async { tokio::time::timeout(Duration::from_secs(10), run).await })
        .expect("the run resolves")
        .expect_err("the run was cancelled");
    let baton_graph::RunError::Cancelled { report, .. } = err else {
        panic!("expected a cancelled run, got {err}");
    };
    let counts = report.counts();
    assert_eq!(report.len(), N);
    assert!(counts.cancelled >= N - 128, "{report}");
    assert_eq!(counts.succeeded + counts.cancelled, N, "{report}");
}

/// A root that a driver takes from the queue right after another node ended starts at that
/// end only when nothing but bookkeeping ran in between. Here root `a` fails, so its
/// downstream `b` is skipped, and `b`'s callback takes 30 ms: root `r`, taken next, starts
/// at 30 ms, and its 50 ms timeout leaves its 40 ms attempt alone (it cut it at 50 ms,
/// counted from 0, when `r` was stamped with `a`'s end).
#[tokio::test(start_paused = true)]
async fn a_root_taken_after_a_skip_callback_starts_after_it() {
    for mode in [
        baton_graph::run::StartMode::Inline,
        baton_graph::run::StartMode::Spread,
    ] {
        let mut g = Graph::<()>::builder();
        let a = g
            .node("a")
            .task(|_ctx, ()| async { Err::<(), BoxError>("a fails".into()) });
        let _b: Node<()> = g
            .node("b")
            .after(a)
            .on_complete(|_report| {
                // A slow callback: 30 ms pass on the paused clock before it returns.
                let _ = futures::FutureExt::now_or_never(tokio::time::advance(ms(30)));
            })
            .task(|_ctx, _a| async { Ok::<_, BoxError>(()) });
        let _r: Node<()> = g.node("r").timeout(ms(50)).task(|_ctx, ()| async {
            sleep(ms(40)).await;
            Ok::<_, BoxError>(())
        });
        let graph = g.build().expect("valid");
        let options = baton_graph::RunOptions::new()
            .start_mode(mode)
            .failure_mode(baton_graph::FailureMode::PreservePartial);
        let report = graph.run_with((), options).await.expect("run");
        let r = report.by_name("r").expect("r");
        assert_eq!(r.outcome(), Outcome::Succeeded, "{mode:?}: {report:?}");
        assert_eq!(r.start(), Some(ms(30)), "{mode:?}: start of r");
        assert_eq!(r.end(), ms(70), "{mode:?}: end of r");
    }
}

/// A graph's state reaches every task without a clone per closure; one per type (the
/// latest wins); a task asking for a state the graph lacks fails its node, naming the type.
#[tokio::test]
async fn tasks_share_the_graphs_state_by_type() {
    struct Api(&'static str);
    struct Limits(u32);
    let mut g = Graph::<u32>::builder();
    g.state(Api("old"))
        .state(Api("http://stock"))
        .state(Limits(3));
    let url = g.node("url").task(|ctx, ()| async move {
        let (api, limits) = (ctx.state::<Api>(), ctx.state::<Limits>());
        Ok::<_, BoxError>(format!("{}/{}?max={}", api.0, ctx.input(), limits.0))
    });
    let missing = g.node("missing").task(|ctx, ()| async move {
        assert!(ctx.try_state::<String>().is_none());
        Ok::<_, BoxError>(ctx.state::<String>().len())
    });
    let report = g.build().unwrap().run(42).await.unwrap();
    assert_eq!(
        report.get(url).map(String::as_str),
        Some("http://stock/42?max=3")
    );
    let message = report.node(missing).unwrap().message().unwrap_or_default();
    assert!(
        message.contains("the graph has no state of type `alloc::string::String`"),
        "{message}"
    );
}
