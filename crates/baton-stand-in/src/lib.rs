//! The stand-in services of baton's examples and real-service benchmark: an embedded HTTP
//! server that plays the downstream services of two scenarios, their wire types, a server
//! that cuts slow clients, and a small client.
//!
//! The examples and the benchmark run against real HTTP on `127.0.0.1` instead of sleeping
//! in place, so that what a graph saves (and what a failure costs) is measured through
//! sockets, a connection pool and JSON, as a request handler would see it.
//!
//! One file per purpose: `service` (which services and channels exist), `behavior` (how
//! each answers, live and shared), `wire` (what goes over the wire), `routes` (the
//! handlers and [`OrderServer`]), `server` ([`HttpServer`] and its [`Limits`]), `client`
//! ([`OrderApi`]).
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
//! use baton_stand_in::{Behavior, Downstreams, OrderApi, OrderServer, Service};
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

mod behavior;
mod client;
mod routes;
mod server;
mod service;
mod wire;

use std::time::Duration;

pub use behavior::{Behavior, Downstreams};
pub use client::{CallError, OrderApi};
pub use routes::{OrderServer, router};
pub use server::{HttpServer, Limits};
pub use service::{Channel, Service, UnknownService};
pub use wire::{
    DeductStock, Delivery, Dispatch, DispatchRequest, Notice, Notification, OrderRequest, Sku,
    Stock, User,
};

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

/// `n` milliseconds: the one short way to write a duration in the examples, the benchmark
/// and their tests.
///
/// ```
/// assert_eq!(baton_stand_in::ms(250), std::time::Duration::from_millis(250));
/// ```
#[must_use]
pub const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[cfg(test)]
mod lib_tests;
