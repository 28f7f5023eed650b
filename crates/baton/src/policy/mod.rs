//! Policy primitives: the parts of resilience that know nothing of a graph, a run or a
//! task. Each can be used alone. The onion, the layer above, composes them around an
//! attempt, for a graph node and for a single call alike.
//!
//! One folder or file per policy:
//!
//! - [`retry`]: when a retry series stops, and why. [`retry::backoff`] gives the waits
//!   between attempts, with jitter, as an iterator of delays. [`retry::retry_budget`] caps
//!   retries as a share of calls to one downstream.
//! - [`deadline`]: one deadline for everything: an attempt's cut, the clipped backoff, the
//!   minimum attempt time, and the timer that enforces the cut. [`deadline::budget`]
//!   carries a deadline across a service hop in its wire formats.
//! - [`breaker`]: a circuit breaker, shared by name, with its state machine and events.
//! - [`limit`]: [`limit::bulkhead`] is a concurrency limit with a bounded wait for a
//!   permit. [`limit::rate_limit`] is a GCRA rate limit per downstream with a bounded wait
//!   for a permit, alone or shared by a fleet.
//! - [`hedge`]: hedged attempts and their delay, fixed or a percentile of recent latencies.
//! - [`chaos`]: fault injection for tests: latency and errors at a rate, seeded.
//! - [`completion`]: when a map node is done: its completion rule, and the tally of its
//!   items that decides it.
//!
//! How the onion runs each of these around an attempt lives one layer up, in `onion`, in a
//! file named for the step.
//!
//! Nothing here imports anything above the leaf utilities.

pub(crate) mod breaker;
pub(crate) mod chaos;
pub(crate) mod completion;
pub(crate) mod deadline;
pub(crate) mod hedge;
pub(crate) mod limit;
pub(crate) mod retry;
mod setting;

pub(crate) use breaker::CircuitBreaker;
pub use chaos::{Chaos, InjectedFault};
pub use completion::{Completion, DEFAULT_MAP_CONCURRENCY, Decision};
pub use deadline::DEFAULT_MIN_ATTEMPT_TIME;
pub use deadline::budget::{Budget, DownstreamDeadlineExceeded};
pub use hedge::{Hedge, MAX_HEDGES};
pub use limit::bulkhead::Bulkhead;
pub use limit::rate_limit::RateLimiter;
pub use retry::backoff::{Backoff, Jitter};
pub use retry::retry_budget::RetryBudget;
pub use retry::stop::StopReason;
pub use setting::InvalidSetting;
