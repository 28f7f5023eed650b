//! A built graph drawn as a Mermaid flowchart or a Graphviz DOT digraph.
//!
//! Both read the compiled graph once and allocate only the text: nothing here runs when a
//! graph runs. A graph that names a policy set changed by a reload resolves the set
//! again first, as its next run would, and a set that no longer fits warns then. Each kind of node maps to a [`Shape`]; a new kind adds its arm in
//! [`shape`].

use std::time::Duration;

use super::{Graph, GraphInner, NodeKind};
use crate::observe::diagram::{Diagram, DiagramEdge, DiagramNode, Shape};
use crate::onion::{ResolvedPolicies, reload};
use crate::util::human::Human;

impl<I: 'static> Graph<I> {
    /// The graph as a [Mermaid](https://mermaid.js.org) flowchart, left to right, which
    /// GitHub and many documentation tools render from a ```` ```mermaid ```` block.
    ///
    /// One box per node, in declaration order, with its name and its policies in short
    /// labels: `timeout 300 ms`, `budget 2 s`, `retry 3` for at most 3 attempts,
    /// `breaker inventory`, `bulkhead name (n)`, `rate limit name`, `hedge`, `chaos`,
    /// `fallback`. A router is a diamond with an edge to each branch, labelled with the
    /// branch's key; a branch is a rounded box. A map node is a parallelogram labelled with
    /// its concurrency and completion rule, `map ×16 · all_succeed`, then the policies each
    /// of its items runs under: `map ×16 · all_succeed · timeout 50 ms · fallback`. A node
    /// that runs another graph is a double box labelled `subgraph`. An edge runs from each
    /// upstream to its downstream. Node `i` has the id `n{i}`. A node given a policy set shows
    /// the set as a run that starts now would take it: after the orchestrator's `apply`
    /// changed the set, the new one.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{BoxError, Fallback, Graph, Retry};
    ///
    /// # fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// let user = g.node("user").task(|_ctx, ()| async { Ok::<_, BoxError>(7_u64) });
    /// let stock = g
    ///     .node("stock")
    ///     .after(user)
    ///     .timeout(Duration::from_millis(300))
    ///     .retry(Retry::new(3))
    ///     .fallback(Fallback::value(0_u32))
    ///     .task(|_ctx, _user| async { Ok::<_, BoxError>(3_u32) });
    /// let _dispatch = g
    ///     .router("dispatch")
    ///     .after(stock)
    ///     .select(|_input, stock| if **stock > 0 { "ship" } else { "shortage" })
    ///     .branch("ship", |b| b.task(|_ctx, _| async { Ok::<_, BoxError>("shipped") }))
    ///     .branch("shortage", |b| b.task(|_ctx, _| async { Ok::<_, BoxError>("later") }))
    ///     .finish();
    /// let mermaid = g.build()?.to_mermaid();
    /// assert!(mermaid.starts_with("flowchart LR\n"));
    /// assert!(mermaid.contains(r#"n1["stock<br/>timeout 300 ms · retry 3 · fallback"]"#));
    /// assert!(mermaid.contains(r#"n2{"dispatch"}"#));
    /// assert!(mermaid.contains("n0 --> n1"));
    /// assert!(mermaid.contains(r#"n2 -->|"ship"| n3"#));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn to_mermaid(&self) -> String {
        diagram(&self.inner).mermaid()
    }

    /// The graph as a [Graphviz](https://graphviz.org) DOT digraph, left to right, for
    /// `dot -Tsvg`. The same nodes, labels and edges as [`to_mermaid`](Self::to_mermaid): a
    /// task is a box, a router a diamond, a branch a rounded box, a map node a stack of
    /// boxes drawn as `box3d`, and a node that runs another graph a box with a double
    /// border.
    ///
    /// ```
    /// use baton_graph::{BoxError, Graph};
    ///
    /// # fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// let user = g.node("user").task(|_ctx, ()| async { Ok::<_, BoxError>(7_u64) });
    /// g.node("notify").after(user).task(|_ctx, _user| async { Ok::<_, BoxError>(()) });
    /// g.name("checkout");
    /// let dot = g.build()?.to_dot();
    /// assert!(dot.starts_with("digraph \"checkout\" {"));
    /// assert!(dot.contains("n1 [label=\"notify\", shape=box];"));
    /// assert!(dot.contains("n0 -> n1;"));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn to_dot(&self) -> String {
        diagram(&self.inner).dot()
    }
}

