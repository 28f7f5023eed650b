//! The driver: the tokio task that runs nodes. It takes a node from the run's ready queue,
//! whose protocol is in `ready/mod.rs`, runs it, records its outcome, carries on with one
//! downstream it made ready, queues the others, and goes back to the queue until it is
//! empty. Carrying on is Taskflow's continuation: a chain runs in one task, not one spawn per
//! node. A node whose attempt waits with `Pending` keeps its driver, which then stops
//! draining the queue and spawns a replacement if nodes are waiting there.
//!
//! In an inline run, with the default `StartMode::Inline`, or on a runtime where one thread
//! runs every task, a run's first driver is no task but part of the run's future: the
//! `embedded` driver. `RunState::start` assumes one thread runs every task on a
//! current-thread runtime, or on one worker awaited from a task. The embedded driver runs nodes
//! in the task that awaits the run, spending that task's coop budget, a unit per eight
//! nodes (`run/passes.rs`), and at most [`INLINE_MAX`] of them. It never waits: a node
//! whose attempt returns `Pending` moves, as it is, to a driver spawned for it, and the
//! embedded one goes on with its stack and the queue. Where a spawned driver would yield,
//! the embedded one hands its node and stack to spawned drivers and ends. So a graph of
//! nodes that end at once costs no spawn at all.
//!
//! A driver "spawned" by an inline run that has not spread is no task either: it is a
//! `joined` driver. It goes to the run's inbox through `RunState::spawn`, and the run's
//! future polls it among the others. `run/joined.rs` polls the first few together and wakes
//! each of the rest on its own. It waits like a spawned driver. So an inline run uses one
//! task, the awaiting one, until the spread rule of [`Driver::out_of_budget`] spreads it on
//! several workers, when one poll of the run's future would start more than its budget of
//! nodes. In a spread run the embedded driver's nodes that wait move to tasks, so that run
//! goes on while its future is not polled.
//!
//! It is a hand-written future, fifteen words wide with its attempt box among them, because
//! every spawn copies it into a new tokio task. Its poll is a loop over one step per
//! [`State`]: take a node from the queue in `queue.rs`, begin it, poll its attempt in
//! `poll_attempt.rs`, then end it and go on with a downstream it made ready in
//! `begin_end.rs`. A node takes one of two paths:
//!
//! - the **fast path**, here: one boxed attempt future, polled under `catch_unwind`; the
//!   driver writes its next node's attempt into the same box when the two futures have the
//!   same layout, so a run of such nodes allocates one box per driver, not one per node,
//!   and a large one goes to the graph when the driver ends (`task/attempt_box.rs`).
//!   Nodes with policies start their first attempt here too, through `first_attempt.rs`,
//!   waited for under the driver's timer, which is kept from one such attempt to the next,
//!   or under the one the drivers the run's future polls together share
//!   (`first_attempt/shared.rs`);
//! - the **full path** of `full_path.rs`, boxed: the onion with its retries, the breaker's
//!   verdict and the fallback; and nodes and routers with `tracing` spans. A policy
//!   node's first attempt goes there only when it fails, panics or reaches its cut.
//!
//! A router without a span takes neither: `route.rs` chooses its branch and begins the
//! branch in its place, on either path, then ends the router when the branch ends.
//!
//! Both paths count attempts, end their tokens and tell the observers through the same
//! routines, in the engine's `paths/attempt_steps.rs`.

mod begin_end;
mod poll_attempt;
mod queue;
mod route;

use std::collections::VecDeque;
use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::time::Instant;

use super::paths::first_attempt::{Held, SharedTimer};
use super::ready::Pop;
use super::run::joined::PolledTogether;
use super::run::passes::spend_all_coop;
use super::run::state::RunState;
use super::task::attempt_box::KeptBoxes;
use super::task::ctx::AttemptFuture;
use crate::error::CancelReason;
use crate::policy::deadline::KeptTimer;
use crate::report::Record;

/// What a driver's step tells its poll: go on with the next step, or return.
type Step = ControlFlow<Poll<()>>;

enum State {
    /// Looking for a node in the ready queue.
    Idle,
    /// Node `id` is `RUNNING` and nothing of it has run yet.
    Begin,
    /// Fast path: its first attempt is running, in the driver's `attempt` box; with what it
    /// holds for the node's policies, if it has any, as `first_attempt.rs` defines it.
    Attempt(Option<Held>),
    /// Full path, for policies and spans. With the node's record, whether it spawned a
    /// driver for nodes it queued, which a router's branch made ready.
    Full(Pin<Box<dyn Future<Output = (Record, bool)> + Send>>),
    /// The driver has nothing left to run.
    Done,
}

