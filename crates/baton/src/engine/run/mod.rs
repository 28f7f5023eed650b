//! One run of a graph: the `Run` future (`future.rs`) and its options (`options.rs`), the
//! run state (`state.rs`, with the run's invariants; `core.rs`, the part that does not
//! depend on the input type), each node's per-run state and join counter
//! (`node_state.rs`), how a node's end spreads (`finish.rs`), the run's standing with its
//! orchestrator (`admission.rs`), where its nodes start (`start.rs`), and where the
//! scheduler prefetches on large graphs (`prefetch_sites.rs`).

pub(super) mod admission;
pub(super) mod core;
pub(super) mod finish;
pub(super) mod future;
pub(super) mod node_state;
pub(super) mod options;
pub(super) mod prefetch_sites;
pub(super) mod start;
pub(super) mod state;