/// How a node of `kind` is drawn.
fn shape(kind: &NodeKind) -> Shape {
    match kind {
        NodeKind::Task => Shape::Task,
        NodeKind::Router { .. } => Shape::Router,
        NodeKind::Branch { .. } => Shape::Branch,
        NodeKind::Map { .. } => Shape::Map,
        NodeKind::Subgraph => Shape::Subgraph,
    }
}

/// The diagram of `graph`: its nodes with their labels, then its edges. A branch's edge
/// comes from its router, labelled with its key; every other edge from an upstream.
fn diagram<I: 'static>(graph: &GraphInner<I>) -> Diagram {
    let meta = &graph.meta;
    let mut nodes = Vec::with_capacity(meta.len());
    let mut edges = Vec::new();
    // A node that names a policy set is drawn with the set as a run starting now takes it.
    let reloaded = graph
        .reload
        .as_ref()
        .and_then(|r| r.current(&graph.orchestrator));
    for id in 0..meta.len() as u32 {
        let kind = graph.kind(id);
        let mut labels = Vec::new();
        match kind {
            NodeKind::Map {
                concurrency,
                completion,
            } => labels.push(format!("map ×{concurrency} · {}", completion.as_str())),
            NodeKind::Subgraph => labels.push("subgraph".to_owned()),
            _ => {}
        }
        // A map node's policies are its items': they follow its map label.
        let policy = graph.policy(id).or_else(|| graph.item_policy(id));
        let policy = policy.map(|p| reload::current(p, reloaded.as_deref()));
        labels.extend(policy.map(policy_labels).unwrap_or_default());
        if graph.task(id).is_some_and(|task| task.has_fallback()) {
            labels.push("fallback".to_owned());
        }
        nodes.push(DiagramNode {
            name: meta.name(id).to_owned(),
            shape: shape(kind),
            labels,
        });
        match kind {
            NodeKind::Branch { .. } => {}
            NodeKind::Router { branches } => {
                push_upstream_edges(meta.upstreams(id), id, &mut edges);
                edges.extend(branches.iter().map(|(key, branch)| DiagramEdge {
                    from: id as usize,
                    to: *branch as usize,
                    label: Some(key.to_string()),
                }));
            }
            NodeKind::Task | NodeKind::Map { .. } | NodeKind::Subgraph => {
                push_upstream_edges(meta.upstreams(id), id, &mut edges);
            }
        }
    }
    Diagram {
        title: graph.name.as_deref().map(str::to_owned),
        nodes,
        edges,
    }
}

fn push_upstream_edges(upstreams: &[u32], id: u32, edges: &mut Vec<DiagramEdge>) {
    edges.extend(upstreams.iter().map(|&up| DiagramEdge {
        from: up as usize,
        to: id as usize,
        label: None,
    }));
}

/// `d` in whole seconds when it is some, as in `2 s`; else as messages write it, as in
/// `300 ms`.
fn short(d: Duration) -> String {
    if d >= Duration::from_secs(1) && d.subsec_nanos() == 0 {
        format!("{} s", d.as_secs())
    } else {
        Human(d).to_string()
    }
}

/// A node's policies in short labels, in the onion's order from the attempt outward.
fn policy_labels(p: &ResolvedPolicies) -> Vec<String> {
    let mut labels = Vec::new();
    if let Some(timeout) = p.declared.timeout {
        labels.push(format!("timeout {}", short(timeout)));
    }
    if let Some(limiter) = &p.rate_limit {
        labels.push(format!("rate limit {}", limiter.name()));
    }
    if let Some(bulkhead) = &p.bulkhead {
        labels.push(format!(
            "bulkhead {} ({})",
            bulkhead.name(),
            bulkhead.max_concurrent()
        ));
    }
    if p.declared.chaos.is_some() {
        labels.push("chaos".to_owned());
    }
    if p.declared.hedge.is_some() {
        labels.push("hedge".to_owned());
    }
    if let Some(retry) = &p.declared.retry {
        labels.push(format!("retry {}", retry.max_attempts));
    }
    if let Some(budget) = p.declared.budget {
        labels.push(format!("budget {}", short(budget)));
    }
    if let Some(breaker) = &p.breaker {
        labels.push(format!("breaker {}", breaker.name()));
    }
    labels
}
