//! `service`: the real-service benchmark. An axum front service on `127.0.0.1` runs the
//! order flow against stand-in downstream services over real HTTP, in three builds with the
//! same policies: (a) a baton graph, (b) hand-written `try_join!` + `timeout` + backon +
//! failsafe, (c) a tower stack (tower's `timeout` and `retry`, tower-resilience's breaker).
//!
//! Each (round, scenario, build) starts the front in a fresh child process of this binary
//! (fresh breakers, its own runtime, its own CPU account), loads it with a fixed number of
//! connections for a warm-up then a measured window, and reads the front's CPU time and the
//! stand-ins' call counters around the window. Builds alternate within every round
//! (a, b, c, a, b, c, …) so that load changes hit them alike; the table shows medians over
//! rounds.
//!
//! ```text
//! cargo run --release -p baton-bench --bin service -- --rounds 5 --window-s 8
//! cargo run --release -p baton-bench --bin service -- --quick
//! ```
//!
//! Scenarios: `healthy`; `stock-flaky` (`stock` answers 503 to half its calls, seeded RNG);
//! `stock-down` (`stock` answers 503 at once).

mod answer;
mod build_baton;
mod build_hand;
mod build_tower;
mod front;
mod load;
mod policy;
mod scenario;
mod table;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use baton_graph::BoxError;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use baton_stand_in::{Downstreams, OrderServer};
use front::Build;
use load::{Load, Sample};
use scenario::Scenario;

/// Command-line options.
#[derive(Debug, Clone)]
struct Options {
    rounds: usize,
    load: Load,
    builds: Vec<Build>,
    scenarios: Vec<Scenario>,
    seed: u64,
    markdown: Option<String>,
    /// The front's tokio worker threads (default: tokio's, one per core).
    front_workers: Option<usize>,
}

const USAGE: &str = "usage: service [--quick] [--rounds N] [--window-s S] [--warm-up-s S] \
[--concurrency N] [--builds baton,hand,tower] [--scenarios healthy,stock-flaky,stock-down] \
[--seed N] [--front-workers N] [--markdown PATH]";

fn list<T>(value: &str, parse: fn(&str) -> Option<T>) -> Result<Vec<T>, String> {
    value
        .split(',')
        .map(|s| parse(s.trim()).ok_or_else(|| format!("unknown name `{s}`")))
        .collect()
}

fn seconds(value: &str) -> Result<Duration, String> {
    let s: f64 = value.parse().map_err(|e| format!("`{value}`: {e}"))?;
    Duration::try_from_secs_f64(s).map_err(|e| format!("`{value}`: {e}"))
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        rounds: 5,
        load: Load {
            concurrency: 64,
            warm_up: Duration::from_secs(2),
            window: Duration::from_secs(8),
        },
        builds: Build::ALL.to_vec(),
        scenarios: Scenario::ALL.to_vec(),
        seed: 1,
        markdown: None,
        front_workers: None,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        if flag == "--quick" {
            o.rounds = 1;
            o.load.warm_up = Duration::from_millis(500);
            o.load.window = Duration::from_millis(1500);
            continue;
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || value.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--rounds" => o.rounds = usize::try_from(number()?).map_err(|e| e.to_string())?,
            "--window-s" => o.load.window = seconds(value)?,
            "--warm-up-s" => o.load.warm_up = seconds(value)?,
            "--concurrency" => {
                o.load.concurrency = usize::try_from(number()?).map_err(|e| e.to_string())?;
            }
            "--builds" => o.builds = list(value, Build::parse)?,
            "--scenarios" => o.scenarios = list(value, Scenario::parse)?,
            "--seed" => o.seed = number()?,
            "--markdown" => o.markdown = Some(value.clone()),
            "--front-workers" => {
                let n = usize::try_from(number()?).map_err(|e| e.to_string())?;
                o.front_workers = Some(n).filter(|n| *n > 0);
            }
            _ => return Err(format!("unknown flag `{flag}`")),
        }
    }
    if o.rounds == 0 || o.load.concurrency == 0 || o.load.window.is_zero() {
        return Err("--rounds, --concurrency and --window-s must be above 0".to_owned());
    }
    Ok(o)
}

