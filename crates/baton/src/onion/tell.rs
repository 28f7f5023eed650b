//! What the onion reports about an attempt, counted and told the same way by every host: a
//! graph node, a map item, a pipeline call. The hosts differ only in whom the events name
//! and where the counts and events go, which [`Teller`] says.

use std::time::Duration;

use crate::error::NodeError;
use crate::id::RunId;
use crate::observe::Event;
use crate::observe::log;
use crate::observe::stats::Local;
use crate::policy::breaker::BreakerState;

/// Whom an attempt's events name: the run, its graph, the node or item, and the item's
/// index.
pub(crate) struct Subject<'a> {
    pub(crate) run: RunId,
    pub(crate) graph: Option<&'a str>,
    pub(crate) node: &'a str,
    pub(crate) item: Option<usize>,
}

/// Where a host's counts and events go.
pub(crate) trait Teller {
    /// This thread's stripe of the orchestrator's counters; `None` without an
    /// orchestrator.
    fn stripe(&self) -> Option<Local<'_>>;
    /// Whether an observer hears the events.
    fn observed(&self) -> bool;
    /// Whom the events name; called only when [`observed`](Self::observed).
    fn subject(&self) -> Subject<'_>;
    /// Tells `event` to the observers.
    fn tell(&self, event: &Event<'_>);
}

fn count(t: &(impl Teller + ?Sized), counter: impl FnOnce(Local<'_>)) {
    if let Some(stripe) = t.stripe() {
        counter(stripe);
    }
}

/// Attempt `attempt` started with `budget` before its cut: counted, as a retry if not the
/// first, and told.
pub(crate) fn attempt_started(t: &(impl Teller + ?Sized), attempt: u32, budget: Option<Duration>) {
    count(t, |c| {
        c.attempts().incr();
        if attempt > 1 {
            c.retries().incr();
        }
    });
    if t.observed() {
        let Subject {
            run,
            graph,
            node,
            item,
        } = t.subject();
        t.tell(&Event::AttemptStarted {
            run,
            graph,
            node,
            item,
            attempt,
            budget,
        });
    }
}

/// Attempt `attempt` failed with `error`: logged under `name` and told.
pub(crate) fn attempt_failed(
    t: &(impl Teller + ?Sized),
    name: &str,
    attempt: u32,
    error: &NodeError,
) {
    log::attempt_failed(name, attempt, error);
    if t.observed() {
        let Subject {
            run,
            graph,
            node,
            item,
        } = t.subject();
        t.tell(&Event::AttemptFailed {
            run,
            graph,
            node,
            item,
            attempt,
            error,
        });
    }
}

/// Attempt `attempt` was cut after `limit`: counted as a timeout and told.
pub(crate) fn attempt_cut(t: &(impl Teller + ?Sized), attempt: u32, limit: Duration) {
    count(t, |c| c.timeouts().incr());
    if t.observed() {
        let Subject {
            run,
            graph,
            node,
            item,
        } = t.subject();
        t.tell(&Event::Timeout {
            run,
            graph,
            node,
            item,
            attempt,
            limit,
        });
    }
}

/// Attempt `attempt` comes after `delay`, with `remaining` before the deadline: told.
pub(crate) fn retry_scheduled(
    t: &(impl Teller + ?Sized),
    attempt: u32,
    delay: Duration,
    remaining: Option<Duration>,
) {
    if t.observed() {
        let Subject {
            run,
            graph,
            node,
            item,
        } = t.subject();
        t.tell(&Event::RetryScheduled {
            run,
            graph,
            node,
            item,
            attempt,
            delay,
            remaining,
        });
    }
}

/// Attempt `attempt` waited `waited` for bulkhead `bulkhead` and got a permit or not:
/// told.
pub(crate) fn permit_waited(
    t: &(impl Teller + ?Sized),
    attempt: u32,
    bulkhead: &str,
    waited: Duration,
    acquired: bool,
) {
    if t.observed() {
        let Subject {
            run,
            graph,
            node,
            item,
        } = t.subject();
        t.tell(&Event::BulkheadWaited {
            run,
            graph,
            node,
            item,
            attempt,
            bulkhead,
            waited,
            acquired,
        });
    }
}

/// Attempt `attempt` waited `wait` for rate limiter `limiter`, admitted or refused: told,
/// and a refusal is counted.
pub(crate) fn rate_limited(
    t: &(impl Teller + ?Sized),
    attempt: u32,
    limiter: &str,
    wait: Duration,
    admitted: bool,
) {
    if !admitted {
        count(t, |c| c.rate_limited().incr());
    }
    if t.observed() {
        let Subject {
            run,
            graph,
            node,
            item,
        } = t.subject();
        t.tell(&Event::RateLimitWaited {
            run,
            graph,
            node,
            item,
            attempt,
            limiter,
            wait,
            admitted,
        });
    }
}

/// Fault injection gave attempt `attempt` a latency and maybe an error: counted and told.
pub(crate) fn fault_injected(
    t: &(impl Teller + ?Sized),
    attempt: u32,
    latency: Duration,
    error: bool,
) {
    count(t, |c| c.faults_injected().incr());
    if t.observed() {
        let Subject {
            run,
            graph,
            node,
            item,
        } = t.subject();
        t.tell(&Event::FaultInjected {
            run,
            graph,
            node,
            item,
            attempt,
            latency,
            error,
        });
    }
}

/// Hedge `attempt` started `after` the attempt before it: counted and told.
pub(crate) fn hedged(t: &(impl Teller + ?Sized), attempt: u32, after: Duration) {
    count(t, |c| c.hedges().incr());
    if t.observed() {
        let Subject {
            run,
            graph,
            node,
            item,
        } = t.subject();
        t.tell(&Event::HedgeStarted {
            run,
            graph,
            node,
            item,
            attempt,
            after,
        });
    }
}

/// Circuit breaker `breaker`, in `state`, rejected the series: counted and told.
pub(crate) fn rejected(t: &(impl Teller + ?Sized), breaker: &str, state: BreakerState) {
    count(t, |c| c.breaker_rejections().incr());
    if t.observed() {
        let Subject {
            run,
            graph,
            node,
            item,
        } = t.subject();
        t.tell(&Event::BreakerRejected {
            run,
            graph,
            node,
            item,
            breaker,
            state,
        });
    }
}

/// The fallback ran after `error`: counted and told.
pub(crate) fn fell_back(t: &(impl Teller + ?Sized), error: &NodeError) {
    count(t, |c| c.fallbacks().incr());
    if t.observed() {
        let Subject {
            run,
            graph,
            node,
            item,
        } = t.subject();
        t.tell(&Event::FallbackUsed {
            run,
            graph,
            node,
            item,
            error,
        });
    }
}
