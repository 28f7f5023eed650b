//! Circuit breaker (placeholder; being written).