/// Runs nodes from the ready queue, or from a given first node already `RUNNING`. Each is
/// followed, while finishing a node makes a downstream ready, by one such downstream.
/// Counted in the run's `live` by whoever spawned it; releases itself when it ends or is
/// dropped.
pub(in crate::engine) struct Driver<I> {
    run: Arc<RunState<I>>,
    id: u32,
    /// Counted in the queue's active drivers: it looks at the queue again before it ends
    /// or waits.
    active: bool,
    /// Nodes this driver finished, released from `live` with the driver itself. A graph
    /// has at most `u32::MAX` nodes.
    finished: u32,
    /// When the current node started, once read. In `Idle`, it is the end of the node it
    /// just finished, which is still `id`, if that node produced a value, so that `finish`
    /// skipped nothing; it stays until the driver takes its next node in the same poll. When
    /// that node is a root, ready from the run's start with no upstream ended later, and
    /// nothing but bookkeeping followed the end, as `RunState::quiet_after` checks, it
    /// starts then.
    start: Option<Instant>,
    /// Nodes it made ready and keeps for itself, run last in, first out; see `ready/mod.rs`.
    local: VecDeque<u32>,
    /// The current node came from the queue, so it may not be queued again this run.
    from_queue: bool,
    /// It just spawned a driver for nodes it queued: it yields once before its next node,
    /// so that the new driver, in this worker's LIFO slot, runs here while this one moves
    /// to where an idle worker can take it; see `RunState::schedule`.
    handoff: bool,
    /// Polled inside the run's own future by `Run::poll`, not a task of its own: it runs
    /// nodes only while they end at once and holds nothing across a `Pending`. Where a
    /// spawned driver would wait or yield, it hands its node to a spawned driver instead,
    /// with [`migrate`](Self::migrate) or [`hand_off`](Self::hand_off), and carries on or ends.
    embedded: bool,
    /// Spawned by an inline run that had not spread, through `RunState::spawn`: polled by
    /// the run's future among its other such drivers, in `run/joined.rs`. It waits there like a
    /// spawned driver, and where it would spawn, the run spawns locally too.
    joined: bool,
    /// The current node is a router's branch, begun in its router's place by
    /// `route.rs`: when it ends, the driver ends the router.
    branch: bool,
    /// Local, polled in a pass after the first of the run future's poll: how many nodes it
    /// started in this poll. It gives the task's turn back at [`INLINE_MAX`] even when the
    /// awaiting task's coop budget is not spent, as under `tokio::task::unconstrained`.
    /// In the first pass, the run counts its drivers' starts (`PassBudget`).
    inline: u8,
    /// The fast path's attempt future: the current node's in `State::Attempt`, else the
    /// last one, ended, whose box the next attempt reuses when their layouts match, or the
    /// graph keeps when the driver ends. An attempt still running leaves it only moved with
    /// its node (`migrate`, `hand_over`) or dropped (`discard`).
    attempt: Option<AttemptFuture>,
    /// The timer that wakes the driver by the cut of a policy node's first attempt that
    /// waits, kept from one such attempt to the next and polled only by this driver's task,
    /// in `first_attempt::wait`, unless the attempt is armed on the timer the drivers
    /// polled together share. When the driver ends it goes to the graph's spares: still
    /// running, with a waker that does nothing, on a multi-thread runtime
    /// (`Spares::keep_standing`), else taken out of tokio's wheel, as an empty box.
    timer: KeptTimer,
    state: State,
}

/// The most nodes the drivers polled by the run's future, embedded or local, start in the
/// first pass of one poll, and each of them in a pass after it, before the run spreads or
/// yields: tokio's coop budget per poll, which an unconstrained task does not have.
pub(in crate::engine) const INLINE_MAX: u8 = 128;

