//! The engine: the compiled graph, the run state, the drivers that run nodes, and the
//! onion's host for a node.
//!
//! The scheduler uses join counters: every node of a run has an atomic count of upstreams
//! that have not ended yet. A node that ends decrements the counters of its downstreams;
//! each one that reaches zero is ready. The driver that finished the node runs one ready
//! downstream itself and puts the others in the run's ready queue. At most as many drivers
//! as the runtime has workers drain that queue, and a driver whose node waits hands the
//! queue to a new one. A node waiting for its upstreams holds no thread and no task, a
//! ready node costs a queue slot rather than a tokio task, and nothing looks a node up by
//! name or joins futures per node. On large graphs whose edges jump, what a node touches at
//! scattered places is prefetched as soon as its address is known; see
//! `run/prefetch_sites.rs`.
//!
//! The graph, the erased task, `Ctx` and the run state refer to one another, so they live
//! here together, one folder per concern:
//!
//! - `graph/`: the compiled graph, its drawings, and the spare run arrays it keeps.
//! - `task/`: a task as the graph stores it, by type, with its `Ctx`, its upstreams, its
//!   fallback and its cancellation tokens.
//! - `run/`: one run: the `Run` future and its options, the run state, each node's per-run
//!   state, and how a node's end spreads. `state.rs` writes down the run's invariants.
//! - `ready/`: the run's ready queue and its protocol, and where ready nodes go.
//! - `driver/`: the driver future, which takes ready nodes and runs them.
//! - `paths/`: how a node's attempt runs: the fast path in the driver, the full path
//!   through the onion, and the bookkeeping both share.
//! - `map/` and `compensate/`: map nodes and compensations.

mod compensate;
mod driver;
mod graph;
mod map;
mod paths;
mod ready;
mod run;
mod task;

pub use graph::Graph;
pub(crate) use graph::{Extras, GraphInner, GraphMeta, NodeDef, NodeKind, States};
pub use run::future::{Run, RunCanceller, RunError};
pub use run::options::{FailureMode, RunOptions};

pub(crate) use compensate::{CompensateFn, Compensation, Compensations};
pub use compensate::{CompensationCtx, CompensationTrigger};
pub use map::ItemCtx;
pub(crate) use map::{MapTask, Results, Values};
pub use run::start::StartMode;
pub use task::ctx::Ctx;
pub(crate) use task::ctx::{AttemptFuture, BlockingTask, ErasedTask, FallbackFuture, TypedTask};
pub(crate) use task::node_fallback::{FallbackScope, NodeFallback};
pub(crate) use task::storage::{TaskRef, Tasks};
// `FetchCx` and `UpstreamRef` are named in the sealed `Upstreams` trait's hidden methods.
#[allow(unreachable_pub)]
pub use task::upstreams::{FetchCx, Inputs, Named, UpstreamRef, Upstreams};

#[cfg(test)]
mod tests;
