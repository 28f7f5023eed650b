//! What a run tells: its report, and the callbacks and observer events of every node.

mod prop_callbacks;
mod report;
