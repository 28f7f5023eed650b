//! tower, both ways, with feature `tower`:
//!
//! - [`NodeBuilder::service`](crate::NodeBuilder::service) makes a [`tower::Service`] a
//!   node's task;
//! - [`GraphService`] makes a built graph a `tower::Service`;
//! - [`PipelineLayer`] makes the single-call [`Pipeline`](crate::Pipeline) a
//!   [`tower::Layer`].
//!
//! With feature `http`, deadlines cross service hops through `DeadlineHeaders` and
//! `DeadlineLayer`: the caller's budget is read from a request's headers, and this
//! attempt's is written on an outbound one. With feature `axum`, a run's errors convert
//! into HTTP responses and `HttpService` makes a graph serve a route.
//!
//! The traits are those of the `tower-service` and `tower-layer` crates, which `tower`
//! re-exports: the same `Service` and `Layer`.
//!
//! A caller's remaining time enters a run or a pipeline call as its deadline, so their
//! attempts are cut at the caller's deadline. [`ReadBudget`] says how a request carries it;
//! with [`NoBudget`] it carries none.
//!
//! [`tower::Service`]: tower_service::Service
//! [`tower::Layer`]: tower_layer::Layer

#[cfg(feature = "axum")]
mod axum;
#[cfg(feature = "http")]
mod deadline_headers;
mod graph_service;
#[cfg(feature = "axum")]
mod http_service;
mod pipeline_layer;
mod service_node;

#[cfg(feature = "http")]
pub use deadline_headers::{
    BadBudgetHeader, DeadlineHeaders, DeadlineLayer, DeadlineService, RequestDeadline,
};
pub use graph_service::{GraphFuture, GraphService};
#[cfg(feature = "axum")]
pub use http_service::HttpService;
pub use pipeline_layer::{PipelineLayer, PipelineService};

use std::future::poll_fn;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tower_service::Service;

use crate::error::BoxError;

/// What reads the caller's remaining budget from a request, with feature `tower`.
/// [`DeadlineHeaders`] reads an `http::Request`, with feature `http`; [`NoBudget`] serves
/// requests that carry none. [`PipelineLayer::budget_from`] takes one.
pub trait ReadBudget<Req> {
    /// The time the caller has left for `request`; `None` when it says nothing.
    fn budget(&self, request: &Req) -> Option<Duration>;
}

/// Reads no budget from any request: the default of [`PipelineLayer`].
#[derive(Debug, Clone, Copy, Default)]
pub struct NoBudget;

impl<Req> ReadBudget<Req> for NoBudget {
    fn budget(&self, _request: &Req) -> Option<Duration> {
        None
    }
}

/// A value kept behind a lock so that a closure that must be `Sync` can hold a service or
/// a request that is only `Send`, and clone it for each attempt.
struct Shared<T>(Mutex<T>);

impl<T: Clone> Shared<T> {
    fn new(value: T) -> Self {
        Shared(Mutex::new(value))
    }

    /// A clone of the value. A clone that panicked before leaves the value as it was, so a
    /// poisoned lock is taken as it is.
    fn get(&self) -> T {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Waits until `service` is ready, then calls it with `request`; both errors as
/// [`BoxError`], the service's own error kept as it was returned.
async fn ready_call<S, Req>(mut service: S, request: Req) -> Result<S::Response, BoxError>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
{
    poll_fn(|cx| service.poll_ready(cx))
        .await
        .map_err(Into::into)?;
    service.call(request).await.map_err(Into::into)
}
