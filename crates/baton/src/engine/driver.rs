//! The driver: the tokio task that runs nodes. It takes a node from the run's ready queue
//! (`ready.rs`), runs it, records its outcome, carries on with one downstream it made ready
//! (Taskflow's continuation: a chain runs in one task, not one spawn per node), queues the
//! others, and goes back to the queue until it is empty. A node whose attempt waits
//! (`Pending`) keeps its driver, which then stops draining the queue and spawns a
//! replacement if nodes are waiting there.
//!
//! In an inline run (`StartMode::Inline`, the default), or on a runtime where one thread
//! runs every task (taken to be so on current-thread, or one worker awaited from a task:
//! `RunState::start`), a run's first driver is no task but part of the run's future
//! (`embedded`): it runs nodes in the task that awaits the run, spending
//! that task's coop budget as a spawned driver would (and at most [`INLINE_MAX`] of them),
//! and never waits: a node whose attempt returns `Pending` moves, as it is, to
//! a driver spawned for it (the embedded one goes on with its stack and the queue), and
//! where a spawned driver would yield, the embedded one hands its node and stack to spawned
//! drivers and ends. So a graph of nodes that end at once costs no spawn at all, and a run
//! whose future is not polled still makes progress.
//!
//! It is a hand-written future, fifteen words wide (its attempt box among them), because
//! every spawn copies it into a new tokio task: nodes without policies, routers or an
//! interested `tracing` subscriber run on the fast path here (one boxed attempt future,
//! polled under `catch_unwind`; the driver writes its next node's attempt into the same box
//! when the two futures have the same layout, so a run of such nodes allocates one box per
//! driver, not one per node); nodes with policies start their first attempt on a fast path
//! of their own (`guarded.rs`), waited for here too when it returns `Pending` (under the
//! driver's timer, kept from one such attempt to the next), and take the full path of
//! `exec.rs`, boxed, only when that attempt fails, panics or reaches its cut; routers and
//! traced nodes take the full path from the start.

use std::collections::VecDeque;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::time::{Instant, Sleep};

use super::guarded::{self, Held};
use super::ready::Pop;
use super::state::RunState;
use super::task::{AttemptFuture, CtxCut};
use crate::error::NodeError;
use crate::observe::{Event, trace};
use crate::onion::{First, FirstAttempt};
use crate::report::{Outcome, Record};

enum State {
    /// Looking for a node in the ready queue.
    Idle,
    /// Node `id` is `RUNNING` and nothing of it has run yet.
    Begin,
    /// Fast path: its first attempt is running, in the driver's `attempt` box; with what it
    /// holds for the node's policies, if it has any (`guarded.rs`).
    Attempt(Option<Held>),
    /// Full path (policies, routers, spans); with the node's record, whether it spawned a
    /// driver for nodes it queued (a router's branch made them ready).
    Full(Pin<Box<dyn Future<Output = (Record, bool)> + Send>>),
    /// The driver has nothing left to run.
    Done,
}

/// Runs nodes from the ready queue (or a given first node, already `RUNNING`), each
/// followed, while finishing a node makes a downstream ready, by one such downstream.
/// Counted in the run's `live` by whoever spawned it; releases itself when it ends or is
/// dropped.
pub(crate) struct Driver<I: Send + Sync + 'static> {
    run: Arc<RunState<I>>,
    id: u32,
    /// Counted in the queue's active drivers: it looks at the queue again before it ends
    /// or waits.
    active: bool,
    /// Nodes this driver finished, released from `live` with the driver itself (a graph
    /// has at most `u32::MAX` nodes).
    finished: u32,
    /// When the current node started, once read. `Idle`: the end of the node it just
    /// finished (still `id`) if that node produced a value (so `finish` skipped nothing),
    /// until it takes its next node in the same poll; when that node is a root (ready from
    /// the run's start: no upstream ended later) and nothing but bookkeeping followed the
    /// end (`RunState::quiet_after`), it starts then.
    start: Option<Instant>,
    /// Nodes it made ready and keeps for itself, run last in, first out (`ready.rs`).
    local: VecDeque<u32>,
    /// The current node came from the queue (it may not be queued again this run).
    from_queue: bool,
    /// It just spawned a driver for nodes it queued: it yields once before its next node,
    /// so that the new driver, in this worker's LIFO slot, runs here while this one moves
    /// to where an idle worker can take it (see `RunState::schedule`).
    handoff: bool,
    /// Polled inside the run's own future (`Run::poll`), not a task of its own: it runs
    /// nodes only while they end at once and holds nothing across a `Pending`. Where a
    /// spawned driver would wait or yield, it hands its node to a spawned driver instead
    /// ([`migrate`](Self::migrate), [`hand_off`](Self::hand_off)) and carries on or ends.
    embedded: bool,
    /// Embedded: how many nodes it started; it hands off at [`INLINE_MAX`] even when the
    /// awaiting task's coop budget is not spent (`tokio::task::unconstrained`).
    inline: u32,
    /// The fast path's attempt future: the current node's in `State::Attempt`, else the
    /// last one, ended, whose box the next attempt reuses when their layouts match.
    attempt: Option<AttemptFuture>,
    /// The timer that wakes the driver by the cut of a policy node's first attempt that
    /// waits, kept from one such attempt to the next and polled only by this driver's task
    /// (`guarded::wait`); deregistered when the driver ends.
    timer: Option<Pin<Box<Sleep>>>,
    state: State,
}

