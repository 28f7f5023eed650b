//! Graphs and runs you can look at: a built graph as Mermaid and DOT, a report as a Chrome
//! trace. Each output is parsed back and checked against the graph or the report.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use baton_graph::{
    BoxError, Bulkhead, CircuitBreaker, Fallback, Graph, Hedge, Orchestrator, Outcome, RateLimiter,
    Report, Retry,
};
use serde_json::Value;
use tokio::time::sleep;

use crate::ms;

/// The order flow with every policy a diagram labels: `user ∥ sku → stock → dispatch
/// (ship | shortage) → notify`.
fn order_graph() -> Graph<()> {
    let orch = Orchestrator::new();
    let inventory = CircuitBreaker::builder("inventory").build().unwrap();
    let mut g = orch.graph::<()>();
    g.name("order");
    let user = g
        .node("user")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(7_u64) });
    let sku = g
        .node("sku")
        .rate_limit(RateLimiter::new("catalog", 100, Duration::from_secs(1)))
        .bulkhead(Bulkhead::new("catalog", 4, ms(50)))
        .task(|_ctx, ()| async { Ok::<_, BoxError>(42_u64) });
    let stock = g
        .node("stock")
        .after((user, sku))
        .timeout(ms(300))
        .retry(Retry::new(3))
        .hedge(Hedge::new(ms(50)))
        .breaker(&inventory)
        .fallback(Fallback::value(0_u64))
        .task(|_ctx, _| async { Ok::<_, BoxError>(3_u64) });
    let dispatch = g
        .router("dispatch")
        .after(stock)
        .select(|_input, stock| if **stock > 0 { "ship" } else { "shortage" })
        .branch("ship", |b| {
            b.task(|_ctx, _| async { Ok::<_, BoxError>("shipped") })
        })
        .branch("shortage", |b| {
            b.task(|_ctx, _| async { Ok::<_, BoxError>("backordered") })
        })
        .finish();
    g.node("notify")
        .after(dispatch)
        .budget(Duration::from_secs(2))
        .fallback(Fallback::value("in-app"))
        .task(|_ctx, _| async { Ok::<_, BoxError>("sent") });
    g.build().unwrap()
}

/// An edge: from, to, and its label.
type Edge = (String, String, Option<String>);

/// What a diagram says: each node's id, name and labels, and each edge with its label.
#[derive(Debug, Default)]
struct Drawn {
    nodes: BTreeMap<String, (String, String)>,
    edges: BTreeSet<Edge>,
}

impl Drawn {
    fn name_of(&self, id: &str) -> &str {
        &self.nodes[id].0
    }

    /// The edges as `(from name, to name, label)`.
    fn named_edges(&self) -> BTreeSet<Edge> {
        self.edges
            .iter()
            .map(|(a, b, l)| {
                (
                    self.name_of(a).to_owned(),
                    self.name_of(b).to_owned(),
                    l.clone(),
                )
            })
            .collect()
    }
}

/// Splits `n3{"stock<br/>labels"}` into its id, its shape's brackets and its label.
fn node_line(line: &str) -> Option<(String, String, String)> {
    let open = line.find(['[', '{', '('])?;
    let (id, rest) = line.split_at(open);
    let shape = format!("{}{}", &rest[..1], &rest[rest.len() - 1..]);
    let label = rest[1..rest.len() - 1].trim_matches('"').to_owned();
    Some((id.to_owned(), shape, label))
}

fn parse_mermaid(text: &str) -> Drawn {
    let mut drawn = Drawn::default();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("---"), "{text}");
    assert_eq!(lines.next(), Some("title: order"));
    assert_eq!(lines.next(), Some("---"));
    assert_eq!(lines.next(), Some("flowchart LR"));
    for line in lines.map(str::trim) {
        if let Some((from, to)) = line.split_once(" --> ") {
            drawn.edges.insert((from.to_owned(), to.to_owned(), None));
        } else if let Some((from, rest)) = line.split_once(" -->|\"") {
            let (label, to) = rest.split_once("\"| ").unwrap();
            drawn
                .edges
                .insert((from.to_owned(), to.to_owned(), Some(label.to_owned())));
        } else {
            let (id, shape, label) = node_line(line).unwrap_or_else(|| panic!("line {line}"));
            let (name, labels) = label.split_once("<br/>").unwrap_or((&label, ""));
            let kind = match shape.as_str() {
                "[]" => "task",
                "{}" => "router",
                "()" => "branch",
                other => panic!("shape {other}"),
            };
            drawn
                .nodes
                .insert(id, (name.to_owned(), format!("{kind}: {labels}")));
        }
    }
    drawn
}

