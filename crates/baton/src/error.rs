//! Error types: what `build()` rejects, why a node produced no value, and why a run is an
//! error.
//!
//! Every error names its culprit (the node, the upstream, the cycle path) so that the
//! message alone tells the reader where to look.

use std::fmt;

use crate::report::Report;

/// A boxed error, as tasks return it.
///
/// A task may return any `E: Into<BoxError>`: every `std::error::Error + Send + Sync`,
/// `String` and `&'static str` qualify, and so does `anyhow::Error` through its `Into`.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A graph definition that [`GraphBuilder::build`](crate::GraphBuilder::build) rejected.
///
/// `build()` reports the first problem in declaration order. Nothing runs until every
/// problem is fixed, so a bad graph never hangs or panics at run time (DESIGN rule 13;
/// seed 002 §18, "entry checks").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// Two nodes were given the same name.
    #[error("duplicate node name `{name}`: every node of a graph needs its own name")]
    DuplicateName {
        /// The name used twice.
        name: String,
    },
    /// A node names an upstream that no node of the graph has.
    #[error("node `{node}` names upstream `{upstream}`, which is not a node of this graph")]
    UnknownUpstream {
        /// The node that declared the upstream.
        node: String,
        /// The missing upstream's name.
        upstream: String,
    },
    /// A node was given a [`Node`](crate::Node) handle that another builder returned.
    #[error(
        "node `{node}` was given the handle of `{upstream}`, which belongs to another graph \
         (handles only work in the builder that returned them)"
    )]
    ForeignHandle {
        /// The node that declared the upstream.
        node: String,
        /// The foreign node's name, as its own builder knows it (`#index` when unknown).
        upstream: String,
    },
    /// The dependencies form a cycle, so no node on it could ever start.
    ///
    /// `path` lists the cycle in flow direction (upstream before downstream) and repeats its
    /// first node at the end: `["a", "b", "c", "a"]` prints as `a -> b -> c -> a`.
    #[error("dependency cycle: {}", path.join(" -> "))]
    Cycle {
        /// The node names along the cycle, first node repeated at the end.
        path: Vec<String>,
    },
    /// A name-based upstream produces a different type than the node expects.
    #[error(
        "node `{node}` expects upstream `{upstream}` to produce `{expected}`, but it produces `{found}`"
    )]
    TypeMismatch {
        /// The node that declared the upstream.
        node: String,
        /// The upstream whose type differs.
        upstream: String,
        /// The type the node's task expects.
        expected: &'static str,
        /// The type the upstream produces.
        found: &'static str,
    },
}

/// Why a node produced no value (or, for a `Recovered` node, what the fallback recovered
/// from).
///
/// The task's own error is kept as it was returned ([`NodeError::Task`]), so its
/// [`source`](std::error::Error::source) chain is intact and it can be downcast.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// The task returned an error.
    #[error(transparent)]
    Task(BoxError),
    /// The task panicked; the panic was caught and the run went on (DESIGN rule 15).
    #[error("task panicked: {message}")]
    Panicked {
        /// The panic payload, when it was a string; `"<non-string panic payload>"` otherwise.
        message: String,
    },
    /// An internal invariant did not hold. This is a bug in baton; please report it with the
    /// message.
    #[error("internal error in baton: {message}")]
    Internal {
        /// What went wrong.
        message: &'static str,
    },
}

impl NodeError {
    /// The task's own error, when the task returned one.
    ///
    /// Use it to downcast to your error type:
    /// `err.task_error().and_then(|e| e.downcast_ref::<MyError>())`.
    #[must_use]
    pub fn task_error(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        match self {
            NodeError::Task(e) => Some(e.as_ref()),
            _ => None,
        }
    }

    pub(crate) fn from_panic(payload: &(dyn std::any::Any + Send)) -> Self {
        let message = if let Some(s) = payload.downcast_ref::<&'static str>() {
            (*s).to_owned()
        } else if let Some(s) = payload.downcast_ref::<String>() {
            s.clone()
        } else {
            "<non-string panic payload>".to_owned()
        };
        NodeError::Panicked { message }
    }
}

/// Why a run was cancelled.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelReason {
    /// [`RunCanceller::cancel`](crate::RunCanceller::cancel) was called.
    Requested,
    /// The run's future was dropped before it finished.
    Dropped,
    /// [`FailureMode::FailFast`](crate::FailureMode::FailFast): the named node failed first.
    FailFast {
        /// The node whose failure cancelled the run.
        node: String,
    },
}

impl fmt::Display for CancelReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CancelReason::Requested => f.write_str("cancelled through its handle"),
            CancelReason::Dropped => f.write_str("run future dropped"),
            CancelReason::FailFast { node } => write!(f, "fail-fast after `{node}` failed"),
        }
    }
}

/// A run that did not end cleanly, or could not start.
///
/// Every variant that ran carries the full [`Report`]: nothing a run produced is lost
/// because the run is an error (the seed's `FAIL_ALL` dropped the partial results; we keep
/// them).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// [`FailureMode::FailAll`](crate::FailureMode::FailAll) or
    /// [`FailureMode::FailFast`](crate::FailureMode::FailFast): at least one node did not
    /// produce a value. `node` is the first that failed.
    #[error(
        "run failed: node `{node}` failed ({failed} failed, {skipped} skipped, {cancelled} cancelled)"
    )]
    Failed {
        /// The first node (in end-time order) that failed.
        node: String,
        /// How many nodes ended `Failed`.
        failed: usize,
        /// How many nodes ended `Skipped`.
        skipped: usize,
        /// How many nodes ended `Cancelled`.
        cancelled: usize,
        /// The run's report.
        report: Box<Report>,
    },
    /// The run was cancelled before every node ended; nodes that had not ended are
    /// `Cancelled` in the report.
    #[error("run cancelled: {reason}")]
    Cancelled {
        /// Why.
        reason: CancelReason,
        /// The run's report.
        report: Box<Report>,
    },
    /// The run was polled outside a tokio runtime, so it could not spawn its nodes.
    #[error("no tokio runtime: a baton run must be awaited inside a tokio runtime")]
    NoRuntime,
}

impl RunError {
    /// The run's report, when the run started.
    #[must_use]
    pub fn report(&self) -> Option<&Report> {
        match self {
            RunError::Failed { report, .. } | RunError::Cancelled { report, .. } => Some(report),
            RunError::NoRuntime => None,
        }
    }

    /// Takes the run's report out of the error, when the run started.
    #[must_use]
    pub fn into_report(self) -> Option<Report> {
        match self {
            RunError::Failed { report, .. } | RunError::Cancelled { report, .. } => Some(*report),
            RunError::NoRuntime => None,
        }
    }
}
