//! Shared pieces of the baton examples: the stand-in services every example calls, and
//! the helpers they print and time with. Each example's graph is in its own `main.rs`.
//!
//! The stand-ins are the `baton-stand-in` crate's, re-exported here: an embedded HTTP
//! server that plays the downstream services over real HTTP on `127.0.0.1`, their wire
//! types, and a small client. Its crate documentation lists the services, their endpoints
//! and latencies, and how a [`Behavior`] makes one slow or failing.
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
//! server.shutdown().await?;
//! # Ok(())
//! # }
//! ```

#![deny(clippy::unwrap_used, clippy::expect_used)]

pub use baton_stand_in::*;

/// `d` in milliseconds, with fractions: how the examples print a duration
/// (`{:.1} ms`).
///
/// ```
/// assert_eq!(baton_examples::millis(std::time::Duration::from_micros(2_500)), 2.5);
/// ```
#[must_use]
pub fn millis(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