fn parse_dot(text: &str) -> Drawn {
    let mut drawn = Drawn::default();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("digraph \"order\" {"), "{text}");
    assert_eq!(text.lines().last(), Some("}"));
    for line in lines.map(str::trim) {
        let Some(line) = line.strip_suffix(';') else {
            continue;
        };
        if let Some((from, rest)) = line.split_once(" -> ") {
            let (to, label) = match rest.split_once(" [label=\"") {
                Some((to, label)) => (to, Some(label.trim_end_matches("\"]").to_owned())),
                None => (rest, None),
            };
            drawn.edges.insert((from.to_owned(), to.to_owned(), label));
        } else if let Some((id, rest)) = line.split_once(" [label=\"") {
            let (label, attrs) = rest.split_once("\", ").unwrap();
            let (name, labels) = label.split_once("\\n").unwrap_or((label, ""));
            let kind = match attrs.trim_end_matches(']') {
                "shape=box" => "task",
                "shape=diamond" => "router",
                "shape=box, style=rounded" => "branch",
                other => panic!("attributes {other}"),
            };
            drawn.nodes.insert(
                id.to_owned(),
                (name.to_owned(), format!("{kind}: {labels}")),
            );
        }
    }
    drawn
}

/// Every node with its kind and labels, and every edge, as the graph defines them.
fn expected() -> (BTreeMap<&'static str, &'static str>, BTreeSet<Edge>) {
    let nodes = BTreeMap::from([
        ("user", "task: "),
        ("sku", "task: rate limit catalog · bulkhead catalog (4)"),
        (
            "stock",
            "task: timeout 300 ms · hedge · retry 3 · breaker inventory · fallback",
        ),
        ("dispatch", "router: "),
        ("ship", "branch: "),
        ("shortage", "branch: "),
        ("notify", "task: budget 2 s · fallback"),
    ]);
    let edge =
        |a: &str, b: &str, l: Option<&str>| (a.to_owned(), b.to_owned(), l.map(str::to_owned));
    let edges = BTreeSet::from([
        edge("user", "stock", None),
        edge("sku", "stock", None),
        edge("stock", "dispatch", None),
        edge("dispatch", "ship", Some("ship")),
        edge("dispatch", "shortage", Some("shortage")),
        edge("dispatch", "notify", None),
    ]);
    (nodes, edges)
}

fn check_drawn(graph: &Graph<()>, drawn: &Drawn) {
    let (nodes, edges) = expected();
    let by_name: BTreeMap<&str, &str> = drawn
        .nodes
        .values()
        .map(|(name, labels)| (name.as_str(), labels.as_str()))
        .collect();
    assert_eq!(by_name, nodes);
    assert_eq!(drawn.named_edges(), edges);
    // Every node of the graph, in declaration order as `n0..`, and every upstream edge.
    for (i, name) in graph.names().enumerate() {
        assert_eq!(drawn.name_of(&format!("n{i}")), name);
        if ["ship", "shortage"].contains(&name) {
            continue; // a branch's edge comes from its router
        }
        for up in graph.upstreams_of(name).unwrap() {
            assert!(
                edges.contains(&(up.to_owned(), name.to_owned(), None)),
                "{up} -> {name}"
            );
        }
    }
}

#[test]
fn mermaid_and_dot_draw_every_node_edge_and_policy() {
    let graph = order_graph();
    let mermaid = graph.to_mermaid();
    check_drawn(&graph, &parse_mermaid(&mermaid));
    let dot = graph.to_dot();
    check_drawn(&graph, &parse_dot(&dot));
    // Pure functions of the built graph: the same text every time.
    assert_eq!(graph.to_mermaid(), mermaid);
    assert_eq!(graph.clone().to_dot(), dot);
}

