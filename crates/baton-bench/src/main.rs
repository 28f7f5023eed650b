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

mod child;
mod imps;
mod measure;
mod options;
mod probe;
mod report;
mod shapes;
mod tables;

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use child::{child_main, profile_main};
use imps::Imp;
use measure::{History, load, measure_point, runtime, secs};
use options::{Options, parse_args};
use report::{Cell, Row};
use shapes::Dag;

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
    let mut md = tables::markdown(&rows, &o.imps);
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

    use std::time::Duration;

    use super::*;
    use crate::options::parse_size;
    use crate::probe::{Probe, Recorder};
    use crate::shapes::Shape;

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
        let md = tables::markdown(&rows, &o.imps);
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
