//! `baton-bench`: runs Taskflow's benchmark shapes with baton and with its baselines in one
//! process, alternating, and prints medians, ratios and a Markdown table.
//!
//! Implementations: baton; hand-written tokio (join counters with a spawn per ready node,
//! and oneshot channels with every node spawned up front; for the order graph also
//! `tokio::join!` inline and with the two independent calls spawned); dagx 0.3; dagrs 0.9;
//! and a sequential loop (the single-core floor). Every task body is the same no-op.
//!
//! Shapes: `chain`, `binary-tree` (fan-out then fan-in), `parallel` (N independent),
//! `wavefront` (2-D grid), `random` (fixed seed, average in-degree 3) and `order` (the 5-node
//! order graph, reported in runs per second).
//!
//! Method: for each shape, thread count and size, every implementation gets a warm-up, a
//! repetition count so that one sample lasts at least `--min-sample-ms`, then `--samples`
//! samples taken in rotation (implementation `k` of sample `s` is `(k + s) mod m`), so
//! that load changes hit every implementation alike. All work runs inside a task spawned on
//! a multi-thread runtime with `--threads` workers (the main thread only waits). Build, run
//! and drop are timed apart: baton and the tokio baselines build once and run many times,
//! dagx and dagrs build (and drop) a graph per run, as their runners run once.
//!
//! Memory: for sizes from `--mem-min-size` on, each implementation builds and runs the shape
//! once in a fresh child process of this binary, which reads its resident set from
//! `/proc/self/status`: `VmRSS` before building, after building, and the peak (`VmHWM`, reset
//! through `/proc/self/clear_refs` just before building) over build + run. Figures are RSS
//! deltas divided by the node count: they include the allocator's slack and the runtime's
//! task memory, not only the graph.
//!
//! ```text
//! cargo run --release -p baton-bench -- --threads 1,2 --samples 7 --markdown bench.md
//! cargo run --release -p baton-bench -- --quick
//! ```

mod imps;
mod probe;
mod report;
mod shapes;

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use imps::{Imp, Timing};
use probe::Probe;
use report::{Cell, Mem, Row, Stats};
use shapes::{Dag, Shape};

/// Command-line options.
#[derive(Debug, Clone)]
struct Options {
    shapes: Vec<Shape>,
    sizes: Vec<usize>,
    threads: Vec<usize>,
    imps: Vec<Imp>,
    samples: usize,
    min_sample: Duration,
    budget: Duration,
    mem_min_size: Option<usize>,
    markdown: Option<String>,
    quick: bool,
    /// Check every implementation's executions (once per point) before timing it.
    verify: bool,
    /// Every node waits (`Probe::step`) instead of ending on its first poll.
    waits: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            shapes: Shape::ALL.to_vec(),
            sizes: vec![10, 100, 1_000, 10_000, 100_000, 1_000_000],
            threads: vec![1, 2],
            imps: Imp::ALL.to_vec(),
            samples: 7,
            min_sample: Duration::from_millis(40),
            budget: Duration::from_secs(20),
            mem_min_size: Some(100_000),
            markdown: None,
            quick: false,
            verify: false,
            waits: false,
        }
    }
}

const USAGE: &str = "\
usage: baton-bench [--shapes a,b] [--sizes 10,1k,1M] [--threads 1,2] [--samples N]
                   [--imps baton,tokio,...] [--min-sample-ms MS] [--budget-s S]
                   [--mem-min-size N | --no-mem] [--markdown PATH] [--quick] [--verify]
                   [--waits]
shapes: chain binary-tree parallel wavefront random order
imps:   baton baton-policies baton-spread tokio tokio-oneshot tokio-join tokio-spawn dagx dagrs seq
--quick: every shape at 10 and 100 nodes, 1 and 2 threads, 3 short samples, no memory
         figures, and --verify (a smoke run for CI: a few seconds).
--verify: before timing, run each implementation with a recording body and check that
         every node ran exactly once, after its upstreams.
--waits: every node's body waits (returns Pending on its first two polls, waking its task
         each time, as a node whose I/O comes back at once) instead of ending at once.
