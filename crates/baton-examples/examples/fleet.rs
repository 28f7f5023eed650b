//! A fleet of replicas against one downstream that goes down and comes back, with local
//! breakers and then with breakers shared through Redis.
//!
//! One command starts a `redis-server` on a free loopback port (unless `--redis URL` is
//! given), a downstream on 127.0.0.1, and `--replicas` child processes (this example run
//! with `--replica`), each calling the downstream every 2 ms through its own breaker
//! `inventory` (trips after 5 consecutive failures, open 500 ms, one half-open probe). The
//! downstream is down from 0.5 s to 2.5 s. Prints, for each kind of breaker, the calls that
//! reached the dead downstream, the time from its going down until every replica stopped
//! calling it, and the probes it received while down:
//!
//! ```text
//! cargo run --release -p baton-examples --example fleet -- --replicas 8
//! ```
//!
//! Real processes, real time: the figures vary a little from run to run.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use baton_graph::{BoxError, CircuitBreaker};
use baton_redis::{RedisBreakers, RedisOptions};
use clap::Parser;

#[derive(Parser, Debug)]
struct Args {
    /// Replica processes.
    #[arg(long, default_value_t = 8)]
    replicas: u32,
    /// A Redis server to use instead of starting one.
    #[arg(long)]
    redis: Option<String>,
    /// Run as a replica (internal).
    #[arg(long, hide = true)]
    replica: bool,
    /// Replica: `local` or `shared`.
    #[arg(long, default_value = "local", hide = true)]
    mode: String,
    /// Replica: the downstream's URL.
    #[arg(long, default_value = "", hide = true)]
    downstream: String,
    /// Replica: the breaker's name.
    #[arg(long, default_value = "inventory", hide = true)]
    name: String,
}

const DOWN_AT: Duration = Duration::from_millis(500);
const UP_AT: Duration = Duration::from_millis(2_500);
const RUN_FOR: Duration = Duration::from_millis(3_000);

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    if args.replica {
        return replica(&args).await;
    }
    let (url, _server) = match &args.redis {
        Some(url) => (url.clone(), None),
        None => {
            let server = RedisServer::start()?;
            (server.url(), Some(server))
        }
    };
    println!(
        "{:<8} {:>9} {:>14} {:>18} {:>18}",
        "breakers", "replicas", "calls to dead", "until all stopped", "probes while down"
    );
    for mode in ["local", "shared"] {
        let f = round(&args, &url, mode).await?;
        println!(
            "{:<8} {:>9} {:>14} {:>15} ms {:>18}",
            mode,
            args.replicas,
            f.calls,
            f.stopped.as_millis(),
            f.probes
        );
    }
    Ok(())
}

/// What the downstream saw while down.
struct Figures {
    calls: usize,
    stopped: Duration,
    probes: usize,
}

#[derive(Clone, Default)]
struct Downstream {
    down: Arc<AtomicBool>,
    /// When each call arrived while down.
    calls: Arc<Mutex<Vec<Instant>>>,
}

async fn item(State(d): State<Downstream>) -> StatusCode {
    if d.down.load(Ordering::SeqCst) {
        d.calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Instant::now());
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    }
}

async fn round(args: &Args, redis: &str, mode: &str) -> Result<Figures, BoxError> {
    let d = Downstream::default();
    let app = axum::Router::new()
        .route("/item", axum::routing::get(item))
        .with_state(d.clone());
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    let name = format!("inventory-{}", std::process::id());
    let name = format!("{name}-{mode}-{:?}", Instant::now());
    let mut children: Vec<Child> = Vec::new();
    for _ in 0..args.replicas {
        children.push(
            Command::new(std::env::current_exe()?)
                .args(["--replica", "--mode", mode, "--name", &name])
                .args([
                    "--redis",
                    redis,
                    "--downstream",
                    &format!("http://{addr}/item"),
                ])
                .stdout(Stdio::null())
                .spawn()?,
        );
    }
    tokio::time::sleep(DOWN_AT).await;
    let down_at = Instant::now();
    d.down.store(true, Ordering::SeqCst);
    tokio::time::sleep(UP_AT - DOWN_AT).await;
    d.down.store(false, Ordering::SeqCst);
    for mut c in children {
        tokio::task::spawn_blocking(move || c.wait()).await??;
    }
    let calls = d.calls.lock().unwrap_or_else(|e| e.into_inner()).clone();
    // The first burst ends at the first gap of 100 ms; the calls after it are probes.
    let burst = calls
        .windows(2)
        .position(|w| w[1] - w[0] >= Duration::from_millis(100))
        .map_or(calls.len(), |i| i + 1);
    let stopped = calls
        .get(burst.saturating_sub(1))
        .map_or(Duration::ZERO, |t| t.saturating_duration_since(down_at));
    Ok(Figures {
        calls: calls.len(),
        stopped,
        probes: calls.len() - burst,
    })
}

/// A replica: calls the downstream every 2 ms through its breaker for [`RUN_FOR`].
async fn replica(args: &Args) -> Result<(), BoxError> {
    let builder = CircuitBreaker::builder(&args.name)
        .consecutive_failures(5)
        .open_duration(Duration::from_millis(500));
    let breaker = if args.mode == "shared" {
        let redis = args.redis.as_deref().unwrap_or_default();
        let redis = RedisBreakers::connect(redis, RedisOptions::default()).await?;
        builder.shared(redis.backend()).build()?
    } else {
        builder.build()?
    };
    let client = reqwest::Client::new();
    let end = Instant::now() + RUN_FOR;
    while Instant::now() < end {
        if let Ok(permit) = breaker.try_acquire() {
            let start = Instant::now();
            match client.get(&args.downstream).send().await {
                Ok(r) if r.status().is_success() => permit.success(start.elapsed()),
                _ => permit.failure(start.elapsed()),
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

/// A `redis-server` on a free loopback port, killed when dropped.
struct RedisServer {
    child: Child,
    port: u16,
}

impl RedisServer {
    fn start() -> Result<Self, BoxError> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("redis-server (install it, or pass --redis URL): {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return Err("redis-server did not start".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(RedisServer { child, port })
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
