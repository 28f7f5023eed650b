//! The harness's command line: which shapes, sizes, thread counts and implementations, and
//! how long to measure each point.

use std::time::Duration;

use crate::imps::Imp;
use crate::shapes::Shape;

/// Command-line options.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) shapes: Vec<Shape>,
    pub(crate) sizes: Vec<usize>,
    pub(crate) threads: Vec<usize>,
    pub(crate) imps: Vec<Imp>,
    pub(crate) samples: usize,
    pub(crate) min_sample: Duration,
    pub(crate) budget: Duration,
    pub(crate) mem_min_size: Option<usize>,
    pub(crate) markdown: Option<String>,
    pub(crate) quick: bool,
    /// Check every implementation's executions (once per point) before timing it.
    pub(crate) verify: bool,
    /// Every node waits (`Probe::step`) instead of ending on its first poll.
    pub(crate) waits: bool,
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

pub(crate) const USAGE: &str = "\
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

pub(crate) fn parse_size(s: &str) -> Result<usize, String> {
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

pub(crate) fn parse_list<T>(
    s: &str,
    f: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| f(p.trim()))
        .collect()
}

pub(crate) fn parse_args(args: &[String]) -> Result<Options, String> {
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
