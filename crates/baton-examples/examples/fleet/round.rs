//! One round of the fleet example: a downstream on 127.0.0.1 that goes down and comes back,
//! the replica processes started against it, and what it saw while down.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use baton_examples::{HttpServer, Limits};
use baton_graph::BoxError;

use crate::args::Args;
use crate::{DOWN_AT, UP_AT};

/// What the downstream saw while down.
pub(crate) struct Figures {
    pub(crate) calls: usize,
    pub(crate) stopped: Duration,
    pub(crate) probes: usize,
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

pub(crate) async fn round(args: &Args, redis: &str, mode: &str) -> Result<Figures, BoxError> {
    let d = Downstream::default();
    let app = axum::Router::new()
        .route("/item", axum::routing::get(item))
        .with_state(d.clone());
    let server = HttpServer::start(Limits::default().bound(app)).await?;
    let name = format!("inventory-{}", std::process::id());
    let name = format!("{name}-{mode}-{:?}", Instant::now());
    let mut children: Vec<Child> = Vec::new();
    for _ in 0..args.replicas {
        children.push(
            Command::new(std::env::current_exe()?)
                .args(["--replica", "--mode", mode, "--name", &name])
                .args(["--redis", redis, "--downstream", &server.url_of("/item")])
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
    server.shutdown().await?;
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
