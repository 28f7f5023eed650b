//! baton: the shape as a `Graph<()>` of no-op nodes, built once and run many times.

use std::future::{Future, Ready, ready};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use baton_graph::{
    BoxError, CircuitBreaker, Ctx, Fallback, Graph, Node, NodeBuilder, Retry, run::StartMode,
};

use crate::probe::{Probe, Step};
use crate::shapes::Dag;

pub(crate) type Prepared = Graph<()>;

/// The no-op body for a node whose task receives `V`.
fn body<V>(probe: &Probe, id: u32) -> impl Fn(Ctx<()>, V) -> Ready<Result<(), BoxError>> + use<V> {
    let probe = probe.clone();
    move |_ctx, _values| {
        probe.hit(id);
        ready(Ok(()))
    }
}

/// The body that waits once (`--waits`), for a node whose task receives `V`.
fn waiting_body<V>(probe: &Probe, id: u32) -> impl Fn(Ctx<()>, V) -> StepOk + use<V> {
    let probe = probe.clone();
    move |_ctx, _values| StepOk(probe.step(id))
}

/// [`Step`] as a task's future.
struct StepOk(Step);

impl Future for StepOk {
    type Output = Result<(), BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx).map(Ok)
    }
}

/// [`build`] with `$body` making each node's task.
macro_rules! build_with {
    ($dag:expr, $probe:expr, $policies:expr, $start:expr, $body:ident) => {{
        let (dag, probe, policies, start) = ($dag, $probe, $policies, $start);
        let mut g = Graph::<()>::builder();
        g.start_mode(start);
        let breaker = match CircuitBreaker::builder("downstream")
            .consecutive_failures(5)
            .build()
        {
            Ok(b) => b,
            Err(e) => panic!("the benchmark breaker is valid: {e}"),
        };
        let breaker = policies.then_some(&breaker);
        let mut handles: Vec<Node<()>> = Vec::with_capacity(dag.len());
        // Names ("n0", "n1", ...) are written into one reused buffer, as code that builds a
        // large graph would: `node` copies a `&str` into the graph, so a name costs no
        // allocation of its own.
        let mut name = String::new();
        let mut digits = itoa::Buffer::new();
        for i in 0..dag.len() {
            let id = i as u32;
            name.clear();
            name.push('n');
            name.push_str(digits.format(i));
            let name = name.as_str();
            let h = match *dag.ups(i) {
                [] => with(g.node(name), breaker).task($body::<()>(probe, id)),
                [a] => with(g.node(name).after(handles[a as usize]), breaker)
                    .task($body::<Arc<()>>(probe, id)),
                [a, b] => with(
                    g.node(name)
                        .after((handles[a as usize], handles[b as usize])),
                    breaker,
                )
                .task($body::<(Arc<()>, Arc<()>)>(probe, id)),
                ref ups => with(
                    g.node(name)
                        .after(ups.iter().map(|&u| handles[u as usize]).collect::<Vec<_>>()),
                    breaker,
                )
                .task($body::<Vec<Arc<()>>>(probe, id)),
            };
            handles.push(h);
        }
        match g.build() {
            Ok(graph) => graph,
            Err(e) => panic!("the benchmark graph is valid: {e}"),
        }
    }};
}

/// Builds `dag` as a baton graph. A node with one upstream takes a `Node`, two a tuple,
/// more a `Vec<Node<()>>` (the fan-in form). With `policies`, every node has a timeout, a
/// retry, the graph's one circuit breaker and a fallback (`Imp::BatonPolicies`); `start` is
/// the graph's start mode (`Imp::BatonSpread`: `StartMode::Spread`; the others: the default).
pub(crate) fn build(dag: &Dag, probe: &Probe, policies: bool, start: StartMode) -> Graph<()> {
    if probe.waits() {
        build_with!(dag, probe, policies, start, waiting_body)
    } else {
        build_with!(dag, probe, policies, start, body)
    }
}

/// With a breaker (`Imp::BatonPolicies`), `b` gets every policy, idle for a no-op task.
fn with<'g, U>(
    b: NodeBuilder<'g, (), U, ()>,
    breaker: Option<&CircuitBreaker>,
) -> NodeBuilder<'g, (), U, ()> {
    match breaker {
        Some(breaker) => b
            .timeout(Duration::from_secs(1))
            .retry(Retry::new(3))
            .breaker(breaker)
            .fallback(Fallback::value(())),
        None => b,
    }
}

/// Runs the graph once (the report is built and dropped, as every run does).
pub(crate) async fn run(graph: &Graph<()>) -> Result<(), String> {
    match graph.run(()).await {
        Ok(report) => {
            debug_assert_eq!(report.len(), graph.len());
            Ok(())
        }
        Err(e) => Err(format!("baton run failed: {e}")),
    }
}
