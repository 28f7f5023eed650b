//! Shared pieces of the baton examples: an embedded HTTP server that stands in for the
//! downstream services of the two scenarios, their wire types, and a small client.
//!
//! The examples run against real HTTP on `127.0.0.1` instead of sleeping in place, so that
//! what a graph saves (and what a failure costs) is measured through sockets, a connection
//! pool and JSON, as a request handler would see it.
//!
//! The order placement of the classic order flow (`user ∥ sku → stock → dispatch{ship |
//! shortage} → notify`):
//!
//! | service    | endpoint             | body                          | base latency |
//! |------------|----------------------|-------------------------------|--------------|
//! | `user`     | `GET /user/{id}`     | —                             | 200 ms       |
//! | `sku`      | `GET /sku/{id}`      | —                             | 200 ms       |
//! | `stock`    | `POST /stock/deduct` | [`DeductStock`] (user + sku)  | 150 ms       |
//! | `ship`     | `POST /ship`         | [`DispatchRequest`]           | 80 ms        |
//! | `shortage` | `POST /shortage`     | [`DispatchRequest`]           | 80 ms        |
//! | `notify`   | `POST /notify`       | [`Dispatch`]                  | 50 ms        |
//!
//! A borrow notification, fanned out to three channels:
//!
//! | service | endpoint     | body       | base latency |
//! |---------|--------------|------------|--------------|
//! | `mail`  | `POST /mail` | [`Notice`] | 150 ms       |
//! | `sms`   | `POST /sms`  | [`Notice`] | 60 ms        |
//! | `push`  | `POST /push` | [`Notice`] | 30 ms        |
//!
//! Each service's [`Behavior`] says how it answers: after extra latency, with an error
//! status for every call or only the first K, with how much stock. The behaviours sit
//! behind a shared, cloneable [`Downstreams`] handle that an example configures before the
//! server starts or while it runs; the server reads the current behaviour on every call.
//!
//! **Deadline propagation**: a client made with [`OrderApi::within`] sends its
//! time budget in the [`BUDGET_HEADER`] header and times the request out shortly after it
//! ([`CLIENT_TIMEOUT_GRACE`]). The server
//! honours the header: a call that would take longer stops at the caller's deadline and
//! answers `504 Gateway Timeout` instead of working for a caller that has given up
//! ([`Downstreams::stopped_early`] counts them).
//!
//! ```no_run
//! use std::time::Duration;
//! use baton_examples::{Behavior, Downstreams, OrderApi, OrderServer, Service};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let downstreams = Downstreams::new();
//! downstreams.update(Service::Stock, |b| b.fail_first(2));
//! downstreams.update(Service::Ship, |b| b.slow_by(Duration::from_millis(300)));
//! let server = OrderServer::start(downstreams.clone()).await?;
//!
//! let api = OrderApi::new(reqwest::Client::new(), server.base_url());
//! let user = api.user(7).await?;
//! assert_eq!(user.id, 7);
//! // At most 250 ms, and the server is told so.
//! let sku = api.within(Some(Duration::from_millis(250))).sku(42).await?;
//! assert_eq!(sku.id, 42);
//!
//! server.shutdown().await?;
//! # Ok(())
//! # }
//! ```

#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod burst;
pub mod hops;
pub mod serve;

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
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The request header that carries the caller's remaining time budget, in whole
/// milliseconds (like gRPC's `grpc-timeout`): the server stops a call that would outlast it.
pub const BUDGET_HEADER: &str = "x-budget-ms";

/// How much later than its budget a request made with [`OrderApi::within`] times out on its
/// own.
///
/// The budget a baton task passes on (`ctx.remaining()`) ends at the very instant baton cuts
/// the attempt. A client timeout at that same instant races baton's timer, and when both
/// fire in the same tick the task's own timeout error wins, so the attempt would be recorded
/// as a task error ("operation timed out") rather than as baton's timeout. The grace keeps
/// baton's cut authoritative; the client timeout is the backstop for callers without one.
pub const CLIENT_TIMEOUT_GRACE: Duration = Duration::from_millis(20);

/// The stock quantity `POST /stock/deduct` answers unless a [`Behavior`] says otherwise
/// (the seed's `return 42`).
pub const DEFAULT_STOCK: u64 = 42;

// ---------------------------------------------------------------------------------------
// Services and their behaviour
// ---------------------------------------------------------------------------------------

