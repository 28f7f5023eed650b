//! The order example's runs: the graph run `--runs` times through one orchestrator, a line
//! per run, the breaker's transitions as they happen, and the account of the last run.

use std::error::Error;
use std::fs::File;
use std::io::BufWriter;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use baton_examples::{Behavior, Downstreams, OrderApi, OrderRequest, Service, millis, ms};
use baton_graph::{CircuitBreaker, Graph, Report, RunError, RunOptions, observe::Event};
use tokio::time::Instant;

use crate::Nodes;
use crate::args::Args;
use crate::output::{branch_taken, median, print_details, stock_summary};

/// Prints each breaker transition with the time and the run it happened in, and notes that
/// one happened.
#[derive(Debug, Clone)]
pub(crate) struct Transitions {
    started: Instant,
    current_run: Arc<AtomicU32>,
    happened: Arc<AtomicBool>,
}

impl Transitions {
    pub(crate) fn new() -> Self {
        Transitions {
            started: Instant::now(),
            current_run: Arc::new(AtomicU32::new(0)),
            happened: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The orchestrator's observer.
    pub(crate) fn observer(&self) -> impl Fn(&Event<'_>) + Send + Sync + 'static {
        let this = self.clone();
        move |event: &Event<'_>| {
            if let Event::BreakerTransition(t) = event {
                this.happened.store(true, Ordering::Relaxed);
                println!(
                    "[{:>8.1} ms] run {}: {t}",
                    millis(t.at().saturating_duration_since(this.started)),
                    this.current_run.load(Ordering::Relaxed)
                );
            }
        }
    }
}

/// What the runs share: the flags, the services, the graph's handles, the breaker.
pub(crate) struct Session<'a> {
    pub(crate) args: &'a Args,
    pub(crate) downstreams: &'a Downstreams,
    pub(crate) nodes: &'a Nodes,
    pub(crate) inventory: &'a CircuitBreaker,
    pub(crate) transitions: &'a Transitions,
}

type Outcome = Result<Report, RunError>;

impl Session<'_> {
    /// Runs the graph `--runs` times: the last run's result, and every run's makespan.
    pub(crate) async fn run_all(
        &self,
        graph: &Graph<OrderRequest>,
        order: OrderRequest,
        options: &RunOptions,
    ) -> Result<(Outcome, Vec<Duration>), Box<dyn Error>> {
        let args = self.args;
        let mut makespans = Vec::new();
        let mut last = None;
        if args.runs > 1 {
            println!("run  at (ms)  makespan  branch     inventory  stock");
        }
        for n in 1..=args.runs {
            if args.recover_after == Some(n - 1) {
                self.downstreams.update(Service::Stock, Behavior::succeed);
                println!("-- the stock service is back (after {} runs) --", n - 1);
            }
            self.transitions.current_run.store(n, Ordering::Relaxed);
            self.transitions.happened.store(false, Ordering::Relaxed);
            let at = self.transitions.started.elapsed();
            let result = graph.run_with(order, options.clone()).await;
            let report = match &result {
                Ok(report) => Some(report),
                Err(e) => e.report(),
            };
            if let Some(report) = report {
                makespans.push(report.makespan());
                if args.runs > 1 {
                    self.print_run(n, at, report);
                }
            }
            if let Err(e) = &result {
                if args.runs > 1 {
                    println!("run {n:>2}  error: {e}");
                }
            }
            last = Some(result);
            if n < args.runs && args.pause_ms > 0 {
                tokio::time::sleep(ms(args.pause_ms)).await;
            }
        }
        let last = last.ok_or("no run was made")?;
        Ok((last, makespans))
    }

    /// Run `n`'s line, and its full account when the breaker changed state in it.
    fn print_run(&self, n: u32, at: Duration, report: &Report) {
        let nodes = self.nodes;
        let stock = report
            .node(nodes.stock)
            .map(|s| stock_summary(&s, report.get(nodes.stock).copied()))
            .unwrap_or_default();
        println!(
            "{n:>3}  {:>7.1}  {:>8.1}  {:9}  {:9}  {stock}",
            millis(at),
            millis(report.makespan()),
            branch_taken(report),
            self.inventory.state().as_str(),
        );
        if self.transitions.happened.load(Ordering::Relaxed) && n < self.args.runs {
            print_details(report, nodes);
            println!();
        }
    }

    /// The full account of the last run, or its error and what it kept.
    pub(crate) fn print_last(&self, result: &Outcome) {
        if self.args.runs > 1 {
            println!("\nlast run:");
        }
        let report = match result {
            Ok(report) => Some(report),
            Err(e) => {
                println!("error: {e}");
                e.report()
            }
        };
        if let Some(report) = report {
            print_details(report, self.nodes);
        }
        println!();
    }

    /// What the stock service saw, and the stand-in stock count.
    pub(crate) fn print_services(&self, start: u64, now: u64) {
        println!(
            "stock service: {} calls received, {} stopped at the caller's deadline",
            self.downstreams.calls(Service::Stock),
            self.downstreams.stopped_early(Service::Stock)
        );
        println!("stand-in stock count: {start} at the start, {now} now");
    }

    /// The same order placed with one call after the other, as often as the graph ran, and
    /// the two median times.
    pub(crate) async fn compare_serially(
        &self,
        api: &OrderApi,
        order: &OrderRequest,
        makespans: Vec<Duration>,
    ) -> Result<(), Box<dyn Error>> {
        let runs = self.args.runs;
        let mut serial = Vec::new();
        for _ in 0..runs {
            let t = std::time::Instant::now();
            api.place_order_serially(order).await?;
            serial.push(t.elapsed());
        }
        let graph_ms = millis(median(makespans));
        let serial_ms = millis(median(serial));
        let of_runs = if runs > 1 {
            format!("median of {runs} runs   ")
        } else {
            String::new()
        };
        println!(
            "{of_runs}graph: {graph_ms:.1} ms   serial: {serial_ms:.1} ms   ({:.2}x faster)",
            serial_ms / graph_ms
        );
        Ok(())
    }

    /// Says which nodes produced no value, and writes the JSON report and the trace.
    pub(crate) fn finish(&self, result: &Outcome) -> Result<(), Box<dyn Error>> {
        let report = match result {
            Ok(report) => report,
            Err(e) => match e.report() {
                Some(report) => report,
                None => return Ok(()),
            },
        };
        if !report.is_clean() {
            let c = report.counts();
            let kept = if result.is_ok() {
                "the run still returned its report"
            } else {
                "the run is an error"
            };
            println!(
                "{} of {} nodes produced no value ({} failed, {} skipped, {} cancelled); mode {}: {kept}",
                c.failed + c.skipped + c.cancelled,
                report.len(),
                c.failed,
                c.skipped,
                c.cancelled,
                self.args.mode,
            );
        }
        if let Some(path) = &self.args.json {
            let file = BufWriter::new(File::create(path)?);
            serde_json::to_writer_pretty(file, report)?;
            println!("report written to {}", path.display());
        }
        if let Some(path) = &self.args.trace {
            std::fs::write(path, report.to_chrome_trace())?;
            println!("trace written to {}", path.display());
        }
        Ok(())
    }
}