--profile-run SHAPE IMP SIZE THREADS RUNS [TASKS] [--waits]: build once, run RUNS times,
         no calibration (for perf and callgrind).";

fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (digits, mult) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 1_000),
        Some('m' | 'M') => (&s[..s.len() - 1], 1_000_000),
        _ => (s, 1),
    };
    digits
        .parse::<usize>()
        .map(|v| v * mult)
        .map_err(|e| format!("bad size `{s}`: {e}"))
}

fn parse_list<T>(s: &str, f: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| f(p.trim()))
        .collect()
}

fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut o = Options::default();
    let mut explicit_sizes = false;
    let mut explicit_samples = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().cloned().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--shapes" => o.shapes = parse_list(&value()?, str::parse)?,
            "--sizes" => {
                o.sizes = parse_list(&value()?, parse_size)?;
                explicit_sizes = true;
            }
            "--threads" => {
                o.threads = parse_list(&value()?, |s| s.parse().map_err(|e| format!("{e}")))?
            }
            "--imps" => o.imps = parse_list(&value()?, str::parse)?,
            "--samples" => {
                o.samples = value()?.parse().map_err(|e| format!("--samples: {e}"))?;
                explicit_samples = true;
            }
            "--min-sample-ms" => {
                o.min_sample = Duration::from_millis(
                    value()?
                        .parse()
                        .map_err(|e| format!("--min-sample-ms: {e}"))?,
                )
            }
            "--budget-s" => {
                o.budget = Duration::from_secs_f64(
                    value()?.parse().map_err(|e| format!("--budget-s: {e}"))?,
                )
            }
            "--mem-min-size" => o.mem_min_size = Some(parse_size(&value()?)?),
            "--no-mem" => o.mem_min_size = None,
            "--markdown" => o.markdown = Some(value()?),
            "--quick" => o.quick = true,
            "--verify" => o.verify = true,
            "--waits" => o.waits = true,
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument `{other}`\n{USAGE}")),
        }
    }
    if o.quick {
        if !explicit_sizes {
            o.sizes = vec![10, 100];
        }
        if !explicit_samples {
            o.samples = 3;
        }
        o.min_sample = o.min_sample.min(Duration::from_millis(3));
        o.budget = o.budget.min(Duration::from_secs(1));
        o.mem_min_size = None;
        o.verify = true;
    }
    o.sizes.sort_unstable();
    o.sizes.dedup();
    if o.samples == 0 || o.threads.is_empty() || o.threads.contains(&0) {
        return Err("--samples and --threads must be positive".to_owned());
    }
    Ok(o)
}

fn runtime(threads: usize) -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("cannot build a tokio runtime: {e}"),
    }
}

/// One sample, run inside a task on the runtime's workers.
fn measure(
    rt: &tokio::runtime::Runtime,
    imp: Imp,
    dag: &Arc<Dag>,
    reps: u32,
    waits: bool,
) -> Result<Timing, String> {
    let fut = imps::sample(imp, Arc::clone(dag), reps, Probe::none().waiting(waits));
    match rt.block_on(rt.spawn(fut)) {
        Ok(r) => r,
        Err(e) => Err(format!("{imp} panicked: {e}")),
    }
}

/// Runs `dag` twice with a recording body and checks that every node ran once per run,
/// after its upstreams.
fn verify(
    rt: &tokio::runtime::Runtime,
    imp: Imp,
    dag: &Arc<Dag>,
    waits: bool,
) -> Result<(), String> {
    let recorder = Arc::new(probe::Recorder::new(dag.len()));
    let probe = Probe::recording(&recorder).waiting(waits);
    let fut = imps::sample(imp, Arc::clone(dag), 2, probe);
    match rt.block_on(rt.spawn(fut)) {
        Ok(r) => r?,
        Err(e) => return Err(format!("{imp} panicked: {e}")),
    };
    recorder
        .verify(dag, 2)
        .map_err(|e| format!("{imp} on {} ({} nodes): {e}", dag.shape, dag.len()))
}

/// The 1-minute load average.
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

/// Per-implementation cost history, for skipping sizes that would blow the budget.
#[derive(Debug, Default)]
struct History {
    /// Total (build + run + drop) ns per node of one run at the last two sizes measured.
    per_node: Vec<f64>,
}