/// Starts the front of `build` in a child process (with `workers` tokio workers); its
/// address.
async fn spawn_front(
    build: Build,
    downstream: &str,
    workers: Option<usize>,
) -> Result<(Child, SocketAddr), BoxError> {
    let workers = workers.map_or_else(String::new, |n| n.to_string());
    let exe = std::env::current_exe()?;
    // A profiler to run the front under, e.g. `valgrind --tool=callgrind`. In its words,
    // `{build}` stands for the build's name and `{front}` for the front's number in this
    // process, counted from 1, so that each front can write a file of its own.
    static FRONTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let front = FRONTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    let wrapper = std::env::var("SERVICE_FRONT_WRAPPER").unwrap_or_default();
    let mut words = wrapper.split_whitespace().map(|word| {
        word.replace("{build}", build.name())
            .replace("{front}", &front.to_string())
    });
    let mut command = match words.next() {
        Some(program) => {
            let mut c = Command::new(program);
            c.args(words).arg(&exe);
            c
        }
        None => Command::new(&exe),
    };
    let mut child = command
        .args(["front", build.name(), downstream, &workers])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().ok_or("the child has no stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).await?;
    let addr = line
        .trim()
        .parse()
        .map_err(|e| format!("the front printed `{}`: {e}", line.trim()))?;
    Ok((child, addr))
}

/// One measured window of `build` in `scenario`.
async fn segment(
    o: &Options,
    build: Build,
    scenario: Scenario,
    round: usize,
    stand_ins: &OrderServer,
) -> Result<Sample, BoxError> {
    scenario.apply(stand_ins.downstreams(), o.seed.wrapping_add(round as u64));
    let (mut child, addr) = spawn_front(build, stand_ins.base_url(), o.front_workers).await?;
    let sample = load::run(addr, o.load, stand_ins).await;
    // Closing its standard input ends the child (a profiler around it may take a while to
    // write its output); kill it if it does not end.
    drop(child.stdin.take());
    if tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .is_err()
    {
        child.kill().await?;
    }
    sample
}

async fn bench(o: &Options) -> Result<(), BoxError> {
    let load_before = table::load_average();
    let stand_ins = OrderServer::start(Downstreams::new()).await?;
    let mut results = table::Results::default();
    for round in 0..o.rounds {
        for &scenario in &o.scenarios {
            for &build in &o.builds {
                let sample = segment(o, build, scenario, round, &stand_ins).await?;
                eprintln!(
                    "round {} {:<11} {:<5} {}",
                    round + 1,
                    scenario.name(),
                    build.name(),
                    table::Row::of(&sample).line()
                );
                results.add(build, scenario, &sample);
            }
        }
    }
    let text = table::markdown(&results, o, &load_before);
    println!("{text}");
    if let Some(path) = &o.markdown {
        std::fs::write(path, &text)?;
    }
    Ok(())
}

/// The runtime: multi-thread, with `workers` threads when given (the front's
/// `--front-workers`, passed as the child's fourth argument).
fn runtime(args: &[String]) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    let workers = args.get(3).and_then(|n| n.parse::<usize>().ok());
    if let Some(n) = workers.filter(|n| *n > 0 && args.first().is_some_and(|a| a == "front")) {
        builder.worker_threads(n);
    }
    builder.build()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let runtime = match runtime(&args) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("no tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = if args.first().map(String::as_str) == Some("front") {
        match (args.get(1).and_then(|b| Build::parse(b)), args.get(2)) {
            (Some(build), Some(url)) => runtime.block_on(front::child(build, url)),
            _ => Err("usage: service front baton|hand|tower URL".into()),
        }
    } else {
        match parse(&args) {
            Ok(o) => runtime.block_on(bench(&o)),
            Err(e) => Err(format!("{e}\n{USAGE}").into()),
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
