//! Validation before anything runs (`docs/contract.md`, rule 13): every `BuildError` with its exact
//! message, cycles printed as `a -> b -> c -> a`, and nothing panics or hangs.

use baton_graph::{BoxError, BuildError, Graph, GraphBuilder, Inputs, Node};

fn leaf(g: &mut GraphBuilder<()>, name: &str) -> Node<u32> {
    g.node(name)
        .task(|_ctx, ()| async { Ok::<_, BoxError>(1_u32) })
}

/// A node of type `u32` whose upstreams are given by name.
fn named(g: &mut GraphBuilder<()>, name: &str, ups: &[&str]) -> Node<u32> {
    g.node(name)
        .after_names::<u32>(ups.iter().copied())
        .task(|_ctx, ups: Inputs<u32>| async move { Ok::<_, BoxError>(ups.len() as u32) })
}

fn build_err(g: GraphBuilder<()>) -> BuildError {
    g.build().expect_err("build must fail")
}

#[test]
fn duplicate_name() {
    let mut g = Graph::<()>::builder();
    leaf(&mut g, "a");
    leaf(&mut g, "b");
    leaf(&mut g, "a");
    let err = build_err(g);
    assert_eq!(
        err,
        BuildError::DuplicateName {
            name: "a".to_owned()
        }
    );
    assert_eq!(
        err.to_string(),
        "duplicate node name `a`: every node of a graph needs its own name"
    );
}

/// An empty name is refused like an empty breaker name: no node (no branch, no pipeline)
/// may be nameless in the report, the timeline, errors and events.
#[test]
fn an_empty_node_name_is_a_build_error() {
    let mut g = Graph::<()>::builder();
    leaf(&mut g, "a");
    leaf(&mut g, "");
    leaf(&mut g, "");
    let err = build_err(g);
    assert_eq!(err, BuildError::EmptyName { index: 1 });
    assert_eq!(
        err.to_string(),
        "node #1 has an empty name: every node needs a name"
    );
    let mut g = Graph::<()>::builder();
    let a = leaf(&mut g, "a");
    let _ = g
        .router("route")
        .after(a)
        .select(|_input, _a| "")
        .branch("", |b| {
            b.task(|_ctx, _a| async { Ok::<_, BoxError>(1_u32) })
        })
        .finish();
    assert_eq!(build_err(g), BuildError::EmptyName { index: 2 });
    let pipeline = baton_graph::Pipeline::<u32>::builder("").build();
    assert_eq!(pipeline.err(), Some(BuildError::EmptyName { index: 0 }));
}

#[test]
fn handle_from_another_builder() {
    let mut other = Graph::<()>::builder();
    leaf(&mut other, "x");
    let foreign = leaf(&mut other, "y");
    let mut g = Graph::<()>::builder();
    leaf(&mut g, "a");
    leaf(&mut g, "b");
    g.node("c")
        .after(foreign)
        .task(|_ctx, _y| async { Ok::<_, BoxError>(()) });
    let err = build_err(g);
    assert_eq!(
        err,
        BuildError::ForeignHandle {
            node: "c".to_owned(),
            upstream: "#1".to_owned()
        }
    );
    assert_eq!(
        err.to_string(),
        "node `c` was given the handle of `#1`, which belongs to another graph \
         (handles only work in the builder that returned them)"
    );
    // The other builder is unaffected.
    assert_eq!(other.build().expect("valid").len(), 2);
}

#[test]
fn foreign_handle_inside_a_tuple_and_a_vec() {
    let mut other = Graph::<()>::builder();
    let foreign = leaf(&mut other, "x");
    let mut g = Graph::<()>::builder();
    let a = leaf(&mut g, "a");
    g.node("t")
        .after((a, foreign))
        .task(|_ctx, _v| async { Ok::<_, BoxError>(()) });
    assert_eq!(
        build_err(g).to_string(),
        "node `t` was given the handle of `#0`, which belongs to another graph \
         (handles only work in the builder that returned them)"
    );

    let mut g = Graph::<()>::builder();
    let a = leaf(&mut g, "a");
    g.node("v")
        .after(vec![a, foreign])
        .task(|_ctx, _v| async { Ok::<_, BoxError>(()) });
    assert_eq!(
        build_err(g),
        BuildError::ForeignHandle {
            node: "v".to_owned(),
            upstream: "#0".to_owned()
        }
    );
}