impl History {
    /// Estimated seconds for one build + run + drop at `n` nodes.
    fn estimate(&self, n: usize) -> Option<f64> {
        let last = *self.per_node.last()?;
        let growth = match self.per_node.len() {
            0 | 1 => 1.0,
            k => (last / self.per_node[k - 2]).max(1.0),
        };
        Some(last * growth * n as f64 / 1e9)
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Fewest samples taken of a point (when the budget allows any).
const MIN_SAMPLES: usize = 3;

/// Measures one (shape, threads, size) point for every implementation.
fn measure_point(
    o: &Options,
    rt: &tokio::runtime::Runtime,
    threads: usize,
    dag: &Arc<Dag>,
    history: &mut HashMap<Imp, History>,
) -> Vec<Row> {
    let n = dag.len();
    let shape = dag.shape;
    let load_before = load();
    let mut rows = Vec::new();
    // (implementation, repetitions per sample, samples)
    let mut active: Vec<(Imp, u32, usize)> = Vec::new();
    let budget = secs(o.budget);
    for &imp in o.imps.iter().filter(|i| i.supports(shape)) {
        if o.verify
            && let Err(e) = verify(rt, imp, dag, o.waits)
        {
            rows.push(Row {
                shape,
                size: n,
                threads,
                imp,
                cell: Cell::Failed(e),
                load: load_before.clone(),
            });
            continue;
        }
        let row = |cell| Row {
            shape,
            size: n,
            threads,
            imp,
            cell,
            load: load_before.clone(),
        };
        // The subjects (baton, the join-counter baseline, the floor) are always measured,
        // with fewer samples when one run is long; the other baselines are skipped when
        // `MIN_SAMPLES` runs would not fit in the budget.
        let primary = matches!(
            imp,
            Imp::Baton | Imp::BatonPolicies | Imp::BatonSpread | Imp::Tokio | Imp::Seq
        );
        if !primary
            && let Some(est) = history.get(&imp).and_then(|h| h.estimate(n))
            && est * (MIN_SAMPLES + 1) as f64 > budget
        {
            let why = format!(
                "skipped: est. {est:.1} s per build + run + drop; {} runs > {budget} s budget",
                MIN_SAMPLES + 1
            );
            rows.push(row(Cell::Skipped(why)));
            continue;
        }
        // Warm-up and calibration.
        let first = match measure(rt, imp, dag, 1, o.waits) {
            Ok(t) => t,
            Err(e) => {
                rows.push(row(Cell::Failed(e)));
                continue;
            }
        };
        let one = secs(first.total()).max(1e-9);
        history
            .entry(imp)
            .or_default()
            .per_node
            .push(one * 1e9 / n as f64);
        if !primary && one * MIN_SAMPLES as f64 > budget {
            let why = format!(
                "skipped: one build + run + drop took {one:.1} s; {MIN_SAMPLES} more > {budget} s budget"
            );
            rows.push(row(Cell::Skipped(why)));
            continue;
        }
        let mut reps = ((secs(o.min_sample) / one).ceil() as u32).clamp(1, 1_000_000);
        // Seconds per run, refined by the second warm-up.
        let mut per_run = one;
        if reps > 1 {
            // Second warm-up at the real repetition count, and a finer calibration.
            match measure(rt, imp, dag, reps, o.waits) {
                Ok(t) => {
                    let per = secs(t.total()).max(1e-9) / f64::from(reps);
                    per_run = per;
                    reps = ((secs(o.min_sample) / per).ceil() as u32).clamp(1, 1_000_000);
                    if let Some(h) = history.get_mut(&imp)
                        && let Some(last) = h.per_node.last_mut()
                    {
                        *last = per * 1e9 / n as f64;
                    }
                }
                Err(e) => {
                    rows.push(row(Cell::Failed(e)));
                    continue;
                }
            }
        }
        let per_sample = per_run * f64::from(reps);
        let fit = (budget / per_sample).floor() as usize;
        let samples = fit.clamp(MIN_SAMPLES.min(o.samples), o.samples);
        active.push((imp, reps, samples));
    }
    let mut samples: HashMap<Imp, Vec<Timing>> = HashMap::new();
    let mut failed: HashMap<Imp, String> = HashMap::new();
    for s in 0..o.samples {
        for k in 0..active.len() {
            let (imp, reps, wanted) = active[(k + s) % active.len()];
            if failed.contains_key(&imp) || s >= wanted {
                continue;
            }
            match measure(rt, imp, dag, reps, o.waits) {
                Ok(t) => samples.entry(imp).or_default().push(t),
                Err(e) => {
                    failed.insert(imp, e);
                }
            }
        }
    }
    let load_after = load();
    for (imp, _, _) in &active {
        let load = format!("{load_before}->{load_after}");
        let cell = match failed.remove(imp) {
            Some(e) => Cell::Failed(e),
            None => {
                let ts = samples.remove(imp).unwrap_or_default();
                let mut stats = Stats::from_samples(&ts, n, !imp.reuses_graph());
                if let Some(min) = o.mem_min_size
                    && n >= min
                    && shape != Shape::Order
                {
                    stats.mem = child_mem(shape, *imp, n, threads);
                }
                Cell::Measured(stats)
            }
        };
        rows.push(Row {
            shape,
            size: n,
            threads,
            imp: *imp,
            cell,
            load,
        });
    }
    rows.sort_by_key(|r| o.imps.iter().position(|i| *i == r.imp));
    rows
}

/// Reads a `kB` field of `/proc/self/status`, in bytes.
fn status_bytes(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Runs the memory measurement in a fresh child process.
fn child_mem(shape: Shape, imp: Imp, size: usize, threads: usize) -> Option<Mem> {
    let exe = std::env::current_exe().ok()?;
    let out = std::process::Command::new(exe)
        .args([
            "--child-mem",
            shape.name(),
            imp.name(),
            &size.to_string(),
            &threads.to_string(),
        ])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("MEM "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    match *v.as_slice() {
        [base, built, peak] => Some(Mem {
            resident: built.saturating_sub(base),
            peak: peak.saturating_sub(base),
        }),
        _ => None,
    }
}

/// The child side of [`child_mem`]: prints `MEM <base> <after build> <peak>` in bytes.
fn child_main(args: &[String]) -> Result<(), String> {
    let [shape, imp, size, threads] = args else {
        return Err("--child-mem SHAPE IMP SIZE THREADS".to_owned());
    };
    let shape: Shape = shape.parse()?;
    let imp: Imp = imp.parse()?;
    let size = parse_size(size)?;
    let threads: usize = threads.parse().map_err(|e| format!("{e}"))?;
    let dag = Arc::new(Dag::new(shape, size));
    let rt = runtime(threads);
    // Warm the runtime's workers so their stacks and buffers are in the baseline.
    rt.block_on(rt.spawn(async {})).map_err(|e| e.to_string())?;
    let base = status_bytes("VmRSS:").ok_or("no VmRSS")?;
    // Reset the peak to the current RSS (Linux >= 4.0).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let probe = Probe::none();
    let out = rt.block_on(rt.spawn(async move {
        let mut built = imps::build(imp, &dag, &probe);
        let after_build = status_bytes("VmRSS:");
        imps::run_once(imp, &mut built, &dag, &probe).await?;
        let peak = status_bytes("VmHWM:");
        drop(built);
        Ok::<_, String>((after_build, peak))
    }));
    let (after_build, peak) = out.map_err(|e| e.to_string())??;
    let after_build = after_build.ok_or("no VmRSS")?;
    let peak = peak.ok_or("no VmHWM")?;
    report::print(&format!("MEM {base} {after_build} {peak}"));
    Ok(())
}

/// `--profile-run SHAPE IMP SIZE THREADS RUNS [TASKS]`: builds once and runs `RUNS` times
/// with no calibration, for profilers (`valgrind --tool=callgrind --toggle-collect='*run_once*'`,
/// `valgrind --tool=dhat`: compare `RUNS` = 0 with `RUNS` = k for the per-run counts). With
/// `TASKS` > 1 (baton's modes only), that many tasks run the one graph `RUNS` times each, at
/// once, as a server's requests would.
fn profile_main(args: &[String]) -> Result<(), String> {
    let waits = args.iter().any(|a| a == "--waits");
    let args: Vec<String> = args.iter().filter(|a| *a != "--waits").cloned().collect();
    let (shape, imp, size, threads, runs, tasks) = match &args[..] {
        [shape, imp, size, threads, runs] => (shape, imp, size, threads, runs, "1"),
        [shape, imp, size, threads, runs, tasks] => (shape, imp, size, threads, runs, &**tasks),
        _ => return Err("--profile-run SHAPE IMP SIZE THREADS RUNS [TASKS] [--waits]".to_owned()),
    };
    let shape: Shape = shape.parse()?;
    let imp: Imp = imp.parse()?;
    let dag = Arc::new(Dag::new(shape, parse_size(size)?));
    let threads: usize = threads.parse().map_err(|e| format!("{e}"))?;
    let runs: u32 = runs.parse().map_err(|e| format!("{e}"))?;
    let tasks: u32 = tasks.parse().map_err(|e| format!("{e}"))?;
    if tasks == 0 {
        return Err("--profile-run: TASKS must be at least 1".to_owned());
    }
    let rt = runtime(threads);
    let n = dag.len();
    let probe = Probe::none().waiting(waits);
    let elapsed = rt
        .block_on(rt.spawn(async move {
            let mut built = imps::build(imp, &dag, &probe);
            let start = Instant::now();
            if tasks > 1 {
                let imps::Built::Baton(graph) = &built else {
                    return Err(format!("{imp}: only baton runs in several tasks"));
                };
                let mut handles = Vec::new();
                for _ in 0..tasks {
                    let graph = graph.clone();
                    handles.push(tokio::spawn(async move {
                        for _ in 0..runs {
                            imps::baton_impl::run(&graph).await?;
                        }
                        Ok::<_, String>(())
                    }));
                }
                for handle in handles {
                    handle.await.map_err(|e| e.to_string())??;
                }
            } else {
                for _ in 0..runs {
                    imps::run_once(imp, &mut built, &dag, &probe).await?;
                }
            }
            let elapsed = start.elapsed();
            drop(built);
            Ok::<_, String>(elapsed)
        }))
        .map_err(|e| e.to_string())??;
    let total = f64::from(runs) * f64::from(tasks);
    // (No rate without runs.)
    let rate = if runs == 0 {
        "no runs".to_owned()
    } else {
        format!(
            "{:.0} ns/node",
            elapsed.as_secs_f64() * 1e9 / (total * n as f64)
        )
    };
    report::note(&format!(
        "{imp} {shape} n={n} threads={threads} tasks={tasks}: {runs} runs each in {:.3} s, {rate}",
        elapsed.as_secs_f64(),
    ));
    Ok(())
}

fn run(o: &Options) -> Vec<Row> {
    let mut rows = Vec::new();
    let started = Instant::now();
    for &shape in &o.shapes {
        for &threads in &o.threads {
            let rt = runtime(threads);
            let mut history: HashMap<Imp, History> = HashMap::new();
            let mut seen = Vec::new();
            for &size in &o.sizes {
                let dag = Arc::new(Dag::new(shape, size));
                if seen.contains(&dag.len()) {
                    continue; // the order graph, or sizes that round alike
                }
                seen.push(dag.len());
                let point = measure_point(o, &rt, threads, &dag, &mut history);
                report::progress(&point);
                rows.extend(point);
            }
        }
    }
    report::note(&format!("done in {:.1} s", started.elapsed().as_secs_f64()));
    rows
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let special = match args.first().map(String::as_str) {
        Some("--child-mem") => Some(child_main as fn(&[String]) -> Result<(), String>),
        Some("--profile-run") => Some(profile_main as fn(&[String]) -> Result<(), String>),
        _ => None,
    };
    if let Some(f) = special {
        return match f(&args[1..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                report::note(&e);
                ExitCode::FAILURE
            }
        };
    }
    let o = match parse_args(&args) {
        Ok(o) => o,
        Err(e) => {
            report::note(&e);
            return ExitCode::from(2);
        }
    };
    report::note(&format!(
        "baton-bench: shapes {:?}, sizes {:?}, threads {:?}, {} samples >= {} ms, budget {} s, {}, load {}",
        o.shapes.iter().map(|s| s.name()).collect::<Vec<_>>(),
        o.sizes,
        o.threads,
        o.samples,
        o.min_sample.as_millis(),
        secs(o.budget),
        if o.waits {
            "every node waits"
        } else {
            "no-op nodes"
        },
        load()
    ));
    let rows = run(&o);
    let mut md = report::markdown(&rows, &o.imps);
    if o.waits {
        md.insert_str(
            0,
            "Every node's body waits (`--waits`): `Pending` on its first two polls, waking its task each time.\n\n",
        );
    }
    report::print(&md);
    if let Some(path) = &o.markdown
        && let Err(e) = std::fs::write(path, &md)
    {
        report::note(&format!("cannot write {path}: {e}"));
        return ExitCode::FAILURE;
    }
    let failures = rows
        .iter()
        .filter(|r| matches!(r.cell, Cell::Failed(_)))
        .count();
    if failures > 0 {
        report::note(&format!("{failures} implementation(s) failed"));
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    //! Smoke tests: every implementation of every shape runs every node exactly once, after
    //! its upstreams; and the harness's quick mode runs end to end.

    use super::*;
    use crate::probe::Recorder;

    fn check(shape: Shape, size: usize, threads: usize) {
        check_bodies(shape, size, threads, false);
    }

    fn check_bodies(shape: Shape, size: usize, threads: usize, waits: bool) {
        let rt = runtime(threads);
        let dag = Arc::new(Dag::new(shape, size));
        for imp in Imp::ALL.into_iter().filter(|i| i.supports(shape)) {
            let recorder = Arc::new(Recorder::new(dag.len()));
            let probe = Probe::recording(&recorder).waiting(waits);
            let runs = 3;
            let d = Arc::clone(&dag);
            let t = rt
                .block_on(rt.spawn(imps::sample(imp, d, runs, probe)))
                .expect("no panic")
                .unwrap_or_else(|e| panic!("{imp} on {shape}: {e}"));
            assert_eq!(t.runs, runs);
            if let Err(e) = recorder.verify(&dag, runs) {
                panic!(
                    "{imp} on {shape} ({} nodes, {threads} threads): {e}",
                    dag.len()
                );
            }
        }
    }

    #[test]
    fn every_implementation_runs_every_node_once_in_order() {
        for shape in Shape::ALL {
            for threads in [1, 2] {
                check(shape, 200, threads);
            }
        }
    }

    #[test]
    fn bodies_that_wait_run_every_node_once_in_order() {
        for shape in Shape::ALL {
            for threads in [1, 2] {
                check_bodies(shape, 100, threads, true);
            }
        }
    }

    #[test]
    fn a_waiting_body_returns_pending_twice() {
        let probe = Probe::none().waiting(true);
        let mut step = std::pin::pin!(probe.step(0));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(step.as_mut().poll(&mut cx).is_pending());
        assert!(step.as_mut().poll(&mut cx).is_pending());
        assert!(step.as_mut().poll(&mut cx).is_ready());
        let mut plain = std::pin::pin!(Probe::none().step(0));
        assert!(plain.as_mut().poll(&mut cx).is_ready());
    }

    #[test]
    fn tiny_and_degenerate_sizes() {
        for shape in Shape::ALL {
            check(shape, 1, 2);
            check(shape, 2, 2);
        }
    }

    #[test]
    fn quick_mode_runs() {
        let mut o = parse_args(&["--quick".to_owned(), "--samples".to_owned(), "1".to_owned()])
            .expect("valid args");
        o.sizes = vec![10];
        o.threads = vec![2];
        o.min_sample = Duration::from_micros(200);
        let rows = run(&o);
        assert!(
            rows.iter().all(|r| matches!(r.cell, Cell::Measured(_))),
            "{rows:?}"
        );
        let md = report::markdown(&rows, &o.imps);
        assert!(md.contains("| chain |"), "{md}");
    }

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_size("1k"), Ok(1_000));
        assert_eq!(parse_size("1M"), Ok(1_000_000));
        assert_eq!(parse_size("250"), Ok(250));
        assert!(parse_size("x").is_err());
    }
}
