//! The stand-in server: one axum handler per endpoint, each playing its service's
//! [`Behavior`](crate::Behavior) from the shared [`Downstreams`], and [`OrderServer`], which
//! serves them on `127.0.0.1`.

use std::io;
use std::net::SocketAddr;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::{Json, Router};

use crate::behavior::Fault;
use crate::wire::{
    DeductStock, Delivery, Dispatch, DispatchRequest, Notice, Notification, Sku, Stock, User,
};
use crate::{Channel, Downstreams, HttpServer, Limits, Service};

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
    Ok(Json(Dispatch {
        user_id: req.user_id,
        sku_id: req.sku_id,
        status: "shipped".to_owned(),
        reference: format!("SF{:04}{:04}", req.user_id, req.sku_id),
    }))
}

async fn shortage(
    State(d): State<Downstreams>,
    headers: HeaderMap,
    Json(req): Json<DispatchRequest>,
) -> Result<Json<Dispatch>, Fault> {
    d.serve(Service::Shortage, &headers).await?;
    Ok(Json(Dispatch {
        user_id: req.user_id,
        sku_id: req.sku_id,
        status: "backordered".to_owned(),
        reference: format!("BO-{}-{}", req.user_id, req.sku_id),
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

/// The stand-in server, listening on a random free port of `127.0.0.1`, bounded by the
/// default [`Limits`] (slow clients are cut).
///
/// Dropping it without [`shutdown`](Self::shutdown) also stops it (in the background).
#[derive(Debug)]
pub struct OrderServer {
    server: HttpServer,
    base_url: String,
    downstreams: Downstreams,
}

impl OrderServer {
    /// Binds `127.0.0.1:0` and serves every service on the current tokio runtime, reading
    /// their behaviour from `downstreams`.
    ///
    /// # Errors
    /// When the listener cannot be bound or has no local address.
    pub async fn start(downstreams: Downstreams) -> io::Result<OrderServer> {
        let limits = Limits::default();
        let app = limits.bound(router(downstreams.clone()));
        let server = HttpServer::start_with(app, limits).await?;
        tracing::debug!(addr = %server.addr(), "services listening");
        Ok(OrderServer {
            base_url: server.url_of(""),
            server,
            downstreams,
        })
    }

    /// The address the server listens on.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
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
    pub async fn shutdown(self) -> io::Result<()> {
        self.server.shutdown().await
    }
}
