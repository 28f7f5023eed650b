//! When a map node is done: its [`Completion`] rule, and the [`Tally`] of its items that
//! decides it.

use std::fmt;

/// How many items of a map node run at once when its builder does not say, through
/// [`NodeBuilder::concurrency`](crate::NodeBuilder::concurrency).
pub const DEFAULT_MAP_CONCURRENCY: usize = 16;

/// How many items of a map node must succeed for the node to succeed, and when the node
/// stops running items. A recovered item counts as a success.
///
/// A rule is decided as soon as its result cannot change. A rule that can no longer be met
/// fails the node at once: the items still in flight are cancelled, that is dropped, so
/// they stop at their next `.await`, and the items not started never start. A rule that is met
/// lets the other items run to their end, except [`FirstSuccess`](Self::FirstSuccess),
/// which cancels them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Completion {
    /// Every item must succeed; the first failure fails the node and cancels the rest.
    /// The default.
    #[default]
    AllSucceed,
    /// Every item runs to its end, whatever the others did; the node succeeds, its value
    /// holds each item's result.
    AllComplete,
    /// At least this many items must succeed.
    AtLeast(usize),
    /// At most this many items may fail.
    AtMostFailed(usize),
    /// At most this percentage of the items may fail, from 0 to 100.
    AtMostFailedPercent(u8),
    /// The first item to succeed wins: the node succeeds at once and the other items are
    /// cancelled. The node fails when every item failed.
    FirstSuccess,
}

impl fmt::Display for Completion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Completion::AllSucceed => f.write_str("all must succeed"),
            Completion::AllComplete => f.write_str("all complete"),
            Completion::AtLeast(n) => write!(f, "at least {n} succeed"),
            Completion::AtMostFailed(n) => write!(f, "at most {n} fail"),
            Completion::AtMostFailedPercent(p) => write!(f, "at most {p} % fail"),
            Completion::FirstSuccess => f.write_str("first success wins"),
        }
    }
}

impl Completion {
    /// The rule as a short machine-readable name, such as `all_succeed` or `at_least`.
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            Completion::AllSucceed => "all_succeed",
            Completion::AllComplete => "all_complete",
            Completion::AtLeast(_) => "at_least",
            Completion::AtMostFailed(_) => "at_most_failed",
            Completion::AtMostFailedPercent(_) => "at_most_failed_percent",
            Completion::FirstSuccess => "first_success",
        }
    }

    /// Why the rule cannot hold, if it cannot: a percentage above 100.
    pub(crate) fn invalid(&self) -> Option<String> {
        match self {
            Completion::AtMostFailedPercent(p) if *p > 100 => {
                Some(format!("a percentage of failed items of {p}, above 100"))
            }
            _ => None,
        }
    }

    /// How many failures the rule tolerates out of `total` items.
    fn tolerated(&self, total: usize) -> usize {
        match *self {
            Completion::AllSucceed => 0,
            Completion::AllComplete => total,
            Completion::AtLeast(n) => total.saturating_sub(n),
            Completion::AtMostFailed(n) => n,
            Completion::AtMostFailedPercent(p) => total.saturating_mul(usize::from(p)) / 100,
            Completion::FirstSuccess => total.saturating_sub(1),
        }
    }
}

/// What a rule decided, and the counts it decided on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Whether the rule was met, so the node succeeded.
    pub met: bool,
    /// How many items the list had.
    pub total: usize,
    /// Items that ended with a value, from their task or their fallback.
    pub succeeded: usize,
    /// Items that ended without one.
    pub failed: usize,
    /// Items cancelled once the rule was decided, in flight or never started.
    pub cancelled: usize,
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} of {} succeeded, {} failed, {} cancelled",
            if self.met { "met" } else { "not met" },
            self.succeeded,
            self.total,
            self.failed,
            self.cancelled
        )
    }
}

/// The items of one map node so far, against its rule.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tally {
    rule: Completion,
    total: usize,
    succeeded: usize,
    failed: usize,
}

/// What the tally says after an item ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Go on: start more items, wait for the others.
    Open,
    /// Decided: met or not; stop the items still running.
    Stop { met: bool },
}

impl Tally {
    pub(crate) fn new(rule: Completion, total: usize) -> Self {
        Tally {
            rule,
            total,
            succeeded: 0,
            failed: 0,
        }
    }

    /// The rule.
    pub(crate) fn completion(&self) -> Completion {
        self.rule
    }

    /// Counts one item's end; what the rule says now.
    pub(crate) fn count(&mut self, success: bool) -> Verdict {
        if success {
            self.succeeded += 1;
        } else {
            self.failed += 1;
        }
        if self.failed > self.rule.tolerated(self.total) {
            return Verdict::Stop { met: false };
        }
        if success && self.rule == Completion::FirstSuccess {
            return Verdict::Stop { met: true };
        }
        Verdict::Open
    }

    /// The decision once every item ended or was cancelled; `cancelled` of them were.
    pub(crate) fn decide(&self, cancelled: usize) -> Decision {
        let met = self.failed <= self.rule.tolerated(self.total)
            && match self.rule {
                Completion::FirstSuccess => self.succeeded > 0 || self.total == 0,
                Completion::AtLeast(n) => self.succeeded >= n,
                _ => true,
            };
        Decision {
            met,
            total: self.total,
            succeeded: self.succeeded,
            failed: self.failed,
            cancelled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(rule: Completion, outcomes: &[bool]) -> (Verdict, Decision) {
        let mut tally = Tally::new(rule, outcomes.len());
        let mut verdict = Verdict::Open;
        let mut ended = 0;
        for &ok in outcomes {
            ended += 1;
            verdict = tally.count(ok);
            if verdict != Verdict::Open {
                break;
            }
        }
        (verdict, tally.decide(outcomes.len() - ended))
    }

    #[test]
    fn each_rule_decides_as_documented() {
        let (v, d) = run(Completion::AllSucceed, &[true, false, true]);
        assert_eq!(
            (v, d.met, d.cancelled),
            (Verdict::Stop { met: false }, false, 1)
        );
        let (v, d) = run(Completion::AllComplete, &[false, false]);
        assert_eq!((v, d.met), (Verdict::Open, true));
        let (_, d) = run(Completion::AtLeast(2), &[true, false, true]);
        assert!(d.met);
        let (v, d) = run(Completion::AtLeast(2), &[false, false, true]);
        assert_eq!((v, d.met), (Verdict::Stop { met: false }, false));
        let (_, d) = run(Completion::AtMostFailed(1), &[true, false, true]);
        assert!(d.met);
        let (_, d) = run(
            Completion::AtMostFailedPercent(50),
            &[false, false, true, true],
        );
        assert!(d.met);
        let (v, _) = run(
            Completion::AtMostFailedPercent(25),
            &[false, false, true, true],
        );
        assert_eq!(v, Verdict::Stop { met: false });
        let (v, d) = run(Completion::FirstSuccess, &[false, true, true]);
        assert_eq!(
            (v, d.met, d.cancelled),
            (Verdict::Stop { met: true }, true, 1)
        );
        let (_, d) = run(Completion::FirstSuccess, &[false, false]);
        assert!(!d.met);
        // An empty list meets every rule but "at least n" with n > 0.
        assert!(Tally::new(Completion::FirstSuccess, 0).decide(0).met);
        assert!(!Tally::new(Completion::AtLeast(1), 0).decide(0).met);
        assert!(Completion::AtMostFailedPercent(101).invalid().is_some());
    }
}
