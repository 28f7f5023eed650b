//! Figures per (shape, size, threads, implementation), and the Markdown tables.

use std::fmt::Write as _;

use crate::imps::{Imp, Timing};
use crate::shapes::Shape;

/// Memory figures in bytes (RSS deltas from a fresh child process).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mem {
    /// Resident growth once the graph is built.
    pub(crate) resident: u64,
    /// Peak resident growth over build + one run.
    pub(crate) peak: u64,
}

/// Medians over samples.
#[derive(Debug, Clone)]
pub(crate) struct Stats {
    pub(crate) samples: usize,
    /// Run time per node, ns: median, 25th and 75th percentile.
    pub(crate) run_node: f64,
    pub(crate) run_p25: f64,
    pub(crate) run_p75: f64,
    /// Run time per graph, ns (median).
    pub(crate) run_graph: f64,
    /// Build and drop time per graph, ns (medians).
    pub(crate) build_graph: f64,
    pub(crate) drop_graph: f64,
    /// Whether every run builds its own graph.
    pub(crate) rebuilds: bool,
    pub(crate) mem: Option<Mem>,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = p * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    let w = pos - lo as f64;
    sorted[lo] * (1.0 - w) + sorted[hi] * w
}

fn median_of(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    percentile(&v, 0.5)
}

impl Stats {
    pub(crate) fn from_samples(ts: &[Timing], n: usize, rebuilds: bool) -> Stats {
        let n = n.max(1) as f64;
        let per_graph = |f: &dyn Fn(&Timing) -> (f64, u32)| {
            median_of(
                ts.iter()
                    .map(|t| {
                        let (ns, k) = f(t);
                        ns / f64::from(k.max(1))
                    })
                    .collect(),
            )
        };
        let ns = |d: std::time::Duration| d.as_secs_f64() * 1e9;
        let mut run_node: Vec<f64> = ts
            .iter()
            .map(|t| ns(t.run) / f64::from(t.runs.max(1)) / n)
            .collect();
        run_node.sort_by(f64::total_cmp);
        Stats {
            samples: ts.len(),
            run_node: percentile(&run_node, 0.5),
            run_p25: percentile(&run_node, 0.25),
            run_p75: percentile(&run_node, 0.75),
            run_graph: per_graph(&|t| (ns(t.run), t.runs)),
            build_graph: per_graph(&|t| (ns(t.build), t.builds)),
            drop_graph: per_graph(&|t| (ns(t.drop), t.builds)),
            rebuilds,
            mem: None,
        }
    }

    /// Interquartile range relative to the median.
    pub(crate) fn spread(&self) -> f64 {
        (self.run_p75 - self.run_p25) / self.run_node
    }
}

/// What one implementation got at one point.
#[derive(Debug, Clone)]
pub(crate) enum Cell {
    Measured(Stats),
    Skipped(String),
    Failed(String),
}

/// One implementation at one (shape, size, threads) point.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) shape: Shape,
    pub(crate) size: usize,
    pub(crate) threads: usize,
    pub(crate) imp: Imp,
    pub(crate) cell: Cell,
    /// 1-minute load average before -> after the point.
    pub(crate) load: String,
}

/// A line on stderr. (`baton-bench` is a command-line program, not library code: its
/// progress lines go to stderr and its tables to stdout, where its user reads them.)
pub(crate) fn note(msg: &str) {
    eprintln!("{msg}");
}

/// The whole Markdown document on stdout.
pub(crate) fn print(md: &str) {
    println!("{md}");
}

pub(crate) fn fmt_ns(ns: f64) -> String {
    if !ns.is_finite() {
        "-".to_owned()
    } else if ns >= 100.0 {
        format!("{ns:.0}")
    } else if ns >= 10.0 {
        format!("{ns:.1}")
    } else {
        format!("{ns:.2}")
    }
}

pub(crate) fn fmt_rate(per_s: f64) -> String {
    if per_s >= 1e6 {
        format!("{:.2} M", per_s / 1e6)
    } else if per_s >= 1e3 {
        format!("{:.0} k", per_s / 1e3)
    } else {
        format!("{per_s:.0}")
    }
}

pub(crate) fn fmt_ms(ns: f64) -> String {
    let ms = ns / 1e6;
    if ms >= 100.0 {
        format!("{ms:.0}")
    } else if ms >= 1.0 {
        format!("{ms:.1}")
    } else {
        format!("{ms:.3}")
    }
}

/// Progress on stderr for one point.
pub(crate) fn progress(rows: &[Row]) {
    let Some(first) = rows.first() else { return };
    let mut line = format!(
        "{:<12} n={:<8} thr={} load {:<10}",
        first.shape.name(),
        first.size,
        first.threads,
        first.load
    );
    for r in rows {
        match &r.cell {
            Cell::Measured(s) => {
                let _ = write!(
                    line,
                    " | {} {} ns/node ±{:.0}% ({}x)",
                    r.imp,
                    fmt_ns(s.run_node),
                    50.0 * s.spread(),
                    s.samples
                );
            }
            Cell::Skipped(_) => {
                let _ = write!(line, " | {} skipped", r.imp);
            }
            Cell::Failed(e) => {
                let _ = write!(line, " | {} FAILED: {e}", r.imp);
            }
        }
    }
    note(&line);
}
