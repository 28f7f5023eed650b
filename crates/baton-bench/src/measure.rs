//! Measuring one point (shape, threads, size) for every implementation: a warm-up, a
//! calibrated repetition count, then samples taken in rotation within the time budget.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::child::child_mem;
use crate::imps::{self, Imp, Timing};
use crate::options::Options;
use crate::probe::{self, Probe};
use crate::report::{Cell, Row, Stats};
use crate::shapes::{Dag, Shape};

pub(crate) fn runtime(threads: usize) -> tokio::runtime::Runtime {
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
pub(crate) fn measure(
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
pub(crate) fn verify(
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
pub(crate) fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

/// Per-implementation cost history, for skipping sizes that would blow the budget.
#[derive(Debug, Default)]
pub(crate) struct History {
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

pub(crate) fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Fewest samples taken of a point (when the budget allows any).
pub(crate) const MIN_SAMPLES: usize = 3;

/// Measures one (shape, threads, size) point for every implementation.
pub(crate) fn measure_point(
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
    for &imp in o.imps.iter().filter(|i| i.supports(shape)) {
        let row = |cell| Row {
            shape,
            size: n,
            threads,
            imp,
            cell,
            load: load_before.clone(),
        };
        if o.verify
            && let Err(e) = verify(rt, imp, dag, o.waits)
        {
            rows.push(row(Cell::Failed(e)));
            continue;
        }
        match calibrate(o, rt, imp, dag, history) {
            Ok((reps, samples)) => active.push((imp, reps, samples)),
            Err(cell) => rows.push(row(cell)),
        }
    }
    let (mut samples, mut failed) = sample_in_rotation(o, rt, dag, &active);
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

/// Warms `imp` up on `dag` and calibrates it: the repetitions per sample and the samples
/// that fit in the budget, or the cell that says why it is skipped or failed.
fn calibrate(
    o: &Options,
    rt: &tokio::runtime::Runtime,
    imp: Imp,
    dag: &Arc<Dag>,
    history: &mut HashMap<Imp, History>,
) -> Result<(u32, usize), Cell> {
    let n = dag.len();
    let budget = secs(o.budget);
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
        return Err(Cell::Skipped(why));
    }
    // Warm-up and calibration.
    let first = measure(rt, imp, dag, 1, o.waits).map_err(Cell::Failed)?;
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
        return Err(Cell::Skipped(why));
    }
    let mut reps = ((secs(o.min_sample) / one).ceil() as u32).clamp(1, 1_000_000);
    // Seconds per run, refined by the second warm-up.
    let mut per_run = one;
    if reps > 1 {
        // Second warm-up at the real repetition count, and a finer calibration.
        let t = measure(rt, imp, dag, reps, o.waits).map_err(Cell::Failed)?;
        let per = secs(t.total()).max(1e-9) / f64::from(reps);
        per_run = per;
        reps = ((secs(o.min_sample) / per).ceil() as u32).clamp(1, 1_000_000);
        if let Some(h) = history.get_mut(&imp)
            && let Some(last) = h.per_node.last_mut()
        {
            *last = per * 1e9 / n as f64;
        }
    }
    let per_sample = per_run * f64::from(reps);
    let fit = (budget / per_sample).floor() as usize;
    Ok((reps, fit.clamp(MIN_SAMPLES.min(o.samples), o.samples)))
}

/// The samples of every `active` implementation (with its repetitions and the samples it
/// wants), taken in rotation: implementation `k` of sample `s` is `(k + s) mod m`. Also
/// the error of each implementation that failed (it takes no further samples).
fn sample_in_rotation(
    o: &Options,
    rt: &tokio::runtime::Runtime,
    dag: &Arc<Dag>,
    active: &[(Imp, u32, usize)],
) -> (HashMap<Imp, Vec<Timing>>, HashMap<Imp, String>) {
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
    (samples, failed)
}
