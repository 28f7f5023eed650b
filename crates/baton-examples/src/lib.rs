//! Shared pieces of the baton examples: an embedded HTTP server that stands in for the five
//! downstream services of the order placement (seed 002), their wire types, and a small
//! client for them.
//!
//! The examples run against real HTTP on `127.0.0.1` instead of sleeping in place, so that
//! what a graph saves (and what a failure costs) is measured through sockets, a connection
//! pool and JSON, as a request handler would see it.
//!
//! | service  | endpoint             | body                      | base latency |
//! |----------|----------------------|---------------------------|--------------|
//! | `user`   | `GET /user/{id}`     | —                         | 200 ms       |
//! | `sku`    | `GET /sku/{id}`      | —                         | 200 ms       |
//! | `stock`  | `POST /stock/deduct` | [`DeductStock`] (user + sku) | 150 ms    |
//! | `promo`  | `POST /promo`        | [`Stock`]                 | 100 ms       |
//! | `notify` | `POST /notify`       | [`Promo`]                 | 50 ms        |
//!
//! Each service's [`Behavior`] says how it answers: after extra latency, with an error
//! status. The behaviours sit behind a shared, cloneable [`Downstreams`] handle that an
//! example configures before the server starts or while it runs; the server reads the
//! current behaviour on every call.
//!
//! ```no_run
//! use std::time::Duration;
//! use baton_examples::{Behavior, Downstreams, OrderApi, OrderServer, Service};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let downstreams = Downstreams::new();
//! downstreams.update(Service::Stock, Behavior::fail);
//! downstreams.update(Service::Promo, |b| b.slow_by(Duration::from_millis(300)));
//! let server = OrderServer::start(downstreams.clone()).await?;
//!
//! let api = OrderApi::new(reqwest::Client::new(), server.base_url());
//! let user = api.user(7).await?;
//! assert_eq!(user.id, 7);
//!
//! server.shutdown().await?;
//! # Ok(())
//! # }
//! ```

#![deny(clippy::unwrap_used, clippy::expect_used)]

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

// ---------------------------------------------------------------------------------------
// Services and their behaviour
// ---------------------------------------------------------------------------------------

/// One of the five downstream services of the order placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Service {
    /// `GET /user/{id}`: looks the user up (200 ms).
    User,
    /// `GET /sku/{id}`: looks the product up (200 ms).
    Sku,
    /// `POST /stock/deduct`: reserves one unit of the sku for the user (150 ms).
    Stock,
    /// `POST /promo`: computes the discount for the reserved stock (100 ms).
    Promo,
    /// `POST /notify`: tells the user what they pay (50 ms).
    Notify,
}

impl Service {
    /// Every service, in the order of the seed's serial code.
    pub const ALL: [Service; 5] = [
        Service::User,
        Service::Sku,
        Service::Stock,
        Service::Promo,
        Service::Notify,
    ];

    /// The lower-case name, as used for graph nodes, flags and messages.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Service::User => "user",
            Service::Sku => "sku",
            Service::Stock => "stock",
            Service::Promo => "promo",
            Service::Notify => "notify",
        }
    }

    /// How long the service takes to answer before any [`Behavior`] adds to it (the
    /// seed's figures).
    #[must_use]
    pub fn base_latency(self) -> Duration {
        Duration::from_millis(match self {
            Service::User | Service::Sku => 200,
            Service::Stock => 150,
            Service::Promo => 100,
            Service::Notify => 50,
        })
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error of parsing an unknown service name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown service `{0}` (expected user, sku, stock, promo or notify)")]
pub struct UnknownService(pub String);

impl FromStr for Service {
    type Err = UnknownService;

    /// Parses `user`, `sku`, `stock`, `promo` or `notify` (any case).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Service::ALL
            .into_iter()
            .find(|svc| svc.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownService(s.to_owned()))
    }
}

/// How one service answers its calls.
///
/// The default answers successfully after the service's
/// [base latency](Service::base_latency). Build one with the chainable methods and hand it
/// to [`Downstreams::set`], or change the current one with [`Downstreams::update`].
///
/// New modes (failing only the first K calls, sleeping past a caller's timeout, …) are a
/// new field, a setter, and a line in the private `plan` method, which turns the behaviour
/// and the call's sequence number into what the server does; the server and the handle do
/// not change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Behavior {
    extra_latency: Duration,
    fail_with: Option<StatusCode>,
}

