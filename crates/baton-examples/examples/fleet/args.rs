//! The fleet example's flags: the user's, and the hidden ones a replica process is started
//! with.

use clap::Parser;

#[derive(Parser, Debug)]
pub(crate) struct Args {
    /// Replica processes.
    #[arg(long, default_value_t = 8)]
    pub(crate) replicas: u32,
    /// A Redis server to use instead of starting one.
    #[arg(long)]
    pub(crate) redis: Option<String>,
    /// Run as a replica (internal).
    #[arg(long, hide = true)]
    pub(crate) replica: bool,
    /// Replica: `local` or `shared`.
    #[arg(long, default_value = "local", hide = true)]
    pub(crate) mode: String,
    /// Replica: the downstream's URL.
    #[arg(long, default_value = "", hide = true)]
    pub(crate) downstream: String,
    /// Replica: the breaker's name.
    #[arg(long, default_value = "inventory", hide = true)]
    pub(crate) name: String,
}
