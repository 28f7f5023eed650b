//! What each hop records about each request it serves: the budget it started with, when
//! it stopped, and how each of its nodes ended.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use baton_graph::{Node, NodeReport, Report, deadline::DownstreamDeadlineExceeded};
use tokio::time::Instant;

/// How one node of a hop ended, from the hop's report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeEnd {
    /// The node.
    pub(crate) node: String,
    /// Its outcome (`succeeded`, `failed`, `skipped`, …).
    pub(crate) outcome: String,
    /// Its error's kind, and the kind under any retry (`gave_up` → `timeout`); `None`
    /// when it succeeded.
    pub(crate) error: Option<String>,
    /// Whether its error is a downstream's "deadline expired" answer.
    pub(crate) downstream_expired: bool,
    /// How many attempts it made.
    pub(crate) attempts: u32,
}

impl NodeEnd {
    fn of(node: &NodeReport<'_>) -> NodeEnd {
        let error = node.error();
        NodeEnd {
            node: node.name().to_owned(),
            outcome: node.outcome().as_str().to_owned(),
            error: error.map(|e| match e.root_cause().kind() {
                kind if kind == e.kind() => kind.to_owned(),
                root => format!("{} → {root}", e.kind()),
            }),
            downstream_expired: error
                .and_then(|e| e.task_error())
                .is_some_and(|e| DownstreamDeadlineExceeded::is_in(e)),
            attempts: node.attempts(),
        }
    }
}

/// What one hop reports about one request.
#[derive(Debug, Clone)]
pub(crate) struct HopReport {
    /// `A`, `B` or `C`.
    pub(crate) hop: &'static str,
    /// The budget the hop's first node started with; `None` without a deadline.
    pub(crate) budget: Option<Duration>,
    /// When the hop's run ended.
    pub(crate) stopped: Instant,
    /// Each node, in the graph's order.
    pub(crate) nodes: Vec<NodeEnd>,
    /// How many times C's `work` task was called (0 at A and B).
    pub(crate) work_started: u32,
}

/// The reports of every hop, shared by the three services.
#[derive(Debug, Clone, Default)]
pub(crate) struct Hops {
    reports: Arc<Mutex<Vec<HopReport>>>,
    work_started: Arc<AtomicU32>,
}

impl Hops {
    /// The reports so far, in the order the hops stopped; empties the log.
    pub(crate) fn take(&self) -> Vec<HopReport> {
        std::mem::take(&mut *self.reports.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Counts a call of C's `work` task.
    pub(crate) fn count_work_start(&self) {
        self.work_started.fetch_add(1, Ordering::Relaxed);
    }

    /// Records the run of hop `hop` that `report` tells, whose `local` node's value is the
    /// budget the hop started with. At C, it also takes the count of `work` calls.
    pub(crate) fn record(&self, hop: &'static str, report: &Report, local: Node<Option<Duration>>) {
        let work_started = match hop {
            "C" => self.work_started.swap(0, Ordering::Relaxed),
            _ => 0,
        };
        let report = HopReport {
            hop,
            budget: report.get(local).copied().flatten(),
            stopped: Instant::now(),
            nodes: report.nodes().map(|n| NodeEnd::of(&n)).collect(),
            work_started,
        };
        self.reports
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(report);
    }
}