impl<I: Send + Sync + 'static> Driver<I> {
    /// A driver that starts with node `id`, already `RUNNING`, or, with `None`, with the
    /// queue; `active`: its spawner counted it as an active driver.
    pub(in crate::engine) fn new(run: Arc<RunState<I>>, id: Option<u32>, active: bool) -> Self {
        Driver {
            run,
            id: id.unwrap_or(0),
            active,
            finished: 0,
            start: None,
            handoff: false,
            embedded: false,
            joined: false,
            branch: false,
            inline: 0,
            local: VecDeque::new(),
            from_queue: false,
            attempt: None,
            timer: KeptTimer::new(),
            state: if id.is_some() {
                State::Begin
            } else {
                State::Idle
            },
        }
    }

    /// A driver for the run's future to poll, as the `embedded` field says, starting with
    /// node `id`, already `RUNNING`. `active`: its creator counted it as an active driver.
    /// `start`: when node `id` starts, if the creator read the clock with nothing but
    /// bookkeeping left before the node's first poll; with `None`, it is read when it starts.
    pub(in crate::engine) fn embedded(
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

    /// It was spawned by an inline run that had not spread: the run's future polls it.
    pub(in crate::engine) fn set_joined(&mut self) {
        self.joined = true;
    }

    /// It leaves the run's future for a task of its own. `Run::poll` does so when it is
    /// polled away from the run's runtime.
    pub(in crate::engine) fn unjoin(&mut self) {
        self.joined = false;
    }

    /// Whether the run's future polls it, embedded or local, rather than a task of its own.
    fn in_run(&self) -> bool {
        self.embedded || self.joined
    }

    pub(super) fn start(&mut self) -> Instant {
        *self.start.get_or_insert_with(Instant::now)
    }

    /// It just spawned a driver for nodes it queued: before its next node, a spawned driver
    /// yields once and an embedded one hands off and ends.
    fn after_spawn(&mut self, cx: &mut Context<'_>) -> Step {
        self.handoff = false;
        self.start = None;
        if self.embedded {
            self.hand_off(true);
            return ControlFlow::Break(Poll::Ready(()));
        }
        cx.waker().wake_by_ref();
        ControlFlow::Break(Poll::Pending)
    }

    /// Idle: takes the next node from the queue, or ends, or waits for a pusher.
    fn take_next(&mut self, cx: &mut Context<'_>) -> Step {
        let Some(poll) = self.next_from_queue(cx) else {
            return ControlFlow::Continue(());
        };
        if poll.is_pending() && self.embedded {
            self.hand_off(false);
            return ControlFlow::Break(Poll::Ready(()));
        }
        // `Drop` treats a driver not `Done` as dropped mid-run.
        debug_assert!(poll.is_pending() || matches!(self.state, State::Done));
        ControlFlow::Break(poll)
    }

    /// Begins the current node, if its budget lets it: every node started spends the task's
    /// coop budget, so a long chain or a long queue yields its worker now and then to
    /// timers, I/O and other tasks, as tokio's own resources do. A spawned driver spends a
    /// unit per node; one the run's future polls, a unit per eight, in the first pass of a
    /// poll as in the passes after it, which also spend the passes' budget
    /// (`run/passes.rs`).
    fn step_begin(&mut self, cx: &mut Context<'_>) -> Step {
        // A run that spread starts no node in the task that awaits it.
        if self.joined && !self.run.core.is_local() {
            self.start = None;
            self.hand_off(true);
            return ControlFlow::Break(Poll::Ready(()));
        }
        if self.in_run() && self.run.core.passes().is_repolling() {
            if self.inline == INLINE_MAX || !self.run.core.passes().start_in_repoll(cx) {
                self.start = None;
                return self.out_of_budget(cx);
            }
            self.inline += 1;
        } else if let Some(step) = self.spend_coop(cx) {
            return step;
        }
        if self.run.core.is_cancelled() {
            self.cancelled(false);
        } else {
            self.begin();
        }
        ControlFlow::Continue(())
    }

    /// Spends the task's coop budget on the node to start: a spawned driver a unit per node,
    /// one the run's future polls a unit per eight, as the run's passes pay
    /// (`run/passes.rs`). With none left or, polled by the run's future, [`INLINE_MAX`]
    /// started in the first pass of its poll, by this driver and others, returns what the
    /// driver does instead. Time passes before a node that does not start now starts: its
    /// start is read afresh.
    #[inline(always)]
    fn spend_coop(&mut self, cx: &mut Context<'_>) -> Option<Step> {
        if self.in_run() {
            if !self.run.core.passes().start_in_first_pass(INLINE_MAX, cx) {
                self.start = None;
                return Some(self.out_of_budget(cx));
            }
            return None;
        }
        match tokio::task::coop::poll_proceed(cx) {
            Poll::Ready(coop) => {
                coop.made_progress();
                None
            }
            Poll::Pending => {
                self.start = None;
                self.take_turns();
                Some(ControlFlow::Break(Poll::Pending))
            }
        }
    }
}

