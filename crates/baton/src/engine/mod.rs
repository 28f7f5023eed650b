//! The engine: the compiled graph, the run state, the drivers that run nodes, and the
//! onion's host for a node.
//!
//! The scheduler uses join counters: every node of a run has an atomic count of upstreams
//! that have not ended yet. A node that ends decrements the counters of its downstreams;
//! each one that reaches zero is ready. The driver that finished the node runs one ready
//! downstream itself and puts the others in the run's ready queue, which at most as many
//! drivers as the runtime has workers drain (a driver whose node waits hands the queue to a
//! new one). A node waiting for its upstreams holds no thread and no task, a ready node
//! costs a queue slot rather than a tokio task, and nothing looks a node up by name or
//! joins futures per node. On large graphs whose edges jump, what a node touches at
//! scattered places is prefetched as soon as its address is known (`prefetch.rs`).
//!
//! The graph, the erased task, `Ctx` and the run state refer to one another, so they live
//! here together; `state.rs` writes down the run's invariants, `ready.rs` the queue's
//! protocol, `driver/` how nodes are run.

mod admission;
mod attempt;
mod compensate;
mod core;
mod diagram;
mod driver;
mod fallback;
mod finish;
mod first_attempt;
mod full_path;
mod graph;
mod host;
mod map;
mod nested;
mod node;
mod options;
mod prefetch;
mod ready;
mod run;
mod schedule;
mod spare;
mod start;
mod state;
mod task;
mod tasks;
mod tokens;
mod upstreams;

pub use graph::Graph;
pub(crate) use graph::{Extras, GraphInner, GraphMeta, NodeDef, NodeKind, States};
pub use options::{FailureMode, RunOptions};
pub use run::{Run, RunCanceller, RunError};

pub(crate) use compensate::{CompensateFn, Compensation, Compensations};
pub use compensate::{CompensationCtx, CompensationTrigger};
pub(crate) use fallback::{FallbackScope, NodeFallback};
pub use map::ItemCtx;
pub(crate) use map::{MapTask, Results, Values};
pub use start::StartMode;
pub use task::Ctx;
pub(crate) use task::{AttemptFuture, BlockingTask, ErasedTask, FallbackFuture, TypedTask};
pub(crate) use tasks::{TaskRef, Tasks};
// `FetchCx` and `UpstreamRef` are named in the sealed `Upstreams` trait's hidden methods.
#[allow(unreachable_pub)]
pub use upstreams::{FetchCx, Inputs, Named, UpstreamRef, Upstreams};

#[cfg(test)]
mod tests;
