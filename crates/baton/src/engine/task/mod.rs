//! Tasks: what a node runs. `ctx.rs` is what a task sees, `Ctx`, and the type-erased form
//! the graph keeps; `attempt_box.rs` the box an attempt runs in, and the ended ones a run
//! keeps. `storage.rs` stores a graph's tasks by type; it is the one `unsafe`
//! module of the engine. `upstreams.rs` is how a task receives its upstreams' values,
//! `node_fallback.rs` a node's fallback as its task stores it, and `tokens.rs` attempt
//! cancellation tokens, made only for tasks that ask for one.

pub(super) mod attempt_box;
pub(super) mod ctx;
pub(super) mod node_fallback;
pub(super) mod storage;
pub(super) mod tokens;
pub(super) mod upstreams;