#[test]
fn unknown_upstream_name() {
    let mut g = Graph::<()>::builder();
    leaf(&mut g, "a");
    named(&mut g, "b", &["a", "nope"]);
    let err = build_err(g);
    assert_eq!(
        err,
        BuildError::UnknownUpstream {
            node: "b".to_owned(),
            upstream: "nope".to_owned()
        }
    );
    assert_eq!(
        err.to_string(),
        "node `b` names upstream `nope`, which is not a node of this graph"
    );
}

#[test]
fn type_mismatch_for_names() {
    let mut g = Graph::<()>::builder();
    g.node("a")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(1_u64) });
    named(&mut g, "b", &["a"]);
    let err = build_err(g);
    assert_eq!(
        err,
        BuildError::TypeMismatch {
            node: "b".to_owned(),
            upstream: "a".to_owned(),
            expected: "u32",
            found: "u64",
        }
    );
    assert_eq!(
        err.to_string(),
        "node `b` expects upstream `a` to produce `u32`, but it produces `u64`"
    );
}

#[test]
fn self_cycle() {
    let mut g = Graph::<()>::builder();
    leaf(&mut g, "root");
    named(&mut g, "a", &["root", "a"]);
    let err = build_err(g);
    assert_eq!(
        err,
        BuildError::Cycle {
            path: vec!["a".to_owned(), "a".to_owned()]
        }
    );
    assert_eq!(err.to_string(), "dependency cycle: a -> a");
}

#[test]
fn three_cycle() {
    // Flow: a -> b -> c -> a (each arrow points from upstream to downstream).
    let mut g = Graph::<()>::builder();
    named(&mut g, "a", &["c"]);
    named(&mut g, "b", &["a"]);
    named(&mut g, "c", &["b"]);
    let err = build_err(g);
    assert_eq!(
        err,
        BuildError::Cycle {
            path: ["a", "b", "c", "a"].map(String::from).to_vec()
        }
    );
    assert_eq!(err.to_string(), "dependency cycle: a -> b -> c -> a");
}

#[test]
fn cycle_path_starts_at_the_earliest_declared_node_and_skips_bystanders() {
    // Same cycle a -> b -> c -> a, declared b, c, a, with a root upstream of it and nodes
    // downstream of it that are not on it.
    let mut g = Graph::<()>::builder();
    leaf(&mut g, "root");
    named(&mut g, "tail", &["c"]);
    named(&mut g, "b", &["a"]);
    named(&mut g, "c", &["b"]);
    named(&mut g, "a", &["c", "root"]);
    named(&mut g, "tail2", &["tail"]);
    assert_eq!(
        build_err(g).to_string(),
        "dependency cycle: b -> c -> a -> b"
    );
}

#[test]
fn cycle_through_typed_handles_and_a_name() {
    let mut g = Graph::<()>::builder();
    let a = named(&mut g, "a", &["c"]);
    let b = g
        .node("b")
        .after(a)
        .task(|_ctx, a: std::sync::Arc<u32>| async move { Ok::<_, BoxError>(*a) });
    g.node("c")
        .after(b)
        .task(|_ctx, b: std::sync::Arc<u32>| async move { Ok::<_, BoxError>(*b) });
    assert_eq!(
        build_err(g).to_string(),
        "dependency cycle: a -> b -> c -> a"
    );
}