impl Behavior {
    /// Answers successfully after the base latency.
    #[must_use]
    pub fn new() -> Self {
        Behavior::default()
    }

    /// Answers every call with `503 Service Unavailable` (after the usual latency).
    #[must_use]
    pub fn fail(self) -> Self {
        self.fail_with(StatusCode::SERVICE_UNAVAILABLE)
    }

    /// Answers every call with `status` (after the usual latency).
    #[must_use]
    pub fn fail_with(mut self, status: StatusCode) -> Self {
        self.fail_with = Some(status);
        self
    }

    /// Answers successfully again (keeps the extra latency).
    #[must_use]
    pub fn succeed(mut self) -> Self {
        self.fail_with = None;
        self
    }

    /// Adds `extra` to the base latency of every call (replacing any extra set before).
    #[must_use]
    pub fn slow_by(mut self, extra: Duration) -> Self {
        self.extra_latency = extra;
        self
    }

    /// The latency added to the base latency.
    #[must_use]
    pub fn extra_latency(&self) -> Duration {
        self.extra_latency
    }

    /// The error status every call answers with, if any.
    #[must_use]
    pub fn failure_status(&self) -> Option<StatusCode> {
        self.fail_with
    }

    /// What the server does for call number `call` (from 1) of `service`.
    fn plan(&self, service: Service, call: u64) -> Plan {
        let _ = call; // for modes that depend on the call's number
        Plan {
            delay: service.base_latency().saturating_add(self.extra_latency),
            status: self.fail_with,
        }
    }
}

/// What the server does for one call: wait `delay`, then answer `status` or the value.
#[derive(Debug, Clone, Copy)]
struct Plan {
    delay: Duration,
    status: Option<StatusCode>,
}

#[derive(Debug, Default)]
struct Slot {
    behavior: Mutex<Behavior>,
    calls: AtomicU64,
}

/// The shared, live configuration of the five services, and their call counters.
///
/// Cloning gives another handle to the same state: configure it from the example while the
/// server reads it on every call. Changes apply to calls that arrive afterwards.
#[derive(Debug, Clone, Default)]
pub struct Downstreams {
    slots: Arc<[Slot; 5]>,
}

impl Downstreams {
    /// Every service with the default [`Behavior`] and no calls counted.
    #[must_use]
    pub fn new() -> Self {
        Downstreams::default()
    }

    fn slot(&self, service: Service) -> &Slot {
        &self.slots[service.index()]
    }

    /// Replaces the behaviour of `service`.
    pub fn set(&self, service: Service, behavior: Behavior) {
        let mut current = self
            .slot(service)
            .behavior
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *current = behavior;
    }

    /// Changes the behaviour of `service` with `change`, e.g.
    /// `downstreams.update(Service::Stock, Behavior::fail)`.
    pub fn update(&self, service: Service, change: impl FnOnce(Behavior) -> Behavior) {
        let mut current = self
            .slot(service)
            .behavior
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *current = change(std::mem::take(&mut *current));
    }

