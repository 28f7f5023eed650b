//! The figures of a window, their medians over rounds, and the Markdown table.

use std::fmt::Write as _;

use crate::Options;
use crate::front::Build;
use crate::load::Sample;
use crate::scenario::Scenario;

/// The figures of one window.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Row {
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    cpu_us_per_req: f64,
    stock_calls_per_req: f64,
    stock_calls: f64,
    errors: f64,
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

impl Row {
    /// The figures of `s`.
    pub(crate) fn of(s: &Sample) -> Row {
        let answers = s.answers.max(1) as f64;
        Row {
            rps: s.answers as f64 / s.window.as_secs_f64(),
            p50_ms: ms(s.latency.value_at_quantile(0.5)),
            p99_ms: ms(s.latency.value_at_quantile(0.99)),
            p999_ms: ms(s.latency.value_at_quantile(0.999)),
            cpu_us_per_req: s.cpu_us as f64 / answers,
            stock_calls_per_req: s.stock_calls as f64 / answers,
            stock_calls: s.stock_calls as f64,
            errors: s.errors as f64,
        }
    }

    /// One line for the progress output.
    pub(crate) fn line(&self) -> String {
        format!(
            "{:7.1} req/s  p50 {:6.1}  p99 {:6.1}  p99.9 {:6.1} ms  {:6.0} µs CPU/req  \
             {:.2} stock calls/req  {} non-200",
            self.rps,
            self.p50_ms,
            self.p99_ms,
            self.p999_ms,
            self.cpu_us_per_req,
            self.stock_calls_per_req,
            self.errors
        )
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    match xs.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => xs[n / 2],
        n => (xs[n / 2 - 1] + xs[n / 2]) / 2.0,
    }
}

/// Every window's figures, by build and scenario.
#[derive(Debug, Default)]
pub(crate) struct Results {
    rows: Vec<(Build, Scenario, Row)>,
}

impl Results {
    /// Adds a window of `build` in `scenario`.
    pub(crate) fn add(&mut self, build: Build, scenario: Scenario, sample: &Sample) {
        self.rows.push((build, scenario, Row::of(sample)));
    }

    /// The median of each figure over the rounds of `build` in `scenario`.
    fn median(&self, build: Build, scenario: Scenario) -> Option<Row> {
        let rows: Vec<Row> = self
            .rows
            .iter()
            .filter(|(b, s, _)| *b == build && *s == scenario)
            .map(|(_, _, r)| *r)
            .collect();
        if rows.is_empty() {
            return None;
        }
        let m = |f: fn(&Row) -> f64| median(rows.iter().map(f).collect());
        Some(Row {
            rps: m(|r| r.rps),
            p50_ms: m(|r| r.p50_ms),
            p99_ms: m(|r| r.p99_ms),
            p999_ms: m(|r| r.p999_ms),
            cpu_us_per_req: m(|r| r.cpu_us_per_req),
            stock_calls_per_req: m(|r| r.stock_calls_per_req),
            stock_calls: m(|r| r.stock_calls),
            errors: m(|r| r.errors),
        })
    }
}

fn label(build: Build) -> &'static str {
    match build {
        Build::Baton => "(a) baton graph",
        Build::Hand => "(b) try_join + timeout + backon + failsafe",
        Build::Tower => "(c) tower timeout + retry + tower-resilience breaker",
    }
}

/// The 1-minute load average, from `/proc/loadavg`.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

/// The Markdown table of the medians, with the run's settings above it.
pub(crate) fn markdown(results: &Results, o: &Options, load_before: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} connections, {:.1} s warm-up, {:.1} s window, medians of {} rounds \
         (builds alternated in each round), front on {} tokio workers, 1-minute load \
         average {} at the start and {} at the end.\n",
        o.load.concurrency,
        o.load.warm_up.as_secs_f64(),
        o.load.window.as_secs_f64(),
        o.rounds,
        o.front_workers.map_or_else(
            || format!(
                "{} (one per core)",
                std::thread::available_parallelism().map_or(0, |n| n.get())
            ),
            |n| n.to_string()
        ),
        load_before,
        load_average()
    );
    out.push_str(
        "| scenario | build | req/s | p50 ms | p99 ms | p99.9 ms | CPU µs/req | stock calls/req \
         | stock calls | non-200 | req/s ÷ (b) | p99 ÷ (b) |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for &scenario in &o.scenarios {
        let hand = results.median(Build::Hand, scenario);
        for &build in &o.builds {
            let Some(r) = results.median(build, scenario) else {
                continue;
            };
            let (rps_ratio, p99_ratio) = match hand {
                Some(h) => (
                    format!("{:.3}", r.rps / h.rps),
                    format!("{:.3}", r.p99_ms / h.p99_ms),
                ),
                None => ("-".to_owned(), "-".to_owned()),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} | {:.3} | {:.0} | {:.0} | {} | {} |",
                scenario.name(),
                label(build),
                r.rps,
                r.p50_ms,
                r.p99_ms,
                r.p999_ms,
                r.cpu_us_per_req,
                r.stock_calls_per_req,
                r.stock_calls,
                r.errors,
                rps_ratio,
                p99_ratio
            );
        }
    }
    out
}