#[test]
fn first_problem_in_declaration_order_wins() {
    // Duplicate name before unknown upstream before cycle.
    let mut g = Graph::<()>::builder();
    named(&mut g, "x", &["y"]);
    named(&mut g, "y", &["x"]);
    named(&mut g, "z", &["missing"]);
    leaf(&mut g, "x");
    assert!(matches!(build_err(g), BuildError::DuplicateName { name } if name == "x"));

    let mut g = Graph::<()>::builder();
    named(&mut g, "x", &["y"]);
    named(&mut g, "y", &["x"]);
    named(&mut g, "z", &["missing"]);
    assert!(matches!(
        build_err(g),
        BuildError::UnknownUpstream { node, upstream } if node == "z" && upstream == "missing"
    ));

    let mut g = Graph::<()>::builder();
    named(&mut g, "x", &["y"]);
    named(&mut g, "y", &["x"]);
    assert!(matches!(build_err(g), BuildError::Cycle { .. }));
}

#[test]
fn a_valid_graph_builds_and_reports_its_shape() {
    let mut g = Graph::<()>::builder();
    assert!(g.is_empty());
    let a = leaf(&mut g, "a");
    named(&mut g, "b", &["a"]);
    g.node("c")
        .after(a)
        .task(|_ctx, _a| async { Ok::<_, BoxError>(()) });
    assert_eq!(g.len(), 3);
    let graph = g.build().expect("valid");
    assert_eq!(graph.len(), 3);
    assert!(!graph.is_empty());
    assert_eq!(graph.names().collect::<Vec<_>>(), ["a", "b", "c"]);
    assert_eq!(graph.upstreams_of("a"), Some(vec![]));
    assert_eq!(graph.upstreams_of("b"), Some(vec!["a"]));
    assert_eq!(graph.upstreams_of("c"), Some(vec!["a"]));
    assert_eq!(a.index(), 0);
}

#[tokio::test(start_paused = true)]
async fn an_empty_graph_builds_and_runs() {
    let graph = Graph::<()>::builder().build().expect("valid");
    assert!(graph.is_empty());
    let report = graph.run(()).await.expect("run");
    assert_eq!(report.len(), 0);
    assert!(report.is_empty());
    assert_eq!(report.makespan(), std::time::Duration::ZERO);
    assert_eq!(report.counts().total(), 0);
    assert!(report.is_clean());
}

/// Problems are reported in the order they were found while declaring: a branch's
/// duplicate name, found when the branch was added, comes before a problem with a later
/// branch of the same router.
#[test]
fn a_branch_duplicate_comes_before_a_later_invalid_branch() {
    let mut g = Graph::<()>::builder();
    let stock = leaf(&mut g, "stock");
    let _x = leaf(&mut g, "x");
    let _r = g
        .router("r")
        .after(stock)
        .select(|_input, _stock| "x")
        .branch("x", |b| {
            b.task(|_ctx, _s| async { Ok::<_, BoxError>(1u32) })
        })
        .branch("y", |_b| stock)
        .finish();
    match build_err(g) {
        BuildError::DuplicateName { name } => assert_eq!(name, "x"),
        other => panic!("expected the duplicate name first, got {other:?}"),
    }
}

/// A node or router builder dropped before it added its node leaves nothing behind: its
/// name is neither a node's nor a duplicate of the next one, and a node that reuses it
/// builds.
#[test]
fn a_builder_dropped_before_its_task_leaves_no_name_behind() {
    let mut g = Graph::<()>::builder();
    leaf(&mut g, "a");
    drop(g.node::<u32>("dropped-node"));
    drop(g.router::<u32>("dropped-router"));
    let _unfinished = format!("{:?}", g.node::<u32>("pending"));
    leaf(&mut g, "b");
    leaf(&mut g, "dropped-node");
    let name = String::from("from-a-string");
    leaf(&mut g, &name);
    assert_eq!(g.len(), 4);
    let graph = g.build().expect("valid");
    assert_eq!(
        graph.names().collect::<Vec<_>>(),
        ["a", "b", "dropped-node", "from-a-string"]
    );
    assert_eq!(graph.upstreams_of("dropped-router"), None);
    assert_eq!(graph.upstreams_of("pending"), None);

    // Dropped last, just before `build()`.
    let mut g = Graph::<()>::builder();
    leaf(&mut g, "a");
    drop(g.node::<u32>("a"));
    let graph = g.build().expect("valid: the dropped `a` is no duplicate");
    assert_eq!(graph.names().collect::<Vec<_>>(), ["a"]);
}

