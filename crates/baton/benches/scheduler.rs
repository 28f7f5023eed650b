//! Criterion benches of the scheduler's hot paths, each beside a hand-written tokio baseline
//! of the same shape measured in the same run (`<group>/baton` vs `<group>/tokio`):
//!
//! 1. `order`: one run of the 5-node order graph (user ∥ sku → stock → promo → notify) with
//!    no-op tasks, report included, in the default start mode (`Inline`) and with
//!    `StartMode::Spread`;
//!    baselines: `tokio::join!` inline, and with `user` and `sku` spawned.
//! 2. `chain_10k`: a chain of 10 000 no-op nodes.
//! 3. `fan_10k`: one root → 10 000 independent nodes → one sink over a `Vec<Node<_>>`.
//! 4. `policy_1k`: a 1 000-node fan-out whose nodes have timeout + retry + breaker + fallback
//!    configured but never triggered, beside the same fan-out of bare nodes (the policy
//!    path's cost); `policy_chain_1k` the same as a chain; `policy_wait_chain_1k` that chain
//!    with tasks that wait (yield twice), where each policy node's timeout is a timer.
//! 5. `build_10k`: building (and dropping) a 10 000-node chain, names included; beside it the
//!    tokio baseline's build (downstream lists and in-degrees). Build and drop dominate the
//!    1M-node "build, run, drop" figures.
//!
//! Graphs are built once, outside the measured loop. Every measured loop runs inside a task
//! on a multi-thread runtime with 2 workers (the bench thread only waits), timed with
//! `iter_custom`. The tokio baseline for graphs is the obvious join-counter code: one atomic
//! counter per node, a task spawned per node when its counter reaches zero.
//!
//! `cargo bench -p baton-graph --bench scheduler` (add `-- --quick` for a fast pass).

use std::fmt::Write as _;
use std::future::{Ready, ready};
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use baton_graph::{
    BoxError, CircuitBreaker, Ctx, Fallback, Graph, Node, Retry, RunOptions, run::StartMode,
};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tokio::runtime::Runtime;
use tokio::sync::Notify;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Runs `iters` iterations of `f` inside a task on `rt`, and returns their time.
fn timed<F, Fut>(rt: &Runtime, iters: u64, f: F) -> Duration
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    rt.block_on(rt.spawn(async move {
        let start = Instant::now();
        for _ in 0..iters {
            f().await;
        }
        start.elapsed()
    }))
    .expect("bench task")
}

/// The no-op task body.
fn noop<V>(_ctx: Ctx<()>, _values: V) -> Ready<Result<(), BoxError>> {
    ready(Ok(()))
}

async fn run_baton(graph: &Graph<()>) {
    let report = graph.run(()).await.expect("clean run");
    black_box(report.len());
}

// ---------------------------------------------------------------------------------------
// Hand-written tokio baseline: join counters, a spawn per ready node.

/// A DAG as downstream lists plus in-degrees.
struct Plan {
    downs: Vec<Vec<u32>>,
    in_degree: Vec<u32>,
    roots: Vec<u32>,
}

impl Plan {
    fn new(ups: &[Vec<u32>]) -> Arc<Plan> {
        let mut downs = vec![Vec::new(); ups.len()];
        for (i, list) in ups.iter().enumerate() {
            for &u in list {
                downs[u as usize].push(i as u32);
            }
        }
        Arc::new(Plan {
            downs,
            in_degree: ups.iter().map(|l| l.len() as u32).collect(),
            roots: (0..ups.len() as u32)
                .filter(|&i| ups[i as usize].is_empty())
                .collect(),
        })
    }
}

struct CounterRun {
    plan: Arc<Plan>,
    pending: Box<[AtomicU32]>,
    left: AtomicUsize,
    done: Notify,
}

fn spawn_node(run: Arc<CounterRun>, id: u32) {
    tokio::spawn(async move {
        black_box(id); // the no-op body
        for &d in &run.plan.downs[id as usize] {
            if run.pending[d as usize].fetch_sub(1, Ordering::AcqRel) == 1 {
                spawn_node(Arc::clone(&run), d);
            }
        }
        if run.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            run.done.notify_one();
        }
    });
}

