//! The operations the breaker script makes, each with named fields: the one place where
//! Rust values become the script's arguments.

use std::time::Duration;

use baton_graph::breaker::ManualControl;
use baton_graph::shared::SharedRules;

use crate::Quorum;

/// How a probe ended, as the script is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProbeResult {
    Succeeded,
    Failed,
    /// Cancelled, ignored, or granted to a breaker that could not take it.
    Released,
}

/// A batch of closed-state outcomes of one replica, for one shared generation.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) any_success: bool,
    /// Failures after the batch's last success.
    pub(crate) tail_failures: u32,
    pub(crate) failures: u32,
    pub(crate) calls: u32,
}

impl Counts {
    /// Adds the outcomes of `later`, a batch that followed this one.
    pub(crate) fn merge(&mut self, later: Counts) {
        self.tail_failures = if later.any_success {
            later.tail_failures
        } else {
            self.tail_failures.saturating_add(later.tail_failures)
        };
        self.any_success |= later.any_success;
        self.failures = self.failures.saturating_add(later.failures);
        self.calls = self.calls.saturating_add(later.calls);
    }
}

/// One call of the script.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Op<'a> {
    /// Stores the breaker's rules (once per breaker, and again if the server lost them).
    Configure {
        rules: &'a SharedRules,
        quorum: Option<Quorum>,
    },
    /// Reads the state.
    Sync,
    /// Counts a batch once: `batch` numbers this replica's batches, from 1.
    Record {
        generation: u64,
        replica: &'a str,
        batch: u64,
        counts: Counts,
    },
    /// Quorum mode: this replica tripped by its own counts.
    Trip { generation: u64, replica: &'a str },
    /// Asks for a probe slot for `owner`, refused past `not_after` (Redis time; none if 0).
    /// The slot expires after the half-open wait, or sooner: at `slot_until` (Redis time)
    /// or `slot_ms` after it is taken, its caller's attempt deadline (none if 0).
    Probe {
        owner: &'a str,
        not_after_ms: u64,
        slot_until_ms: u64,
        slot_ms: u64,
    },
    /// Frees the slot `owner` may hold (its request's answer was lost).
    Disown { owner: &'a str },
    /// A probe's result in its slot.
    ProbeEnd {
        generation: u64,
        slot: u32,
        result: ProbeResult,
    },
    /// A manual transition.
    Control(ManualControl),
}

/// Whole milliseconds, at least 1.
pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl Op<'_> {
    /// The script's name of the operation.
    fn name(&self) -> &'static str {
        match self {
            Op::Configure { .. } => "configure",
            Op::Sync => "sync",
            Op::Record { .. } => "record",
            Op::Trip { .. } => "trip",
            Op::Probe { .. } => "probe",
            Op::Disown { .. } => "disown",
            Op::ProbeEnd { .. } => "probe_end",
            Op::Control(_) => "control",
        }
    }

    /// The script's arguments: the name, then name, value pairs.
    pub(crate) fn args(&self) -> Vec<String> {
        let mut out = vec![self.name().to_owned()];
        let mut put = |k: &str, v: String| {
            out.push(k.to_owned());
            out.push(v);
        };
        match *self {
            Op::Configure { rules, quorum } => configure(rules, quorum, &mut put),
            Op::Sync => {}
            Op::Record {
                generation,
                replica,
                batch,
                counts,
            } => {
                put("gen", generation.to_string());
                put("replica", replica.to_owned());
                put("batch", batch.to_string());
                put("any_success", u8::from(counts.any_success).to_string());
                put("tail_failures", counts.tail_failures.to_string());
                put("failures", counts.failures.to_string());
                put("calls", counts.calls.to_string());
            }
            Op::Trip {
                generation,
                replica,
            } => {
                put("gen", generation.to_string());
                put("replica", replica.to_owned());
            }
            Op::Probe {
                owner,
                not_after_ms,
                slot_until_ms,
                slot_ms,
            } => {
                put("owner", owner.to_owned());
                put("not_after", not_after_ms.to_string());
                put("slot_until", slot_until_ms.to_string());
                put("slot_ms", slot_ms.to_string());
            }
            Op::Disown { owner } => put("owner", owner.to_owned()),
            Op::ProbeEnd {
                generation,
                slot,
                result,
            } => {
                put("gen", generation.to_string());
                put("slot", slot.to_string());
                let result = match result {
                    ProbeResult::Succeeded => "succeeded",
                    ProbeResult::Failed => "failed",
                    ProbeResult::Released => "released",
                };
                put("result", result.to_owned());
            }
            Op::Control(op) => {
                let to = match op {
                    ManualControl::Isolate => "isolated",
                    ManualControl::ForceClosed => "forced_closed",
                    _ => "closed",
                };
                put("to", to.to_owned());
            }
        }
        out
    }
}

/// The rules as the script stores them.
fn configure(rules: &SharedRules, quorum: Option<Quorum>, put: &mut impl FnMut(&str, String)) {
    let (rate, window, min_calls) = match rules.failure_rate {
        Some((rate, Some(window), min)) => (rate, ms(window), min),
        _ => (0.0, 0, 0),
    };
    let (growth, cap) = rules.growth.unwrap_or((1.0, rules.open_duration));
    put(
        "threshold",
        rules.consecutive_failures.unwrap_or(0).to_string(),
    );
    put("rate", rate.to_string());
    put("window", window.to_string());
    put("min_calls", min_calls.to_string());
    put("open_ms", ms(rules.open_duration).to_string());
    put("growth", growth.to_string());
    put("cap_ms", ms(cap).to_string());
    put("probes", rules.half_open_probes.to_string());
    put("max_wait_ms", ms(rules.half_open_max_wait).to_string());
    let (replicas, within) = quorum.map_or((0, 0), |q| (q.replicas(), ms(q.within())));
    put("quorum", replicas.to_string());
    put("quorum_ms", within.to_string());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_is_named() {
        let op = Op::ProbeEnd {
            generation: 4,
            slot: 2,
            result: ProbeResult::Failed,
        };
        assert_eq!(
            op.args(),
            ["probe_end", "gen", "4", "slot", "2", "result", "failed"]
        );
        assert_eq!(
            Op::Control(ManualControl::Isolate).args(),
            ["control", "to", "isolated"]
        );
    }
}
