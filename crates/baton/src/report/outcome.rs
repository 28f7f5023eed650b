//! `Outcome`: the one way each node of a run ended.

use std::fmt;

/// How a node ended in a run. Every node has exactly one.
///
/// ```
/// use baton_graph::{BoxError, Graph, Outcome};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), BoxError> {
/// let mut g = Graph::<()>::builder();
/// g.node("price").fallback(0_u64).task(|_ctx, ()| async { Err::<u64, BoxError>("503".into()) });
/// let report = g.build()?.run(()).await?;
/// let outcome = report.by_name("price").unwrap().outcome();
/// assert_eq!(outcome, Outcome::Recovered);
/// assert!(outcome.has_value());
/// assert_eq!(outcome.as_str(), "recovered");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum Outcome {
    /// The task produced a value.
    Succeeded,
    /// The inner layers failed and the fallback produced the value; the error is kept.
    Recovered,
    /// The node produced no value: its task failed, timed out, panicked, or was rejected.
    Failed,
    /// An upstream produced no value, so the task never started; the report names that
    /// upstream and the root cause.
    Skipped,
    /// A router's branch that the router did not choose.
    NotTaken,
    /// The run was cancelled before the node ended: through its handle, by dropping it, or
    /// by fail-fast.
    Cancelled,
}

impl Outcome {
    /// The snake_case name, as in JSON: `succeeded`, `recovered`, `failed`, `skipped`,
    /// `not_taken`, `cancelled`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Recovered => "recovered",
            Outcome::Failed => "failed",
            Outcome::Skipped => "skipped",
            Outcome::NotTaken => "not_taken",
            Outcome::Cancelled => "cancelled",
        }
    }

    /// Whether the node has a value, as when `Succeeded` or `Recovered`.
    #[must_use]
    pub fn has_value(self) -> bool {
        matches!(self, Outcome::Succeeded | Outcome::Recovered)
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How many nodes of a run ended with each [`Outcome`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Counts {
    /// Nodes that ended `Succeeded`.
    pub succeeded: usize,
    /// Nodes that ended `Recovered`.
    pub recovered: usize,
    /// Nodes that ended `Failed`.
    pub failed: usize,
    /// Nodes that ended `Skipped`.
    pub skipped: usize,
    /// Nodes that ended `NotTaken`.
    pub not_taken: usize,
    /// Nodes that ended `Cancelled`.
    pub cancelled: usize,
}

impl Counts {
    pub(crate) fn add(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Succeeded => self.succeeded += 1,
            Outcome::Recovered => self.recovered += 1,
            Outcome::Failed => self.failed += 1,
            Outcome::Skipped => self.skipped += 1,
            Outcome::NotTaken => self.not_taken += 1,
            Outcome::Cancelled => self.cancelled += 1,
        }
    }

    /// Nodes that produced no value although they were meant to run: failed, skipped or
    /// cancelled. Branches not taken are excluded.
    #[must_use]
    pub fn without_value(&self) -> usize {
        self.failed + self.skipped + self.cancelled
    }

    /// All nodes counted.
    #[must_use]
    pub fn total(&self) -> usize {
        self.succeeded
            + self.recovered
            + self.failed
            + self.skipped
            + self.not_taken
            + self.cancelled
    }
}

impl fmt::Display for Counts {
    /// `5 succeeded, 1 failed, 2 skipped`: only the outcomes that occurred.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts = [
            (self.succeeded, "succeeded"),
            (self.recovered, "recovered"),
            (self.failed, "failed"),
            (self.skipped, "skipped"),
            (self.not_taken, "not taken"),
            (self.cancelled, "cancelled"),
        ];
        let mut first = true;
        for (n, label) in parts {
            if n > 0 {
                if !first {
                    f.write_str(", ")?;
                }
                write!(f, "{n} {label}")?;
                first = false;
            }
        }
        if first {
            f.write_str("no nodes")?;
        }
        Ok(())
    }
}
