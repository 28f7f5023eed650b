//! The load generator: a fixed number of connections, each a tokio task sending
//! `GET /order/7/42` to the front and waiting for the whole answer before the next (the
//! connections start a few milliseconds apart), for a warm-up then a measured window.
//! Every answer that completes inside the window counts, with its latency in an HDR
//! histogram (microseconds).

use std::net::SocketAddr;
use std::time::Duration;

use baton_graph::BoxError;
use hdrhistogram::Histogram;
use tokio::time::Instant;

use baton_stand_in::{OrderServer, Service};

/// How hard and how long to load the front.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Load {
    /// Connections, each with one request in flight.
    pub(crate) concurrency: usize,
    /// Load before the window, not measured (connections, breakers settle).
    pub(crate) warm_up: Duration,
    /// The measured window.
    pub(crate) window: Duration,
}

/// What one window measured.
#[derive(Debug)]
pub(crate) struct Sample {
    /// Answers completed in the window (any status).
    pub(crate) answers: u64,
    /// Of those, answers other than `200 OK` (or failed requests).
    pub(crate) errors: u64,
    /// The answers' latencies, in microseconds.
    pub(crate) latency: Histogram<u64>,
    /// The front process's CPU time over the window, in microseconds.
    pub(crate) cpu_us: u64,
    /// Calls the `stock` service received over the window.
    pub(crate) stock_calls: u64,
    /// The window's length.
    pub(crate) window: Duration,
}

/// The time between the first requests of two connections.
const STAGGER: Duration = Duration::from_millis(7);

fn histogram() -> Result<Histogram<u64>, BoxError> {
    Ok(Histogram::new_with_bounds(1, 60_000_000, 3)?)
}

/// One connection's loop until `until`, from `start` on; what it saw from `from` on.
async fn connection(
    client: reqwest::Client,
    url: String,
    start: Instant,
    from: Instant,
    until: Instant,
) -> Result<(u64, u64, Histogram<u64>), BoxError> {
    let mut latency = histogram()?;
    tokio::time::sleep_until(start).await;
    let (mut answers, mut errors) = (0, 0);
    while Instant::now() < until {
        let start = Instant::now();
        let ok = match client.get(&url).send().await {
            Ok(response) => {
                let status = response.status();
                response.bytes().await.is_ok() && status == reqwest::StatusCode::OK
            }
            Err(_) => false,
        };
        let end = Instant::now();
        if end >= from && end <= until {
            answers += 1;
            errors += u64::from(!ok);
            let us = u64::try_from((end - start).as_micros()).unwrap_or(u64::MAX);
            latency.record(us.max(1))?;
        }
    }
    Ok((answers, errors, latency))
}

async fn cpu_of(client: &reqwest::Client, front: SocketAddr) -> Result<u64, BoxError> {
    let text = client
        .get(format!("http://{front}/cpu"))
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    Ok(text.trim().parse()?)
}

/// Loads the front at `front` as `load` says; `stand_ins` count the `stock` calls.
pub(crate) async fn run(
    front: SocketAddr,
    load: Load,
    stand_ins: &OrderServer,
) -> Result<Sample, BoxError> {
    let client = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(usize::MAX)
        .tcp_nodelay(true)
        .build()?;
    let url = format!("http://{front}/order/7/42");
    let now = Instant::now();
    let from = now + load.warm_up;
    let until = from + load.window;
    // The connections start STAGGER apart, so that they do not all send at the same instant
    // for the whole run (the flow's latency is nearly fixed).
    let tasks: Vec<_> = (0..load.concurrency)
        .map(|i| {
            let start = now + STAGGER.saturating_mul(u32::try_from(i).unwrap_or(u32::MAX));
            tokio::spawn(connection(client.clone(), url.clone(), start, from, until))
        })
        .collect();
    tokio::time::sleep_until(from).await;
    let (cpu0, stock0) = (
        cpu_of(&client, front).await?,
        stand_ins.downstreams().calls(Service::Stock),
    );
    tokio::time::sleep_until(until).await;
    let (cpu1, stock1) = (
        cpu_of(&client, front).await?,
        stand_ins.downstreams().calls(Service::Stock),
    );
    let mut sample = Sample {
        answers: 0,
        errors: 0,
        latency: histogram()?,
        cpu_us: cpu1.saturating_sub(cpu0),
        stock_calls: stock1.saturating_sub(stock0),
        window: load.window,
    };
    for task in tasks {
        let (answers, errors, latency) = task.await??;
        sample.answers += answers;
        sample.errors += errors;
        sample.latency.add(&latency)?;
    }
    Ok(sample)
}