/// The most nodes an embedded driver starts before it hands the rest of the run to spawned
/// drivers: tokio's coop budget per poll, which an unconstrained task does not have.
const INLINE_MAX: u32 = 128;

impl<I: Send + Sync + 'static> Driver<I> {
    /// A driver that starts with node `id` (already `RUNNING`), or, with `None`, with the
    /// queue; `active`: its spawner counted it as an active driver.
    pub(crate) fn new(run: Arc<RunState<I>>, id: Option<u32>, active: bool) -> Self {
        Driver {
            run,
            id: id.unwrap_or(0),
            active,
            finished: 0,
            start: None,
            handoff: false,
            embedded: false,
            inline: 0,
            local: VecDeque::new(),
            from_queue: false,
            attempt: None,
            timer: None,
            state: if id.is_some() {
                State::Begin
            } else {
                State::Idle
            },
        }
    }

    /// A driver for the run's future to poll (see the `embedded` field), starting with node
    /// `id` (already `RUNNING`); `active`: its creator counted it as an active driver;
    /// `start`: when node `id` starts, if the creator read the clock with nothing but
    /// bookkeeping left before the node's first poll (`None`: read when it starts).
    pub(crate) fn embedded(
        run: Arc<RunState<I>>,
        id: u32,
        active: bool,
        start: Option<Instant>,
    ) -> Self {
        let mut driver = Driver::new(run, Some(id), active);
        driver.embedded = true;
        driver.start = start;
        driver
    }

    /// Embedded: the current node waits (its attempt returned `Pending`). It moves, as it
    /// is, to a driver spawned for it, which polls it again and goes on from there; this
    /// one carries on with its own stack or the queue.
    fn migrate(&mut self) {
        let state = std::mem::replace(&mut self.state, State::Idle);
        let mut driver = Driver::new(Arc::clone(&self.run), Some(self.id), false);
        if matches!(state, State::Attempt(_)) {
            driver.attempt = self.attempt.take();
        }
        driver.state = state;
        // (Idle, this one has no end to start a root at: its node has not ended.)
        driver.start = self.start.take();
        self.run.spawn(driver);
        if let Some(next) = self.local.pop_back() {
            self.id = next;
            self.from_queue = false;
            self.state = State::Begin;
        }
    }

    /// Embedded: where a spawned driver would yield, this one ends instead. Its stack goes
    /// to the queue, and its node, if it has not started it, to a driver spawned for it,
    /// which takes its place among the active drivers; without a node, it leaves the queue to
    /// the other drivers, spawning one if none is left to drain it.
    fn hand_off(&mut self) {
        // The run's future stops driving it: what is left spreads over the workers, from
        // the drivers spawned here on (before they are spawned, so that they see it).
        self.run.core.spread();
        let node = matches!(self.state, State::Begin).then_some(self.id);
        self.state = State::Done;
        if !self.local.is_empty() {
            let _ = self.run.share(self.local.drain(..));
        }
        let active = std::mem::take(&mut self.active);
        match node {
            Some(id) => {
                let mut driver = Driver::new(Arc::clone(&self.run), Some(id), active);
                // A node is queued once per run: the new driver must know if it was.
                driver.from_queue = self.from_queue;
                self.run.spawn(driver);
            }
            None if active && self.run.core.ready().leave(self.run.workers()) => {
                self.run.spawn_driver(None, true);
            }
            None => {}
        }
        // Queued nodes get as many drivers as the workers (a thousand ready roots would
        // otherwise wait for the one driver above, nothing queuing more to spawn another).
        let ready = &self.run.core.ready();
        while !ready.is_empty() && ready.try_activate(self.run.workers()) {
            self.run.spawn_driver(None, true);
        }
    }

    /// The current node waits: the driver stops draining the queue, and if nodes wait there
    /// it spawns a driver to take its place, so a node that waits holds up no other.
    fn suspend(&mut self) {
        // Its own nodes would wait with it: they go to the queue, for any driver.
        if !self.local.is_empty() {
            self.run.share(self.local.drain(..));
        }
        let ready = &self.run.core.ready();
        let workers = self.run.workers();
        let replace = if self.active {
            self.active = false;
            ready.leave(workers)
        } else {
            !ready.is_empty() && ready.try_activate(workers)
        };
        if replace {
            self.run.spawn_driver(None, true);
        }
    }

    /// The driver yields to tokio (its budget is spent) before starting node `id`: nodes
    /// that have waited longer go first, so that a long chain run inline does not hold up a
    /// node that would start a request. The oldest queued node if any (`id` joins the queue,
    /// unless it came from there: a node is queued once per run), else the oldest node of the
    /// driver's own stack (`id` goes on top).
    fn take_turns(&mut self) {
        if self.from_queue {
            return;
        }
        if !self.run.core.ready().is_empty() {
            // Whether it spawned a driver does not matter: this one returns `Pending` now.
            let _ = self.run.schedule(self.id);
            // An idle driver looks only at the queue: its own stack goes there too (another
            // driver may empty the queue first, and this one would then end).
            if !self.local.is_empty() {
                let _ = self.run.share(self.local.drain(..));
            }
            self.state = State::Idle;
        } else if let Some(oldest) = self.local.pop_front() {
            self.local.push_back(self.id);
            self.id = oldest;
        }
    }

    fn start(&mut self) -> Instant {
        *self.start.get_or_insert_with(Instant::now)
    }

    /// Starts node `id`: the fast path when nothing needs the full one.
    fn begin(&mut self) {
        if self.run.core.prefetch() {
            self.run.graph.prefetch_task(self.id);
        }
        let start = self.start();
        let run = &self.run;
        let core = &run.core;
        let id = self.id;
        let graph = &run.graph;
        let span = trace::node_span(|| core.span(), || graph.meta.name(id));
        let (cut, held) = match graph.task_policy(id) {
            // A task node without policies (nor a run deadline to cut it, nor a span).
            Some(None) if core.deadline().is_none() && span.is_disabled() => {
                (CtxCut::At(None), None)
            }
            // One with policies: its first attempt's cut and breaker permit, or the full path.
            Some(Some(policy)) => match guarded::prepare(run, policy, start, &span) {
                Some((cut, held)) => (cut, Some(held)),
                None => return self.full(span, None),
            },
            // A router or a branch, or a plain node with a run deadline or a span.
            _ => return self.full(span, None),
        };
        run.count_started(id);
        if run.observed() {
            run.emit(&Event::NodeStarted {
                run: core.run_id(),
                node: graph.meta.name(id),
            });
        }
        run.attempt_started_with(id, 1, || {
            guarded::cut(run, id, start).map(|u| u.saturating_duration_since(start))
        });
        match (
            run.call_task_into(id, 1, cut, None, &mut self.attempt),
            held,
        ) {
            (Ok(()), held) => self.state = State::Attempt(held),
            (Err(error), None) => self.attempt_failed(start, error),
            (Err(error), Some(held)) => {
                let first = guarded::hand_over(run, id, held, FirstAttempt::NotStarted(error));
                self.full(span, Some(first));
            }
        }
    }

    /// Node `id` goes on on the full path (`exec.rs`), boxed; `first` is its first attempt
    /// when the fast path started it.
    fn full(&mut self, span: tracing::Span, first: Option<First<AttemptFuture>>) {
        let run = Arc::clone(&self.run);
        let (id, start) = (self.id, self.start());
        self.state = State::Full(Box::pin(async move {
            super::exec::run_node(&run, id, span, start, first).await
        }));
    }

    fn attempt_failed(&mut self, start: Instant, error: NodeError) {
        let run = &self.run;
        run.core.tokens().end(self.id, 1);
        run.attempt_failed(self.id, 1, &error);
        let record = Record::ended(Outcome::Failed, None, Some(start), run.core.now())
            .with_error(Some(Arc::new(error)));
        self.end(record);
    }

    /// Records node `id`'s end and moves to the next node: a downstream it made ready, or
    /// the queue.
    fn end(&mut self, record: Record) {
        self.finished += 1;
        let end = record.end;
        // A node without a value makes `finish` skip its downstreams, and their whole
        // subgraph, running their callbacks: not mere bookkeeping.
        let produced = record.value.is_some();
        let released = self.run.finish(self.id, record, &mut self.local);
        // A worker may be idle while this driver keeps nodes: share the older half.
        let mut spawned = released.spawned;
        if !self.local.is_empty() && self.run.core.ready().wants_help(self.run.workers()) {
            let half = self.local.len().div_ceil(2);
            spawned |= self.run.share(self.local.drain(..half));
        }
        // A driver was spawned for the others: yield once before going on (`schedule`).
        self.handoff = spawned;
        match released.next {
            Some(next) => {
                // `next` starts now: when the last of its upstreams ended, if nothing but
                // bookkeeping ran since (their records are written before they release it,
                // so reading them saves a clock read); otherwise the clock is read afresh.
                let id = self.id;
                self.start = self.run.ready_at(id, next, end);
                self.id = next;
                self.from_queue = false;
                self.state = State::Begin;
            }
            None => {
                if let Some(next) = self.local.pop_back() {
                    self.start = None;
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

    /// Takes the next node from the queue (`None`: it is in `id`, the state is `Begin`);
    /// otherwise what `poll` returns: `Ready` when the driver is done, `Pending` when it
    /// yielded.
    fn next_from_queue(&mut self, cx: &mut Context<'_>) -> Option<Poll<()>> {
        let ready = &self.run.core.ready();
        if !self.active {
            // Not counted active, it owes the queue nothing: nothing waits, it is done
            // (whoever queues a node later spawns a driver if too few are active).
            if ready.is_empty() {
                self.state = State::Done;
                return Some(Poll::Ready(()));
            }
            ready.activate();
            self.active = true;
        }
        loop {
            match ready.pop() {
                Pop::Node(id) => {
                    let last = self.id;
                    self.start = self
                        .start
                        .take()
                        .filter(|_| self.run.is_root(id) && self.run.quiet_after(last));
                    self.id = id;
                    self.from_queue = true;
                    self.state = State::Begin;
                    return None;
                }
                // A pusher is between claiming its slot and writing it: look again shortly.
                Pop::Busy => {
                    cx.waker().wake_by_ref();
                    return Some(Poll::Pending);
                }
                Pop::Empty => {
                    if !ready.leave(self.run.workers()) {
                        self.active = false;
                        self.state = State::Done;
                        return Some(Poll::Ready(()));
                    }
                }
            }
        }
    }

    /// The run was cancelled while node `id` was in the fast path.
    fn cancelled(&mut self, started: bool) {
        let start = started.then(|| self.start());
        self.release_held();
        self.state = State::Done;
        self.attempt = None;
        self.run.core.tokens().end(self.id, 1);
        let record = Record::empty(Outcome::Cancelled, self.run.core.now()).started(start);
        self.end(record);
    }

    /// The current attempt waits: the task's waker goes into the node's slot (a cancel
    /// wakes it) and the driver suspends; whether it did (`false`: the run was cancelled
    /// meanwhile, and the node ended `Cancelled`; the caller goes on).
    fn wait_for_attempt(&mut self, cx: &mut Context<'_>) -> bool {
        let core = &self.run.core;
        if let Some(slot) = core.slot(self.id) {
            slot.register(cx.waker());
        }
        // `cancel` sets the flag, then wakes: re-check after registering.
        if core.is_cancelled() {
            self.cancelled(true);
            return false;
        }
        self.suspend();
        true
    }

    /// The first attempt of a policy node is abandoned: its breaker permit is released.
    fn release_held(&mut self) {
        if let State::Attempt(held) = &mut self.state {
            if let Some(held) = held.take() {
                guarded::release(&self.run, self.id, held);
            }
        }
    }
}

impl<I: Send + Sync + 'static> Future for Driver<I> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if matches!(this.state, State::Idle) {
            // Time passed since the end of the last node it finished.
            this.start = None;
        }
        loop {
            match &mut this.state {
                State::Done => return Poll::Ready(()),
                State::Idle | State::Begin if this.handoff => {
                    this.handoff = false;
                    this.start = None;
                    if this.embedded {
                        this.hand_off();
                        return Poll::Ready(());
                    }
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                State::Idle => {
                    if let Some(poll) = this.next_from_queue(cx) {
                        if poll.is_pending() && this.embedded {
                            this.hand_off();
                            return Poll::Ready(());
                        }
                        // `Drop` treats a driver not `Done` as dropped mid-run.
                        debug_assert!(poll.is_pending() || matches!(this.state, State::Done));
                        return poll;
                    }
                }
                State::Begin => {
                    // Every node started spends a unit of the task's tokio budget, so a long
                    // chain or a long queue yields its worker now and then (to timers, I/O and
                    // other tasks), as tokio's own resources do.
                    match tokio::task::coop::poll_proceed(cx) {
                        Poll::Ready(coop) if this.embedded && this.inline == INLINE_MAX => {
                            drop(coop); // (not spent: the node starts elsewhere)
                            this.start = None;
                            this.hand_off();
                            return Poll::Ready(());
                        }
                        Poll::Ready(coop) => {
                            coop.made_progress();
                            this.inline += u32::from(this.embedded);
                        }
                        Poll::Pending => {
                            // Time passes before the node starts: its start is read afresh.
                            this.start = None;
                            if this.embedded {
                                this.hand_off();
                                return Poll::Ready(());
                            }
                            this.take_turns();
                            return Poll::Pending;
                        }
                    }
                    if this.run.core.is_cancelled() {
                        this.cancelled(false);
                    } else {
                        this.begin();
                    }
                }
                // User code runs in the full path too (retry predicates, breaker filters,
                // backoff iterators): a panic there fails the node like a task's would.
                State::Full(fut) => {
                    match std::panic::catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx))) {
                        Ok(Poll::Ready((record, spawned))) => {
                            this.end(record);
                            // A driver was spawned for nodes the node queued: yield once
                            // before going on, as `end` does for its own.
                            this.handoff |= spawned;
                        }
                        Ok(Poll::Pending) if this.embedded => this.migrate(),
                        Ok(Poll::Pending) => {
                            this.suspend();
                            return Poll::Pending;
                        }
                        Err(panic) => {
                            this.state = State::Done;
                            this.run.core.tokens().end(this.id, u32::MAX);
                            let start = this.start();
                            this.attempt_failed(start, NodeError::from_panic(panic.as_ref()));
                        }
                    }
                }
                State::Attempt(held) => {
                    let core = &this.run.core;
                    if core.is_cancelled() {
                        this.cancelled(true);
                        continue;
                    }
                    let Some(fut) = this.attempt.as_mut() else {
                        let start = this.start();
                        this.attempt_failed(
                            start,
                            NodeError::Internal {
                                message: "the driver lost its attempt",
                            },
                        );
                        continue;
                    };
                    let polled = std::panic::catch_unwind(AssertUnwindSafe(|| fut.poll(cx)));
                    if polled.is_err() {
                        // A future that panicked is dropped now, not kept for its box.
                        this.attempt = None;
                    }
                    // Taken out of the state: from here on, only the permit made of it holds
                    // the breaker's ticket (`release_held` must not give it back too).
                    if let Some(mut h) = held.take() {
                        // A policy node: it goes on here while its attempt succeeds or
                        // waits within its cut; the onion takes it over otherwise.
                        let attempt = match polled {
                            Ok(Poll::Ready(Ok(value))) => {
                                let end = core.now();
                                guarded::succeeded(&this.run, this.id, h, this.start, end);
                                let record =
                                    Record::ended(Outcome::Succeeded, Some(value), this.start, end);
                                this.end(record);
                                continue;
                            }
                            Ok(Poll::Pending) if this.embedded => {
                                // The driver spawned for it polls it next, on this path.
                                *held = Some(h);
                                this.migrate();
                                continue;
                            }
                            Ok(Poll::Pending) => {
                                let start = *this.start.get_or_insert_with(Instant::now);
                                // (Tokio panics making a timer on a runtime without them.)
                                let waited = std::panic::catch_unwind(AssertUnwindSafe(|| {
                                    guarded::wait(
                                        &this.run,
                                        this.id,
                                        start,
                                        &mut h,
                                        &mut this.timer,
                                        cx,
                                    )
                                }));
                                match waited {
                                    // As when the policy path's own timer panics: the
                                    // breaker's permit goes back uncounted, and the node
                                    // fails with the panic (no retry, no fallback).
                                    Err(panic) => {
                                        guarded::release(&this.run, this.id, h);
                                        this.attempt = None;
                                        this.state = State::Done;
                                        this.run.core.tokens().end(this.id, u32::MAX);
                                        let start = this.start();
                                        let error = NodeError::from_panic(panic.as_ref());
                                        this.attempt_failed(start, error);
                                        continue;
                                    }
                                    Ok(Poll::Pending) => {
                                        *held = Some(h);
                                        if this.wait_for_attempt(cx) {
                                            return Poll::Pending;
                                        }
                                        continue;
                                    }
                                    // The cut passed: the onion polls it once more, then
                                    // reports it cut.
                                    Ok(Poll::Ready(())) => match this.attempt.take() {
                                        Some(fut) => FirstAttempt::Running(fut),
                                        None => FirstAttempt::NotStarted(NodeError::Internal {
                                            message: "the driver lost its attempt",
                                        }),
                                    },
                                }
                            }
                            Ok(Poll::Ready(Err(error))) => FirstAttempt::Failed(error),
                            Err(panic) => FirstAttempt::Panicked(panic),
                        };
                        let first = guarded::hand_over(&this.run, this.id, h, attempt);
                        let span =
                            trace::node_span(|| core.span(), || this.run.graph.meta.name(this.id));
                        this.full(span, Some(first));
                        continue;
                    }
                    match polled {
                        Ok(Poll::Pending) if this.embedded => this.migrate(),
                        Ok(Poll::Pending) => {
                            if this.wait_for_attempt(cx) {
                                return Poll::Pending;
                            }
                        }
                        // The attempt's token (if it asked for one) ends when the node's
                        // record is written, before its callbacks run.
                        Ok(Poll::Ready(Ok(value))) => {
                            let record = Record::ended(
                                Outcome::Succeeded,
                                Some(value),
                                this.start,
                                core.now(),
                            );
                            this.end(record);
                        }
                        Ok(Poll::Ready(Err(error))) => {
                            let start = this.start();
                            this.attempt_failed(start, NodeError::Task(error));
                        }
                        Err(panic) => {
                            let start = this.start();
                            this.attempt_failed(start, NodeError::from_panic(panic.as_ref()));
                        }
                    }
                }
            }
        }
    }
}

