//! The report: typed access, lookup by name, node order, counts, `is_clean`, the text
//! timeline, and (feature `serde`) the JSON schema.

use std::sync::Arc;
use std::time::Duration;

use baton_graph::{BoxError, Graph, Node, Outcome, Report, report::Counts};
use tokio::time::sleep;

use crate::ms;

struct Shape {
    graph: Graph<()>,
    user: Node<String>,
    stock: Node<u32>,
    promo: Node<u32>,
    notify: Node<()>,
}

/// user 0..200 → stock 200..350 fails → promo skipped → notify skipped; audit 0..100.
fn shape() -> Shape {
    let mut g = Graph::<()>::builder();
    let user = g.node("user").task(|_ctx, ()| async {
        sleep(ms(200)).await;
        Ok::<_, BoxError>("ada".to_owned())
    });
    let stock = g
        .node("stock")
        .after(user)
        .task(|_ctx, _u: Arc<String>| async {
            sleep(ms(150)).await;
            Err::<u32, _>("HTTP 503 from stock")
        });
    let promo = g
        .node("promo")
        .after(stock)
        .task(|_ctx, s: Arc<u32>| async move { Ok::<_, BoxError>(*s) });
    let notify = g
        .node("notify")
        .after(promo)
        .task(|_ctx, _p: Arc<u32>| async { Ok::<_, BoxError>(()) });
    g.node("audit").task(|_ctx, ()| async {
        sleep(ms(100)).await;
        Ok::<_, BoxError>(1_u8)
    });
    Shape {
        graph: g.build().expect("valid"),
        user,
        stock,
        promo,
        notify,
    }
}

async fn run(s: &Shape) -> Report {
    s.graph.run(()).await.expect("preserve-partial")
}

#[tokio::test(start_paused = true)]
async fn typed_access_by_handle_and_by_name() {
    let s = shape();
    let report = run(&s).await;
    assert_eq!(report.get(s.user).map(String::as_str), Some("ada"));
    let owned: Arc<String> = report.value(s.user).expect("value");
    assert_eq!(*owned, "ada");
    drop(report); // the Arc outlives the report
    assert_eq!(*owned, "ada");

    let report = run(&s).await;
    assert_eq!(report.get(s.stock), None);
    assert_eq!(report.value(s.promo), None);
    assert_eq!(report.get(s.notify), None);

    let user = report.node(s.user).expect("user");
    assert_eq!(user.name(), "user");
    assert_eq!(user.index(), 0);
    assert_eq!(user.outcome(), Outcome::Succeeded);
    assert_eq!(user.duration(), ms(200));
    assert!(user.error().is_none());
    assert!(user.message().is_none());

    let stock = report.by_name("stock").expect("stock");
    assert_eq!(stock.index(), s.stock.index());
    assert_eq!(stock.outcome(), Outcome::Failed);
    assert_eq!(stock.start(), Some(ms(200)));
    assert_eq!(stock.end(), ms(350));
    assert_eq!(stock.duration(), ms(150));
    assert_eq!(stock.attempts(), 1);
    assert_eq!(stock.message().as_deref(), Some("HTTP 503 from stock"));
    assert!(report.by_name("nope").is_none());
    assert!(report.by_name("").is_none());
}

#[tokio::test(start_paused = true)]
async fn a_handle_of_another_graph_reads_nothing() {
    let s = shape();
    let other = shape();
    let report = run(&s).await;
    // Same index and type, other graph.
    assert_eq!(report.get(other.user), None);
    assert_eq!(report.value(other.user), None);
    assert!(report.node(other.user).is_none());
    // Out of range for this graph.
    let mut g = Graph::<()>::builder();
    for i in 0..10 {
        g.node(format!("n{i}"))
            .task(|_ctx, ()| async { Ok::<_, BoxError>(0_u8) });
    }
    let big = g
        .node("last")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(String::new()) });
    assert_eq!(report.get(big), None);
    assert!(report.node(big).is_none());
}