/// One of the downstream services the embedded server plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Service {
    /// `GET /user/{id}`: looks the user up (200 ms).
    User,
    /// `GET /sku/{id}`: looks the product up (200 ms).
    Sku,
    /// `POST /stock/deduct`: reserves one unit of the sku for the user and answers how many
    /// are in stock (150 ms).
    Stock,
    /// `POST /ship`: ships the reserved unit (80 ms).
    Ship,
    /// `POST /shortage`: records a shortage, to ship when stock arrives (80 ms).
    Shortage,
    /// `POST /notify`: tells the user how their order went (50 ms).
    Notify,
    /// `POST /mail`: sends a notice by e-mail; slow but reliable (150 ms).
    Mail,
    /// `POST /sms`: sends a notice by SMS (60 ms).
    Sms,
    /// `POST /push`: sends a notice by a third party's push service (30 ms).
    Push,
}

impl Service {
    /// Every service: the order placement's, then the notification channels.
    pub const ALL: [Service; 9] = [
        Service::User,
        Service::Sku,
        Service::Stock,
        Service::Ship,
        Service::Shortage,
        Service::Notify,
        Service::Mail,
        Service::Sms,
        Service::Push,
    ];

    /// The lower-case name, as used for graph nodes, flags and messages.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Service::User => "user",
            Service::Sku => "sku",
            Service::Stock => "stock",
            Service::Ship => "ship",
            Service::Shortage => "shortage",
            Service::Notify => "notify",
            Service::Mail => "mail",
            Service::Sms => "sms",
            Service::Push => "push",
        }
    }

    /// How long the service takes to answer before any [`Behavior`] adds to it.
    #[must_use]
    pub fn base_latency(self) -> Duration {
        Duration::from_millis(match self {
            Service::User | Service::Sku => 200,
            Service::Stock | Service::Mail => 150,
            Service::Ship | Service::Shortage => 80,
            Service::Notify => 50,
            Service::Sms => 60,
            Service::Push => 30,
        })
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// The error of parsing an unknown service (or channel) name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} `{name}` (expected one of: {expected})")]
pub struct UnknownService {
    /// `service` or `channel`.
    pub kind: &'static str,
    /// The name given.
    pub name: String,
    /// The names accepted, comma-separated.
    pub expected: String,
}

impl FromStr for Service {
    type Err = UnknownService;

    /// Parses a service's [`name`](Service::name), in any case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Service::ALL
            .into_iter()
            .find(|svc| svc.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownService {
                kind: "service",
                name: s.to_owned(),
                expected: Service::ALL.map(Service::name).join(", "),
            })
    }
}

/// The three notification channels of the fan-out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Channel {
    /// E-mail: slow but reliable.
    Mail,
    /// SMS: cheap, answers 503 now and then.
    Sms,
    /// Push, run by a third party: when it is down, it is down for a while.
    Push,
}

impl Channel {
    /// Every channel.
    pub const ALL: [Channel; 3] = [Channel::Mail, Channel::Sms, Channel::Push];

    /// The service that plays this channel.
    #[must_use]
    pub fn service(self) -> Service {
        match self {
            Channel::Mail => Service::Mail,
            Channel::Sms => Service::Sms,
            Channel::Push => Service::Push,
        }
    }

    /// `mail`, `sms` or `push`.
    #[must_use]
    pub fn name(self) -> &'static str {
        self.service().name()
    }
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

impl FromStr for Channel {
    type Err = UnknownService;

    /// Parses `mail`, `sms` or `push`, in any case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Channel::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownService {
                kind: "channel",
                name: s.to_owned(),
                expected: Channel::ALL.map(Channel::name).join(", "),
            })
    }
}

/// How one service answers its calls.
///
/// The default answers successfully after the service's
/// [base latency](Service::base_latency), and `stock` answers [`DEFAULT_STOCK`]. Build one
/// with the chainable methods and hand it to [`Downstreams::set`], or change the current
/// one with [`Downstreams::update`].
///
/// A new mode is a field, a setter, and a line in the private `plan` method, which turns
/// the behaviour and the call's sequence number into what the server does; the server and
/// the handle do not change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Behavior {
    extra_latency: Duration,
    fail_with: Option<StatusCode>,
    fail_first: u64,
    stock: Option<u64>,
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

    /// Answers the service's first `k` calls (counted since the server started, or since
    /// [`Downstreams::reset`]) with `503 Service Unavailable`, then as otherwise configured:
    /// a flaky service that recovers.
    #[must_use]
    pub fn fail_first(mut self, k: u64) -> Self {
        self.fail_first = k;
        self
    }

    /// Answers successfully again (keeps the extra latency and the stock quantity).
    #[must_use]
    pub fn succeed(mut self) -> Self {
        self.fail_with = None;
        self.fail_first = 0;
        self
    }

    /// Adds `extra` to the base latency of every call (replacing any extra set before).
    #[must_use]
    pub fn slow_by(mut self, extra: Duration) -> Self {
        self.extra_latency = extra;
        self
    }

    /// For `stock`: answers that `quantity` units are in stock (`0`: out of stock). Other
    /// services ignore it.
    #[must_use]
    pub fn stock(mut self, quantity: u64) -> Self {
        self.stock = Some(quantity);
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
        let flaky = (call <= self.fail_first).then_some(StatusCode::SERVICE_UNAVAILABLE);
        Plan {
            delay: service.base_latency().saturating_add(self.extra_latency),
            status: self.fail_with.or(flaky),
            stock: self.stock.unwrap_or(DEFAULT_STOCK),
        }
    }
}

