//! Limits on calls to one downstream: a concurrency limit ([`bulkhead`]) and a rate limit
//! ([`rate_limit`], GCRA), the latter alone or shared by a fleet through a backend
//! ([`rate_limit_shared`]). Both are shared by name and wait a bounded time for a permit.
//! Taking their permits before an attempt is the onion's (`onion/single_attempt.rs`).

pub(crate) mod bulkhead;
pub(crate) mod rate_limit;
#[cfg(test)]
mod rate_limit_loom_tests;
pub(crate) mod rate_limit_shared;
