//! What a node ended with: its [`Record`] as the scheduler writes it, and the [`Settled`]
//! form the run keeps and the report reads.

use std::sync::Arc;

use tokio::time::Instant;

use super::{AttemptReport, Outcome};
use crate::error::NodeError;
use crate::util::value::Value;

/// What a node ended with. What only nodes that did not simply succeed have is boxed
/// apart: an error, a skip's cause, an attempt log. So the record a million succeeding
/// nodes write stays small.
#[derive(Debug)]
pub(crate) struct Record {
    pub(crate) outcome: Outcome,
    /// For a router that ran a branch: that branch; else [`NO_BRANCH`]. Kept beside the
    /// outcome, in room the times' alignment leaves, so a router's record boxes nothing.
    branch: u32,
    /// In transit only: `record()` moves it to the run's value array.
    pub(crate) value: Option<Value>,
    /// When it started; `None` if it never started.
    pub(crate) start: Option<Instant>,
    /// When it ended.
    pub(crate) end: Instant,
    cold: Option<Box<Cold>>,
}

#[derive(Debug, Default)]
struct Cold {
    /// Why it has no value; for `Recovered`, what the fallback recovered from.
    error: Option<Arc<NodeError>>,
    /// For `Skipped`: the upstream that produced no value.
    because: Option<u32>,
    /// For `Skipped`: the first node up the chain of skips that did not skip. Its failure or
    /// cancellation is the root cause. Kept so that reading it is O(1).
    root: Option<u32>,
    /// One entry per attempt, for nodes that retried or failed; empty otherwise.
    attempt_log: Vec<AttemptReport>,
    /// Its shared circuit breaker judged it alone.
    breaker_local: bool,
}

/// [`Record::branch`] and [`Settled::branch`] of a node that is no router, or a router that
/// ran no branch.
const NO_BRANCH: u32 = u32::MAX;

impl Record {
    pub(crate) const fn empty(outcome: Outcome, end: Instant) -> Self {
        Record {
            outcome,
            branch: NO_BRANCH,
            value: None,
            start: None,
            end,
            cold: None,
        }
    }

    /// A node that ended `outcome` at `end` with `value`, having started at `start`.
    pub(crate) fn ended(
        outcome: Outcome,
        value: Option<Value>,
        start: Option<Instant>,
        end: Instant,
    ) -> Self {
        Record {
            outcome,
            branch: NO_BRANCH,
            value,
            start,
            end,
            cold: None,
        }
    }

    fn cold(&mut self) -> &mut Cold {
        self.cold.get_or_insert_with(Box::default)
    }

    /// Sets the start.
    pub(crate) fn started(mut self, start: Option<Instant>) -> Self {
        self.start = start;
        self
    }

    /// Sets the error. Nothing is stored for `None`.
    pub(crate) fn with_error(mut self, error: Option<Arc<NodeError>>) -> Self {
        if error.is_some() {
            self.cold().error = error;
        }
        self
    }

    /// Sets a skip's cause: the upstream without a value, and the root cause.
    pub(crate) fn with_cause(mut self, because: u32, root: u32) -> Self {
        let cold = self.cold();
        cold.because = Some(because);
        cold.root = Some(root);
        self
    }

    /// Sets the attempt log. Nothing is stored when it is empty.
    pub(crate) fn with_log(mut self, log: Vec<AttemptReport>) -> Self {
        if !log.is_empty() {
            self.cold().attempt_log = log;
        }
        self
    }

    /// Sets the branch a router ran.
    pub(crate) fn with_branch(mut self, branch: u32) -> Self {
        debug_assert_ne!(branch, NO_BRANCH, "a graph's node ids are below u32::MAX");
        self.branch = branch;
        self
    }

    /// Marks it judged alone by its shared breaker. Nothing is stored for `false`.
    pub(crate) fn with_breaker_local(mut self, judged_alone: bool) -> Self {
        if judged_alone {
            self.cold().breaker_local = true;
        }
        self
    }

    pub(crate) fn error(&self) -> Option<&Arc<NodeError>> {
        self.cold.as_ref()?.error.as_ref()
    }

    pub(crate) fn attempt_log(&self) -> &[AttemptReport] {
        self.cold.as_ref().map_or(&[], |c| &c.attempt_log)
    }

    /// The record as the node's slot keeps it, and the value, which goes to the run's value
    /// array.
    pub(crate) fn settle(self) -> (Settled, Option<Value>) {
        let settled = Settled {
            outcome: self.outcome,
            branch: self.branch,
            start: self.start,
            end: self.end,
            cold: self.cold,
        };
        (settled, self.value)
    }
}

/// A node's record as its slot keeps it, without the value, which the run's value array
/// has. It is 48 bytes, where the [`Record`] in transit is 72. Its times stay `Instant`s:
/// converting them to offsets from the run's start when writing would cost more than the
/// 16 bytes it saves.
#[derive(Debug)]
pub(crate) struct Settled {
    pub(crate) outcome: Outcome,
    /// As [`Record`]'s.
    branch: u32,
    /// When it started; `None` if it never started.
    pub(crate) start: Option<Instant>,
    /// When it ended.
    pub(crate) end: Instant,
    cold: Option<Box<Cold>>,
}

impl Settled {
    /// A record of `outcome`, ended at `end` and never started.
    pub(crate) const fn empty(outcome: Outcome, end: Instant) -> Self {
        Settled {
            outcome,
            branch: NO_BRANCH,
            start: None,
            end,
            cold: None,
        }
    }

    pub(crate) fn error(&self) -> Option<&Arc<NodeError>> {
        self.cold.as_ref()?.error.as_ref()
    }

    pub(crate) fn because(&self) -> Option<u32> {
        self.cold.as_ref()?.because
    }

    pub(crate) fn root(&self) -> Option<u32> {
        self.cold.as_ref()?.root
    }

    pub(crate) fn attempt_log(&self) -> &[AttemptReport] {
        self.cold.as_ref().map_or(&[], |c| &c.attempt_log)
    }

    pub(crate) fn breaker_local(&self) -> bool {
        self.cold.as_ref().is_some_and(|c| c.breaker_local)
    }

    pub(crate) fn branch(&self) -> Option<u32> {
        (self.branch != NO_BRANCH).then_some(self.branch)
    }
}
