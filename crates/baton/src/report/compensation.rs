//! The compensation section of a report, [`Compensations`]: what ran to undo the nodes
//! that succeeded in a run that failed.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{AttemptReport, Outcome, Report};
use crate::error::NodeError;

/// What the compensations of one run did.
#[derive(Debug, Default)]
pub(crate) struct CompensationRecord {
    /// One per compensation that ran, in the order they ended.
    pub(crate) entries: Vec<CompensationEntry>,
    /// Nodes that succeeded and have no compensation.
    pub(crate) not_compensated: Vec<u32>,
    /// Compensations that could not run, for want of a tokio runtime to run them on.
    pub(crate) not_run: Vec<u32>,
}

/// One compensation's end.
#[derive(Debug)]
pub(crate) struct CompensationEntry {
    pub(crate) node: u32,
    /// `Succeeded` or `Failed`.
    pub(crate) outcome: Outcome,
    pub(crate) attempts: u32,
    /// From the run's start.
    pub(crate) start: Duration,
    pub(crate) end: Duration,
    pub(crate) error: Option<Arc<NodeError>>,
    pub(crate) attempt_log: Vec<AttemptReport>,
}

impl CompensationRecord {
    /// Whether every compensation that should have run ran and succeeded.
    pub(crate) fn complete(&self) -> bool {
        self.not_run.is_empty() && self.entries.iter().all(|e| e.outcome == Outcome::Succeeded)
    }
}

impl Report {
    /// The run's compensations, when they ran: the run failed by the graph's trigger, set
    /// with [`GraphBuilder::compensate_when`](crate::GraphBuilder::compensate_when), and
    /// some node that succeeded has a compensation, set with
    /// [`NodeBuilder::compensate`](crate::NodeBuilder::compensate). `None` otherwise.
    #[must_use]
    pub fn compensation(&self) -> Option<Compensations> {
        let record = self.run.compensation()?;
        Some(Compensations {
            report: self.clone(),
            record,
        })
    }
}

/// The compensation section of a [`Report`], from [`Report::compensation`].
#[derive(Clone)]
pub struct Compensations {
    report: Report,
    record: Arc<CompensationRecord>,
}

impl Compensations {
    /// Whether every compensation succeeded.
    #[must_use]
    pub fn complete(&self) -> bool {
        self.record.complete()
    }

    /// Each compensation that ran, in the order they ended.
    #[must_use]
    pub fn iter(&self) -> impl ExactSizeIterator<Item = CompensationReport<'_>> {
        self.record
            .entries
            .iter()
            .map(move |entry| CompensationReport {
                name: self.report.run.name(entry.node),
                entry,
            })
    }

    /// The compensation of the node called `name`, if it ran.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<CompensationReport<'_>> {
        self.iter().find(|c| c.node() == name)
    }

    /// The nodes that succeeded and have no compensation, in declaration order.
    #[must_use]
    pub fn not_compensated(&self) -> impl ExactSizeIterator<Item = &str> {
        self.record
            .not_compensated
            .iter()
            .map(move |&id| self.report.run.name(id))
    }

    /// The compensations that could not run: the run ended where no tokio runtime was
    /// left to run them on.
    #[must_use]
    pub fn not_run(&self) -> impl ExactSizeIterator<Item = &str> {
        self.record
            .not_run
            .iter()
            .map(move |&id| self.report.run.name(id))
    }
}

impl fmt::Debug for Compensations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// One compensation that ran: its node, outcome, attempts, timing and error.
#[derive(Clone, Copy)]
pub struct CompensationReport<'r> {
    name: &'r str,
    entry: &'r CompensationEntry,
}

impl<'r> CompensationReport<'r> {
    /// The node it undid.
    #[must_use]
    pub fn node(&self) -> &'r str {
        self.name
    }

    /// `Succeeded` or `Failed`.
    #[must_use]
    pub fn outcome(&self) -> Outcome {
        self.entry.outcome
    }

    /// How many attempts started.
    #[must_use]
    pub fn attempts(&self) -> u32 {
        self.entry.attempts
    }

    /// When it started, from the run's start.
    #[must_use]
    pub fn start(&self) -> Duration {
        self.entry.start
    }

    /// When it ended, from the run's start.
    #[must_use]
    pub fn end(&self) -> Duration {
        self.entry.end
    }

    /// Why it failed.
    #[must_use]
    pub fn error(&self) -> Option<&'r NodeError> {
        self.entry.error.as_deref()
    }

    /// Each attempt, for a compensation that retried or failed.
    #[must_use]
    pub fn attempt_log(&self) -> &'r [AttemptReport] {
        &self.entry.attempt_log
    }
}

impl fmt::Debug for CompensationReport<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompensationReport")
            .field("node", &self.node())
            .field("outcome", &self.outcome())
            .field("attempts", &self.attempts())
            .field("error", &self.error())
            .finish()
    }
}