async fn run_tokio(plan: Arc<Plan>) {
    let run = Arc::new(CounterRun {
        pending: plan.in_degree.iter().map(|&d| AtomicU32::new(d)).collect(),
        left: AtomicUsize::new(plan.in_degree.len()),
        done: Notify::new(),
        plan,
    });
    for &r in &run.plan.roots {
        spawn_node(Arc::clone(&run), r);
    }
    run.done.notified().await;
}

fn chain_ups(n: usize) -> Vec<Vec<u32>> {
    (0..n)
        .map(|i| if i == 0 { vec![] } else { vec![i as u32 - 1] })
        .collect()
}

/// Root (0) → `width` nodes → sink (when `sink`).
fn fan_ups(width: usize, sink: bool) -> Vec<Vec<u32>> {
    let mut ups = vec![Vec::new()];
    ups.extend((0..width).map(|_| vec![0]));
    if sink {
        ups.push((1..=width as u32).collect());
    }
    ups
}

// ---------------------------------------------------------------------------------------

fn order(c: &mut Criterion) {
    let rt = runtime();
    let mut g = Graph::<()>::builder();
    let user: Node<()> = g.node("user").task(noop);
    let sku: Node<()> = g.node("sku").task(noop);
    let stock: Node<()> = g.node("stock").after((user, sku)).task(noop);
    let promo: Node<()> = g.node("promo").after(stock).task(noop);
    let notify: Node<()> = g.node("notify").after(promo).task(noop);
    let graph = g.build().expect("valid graph");

    let mut group = c.benchmark_group("order");
    group.throughput(Throughput::Elements(1));
    group.bench_function("baton", |b| {
        b.iter_custom(|iters| {
            let graph = graph.clone();
            timed(&rt, iters, move || {
                let graph = graph.clone();
                async move {
                    let report = graph.run(()).await.expect("clean run");
                    black_box(report.get(notify));
                }
            })
        })
    });
    let spread = RunOptions::new().start_mode(StartMode::Spread);
    group.bench_function("baton_spread", |b| {
        b.iter_custom(|iters| {
            let (graph, spread) = (graph.clone(), spread.clone());
            timed(&rt, iters, move || {
                let (graph, spread) = (graph.clone(), spread.clone());
                async move {
                    let report = graph.run_with((), spread).await.expect("clean run");
                    black_box(report.get(notify));
                }
            })
        })
    });
    group.bench_function("tokio_spawn", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, || async {
                let (u, s) = tokio::join!(
                    tokio::spawn(async { black_box(0) }),
                    tokio::spawn(async { black_box(1) })
                );
                black_box((u.expect("user"), s.expect("sku")));
                black_box(async { 2 }.await);
                black_box(async { 3 }.await);
                black_box(async { 4 }.await);
            })
        })
    });
    group.bench_function("tokio_join", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, || async {
                let (u, s) = tokio::join!(async { black_box(0) }, async { black_box(1) });
                black_box((u, s));
                black_box(async { 2 }.await);
                black_box(async { 3 }.await);
                black_box(async { 4 }.await);
            })
        })
    });
    group.finish();
}

fn chain(c: &mut Criterion) {
    const N: usize = 10_000;
    let rt = runtime();
    let mut g = Graph::<()>::builder();
    let mut prev: Node<()> = g.node("n0").task(noop);
    for i in 1..N {
        prev = g.node(format!("n{i}")).after(prev).task(noop);
    }
    let graph = g.build().expect("valid graph");
    let plan = Plan::new(&chain_ups(N));

    let mut group = c.benchmark_group("chain_10k");
    group.throughput(Throughput::Elements(N as u64));
    group.sample_size(20);
    group.bench_function("baton", |b| {
        b.iter_custom(|iters| {
            let graph = graph.clone();
            timed(&rt, iters, move || {
                let graph = graph.clone();
                async move { run_baton(&graph).await }
            })
        })
    });
    group.bench_function("tokio", |b| {
        b.iter_custom(|iters| {
            let plan = Arc::clone(&plan);
            timed(&rt, iters, move || run_tokio(Arc::clone(&plan)))
        })
    });
    group.finish();
}

