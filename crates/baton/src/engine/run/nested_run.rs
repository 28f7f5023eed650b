//! A run nested in a node of another run by `NodeBuilder::subgraph`: its events reach the
//! outer run's observers, told as the outer run's, and its report is kept for the node's
//! entry, also when the node's attempt is cut and the inner run with it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::future::{Run, RunError};
use super::options::RunOptions;
use super::state::RunState;
use crate::engine::graph::Graph;
use crate::id::RunId;
use crate::observe::Event;
use crate::orchestrator::{Orchestrator, deliver};
use crate::report::{Detail, Report, RunRecords};

/// Where a nested run's events go beside its own orchestrator's observers: the outer
/// run's, and through it those of the runs it is nested in.
pub(in crate::engine) struct Parent {
    /// The outer run's orchestrator.
    orchestrator: Orchestrator,
    /// Whether its observers get the events here: not when a run further out has the
    /// same observers, which get the events there, once.
    delivers: bool,
    run: RunId,
    graph: Option<Box<str>>,
    /// The outer node's name, which prefixes the nested run's node names.
    node: Box<str>,
    /// The outer run's own parent, when it is nested too.
    up: Option<Arc<Parent>>,
}

/// A nested run's link to the run it is nested in.
pub(in crate::engine) struct Nesting {
    pub(in crate::engine) parent: Arc<Parent>,
    /// Whether the nested run's own orchestrator's observers get its events: not when
    /// a run it is nested in has the same observers.
    pub(in crate::engine) delivers_own: bool,
}

impl Parent {
    /// Whether `orchestrator` is this run's or that of a run it is nested in.
    fn reaches(&self, orchestrator: &Orchestrator) -> bool {
        self.orchestrator.same(orchestrator)
            || self.up.as_ref().is_some_and(|up| up.reaches(orchestrator))
    }

    /// Tells `event` of a nested run as the outer run's, about `node/name`; a run's start
    /// and end are not told, as the outer node's start and end frame the nested run.
    pub(in crate::engine) fn forward(&self, event: &Event<'_>) {
        let Some(name) = event.node() else {
            return;
        };
        let name = format!("{}/{name}", self.node);
        let Some(event) = event.renamed(self.run, self.graph.as_deref(), &name) else {
            return;
        };
        if self.delivers {
            deliver(self.orchestrator.observers(), &event);
        }
        if let Some(up) = &self.up {
            up.forward(&event);
        }
    }
}

impl<I: Send + Sync + 'static> RunState<I> {
    /// The link that makes a run nested in node `node` of this run; `None` when no
    /// observer would get its events here.
    fn parent_for(&self, node: u32) -> Option<Arc<Parent>> {
        if !self.observed() {
            return None;
        }
        let nesting = self.nesting();
        Some(Arc::new(Parent {
            orchestrator: self.graph.orchestrator.clone(),
            delivers: nesting.is_none_or(|n| n.delivers_own),
            run: self.core.run_id(),
            graph: self.graph.name.clone(),
            node: self.graph.meta.name(node).into(),
            up: nesting.map(|n| Arc::clone(&n.parent)),
        }))
    }
}

/// A subgraph node's inner run: resolves to its result, and keeps its report for the
/// node's entry when it ends or when it is dropped, as when the attempt is cut or the outer
/// run cancelled. The report then says what the inner run did until then.
pub(crate) struct NestedRun<I: Send + Sync + 'static, J: Send + Sync + 'static> {
    run: Option<Run<J>>,
    outer: Arc<RunState<I>>,
    node: u32,
    polled: bool,
}

impl<I: Send + Sync + 'static, J: Send + Sync + 'static> NestedRun<I, J> {
    /// Starts a run of `graph` nested in node `node` of `outer`.
    pub(in crate::engine) fn new(
        outer: Arc<RunState<I>>,
        node: u32,
        graph: &Graph<J>,
        input: J,
        options: RunOptions,
    ) -> Self {
        let parent = outer.parent_for(node);
        let run = Run::new(Arc::clone(&graph.inner), input, options, parent.is_some());
        if let Some(parent) = parent {
            let delivers_own = !parent.reaches(&graph.inner.orchestrator);
            run.state.set_nesting(Nesting {
                parent,
                delivers_own,
            });
        }
        NestedRun {
            run: Some(run),
            outer,
            node,
            polled: false,
        }
    }

    fn keep(&self, report: Report) {
        self.outer.put_detail(self.node, Detail::Inner(report));
    }
}

impl<I: Send + Sync + 'static, J: Send + Sync + 'static> Future for NestedRun<I, J> {
    type Output = Result<Report, RunError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // `NestedRun` is `Unpin`: `Run` is.
        let this = self.get_mut();
        let Some(run) = this.run.as_mut() else {
            unreachable!("a nested run is not polled after it ended");
        };
        this.polled = true;
        let result = std::task::ready!(Pin::new(run).poll(cx));
        this.run = None;
        let report = match &result {
            Ok(report) => Some(report.clone()),
            Err(error) => error.report().cloned(),
        };
        if let Some(report) = report {
            this.keep(report);
        }
        Poll::Ready(result)
    }
}

impl<I: Send + Sync + 'static, J: Send + Sync + 'static> Drop for NestedRun<I, J> {
    /// Cut before it ended: dropping the run cancels it, and its nodes running or pending
    /// end `Cancelled`. Its report is kept as it stands.
    fn drop(&mut self) {
        let Some(run) = self.run.take() else {
            return;
        };
        let state = Arc::clone(&run.state);
        drop(run);
        if self.polled {
            self.keep(Report::new(state as Arc<dyn RunRecords>));
        }
    }
}