#[tokio::test(start_paused = true)]
async fn nodes_come_in_declaration_order_with_counts() {
    let s = shape();
    let report = run(&s).await;
    assert_eq!(report.len(), 5);
    assert!(!report.is_empty());
    let nodes = report.nodes();
    assert_eq!(nodes.len(), 5);
    let seen: Vec<(usize, &str, Outcome)> =
        nodes.map(|n| (n.index(), n.name(), n.outcome())).collect();
    assert_eq!(
        seen,
        [
            (0, "user", Outcome::Succeeded),
            (1, "stock", Outcome::Failed),
            (2, "promo", Outcome::Skipped),
            (3, "notify", Outcome::Skipped),
            (4, "audit", Outcome::Succeeded),
        ]
    );
    let counts = report.counts();
    let mut expected = Counts::default();
    expected.succeeded = 2;
    expected.failed = 1;
    expected.skipped = 2;
    assert_eq!(counts, expected);
    assert_eq!(counts.total(), 5);
    assert_eq!(counts.to_string(), "2 succeeded, 1 failed, 2 skipped");
    assert_eq!(Counts::default().to_string(), "no nodes");
    assert!(!report.is_clean());
    assert_eq!(report.makespan(), ms(350));
    assert_eq!(report.cancel_reason(), None);
}

#[tokio::test(start_paused = true)]
async fn a_clean_run_is_clean() {
    let mut g = Graph::<()>::builder();
    g.node("a").task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    let report = g.build().expect("valid").run(()).await.expect("run");
    assert!(report.is_clean());
    assert_eq!(report.counts().to_string(), "1 succeeded");
}

#[test]
fn outcome_names() {
    let all = [
        (Outcome::Succeeded, "succeeded", true),
        (Outcome::Recovered, "recovered", true),
        (Outcome::Failed, "failed", false),
        (Outcome::Skipped, "skipped", false),
        (Outcome::NotTaken, "not_taken", false),
        (Outcome::Cancelled, "cancelled", false),
    ];
    for (outcome, name, value) in all {
        assert_eq!(outcome.as_str(), name);
        assert_eq!(outcome.to_string(), name);
        assert_eq!(outcome.has_value(), value);
    }
}