fn fan(c: &mut Criterion) {
    const N: usize = 10_000;
    let rt = runtime();
    let mut g = Graph::<()>::builder();
    let root: Node<()> = g.node("root").task(noop);
    let mids: Vec<Node<()>> = (0..N)
        .map(|i| g.node(format!("n{i}")).after(root).task(noop))
        .collect();
    let _sink: Node<()> = g.node("sink").after(mids).task(noop);
    let graph = g.build().expect("valid graph");
    let plan = Plan::new(&fan_ups(N, true));

    let mut group = c.benchmark_group("fan_10k");
    group.throughput(Throughput::Elements(N as u64 + 2));
    group.sample_size(20);
    group.bench_function("baton", |b| {
        b.iter_custom(|iters| {
            let graph = graph.clone();
            timed(&rt, iters, move || {
                let graph = graph.clone();
                async move { run_baton(&graph).await }
            })
        })
    });
    group.bench_function("tokio", |b| {
        b.iter_custom(|iters| {
            let plan = Arc::clone(&plan);
            timed(&rt, iters, move || run_tokio(Arc::clone(&plan)))
        })
    });
    group.finish();
}

fn policy(c: &mut Criterion) {
    policy_shape(c, "policy_1k", false, false);
    policy_shape(c, "policy_chain_1k", true, false);
    policy_shape(c, "policy_wait_chain_1k", true, true);
}

/// A task that waits: it yields twice (`Pending`, woken at once), as a node whose I/O comes
/// back at once.
async fn waiting<V>(_ctx: Ctx<()>, _values: V) -> Result<(), BoxError> {
    tokio::task::yield_now().await;
    tokio::task::yield_now().await;
    Ok(())
}

/// 1 000 nodes with timeout + retry + breaker + fallback configured but never triggered,
/// against the same nodes bare: a fan-out from one root sharing one breaker (`chain` false)
/// or a chain (the policy fast path without spawns); with `wait`, tasks that wait.
fn policy_shape(c: &mut Criterion, name: &str, chain: bool, wait: bool) {
    const N: usize = 1_000;
    let rt = runtime();
    let build = |policies: bool| {
        let mut g = Graph::<()>::builder();
        let breaker = CircuitBreaker::builder("svc")
            .consecutive_failures(5)
            .build()
            .expect("valid breaker");
        let root: Node<()> = g.node("root").task(noop);
        let mut prev = root;
        for i in 0..N {
            let node = g
                .node(format!("n{i}"))
                .after(if chain { prev } else { root });
            let node = if policies {
                node.timeout(Duration::from_secs(1))
                    .retry(Retry::new(3))
                    .breaker(&breaker)
                    .fallback(Fallback::value(()))
            } else {
                node
            };
            prev = if wait {
                node.task(waiting)
            } else {
                node.task(noop)
            };
        }
        g.build().expect("valid graph")
    };
    let bare = build(false);
    let guarded = build(true);
    let plan = Plan::new(&if chain {
        chain_ups(N + 1)
    } else {
        fan_ups(N, false)
    });

    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(N as u64 + 1));
    for (name, graph) in [("baton_bare", bare), ("baton_policies", guarded)] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let graph = graph.clone();
                timed(&rt, iters, move || {
                    let graph = graph.clone();
                    async move { run_baton(&graph).await }
                })
            })
        });
    }
    // (The baseline's tasks do not wait: it is shown beside no-op nodes only.)
    if !wait {
        group.bench_function("tokio", |b| {
            b.iter_custom(|iters| {
                let plan = Arc::clone(&plan);
                timed(&rt, iters, move || run_tokio(Arc::clone(&plan)))
            })
        });
    }
    group.finish();
}

fn build(c: &mut Criterion) {
    const N: usize = 10_000;
    let mut group = c.benchmark_group("build_10k");
    group.throughput(Throughput::Elements(N as u64));
    group.sample_size(20);
    group.bench_function("baton", |b| {
        // Names are written into one reused buffer: `node` copies a `&str`, so the figure is
        // the graph's cost, not a `String` allocated per name.
        let mut name = String::new();
        b.iter(|| {
            let mut g = Graph::<()>::builder();
            let mut prev: Node<()> = g.node("n0").task(noop);
            for i in 1..N {
                name.clear();
                write!(name, "n{i}").expect("writing to a String does not fail");
                prev = g.node(&name).after(prev).task(noop);
            }
            g.build().expect("valid graph")
        })
    });
    group.bench_function("tokio", |b| b.iter(|| Plan::new(&chain_ups(N))));
    group.finish();
}

criterion_group!(benches, order, chain, fan, policy, build);
criterion_main!(benches);