impl<I: Send + Sync + 'static> Drop for Driver<I> {
    fn drop(&mut self) {
        // Dropped before its end (the runtime shut down): its node, and every node still
        // queued, which no driver may be left to take, end `Cancelled`.
        if !matches!(self.state, State::Done) {
            self.release_held();
            if !matches!(self.state, State::Idle) {
                self.run.core.tokens().end(self.id, 1);
                self.run.abandon(self.id);
            }
            self.state = State::Done;
            self.attempt = None;
            for id in std::mem::take(&mut self.local) {
                self.run.abandon(id);
            }
            // A slot being written by a driver on another thread is waited for, briefly.
            let mut busy = 0;
            loop {
                match self.run.core.ready().pop() {
                    Pop::Node(id) => self.run.abandon(id),
                    Pop::Busy if busy < 10_000 => {
                        busy += 1;
                        std::hint::spin_loop();
                    }
                    Pop::Busy | Pop::Empty => break,
                }
            }
        }
        if self.active {
            self.active = false;
            self.run.core.ready().leave(0);
        }
        self.run.release(1 + self.finished as usize);
    }
}

#[cfg(test)]
mod tests {
    /// The module doc's "fifteen words": every spawned driver is copied into its task.
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn a_driver_is_fifteen_words() {
        assert_eq!(
            std::mem::size_of::<super::Driver<()>>(),
            15 * std::mem::size_of::<usize>()
        );
    }
}
