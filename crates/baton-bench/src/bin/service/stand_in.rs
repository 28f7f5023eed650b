//! The stand-in downstream services of the order flow, over real HTTP on `127.0.0.1`, with
//! the latencies of the order example (`crates/baton-examples/examples/order.rs`): `user`
//! and `sku` 200 ms, `stock` 150 ms, `ship` and `shortage` 80 ms, `notify` 50 ms.
//!
//! A [`Scenario`] says how `stock` answers: always well, `503` half the time (after its
//! usual latency, drawn from a seeded RNG), or `503` at once (down). Every service counts
//! the calls it receives.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::wire::{DeductStock, Dispatch, DispatchRequest, Notification, Sku, Stock, User};

/// The stock every healthy `stock` call answers.
pub(crate) const STOCK: u64 = 42;

/// One of the six downstream services.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Service {
    User,
    Sku,
    Stock,
    Ship,
    Shortage,
    Notify,
}

impl Service {
    /// Every service, in the flow's order.
    pub(crate) const ALL: [Service; 6] = [
        Service::User,
        Service::Sku,
        Service::Stock,
        Service::Ship,
        Service::Shortage,
        Service::Notify,
    ];

    /// The lower-case name: the node's and the breaker's.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Service::User => "user",
            Service::Sku => "sku",
            Service::Stock => "stock",
            Service::Ship => "ship",
            Service::Shortage => "shortage",
            Service::Notify => "notify",
        }
    }

    fn latency(self) -> Duration {
        Duration::from_millis(match self {
            Service::User | Service::Sku => 200,
            Service::Stock => 150,
            Service::Ship | Service::Shortage => 80,
            Service::Notify => 50,
        })
    }
}

/// How the `stock` service answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scenario {
    /// Every service answers well.
    Healthy,
    /// `stock` answers `503` to half its calls (seeded RNG), after its usual latency.
    StockFlaky,
    /// `stock` answers `503` at once to every call.
    StockDown,
}

impl Scenario {
    /// Every scenario, in the table's order.
    pub(crate) const ALL: [Scenario; 3] =
        [Scenario::Healthy, Scenario::StockFlaky, Scenario::StockDown];

    /// The scenario's name in the table and on the command line.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Scenario::Healthy => "healthy",
            Scenario::StockFlaky => "stock-flaky",
            Scenario::StockDown => "stock-down",
        }
    }

    /// Parses [`name`](Self::name).
    pub(crate) fn parse(s: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|x| x.name() == s)
    }
}

/// The services' shared state: the scenario, the RNG of the flaky stock, the counters.
#[derive(Debug)]
struct Shared {
    scenario: AtomicU8,
    rng: Mutex<fastrand::Rng>,
    calls: [AtomicU64; 6],
}

/// The running stand-ins: their address, scenario and counters.
#[derive(Debug)]
pub(crate) struct StandIns {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<io::Result<()>>,
}

impl StandIns {
    /// Binds `127.0.0.1:0` and serves the six services on the current runtime.
    pub(crate) async fn start() -> io::Result<StandIns> {
        let shared = Arc::new(Shared {
            scenario: AtomicU8::new(0),
            rng: Mutex::new(fastrand::Rng::with_seed(1)),
            calls: Default::default(),
        });
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let app = router(Arc::clone(&shared));
        let task = tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(StandIns { addr, shared, task })
    }

    /// `http://127.0.0.1:PORT`.
    pub(crate) fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Switches to `scenario` and reseeds the flaky stock's RNG with `seed`.
    pub(crate) fn set(&self, scenario: Scenario, seed: u64) {
        let index = Scenario::ALL.iter().position(|s| *s == scenario);
        let index = u8::try_from(index.unwrap_or(0)).unwrap_or(0);
        self.shared.scenario.store(index, Ordering::Relaxed);
        *self
            .shared
            .rng
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = fastrand::Rng::with_seed(seed);
    }

    /// How many calls `service` has received since the stand-ins started.
    pub(crate) fn calls(&self, service: Service) -> u64 {
        self.shared.calls[service as usize].load(Ordering::Relaxed)
    }
}

impl Drop for StandIns {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Shared {
    /// Counts the call, waits the service's latency, and fails it as the scenario says.
    async fn serve(&self, service: Service) -> Result<(), StatusCode> {
        self.calls[service as usize].fetch_add(1, Ordering::Relaxed);
        let scenario = Scenario::ALL[usize::from(self.scenario.load(Ordering::Relaxed))];
        let unavailable = Err(StatusCode::SERVICE_UNAVAILABLE);
        match (service, scenario) {
            (Service::Stock, Scenario::StockDown) => return unavailable,
            (Service::Stock, Scenario::StockFlaky) => {
                let fail = self
                    .rng
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .bool();
                tokio::time::sleep(service.latency()).await;
                return if fail { unavailable } else { Ok(()) };
            }
            _ => {}
        }
        tokio::time::sleep(service.latency()).await;
        Ok(())
    }
}

type St = State<Arc<Shared>>;

async fn user(State(s): St, Path(id): Path<u64>) -> Result<Json<User>, StatusCode> {
    s.serve(Service::User).await?;
    let level = if id % 2 == 0 { "gold" } else { "silver" };
    Ok(Json(User {
        id,
        name: format!("user-{id}"),
        level: level.to_owned(),
    }))
}

async fn sku(State(s): St, Path(id): Path<u64>) -> Result<Json<Sku>, StatusCode> {
    s.serve(Service::Sku).await?;
    Ok(Json(Sku {
        id,
        title: format!("sku-{id}"),
        price_cents: 59_900,
    }))
}

async fn stock(State(s): St, Json(req): Json<DeductStock>) -> Result<Json<Stock>, StatusCode> {
    s.serve(Service::Stock).await?;
    Ok(Json(Stock {
        user_id: req.user.id,
        sku_id: req.sku.id,
        quantity: STOCK,
    }))
}

async fn ship(State(s): St, Json(r): Json<DispatchRequest>) -> Result<Json<Dispatch>, StatusCode> {
    s.serve(Service::Ship).await?;
    Ok(Json(Dispatch {
        user_id: r.user_id,
        sku_id: r.sku_id,
        status: "shipped".to_owned(),
        reference: format!("SF{:04}{:04}", r.user_id, r.sku_id),
    }))
}

async fn shortage(
    State(s): St,
    Json(r): Json<DispatchRequest>,
) -> Result<Json<Dispatch>, StatusCode> {
    s.serve(Service::Shortage).await?;
    Ok(Json(Dispatch {
        user_id: r.user_id,
        sku_id: r.sku_id,
        status: "backordered".to_owned(),
        reference: format!("BO-{}-{}", r.user_id, r.sku_id),
    }))
}

async fn notify(State(s): St, Json(d): Json<Dispatch>) -> Result<Json<Notification>, StatusCode> {
    s.serve(Service::Notify).await?;
    Ok(Json(Notification {
        user_id: d.user_id,
        message: format!("sku {} {}: {}", d.sku_id, d.status, d.reference),
    }))
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/health", get(|| async { "ok" }))
        .route("/user/{id}", get(user))
        .route("/sku/{id}", get(sku))
        .route("/stock/deduct", post(stock))
        .route("/ship", post(ship))
        .route("/shortage", post(shortage))
        .route("/notify", post(notify))
        .with_state(shared)
}
