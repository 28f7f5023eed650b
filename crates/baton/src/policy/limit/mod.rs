//! Limits on calls to one downstream: [`bulkhead`] is a concurrency limit and
//! [`rate_limit`] a GCRA rate limit. A rate limit works alone or, through
//! [`rate_limit_shared`], shared by a fleet through a backend. Both are shared by name and
//! wait a bounded time for a permit. The onion takes their permits before an attempt, in
//! `onion/single_attempt.rs`.

pub(crate) mod bulkhead;
pub(crate) mod rate_limit;
#[cfg(test)]
mod rate_limit_loom_tests;
pub(crate) mod rate_limit_shared;
