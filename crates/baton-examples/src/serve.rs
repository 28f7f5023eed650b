//! The order placement served over HTTP: a baton graph as an axum route, through
//! `axum::routing::post_service`.
//!
//! `POST /orders` with an [`OrderRequest`] as JSON runs the graph
//!
//! ```text
//! user ─┐
//!       ├─> stock
//! sku  ─┘
//! ```
//!
//! against the stand-in services ([`OrderServer`](crate::OrderServer)) and answers a
//! [`Placed`] as JSON. `sku` is a `tower` service (a concurrency limit around the client),
//! plugged in with `.service(..)`; `stock` has a timeout, retries, the `inventory` circuit
//! breaker and a fallback of 0 units.
//!
//! The run fails fast: when `user` or `sku` fails, the answer is the run error's response,
//! naming the node: 502 when the service failed, 504 when the run's time ran out, 503 when
//! a breaker or a bulkhead refused. A body that is not an order is axum's rejection (400 or
//! 422).
//!
//! Slow clients: the body is read by the extractor before the run starts, so the run's
//! budget does not bound it. The router bounds it ([`Limits`]): tower-http's `TimeoutLayer`
//! (408 when the whole request, body and run, takes longer than `request`) and
//! `RequestBodyTimeoutLayer` (the body fails when it pauses longer than `body_idle`), and
//! the server
//! ([`OrdersServer`]) is hyper's with a header read timeout, which `axum::serve` does not
//! set: a client that sends its head one byte at a time is disconnected.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use axum::http::StatusCode;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tower_http::timeout::{RequestBodyTimeoutLayer, TimeoutLayer};

use axum::{Json, Router};
use baton_graph::{
    Backoff, BuildError, CircuitBreaker, FailureMode, Fallback, Graph, Report, Retry, RunOptions,
    breaker::BreakerConfigError, report::MissingValue, tower::GraphService,
};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tower::{ServiceBuilder, service_fn};

use crate::{OrderApi, OrderRequest};

/// What `POST /orders` answers when the order went through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placed {
    /// The user's display name.
    pub user: String,
    /// The product's title.
    pub sku: String,
    /// Its unit price in cents.
    pub price_cents: u64,
    /// Units in stock when the order was placed; 0 when stock could not be reached (the
    /// fallback) or is out.
    pub quantity: u64,
}

/// How the order service runs its graph.
#[derive(Debug, Clone)]
pub struct Config {
    /// The whole run's time budget, counted from each request's start.
    pub run_timeout: Duration,
    /// The most `sku` calls in flight at once (the tower concurrency limit).
    pub sku_concurrency: usize,
    /// The `inventory` breaker `stock` calls through: shared by every request.
    pub inventory: CircuitBreaker,
}

impl Config {
    /// A 2 s run budget, 64 `sku` calls at once, and an `inventory` breaker that opens after
    /// 5 consecutive failed requests, for 3 s.
    ///
    /// # Errors
    /// Never in practice: the breaker's settings are valid.
    pub fn new() -> Result<Config, BreakerConfigError> {
        Ok(Config {
            run_timeout: Duration::from_secs(2),
            sku_concurrency: 64,
            inventory: CircuitBreaker::builder("inventory")
                .consecutive_failures(5)
                .open_duration(Duration::from_secs(3))
                .build()?,
        })
    }
}

/// The order graph as a service whose response is a [`Placed`], or the [`MissingValue`]
/// of the first node without a value.
///
/// # Errors
/// [`BuildError`] if the graph does not validate.
pub fn orders(
    api: &OrderApi,
    config: &Config,
) -> Result<GraphService<OrderRequest, Result<Json<Placed>, MissingValue>>, BuildError> {
    let mut g = Graph::<OrderRequest>::builder();
    g.name("orders");
    let users = api.clone();
    let user = g.node("user").task(move |ctx, ()| {
        let api = users.clone();
        let id = ctx.input().user_id;
        async move { api.user(id).await }
    });
    // A tower service as the task: each attempt waits for a permit of the limit
    // (`poll_ready`), inside the attempt's timeout.
    let skus = api.clone();
    let sku_service = ServiceBuilder::new()
        .concurrency_limit(config.sku_concurrency)
        .service(service_fn(move |id: u64| {
            let api = skus.clone();
            async move { api.sku(id).await }
        }));
    let sku = g
        .node("sku")
        .timeout(Duration::from_millis(500))
        .service(sku_service, |ctx, ()| ctx.input().sku_id);
    let stocks = api.clone();
    let stock = g
        .node("stock")
        .after((user, sku))
        .timeout(Duration::from_millis(300))
        .retry(Retry::new(3).backoff(Backoff::exponential(Duration::from_millis(50))))
        .breaker(&config.inventory)
        .fallback(Fallback::value(0))
        .task(move |_ctx, (user, sku)| {
            let api = stocks.clone();
            async move { api.deduct_stock(&user, &sku).await.map(|s| s.quantity) }
        });
    let options = RunOptions::new()
        .timeout(config.run_timeout)
        .failure_mode(FailureMode::FailFast);
    let service = g.build()?.into_service().options(options);
    Ok(service.map_report(move |report: Report| {
        let (user, sku) = (report.require(user)?, report.require(sku)?);
        Ok(Json(Placed {
            user: user.name.clone(),
            sku: sku.title.clone(),
            price_cents: sku.price_cents,
            quantity: *report.require(stock)?,
        }))
    }))
}

