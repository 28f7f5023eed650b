//! The front service: an axum app on `127.0.0.1` whose `GET /order/{user}/{sku}` runs the
//! order flow in one of the three builds, and whose `GET /cpu` answers the process's CPU
//! time so far (user + system, in microseconds, from `getrusage(RUSAGE_SELF)`).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use baton_graph::BoxError;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use baton_stand_in::{OrderApi, OrderRequest};

use crate::answer::OrderResult;
use crate::{build_baton, build_hand, build_tower};

/// One build of the order flow: what the handler awaits.
pub(crate) trait Place: Send + Sync + 'static {
    /// Places `order`: the answer, or why there is none.
    fn place(
        &self,
        order: OrderRequest,
    ) -> impl Future<Output = Result<OrderResult, String>> + Send;
}

/// The three builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Build {
    /// (a) a baton graph.
    Baton,
    /// (b) hand-written: `try_join!`, `timeout`, backon, failsafe.
    Hand,
    /// (c) a tower stack with tower-resilience's breaker.
    Tower,
}

impl Build {
    /// Every build, in the order rounds alternate them.
    pub(crate) const ALL: [Build; 3] = [Build::Baton, Build::Hand, Build::Tower];

    /// The build's name on the command line and in the table.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Build::Baton => "baton",
            Build::Hand => "hand",
            Build::Tower => "tower",
        }
    }

    /// Parses [`name`](Self::name).
    pub(crate) fn parse(s: &str) -> Option<Build> {
        Build::ALL.into_iter().find(|b| b.name() == s)
    }
}

/// Orders this process has answered (any status).
static SERVED: AtomicU64 = AtomicU64::new(0);

async fn order<P: Place>(
    State(flow): State<Arc<P>>,
    Path((user_id, sku_id)): Path<(u64, u64)>,
) -> Response {
    let answer = match flow.place(OrderRequest { user_id, sku_id }).await {
        Ok(result) => Json(result).into_response(),
        Err(why) => (StatusCode::BAD_GATEWAY, why).into_response(),
    };
    SERVED.fetch_add(1, Ordering::Relaxed);
    answer
}

/// The process's CPU time so far, user + system, in microseconds.
pub(crate) fn cpu_micros() -> io::Result<u64> {
    use nix::sys::resource::{UsageWho, getrusage};
    let usage = getrusage(UsageWho::RUSAGE_SELF).map_err(io::Error::from)?;
    let micros = |t: nix::sys::time::TimeVal| {
        let us = i128::from(t.tv_sec()) * 1_000_000 + i128::from(t.tv_usec());
        u64::try_from(us).unwrap_or(0)
    };
    Ok(micros(usage.user_time()) + micros(usage.system_time()))
}

async fn cpu() -> Response {
    match cpu_micros() {
        Ok(us) => us.to_string().into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

fn app<P: Place>(flow: P) -> Router {
    Router::new()
        .route("/order/{user}/{sku}", get(order::<P>))
        .route("/cpu", get(cpu))
        .with_state(Arc::new(flow))
}

/// Serves `build` over the stand-ins at `downstream` on `127.0.0.1:0`, on the current
/// runtime: its address and the server's task.
pub(crate) async fn serve(
    build: Build,
    downstream: &str,
) -> Result<(SocketAddr, JoinHandle<io::Result<()>>), BoxError> {
    let api = OrderApi::pooled(downstream)?;
    let app = match build {
        Build::Baton => app(build_baton::Flow::new(&api)?),
        Build::Hand => app(build_hand::Flow::new(&api)),
        Build::Tower => app(build_tower::Flow::new(&api)?),
    };
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((addr, task))
}

/// The child process's body (`service front BUILD URL`): serves `build`, prints its
/// address on a line of standard output, and exits when standard input closes, saying on
/// standard error how many orders it answered (for profiles: see `SERVICE_FRONT_WRAPPER`).
pub(crate) async fn child(build: Build, downstream: &str) -> Result<(), BoxError> {
    use tokio::io::AsyncReadExt;
    let (addr, task) = serve(build, downstream).await?;
    println!("{addr}");
    let mut sink = Vec::new();
    tokio::io::stdin().read_to_end(&mut sink).await?;
    task.abort();
    eprintln!(
        "front {}: {} orders answered",
        build.name(),
        SERVED.load(Ordering::Relaxed)
    );
    Ok(())
}
