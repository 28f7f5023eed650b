//! What an event says about its node, and the same event told as one of an outer run: a
//! run nested in another's node reports to the outer run's observers under the outer
//! run's id, graph name and a node name of the outer run's.

use super::Event;
use crate::id::RunId;

/// Sets the run, graph and node of `$event`, one of the variants `$v`, or returns
/// `None` from the caller for another.
macro_rules! rename {
    ($event:ident, ($run:expr, $graph:expr, $node:expr), $($v:ident),* $(,)?) => {
        match &mut $event {
            $(Event::$v { run, graph, node, .. } => {
                (*run, *graph, *node) = ($run, $graph, $node);
            })*
            _ => return None,
        }
    };
}

impl<'a> Event<'a> {
    /// The node or map item, `node[index]`, the event is about. `None` for a run's start
    /// and end, a breaker's transition and an applied configuration.
    #[must_use]
    pub fn node(&self) -> Option<&'a str> {
        match *self {
            Event::RunStarted { .. }
            | Event::RunFinished { .. }
            | Event::BreakerTransition(_)
            | Event::ConfigApplied { .. } => None,
            Event::NodeStarted { node, .. }
            | Event::AttemptStarted { node, .. }
            | Event::AttemptFailed { node, .. }
            | Event::Timeout { node, .. }
            | Event::RetryScheduled { node, .. }
            | Event::BulkheadWaited { node, .. }
            | Event::RateLimitWaited { node, .. }
            | Event::HedgeStarted { node, .. }
            | Event::FaultInjected { node, .. }
            | Event::BreakerRejected { node, .. }
            | Event::FallbackUsed { node, .. }
            | Event::CompensationStarted { node, .. }
            | Event::CompensationFinished { node, .. }
            | Event::NodeFinished { node, .. } => Some(node),
        }
    }

    /// The map item's index, when the event is about an item of a map node.
    #[must_use]
    pub fn item(&self) -> Option<usize> {
        match *self {
            Event::AttemptStarted { item, .. }
            | Event::AttemptFailed { item, .. }
            | Event::Timeout { item, .. }
            | Event::RetryScheduled { item, .. }
            | Event::BulkheadWaited { item, .. }
            | Event::RateLimitWaited { item, .. }
            | Event::HedgeStarted { item, .. }
            | Event::FaultInjected { item, .. }
            | Event::BreakerRejected { item, .. }
            | Event::FallbackUsed { item, .. } => item,
            _ => None,
        }
    }

    /// The event as one of run `run` of graph `graph`, about node `node`. `None` for the
    /// events that belong to no node: a run's start and end, a breaker's transition.
    /// Every other field is kept.
    pub(crate) fn renamed<'b>(
        self,
        run: RunId,
        graph: Option<&'b str>,
        node: &'b str,
    ) -> Option<Event<'b>>
    where
        'a: 'b,
    {
        let mut event: Event<'b> = self;
        rename!(
            event,
            (run, graph, node),
            NodeStarted,
            AttemptStarted,
            AttemptFailed,
            Timeout,
            RetryScheduled,
            BulkheadWaited,
            RateLimitWaited,
            FaultInjected,
            HedgeStarted,
            BreakerRejected,
            FallbackUsed,
            CompensationStarted,
            CompensationFinished,
            NodeFinished
        );
        Some(event)
    }
}