/// What the server does for one call: wait `delay`, then answer `status` or the value.
#[derive(Debug, Clone, Copy)]
struct Plan {
    delay: Duration,
    status: Option<StatusCode>,
    stock: u64,
}

#[derive(Debug, Default)]
struct Slot {
    behavior: Mutex<Behavior>,
    calls: AtomicU64,
    stopped_early: AtomicU64,
}

/// The shared, live configuration of the services, and their call counters.
///
/// Cloning gives another handle to the same state: configure it from the example while the
/// server reads it on every call. Changes apply to calls that arrive afterwards.
#[derive(Debug, Clone, Default)]
pub struct Downstreams {
    slots: Arc<[Slot; 9]>,
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
        self.update(service, |_| behavior);
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

    /// How many calls of `service` would have outlasted the caller's deadline (its
    /// [`BUDGET_HEADER`]), so the server stopped them there (or earlier, when the caller
    /// hung up) instead of finishing work nobody waits for.
    #[must_use]
    pub fn stopped_early(&self, service: Service) -> u64 {
        self.slot(service).stopped_early.load(Ordering::Relaxed)
    }

    /// Restores every default behaviour and sets every counter to zero.
    pub fn reset(&self) {
        for service in Service::ALL {
            self.set(service, Behavior::default());
            let slot = self.slot(service);
            slot.calls.store(0, Ordering::Relaxed);
            slot.stopped_early.store(0, Ordering::Relaxed);
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

    /// Plays a call of `service` out: waits, then fails or lets the handler answer with the
    /// plan's stock quantity. Stops at the caller's deadline when the call carries one.
    async fn serve(&self, service: Service, headers: &HeaderMap) -> Result<Plan, Fault> {
        let plan = self.begin(service);
        let budget = headers
            .get(BUDGET_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .map(Duration::from_millis);
        if let Some(budget) = budget.filter(|b| *b < plan.delay) {
            // Counted now: if the caller hangs up first, hyper drops this future mid-sleep.
            self.slot(service)
                .stopped_early
                .fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(budget).await;
            tracing::debug!(%service, ?budget, "stopped at the caller's deadline");
            return Err(Fault {
                service,
                status: StatusCode::GATEWAY_TIMEOUT,
            });
        }
        tokio::time::sleep(plan.delay).await;
        match plan.status {
            Some(status) => {
                tracing::debug!(%service, %status, "answering with an error status");
                Err(Fault { service, status })
            }
            None => {
                tracing::debug!(%service, "answering");
                Ok(plan)
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
        let body = format!("{} answers {}", self.service, self.status);
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
    /// Membership level.
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

/// What `POST /stock/deduct` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stock {
    /// Who the unit is reserved for.
    pub user_id: u64,
    /// The sku.
    pub sku_id: u64,
    /// Units in stock; one of them is now reserved for the user. `0`: out of stock,
    /// nothing reserved.
    pub quantity: u64,
}

/// The body of `POST /ship` and `POST /shortage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatchRequest {
    /// Who ordered.
    pub user_id: u64,
    /// What.
    pub sku_id: u64,
    /// The stock quantity the decision was made on.
    pub quantity: u64,
}

/// What `POST /ship` and `POST /shortage` answer: how the order is dispatched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dispatch {
    /// Who ordered.
    pub user_id: u64,
    /// What.
    pub sku_id: u64,
    /// `shipped` or `backordered`.
    pub status: String,
    /// The tracking number (shipped) or the shortage ticket (backordered).
    pub reference: String,
}

/// What `POST /notify` answers (its body is a [`Dispatch`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notification {
    /// Who was notified.
    pub user_id: u64,
    /// What they were told.
    pub message: String,
}

/// The body of `POST /mail`, `/sms` and `/push`: the borrow notification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    /// The borrow this notice is about (the request number in the example).
    pub borrow_id: u64,
    /// Who borrowed.
    pub user_id: u64,
    /// The book.
    pub isbn: String,
}

/// What a notification channel answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// `mail`, `sms` or `push`.
    pub channel: String,
    /// The borrow it was about.
    pub borrow_id: u64,
    /// The channel's id for the sent message.
    pub message_id: String,
}

// ---------------------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------------------

async fn user(
    State(d): State<Downstreams>,
    headers: HeaderMap,
    Path(id): Path<u64>,
) -> Result<Json<User>, Fault> {
    d.serve(Service::User, &headers).await?;
    Ok(Json(User {
        id,
        name: format!("user-{id}"),
        level: if id % 2 == 0 { "gold" } else { "silver" }.to_owned(),
    }))
}

async fn sku(
    State(d): State<Downstreams>,
    headers: HeaderMap,
    Path(id): Path<u64>,
) -> Result<Json<Sku>, Fault> {
    d.serve(Service::Sku, &headers).await?;
    Ok(Json(Sku {
        id,
        title: format!("sku-{id}"),
        price_cents: 59_900,
    }))
}

async fn stock(
    State(d): State<Downstreams>,
    headers: HeaderMap,
    Json(req): Json<DeductStock>,
) -> Result<Json<Stock>, Fault> {
    let plan = d.serve(Service::Stock, &headers).await?;
    Ok(Json(Stock {
        user_id: req.user.id,
        sku_id: req.sku.id,
        quantity: plan.stock,
    }))
}

async fn ship(
    State(d): State<Downstreams>,
    headers: HeaderMap,
    Json(req): Json<DispatchRequest>,
) -> Result<Json<Dispatch>, Fault> {
    d.serve(Service::Ship, &headers).await?;
    let call = d.calls(Service::Ship);
    Ok(Json(Dispatch {
        user_id: req.user_id,
        sku_id: req.sku_id,
        status: "shipped".to_owned(),
        reference: format!("SF{:08}", 1_000 + call),
    }))
}

async fn shortage(
    State(d): State<Downstreams>,
    headers: HeaderMap,
    Json(req): Json<DispatchRequest>,
) -> Result<Json<Dispatch>, Fault> {
    d.serve(Service::Shortage, &headers).await?;
    let call = d.calls(Service::Shortage);
    Ok(Json(Dispatch {
        user_id: req.user_id,
        sku_id: req.sku_id,
        status: "backordered".to_owned(),
        reference: format!("BO-{call}"),
    }))
}

async fn notify(
    State(d): State<Downstreams>,
    headers: HeaderMap,
    Json(dispatch): Json<Dispatch>,
) -> Result<Json<Notification>, Fault> {
    d.serve(Service::Notify, &headers).await?;
    let message = match dispatch.status.as_str() {
        "shipped" => format!(
            "sku {} shipped, tracking {}",
            dispatch.sku_id, dispatch.reference
        ),
        _ => format!(
            "sku {} is out of stock: backordered as {}",
            dispatch.sku_id, dispatch.reference
        ),
    };
    Ok(Json(Notification {
        user_id: dispatch.user_id,
        message,
    }))
}

async fn deliver(
    d: &Downstreams,
    channel: Channel,
    headers: &HeaderMap,
    notice: &Notice,
) -> Result<Json<Delivery>, Fault> {
    d.serve(channel.service(), headers).await?;
    Ok(Json(Delivery {
        channel: channel.name().to_owned(),
        borrow_id: notice.borrow_id,
        message_id: format!("{channel}-{}", d.calls(channel.service())),
    }))
}

async fn mail(
    State(d): State<Downstreams>,
    headers: HeaderMap,
    Json(notice): Json<Notice>,
) -> Result<Json<Delivery>, Fault> {
    deliver(&d, Channel::Mail, &headers, &notice).await
}

async fn sms(
    State(d): State<Downstreams>,
    headers: HeaderMap,
    Json(notice): Json<Notice>,
) -> Result<Json<Delivery>, Fault> {
    deliver(&d, Channel::Sms, &headers, &notice).await
}

async fn push(
    State(d): State<Downstreams>,
    headers: HeaderMap,
    Json(notice): Json<Notice>,
) -> Result<Json<Delivery>, Fault> {
    deliver(&d, Channel::Push, &headers, &notice).await
}

/// The router of every service plus `GET /health` (answers at once, never counted).
pub fn router(downstreams: Downstreams) -> Router {
    Router::new()
        .route("/health", get(|| async { "ok" }))
        .route("/user/{id}", get(user))
        .route("/sku/{id}", get(sku))
        .route("/stock/deduct", post(stock))
        .route("/ship", post(ship))
        .route("/shortage", post(shortage))
        .route("/notify", post(notify))
        .route("/mail", post(mail))
        .route("/sms", post(sms))
        .route("/push", post(push))
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
    /// Binds `127.0.0.1:0` and serves every service on the current tokio runtime, reading
    /// their behaviour from `downstreams`.
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
        tracing::debug!(%addr, "services listening");
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
    /// The request could not be sent or the answer not read (including the client's own
    /// timeout, see [`OrderApi::within`]).
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

/// A client for the services: one [`reqwest::Client`] (and so one connection pool), the
/// server's base URL, and optionally a time budget for its requests. Cheap to clone;
/// clones share the pool.
#[derive(Debug, Clone)]
pub struct OrderApi {
    http: reqwest::Client,
    base_url: Arc<str>,
    budget: Option<Duration>,
    grace: Duration,
}

impl OrderApi {
    /// A client for the server at `base_url` (e.g. [`OrderServer::base_url`]), without a
    /// time budget.
    #[must_use]
    pub fn new(http: reqwest::Client, base_url: &str) -> Self {
        OrderApi {
            http,
            base_url: Arc::from(base_url.trim_end_matches('/')),
            budget: None,
            grace: CLIENT_TIMEOUT_GRACE,
        }
    }

    /// The same client (same pool), whose requests carry the time budget `budget`: it is
    /// sent in the [`BUDGET_HEADER`] header so that the server stops working when the
    /// caller stops waiting (deadline propagation), and it is each request's
    /// timeout (plus [`CLIENT_TIMEOUT_GRACE`]). Pass a task's `ctx.remaining()`. `None`: no
    /// budget.
    #[must_use]
    pub fn within(&self, budget: Option<Duration>) -> OrderApi {
        OrderApi {
            budget,
            ..self.clone()
        }
    }

    /// The same client, whose requests with a budget time out `grace` after it instead of
    /// [`CLIENT_TIMEOUT_GRACE`]: a long grace waits for the server's own answer.
    #[must_use]
    pub fn with_grace(&self, grace: Duration) -> OrderApi {
        OrderApi {
            grace,
            ..self.clone()
        }
    }

    /// The time budget of this client's requests, if any.
    #[must_use]
    pub fn budget(&self) -> Option<Duration> {
        self.budget
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
        mut request: reqwest::RequestBuilder,
    ) -> Result<T, CallError> {
        if let Some(budget) = self.budget {
            // Whole milliseconds, rounded up: the server never stops before the caller.
            let ms = budget.as_micros().div_ceil(1000);
            request = request
                .timeout(budget.saturating_add(self.grace))
                .header(BUDGET_HEADER, ms.to_string());
        }
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

    /// `POST /ship`: ships the reserved unit.
    ///
    /// # Errors
    /// [`CallError`] for an error status or a transport failure.
    pub async fn ship(&self, req: &DispatchRequest) -> Result<Dispatch, CallError> {
        let request = self.http.post(self.url("/ship")).json(req);
        self.call(Service::Ship, request).await
    }

    /// `POST /shortage`: records the shortage.
    ///
    /// # Errors
    /// [`CallError`] for an error status or a transport failure.
    pub async fn shortage(&self, req: &DispatchRequest) -> Result<Dispatch, CallError> {
        let request = self.http.post(self.url("/shortage")).json(req);
        self.call(Service::Shortage, request).await
    }

    /// `POST /notify` with how the order was dispatched.
    ///
    /// # Errors
    /// [`CallError`] for an error status or a transport failure.
    pub async fn notify(&self, dispatch: &Dispatch) -> Result<Notification, CallError> {
        let request = self.http.post(self.url("/notify")).json(dispatch);
        self.call(Service::Notify, request).await
    }

    /// `POST /mail`, `/sms` or `/push` with `notice`.
    ///
    /// # Errors
    /// [`CallError`] for an error status or a transport failure.
    pub async fn send(&self, channel: Channel, notice: &Notice) -> Result<Delivery, CallError> {
        let request = self
            .http
            .post(self.url(&format!("/{}", channel.name())))
            .json(notice);
        self.call(channel.service(), request).await
    }

    /// The order placement written the seed's original way: one call after the other,
    /// `user`, `sku`, `stock`, then `ship` or `shortage`, then `notify`.
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
        let req = DispatchRequest {
            user_id: user.id,
            sku_id: sku.id,
            quantity: stock.quantity,
        };
        let dispatch = if stock.quantity > 0 {
            self.ship(&req).await?
        } else {
            self.shortage(&req).await?
        };
        self.notify(&dispatch).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_and_channel_names_round_trip() {
        for service in Service::ALL {
            assert_eq!(service.name().parse::<Service>(), Ok(service));
        }
        for channel in Channel::ALL {
            assert_eq!(channel.name().parse::<Channel>(), Ok(channel));
            assert_eq!(channel.name().parse::<Service>(), Ok(channel.service()));
        }
        assert_eq!("STOCK".parse::<Service>(), Ok(Service::Stock));
        assert!("payment".parse::<Service>().is_err());
        assert!("stock".parse::<Channel>().is_err());
    }

    #[test]
    fn behavior_plans_latency_status_and_stock() {
        let plan = Behavior::new()
            .fail()
            .slow_by(Duration::from_millis(30))
            .plan(Service::Stock, 1);
        assert_eq!(plan.delay, Duration::from_millis(180));
        assert_eq!(plan.status, Some(StatusCode::SERVICE_UNAVAILABLE));
        assert_eq!(plan.stock, DEFAULT_STOCK);
        let plan = Behavior::new().plan(Service::Notify, 1);
        assert_eq!(plan.delay, Duration::from_millis(50));
        assert_eq!(plan.status, None);
        assert_eq!(Behavior::new().stock(0).plan(Service::Stock, 1).stock, 0);
    }

    #[test]
    fn fail_first_fails_only_the_first_calls() {
        let flaky = Behavior::new().fail_first(2);
        let statuses: Vec<_> = (1..=4)
            .map(|call| flaky.plan(Service::Stock, call).status)
            .collect();
        let unavailable = Some(StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(statuses, [unavailable, unavailable, None, None]);
        assert_eq!(flaky.succeed().plan(Service::Stock, 1).status, None);
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
        assert!(done.message.contains("shipped"), "{}", done.message);
        assert_eq!(downstreams.calls(Service::Ship), 1);

        downstreams.update(Service::Stock, |b| b.stock(0));
        let done = api.place_order_serially(&order).await?;
        assert!(done.message.contains("backordered"), "{}", done.message);
        assert_eq!(downstreams.calls(Service::Shortage), 1);

        downstreams.update(Service::Stock, Behavior::fail);
        let err = api.place_order_serially(&order).await.err();
        let msg = err.as_ref().map(ToString::to_string);
        assert_eq!(
            msg.as_deref(),
            Some("stock answered 503 Service Unavailable")
        );
        assert_eq!(downstreams.calls(Service::Stock), 3);
        assert_eq!(downstreams.calls(Service::Notify), 2);

        drop(api);
        server.shutdown().await?;
        Ok(())
    }

    #[tokio::test]
    async fn server_stops_at_the_callers_budget() -> Result<(), Box<dyn std::error::Error>> {
        let downstreams = Downstreams::new();
        downstreams.update(Service::Push, |b| b.slow_by(Duration::from_millis(500)));
        let server = OrderServer::start(downstreams.clone()).await?;
        let api = OrderApi::new(reqwest::Client::new(), server.base_url());
        let notice = Notice {
            borrow_id: 1,
            user_id: 7,
            isbn: "978-7-111-00000-0".to_owned(),
        };
        let sent = api.send(Channel::Mail, &notice).await?;
        assert_eq!(sent.channel, "mail");

        // The client waits for the server's answer (a long grace, a backstop only): the
        // test checks what the server did, not how fast a loaded machine delivered it.
        let err = api
            .within(Some(Duration::from_millis(100)))
            .with_grace(Duration::from_secs(30))
            .send(Channel::Push, &notice)
            .await
            .err();
        // The server stops at the caller's deadline instead of working 530 ms for nobody:
        // it answers 504 (the push would have succeeded), from the early-stop path.
        assert!(
            matches!(
                err,
                Some(CallError::Status {
                    status: StatusCode::GATEWAY_TIMEOUT,
                    ..
                })
            ),
            "{err:?}"
        );
        assert_eq!(downstreams.stopped_early(Service::Push), 1);

        drop(api);
        server.shutdown().await?;
        Ok(())
    }
}