/// A run with every kind of slice: a plain node, retries with backoffs ending in a
/// fallback, a hedge that wins, a failure and a skip, a breaker's rejection.
async fn traced_run() -> Report {
    let mut g = Graph::<()>::builder();
    let user = g.node("user").task(|_ctx, ()| async {
        sleep(ms(200)).await;
        Ok::<_, BoxError>(7_u64)
    });
    g.node("stock")
        .after(user)
        .timeout(ms(100))
        .retry(Retry::new(3))
        .fallback(Fallback::value(0_u64))
        .task(|_ctx, _| async {
            sleep(ms(500)).await; // every attempt times out
            Ok::<_, BoxError>(3_u64)
        });
    g.node("price")
        .hedge(Hedge::new(ms(20)))
        .task(|ctx, ()| async move {
            sleep(ms(if ctx.attempt() == 1 { 100 } else { 10 })).await;
            Ok::<_, BoxError>(59_900_u64)
        });
    let coupon = g
        .node("coupon")
        .task(|_ctx, ()| async { Err::<u64, BoxError>("\"bad\" coupon\n".into()) });
    g.node("promo")
        .after(coupon)
        .task(|_ctx, _| async { Ok::<_, BoxError>(5_u64) });
    let tax = CircuitBreaker::builder("tax").build().unwrap();
    tax.isolate().await; // rejects every call: the fallback answers, no attempt runs
    g.node("tax")
        .breaker(&tax)
        .fallback(Fallback::value(0_u64))
        .task(|_ctx, ()| async { Ok::<_, BoxError>(19_u64) });
    g.build().unwrap().run(()).await.unwrap()
}

fn us(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1_000.0
}

const EPS: f64 = 0.001;

/// The events of `trace`, checked for the fields every event needs.
fn events(trace: &str) -> Vec<Value> {
    let json: Value = serde_json::from_str(trace).expect("the trace is JSON");
    assert_eq!(json["displayTimeUnit"], "ms");
    let events = json["traceEvents"].as_array().expect("traceEvents").clone();
    for e in &events {
        assert!(e["name"].is_string(), "{e}");
        assert!(e["pid"].is_u64() && e["tid"].is_u64(), "{e}");
        match e["ph"].as_str() {
            Some("X") => {
                assert!(e["ts"].as_f64().unwrap() >= 0.0, "{e}");
                assert!(e["dur"].as_f64().unwrap() >= 0.0, "{e}");
                assert!(e["cat"].is_string() && e["args"].is_object(), "{e}");
            }
            Some("i") => assert!(e["ts"].as_f64().unwrap() >= 0.0, "{e}"),
            Some("M") => assert!(e["args"].is_object(), "{e}"),
            other => panic!("phase {other:?} in {e}"),
        }
    }
    events
}

fn span(e: &Value) -> (f64, f64) {
    let ts = e["ts"].as_f64().unwrap();
    (ts, ts + e["dur"].as_f64().unwrap_or(0.0))
}

fn inside(inner: (f64, f64), outer: (f64, f64)) -> bool {
    inner.0 >= outer.0 - EPS && inner.1 <= outer.1 + EPS
}

