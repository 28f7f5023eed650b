//! How a node's end spreads. Its downstreams are released: one is returned to run inline,
//! the others are queued. For a node without a value, its pending downstreams are skipped.
//! A router's branches not taken end `NotTaken`.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::time::Instant;

use super::node_state::{PassOver, Release};
use super::options::FailureMode;
use super::state::RunState;
use crate::engine::graph::{NodeKind, neighbours};
use crate::error::CancelReason;
use crate::report::{Outcome, Record};

/// What finishing a node released: a downstream for the caller to run inline, and whether
/// a driver was spawned for the others; see [`RunState::schedule`].
#[derive(Debug, Clone, Copy)]
pub(in crate::engine) struct Released {
    pub(in crate::engine) next: Option<u32>,
    pub(in crate::engine) spawned: bool,
}

/// The most downstreams a node of a local run may release, one after the other on its
/// thread, with its end still "now" for the node its driver starts next.
const LOCAL_QUIET_MAX: usize = 16;

impl<I: Send + Sync + 'static> RunState<I> {
    /// Finalizes a node that was pending, from `PENDING` to `DONE`, if nobody else did. Returns
    /// whether this call did it.
    pub(in crate::engine) fn pass_over(&self, id: u32, record: Record) -> bool {
        let Some(node) = self.core.node(id) else {
            return false;
        };
        match node.pass_over() {
            PassOver::PassedOver => {
                self.record(id, record, false);
                true
            }
            PassOver::Taken => false,
        }
    }

    /// Marks `first` and everything downstream of it that is still pending `Skipped`;
    /// `because` is the upstream of `first` that produced no value. A skipped router's
    /// branches end `NotTaken`.
    fn skip(&self, first: u32, because: u32) {
        self.pass_over_from(first, because, Outcome::Skipped);
    }

    /// Ends `first` and everything downstream of it that is still pending with `outcome`
    /// `Skipped`, or `NotTaken` below a branch that was not taken.
    fn pass_over_from(&self, first: u32, because: u32, outcome: Outcome) {
        let core = &self.core;
        let meta = &self.graph.meta;
        let now = core.now();
        // `because` produced no value itself: it is the root cause of everything skipped here.
        let root = because;
        let mut stack = vec![(first, because)];
        let mut ended = 0;
        while let Some((id, because)) = stack.pop() {
            let record = Record::empty(outcome, now).with_cause(because, root);
            if !self.pass_over(id, record) {
                continue;
            }
            ended += 1;
            ended += self.not_taken_except(id, None, now);
            stack.extend(meta.downstreams(id).iter().map(|&d| (d, id)));
        }
        self.release(ended);
    }

    /// Marks the branches of router `id` other than `chosen`, and whatever depends on them,
    /// `NotTaken`. Returns how many branches it marked, for the caller to release.
    pub(in crate::engine) fn not_taken_except(
        &self,
        id: u32,
        chosen: Option<u32>,
        now: Instant,
    ) -> usize {
        let NodeKind::Router { branches } = self.graph.kind(id) else {
            return 0;
        };
        let mut marked = 0;
        for &(_, b) in branches.iter().filter(|(_, b)| Some(*b) != chosen) {
            if self.pass_over(b, Record::empty(Outcome::NotTaken, now)) {
                marked += 1;
                // What depends on a branch not taken is not taken either.
                for &d in self.graph.meta.downstreams(b) {
                    self.pass_over_from(d, b, Outcome::NotTaken);
                }
            }
        }
        marked
    }

    /// Records how node `id`, run by a driver, ended and releases its downstreams: one
    /// downstream that became ready is returned for the caller to run inline, the others are
    /// queued. Does not release the node from `live`: the driver does, with itself, when it
    /// ends, in one atomic operation for a whole chain.
    ///
    /// The others are queued for all. On a one-worker runtime, or in an inline run while its
    /// future drives it, they go on `local` instead, the driver's own stack; see
    /// `ready/mod.rs`.
    pub(in crate::engine) fn finish(
        self: &Arc<Self>,
        id: u32,
        record: Record,
        local: &mut VecDeque<u32>,
    ) -> Released {
        self.finish_inner(id, record, true, Some(local))
    }

    /// [`finish`](Self::finish) for a router's branch: fail-fast is left to the router, and
    /// the branch is released from `live` at once.
    pub(in crate::engine) fn finish_branch(self: &Arc<Self>, id: u32, record: Record) -> Released {
        let released = self.finish_inner(id, record, false, None);
        self.release(1);
        released
    }

    fn finish_inner(
        self: &Arc<Self>,
        id: u32,
        record: Record,
        fail_fast: bool,
        mut local: Option<&mut VecDeque<u32>>,
    ) -> Released {
        let produced = record.value.is_some();
        let outcome = record.outcome;
        let core = &self.core;
        let downstreams = self.graph.meta.downstreams(id);
        if core.prefetch() {
            // Their counters' misses overlap each other and the record's writes.
            self.prefetch_counters(id, downstreams);
        }
        self.record(id, record, true);
        let mut next = None;
        let mut spawned = false;
        // A driver keeps extra ready nodes for itself only on a one-worker runtime, where no
        // other worker could take them, as `ready/mod.rs` says; an inline run counts one. It
        // always keeps them while an inline run is local: every driver is polled in one task.
        let workers = self.workers();
        // A local run: this thread alone counts its nodes down (`NodeState::release_upstream`).
        let alone = core.is_local();
        let keep = alone || (workers == 1 && !core.ready().wants_help(workers));
        for &d in downstreams {
            if !produced && outcome != Outcome::Cancelled {
                self.skip(d, id);
            }
            let Some(ds) = core.node(d) else { continue };
            if ds.release_upstream(alone) == Release::Ready {
                if core.prefetch() && !neighbours(d, id) {
                    self.prefetch_node(d);
                }
                match (next, local.as_deref_mut()) {
                    (None, _) => next = Some(d),
                    (Some(_), Some(local)) if keep => local.push_back(d),
                    (Some(_), _) => spawned |= self.schedule(d),
                }
            }
        }
        if fail_fast && outcome == Outcome::Failed && core.mode() == FailureMode::FailFast {
            self.cancel(CancelReason::FailFast {
                node: self.graph.meta.name(id).to_owned(),
            });
        }
        Released { next, spawned }
    }

    /// When `next`, released by its upstream `id` that ended at `end`, starts if run at once:
    /// the latest end among its upstreams, when nothing but the scheduler's own bookkeeping
    /// ran between those ends and now. That is `end` when `id` is its one upstream, or when
    /// the run is local: one thread then ended its upstreams one after the other, each
    /// reading the clock as it ended. `None`, to read the clock, when user code such as
    /// callbacks or observers may have run in between; when `id` has more downstreams than
    /// [`quiet_after`](Self::quiet_after) allows, as queuing the others takes time; or, in
    /// a run spread over workers, past two upstreams, as reading records at scattered
    /// places costs more than the clock.
    pub(in crate::engine) fn ready_at(&self, id: u32, next: u32, end: Instant) -> Option<Instant> {
        if !self.quiet_after(id) {
            return None;
        }
        let graph = &self.graph;
        match *graph.meta.upstreams(next) {
            [_] => Some(end),
            _ if self.core.is_local() => Some(end),
            [a, b] => {
                let other = if a == id { b } else { a };
                if graph.callbacks(other).is_some() || graph.meta.downstreams(other).len() > 2 {
                    return None;
                }
                let other_end = self.core.slot(other)?.record()?.end;
                Some(end.max(other_end))
            }
            _ => None,
        }
    }

    /// Whether finishing node `id`, which produced a value, runs nothing but the scheduler's
    /// bookkeeping, and little of it: no observer, no callbacks of `id`, at most two
    /// downstreams to release, or at most [`LOCAL_QUIET_MAX`] in a local run, whose driver
    /// pushes them on its own stack and spawns no driver for them. Then the node's end is
    /// still "now" for whatever its driver starts next. A node without a value is not
    /// asked: it skips its downstreams, running their callbacks.
    pub(in crate::engine) fn quiet_after(&self, id: u32) -> bool {
        let graph = &self.graph;
        if self.observed() || graph.callbacks(id).is_some() {
            return false;
        }
        let downstreams = graph.meta.downstreams(id).len();
        downstreams <= 2 || (downstreams <= LOCAL_QUIET_MAX && self.core.is_local())
    }

    /// Whether node `id` has no upstreams: ready from the run's start.
    pub(in crate::engine) fn is_root(&self, id: u32) -> bool {
        self.graph.meta.upstreams(id).is_empty()
    }
}
