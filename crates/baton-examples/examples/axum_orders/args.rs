//! The `axum_orders` example's flags.

use clap::Parser;

/// A baton graph served by axum as `POST /orders`, posted to in four situations.
#[derive(Debug, Parser)]
#[command(name = "axum_orders")]
pub(crate) struct Args {
    /// After the situations, keep serving until Ctrl-C, for
    /// `curl -d '{"user_id":7,"sku_id":42}' -H 'content-type: application/json' URL`.
    #[arg(long)]
    pub(crate) serve: bool,
}
