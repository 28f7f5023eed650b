//! The harness's child modes: `--child-mem` (one build and run in a fresh process, to read
//! its resident set) and `--profile-run` (runs with no calibration, for profilers).

use std::sync::Arc;
use std::time::Instant;

use crate::imps::{self, Imp};
use crate::measure::runtime;
use crate::options::parse_size;
use crate::probe::Probe;
use crate::report::{self, Mem};
use crate::shapes::{Dag, Shape};

/// Reads a `kB` field of `/proc/self/status`, in bytes.
fn status_bytes(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Runs the memory measurement in a fresh child process.
pub(crate) fn child_mem(shape: Shape, imp: Imp, size: usize, threads: usize) -> Option<Mem> {
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
pub(crate) fn child_main(args: &[String]) -> Result<(), String> {
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
pub(crate) fn profile_main(args: &[String]) -> Result<(), String> {
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
