//! What one run of a small graph allocates: the per-run cost users pay on every request.
//! A counting global allocator (this test binary only) counts the allocations made on the
//! test's thread while a current-thread runtime runs the order graph many times.

#![allow(unsafe_code)] // (a counting global allocator: forwards to `System`)

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use baton_graph::{BoxError, Graph, Node, RunOptions, run::StartMode};

/// The system allocator, counting the allocations made on each thread.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    static BYTES: Cell<u64> = const { Cell::new(0) };
}

/// Counts one allocation of `size` bytes on this thread.
fn count(size: usize) {
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
    let _ = BYTES.try_with(|n| n.set(n.get() + size as u64));
}

// SAFETY: every call is forwarded to the system allocator unchanged; the count is a
// const-initialized thread-local `Cell`, which neither allocates nor registers a destructor.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

fn bytes() -> u64 {
    BYTES.with(Cell::get)
}

/// An attempt that returns `Pending` once (waking its task at once), then `()`.
struct WaitOnce(bool);

impl Future for WaitOnce {
    type Output = Result<(), BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if std::mem::replace(&mut self.0, true) {
            return Poll::Ready(Ok(()));
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// The order graph whose two roots wait once each (as two calls to other services would).
fn waiting_order() -> Graph<()> {
    let mut g = Graph::<()>::builder();
    let user = g.node("user").task(|_ctx, ()| WaitOnce(false));
    let sku = g.node("sku").task(|_ctx, ()| WaitOnce(false));
    let stock: Node<()> = g
        .node("stock")
        .after((user, sku))
        .task(|_ctx, _ups| async { Ok::<_, BoxError>(()) });
    g.node("notify")
        .after(stock)
        .task(|_ctx, _ups| async { Ok::<_, BoxError>(()) });
    g.build().expect("valid")
}

/// A runtime of `workers` worker threads; current-thread for 0.
fn runtime(workers: usize) -> tokio::runtime::Runtime {
    match workers {
        0 => tokio::runtime::Builder::new_current_thread().build(),
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .build(),
    }
    .expect("runtime")
}

/// What a run of `graph` allocates on a current-thread runtime: allocations and bytes, as
/// most of 1 000 runs after 100 allocate. The most frequent count, not the mean: the
/// runtime now and then grows a buffer of its own during a run (a few 40-byte
/// allocations in 1 000 runs on a loaded machine), which is not the run's cost.
fn per_run(graph: &Graph<()>, options: &RunOptions) -> (f64, f64) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    per_run_on(&rt, graph, options)
}

/// [`per_run`] on `rt`.
fn per_run_on(rt: &tokio::runtime::Runtime, graph: &Graph<()>, options: &RunOptions) -> (f64, f64) {
    rt.block_on(tokio::task::unconstrained(async {
        for _ in 0..100 {
            graph.run_with((), options.clone()).await.expect("run");
        }
        let mut counts = Vec::with_capacity(1_000);
        for _ in 0..1_000 {
            let (before, before_bytes) = (allocations(), bytes());
            graph.run_with((), options.clone()).await.expect("run");
            counts.push((allocations() - before, bytes() - before_bytes));
        }
        let (a, b) = most_frequent(counts);
        (a as f64, b as f64)
    }))
}

/// The value that occurs most often in `counts` (the smallest of those tied).
fn most_frequent<C: Copy + Ord + std::hash::Hash>(counts: Vec<C>) -> C {
    let mut seen: std::collections::HashMap<C, u32> = std::collections::HashMap::new();
    for c in counts {
        *seen.entry(c).or_default() += 1;
    }
    let (c, _) = seen
        .into_iter()
        .max_by_key(|&(c, n)| (n, std::cmp::Reverse(c)))
        .expect("at least one run");
    c
}

/// A run whose two roots wait once. Spread, on this one-thread runtime, its first driver
/// moves each root to a task of its own (tokio allocates one per task, and each its
/// attempt box): 5 allocations, 1 072 bytes. Inline (the default), the two drivers join
/// the run's future instead, on the list they arrive on, which becomes the list the run
/// polls them in (one allocation for both), and the attempt boxes: 4 allocations, 1 040
/// bytes. The waker the run polls them with, which lets a wake-up during the run's poll
/// wake no task, is one an earlier run of the graph left; 16 bytes of the run's state
/// keep it, for a cancel, which wakes it instead of a waker per waiting node, and for a
/// later run. The attempts are small, so their boxes are made and freed each run: see the
/// large ones' test below. Exact: a change either way fails here (update this test and
/// the benchmark's results).
#[test]
fn a_run_whose_roots_wait_allocates_this_much() {
    let graph = waiting_order();
    let inline = per_run(&graph, &RunOptions::new());
    let spread = per_run(&graph, &RunOptions::new().start_mode(StartMode::Spread));
    assert_eq!(
        inline,
        (4.0, 1040.0),
        "allocations and bytes per run, inline"
    );
    assert_eq!(
        spread,
        (5.0, 1072.0),
        "allocations and bytes per run, spread"
    );
}

/// A graph of `roots` roots that wait once each, with no downstream: a fan-out.
fn waiting_roots(roots: usize) -> Graph<()> {
    let mut g = Graph::<()>::builder();
    for i in 0..roots {
        let _: Node<()> = g.node(format!("root {i}")).task(|_ctx, ()| WaitOnce(false));
    }
    g.build().expect("valid")
}

/// A run whose ten roots wait once, inline. The first eight drivers join the run's
/// future on the list they arrive on; the two past them go to a set that gives each a
/// place, with a waker of its own. The places, and the set's lists of place numbers, are
/// those an earlier run of the graph left with the run's waker: the run allocates 17
/// times, 5 056 bytes (the attempt boxes among them, and none of the places). Exact: a
/// change either way fails here.
#[test]
fn a_run_whose_ten_roots_wait_reuses_the_places_of_an_earlier_run() {
    let graph = waiting_roots(10);
    let inline = per_run(&graph, &RunOptions::new());
    assert_eq!(
        inline,
        (17.0, 5056.0),
        "allocations and bytes per run, inline"
    );
}

/// An attempt that returns `Pending` `.0` times (waking its task at once each time), then
/// `()`.
struct WaitTimes(u8);

impl Future for WaitTimes {
    type Output = Result<(), BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.0 == 0 {
            return Poll::Ready(Ok(()));
        }
        self.0 -= 1;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// The waiting order graph with a timeout on each node, whose roots wait twice: at the
/// first `Pending`, each root moves to a driver of its own, which waits under a timer at
/// the attempt's cut at the second. The timers' boxes are those of the drivers of a
/// run before, which the graph kept, with no timer in them: a run allocates what it
/// allocates without timeouts (4 times; 6 if each driver made its timer's box).
#[test]
fn a_run_whose_timed_roots_wait_makes_its_timers_in_kept_boxes() {
    let mut g = Graph::<()>::builder();
    let user = g
        .node("user")
        .timeout(Duration::from_secs(1))
        .task(|_ctx, ()| WaitTimes(2));
    let sku = g
        .node("sku")
        .timeout(Duration::from_secs(1))
        .task(|_ctx, ()| WaitTimes(2));
    let stock: Node<()> = g
        .node("stock")
        .after((user, sku))
        .timeout(Duration::from_secs(1))
        .task(|_ctx, _ups| async { Ok::<_, BoxError>(()) });
    g.node("notify")
        .after(stock)
        .timeout(Duration::from_secs(1))
        .task(|_ctx, _ups| async { Ok::<_, BoxError>(()) });
    let graph = g.build().expect("valid");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let (allocations, _) = per_run_on(&rt, &graph, &RunOptions::new());
    assert_eq!(
        allocations, 4.0,
        "allocations per run, timed roots that wait"
    );
}

/// The order graph (`user ∥ sku -> stock -> promo -> notify`), nodes that end at once
/// with `()` (a value that costs no allocation).
fn order() -> Graph<()> {
    let mut g = Graph::<()>::builder();
    let user = g
        .node("user")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    let sku = g
        .node("sku")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    let stock: Node<()> = g
        .node("stock")
        .after((user, sku))
        .task(|_ctx, _ups| async { Ok::<_, BoxError>(()) });
    let promo: Node<()> = g
        .node("promo")
        .after(stock)
        .task(|_ctx, _ups| async { Ok::<_, BoxError>(()) });
    g.node("notify")
        .after(promo)
        .task(|_ctx, _ups| async { Ok::<_, BoxError>(()) });
    g.build().expect("valid")
}

/// A run of the order graph, report included, allocates its state (one `Arc`) and one
/// attempt box, which its five attempts share (they have the same layout): 2 allocations,
/// however many nodes share the box. Its four per-node arrays (join counters, slots, values,
/// ready queue) are those of the run before, kept by the graph. A change that adds an
/// allocation per node or per run fails here. Counted as most of 1 000 runs allocate, as
/// `per_run` counts.
#[test]
fn a_run_of_the_order_graph_allocates_twice() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let graph = order();
    let runs: usize = 1_000;
    // Unconstrained: no run meets the end of the task's coop budget, where the rest of that
    // run would go to a spawned task (an allocation of tokio's, and that task's own
    // attempt box) once every twenty-odd runs.
    let per_run = rt.block_on(tokio::task::unconstrained(async {
        for _ in 0..100 {
            graph.run(()).await.expect("run");
        }
        let mut counts = Vec::with_capacity(runs);
        for _ in 0..runs {
            let before = allocations();
            let report = graph.run(()).await.expect("run");
            counts.push(allocations() - before);
            assert_eq!(report.counts().succeeded, 5);
        }
        most_frequent(counts) as f64
    }));
    // Exact: fewer is news too (update this test and docs/architecture.md).
    assert_eq!(per_run, 2.0, "allocations per run of the order graph");
}

/// Sets its flag when dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// An attempt future that holds a `DropFlag` until the future itself is dropped (a
/// hand-written future keeps its fields after it returned `Ready`, unlike an `async`
/// block's locals).
struct Holds(#[allow(dead_code)] DropFlag);

impl Future for Holds {
    type Output = Result<(), BoxError>;

    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Ready(Ok(()))
    }
}

/// A driver keeps its last attempt's box for the next attempt, but not what that attempt
/// held: an attempt's future is dropped when it ends, before its downstream starts, on the
/// fast path of every start mode and runtime flavour.
#[test]
fn an_attempt_is_dropped_when_it_ends_not_when_its_box_is_reused() {
    for (workers, mode) in [
        (0, StartMode::Inline),
        (0, StartMode::Spread),
        (2, StartMode::Inline),
        (2, StartMode::Spread),
    ] {
        let rt = runtime(workers);
        let dropped = Arc::new(AtomicBool::new(false));
        let mut g = Graph::<()>::builder();
        let flag = Arc::clone(&dropped);
        let a = g
            .node("a")
            .task(move |_ctx, ()| Holds(DropFlag(Arc::clone(&flag))));
        let seen = Arc::clone(&dropped);
        g.node("b").after(a).task(move |_ctx, _a| {
            let was_dropped = seen.load(Ordering::SeqCst);
            async move {
                if was_dropped {
                    Ok::<_, BoxError>(())
                } else {
                    Err("a's attempt was still alive when b started".into())
                }
            }
        });
        let graph = g.build().expect("valid");
        let options = RunOptions::new().start_mode(mode);
        let report = rt
            .block_on(async move {
                tokio::spawn(async move { graph.run_with((), options).await }).await
            })
            .expect("task")
            .unwrap_or_else(|e| panic!("{workers} workers, {mode:?}: {e}"));
        assert_eq!(report.counts().succeeded, 2);
    }
}

/// A graph with a router: `stock -> dispatch (ship | hold) -> notify`, every node ending at
/// once with `()`.
fn routed() -> Graph<()> {
    let mut g = Graph::<()>::builder();
    let stock = g
        .node("stock")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    let dispatch = g
        .router("dispatch")
        .after(stock)
        .select(|_input, _stock| "ship")
        .branch("ship", |b| {
            b.task(|_ctx, _stock| async { Ok::<_, BoxError>(()) })
        })
        .branch("hold", |b| {
            b.task(|_ctx, _stock| async { Ok::<_, BoxError>(()) })
        })
        .finish();
    g.node("notify")
        .after(dispatch)
        .task(|_ctx, _ups| async { Ok::<_, BoxError>(()) });
    g.build().expect("valid")
}

/// A run through a router allocates what the order graph's does, its state and one
/// attempt box, and one more: the selector's key (`select` takes any `Into<String>`). The
/// router's record names its branch in place, boxing nothing, and the driver runs the
/// chosen branch in the router's place, as a node of its own, with no boxed future for
/// the router or its branch. Exact, as `per_run` counts.
#[test]
fn a_run_through_a_router_allocates_three_times() {
    let (allocations, _) = per_run(&routed(), &RunOptions::new());
    assert_eq!(allocations, 3.0, "allocations per run through a router");
}

/// An attempt of about `N` bytes that returns `Pending` `waits` times (waking its task at
/// once each time), then `()`: as large as a call to another service, whose future holds
/// its request and connection state.
struct Large<const N: usize> {
    pad: [u8; N],
    waits: u8,
}

impl<const N: usize> Large<N> {
    fn new(waits: u8) -> Self {
        Large { pad: [0; N], waits }
    }
}

impl<const N: usize> Future for Large<N> {
    type Output = Result<(), BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        std::hint::black_box(&self.pad);
        if self.waits == 0 {
            return Poll::Ready(Ok(()));
        }
        self.waits -= 1;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// `user ∥ sku -> stock -> notify`, each attempt large and of its own size, so that no
/// driver writes one node's attempt into another's box; the roots wait `waits` times.
fn large_attempts(waits: u8) -> Graph<()> {
    let mut g = Graph::<()>::builder();
    let user = g
        .node("user")
        .task(move |_ctx, ()| Large::<600>::new(waits));
    let sku = g.node("sku").task(move |_ctx, ()| Large::<900>::new(waits));
    let stock: Node<()> = g
        .node("stock")
        .after((user, sku))
        .task(|_ctx, _ups| Large::<1200>::new(0));
    g.node("notify")
        .after(stock)
        .task(|_ctx, _ups| Large::<700>::new(0));
    g.build().expect("valid")
}

/// A graph keeps the boxes of its large attempts (256 bytes to 16 KiB) that ended, and its
/// next runs write their attempts into them: once warm, a run of nodes that end at once
/// allocates only its state, and one whose roots wait adds what
/// `a_run_whose_roots_wait_allocates_this_much` lists but the boxes: the joined drivers'
/// list. Without kept boxes, each of the four nodes would allocate its own (5 and 6
/// allocations). Exact, as `per_run` counts.
#[test]
fn a_run_writes_its_large_attempts_into_boxes_its_graph_kept() {
    let at_once = per_run(&large_attempts(0), &RunOptions::new());
    assert_eq!(
        at_once.0, 1.0,
        "allocations per run, nodes that end at once"
    );
    let waiting = per_run(&large_attempts(1), &RunOptions::new());
    assert_eq!(waiting.0, 2.0, "allocations per run, roots that wait");
}

/// A kept box holds nothing of its attempt: a run cancelled, dropped or aborted while a
/// large attempt waits drops that attempt, not keeping it, on the fast path's cancel and on
/// a driver's drop.
#[test]
fn a_kept_box_holds_nothing_of_its_run() {
    let dropped = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicBool::new(false));
    let mut g = Graph::<()>::builder();
    // A large attempt that ends at once, so that the graph keeps boxes.
    g.node("quick").task(|_ctx, ()| Large::<600>::new(0));
    let (flag, start) = (Arc::clone(&dropped), Arc::clone(&started));
    g.node("waits").task(move |_ctx, ()| {
        start.store(true, Ordering::SeqCst);
        let held = DropFlag(Arc::clone(&flag));
        let pad = [0_u8; 1024];
        async move {
            let _held = held;
            std::hint::black_box(&pad);
            std::future::pending::<()>().await;
            Ok::<_, BoxError>(())
        }
    });
    let graph = g.build().expect("valid");
    for workers in [0, 2] {
        let rt = runtime(workers);
        rt.block_on(async {
            for way in ["cancel", "drop", "abort"] {
                dropped.store(false, Ordering::SeqCst);
                started.store(false, Ordering::SeqCst);
                let run = graph.run(());
                let canceller = run.canceller();
                match way {
                    "cancel" => {
                        let handle = tokio::spawn(run);
                        while !started.load(Ordering::SeqCst) {
                            tokio::task::yield_now().await;
                        }
                        canceller.cancel();
                        assert!(handle.await.expect("task").is_err(), "cancelled");
                    }
                    "drop" => {
                        let mut run = Box::pin(run);
                        let polled = futures::poll!(run.as_mut());
                        assert!(polled.is_pending(), "the run waits");
                        assert!(started.load(Ordering::SeqCst), "polled in place");
                        drop(run);
                    }
                    _ => {
                        let handle = tokio::spawn(run);
                        while !started.load(Ordering::SeqCst) {
                            tokio::task::yield_now().await;
                        }
                        handle.abort();
                        assert!(handle.await.is_err(), "aborted");
                    }
                }
                assert!(
                    dropped.load(Ordering::SeqCst),
                    "{workers} workers, {way}: the waiting attempt was dropped with its run"
                );
            }
        });
    }
}
