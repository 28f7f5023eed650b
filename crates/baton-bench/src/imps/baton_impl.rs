//! baton: the shape as a `Graph<()>` of no-op nodes, built once and run many times.

use std::future::{Ready, ready};
use std::sync::Arc;

use baton::{BoxError, Ctx, Graph, Node};

use crate::probe::Probe;
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

/// Builds `dag` as a baton graph. A node with one upstream takes a `Node`, two a tuple,
/// more a `Vec<Node<()>>` (the fan-in form).
pub(crate) fn build(dag: &Dag, probe: &Probe) -> Graph<()> {
    let mut g = Graph::<()>::builder();
    let mut handles: Vec<Node<()>> = Vec::with_capacity(dag.len());
    for i in 0..dag.len() {
        let id = i as u32;
        let name = format!("n{i}");
        let h = match *dag.ups(i) {
            [] => g.node(name).task(body::<()>(probe, id)),
            [a] => g
                .node(name)
                .after(handles[a as usize])
                .task(body::<Arc<()>>(probe, id)),
            [a, b] => g
                .node(name)
                .after((handles[a as usize], handles[b as usize]))
                .task(body::<(Arc<()>, Arc<()>)>(probe, id)),
            ref ups => g
                .node(name)
                .after(ups.iter().map(|&u| handles[u as usize]).collect::<Vec<_>>())
                .task(body::<Vec<Arc<()>>>(probe, id)),
        };
        handles.push(h);
    }
    match g.build() {
        Ok(graph) => graph,
        Err(e) => panic!("the benchmark graph is valid: {e}"),
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