#[tokio::test(start_paused = true)]
async fn the_timeline_shows_every_node_with_its_outcome_and_times() {
    let s = shape();
    let report = run(&s).await;
    let text = report.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.len(),
        2 + 5,
        "header, scale, one line per node:\n{text}"
    );
    assert_eq!(
        lines[0],
        format!(
            "run {} · makespan 350.0 ms · 2 succeeded, 1 failed, 2 skipped",
            report.run_id()
        )
    );
    assert!(lines[1].starts_with("node "), "{}", lines[1]);
    assert!(lines[1].contains("350.0 ms|"), "{}", lines[1]);
    let expect = [
        ("user", "succeeded", "0.0 →   200.0", "1", None),
        (
            "stock",
            "failed",
            "200.0 →   350.0",
            "1",
            Some("HTTP 503 from stock"),
        ),
        (
            "promo",
            "skipped",
            "- →   350.0",
            "0",
            Some("upstream `stock` failed: HTTP 503 from stock"),
        ),
        (
            "notify",
            "skipped",
            "- →   350.0",
            "0",
            Some("upstream `promo` skipped; root cause `stock` failed: HTTP 503 from stock"),
        ),
        ("audit", "succeeded", "0.0 →   100.0", "1", None),
    ];
    for (line, (name, outcome, times, tries, msg)) in lines[2..].iter().zip(expect) {
        let mut words = line.split_whitespace();
        assert_eq!(words.next(), Some(name), "{line}");
        assert_eq!(words.next(), Some(outcome), "{line}");
        assert!(line.contains(times), "{line} has {times}");
        let tail = line.rsplit('|').next().expect("bar");
        let after_times = tail.split_once(&times[times.len() - 5..]).expect("times").1;
        assert_eq!(
            after_times.split_whitespace().next(),
            Some(tries),
            "{line} tries"
        );
        match msg {
            Some(m) => assert!(line.ends_with(m), "{line} ends with {m}"),
            None => assert!(line.ends_with(&format!(" {tries}")), "{line}"),
        }
    }
    // The bars: user fills the first 200/350 of 40 columns, audit the first 100/350.
    let bar = |line: &str| line.split('|').nth(1).expect("bar").to_owned();
    assert_eq!(
        bar(lines[2]),
        format!("{}{}", "█".repeat(23), " ".repeat(17))
    );
    assert_eq!(
        bar(lines[3]),
        format!("{}{}", " ".repeat(23), "█".repeat(17))
    );
    assert_eq!(
        bar(lines[6]),
        format!("{}{}", "█".repeat(11), " ".repeat(29))
    );
    assert_eq!(bar(lines[4]).chars().filter(|&c| c == '·').count(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_empty_graph_reports_zero_nodes() {
    let graph = Graph::<()>::builder().build().expect("valid");
    let report = graph.run(()).await.expect("run");
    assert_eq!(report.len(), 0);
    assert!(report.is_empty());
    assert_eq!(report.nodes().len(), 0);
    assert_eq!(report.counts(), Counts::default());
    assert_eq!(report.makespan(), Duration::ZERO);
    assert!(report.is_clean());
    let text = report.to_string();
    assert!(
        text.starts_with(&format!(
            "run {} · makespan 0.0 ms · no nodes\n",
            report.run_id()
        )),
        "{text}"
    );
    assert_eq!(text.lines().count(), 2, "{text}");
}

#[cfg(feature = "serde")]
mod json {
    use super::*;
    use serde_json::{Value, json};

    #[tokio::test(start_paused = true)]
    async fn json_schema() {
        let s = shape();
        let report = run(&s).await;
        let v: Value = serde_json::to_value(&report).expect("serialize");
        let run_id = v["run_id"].as_str().expect("run_id");
        assert_eq!(run_id, report.run_id().to_string());
        assert_eq!(run_id.len(), 32);
        assert!(v["makespan_ms"].is_f64());
        assert_eq!(v["makespan_ms"].as_f64(), Some(350.0));
        let counts = &v["counts"];
        for (field, n) in [
            ("succeeded", 2),
            ("recovered", 0),
            ("failed", 1),
            ("skipped", 2),
            ("not_taken", 0),
            ("cancelled", 0),
        ] {
            assert_eq!(counts[field], json!(n), "counts.{field}");
        }
        let nodes = v["nodes"].as_array().expect("nodes");
        assert_eq!(nodes.len(), 5);
        // Field by field, so that fields added to the schema later do not break the test.
        let check = |node: &Value, expected: Value| {
            for (field, value) in expected.as_object().expect("object") {
                assert_eq!(&node[field], value, "{}.{field}", node["name"]);
                assert!(node.get(field).is_some(), "{field} is present");
            }
        };
        check(
            &nodes[0],
            json!({"name": "user", "outcome": "succeeded", "attempts": 1,
                   "start_ms": 0.0, "end_ms": 200.0, "error": null,
                   "skipped_because": null, "root_cause": null}),
        );
        check(
            &nodes[1],
            json!({"name": "stock", "outcome": "failed", "attempts": 1,
                   "start_ms": 200.0, "end_ms": 350.0, "error": "HTTP 503 from stock",
                   "skipped_because": null, "root_cause": null}),
        );
        check(
            &nodes[2],
            json!({"name": "promo", "outcome": "skipped", "attempts": 0,
                   "start_ms": null, "end_ms": 350.0,
                   "error": "upstream `stock` failed: HTTP 503 from stock",
                   "skipped_because": "stock", "root_cause": "stock"}),
        );
        assert!(nodes[0]["start_ms"].is_f64());
        assert!(nodes[0]["end_ms"].is_f64());
        assert_eq!(nodes[3]["skipped_because"], "promo");
        assert_eq!(nodes[3]["root_cause"], "stock");
        assert_eq!(nodes[4]["name"], "audit");
        assert!(nodes[4]["start_ms"].is_f64());
        assert!(nodes[4]["end_ms"].is_f64());
        assert_eq!(nodes[4]["end_ms"].as_f64(), Some(100.0));
        // The text form is valid JSON too.
        let text = serde_json::to_string(&report).expect("serialize");
        assert_eq!(serde_json::from_str::<Value>(&text).expect("parse"), v);
    }

    #[test]
    fn outcomes_serialize_snake_case() {
        for (outcome, name) in [
            (Outcome::Succeeded, "succeeded"),
            (Outcome::Recovered, "recovered"),
            (Outcome::Failed, "failed"),
            (Outcome::Skipped, "skipped"),
            (Outcome::NotTaken, "not_taken"),
            (Outcome::Cancelled, "cancelled"),
        ] {
            assert_eq!(serde_json::to_value(outcome).expect("ser"), json!(name));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn empty_and_cancelled_reports_serialize() {
        let graph = Graph::<()>::builder().build().expect("valid");
        let report = graph.run(()).await.expect("run");
        let v = serde_json::to_value(&report).expect("serialize");
        assert_eq!(v["nodes"], json!([]));
        assert_eq!(v["makespan_ms"].as_f64(), Some(0.0));

        let s = shape();
        let run = s.graph.run(());
        run.canceller().cancel();
        let report = run
            .await
            .expect_err("cancelled")
            .into_report()
            .expect("report");
        let v = serde_json::to_value(&report).expect("serialize");
        for node in v["nodes"].as_array().expect("nodes") {
            assert_eq!(node["outcome"], "cancelled");
            assert_eq!(node["start_ms"], Value::Null);
            assert_eq!(node["attempts"], 0);
            assert_eq!(node["error"], "cancelled through its handle");
        }
    }
}

/// The text timeline keeps one row per node whatever its name: control characters are
/// escaped, and columns are padded by display width (CJK and emoji are two columns wide).
/// The JSON keeps the names exact.
#[tokio::test(start_paused = true)]
async fn the_timeline_keeps_its_rows_and_columns_with_any_name() {
    let names = [
        "line\nbreak",
        "car\rriage",
        "tab\tbed",
        "库存",
        "📦 ship",
        "esc\u{1b}[31m",
    ];
    let mut g = Graph::<()>::builder();
    for name in names {
        let _: Node<()> = g
            .node(name)
            .task(|_ctx, ()| async { Err::<(), BoxError>("a\nmultiline\nerror".into()) });
    }
    let report = g.build().unwrap().run(()).await.unwrap();
    let text = report.to_string();
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows.len(), 2 + names.len(), "one row per node:\n{text}");
    for (row, escaped) in rows[2..].iter().zip([
        "line\\nbreak",
        "car\\rriage",
        "tab\\tbed",
        "库存",
        "📦 ship",
        "esc\\u{1b}[31m",
    ]) {
        assert!(row.starts_with(escaped), "{row}");
        assert!(row.ends_with("a\\nmultiline\\nerror"), "{row}");
    }
    // The bar starts in the same display column on every row.
    let bar_column = |row: &str| {
        let at = row.find('|').expect("a bar");
        unicode_width::UnicodeWidthStr::width(&row[..at])
    };
    let first = bar_column(rows[1]);
    assert!(
        rows[2..].iter().all(|row| bar_column(row) == first),
        "{text}"
    );
    #[cfg(feature = "serde")]
    {
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["nodes"][0]["name"], "line\nbreak");
        assert_eq!(json["nodes"][3]["name"], "库存");
    }
}

/// `require` gives a node's value, or an error naming the node, its outcome and why, whose
/// source is the error behind it: the node's own, or the root cause's for a skip.
#[tokio::test(start_paused = true)]
async fn require_names_the_node_its_outcome_and_the_cause() {
    use baton_graph::{NodeError, report::MissingValue};
    let mut g = Graph::<()>::builder();
    let user = g
        .node("user")
        .task(|_ctx, ()| async { Err::<u32, BoxError>("503".into()) });
    let stock = g
        .node("stock")
        .after(user)
        .task(|_ctx, u| async move { Ok::<_, BoxError>(*u) });
    let mut other_branch = None;
    let route = g
        .router::<u32>("route")
        .select(|_, ()| "a")
        .branch("a", |b| b.task(|_ctx, ()| async { Ok::<_, BoxError>(1) }))
        .branch("b", |b| {
            let handle = b.task(|_ctx, ()| async { Ok::<_, BoxError>(2) });
            other_branch = Some(handle);
            handle
        })
        .finish();
    let report = g.build().unwrap().run(()).await.unwrap();
    assert_eq!(*report.require(route).unwrap(), 1);

    let failed: MissingValue = report.require(user).unwrap_err();
    assert_eq!(
        (failed.node(), failed.outcome()),
        ("user", Some(Outcome::Failed))
    );
    // The error is the source, not repeated in the message.
    assert_eq!(failed.to_string(), "node `user` failed");
    let source = std::error::Error::source(&failed).map(ToString::to_string);
    assert_eq!(source.as_deref(), Some("503"));
    let skipped = report.require(stock).unwrap_err();
    assert_eq!(skipped.outcome(), Some(Outcome::Skipped));
    assert_eq!(
        skipped.to_string(),
        "node `stock` skipped: upstream `user` failed"
    );
    let source = std::error::Error::source(&skipped).expect("the root cause");
    assert!(source.downcast_ref::<NodeError>().is_some());
    let not_taken = report.require(other_branch.unwrap()).unwrap_err();
    assert_eq!(not_taken.outcome(), Some(Outcome::NotTaken));
    // `?` into a boxed error keeps the chain.
    let boxed: BoxError = skipped.into();
    assert!(boxed.to_string().contains("upstream `user` failed"));

    let mut other = Graph::<()>::builder();
    let foreign: Node<u32> = other
        .node("x")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(0) });
    let error = report.require(foreign).unwrap_err();
    assert_eq!(error.outcome(), None);
}