/// How long a client may take to send its request.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// To send the request's head (the server closes the connection after it).
    pub header_read: Duration,
    /// The longest pause between two pieces of the body (the body then fails, and the
    /// extractor rejects it).
    pub body_idle: Duration,
    /// For the whole request, its body and its run included (answered 408): a body that
    /// trickles in without pausing is cut here. Longer than the run's budget, so that the
    /// run's own 504 comes first.
    pub request: Duration,
}

impl Default for Limits {
    /// 5 s for the head, pauses of at most 5 s in the body, 10 s for the whole request.
    fn default() -> Self {
        Limits {
            header_read: Duration::from_secs(5),
            body_idle: Duration::from_secs(5),
            request: Duration::from_secs(10),
        }
    }
}

/// The router: `POST /orders`, served by the graph through `post_service` (other methods
/// get 405; `Router::route_service` would serve every method), bounded by `limits`.
///
/// # Errors
/// [`BuildError`] if the graph does not validate.
pub fn router(api: &OrderApi, config: &Config) -> Result<Router, BuildError> {
    router_with(api, config, Limits::default())
}

/// [`router`], with its body and whole request bounded by `limits`.
///
/// # Errors
/// [`BuildError`] if the graph does not validate.
pub fn router_with(api: &OrderApi, config: &Config, limits: Limits) -> Result<Router, BuildError> {
    let orders = orders(api, config)?.http(|Json(order): Json<OrderRequest>| order);
    Ok(Router::new()
        .route("/orders", axum::routing::post_service(orders))
        .layer((
            RequestBodyTimeoutLayer::new(limits.body_idle),
            TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, limits.request),
        )))
}

/// The order service, listening on a random free port of `127.0.0.1`. Dropping it stops
/// it.
#[derive(Debug)]
pub struct OrdersServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<io::Result<()>>,
}

impl OrdersServer {
    /// Binds `127.0.0.1:0` and serves `router` on the current tokio runtime, with the
    /// default [`Limits`]' header read timeout.
    ///
    /// # Errors
    /// When the listener cannot be bound or has no local address.
    pub async fn start(router: Router) -> io::Result<OrdersServer> {
        OrdersServer::start_with(router, Limits::default()).await
    }

    /// [`start`](Self::start), closing a connection whose request head is not in within
    /// `limits.header_read`.
    ///
    /// # Errors
    /// When the listener cannot be bound or has no local address.
    pub async fn start_with(router: Router, limits: Limits) -> io::Result<OrdersServer> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve_bounded(listener, router, limits, stopped));
        Ok(OrdersServer {
            addr,
            stop: Some(stop),
            task,
        })
    }

    /// `http://127.0.0.1:PORT/orders`.
    #[must_use]
    pub fn url(&self) -> String {
        self.url_of("/orders")
    }

    /// `http://127.0.0.1:PORT` followed by `path`.
    #[must_use]
    pub fn url_of(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The address it listens on.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting connections, lets requests in flight finish, and waits for the
    /// server to end.
    ///
    /// # Errors
    /// The server's I/O error, or an error if its task panicked.
    pub async fn shutdown(mut self) -> io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match (&mut self.task).await {
            Ok(result) => result,
            Err(e) => Err(io::Error::other(e)),
        }
    }
}

/// Serves `router` on `listener` with hyper's HTTP/1 server and a header read timeout,
/// until `stopped`; then lets the connections finish their requests.
async fn serve_bounded(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    stopped: oneshot::Receiver<()>,
) -> io::Result<()> {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read);
    let graceful = GracefulShutdown::new();
    let mut stopped = std::pin::pin!(stopped);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    continue;
                }
            },
            _ = &mut stopped => break,
        };
        let service = TowerToHyperService::new(router.clone());
        let connection = http.serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended");
            }
        });
    }
    graceful.shutdown().await;
    Ok(())
}
