//! The `/checkout` burst: 200 concurrent requests every 100 ms for 4 s, each calling one
//! `inventory` downstream through a shared circuit breaker (trips after 5 consecutive
//! failures, open 500 ms, one half-open probe), with a 200 ms timeout, 4 attempts 50 ms
//! apart and a fallback. The downstream is down for the first 2 s, then answers in 20 ms.
//! The graph is the first item of `baton_examples::burst`, shared with the crate's tests.
//!
//! Prints, for the default breaker and for each new option, how many calls reached the dead
//! downstream before the breaker opened, how many of the requests of the first second after
//! the recovery the downstream served (the rest were served by the fallback), and the most
//! calls it had in flight at once in that second.
//!
//! The downstream is simulated and the clock is tokio's paused clock, so the figures are
//! exact and the same on every machine:
//!
//! ```text
//! cargo run --release -p baton-examples --example checkout_burst
//! ```

use std::time::Duration;

use baton_examples::burst::{self, Options, Scenario};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), baton_graph::BoxError> {
    tokio::time::pause();
    let scenario = Scenario::default();
    let ramp = Some(Duration::from_secs(1));
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
    println!(
        "{:<20} {:>12} {:>12} {:>15} {:>9} {:>9} {:>6}",
        "breaker", "before open", "while down", "served 1st s", "peak", "fallback", "failed"
    );
    for (name, options) in cases {
        let f = burst::run(&scenario, options).await?;
        let served = format!("{} / {}", f.served_after_recovery, f.arrived_after_recovery);
        println!(
            "{:<20} {:>12} {:>12} {:>15} {:>9} {:>9} {:>6}",
            name,
            f.calls_before_open,
            f.calls_while_down,
            served,
            f.peak_after_recovery,
            f.fell_back,
            f.failed
        );
    }
    println!();
    println!("before open, while down: calls that reached the dead downstream before the");
    println!("  breaker first opened, and in all; served 1st s: requests of the first second");
    println!("  after the recovery that the downstream served; peak: its most calls in flight");
    println!("  in that second; fallback, failed: requests served by the fallback, failed.");
    Ok(())
}