/// A builder's `Debug` shows the name it was given.
#[test]
fn a_node_builder_shows_its_name() {
    let mut g = Graph::<()>::builder();
    leaf(&mut g, "a");
    let shown = format!("{:?}", g.node::<u32>("checkout"));
    assert!(shown.contains("\"checkout\""), "{shown}");
    let shown = format!("{:?}", g.router::<u32>("route"));
    assert!(shown.contains("\"route\""), "{shown}");
}

/// Adds router `name` after `a`, with one branch `k`, and drops it without `.finish()`.
fn unfinished_router(g: &mut GraphBuilder<()>, name: &str, a: Node<u32>) {
    let unfinished = g
        .router::<u32>(name)
        .after(a)
        .select(|_input, _a| "k")
        .branch("k", |b| {
            b.task(|_ctx, _a| async { Ok::<_, BoxError>(2_u32) })
        });
    drop(unfinished);
}

/// A router whose `.finish()` was never called (dropped after its branches, or a branch
/// closure that panicked and was caught) is a build error naming it, not a graph whose
/// branches no router would ever start (a run of it never ended).
#[test]
fn a_router_never_finished_is_a_build_error() {
    let mut g = Graph::<()>::builder();
    let a = leaf(&mut g, "a");
    unfinished_router(&mut g, "route", a);
    leaf(&mut g, "z");
    let err = build_err(g);
    assert_eq!(
        err,
        BuildError::InvalidRouter {
            router: "route".to_owned(),
            reason: "it was never finished (call `.finish()` after its branches)".to_owned(),
        }
    );
    assert_eq!(
        err.to_string(),
        "router `route` is invalid: it was never finished (call `.finish()` after its branches)"
    );

    // A branch closure that panicked, the panic caught, the builder used on.
    let mut g = Graph::<()>::builder();
    let a = leaf(&mut g, "a");
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _router = g
            .router::<u32>("route")
            .after(a)
            .select(|_input, _a| "k")
            .branch("k", |_b| panic!("defining the branch failed"));
    }));
    assert!(caught.is_err());
    leaf(&mut g, "z");
    assert!(matches!(
        build_err(g),
        BuildError::InvalidRouter { router, .. } if router == "route"
    ));

    // Finished, the same router builds.
    let mut g = Graph::<()>::builder();
    let a = leaf(&mut g, "a");
    let _route = g
        .router::<u32>("route")
        .after(a)
        .select(|_input, _a| "k")
        .branch("k", |b| {
            b.task(|_ctx, _a| async { Ok::<_, BoxError>(2_u32) })
        })
        .finish();
    assert_eq!(g.build().expect("valid").len(), 3);
}

/// `build()` runs its checks in tiers (its `# Errors`): what was found while nodes were added
/// (here an unfinished router) comes before upstreams given by name (here an unknown one),
/// even when the node with the unknown upstream was declared first.
#[test]
fn problems_found_while_adding_come_before_name_resolution() {
    let mut g = Graph::<()>::builder();
    let a = leaf(&mut g, "a");
    named(&mut g, "z", &["missing"]);
    unfinished_router(&mut g, "r", a);
    assert!(matches!(
        build_err(g),
        BuildError::InvalidRouter { router, .. } if router == "r"
    ));

    // Without the router, the unknown upstream is the problem.
    let mut g = Graph::<()>::builder();
    leaf(&mut g, "a");
    named(&mut g, "z", &["missing"]);
    assert_eq!(
        build_err(g),
        BuildError::UnknownUpstream {
            node: "z".to_owned(),
            upstream: "missing".to_owned()
        }
    );
}
