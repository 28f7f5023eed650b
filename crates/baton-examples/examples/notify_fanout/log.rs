//! The fan-out example's log: what the orchestrator's observer prints as each attempt of a
//! watched channel starts and ends, and as each breaker changes state.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use baton_examples::{CallError, Channel, millis};
use baton_graph::{NodeError, Outcome, breaker::BreakerState, observe::Event, run::RunId};
use tokio::time::Instant;

/// The last attempt's error in a few words: `503 Service Unavailable`, `cut at the budget`.
pub(crate) fn cause(error: &NodeError) -> String {
    let call = error
        .task_error()
        .and_then(|e| e.downcast_ref::<CallError>());
    if let Some(CallError::Status { status, .. }) = call {
        return status.to_string();
    }
    match error.last_attempt() {
        NodeError::DeadlineExceeded { .. } => "cut at the budget".to_owned(),
        NodeError::BreakerOpen { .. } => "breaker open".to_owned(),
        other => other.to_string(),
    }
}

/// What the observer needs to print an event: the start, the request number of each run,
/// when each attempt started, and which channels to watch.
pub(crate) struct Log {
    pub(crate) started: Instant,
    pub(crate) requests: Mutex<HashMap<RunId, u32>>,
    attempts: Mutex<HashMap<(RunId, String), Attempt>>,
    /// Each breaker's state, as its transitions arrive (breakers are named after channels).
    states: Mutex<HashMap<String, BreakerState>>,
    watched: Vec<Channel>,
}

/// The attempt a node of a run is making: its number, start and budget.
#[derive(Debug, Clone, Copy)]
struct Attempt {
    number: u32,
    at: Instant,
    budget: Option<Duration>,
}

impl fmt::Display for Attempt {
    /// `attempt 2  budget=452.4 ms  used=31.6 ms` (used: so far).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "attempt {}  budget=", self.number)?;
        match self.budget {
            Some(b) => write!(f, "{:>5.1} ms", millis(b))?,
            None => f.write_str("none")?,
        }
        write!(f, "  used={:>5.1} ms", millis(self.at.elapsed()))
    }
}

impl Log {
    /// A log that starts now and shows the attempts of `watched`.
    pub(crate) fn new(watched: Vec<Channel>) -> Self {
        Log {
            started: Instant::now(),
            requests: Mutex::default(),
            attempts: Mutex::default(),
            states: Mutex::default(),
            watched,
        }
    }

    /// The attempt `node` of `run` is making, as text.
    fn attempt(&self, run: RunId, node: &str) -> String {
        self.attempts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(run, node.to_owned()))
            .map_or_else(|| "attempt ?".to_owned(), ToString::to_string)
    }

    pub(crate) fn at(&self) -> String {
        format!("[{:>7.1} ms]", millis(self.started.elapsed()))
    }

    fn request(&self, run: RunId) -> u32 {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&run)
            .copied()
            .unwrap_or(0)
    }

    fn watched(&self, node: &str) -> bool {
        self.watched.iter().any(|c| c.name() == node)
    }

    pub(crate) fn on_event(&self, event: &Event<'_>) {
        match event {
            Event::BreakerTransition(t) => {
                self.states
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(t.breaker().to_owned(), t.to());
                println!(
                    "[{:>7.1} ms] ======== breaker `{}`: {} -> {} ({})",
                    millis(t.at().saturating_duration_since(self.started)),
                    t.breaker(),
                    t.from(),
                    t.to(),
                    t.reason()
                );
            }
            Event::AttemptStarted {
                run,
                node,
                attempt,
                budget,
                ..
            } if self.watched(node) => {
                let started = Attempt {
                    number: *attempt,
                    at: Instant::now(),
                    budget: *budget,
                };
                self.attempts
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert((*run, (*node).to_owned()), started);
            }
            Event::AttemptFailed {
                run, node, error, ..
            } if self.watched(node) => {
                let attempt = self.attempt(*run, node);
                println!(
                    "{} #{:<3} {node:<4} {attempt}  fail: {}",
                    self.at(),
                    self.request(*run),
                    cause(error)
                );
            }
            Event::RetryScheduled {
                run,
                node,
                delay,
                remaining,
                ..
            } if self.watched(node) => {
                let left = remaining
                    .map_or_else(String::new, |r| format!(" remaining={:.1} ms", millis(r)));
                println!(
                    "{} #{:<3} {node:<4} backoff {:.1} ms{left}",
                    self.at(),
                    self.request(*run),
                    millis(*delay)
                );
            }
            Event::NodeFinished {
                run,
                node,
                outcome,
                duration,
                ..
            } if self.watched(node) => {
                let last = self
                    .attempts
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&(*run, (*node).to_owned()));
                let what = match (outcome, last) {
                    // Started, no attempt: the breaker rejected it before any call.
                    (Outcome::Failed, None) => {
                        let state = self
                            .states
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .get(*node)
                            .copied()
                            .unwrap_or(BreakerState::Closed);
                        match state {
                            BreakerState::HalfOpen => {
                                "rejected: breaker half-open, its one probe is in flight".to_owned()
                            }
                            _ => "rejected: breaker open, no call made".to_owned(),
                        }
                    }
                    (Outcome::Succeeded, Some(a)) => format!("{a}  ok"),
                    (outcome, _) => format!("{outcome} after {:.1} ms", millis(*duration)),
                };
                println!("{} #{:<3} {node:<4} {what}", self.at(), self.request(*run));
            }
            _ => {}
        }
    }
}
