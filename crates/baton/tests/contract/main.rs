//! The public API's contract, one module per area: what a user of baton can rely on, tested
//! only through the public API.

mod api;
mod breaker;
mod breaker_burst;
mod bulkhead;
mod failure_modes;
mod fallback;
mod lifecycle;
mod observe;
mod onion;
mod pipeline;
mod retry;
mod robustness;
mod routing;
mod schedule;
mod shape;
mod skip;
#[cfg(feature = "tower")]
mod tower;
mod validation;
