//! How a node's attempt runs. A driver takes one of two paths. The fast path,
//! `first_attempt.rs`, runs in the driver itself, for a first attempt that needs nothing
//! more than a check of its policies. The full path, `full_path.rs`, is boxed and goes
//! through the onion with the node's host, `node_host.rs`. `attempt_steps.rs` is the
//! bookkeeping both share: counting an attempt, ending it, telling the observers, calling
//! the task.

pub(super) mod attempt_steps;
pub(super) mod first_attempt;
pub(super) mod full_path;
pub(super) mod node_host;
