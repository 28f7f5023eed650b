//! One run of a graph. `future.rs` holds the `Run` future and `options.rs` its options.
//! `state.rs` holds the run state, with the run's invariants, and `core.rs` the part of it
//! that does not depend on the input type. `node_state.rs` holds each node's per-run state
//! and join counter, `finish.rs` how a node's end spreads, `end.rs` how the run ends, `admission.rs` the run's standing
//! with its orchestrator, `joined.rs` the drivers an inline run polls in its future,
//! `start.rs` where its nodes start, `nested_run.rs` a run nested in a node of another run,
//! and `prefetch_sites.rs` where the scheduler prefetches on large graphs.

pub(super) mod admission;
pub(super) mod core;
pub(super) mod end;
pub(super) mod finish;
pub(super) mod future;
pub(super) mod joined;
pub(super) mod nested_run;
pub(super) mod node_state;
pub(super) mod options;
pub(super) mod passes;
pub(super) mod prefetch_sites;
pub(super) mod start;
pub(super) mod state;
