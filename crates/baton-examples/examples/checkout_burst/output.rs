//! The table the `/checkout` burst prints: one row per breaker, then what each column
//! counts.

use crate::scenario::Figures;

/// The table's header.
pub(crate) fn print_header() {
    println!(
        "{:<20} {:>12} {:>12} {:>15} {:>9} {:>9} {:>6}",
        "breaker", "before open", "while down", "served 1st s", "peak", "fallback", "failed"
    );
}

/// The row of the breaker `name`: its scenario run's figures `f`.
pub(crate) fn print_row(name: &str, f: &Figures) {
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

/// What each column counts.
pub(crate) fn print_legend() {
    println!();
    println!("before open, while down: calls that reached the dead downstream before the");
    println!("  breaker first opened, and in all; served 1st s: requests of the first second");
    println!("  after the recovery that the downstream served; peak: its most calls in flight");
    println!("  in that second; fallback, failed: requests served by the fallback, failed.");
}
