//! A rate limiter whose limit holds across processes: the backend trait a shared store
//! implements, the way [`SharedBreakerState`](crate::policy::breaker::SharedBreakerState)
//! does for breakers.
//!
//! A limiter without a backend never looks at one: its permits come from its own GCRA
//! state. With one, every permit comes from the backend, which decides for the fleet and
//! falls back as it is configured to when the store cannot be reached.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::rate_limit::RateLimiter;
use crate::policy::breaker::SharedFuture;

/// Where the permits of a rate limiter shared by several processes come from.
///
/// Given to [`RateLimiter::shared`]. The limiter calls [`attach`](Self::attach) with its
/// settings. Then it asks [`reserve`](Self::reserve) for each permit an attempt waits for
/// in [`RateLimiter::acquire`], the path nodes and pipelines take, and
/// [`try_reserve`](Self::try_reserve) for [`RateLimiter::try_acquire`].
pub trait SharedRateLimit: Send + Sync + fmt::Debug + 'static {
    /// The limiter's settings: called when it is made shared, and again if a setting
    /// changes afterwards.
    fn attach(&self, limit: SharedLimit);

    /// Reserves one permit of the shared rate for a request made now, if it conforms
    /// within `max_wait`. Resolves to the wait before it conforms, which the limiter
    /// sleeps. When that is past `max_wait`, resolves to the time until a permit would
    /// conform, and nothing is taken. May wait on the store, within the backend's own timeout.
    fn reserve(&self, max_wait: Duration) -> SharedFuture<'_, Result<Duration, Duration>>;

    /// Takes a permit now if one is free, without waiting on the store; otherwise the time
    /// until one would be.
    ///
    /// # Errors
    /// The time until a permit conforms.
    fn try_reserve(&self) -> Result<(), Duration>;
}

/// A shared rate limiter's settings, as its backend sees them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SharedLimit {
    /// The limiter's name.
    pub name: String,
    /// At most this many permits per [`per`](Self::per), across every process.
    pub permits: u32,
    /// The period.
    pub per: Duration,
    /// How many permits may come at once.
    pub burst: u32,
}

impl RateLimiter {
    /// Shares the limit with every process whose limiter uses the same store, such as the
    /// fleet rate limiter of the `baton-redis` crate: the same API and events, with
    /// every permit decided for the whole fleet. Without it, by default, the limit is
    /// this process's alone. Returns a new limiter: call it before sharing the handle.
    #[must_use]
    pub fn shared(self, backend: impl SharedRateLimit) -> Self {
        self.with_backend(Some(Arc::new(backend)))
    }

    /// Whether the limiter's permits come from a shared store.
    #[must_use]
    pub fn is_shared(&self) -> bool {
        self.backend().is_some()
    }
}
