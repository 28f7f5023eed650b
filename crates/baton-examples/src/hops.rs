//! One deadline across three services: A → B → C, each a baton graph served over HTTP on
//! `127.0.0.1`, each passing its remaining budget to the next.
//!
//! ```text
//! client ──grpc-timeout──> A: local ─> call ──budget──> B: local ─> call ──budget──> C: local ─> work
//! ```
//!
//! Each hop reads the caller's budget from the request's `grpc-timeout` (or the
//! millisecond header), so its run's deadline is the caller's; does some local work; then
//! calls the next hop with what is left less a margin (`DeadlineHeaders::outbound`). C's
//! `work` would take seconds: it is cut at C's deadline, which comes just before B's, which
//! comes just before A's. A downstream's 504 is a `DownstreamDeadlineExceeded`, which is
//! not retried. C's `work` has a minimum attempt time: with less than that left it does
//! not start at all.
//!
//! Each hop writes its own report ([`HopReport`]): the budget it started with, when it
//! stopped, and how each node ended.

use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::routing::post_service;
use axum::{Json, Router};
use baton_graph::{
    BoxError, BuildError, Graph, Report, Retry, deadline::DownstreamDeadlineExceeded,
    report::MissingValue, tower::DeadlineHeaders,
};
use tokio::time::Instant;

use crate::HttpServer;

/// The hop `hop`'s router: `POST /work`, whose graph calls `next` (`http://…/work`) or,
/// at the last hop, works.
///
/// # Errors
/// [`BuildError`] if the graph does not validate.
pub fn hop_router(
    hop: &'static str,
    next: Option<String>,
    config: &HopConfig,
    hops: &Hops,
) -> Result<Router, BuildError> {
    let mut g = Graph::<()>::builder();
    g.name(hop);
    let local_work = config.local_work;
    let local = g.node("local").task(move |ctx, ()| async move {
        let budget = ctx.remaining();
        tokio::time::sleep(local_work).await;
        Ok::<_, BoxError>(budget)
    });
    let margin = config.margin;
    let downstream = match next {
        Some(url) => {
            let client = reqwest::Client::new();
            let headers = DeadlineHeaders::new().margin(margin);
            g.node("call")
                .after(local)
                .retry(Retry::new(3))
                .task(move |ctx, _budget| {
                    let request = client
                        .post(&url)
                        .headers(headers.outbound(ctx.deadline()))
                        .send();
                    async move { answer(request.await?).await }
                })
        }
        None => {
            let work = config.work;
            let started = Arc::clone(&hops.work_started);
            g.node("work")
                .after(local)
                .min_attempt_time(config.min_attempt)
                .task(move |_ctx, _budget| {
                    started.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    async move {
                        tokio::time::sleep(work).await;
                        Ok::<_, BoxError>("worked".to_owned())
                    }
                })
        }
    };
    let hops = hops.clone();
    let service = g.build()?.into_service().map_report(move |report: Report| {
        let work_started = match hop {
            "C" => hops
                .work_started
                .swap(0, std::sync::atomic::Ordering::Relaxed),
            _ => 0,
        };
        hops.push(HopReport {
            hop,
            budget: report.get(local).copied().flatten(),
            stopped: Instant::now(),
            nodes: report.nodes().map(|n| end_of(&n)).collect(),
            work_started,
        });
        let from_next = report.require(downstream)?;
        Ok::<_, MissingValue>(Json(format!("{hop} ← {from_next}"))) // its answer, or 504
    });
    let service = service.http(|(): ()| ());
    Ok(Router::new().route("/work", post_service(service)))
}

/// How each hop behaves.
#[derive(Debug, Clone)]
pub struct HopConfig {
    /// The local work each hop does before it calls the next.
    pub local_work: Duration,
    /// What each hop keeps back of its budget for the request's trip and the answer's.
    pub margin: Duration,
    /// How long C's `work` would take with no deadline.
    pub work: Duration,
    /// C's `work` does not start with less than this left.
    pub min_attempt: Duration,
}

impl Default for HopConfig {
    /// 20 ms of local work per hop, a 5 ms margin, 5 s of work at C with a 50 ms
    /// minimum attempt time.
    fn default() -> Self {
        HopConfig {
            local_work: Duration::from_millis(20),
            margin: Duration::from_millis(5),
            work: Duration::from_secs(5),
            min_attempt: Duration::from_millis(50),
        }
    }
}

/// How one node of a hop ended, from the hop's report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEnd {
    /// The node.
    pub node: String,
    /// Its outcome (`succeeded`, `failed`, `skipped`, …).
    pub outcome: String,
    /// Its error's kind, and the kind under any retry (`gave_up` → `timeout`); `None`
    /// when it succeeded.
    pub error: Option<String>,
    /// Whether its error is a downstream's "deadline expired" answer.
    pub downstream_expired: bool,
    /// How many attempts it made.
    pub attempts: u32,
}

