//! Retry: when a series of attempts stops and why ([`stop`]), the waits between attempts
//! ([`backoff`]), and the cap on retries shared by the callers of one downstream
//! ([`retry_budget`]). The retry loop itself is the onion's (`onion/retry.rs`): it needs
//! the task, the observers and the deadline, which sit above this layer.

pub(crate) mod backoff;
pub(crate) mod retry_budget;
pub(crate) mod stop;
