//! How a driver begins a node and ends it. It begins on the fast path when nothing needs the
//! full one, and ends by recording its outcome and moving on to a downstream it made ready.

use std::sync::Arc;
use std::task::Context;

use tokio::time::Instant;

use super::super::graph::NodeKind;
use super::super::paths::first_attempt;
use super::super::task::ctx::{AttemptFuture, CtxCut};
use super::{Driver, State};
use crate::error::{NodeError, UserCode};
use crate::observe::{Event, log, trace};
use crate::onion::{First, FirstAttempt};
use crate::report::{Outcome, Record};

impl<I: Send + Sync + 'static> Driver<I> {
    /// Starts node `id`: the fast path when nothing needs the full one. A router chooses
    /// its branch and begins it: see [`route`](Self::route).
    pub(super) fn begin(&mut self) {
        if self.run.core.prefetch() {
            self.run.graph.prefetch_task(self.id);
        }
        self.begin_node();
    }

    /// [`begin`](Self::begin), without the prefetch. Inlined in `begin` and in `route`,
    /// which begins a router's branch with it: `begin` calls no copy of itself, so that it
    /// stays inlined in the driver's poll.
    #[inline(always)]
    pub(super) fn begin_node(&mut self) {
        let start = self.start();
        let run = &self.run;
        let core = &run.core;
        let id = self.id;
        let graph = &run.graph;
        let span = trace::enabled_node_span(|| core.span(), || graph.meta.name(id));
        let (cut, held) = match run.task_policy(id) {
            // A task node without policies, without a run deadline to cut it and without a span.
            Some(None) if core.deadline().is_none() && span.is_none() => (CtxCut::At(None), None),
            // One with policies and no span: its first attempt's cut and breaker permit, or
            // the full path.
            Some(Some(policy)) if span.is_none() => {
                match first_attempt::prepare(run, policy, start) {
                    Some((cut, held)) => (cut, Some(held)),
                    None => return self.full(tracing::Span::none(), None),
                }
            }
            None if span.is_none() && matches!(graph.kind(id), NodeKind::Router { .. }) => {
                return self.route();
            }
            // A router with a span, or a task node with one, or a plain one with a run
            // deadline.
            _ => return self.full(span.unwrap_or_else(tracing::Span::none), None),
        };
        run.count_started(id);
        if run.observed() {
            run.emit(&Event::NodeStarted {
                run: core.run_id(),
                graph: run.graph_name(),
                node: graph.meta.name(id),
            });
        }
        run.attempt_started_with(id, 1, || {
            first_attempt::cut(run, id, start).map(|u| u.saturating_duration_since(start))
        });
        match (
            run.call_task_into(id, 1, cut, None, &mut self.attempt),
            held,
        ) {
            (Ok(()), held) => self.state = State::Attempt(held),
            (Err(error), None) => self.attempt_failed(start, error),
            (Err(error), Some(held)) => {
                let first =
                    first_attempt::hand_over(run, id, held, FirstAttempt::NotStarted(error));
                self.full(tracing::Span::none(), Some(first));
            }
        }
    }

    /// Node `id` goes on on the full path of `full_path.rs`, boxed; `first` is its first attempt
    /// when the fast path started it.
    pub(super) fn full(&mut self, span: tracing::Span, first: Option<First<AttemptFuture>>) {
        let run = Arc::clone(&self.run);
        let (id, start) = (self.id, self.start());
        self.state = State::Full(Box::pin(async move {
            super::super::paths::full_path::run_node(&run, id, span, start, first).await
        }));
    }

    pub(super) fn attempt_failed(&mut self, start: Instant, error: NodeError) {
        let run = &self.run;
        run.attempt_ended(self.id, 1);
        run.attempt_failed(self.id, 1, &error);
        log::node_ended(run.graph.meta.name(self.id), Outcome::Failed, Some(&error));
        let record = Record::ended(Outcome::Failed, None, Some(start), run.core.now())
            .with_error(Some(Arc::new(error)));
        self.end(record);
    }

    /// Records node `id`'s end and moves to the next node: a downstream it made ready, or
    /// the queue. A branch begun by its router ends its router too: see
    /// [`end_branch`](Self::end_branch).
    pub(super) fn end(&mut self, record: Record) {
        if self.branch {
            return self.end_branch(record);
        }
        self.end_node(record);
    }

    /// [`end`](Self::end), for a node that is no branch begun by its router.
    pub(super) fn end_node(&mut self, record: Record) {
        self.finished += 1;
        let end = record.end;
        // A node without a value makes `finish` skip its downstreams, and their whole
        // subgraph, running their callbacks: not mere bookkeeping.
        let produced = record.value.is_some();
        let released = self.run.finish(self.id, record, &mut self.local);
        // A worker may be idle while this driver keeps nodes: share the older half. A local
        // run does not, since its drivers all run in one task.
        let mut spawned = released.spawned;
        let core = &self.run.core;
        if !self.local.is_empty() && !core.is_local() && core.ready().wants_help(self.run.workers())
        {
            let half = self.local.len().div_ceil(2);
            spawned |= self.run.share(self.local.drain(..half));
        }
        // A driver was spawned for the others: yield once before going on; `schedule` says why.
        self.handoff = spawned;
        match released.next {
            Some(next) => {
                // `next` starts now: when the last of its upstreams ended, if nothing but
                // bookkeeping ran since. Their records are written before they release it, so
                // reading them saves a clock read. Otherwise the clock is read afresh.
                let id = self.id;
                self.start = self.run.ready_at(id, next, end);
                self.id = next;
                self.from_queue = false;
                self.state = State::Begin;
            }
            None => {
                if let Some(next) = self.local.pop_back() {
                    // This driver made `next` ready before `end` was read, so its upstreams
                    // all ended before: `next` starts at `end` too, under the same terms.
                    let quiet = produced && self.run.quiet_after(self.id);
                    self.start = quiet.then_some(end);
                    self.id = next;
                    self.from_queue = false;
                    self.state = State::Begin;
                } else {
                    self.start = produced.then_some(end);
                    self.state = State::Idle;
                }
            }
        }
    }

    /// The run was cancelled while node `id` was in the fast path.
    pub(super) fn cancelled(&mut self, started: bool) {
        let start = started.then(|| self.start());
        self.release_held();
        self.discard();
        self.run.attempt_ended(self.id, 1);
        let record = Record::empty(Outcome::Cancelled, self.run.core.now()).started(start);
        self.end(record);
    }

    /// The current attempt waits: the task's waker goes into the node's slot, where a cancel
    /// wakes it, and the driver suspends. Returns whether it did: `false` means the run was
    /// cancelled meanwhile and the node ended `Cancelled`, and the caller goes on.
    ///
    /// A joined driver registers nothing: a cancel wakes the run's future, which then polls
    /// every driver it holds (see `run/joined.rs`). The cancel sets the run's flag first:
    /// this driver reads the flag below, or is polled after the wake-up and reads it then.
    pub(super) fn wait_for_attempt(&mut self, cx: &mut Context<'_>) -> bool {
        let core = &self.run.core;
        if !self.joined {
            if let Some(slot) = core.slot(self.id) {
                slot.register(cx.waker());
            }
        }
        // `cancel` sets the flag, then wakes: re-check after registering.
        if core.is_cancelled() {
            self.cancelled(true);
            return false;
        }
        self.suspend();
        true
    }

    /// Leaves the current node: the state becomes `Done` and the attempt, if any, is
    /// dropped. Dropping a future runs the task's code: a panic there is caught and logged,
    /// as the node has ended otherwise, so that it cannot unwind through the driver and
    /// leave the run unfinished.
    pub(super) fn discard(&mut self) {
        let state = std::mem::replace(&mut self.state, State::Done);
        let attempt = self.attempt.take();
        let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            drop(attempt);
            drop(state);
        }));
        if let Err(panic) = dropped {
            let error = NodeError::from_panic(UserCode::Task, panic.as_ref());
            let node = self.run.graph.meta.name(self.id);
            tracing::error!(node, %error, "an abandoned attempt panicked while dropped");
        }
    }

    /// The first attempt of a policy node is abandoned: its breaker permit is released.
    pub(super) fn release_held(&mut self) {
        if let State::Attempt(held) = &mut self.state {
            if let Some(held) = held.take() {
                first_attempt::release(&self.run, self.id, held);
            }
        }
    }
}
