//! A graph drawn as text: Mermaid and Graphviz DOT, from a description of its nodes and
//! edges that the engine fills in.
//!
//! The description knows no engine type. A node has a name, a [`Shape`] and short policy
//! labels; an edge joins two nodes and may carry a label, such as a router's branch key.
//! A new kind of node adds a [`Shape`] variant and its two spellings below, and nothing
//! else.

use std::fmt::Write as _;

/// How a node is drawn: one variant per kind of node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// A node with a task: a rectangle.
    Task,
    /// A router, which picks one of its branches: a diamond.
    Router,
    /// A branch of a router: a rounded rectangle.
    Branch,
    /// A map node, one item per element of a list: a stack of boxes in DOT, a
    /// parallelogram in Mermaid.
    Map,
    /// A node that runs another graph: a box with a double border.
    Subgraph,
}

impl Shape {
    /// The Mermaid brackets around a label.
    fn mermaid(self) -> (&'static str, &'static str) {
        match self {
            Shape::Task => ("[", "]"),
            Shape::Router => ("{", "}"),
            Shape::Branch => ("(", ")"),
            Shape::Map => ("[/", "/]"),
            Shape::Subgraph => ("[[", "]]"),
        }
    }

    /// The Graphviz attributes of the node.
    fn dot(self) -> &'static str {
        match self {
            Shape::Task => "shape=box",
            Shape::Router => "shape=diamond",
            Shape::Branch => "shape=box, style=rounded",
            Shape::Map => "shape=box3d",
            Shape::Subgraph => "shape=box, peripheries=2",
        }
    }
}

/// One node of a diagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DiagramNode {
    pub(crate) name: String,
    pub(crate) shape: Shape,
    /// Short policy labels, such as `timeout 300 ms` or `breaker inventory`.
    pub(crate) labels: Vec<String>,
}

/// One edge of a diagram, from node index `from` to node index `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DiagramEdge {
    pub(crate) from: usize,
    pub(crate) to: usize,
    /// Written on the edge: a router's branch key.
    pub(crate) label: Option<String>,
}

/// A graph's nodes and edges, ready to be written as Mermaid or DOT.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Diagram {
    pub(crate) title: Option<String>,
    pub(crate) nodes: Vec<DiagramNode>,
    pub(crate) edges: Vec<DiagramEdge>,
}

impl Diagram {
    /// A Mermaid flowchart, left to right. Node `i` has the id `n{i}`; its label is its
    /// name, then its policy labels on a second line.
    pub(crate) fn mermaid(&self) -> String {
        let mut out = String::new();
        if let Some(title) = &self.title {
            let _ = writeln!(out, "---\ntitle: {}\n---", mermaid_text(title));
        }
        out.push_str("flowchart LR\n");
        for (i, node) in self.nodes.iter().enumerate() {
            let (open, close) = node.shape.mermaid();
            let mut label = mermaid_text(&node.name);
            if !node.labels.is_empty() {
                label.push_str("<br/>");
                label.push_str(&mermaid_text(&node.labels.join(" · ")));
            }
            let _ = writeln!(out, "    n{i}{open}\"{label}\"{close}");
        }
        for edge in &self.edges {
            match &edge.label {
                Some(label) => {
                    let label = mermaid_text(label);
                    let _ = writeln!(out, "    n{} -->|\"{label}\"| n{}", edge.from, edge.to);
                }
                None => {
                    let _ = writeln!(out, "    n{} --> n{}", edge.from, edge.to);
                }
            }
        }
        out
    }

    /// A Graphviz `digraph`, left to right. Node `i` has the id `n{i}`; its label is its
    /// name, then its policy labels on a second line.
    pub(crate) fn dot(&self) -> String {
        let mut out = String::new();
        let title = self.title.as_deref().unwrap_or("graph");
        let _ = writeln!(out, "digraph \"{}\" {{", dot_text(title));
        out.push_str("    rankdir=LR;\n    node [fontname=\"Helvetica\"];\n    edge [fontname=\"Helvetica\"];\n");
        for (i, node) in self.nodes.iter().enumerate() {
            let mut label = dot_text(&node.name);
            if !node.labels.is_empty() {
                label.push_str("\\n");
                label.push_str(&dot_text(&node.labels.join(" · ")));
            }
            let shape = node.shape.dot();
            let _ = writeln!(out, "    n{i} [label=\"{label}\", {shape}];");
        }
        for edge in &self.edges {
            match &edge.label {
                Some(label) => {
                    let label = dot_text(label);
                    let _ = writeln!(
                        out,
                        "    n{} -> n{} [label=\"{label}\"];",
                        edge.from, edge.to
                    );
                }
                None => {
                    let _ = writeln!(out, "    n{} -> n{};", edge.from, edge.to);
                }
            }
        }
        out.push_str("}\n");
        out
    }
}

/// `text` safe inside a quoted Mermaid label: quotes and markup characters as entity
/// codes, which Mermaid decodes.
fn mermaid_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => out.push_str("#quot;"),
            '<' => out.push_str("#lt;"),
            '>' => out.push_str("#gt;"),
            '#' => out.push_str("#35;"),
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// `text` safe inside a quoted DOT string.
fn dot_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Diagram {
        let node = |name: &str, shape, labels: &[&str]| DiagramNode {
            name: name.to_owned(),
            shape,
            labels: labels.iter().map(|l| (*l).to_owned()).collect(),
        };
        Diagram {
            title: None,
            nodes: vec![
                node("say \"hi\" <b>", Shape::Task, &["timeout 1 s"]),
                node("pick", Shape::Router, &[]),
                node("a\\b", Shape::Branch, &[]),
            ],
            edges: vec![
                DiagramEdge {
                    from: 0,
                    to: 1,
                    label: None,
                },
                DiagramEdge {
                    from: 1,
                    to: 2,
                    label: Some("a".to_owned()),
                },
            ],
        }
    }

    #[test]
    fn mermaid_escapes_quotes_and_markup() {
        let text = sample().mermaid();
        assert!(text.contains("n0[\"say #quot;hi#quot; #lt;b#gt;<br/>timeout 1 s\"]"));
        assert!(text.contains("n1{\"pick\"}"));
        assert!(text.contains("n1 -->|\"a\"| n2"));
    }

    #[test]
    fn dot_escapes_quotes_and_backslashes() {
        let text = sample().dot();
        assert!(text.contains("n0 [label=\"say \\\"hi\\\" <b>\\ntimeout 1 s\", shape=box];"));
        assert!(text.contains("n2 [label=\"a\\\\b\", shape=box, style=rounded];"));
        assert!(text.contains("n1 -> n2 [label=\"a\"];"));
        assert!(text.ends_with("}\n"));
    }
}