/// What one hop reports about one request.
#[derive(Debug, Clone)]
pub struct HopReport {
    /// `A`, `B` or `C`.
    pub hop: &'static str,
    /// The budget the hop's first node started with; `None` without a deadline.
    pub budget: Option<Duration>,
    /// When the hop's run ended.
    pub stopped: Instant,
    /// Each node, in the graph's order.
    pub nodes: Vec<NodeEnd>,
    /// How many times C's `work` task was called (0 at A and B).
    pub work_started: u32,
}

/// The reports of every hop, shared by the three services.
#[derive(Debug, Clone, Default)]
pub struct Hops {
    reports: Arc<Mutex<Vec<HopReport>>>,
    work_started: Arc<std::sync::atomic::AtomicU32>,
}

impl Hops {
    /// The reports so far, in the order the hops stopped; empties the log.
    #[must_use]
    pub fn take(&self) -> Vec<HopReport> {
        std::mem::take(&mut *self.reports.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn push(&self, report: HopReport) {
        self.reports
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(report);
    }
}

/// What a hop makes of the next hop's answer: its text, a
/// [`DownstreamDeadlineExceeded`] for a 504, an error for any other failure.
async fn answer(response: reqwest::Response) -> Result<String, BoxError> {
    let status = response.status();
    let grpc = response
        .headers()
        .get("grpc-status")
        .and_then(|v| v.to_str().ok());
    if DownstreamDeadlineExceeded::is_expired_answer(status.as_u16(), grpc) {
        return Err(DownstreamDeadlineExceeded::new(format!("answered {status}")).into());
    }
    if !status.is_success() {
        return Err(format!("answered {status}").into());
    }
    Ok(response.json::<String>().await?)
}

fn end_of(node: &baton_graph::NodeReport<'_>) -> NodeEnd {
    let error = node.error();
    NodeEnd {
        node: node.name().to_owned(),
        outcome: node.outcome().as_str().to_owned(),
        error: error.map(|e| match e.root_cause().kind() {
            kind if kind == e.kind() => kind.to_owned(),
            root => format!("{} → {root}", e.kind()),
        }),
        downstream_expired: error
            .and_then(|e| e.task_error())
            .is_some_and(|e| DownstreamDeadlineExceeded::is_in(e)),
        attempts: node.attempts(),
    }
}

/// The three hops, serving on random ports of `127.0.0.1`. Dropping it stops them.
#[derive(Debug)]
pub struct HopServers {
    servers: Vec<HttpServer>,
    /// Every hop's reports.
    pub hops: Hops,
}

impl HopServers {
    /// Starts C, then B calling C, then A calling B.
    ///
    /// # Errors
    /// When a listener cannot be bound, or a graph does not validate.
    pub async fn start(config: &HopConfig) -> Result<HopServers, BoxError> {
        let hops = Hops::default();
        let c = HttpServer::start(hop_router("C", None, config, &hops)?).await?;
        let b = HttpServer::start(hop_router("B", Some(c.url_of("/work")), config, &hops)?).await?;
        let a = HttpServer::start(hop_router("A", Some(b.url_of("/work")), config, &hops)?).await?;
        Ok(HopServers {
            servers: vec![a, b, c],
            hops,
        })
    }

    /// A's `http://127.0.0.1:PORT/work`.
    #[must_use]
    pub fn url(&self) -> String {
        self.servers[0].url_of("/work")
    }

    /// Sends A a request with `budget` in `grpc-timeout`, as the first caller; returns
    /// A's status, and the instant A's deadline passes.
    ///
    /// # Errors
    /// When A cannot be reached.
    pub async fn call(
        &self,
        client: &reqwest::Client,
        budget: Duration,
    ) -> Result<(reqwest::StatusCode, Instant), reqwest::Error> {
        let deadline = Instant::now() + budget;
        let response = client
            .post(self.url())
            .headers(DeadlineHeaders::new().outbound(Some(deadline)))
            .send()
            .await?;
        Ok((response.status(), deadline))
    }

    /// Waits until the three hops have reported (at most `wait`), and returns their
    /// reports, A's first.
    pub async fn reports(&self, wait: Duration) -> Vec<HopReport> {
        let until = Instant::now() + wait;
        let mut reports = Vec::new();
        while reports.len() < 3 && Instant::now() < until {
            reports.extend(self.hops.take());
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        reports.sort_by_key(|r| r.hop);
        reports
    }

    /// Stops the three hops.
    ///
    /// # Errors
    /// A server's I/O error.
    pub async fn shutdown(self) -> io::Result<()> {
        for server in self.servers {
            server.shutdown().await?;
        }
        Ok(())
    }
}
