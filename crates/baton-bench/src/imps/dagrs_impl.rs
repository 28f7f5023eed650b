//! dagrs 0.9, used as its README and `compute_dag` example show: a `DefaultNode` per node
//! with an `Action`, `add_edge(from, [to..])`, `set_env`, `async_start`. A node receives
//! from every in-channel before running (that is how dagrs orders nodes: it spawns every
//! node of a block at once) and broadcasts its output to its out-channels.
//!
//! Rebuilt for every run (as dagrs' own `run_overhead` benchmark does).

use std::sync::Arc;

use dagrs::{
    Action, Content, DefaultNode, EnvVar, Graph, InChannels, Node, NodeTable, OutChannels, Output,
};

use crate::probe::Probe;
use crate::shapes::Dag;

pub(crate) type Prepared = Graph;

struct NoOp {
    id: u32,
    probe: Probe,
}

#[dagrs::async_trait::async_trait]
impl Action for NoOp {
    async fn run(
        &self,
        input: &mut InChannels,
        output: &mut OutChannels,
        _env: Arc<EnvVar>,
    ) -> Output {
        let _ = input.map(|content| content.is_ok()).await;
        self.probe.step(self.id).await;
        let _ = output.broadcast(Content::new(())).await;
        Output::empty()
    }
}

/// Builds `dag` as a dagrs graph.
pub(crate) fn build(dag: &Dag, probe: &Probe) -> Graph {
    let mut table = NodeTable::default();
    let nodes: Vec<DefaultNode> = (0..dag.len())
        .map(|i| {
            let action = NoOp {
                id: i as u32,
                probe: probe.clone(),
            };
            DefaultNode::with_action(format!("n{i}"), action, &mut table)
        })
        .collect();
    let ids: Vec<_> = nodes.iter().map(|node| node.id()).collect();
    let mut graph = Graph::new();
    for node in nodes {
        if let Err(e) = graph.add_node(node) {
            panic!("dagrs add_node: {e:?}");
        }
    }
    for (i, &from) in ids.iter().enumerate() {
        let downs = dag.downs(i);
        if !downs.is_empty()
            && let Err(e) = graph.add_edge(from, downs.iter().map(|&d| ids[d as usize]))
        {
            panic!("dagrs add_edge: {e:?}");
        }
    }
    graph.set_env(EnvVar::new(table));
    graph
}

/// Runs the graph (once).
pub(crate) async fn run(graph: &mut Graph) -> Result<(), String> {
    graph
        .async_start()
        .await
        .map(|_| ())
        .map_err(|e| format!("dagrs run failed: {e:?}"))
}