/// An async task that computes past its timeout without reaching an `.await` cannot be cut:
/// it keeps its value, and its attempt log, timeline row and JSON say that it overran its
/// cut and by how much. On a real clock (the computing is a thread sleep), asserting only
/// lower bounds: on the fast path (a timeout alone), on the full path (with a bulkhead)
/// and in a pipeline call.
#[tokio::test]
async fn an_attempt_that_overran_its_cut_says_so() {
    fn spin() -> u32 {
        std::thread::sleep(ms(300)); // computes without yielding
        7
    }
    let bulkhead = baton_graph::Bulkhead::new("db", 4, ms(10));
    let mut g = Graph::<()>::builder();
    let fast = g
        .node("fast")
        .timeout(ms(50))
        .task(|_ctx, ()| async { Ok::<_, BoxError>(spin()) });
    let full = g
        .node("full")
        .timeout(ms(50))
        .bulkhead(&bulkhead)
        .task(|_ctx, ()| async { Ok::<_, BoxError>(spin()) });
    let report = g.build().unwrap().run(()).await.unwrap();
    for node in [fast, full] {
        let n = report.node(node).unwrap();
        assert_eq!(
            (n.outcome(), report.get(node)),
            (Outcome::Succeeded, Some(&7))
        );
        let log = n.attempt_log();
        assert_eq!(log.len(), 1, "{}", n.name());
        assert!(log[0].overran >= ms(250), "{:?}", log[0]);
        let text = report.to_string();
        let row = text.lines().find(|l| l.starts_with(n.name())).unwrap();
        assert!(row.contains("(attempt 1 overran its cut by "), "{row}");
        #[cfg(feature = "serde")]
        {
            let v = serde_json::to_value(&report).unwrap();
            let overran = v["nodes"][n.index()]["attempt_log"][0]["overran_ms"].as_f64();
            assert!(overran.is_some_and(|ms| ms >= 250.0), "{overran:?}");
        }
    }
    let pipeline = baton_graph::Pipeline::<u32>::builder("call")
        .timeout(ms(50))
        .build()
        .unwrap();
    let call = pipeline.run(|_| async { Ok::<_, BoxError>(spin()) }).await;
    assert_eq!(call.value(), Some(&7));
    assert!(call.attempt_log()[0].overran >= ms(250));
}

/// The README shows the stats panel as `Display` prints it: the same words in the same
/// order, numbers aside.
#[tokio::test]
async fn the_readme_shows_the_stats_line_display_prints() {
    fn words(line: &str) -> String {
        line.split(|c: char| c.is_ascii_digit())
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("N")
    }
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("the README");
    let shown = readme
        .lines()
        .skip_while(|l| !l.contains("with a one-line `Display`"))
        .find(|l| l.contains("runs[") || l.contains("stats"))
        .expect("the README's stats line");
    let printed = baton_graph::Orchestrator::new().stats().to_string();
    assert_eq!(words(shown), words(&printed), "{shown}\n{printed}");
}
