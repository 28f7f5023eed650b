//! Resilience policies, one module each, composed per node in a fixed onion (DESIGN rule 3):
//! attempt (bulkhead permit + task + per-attempt timeout) → retry (backoff, jitter, retry
//! budget, deadline budget) → circuit breaker → fallback.

pub mod breaker;
