//! Durations as people read them in messages: `300 ms`, `758.6 ms`, `12 µs`, `2.5 s`.

use std::fmt;
use std::time::Duration;

/// Displays a `Duration` compactly: whole or one-decimal milliseconds below 10 s, seconds
/// above, microseconds below 1 ms.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Human(pub(crate) Duration);

fn trimmed(f: &mut fmt::Formatter<'_>, value: f64, unit: &str) -> fmt::Result {
    let rounded = (value * 10.0).round() / 10.0;
    if rounded.fract() == 0.0 {
        write!(f, "{rounded:.0} {unit}")
    } else {
        write!(f, "{rounded:.1} {unit}")
    }
}

impl fmt::Display for Human {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        if d.is_zero() {
            f.write_str("0 ms")
        } else if d < Duration::from_millis(1) {
            write!(f, "{} µs", d.as_micros().max(1))
        } else if d < Duration::from_secs(10) {
            trimmed(f, d.as_secs_f64() * 1000.0, "ms")
        } else {
            trimmed(f, d.as_secs_f64(), "s")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_well() {
        let h = |d: Duration| Human(d).to_string();
        assert_eq!(h(Duration::ZERO), "0 ms");
        assert_eq!(h(Duration::from_nanos(1_082)), "1 µs");
        assert_eq!(h(Duration::from_millis(300)), "300 ms");
        assert_eq!(h(Duration::from_micros(758_574)), "758.6 ms");
        assert_eq!(h(Duration::from_millis(2500)), "2500 ms");
        assert_eq!(h(Duration::from_millis(12_500)), "12.5 s");
        assert_eq!(h(Duration::from_secs(60)), "60 s");
    }
}