#[tokio::test(start_paused = true)]
async fn a_chrome_trace_has_a_track_per_node_and_nests_its_slices() {
    let report = traced_run().await;
    let events = events(&report.to_chrome_trace());
    let tracks: BTreeMap<u64, String> = events
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| {
            (
                e["tid"].as_u64().unwrap(),
                e["args"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let slices = |cat: &str| -> Vec<&Value> {
        events
            .iter()
            .filter(|e| e["ph"] == "X" && e["cat"] == cat)
            .collect()
    };
    let makespan = (0.0, us(report.makespan()));
    let run = slices("run");
    assert_eq!(run.len(), 1);
    assert!((span(run[0]).1 - makespan.1).abs() < EPS);
    assert_eq!(run[0]["args"]["failed"], 1);

    for node in report.nodes() {
        let tid = node.index() as u64 + 1;
        assert_eq!(tracks[&tid], node.name());
        // The node's own slice, or an instant at its end when it never started.
        let own: Vec<&Value> = events
            .iter()
            .filter(|e| e["tid"] == tid && e["cat"] == "node")
            .collect();
        assert_eq!(own.len(), 1, "{}", node.name());
        let own_span = span(own[0]);
        assert_eq!(own[0]["args"]["outcome"], node.outcome().as_str());
        assert_eq!(own[0]["args"]["attempts"], node.attempts());
        assert_eq!(own[0]["args"]["error"].as_str(), node.message().as_deref());
        match node.start() {
            Some(start) => {
                assert_eq!(own[0]["ph"], "X");
                assert!((own_span.0 - us(start)).abs() < EPS);
                assert!((own_span.1 - us(node.end())).abs() < EPS);
            }
            None => {
                assert_eq!(own[0]["ph"], "i");
                assert!((own_span.0 - us(node.end())).abs() < EPS);
            }
        }
        assert!(inside(own_span, makespan));
        // Every attempt of its log is a slice, on its track or one of its lanes, nested
        // in the node's slice; so are the backoffs before them.
        let mine = |e: &&Value| tracks[&e["tid"].as_u64().unwrap()].starts_with(node.name());
        let attempts: Vec<&Value> = slices("attempt").into_iter().filter(mine).collect();
        let backoffs: Vec<&Value> = slices("backoff").into_iter().filter(mine).collect();
        let expected_attempts = if node.attempt_log().is_empty() {
            node.attempts() as usize
        } else {
            node.attempt_log().len()
        };
        assert_eq!(attempts.len(), expected_attempts, "{}", node.name());
        for (slice, a) in attempts.iter().zip(node.attempt_log()) {
            assert_eq!(slice["name"], format!("attempt {}", a.number));
            assert_eq!(slice["args"]["error"].as_str(), a.error.as_deref());
            assert!((span(slice).0 - us(a.start)).abs() < EPS);
            assert!((span(slice).1 - us(a.end)).abs() < EPS);
        }
        let delays = node
            .attempt_log()
            .iter()
            .filter(|a| !a.delay_before.is_zero());
        assert_eq!(backoffs.len(), delays.count());
        for slice in attempts.iter().chain(&backoffs) {
            assert!(inside(span(slice), own_span), "{slice} outside {}", own[0]);
        }
    }

    // The retried node: three attempts cut at 100 ms, backoffs of 100 and 200 ms, then
    // its fallback, all on its own track.
    let stock = report.by_name("stock").unwrap();
    assert_eq!(stock.outcome(), Outcome::Recovered);
    let on_stock = |cat: &str| -> Vec<(f64, f64)> {
        slices(cat)
            .into_iter()
            .filter(|e| e["tid"] == 2)
            .map(span)
            .collect()
    };
    let ms_spans = |v: Vec<(f64, f64)>| -> Vec<(u64, u64)> {
        v.into_iter()
            .map(|(a, b)| ((a / 1e3).round() as u64, (b / 1e3).round() as u64))
            .collect()
    };
    assert_eq!(
        ms_spans(on_stock("attempt")),
        [(200, 300), (400, 500), (700, 800)]
    );
    assert_eq!(ms_spans(on_stock("backoff")), [(300, 400), (500, 700)]);
    assert_eq!(ms_spans(on_stock("fallback")), [(800, 800)]);

    // A node whose breaker rejected it: no attempt, its fallback spans the node.
    let tax = report.by_name("tax").unwrap();
    assert_eq!((tax.outcome(), tax.attempts()), (Outcome::Recovered, 0));
    let tid = tax.index() as u64 + 1;
    let fallback: Vec<&Value> = slices("fallback")
        .into_iter()
        .filter(|e| e["tid"] == tid)
        .collect();
    assert_eq!(fallback.len(), 1);

    // The hedge overlaps the attempt it races: it is on a lane of its own.
    let price = report.by_name("price").unwrap();
    assert!(price.attempt_log().iter().any(|a| a.hedge));
    let lane = slices("attempt")
        .into_iter()
        .find(|e| e["args"]["hedge"] == true)
        .expect("the hedge's slice");
    assert_eq!(tracks[&lane["tid"].as_u64().unwrap()], "price · lane 1");

    check_tracks_nest(&events);
}

/// On every track, slices come in time order and nest: none straddles another's end.
fn check_tracks_nest(events: &[Value]) {
    let mut by_track: BTreeMap<u64, Vec<(f64, f64)>> = BTreeMap::new();
    for e in events.iter().filter(|e| e["ph"] == "X") {
        by_track
            .entry(e["tid"].as_u64().unwrap())
            .or_default()
            .push(span(e));
    }
    for (tid, spans) in by_track {
        for pair in spans.windows(2) {
            assert!(pair[0].0 <= pair[1].0 + EPS, "track {tid}: {spans:?}");
        }
        for (i, a) in spans.iter().enumerate() {
            for b in &spans[i + 1..] {
                let disjoint = b.0 >= a.1 - EPS || a.0 >= b.1 - EPS;
                assert!(
                    disjoint || inside(*a, *b) || inside(*b, *a),
                    "track {tid}: {a:?} {b:?}"
                );
            }
        }
    }
}

/// The names of the trace's tracks, by id, and where each sorts.
fn tracks_of(events: &[Value]) -> (BTreeMap<u64, String>, BTreeMap<u64, u64>) {
    let meta = |name: &str, key: &str| -> BTreeMap<u64, Value> {
        events
            .iter()
            .filter(|e| e["name"] == name)
            .map(|e| (e["tid"].as_u64().unwrap(), e["args"][key].clone()))
            .collect()
    };
    let names = meta("thread_name", "name")
        .into_iter()
        .map(|(tid, v)| (tid, v.as_str().unwrap().to_owned()))
        .collect();
    let sorts = meta("thread_sort_index", "sort_index")
        .into_iter()
        .map(|(tid, v)| (tid, v.as_u64().unwrap()))
        .collect();
    (names, sorts)
}

/// A run whose map node has five items, two at once, one retried; then `ship` fails and
/// the compensations of `stock` and `reserve` run at once.
async fn mapped_and_compensated_run() -> Report {
    let mut g = Graph::<()>::builder();
    g.failure_mode(baton_graph::FailureMode::FailAll);
    let cart = g
        .node("cart")
        .task(|_ctx, ()| async { Ok::<_, BoxError>((0..5_u64).collect::<Vec<_>>()) });
    let prices = g
        .node("prices")
        .after(cart)
        .concurrency(2)
        .retry(Retry::new(2))
        .map(|ctx, i: u64| async move {
            sleep(ms(10 * (i + 1))).await;
            if i == 3 && ctx.attempt() == 1 {
                return Err("503".into());
            }
            Ok::<_, BoxError>(i * 100)
        });
    let undo = |_ctx, _v| async {
        sleep(ms(10)).await;
        Ok::<_, BoxError>(())
    };
    let stock = g
        .node("stock")
        .after(cart)
        .compensate(undo)
        .task(|_ctx, _| async { Ok::<_, BoxError>(()) });
    let reserve = g
        .node("reserve")
        .compensate(undo)
        .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    g.node("ship")
        .after((prices, stock, reserve))
        .task(|_ctx, _| async { Err::<(), BoxError>("no truck".into()) });
    match g.build().unwrap().run(()).await {
        Err(baton_graph::RunError::Compensated { report, .. }) => *report,
        other => panic!("not compensated: {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_chrome_trace_nests_map_items_and_has_a_compensation_track() {
    let report = mapped_and_compensated_run().await;
    let events = events(&report.to_chrome_trace());
    let (tracks, sorts) = tracks_of(&events);
    let slices = |cat: &str| -> Vec<&Value> {
        events
            .iter()
            .filter(|e| e["ph"] == "X" && e["cat"] == cat)
            .collect()
    };
    let track = |e: &Value| tracks[&e["tid"].as_u64().unwrap()].clone();

    // Each item is a slice named after it, nested in time inside the node's slice, on the
    // node's track or one of its lanes, with its attempts nested in it on its track.
    let node = report.by_name("prices").unwrap();
    let node_span = (us(node.start().unwrap()), us(node.end()));
    let items = node.items().unwrap();
    let item_slices = slices("item");
    assert_eq!(item_slices.len(), items.len());
    for item in items.iter() {
        let slice = item_slices
            .iter()
            .find(|e| e["name"] == item.name())
            .unwrap_or_else(|| panic!("no slice for {}", item.name()));
        assert_eq!(slice["args"]["index"], item.index());
        assert_eq!(slice["args"]["outcome"], item.outcome().as_str());
        assert_eq!(slice["args"]["attempts"], item.attempts());
        assert!(track(slice).starts_with("prices"), "{slice}");
        let item_span = span(slice);
        assert!((item_span.0 - us(item.start().unwrap())).abs() < EPS);
        assert!((item_span.1 - us(item.end())).abs() < EPS);
        assert!(inside(item_span, node_span), "{slice} outside the node");
        let nested = |cat: &str| -> usize {
            slices(cat)
                .into_iter()
                .filter(|e| e["tid"] == slice["tid"] && inside(span(e), item_span))
                .count()
        };
        assert_eq!(nested("attempt"), item.attempts() as usize, "{slice}");
        assert_eq!(nested("backoff"), usize::from(item.index() == 3), "{slice}");
    }
    assert_eq!(items.get(3).unwrap().attempts(), 2);
    // Two items at once: the second is on a lane of the node's.
    assert!(tracks.values().any(|name| name == "prices · lane 1"));
    assert!(!slices("item").iter().any(|e| track(e) == "prices · lane 2"));

    // The compensations: one slice each with its attempt, on a track after the nodes';
    // the two ran at once, so one is on a lane.
    let compensation = report.compensation().unwrap();
    let comp_slices = slices("compensation");
    assert_eq!(comp_slices.len(), compensation.iter().len());
    assert_eq!(comp_slices.len(), 2);
    let last_node_sort = (1..=report.len() as u64).map(|tid| sorts[&tid]).max();
    for c in compensation.iter() {
        let slice = comp_slices.iter().find(|e| e["name"] == c.node()).unwrap();
        assert_eq!(slice["args"]["outcome"], c.outcome().as_str());
        assert!(track(slice).starts_with("compensation"), "{slice}");
        assert!(Some(sorts[&slice["tid"].as_u64().unwrap()]) > last_node_sort);
        let c_span = span(slice);
        assert!((c_span.0 - us(c.start())).abs() < EPS);
        assert!((c_span.1 - us(c.end())).abs() < EPS);
        let attempts = slices("attempt")
            .into_iter()
            .filter(|e| e["tid"] == slice["tid"] && inside(span(e), c_span))
            .count();
        assert_eq!(attempts, c.attempts() as usize, "{slice}");
    }
    let mut comp_tracks: Vec<String> = comp_slices.iter().map(|e| track(e)).collect();
    comp_tracks.sort();
    assert_eq!(comp_tracks, ["compensation", "compensation · lane 1"]);
    check_tracks_nest(&events);
}

#[test]
fn map_and_subgraph_nodes_have_shapes_and_labels_of_their_own() {
    let mut inner = Graph::<u64>::builder();
    let double = inner
        .node("double")
        .task(|ctx, ()| async move { Ok::<_, BoxError>(*ctx.input() * 2) });
    let inner = inner.build().unwrap();
    let mut g = Graph::<()>::builder();
    let cart = g
        .node("cart")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(vec![1_u64, 2, 3]) });
    let prices = g
        .node("prices")
        .after(cart)
        .concurrency(4)
        .timeout(std::time::Duration::from_millis(50))
        .retry(baton_graph::Retry::new(2))
        .fallback(baton_graph::Fallback::value(0_u64))
        .map(|_item, n: u64| async move { Ok::<_, BoxError>(n * 10) });
    g.node("total").after(prices).subgraph(
        &inner,
        |_: &(), prices: std::sync::Arc<Vec<u64>>| prices.iter().sum(),
        move |r| r.require(double).cloned(),
    );
    let graph = g.build().unwrap();
    let mermaid = graph.to_mermaid();
    assert!(
        mermaid.contains(
            r#"n1[/"prices<br/>map ×4 · all_succeed · timeout 50 ms · retry 2 · fallback"/]"#
        ),
        "{mermaid}"
    );
    assert!(
        mermaid.contains(r#"n2[["total<br/>subgraph"]]"#),
        "{mermaid}"
    );
    assert!(mermaid.contains("n0 --> n1") && mermaid.contains("n1 --> n2"));
    let dot = graph.to_dot();
    assert!(dot.contains("shape=box3d"), "{dot}");
    // The items' policies are in the map node's label.
    assert!(
        dot.contains("map ×4 · all_succeed · timeout 50 ms"),
        "{dot}"
    );
    assert!(dot.contains("shape=box, peripheries=2"), "{dot}");
    assert!(dot.contains("n1 -> n2;"), "{dot}");
}
