//! How a driver polls the current node: its attempt on the fast path, or its boxed full
//! path. The fast path's attempt is a bare node's, or a policy node's first, which goes on
//! here while it succeeds or waits within its cut.

use std::ops::ControlFlow;
use std::panic::AssertUnwindSafe;
use std::task::{Context, Poll};
use std::thread;

use tokio::time::Instant;

use super::super::paths::first_attempt::{self, Held, SharedTimer};
use super::{Driver, State, Step};
use crate::error::{BoxError, NodeError, UserCode};
use crate::observe::trace;
use crate::onion::FirstAttempt;
use crate::report::{Outcome, Record};
use crate::util::value::Value;

/// What one poll of an attempt gave: its output, or its panic.
type Polled = thread::Result<Poll<Result<Value, BoxError>>>;

impl<I: Send + Sync + 'static> Driver<I> {
    /// Polls the current node's attempt, on the fast path.
    pub(super) fn poll_attempt(
        &mut self,
        cx: &mut Context<'_>,
        shared: Option<&mut SharedTimer>,
    ) -> Step {
        if self.run.core.is_cancelled() {
            self.cancelled(true);
            return ControlFlow::Continue(());
        }
        let Some(fut) = self.attempt.as_mut() else {
            unreachable!("a driver in `State::Attempt` holds its attempt")
        };
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| fut.poll(cx)));
        if polled.is_err() {
            // A future that panicked is dropped now, not kept for its box. Its drop may
            // panic too: the first panic is the one reported.
            let attempt = &mut self.attempt;
            let _ = std::panic::catch_unwind(AssertUnwindSafe(|| *attempt = None));
        }
        // Taken out of the state: from here on, only the permit made of it holds the
        // breaker's ticket, and `release_held` must not give it back too.
        let State::Attempt(held) = &mut self.state else {
            unreachable!("polled in `State::Attempt`")
        };
        let held = held.take();
        match polled {
            // The attempt's token, if it asked for one, ends when the node's record is
            // written, before its callbacks run; a policy node's breaker is told first.
            Ok(Poll::Ready(Ok(value))) => {
                let end = self.run.core.now();
                let (run, id, start) = (&self.run, self.id, self.start);
                if let (Some(held), Some(shared)) = (held, shared) {
                    first_attempt::leave(held, shared);
                }
                let overran =
                    held.and_then(|held| first_attempt::succeeded(run, id, held, start, end));
                let record = Record::ended(Outcome::Succeeded, Some(value), start, end);
                self.end(match overran {
                    None => record,
                    Some(by) => first_attempt::overran(&self.run, record, by),
                });
                ControlFlow::Continue(())
            }
            polled => match held {
                Some(held) => self.policy_attempt(polled, held, cx, shared),
                None => self.bare_attempt(polled, cx),
            },
        }
    }

    /// A bare node's attempt was polled and did not succeed: it fails the node, or waits.
    fn bare_attempt(&mut self, polled: Polled, cx: &mut Context<'_>) -> Step {
        match polled {
            Ok(Poll::Pending) if self.embedded => self.migrate(),
            Ok(Poll::Pending) => {
                if self.wait_for_attempt(cx) {
                    return ControlFlow::Break(Poll::Pending);
                }
            }
            Ok(Poll::Ready(Ok(_))) => unreachable!("a success ends in `poll_attempt`"),
            Ok(Poll::Ready(Err(error))) => {
                let start = self.start();
                self.attempt_failed(start, NodeError::Task(error));
            }
            Err(panic) => {
                let start = self.start();
                self.attempt_failed(start, NodeError::from_panic(UserCode::Task, panic.as_ref()));
            }
        }
        ControlFlow::Continue(())
    }

    /// A policy node's first attempt was polled and did not succeed: it goes on here while
    /// it waits within its cut; the onion takes it over otherwise.
    fn policy_attempt(
        &mut self,
        polled: Polled,
        held: Held,
        cx: &mut Context<'_>,
        shared: Option<&mut SharedTimer>,
    ) -> Step {
        let attempt = match polled {
            Ok(Poll::Ready(Ok(_))) => unreachable!("a success ends in `poll_attempt`"),
            Ok(Poll::Pending) if self.embedded => {
                // The driver spawned for it polls it next, on this path.
                self.hold(held);
                self.migrate();
                return ControlFlow::Continue(());
            }
            Ok(Poll::Pending) => return self.wait_within_cut(held, cx, shared),
            Ok(Poll::Ready(Err(error))) => FirstAttempt::Failed(error),
            Err(panic) => FirstAttempt::Panicked(panic),
        };
        if let Some(shared) = shared {
            first_attempt::leave(held, shared);
        }
        self.hand_over(held, attempt);
        ControlFlow::Continue(())
    }

    /// A policy node's first attempt waits: the driver waits too, under its timer for the
    /// attempt's cut in `first_attempt::wait`, or hands the attempt, still running, to the
    /// onion once the cut passed.
    fn wait_within_cut(
        &mut self,
        mut held: Held,
        cx: &mut Context<'_>,
        mut shared: Option<&mut SharedTimer>,
    ) -> Step {
        let start = *self.start.get_or_insert_with(Instant::now);
        // Tokio panics making a timer on a runtime without timers.
        let (run, id, timer) = (&self.run, self.id, &mut self.timer);
        let waited = std::panic::catch_unwind(AssertUnwindSafe(|| {
            first_attempt::wait(
                run,
                (id, start),
                &mut held,
                timer,
                shared.as_deref_mut(),
                cx,
            )
        }));
        match waited {
            // As when the policy path's own timer panics: the breaker's permit goes back
            // uncounted, and the node fails with the panic, with no retry and no fallback.
            Err(panic) => {
                if let Some(shared) = shared {
                    first_attempt::leave(held, shared);
                }
                first_attempt::release(&self.run, self.id, held);
                self.discard();
                self.run.attempt_ended(self.id, u32::MAX);
                let start = self.start();
                self.attempt_failed(
                    start,
                    NodeError::from_panic(UserCode::Scheduler, panic.as_ref()),
                );
            }
            Ok(Poll::Pending) => {
                self.hold(held);
                if self.wait_for_attempt(cx) {
                    return ControlFlow::Break(Poll::Pending);
                }
            }
            // The cut passed: the onion polls it once more, then reports it cut.
            Ok(Poll::Ready(())) => {
                let Some(fut) = self.attempt.take() else {
                    unreachable!("a waiting attempt is in the driver's box")
                };
                if let Some(shared) = shared {
                    first_attempt::leave(held, shared);
                }
                self.hand_over(held, FirstAttempt::Running(fut));
            }
        }
        ControlFlow::Continue(())
    }

    /// Puts `held` back into the state, for the attempt's next poll.
    fn hold(&mut self, held: Held) {
        if let State::Attempt(slot) = &mut self.state {
            *slot = Some(held);
        }
    }

    /// The onion takes the policy node's first attempt over, with its permit: the node goes
    /// on on the full path.
    fn hand_over(
        &mut self,
        held: Held,
        attempt: FirstAttempt<super::super::task::ctx::AttemptFuture>,
    ) {
        let first = first_attempt::hand_over(&self.run, self.id, held, attempt);
        let core = &self.run.core;
        let span = trace::node_span(|| core.span(), || self.run.graph.meta.name(self.id));
        self.full(span, Some(first));
    }

    /// Polls the current node's full path. User code runs there too, such as retry
    /// predicates, breaker filters and backoff iterators: a panic fails the node like a
    /// task's would.
    pub(super) fn poll_full(&mut self, cx: &mut Context<'_>) -> Step {
        let State::Full(fut) = &mut self.state else {
            unreachable!("polled in `State::Full`")
        };
        match std::panic::catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx))) {
            Ok(Poll::Ready((record, spawned))) => {
                self.end(record);
                // A driver was spawned for nodes the node queued: yield once before going
                // on, as `end` does for its own.
                self.handoff |= spawned;
            }
            Ok(Poll::Pending) if self.embedded => self.migrate(),
            Ok(Poll::Pending) => {
                self.suspend();
                return ControlFlow::Break(Poll::Pending);
            }
            Err(panic) => {
                self.state = State::Done;
                self.run.attempt_ended(self.id, u32::MAX);
                let start = self.start();
                self.attempt_failed(
                    start,
                    NodeError::from_panic(UserCode::Scheduler, panic.as_ref()),
                );
            }
        }
        ControlFlow::Continue(())
    }
}
