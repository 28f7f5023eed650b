//! A router on the driver's own path, when it has no `tracing` span. The driver picks the
//! branch, passes over the others, and begins the chosen one in the router's place, as a
//! node of its own: on the fast path like any task node, or on the full path when its
//! policies need it. When the branch ends, the driver records it, then ends the router
//! with the branch's value and goes on from the router. So a routed call costs what its
//! branch costs, with no boxed future for the router.
//!
//! The branch starts when its router starts, and the router ends when its branch ends: the
//! selector's time counts in both. Branches not taken end at the router's start. A router
//! with a span takes the full path (`paths/full_path.rs`), under the same rules.

use std::sync::Arc;

use super::super::graph::NodeKind;
use super::super::paths::full_path;
use super::super::run::node_state::Claim;
use super::Driver;
use crate::observe::log;
use crate::report::{Outcome, Record};

impl<I: Send + Sync + 'static> Driver<I> {
    /// Starts router `self.id`: chooses its branch and begins it, or ends the router when
    /// the run was cancelled, its selector failed or a cancel took the branch first. As
    /// for any node, no selector and no task runs once the run is cancelled.
    #[inline(never)]
    pub(super) fn route(&mut self) {
        let start = self.start();
        let (run, id) = (&self.run, self.id);
        full_path::started(run, id);
        if run.core.is_cancelled() {
            // The cancel's sweep ends its branches `Cancelled`, as every node still pending.
            self.end(Record::empty(Outcome::Cancelled, run.core.now()));
            return;
        }
        let branch = match full_path::choose(run, id) {
            Ok(branch) => branch,
            Err(error) => {
                run.release(run.not_taken_except(id, None, start));
                log::node_ended(run.graph.meta.name(id), Outcome::Failed, Some(&error));
                let end = run.core.now();
                let record = Record::ended(Outcome::Failed, None, Some(start), end)
                    .with_error(Some(Arc::new(error)));
                self.end(record);
                return;
            }
        };
        run.release(run.not_taken_except(id, Some(branch), start));
        let Some(node) = run.core.node(branch) else {
            unreachable!("branch {branch} is in its graph")
        };
        if node.claim() == Claim::Taken {
            // Swept by a cancellation between the choice and now.
            let record = Record::empty(Outcome::Cancelled, run.core.now()).started(Some(start));
            self.end(record);
            return;
        }
        self.id = branch;
        self.branch = true;
        if self.run.core.is_cancelled() {
            self.cancelled(false);
        } else {
            self.begin_node();
        }
    }

    /// Branch `self.id`, begun by [`route`](Self::route), ended with `record`: it is
    /// recorded, and the driver ends its router. Out of line: `end` stays small for the
    /// nodes that are no branch.
    #[inline(never)]
    pub(super) fn end_branch(&mut self, record: Record) {
        self.branch = false;
        let start = self.start();
        let (run, branch) = (&self.run, self.id);
        let &NodeKind::Branch { router } = run.graph.kind(branch) else {
            unreachable!("node {branch} was begun as a branch")
        };
        let end = record.end;
        let (record, spawned) = full_path::branch_ended(run, router, branch, record, start, end);
        let error = record.error().map(|e| &**e);
        log::node_ended(run.graph.meta.name(router), record.outcome, error);
        self.id = router;
        self.end_node(record);
        // A driver spawned for the nodes the branch made ready: yield once, as after a
        // node that spawned one.
        self.handoff |= spawned;
    }

    /// The router whose branch `self.id` is, when the driver runs a branch for its router.
    pub(super) fn router(&self) -> Option<u32> {
        match self.run.graph.kind(self.id) {
            &NodeKind::Branch { router } if self.branch => Some(router),
            _ => {
                debug_assert!(!self.branch, "node {} was begun as a branch", self.id);
                None
            }
        }
    }
}
