//! How an [`Event`] reads: its one-line `Display`.

use std::fmt;
use std::time::Duration;

use super::Event;
use crate::util::human::Human;

/// The text of a `HedgeStarted` or `FaultInjected` event.
fn strategy(event: &Event<'_>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match event {
        Event::HedgeStarted {
            node,
            attempt,
            after,
            ..
        } => {
            let after = Human(*after);
            write!(f, "`{node}` hedge attempt {attempt} after {after}")
        }
        Event::FaultInjected {
            node,
            attempt,
            latency,
            error,
            ..
        } => fault_injected(f, node, *attempt, *latency, *error),
        _ => unreachable!("called for hedge and fault events only"),
    }
}

/// The text of a compensation's event.
fn compensation(event: &Event<'_>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match event {
        Event::CompensationStarted { node, .. } => write!(f, "`{node}` compensation started"),
        Event::CompensationFinished {
            node,
            outcome,
            attempts,
            duration,
            ..
        } => write!(
            f,
            "`{node}` compensation {outcome} after {} ({attempts} attempts)",
            Human(*duration)
        ),
        _ => unreachable!("called for compensation events only"),
    }
}

/// The text of a `FaultInjected` event.
fn fault_injected(
    f: &mut fmt::Formatter<'_>,
    node: &str,
    attempt: u32,
    latency: Duration,
    error: bool,
) -> fmt::Result {
    let error = if error { " and an error" } else { "" };
    write!(
        f,
        "`{node}` attempt {attempt}: injected {} latency{error}",
        Human(latency)
    )
}

/// The text of a `BulkheadWaited` event.
fn bulkhead_waited(
    f: &mut fmt::Formatter<'_>,
    node: &str,
    attempt: u32,
    bulkhead: &str,
    waited: Duration,
    acquired: bool,
) -> fmt::Result {
    let got = if acquired { "got" } else { "gave up on" };
    let waited = Human(waited);
    write!(
        f,
        "`{node}` attempt {attempt} {got} bulkhead `{bulkhead}` after {waited}"
    )
}

/// The text of a `RateLimitWaited` event.
fn rate_limit_waited(
    f: &mut fmt::Formatter<'_>,
    node: &str,
    attempt: u32,
    limiter: &str,
    wait: Duration,
    admitted: bool,
) -> fmt::Result {
    let wait = Human(wait);
    if admitted {
        write!(
            f,
            "`{node}` attempt {attempt} got rate limiter `{limiter}` after {wait}"
        )
    } else {
        write!(
            f,
            "`{node}` attempt {attempt} refused by rate limiter `{limiter}` (next permit in {wait})"
        )
    }
}

impl fmt::Display for Event<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::RunStarted { run, graph, nodes } => {
                write!(f, "run {run}{} started ({nodes} nodes)", Of(*graph))
            }
            Event::RunFinished { run, graph, report } => write!(
                f,
                "run {run}{} finished in {}: {}",
                Of(*graph),
                Human(report.makespan()),
                report.counts()
            ),
            Event::NodeStarted { node, .. } => write!(f, "`{node}` started"),
            Event::AttemptStarted {
                node,
                attempt,
                budget,
                ..
            } => match budget {
                Some(b) => write!(
                    f,
                    "`{node}` attempt {attempt} started (budget {})",
                    Human(*b)
                ),
                None => write!(f, "`{node}` attempt {attempt} started"),
            },
            Event::AttemptFailed {
                node,
                attempt,
                error,
                ..
            } => write!(f, "`{node}` attempt {attempt} failed: {error}"),
            Event::Timeout {
                node,
                attempt,
                limit,
                ..
            } => write!(f, "`{node}` attempt {attempt} cut after {}", Human(*limit)),
            Event::RetryScheduled {
                node,
                attempt,
                delay,
                remaining,
                ..
            } => match remaining {
                Some(r) => write!(
                    f,
                    "`{node}` attempt {attempt} in {} ({} of budget left)",
                    Human(*delay),
                    Human(*r)
                ),
                None => write!(f, "`{node}` attempt {attempt} in {}", Human(*delay)),
            },
            Event::BulkheadWaited {
                node,
                attempt,
                bulkhead,
                waited,
                acquired,
                ..
            } => bulkhead_waited(f, node, *attempt, bulkhead, *waited, *acquired),
            Event::RateLimitWaited {
                node,
                attempt,
                limiter,
                wait,
                admitted,
                ..
            } => rate_limit_waited(f, node, *attempt, limiter, *wait, *admitted),
            Event::HedgeStarted { .. } | Event::FaultInjected { .. } => strategy(self, f),
            Event::BreakerRejected {
                node,
                breaker,
                state,
                ..
            } => write!(f, "`{node}` rejected by breaker `{breaker}` ({state})"),
            Event::BreakerTransition(t) => write!(f, "{t}"),
            Event::ConfigApplied { changes } => config_applied(f, changes),
            Event::FallbackUsed { node, error, .. } => {
                write!(f, "`{node}` fell back after: {error}")
            }
            Event::CompensationStarted { .. } | Event::CompensationFinished { .. } => {
                compensation(self, f)
            }
            Event::NodeFinished {
                node,
                outcome,
                duration,
                ..
            } => write!(f, "`{node}` {outcome} after {}", Human(*duration)),
        }
    }
}

/// What an applied configuration changed: the policies it added or updated.
fn config_applied(f: &mut fmt::Formatter<'_>, changes: &[super::ConfigChange]) -> fmt::Result {
    let changed = changes
        .iter()
        .filter(|c| c.action != super::ConfigAction::Unchanged)
        .map(ToString::to_string)
        .collect::<Vec<_>>();
    match changed.is_empty() {
        true => write!(f, "configuration applied: nothing changed"),
        false => write!(f, "configuration applied: {}", changed.join(", ")),
    }
}

/// ` of `name`` for a named graph, nothing otherwise.
struct Of<'a>(Option<&'a str>);

impl fmt::Display for Of<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(graph) => write!(f, " of `{graph}`"),
            None => Ok(()),
        }
    }
}
