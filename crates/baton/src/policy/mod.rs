//! Policy primitives: the parts of resilience that know nothing of a graph, a run or a
//! task. Each can be used alone; the onion (the layer above) composes them around an
//! attempt, for a graph node and for a single call alike.
//!
//! - [`backoff`]: the waits between attempts, with jitter; an iterator of delays.
//! - [`breaker`]: a circuit breaker, shared by name, with its state machine and events.
//! - [`bulkhead`]: a concurrency limit with a bounded wait for a permit.
//! - [`hedge`]: hedged attempts: their delay (fixed, or a percentile of recent latencies).
//! - [`rate_limit`]: a rate limit per downstream (GCRA), with a bounded wait for a permit.
//! - [`retry_budget`]: a cap on retries as a share of calls to one downstream.
//! - [`chaos`]: fault injection for tests: latency and errors at a rate, seeded.
//! - [`completion`]: when a map node is done: its completion rule, and the tally of its
//!   items that decides it.
//! - [`deadline`]: one deadline for everything: an attempt's cut, the clipped backoff, the
//!   minimum attempt time, and the timer that enforces the cut.
//! - [`retry`]: when a retry series stops, and why.
//!
//! Nothing here imports anything above the leaf utilities.

pub(crate) mod backoff;
pub(crate) mod breaker;
pub(crate) mod budget;
pub(crate) mod bulkhead;
pub(crate) mod chaos;
pub(crate) mod completion;
pub(crate) mod deadline;
pub(crate) mod hedge;
pub(crate) mod rate_limit;
#[cfg(test)]
mod rate_limit_loom_tests;
pub(crate) mod rate_limit_shared;
pub(crate) mod retry;
pub(crate) mod retry_budget;
mod setting;

pub use backoff::{Backoff, BackoffIter, DEFAULT_MAX_DELAY, Jitter};
pub(crate) use breaker::CircuitBreaker;
pub use budget::{Budget, DownstreamDeadlineExceeded};
pub use bulkhead::Bulkhead;
pub use chaos::{Chaos, InjectedFault};
pub use completion::{Completion, DEFAULT_MAP_CONCURRENCY, Decision};
pub use deadline::DEFAULT_MIN_ATTEMPT_TIME;
pub use hedge::{HEDGE_WINDOW, Hedge, MAX_HEDGES};
pub use rate_limit::RateLimiter;
pub use retry::StopReason;
pub use retry_budget::RetryBudget;
pub use setting::InvalidSetting;
