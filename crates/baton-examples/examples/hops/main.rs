//! One deadline across three services on `127.0.0.1`, A → B → C, each a baton graph served
//! over HTTP, each passing its remaining budget to the next:
//!
//! ```text
//! client ──grpc-timeout──> A: local ─> call ──budget──> B: local ─> call ──budget──> C: local ─> work
//! ```
//!
//! The first caller gives A a budget; each hop does 20 ms of local work and passes what is
//! left, less a 5 ms margin, to the next; C's work would take 5 s. The example calls A
//! twice and prints each hop's report (`output.rs`): once with a budget C's work can start
//! in, once with one too short for C's minimum attempt time. The servers are
//! `servers.rs`, the settings `config.rs`, the hops' reports `reports.rs`.
//!
//! ```text
//! cargo run --release -p baton-examples --example hops
//! ```

mod config;
mod output;
mod reports;
mod servers;
#[cfg(test)]
mod tests;

use axum::routing::post_service;
use axum::{Json, Router};
use baton_examples::ms;
use baton_graph::{
    BoxError, BuildError, Graph, Report, Retry, deadline::DownstreamDeadlineExceeded,
    report::MissingValue, tower::DeadlineHeaders,
};

use crate::config::HopConfig;
use crate::reports::Hops;
use crate::servers::HopServers;

/// The hop `hop`'s router: `POST /work`, whose graph calls `next` (`http://…/work`) or,
/// at the last hop, works. Its run's deadline is the caller's, read from the request's
/// `grpc-timeout` (or the millisecond header); each run's report goes to `hops`.
fn hop_router(
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
    let downstream = match next {
        // What is left of the deadline, less the margin, goes in the call's headers.
        Some(url) => {
            let client = reqwest::Client::new();
            let headers = DeadlineHeaders::new().margin(config.margin);
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
        // No timeout of its own: only the caller's deadline cuts the work, and it does not
        // start with less than the minimum attempt time left.
        None => {
            let (work, started) = (config.work, hops.clone());
            g.node("work")
                .after(local)
                .min_attempt_time(config.min_attempt)
                .task(move |_ctx, _budget| {
                    started.count_work_start();
                    async move {
                        tokio::time::sleep(work).await;
                        Ok::<_, BoxError>("worked".to_owned())
                    }
                })
        }
    };
    let hops = hops.clone();
    let service = g.build()?.into_service().map_report(move |report: Report| {
        hops.record(hop, &report, local);
        let from_next = report.require(downstream)?;
        Ok::<_, MissingValue>(Json(format!("{hop} ← {from_next}"))) // its answer, or 504
    });
    let service = service.http(|(): ()| ());
    Ok(Router::new().route("/work", post_service(service)))
}

/// What a hop makes of the next hop's answer: its text, a
/// [`DownstreamDeadlineExceeded`] for a 504 (which is never retried), an error for any
/// other failure.
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

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let servers = HopServers::start(&HopConfig::default()).await?;
    let client = reqwest::Client::new();
    // Open the pooled connections first, so that the budgets shown are not spent connecting.
    let _ = servers.call(&client, ms(200)).await?;
    let _ = servers.reports(ms(1_000)).await;

    for budget in [ms(300), ms(80)] {
        let (status, deadline) = servers.call(&client, budget).await?;
        output::print_call(budget, status, deadline, &servers.reports(ms(1_000)).await);
    }
    servers.shutdown().await?;
    Ok(())
}
