//! The builder: defining a graph node by node, and `build()`, which validates the
//! definition and hands the engine what it compiles.
//!
//! Adding a node never fails on the spot; problems are collected and `build()` returns the
//! first as a typed [`BuildError`](crate::BuildError), so a bad graph never hangs or panics
//! at run time.

mod compensate;
mod graph_builder;
mod node;
mod policy;
mod router;
mod validate;

pub use compensate::DEFAULT_COMPENSATION_TIMEOUT;
pub use graph_builder::GraphBuilder;
pub use node::NodeBuilder;
pub use router::{Router, RouterBuilder};