    /// The current behaviour of `service`.
    #[must_use]
    pub fn behavior(&self, service: Service) -> Behavior {
        self.slot(service)
            .behavior
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many calls `service` has received (answered or not).
    #[must_use]
    pub fn calls(&self, service: Service) -> u64 {
        self.slot(service).calls.load(Ordering::Relaxed)
    }

    /// Restores every default behaviour and sets every call counter to zero.
    pub fn reset(&self) {
        for service in Service::ALL {
            self.set(service, Behavior::default());
            self.slot(service).calls.store(0, Ordering::Relaxed);
        }
    }

    /// Counts a call of `service` and decides what to do with it.
    fn begin(&self, service: Service) -> Plan {
        let slot = self.slot(service);
        let call = slot.calls.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        let behavior = slot
            .behavior
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        behavior.plan(service, call)
    }

    /// Plays a call of `service` out: waits, then fails or lets the handler answer.
    async fn serve(&self, service: Service) -> Result<(), Fault> {
        let plan = self.begin(service);
        tokio::time::sleep(plan.delay).await;
        match plan.status {
            Some(status) => {
                tracing::debug!(%service, %status, "answering with an error status");
                Err(Fault { service, status })
            }
            None => {
                tracing::debug!(%service, "answering");
                Ok(())
            }
        }
    }
}

/// An error answer of the server.
#[derive(Debug)]
struct Fault {
    service: Service,
    status: StatusCode,
}

impl IntoResponse for Fault {
    fn into_response(self) -> Response {
        let body = format!("{} is configured to answer {}", self.service, self.status);
        (self.status, body).into_response()
    }
}

// ---------------------------------------------------------------------------------------
// Wire types
// ---------------------------------------------------------------------------------------

/// An order placement request: the run input of the order graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderRequest {
    /// Who orders.
    pub user_id: u64,
    /// What they order.
    pub sku_id: u64,
}

/// What `GET /user/{id}` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    /// The user's id.
    pub id: u64,
    /// Display name.
    pub name: String,
    /// Membership level, which the promotion service could look at.
    pub level: String,
}

/// What `GET /sku/{id}` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sku {
    /// The sku's id.
    pub id: u64,
    /// Product title.
    pub title: String,
    /// Unit price in cents.
    pub price_cents: u64,
}

/// The body of `POST /stock/deduct`: the user and the sku to reserve for them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeductStock {
    /// Who the unit is reserved for.
    pub user: User,
    /// What is reserved.
    pub sku: Sku,
}

/// What `POST /stock/deduct` answers: a reserved unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stock {
    /// Who the unit is reserved for.
    pub user_id: u64,
    /// The reserved sku.
    pub sku_id: u64,
    /// Unit price in cents.
    pub price_cents: u64,
    /// Units left after the reservation.
    pub remaining: u64,
}

/// What `POST /promo` answers (its body is a [`Stock`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Promo {
    /// Who pays.
    pub user_id: u64,
    /// For what.
    pub sku_id: u64,
    /// Discount in cents.
    pub discount_cents: u64,
    /// What the user pays, in cents.
    pub pay_cents: u64,
}

/// What `POST /notify` answers (its body is a [`Promo`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notification {
    /// Who was notified.
    pub user_id: u64,
    /// What they were told.
    pub message: String,
}

// ---------------------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------------------

async fn user(State(d): State<Downstreams>, Path(id): Path<u64>) -> Result<Json<User>, Fault> {
    d.serve(Service::User).await?;
    Ok(Json(User {
        id,
        name: format!("user-{id}"),
        level: if id % 2 == 0 { "gold" } else { "silver" }.to_owned(),
    }))
}

async fn sku(State(d): State<Downstreams>, Path(id): Path<u64>) -> Result<Json<Sku>, Fault> {
    d.serve(Service::Sku).await?;
    Ok(Json(Sku {
        id,
        title: format!("sku-{id}"),
        price_cents: 59_900,
    }))
}

async fn stock(
    State(d): State<Downstreams>,
    Json(req): Json<DeductStock>,
) -> Result<Json<Stock>, Fault> {
    d.serve(Service::Stock).await?;
    Ok(Json(Stock {
        user_id: req.user.id,
        sku_id: req.sku.id,
        price_cents: req.sku.price_cents,
        remaining: 41,
    }))
}

async fn promo(State(d): State<Downstreams>, Json(s): Json<Stock>) -> Result<Json<Promo>, Fault> {
    d.serve(Service::Promo).await?;
    let discount_cents = (s.price_cents / 10).min(5_000);
    Ok(Json(Promo {
        user_id: s.user_id,
        sku_id: s.sku_id,
        discount_cents,
        pay_cents: s.price_cents.saturating_sub(discount_cents),
    }))
}

async fn notify(
    State(d): State<Downstreams>,
    Json(p): Json<Promo>,
) -> Result<Json<Notification>, Fault> {
    d.serve(Service::Notify).await?;
    Ok(Json(Notification {
        user_id: p.user_id,
        message: format!(
            "order for sku {} placed: you pay {}.{:02}",
            p.sku_id,
            p.pay_cents / 100,
            p.pay_cents % 100
        ),
    }))
}