impl<I: Send + Sync + 'static> Driver<I> {
    /// Polled by the run's future, it may start no more nodes in this poll: tokio's coop
    /// budget is spent, or it started [`INLINE_MAX`]. This is the spread rule. An inline run
    /// on several workers spreads here, its ready nodes going to spawned drivers, as does a
    /// spread run's embedded driver, unless the future is polling its drivers again after
    /// they woke during its poll (`run/joined.rs`): that work would have waited for the
    /// task's next poll. A run that spreads also spends what is left of the awaiting
    /// task's coop budget, so that the drivers it spawned go where an idle worker takes
    /// them rather than run at once in the awaiting task's place. An inline run on one
    /// worker stays in the awaiting task, which yields: the embedded driver, which never
    /// waits, hands its nodes to a local driver, and a local driver yields with them.
    fn out_of_budget(&mut self, cx: &mut Context<'_>) -> Step {
        let core = &self.run.core;
        let spread = !core.is_local() || (core.several_workers() && !core.passes().is_repolling());
        if self.embedded || spread {
            self.hand_off(spread);
            if spread {
                // Its nodes go to tasks of its own: the awaiting task's turn goes with them.
                spend_all_coop(cx);
            }
            return ControlFlow::Break(Poll::Ready(()));
        }
        self.take_turns();
        self.run.core.passes().give_turn_back();
        // A spent budget woke the task already; a driver that started `INLINE_MAX` wakes it.
        cx.waker().wake_by_ref();
        ControlFlow::Break(Poll::Pending)
    }
}

impl<I: Send + Sync + 'static> Future for Driver<I> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.get_mut().drive(cx, None)
    }
}

impl<I: Send + Sync + 'static> PolledTogether for Driver<I> {
    type Shared = SharedTimer;

    /// A driver polled alone uses its own timer until the shared one is made; from then
    /// on every driver polled together uses the shared one, however few remain.
    fn poll_together(
        &mut self,
        cx: &mut Context<'_>,
        shared: &mut SharedTimer,
        together: usize,
    ) -> Poll<()> {
        let shared = (together > 1 || shared.is_made()).then_some(shared);
        self.drive(cx, shared)
    }
}

impl<I: Send + Sync + 'static> Driver<I> {
    /// Polls the driver: its nodes, one after another, until one waits or none is left.
    /// `shared`: the timer of the drivers polled together with this one, with the same
    /// waker, in the run's future; see `first_attempt::wait`.
    #[inline(never)]
    fn drive(&mut self, cx: &mut Context<'_>, mut shared: Option<&mut SharedTimer>) -> Poll<()> {
        self.inline = 0;
        if matches!(self.state, State::Idle) {
            // Time passed since the end of the last node it finished.
            self.start = None;
        }
        loop {
            let step = match self.state {
                State::Done => return Poll::Ready(()),
                State::Idle | State::Begin if self.handoff => self.after_spawn(cx),
                State::Idle => self.take_next(cx),
                State::Begin => self.step_begin(cx),
                State::Attempt(_) => self.poll_attempt(cx, shared.as_deref_mut()),
                State::Full(_) => self.poll_full(cx),
            };
            if let ControlFlow::Break(poll) = step {
                return poll;
            }
        }
    }
}

impl<I> Drop for Driver<I> {
    fn drop(&mut self) {
        (self.run.drop_driver)(self);
    }
}

impl<I: Send + Sync + 'static> Driver<I> {
    /// What a driver does when dropped, through [`RunState`]'s `drop_driver`.
    pub(in crate::engine) fn on_drop(&mut self) {
        // Dropped before its end: its node, and every node still queued, which no driver
        // may be left to take, end `Cancelled`. An embedded driver goes with the run's
        // future; a spawned one only when its runtime drops its task, shutting down.
        if !matches!(self.state, State::Done) {
            let reason = if self.in_run() {
                CancelReason::Dropped
            } else {
                CancelReason::RuntimeShutdown
            };
            self.release_held();
            if !matches!(self.state, State::Idle) {
                self.run.attempt_ended(self.id, 1);
                match self.router() {
                    Some(router) => {
                        self.run.abandon(router, &reason);
                        self.run.abandon_branch(self.id);
                    }
                    None => self.run.abandon(self.id, &reason),
                }
            }
            self.discard();
            for id in std::mem::take(&mut self.local) {
                self.run.abandon(id, &reason);
            }
            // A slot being written by a driver on another thread is waited for, briefly.
            let mut busy = 0;
            loop {
                match self.run.core.ready().pop() {
                    Pop::Node(id) => self.run.abandon(id, &reason),
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
        // Its last attempt ended: a driver dropped mid-run discarded the one it ran. A
        // large box goes to the graph, for later attempts.
        if let (Some(boxed), Some(kept)) = (self.attempt.take(), self.run.kept_attempts()) {
            kept.keep(boxed);
        }
        // So does its timer: running, on a multi-thread runtime, else as an empty box.
        if self.timer.is_made() {
            let timer = std::mem::take(&mut self.timer);
            let core = &self.run.core;
            let runtime = core.standing_runtime();
            self.run
                .graph
                .spare
                .keep_standing(core.home(), runtime, timer);
        }
        let held = 1 + self.finished as usize;
        if self.in_run() {
            self.run.release_in_future(held);
        } else {
            self.run.release(held);
        }
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
