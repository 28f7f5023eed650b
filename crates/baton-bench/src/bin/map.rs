//! Mapping a list: a baton map node against `FuturesUnordered` + `Semaphore` written by
//! hand, over the same no-op item body, at the same concurrency.
//!
//! ```text
//! cargo run --release -p baton-bench --bin map                       # timings and memory
//! cargo run --release -p baton-bench --bin map -- --profile IMP N R  # for callgrind
//! ```
//!
//! `IMP` is `baton` or `hand`, or `baton-timeout` / `hand-timeout` (a 1 s timeout per
//! item: the onion's path, against `tokio::time::timeout`); `N` items per run; `R` runs. Timings alternate the two
//! implementations and report medians; memory is the peak of live heap bytes during one
//! run over the bytes live before it, per item (a counting allocator).

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use baton_graph::{BoxError, Graph, Node};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::Semaphore;

/// Counts live heap bytes and their peak.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts sizes.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live =
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed) + layout.size() as isize;
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Items running at once, in both implementations (baton's default).
const CONCURRENCY: usize = baton_graph::map::DEFAULT_MAP_CONCURRENCY;

/// The item body: a no-op that ends on its first poll.
async fn body(n: u64) -> Result<u64, BoxError> {
    Ok(black_box(n))
}

fn baton_graph(items: usize) -> (Graph<()>, Node<Vec<u64>>) {
    graph_with(items, false)
}

/// The map node, with a 1 s timeout per item attempt when `timeout` (the onion's path).
fn graph_with(items: usize, timeout: bool) -> (Graph<()>, Node<Vec<u64>>) {
    let list: Arc<Vec<u64>> = Arc::new((0..items as u64).collect());
    let mut g = Graph::<()>::builder();
    let source = g.node("list").task(move |_ctx, ()| {
        let list = Vec::clone(&list);
        async move { Ok::<_, BoxError>(list) }
    });
    let node = g.node("map").after(source).concurrency(CONCURRENCY);
    let node = if timeout {
        node.timeout(Duration::from_secs(1))
    } else {
        node
    };
    let mapped = node.map(|_item, n: u64| body(n));
    (g.build().expect("a valid graph"), mapped)
}

/// The same by hand: the list made as the graph's root makes it, one future per item in a
/// `FuturesUnordered`, each holding a permit of a `Semaphore` of `CONCURRENCY`, results put
/// back in input order.
async fn by_hand(list: &Arc<Vec<u64>>, timeout: bool) -> Result<Vec<u64>, BoxError> {
    let items = Vec::clone(list);
    let sem = Semaphore::new(CONCURRENCY);
    let mut running: FuturesUnordered<_> = items
        .into_iter()
        .enumerate()
        .map(|(i, n)| {
            let sem = &sem;
            async move {
                let _permit = sem.acquire().await.map_err(|e| Box::new(e) as BoxError)?;
                if timeout {
                    let v = tokio::time::timeout(Duration::from_secs(1), body(n)).await??;
                    return Ok((i, v));
                }
                body(n).await.map(|v| (i, v))
            }
        })
        .collect();
    let mut out = vec![0; list.len()];
    while let Some(done) = running.next().await {
        let (i, v) = done?;
        out[i] = v;
    }
    Ok(out)
}

async fn run_baton(graph: &Graph<()>, node: Node<Vec<u64>>) {
    let report = graph.run(()).await.expect("the run");
    black_box(report.get(node).map(Vec::len));
}

async fn run_hand(list: &Arc<Vec<u64>>) {
    black_box(by_hand(list, false).await.expect("the items").len());
}

/// Live bytes at the peak of one run, above those live before it, per item.
async fn memory(imp: &str, items: usize) -> f64 {
    let (graph, node) = baton_graph(items);
    let list = Arc::new((0..items as u64).collect::<Vec<u64>>());
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    match imp {
        "baton" => run_baton(&graph, node).await,
        _ => run_hand(&list).await,
    }
    (PEAK.load(Ordering::Relaxed) - before) as f64 / items as f64
}

async fn timings(items: usize, samples: usize) {
    let (graph, node) = baton_graph(items);
    let list = Arc::new((0..items as u64).collect::<Vec<u64>>());
    let mut baton = Vec::new();
    let mut hand = Vec::new();
    for s in 0..samples * 2 {
        let t0 = Instant::now();
        let runs = 20;
        for _ in 0..runs {
            if s % 2 == 0 {
                run_baton(&graph, node).await;
            } else {
                run_hand(&list).await;
            }
        }
        let per_item = t0.elapsed().as_secs_f64() * 1e9 / (runs * items) as f64;
        if s % 2 == 0 {
            baton.push(per_item)
        } else {
            hand.push(per_item)
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (b, h) = (median(&mut baton), median(&mut hand));
    println!("| items | baton ns/item | hand ns/item | baton/hand | baton B/item | hand B/item |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| {items} | {b:.1} | {h:.1} | {:.2}x | {:.0} | {:.0} |",
        b / h,
        memory("baton", items).await,
        memory("hand", items).await
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    match args.first().map(String::as_str) {
        Some("--profile") => {
            let imp = args.get(1).cloned().unwrap_or_else(|| "baton".into());
            let items: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(10_000);
            let runs: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(1);
            rt.block_on(async {
                let timeout = imp.ends_with("-timeout");
                let (graph, node) = graph_with(items, timeout);
                let list = Arc::new((0..items as u64).collect::<Vec<u64>>());
                for _ in 0..runs {
                    if imp.starts_with("baton") {
                        run_baton(&graph, node).await;
                    } else {
                        black_box(by_hand(&list, timeout).await.expect("the items").len());
                    }
                }
            });
        }
        _ => {
            let samples = 7;
            rt.block_on(timings(10_000, samples));
        }
    }
}
