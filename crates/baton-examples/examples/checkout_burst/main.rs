//! The `/checkout` burst: bursts of concurrent requests whose `inventory` node calls one
//! downstream through a shared circuit breaker, while the downstream is down and after it
//! recovers. It prints, for the default breaker and for each of its options, what reached
//! the dead downstream and what the recovered one served (see `output.rs`).
//!
//! The downstream is simulated (`downstream.rs`) and the clock is tokio's paused clock
//! (`scenario.rs` sends the bursts), so the figures are exact and the same on every machine:
//!
//! ```text
//! cargo run --release -p baton-examples --example checkout_burst
//! ```

mod downstream;
mod output;
mod scenario;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use baton_examples::ms;
use baton_graph::{
    Backoff, BoxError, BuildError, CircuitBreaker, Fallback, Graph, Node, Retry,
    breaker::BreakerConfigError,
};

use crate::downstream::Downstream;
use crate::scenario::{Options, Scenario};

/// The `/checkout` graph: one `inventory` node calling the downstream through `breaker`,
/// with a 200 ms timeout, 4 attempts 50 ms apart, and a fallback of 0 units.
fn checkout_graph(
    breaker: CircuitBreaker,
    downstream: &Arc<Downstream>,
) -> Result<(Graph<()>, Node<u32>), BuildError> {
    let mut g = Graph::<()>::builder();
    let api = Arc::clone(downstream);
    let inventory = g
        .node("inventory")
        .timeout(ms(200))
        .retry(Retry::new(4).backoff(Backoff::constant(ms(50))))
        .breaker(breaker)
        .fallback(Fallback::value(0u32))
        .task(move |_ctx, ()| {
            let api = Arc::clone(&api);
            async move { api.call().await }
        });
    Ok((g.build()?, inventory))
}

/// The `inventory` breaker, one per scenario run: it trips after 5 consecutive failures,
/// stays open 500 ms and lets one half-open probe through, with the `options` under test.
///
/// # Errors
/// A zero `recovery_ramp`.
fn inventory_breaker(options: Options) -> Result<CircuitBreaker, BreakerConfigError> {
    let mut breaker = CircuitBreaker::builder("inventory")
        .consecutive_failures(5)
        .open_duration(ms(500))
        .count_every_attempt(options.count_every_attempt);
    if let Some(ramp) = options.recovery_ramp {
        breaker = breaker.recovery_ramp(ramp);
    }
    breaker.build()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    tokio::time::pause();
    let scenario = Scenario::default();
    let ramp = Some(ms(1_000));
    let cases = [
        ("default", Options::default()),
        (
            "count_every_attempt",
            Options {
                count_every_attempt: true,
                ..Options::default()
            },
        ),
        (
            "recovery_ramp(1 s)",
            Options {
                recovery_ramp: ramp,
                ..Options::default()
            },
        ),
        (
            "both",
            Options {
                count_every_attempt: true,
                recovery_ramp: ramp,
            },
        ),
    ];
    output::print_header();
    for (name, options) in cases {
        output::print_row(name, &scenario::run(&scenario, options).await?);
    }
    output::print_legend();
    Ok(())
}