/// The router of the five services plus `GET /health` (answers at once, never counted).
pub fn router(downstreams: Downstreams) -> Router {
    Router::new()
        .route("/health", get(|| async { "ok" }))
        .route("/user/{id}", get(user))
        .route("/sku/{id}", get(sku))
        .route("/stock/deduct", post(stock))
        .route("/promo", post(promo))
        .route("/notify", post(notify))
        .with_state(downstreams)
}

/// The embedded server, listening on a random free port of `127.0.0.1`.
///
/// Dropping it without [`shutdown`](Self::shutdown) also stops it (in the background).
#[derive(Debug)]
pub struct OrderServer {
    addr: SocketAddr,
    base_url: String,
    downstreams: Downstreams,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<io::Result<()>>,
}

impl OrderServer {
    /// Binds `127.0.0.1:0` and serves the five services on the current tokio runtime,
    /// reading their behaviour from `downstreams`.
    ///
    /// # Errors
    /// When the listener cannot be bound or has no local address.
    pub async fn start(downstreams: Downstreams) -> io::Result<OrderServer> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let app = router(downstreams.clone());
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    // A dropped sender stops the server too.
                    let _ = stopped.await;
                })
                .await
        });
        tracing::debug!(%addr, "order services listening");
        Ok(OrderServer {
            addr,
            base_url: format!("http://{addr}"),
            downstreams,
            stop: Some(stop),
            task,
        })
    }

    /// The address the server listens on.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash.
    #[must_use]
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The handle the server reads the services' behaviour from.
    #[must_use]
    pub fn downstreams(&self) -> &Downstreams {
        &self.downstreams
    }

    /// Stops accepting connections, lets calls in flight finish, and waits for the server
    /// to end.
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

// ---------------------------------------------------------------------------------------
// Client
// ---------------------------------------------------------------------------------------

/// A call to one of the services that did not produce its value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// The service answered an error status, e.g. `stock answered 503 Service Unavailable`.
    #[error("{service} answered {status}")]
    Status {
        /// The service called.
        service: Service,
        /// Its answer.
        status: StatusCode,
    },
    /// The request could not be sent or the answer not read.
    #[error("calling {service} failed")]
    Transport {
        /// The service called.
        service: Service,
        /// What reqwest reported.
        #[source]
        source: reqwest::Error,
    },
}

impl CallError {
    /// The service whose call failed.
    #[must_use]
    pub fn service(&self) -> Service {
        match self {
            CallError::Status { service, .. } | CallError::Transport { service, .. } => *service,
        }
    }
}

/// A client for the five services: one [`reqwest::Client`] (and so one connection pool)
/// and the server's base URL. Cheap to clone; clones share the pool.
#[derive(Debug, Clone)]
pub struct OrderApi {
    http: reqwest::Client,
    base_url: Arc<str>,
}

impl OrderApi {
    /// A client for the server at `base_url` (e.g. [`OrderServer::base_url`]).
    #[must_use]
    pub fn new(http: reqwest::Client, base_url: &str) -> Self {
        OrderApi {
            http,
            base_url: Arc::from(base_url.trim_end_matches('/')),
        }
    }

