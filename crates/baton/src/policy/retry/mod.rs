//! Retry: [`stop`] says when a series of attempts stops and why, [`backoff`] sets the waits
//! between attempts, and [`retry_budget`] caps the retries shared by the callers of one
//! downstream. The retry loop itself lives in the onion, in `onion/retry.rs`: it needs the
//! task, the observers and the deadline, which sit above this layer.

pub(crate) mod backoff;
pub(crate) mod retry_budget;
pub(crate) mod stop;
