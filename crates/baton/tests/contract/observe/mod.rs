//! What a run tells: its report, and the callbacks and observer events of every node.

#[cfg(feature = "metrics")]
mod metrics;
mod prop_callbacks;
mod report;