    /// The underlying HTTP client.
    #[must_use]
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// Opens `connections` pooled connections by calling `GET /health` that many times at
    /// once, so that the first calls measured do not pay for connecting.
    ///
    /// # Errors
    /// The first health call that failed.
    pub async fn warm_up(&self, connections: usize) -> Result<(), reqwest::Error> {
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..connections {
            let request = self.http.get(format!("{}/health", self.base_url));
            calls.spawn(async move { request.send().await?.error_for_status() });
        }
        while let Some(done) = calls.join_next().await {
            if let Ok(result) = done {
                result?;
            }
        }
        Ok(())
    }

    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        service: Service,
        request: reqwest::RequestBuilder,
    ) -> Result<T, CallError> {
        let transport = |source| CallError::Transport { service, source };
        let response = request.send().await.map_err(transport)?;
        let status = response.status();
        if !status.is_success() {
            return Err(CallError::Status { service, status });
        }
        response.json::<T>().await.map_err(transport)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    /// `GET /user/{id}`.
    ///
    /// # Errors
    /// [`CallError`] for an error status or a transport failure.
    pub async fn user(&self, id: u64) -> Result<User, CallError> {
        let request = self.http.get(self.url(&format!("/user/{id}")));
        self.call(Service::User, request).await
    }

    /// `GET /sku/{id}`.
    ///
    /// # Errors
    /// [`CallError`] for an error status or a transport failure.
    pub async fn sku(&self, id: u64) -> Result<Sku, CallError> {
        let request = self.http.get(self.url(&format!("/sku/{id}")));
        self.call(Service::Sku, request).await
    }

    /// `POST /stock/deduct` with the user and the sku.
    ///
    /// # Errors
    /// [`CallError`] for an error status or a transport failure.
    pub async fn deduct_stock(&self, user: &User, sku: &Sku) -> Result<Stock, CallError> {
        let body = DeductStock {
            user: user.clone(),
            sku: sku.clone(),
        };
        let request = self.http.post(self.url("/stock/deduct")).json(&body);
        self.call(Service::Stock, request).await
    }

    /// `POST /promo` with the reserved stock.
    ///
    /// # Errors
    /// [`CallError`] for an error status or a transport failure.
    pub async fn promo(&self, stock: &Stock) -> Result<Promo, CallError> {
        let request = self.http.post(self.url("/promo")).json(stock);
        self.call(Service::Promo, request).await
    }

    /// `POST /notify` with the promotion.
    ///
    /// # Errors
    /// [`CallError`] for an error status or a transport failure.
    pub async fn notify(&self, promo: &Promo) -> Result<Notification, CallError> {
        let request = self.http.post(self.url("/notify")).json(promo);
        self.call(Service::Notify, request).await
    }

    /// The seed's original code: the five calls one after another.
    ///
    /// # Errors
    /// The first call that failed; the later ones are not made.
    pub async fn place_order_serially(
        &self,
        order: &OrderRequest,
    ) -> Result<Notification, CallError> {
        let user = self.user(order.user_id).await?;
        let sku = self.sku(order.sku_id).await?;
        let stock = self.deduct_stock(&user, &sku).await?;
        let promo = self.promo(&stock).await?;
        self.notify(&promo).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_names_round_trip() {
        for service in Service::ALL {
            assert_eq!(service.name().parse::<Service>(), Ok(service));
        }
        assert_eq!("STOCK".parse::<Service>(), Ok(Service::Stock));
        assert!("payment".parse::<Service>().is_err());
    }

    #[test]
    fn behavior_plans_latency_and_status() {
        let plan = Behavior::new()
            .fail()
            .slow_by(Duration::from_millis(30))
            .plan(Service::Stock, 1);
        assert_eq!(plan.delay, Duration::from_millis(180));
        assert_eq!(plan.status, Some(StatusCode::SERVICE_UNAVAILABLE));
        let plan = Behavior::new().plan(Service::Notify, 1);
        assert_eq!(plan.delay, Duration::from_millis(50));
        assert_eq!(plan.status, None);
    }

    #[tokio::test]
    async fn server_answers_and_fails_on_request() -> Result<(), Box<dyn std::error::Error>> {
        let downstreams = Downstreams::new();
        let server = OrderServer::start(downstreams.clone()).await?;
        let api = OrderApi::new(reqwest::Client::new(), server.base_url());
        let order = OrderRequest {
            user_id: 7,
            sku_id: 42,
        };
        let done = api.place_order_serially(&order).await?;
        assert_eq!(done.user_id, 7);
        assert_eq!(downstreams.calls(Service::Notify), 1);

        downstreams.update(Service::Stock, Behavior::fail);
        let err = api.place_order_serially(&order).await.err();
        let msg = err.as_ref().map(ToString::to_string);
        assert_eq!(
            msg.as_deref(),
            Some("stock answered 503 Service Unavailable")
        );
        assert_eq!(downstreams.calls(Service::Stock), 2);
        assert_eq!(downstreams.calls(Service::Promo), 1);

        drop(api);
        server.shutdown().await?;
        Ok(())
    }
}
