//! Policies from configuration: TOML, YAML and JSON read alike; every error names its
//! key's path; a reload changes thresholds in place and policy sets for the runs and
//! calls that start after it, with one event.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_graph::config::{ConfigAction, ConfigErrorKind};
use baton_graph::{
    BoxError, Bulkhead, CircuitBreaker, Graph, Orchestrator, Outcome,
    breaker::{BreakerState, BreakerWindow},
    config::{Config, ConfigError},
    observe::{Event, Observer},
};
use tokio::time::sleep;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn toml(text: &str) -> Result<Config, ConfigError> {
    Config::from_deserializer(toml::Deserializer::parse(text).expect("TOML syntax"))
}

fn yaml(text: &str) -> Result<Config, ConfigError> {
    Config::from_deserializer(serde_norway::Deserializer::from_str(text))
}

fn json(text: &str) -> Result<Config, ConfigError> {
    Config::from_deserializer(&mut serde_json::Deserializer::from_str(text))
}

const TOML: &str = r#"
[breakers.inventory]
failure_rate = { threshold = 0.5, window = 20, min_calls = 10 }
open_duration = "2s"

[breakers.payments]
consecutive_failures = 3
failure_rate = { threshold = 0.25, window = "10s", min_calls = 5 }

[bulkheads.db]
max_concurrent = 8
max_wait = "50ms"

[rate_limiters.inventory]
permits = 100
per = "1s"
burst = 10

[retry_budgets.inventory]
ratio = 0.1

[policies.checkout]
timeout = "300ms"
budget = "2s"
breaker = "inventory"
bulkhead = "db"
rate_limiter = "inventory"
retry = { max_attempts = 3, budget = "inventory", backoff = { exponential = "100ms", max_delay = "1s", jitter = "full" } }
hedge = { delay = "50ms", max_hedges = 1 }
"#;

const YAML: &str = r#"
breakers:
  inventory:
    failure_rate: { threshold: 0.5, window: 20, min_calls: 10 }
    open_duration: 2s
  payments:
    consecutive_failures: 3
    failure_rate: { threshold: 0.25, window: 10s, min_calls: 5 }
bulkheads:
  db: { max_concurrent: 8, max_wait: 50ms }
rate_limiters:
  inventory: { permits: 100, per: 1s, burst: 10 }
retry_budgets:
  inventory: { ratio: 0.1 }
policies:
  checkout:
    timeout: 300ms
    budget: 2s
    breaker: inventory
    bulkhead: db
    rate_limiter: inventory
    retry:
      max_attempts: 3
      budget: inventory
      backoff: { exponential: 100ms, max_delay: 1s, jitter: full }
    hedge: { delay: 50ms, max_hedges: 1 }
"#;

const JSON: &str = r#"{
  "breakers": {
    "inventory": {
      "failure_rate": { "threshold": 0.5, "window": 20, "min_calls": 10 },
      "open_duration": "2s"
    },
    "payments": {
      "consecutive_failures": 3,
      "failure_rate": { "threshold": 0.25, "window": "10s", "min_calls": 5 }
    }
  },
  "bulkheads": { "db": { "max_concurrent": 8, "max_wait": "50ms" } },
  "rate_limiters": { "inventory": { "permits": 100, "per": "1s", "burst": 10 } },
  "retry_budgets": { "inventory": { "ratio": 0.1 } },
  "policies": {
    "checkout": {
      "timeout": "300ms",
      "budget": "2s",
      "breaker": "inventory",
      "bulkhead": "db",
      "rate_limiter": "inventory",
      "retry": {
        "max_attempts": 3,
        "budget": "inventory",
        "backoff": { "exponential": "100ms", "max_delay": "1s", "jitter": "full" }
      },
      "hedge": { "delay": "50ms", "max_hedges": 1 }
    }
  }
}"#;

#[test]
fn toml_yaml_and_json_read_alike() {
    let from_toml = toml(TOML).unwrap();
    assert_eq!(yaml(YAML).unwrap(), from_toml);
    assert_eq!(json(JSON).unwrap(), from_toml);
    let checkout = &from_toml.policies["checkout"];
    assert_eq!(checkout.timeout, Some(ms(300)));
    assert_eq!(checkout.retry.as_ref().map(|r| r.max_attempts), Some(3));
    assert_eq!(from_toml.bulkheads["db"].max_wait, ms(50));
    assert_eq!(
        from_toml.retry_budgets["inventory"].ttl,
        Duration::from_secs(10)
    );
}

/// The error's path, its kind, and its message.
fn fails(result: Result<Config, ConfigError>) -> (String, ConfigErrorKind, String) {
    let e = result.expect_err("an error");
    assert_eq!(e.to_string(), format!("{}: {}", e.path(), e.message()));
    (
        e.path().to_owned(),
        e.kind().clone(),
        e.message().to_owned(),
    )
}

#[test]
fn an_unknown_key_is_rejected_with_its_path() {
    let (path, kind, message) = fails(toml("[breakers.inventory]\nconsecutive_failure = 3\n"));
    assert_eq!(path, "breakers.inventory.consecutive_failure");
    assert_eq!(kind, ConfigErrorKind::Format);
    assert!(
        message.contains("unknown field `consecutive_failure`"),
        "{message}"
    );
    let (path, ..) = fails(yaml("bulkheads:\n  db: { max_concurrent: 2, wait: 5ms }\n"));
    assert_eq!(path, "bulkheads.db.wait");
    let (path, ..) = fails(json(r#"{ "policy": {} }"#));
    assert_eq!(path, "policy");
    let (path, ..) = fails(json(
        r#"{ "policies": { "checkout": { "retry": { "max_attempts": 2, "delay": "1s" } } } }"#,
    ));
    assert_eq!(path, "policies.checkout.retry.delay");
}

#[test]
fn a_bad_duration_is_rejected_with_its_path() {
    let (path, kind, _) = fails(yaml(
        "breakers:\n  inventory:\n    open_duration: 5 parsecs\n",
    ));
    assert_eq!(path, "breakers.inventory.open_duration");
    assert_eq!(kind, ConfigErrorKind::Format);
    let (path, ..) = fails(toml("[policies.checkout]\ntimeout = 300\n"));
    assert_eq!(path, "policies.checkout.timeout");
    let (path, _, message) = fails(json(
        r#"{ "breakers": { "b": { "failure_rate": { "threshold": 0.5, "window": "ten", "min_calls": 1 } } } }"#,
    ));
    assert_eq!(path, "breakers.b.failure_rate.window");
    assert!(message.contains("`ten` is not a duration"), "{message}");
}

#[test]
fn an_impossible_value_is_rejected_with_its_path() {
    let cases = [
        (
            json(
                r#"{ "breakers": { "inventory": { "failure_rate": { "threshold": 1.5, "window": 10, "min_calls": 5 } } } }"#,
            ),
            "breakers.inventory.failure_rate.threshold",
        ),
        (
            toml("[breakers.inventory]\nhalf_open_probes = 0\n"),
            "breakers.inventory.half_open_probes",
        ),
        (
            yaml(
                "breakers:\n  b:\n    failure_rate: { threshold: 0.5, window: 5, min_calls: 6 }\n",
            ),
            "breakers.b.failure_rate.min_calls",
        ),
        (
            toml(
                "[breakers.b]\nopen_duration = \"10s\"\nopen_duration_growth = { multiplier = 2.0, max = \"1s\" }\n",
            ),
            "breakers.b.open_duration_growth.max",
        ),
        (
            toml("[bulkheads.db]\nmax_concurrent = 0\n"),
            "bulkheads.db.max_concurrent",
        ),
        (
            yaml("rate_limiters:\n  inventory: { permits: 10, per: 0s }\n"),
            "rate_limiters.inventory.per",
        ),
        (
            json(r#"{ "rate_limiters": { "i": { "permits": 10, "per": "1s", "burst": 0 } } }"#),
            "rate_limiters.i.burst",
        ),
        (
            toml("[retry_budgets.r]\nttl = \"2h\"\n"),
            "retry_budgets.r.ttl",
        ),
        (
            toml("[policies.p]\ntimeout = \"0s\"\n"),
            "policies.p.timeout",
        ),
        (
            toml("[policies.p]\nbudget = \"5ms\"\nmin_attempt_time = \"10ms\"\n"),
            "policies.p.budget",
        ),
        (
            json(r#"{ "policies": { "p": { "retry": { "max_attempts": 0 } } } }"#),
            "policies.p.retry.max_attempts",
        ),
        (
            toml(
                "[policies.p]\nretry = { max_attempts = 2, backoff = { exponential = \"1s\", constant = \"1s\" } }\n",
            ),
            "policies.p.retry.backoff",
        ),
        (
            yaml(
                "policies:\n  p:\n    retry: { max_attempts: 2, backoff: { exponential: 1s, multiplier: 0.5 } }\n",
            ),
            "policies.p.retry.backoff",
        ),
        (
            json(r#"{ "policies": { "p": { "hedge": { "delay": "0s" } } } }"#),
            "policies.p.hedge",
        ),
    ];
    for (result, expected) in cases {
        let (path, kind, message) = fails(result);
        assert_eq!(path, expected, "{message}");
        assert_eq!(kind, ConfigErrorKind::Invalid, "{path}: {message}");
    }
}

#[test]
fn a_name_defined_as_another_kind_is_rejected() {
    let text = "[bulkheads.db]\nmax_concurrent = 2\n\n[policies.p]\nbreaker = \"db\"\n";
    let (path, kind, message) = fails(toml(text));
    assert_eq!(path, "policies.p.breaker");
    assert_eq!(
        kind,
        ConfigErrorKind::WrongKind {
            expected: "circuit breaker",
            found: vec!["bulkhead"],
            name: "db".into()
        }
    );
    assert_eq!(message, "`db` is a bulkhead here, not a circuit breaker");
    // Registered in the orchestrator only, under another kind.
    let orch = Orchestrator::new();
    orch.add_bulkhead(&Bulkhead::new("pool", 2, Duration::ZERO))
        .unwrap();
    let config = yaml("policies:\n  p: { breaker: pool }\n").unwrap();
    let e = orch.apply(&config).unwrap_err();
    assert_eq!(e.path(), "policies.p.breaker");
    assert!(matches!(e.kind(), ConfigErrorKind::WrongKind { found, .. } if found == &["bulkhead"]));
}

#[test]
fn an_unknown_name_in_a_policy_set_is_rejected_and_nothing_applied() {
    let config = json(
        r#"{ "bulkheads": { "db": { "max_concurrent": 2 } },
             "policies": { "p": { "retry": { "max_attempts": 2, "budget": "nope" } } } }"#,
    )
    .unwrap();
    let orch = Orchestrator::new();
    let e = orch.apply(&config).unwrap_err();
    assert_eq!(e.path(), "policies.p.retry.budget");
    assert_eq!(
        e.kind(),
        &ConfigErrorKind::UnknownName {
            kind: "retry budget",
            name: "nope".into()
        }
    );
    assert!(orch.bulkhead("db").is_none(), "all or nothing");
    assert!(orch.policy_set("p").is_none());
    // A node that names a policy set the orchestrator lacks fails to build.
    let mut g = orch.graph::<()>();
    let _ = g
        .node("n")
        .policy_set("p")
        .task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    let err = g.build().unwrap_err();
    assert_eq!(
        err.to_string(),
        "node `n` names policy set `p`, which the orchestrator does not have"
    );
}

type Seen = Arc<Mutex<Vec<Vec<(String, ConfigAction)>>>>;

struct Applied(Seen);

impl Observer for Applied {
    fn on_event(&self, event: &Event<'_>) {
        if let Event::ConfigApplied { changes } = event {
            let changes = changes.iter().map(|c| (c.to_string(), c.action)).collect();
            self.0.lock().unwrap().push(changes);
        }
    }
}

const BEFORE: &str = r#"
[breakers.inventory]
consecutive_failures = 5

[bulkheads.db]
max_concurrent = 2

[policies.stock]
timeout = "100ms"
breaker = "inventory"
bulkhead = "db"
"#;

const AFTER: &str = r#"
[breakers.inventory]
consecutive_failures = 1

[bulkheads.db]
max_concurrent = 1

[policies.stock]
timeout = "300ms"
breaker = "inventory"
bulkhead = "db"
"#;

/// A graph of one node, `stock`, with the policy set `stock`, whose task sleeps `work`
/// and then fails.
fn stock(orch: &Orchestrator, work: Duration) -> Graph<()> {
    let mut g = orch.graph::<()>();
    let _ = g
        .node("stock")
        .policy_set("stock")
        .task(move |_ctx, ()| async move {
            sleep(work).await;
            Err::<u32, BoxError>("503".into())
        });
    g.build().unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_reload_changes_thresholds_in_place_and_policy_sets_for_later_runs() {
    let seen = Seen::default();
    let orch = Orchestrator::builder()
        .observer(Applied(Arc::clone(&seen)))
        .build();
    let applied = orch.apply(&toml(BEFORE).unwrap()).unwrap();
    assert!(applied.changed_anything());
    let before = stock(&orch, ms(200));
    // A run in flight when the reload comes keeps its policies: its 100 ms timeout.
    let in_flight = tokio::spawn({
        let before = before.clone();
        async move { before.run(()).await }
    });
    sleep(ms(10)).await;
    let applied = orch.apply(&toml(AFTER).unwrap()).unwrap();
    let report = in_flight.await.unwrap().unwrap();
    let node = report.by_name("stock").unwrap();
    assert_eq!(node.error().map(|e| e.kind()), Some("timeout"));
    assert_eq!(node.end(), ms(100));
    // The thresholds changed in place: the breaker and bulkhead the built graph holds
    // are the same objects, with the new settings; one failure now opens the breaker.
    let breaker = orch.breaker("inventory").unwrap();
    assert_eq!(breaker.state(), BreakerState::Open);
    assert_eq!(orch.bulkhead("db").unwrap().max_concurrent(), 1);
    let rejected = before.run(()).await.unwrap();
    assert_eq!(
        rejected.by_name("stock").unwrap().error().map(|e| e.kind()),
        Some("breaker_open")
    );
    // The graph built before the reload and one built after both take 300 ms now.
    for graph in [before, stock(&orch, ms(200))] {
        breaker.reset().await;
        let after = graph.run(()).await.unwrap();
        let node = after.by_name("stock").unwrap();
        assert_eq!((node.outcome(), node.end()), (Outcome::Failed, ms(200)));
        assert_eq!(node.error().map(|e| e.kind()), Some("task"));
    }
    // One event per apply, naming every policy and what happened to it.
    let events = seen.lock().unwrap().clone();
    let updated = vec![
        (
            "circuit breaker `inventory` updated".to_owned(),
            ConfigAction::Updated,
        ),
        ("bulkhead `db` updated".to_owned(), ConfigAction::Updated),
        (
            "policy set `stock` updated".to_owned(),
            ConfigAction::Updated,
        ),
    ];
    assert_eq!(events.len(), 2);
    assert!(events[0].iter().all(|(_, a)| *a == ConfigAction::Added));
    assert_eq!(events[1], updated);
    assert_eq!(applied.changes().len(), 3);
    // The same configuration again changes nothing, and says so.
    let again = orch.apply(&toml(AFTER).unwrap()).unwrap();
    assert!(!again.changed_anything());
}

/// The policy set `stock` with a 100 ms timeout, then with 300 ms and two attempts 10 ms
/// apart.
const SET_BEFORE: &str = "[policies.stock]\ntimeout = \"100ms\"\n";
const SET_AFTER: &str = r#"
[policies.stock]
timeout = "300ms"
retry = { max_attempts = 2, backoff = { constant = "10ms" } }
"#;

/// The end of a graph's node `stock`, what it failed of and how many attempts it made.
fn ended(report: &baton_graph::Report) -> (Duration, Option<&'static str>, u32) {
    let node = report.by_name("stock").unwrap();
    (node.end(), node.error().map(|e| e.kind()), node.attempts())
}

#[tokio::test(start_paused = true)]
async fn a_graph_built_before_a_reload_takes_the_new_set_from_its_next_run() {
    let orch = Orchestrator::new();
    orch.apply(&toml(SET_BEFORE).unwrap()).unwrap();
    let graph = stock(&orch, ms(200));
    let in_flight = tokio::spawn({
        let graph = graph.clone();
        async move { graph.run(()).await }
    });
    sleep(ms(10)).await;
    orch.apply(&toml(SET_AFTER).unwrap()).unwrap();
    // The run in flight keeps the timeout it started with.
    let report = in_flight.await.unwrap().unwrap();
    assert_eq!(ended(&report), (ms(100), Some("timeout"), 1));
    // The next run of the same graph takes the new set: two attempts of 200 ms, 10 ms apart.
    let report = graph.run(()).await.unwrap();
    assert_eq!(ended(&report), (ms(410), Some("gave_up"), 2));
}

#[test]
fn a_graph_built_before_a_reload_draws_the_new_set() {
    let orch = Orchestrator::new();
    orch.apply(&toml(SET_BEFORE).unwrap()).unwrap();
    let graph = stock(&orch, ms(200));
    assert!(
        graph
            .to_mermaid()
            .contains(r#"n0["stock<br/>timeout 100 ms"]"#)
    );
    orch.apply(&toml(SET_AFTER).unwrap()).unwrap();
    let mermaid = graph.to_mermaid();
    assert!(
        mermaid.contains(r#"n0["stock<br/>timeout 300 ms · retry 2"]"#),
        "{mermaid}"
    );
    assert!(graph.to_dot().contains("timeout 300 ms"));
}

#[tokio::test(start_paused = true)]
async fn a_pipeline_built_before_a_reload_takes_the_new_set_from_its_next_call() {
    let orch = Orchestrator::new();
    orch.apply(&toml(SET_BEFORE).unwrap()).unwrap();
    let pipeline = baton_graph::Pipeline::<u32>::builder("stock")
        .orchestrator(&orch)
        .policy_set("stock")
        .build()
        .unwrap();
    let task = |_| async {
        sleep(ms(200)).await;
        Err::<u32, BoxError>("503".into())
    };
    let in_flight = tokio::spawn({
        let pipeline = pipeline.clone();
        async move { pipeline.run(task).await }
    });
    sleep(ms(10)).await;
    orch.apply(&toml(SET_AFTER).unwrap()).unwrap();
    let call = in_flight.await.unwrap();
    let kind = call.error().map(|e| e.kind());
    assert_eq!(
        (call.elapsed(), kind, call.attempts()),
        (ms(100), Some("timeout"), 1)
    );
    let call = pipeline.run(task).await;
    let kind = call.error().map(|e| e.kind());
    assert_eq!(
        (call.elapsed(), kind, call.attempts()),
        (ms(410), Some("gave_up"), 2)
    );
}

#[tokio::test(start_paused = true)]
async fn after_a_reload_a_node_keeps_its_own_settings_over_the_set() {
    let orch = Orchestrator::new();
    orch.apply(&toml(SET_BEFORE).unwrap()).unwrap();
    let mut g = orch.graph::<()>();
    let _ = g
        .node("stock")
        .policy_set("stock")
        .timeout(ms(50))
        .task(|_ctx, ()| async {
            sleep(ms(200)).await;
            Err::<u32, BoxError>("503".into())
        });
    let graph = g.build().unwrap();
    assert_eq!(
        ended(&graph.run(()).await.unwrap()),
        (ms(50), Some("timeout"), 1)
    );
    orch.apply(&toml(SET_AFTER).unwrap()).unwrap();
    // Its own 50 ms timeout stands; the set's new retry fills what it did not set.
    let report = graph.run(()).await.unwrap();
    assert_eq!(ended(&report), (ms(110), Some("gave_up"), 2));
}

#[tokio::test(start_paused = true)]
async fn a_set_that_no_longer_fits_a_built_node_leaves_it_its_policies() {
    let orch = Orchestrator::new();
    orch.apply(&toml(SET_BEFORE).unwrap()).unwrap();
    let mut g = orch.graph::<()>();
    let _ = g
        .node("stock")
        .policy_set("stock")
        .min_attempt_time(ms(50))
        .task(|_ctx, ()| async {
            sleep(ms(200)).await;
            Err::<u32, BoxError>("503".into())
        });
    let graph = g.build().unwrap();
    // A budget below the node's minimum attempt time: the set is valid, the node's
    // policies with it are not.
    let narrow = "[policies.stock]\ntimeout = \"300ms\"\nbudget = \"20ms\"\n";
    orch.apply(&toml(narrow).unwrap()).unwrap();
    for _ in 0..2 {
        let report = graph.run(()).await.unwrap();
        assert_eq!(ended(&report), (ms(100), Some("timeout"), 1));
    }
    // A later change that fits is taken.
    orch.apply(&toml(SET_AFTER).unwrap()).unwrap();
    let report = graph.run(()).await.unwrap();
    assert_eq!(ended(&report), (ms(410), Some("gave_up"), 2));
}

#[test]
fn a_breaker_reconfigured_keeps_its_state_and_a_resized_window_starts_empty() {
    let rate = |threshold, window, min_calls| {
        CircuitBreaker::builder("b").failure_rate(
            threshold,
            BreakerWindow::Count(window),
            min_calls,
        )
    };
    let three_failures = || {
        let breaker = rate(0.5, 4, 4).build().unwrap();
        for _ in 0..3 {
            breaker.try_acquire().unwrap().failure(ms(1));
        }
        breaker
    };
    // The same window keeps its three failures: the fourth call, a success, trips at 0.7.
    let breaker = three_failures();
    assert!(breaker.reconfigure(rate(0.7, 4, 4)).unwrap());
    breaker.try_acquire().unwrap().success(ms(1));
    assert_eq!(breaker.state(), BreakerState::Open, "3 of 4 failed");
    // A reconfiguration is no transition: open stays open, in the same generation.
    assert!(breaker.reconfigure(rate(0.5, 10, 2)).unwrap());
    let snapshot = breaker.snapshot();
    assert_eq!(
        (snapshot.state, snapshot.generation),
        (BreakerState::Open, 1)
    );
    // A window of another size starts empty.
    let breaker = three_failures();
    assert!(breaker.reconfigure(rate(0.5, 10, 2)).unwrap());
    assert_eq!(breaker.snapshot().window.map(|w| w.calls), Some(0));
    breaker.try_acquire().unwrap().success(ms(1));
    assert_eq!(breaker.state(), BreakerState::Closed);
    breaker.try_acquire().unwrap().failure(ms(1));
    assert_eq!(breaker.state(), BreakerState::Open, "1 of 2 failed");
    // Settings the builder rejects leave the breaker as it was.
    let e = breaker
        .reconfigure(CircuitBreaker::builder("x").half_open_probes(0))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "circuit breaker `b`: `half_open_probes` must not be zero"
    );
    assert!(
        !breaker.reconfigure(rate(0.5, 10, 2)).unwrap(),
        "nothing changed"
    );
}

#[tokio::test(start_paused = true)]
async fn a_bulkhead_shrunk_below_its_use_admits_again_only_under_the_new_limit() {
    let db = Bulkhead::new("db", 3, Duration::ZERO);
    let orch = Orchestrator::new();
    orch.add_bulkhead(&db).unwrap();
    let mut g = orch.graph::<()>();
    for i in 0..3 {
        let _ = g
            .node(format!("q{i}"))
            .bulkhead("db")
            .task(|_ctx, ()| async {
                sleep(ms(100)).await;
                Ok::<_, BoxError>(())
            });
    }
    let graph = g.build().unwrap();
    let run = tokio::spawn(async move { graph.run(()).await });
    sleep(ms(10)).await;
    assert_eq!(db.available(), 0);
    // Three in use, the limit now one: the running attempts keep their permits.
    assert!(db.reconfigure(1, Duration::ZERO).unwrap());
    let report = run.await.unwrap().unwrap();
    assert_eq!(report.counts().succeeded, 3);
    // Two of the three permits were taken out of use as they were released.
    assert_eq!((db.available(), db.max_concurrent()), (1, 1));
    // Raised again, the new permits are free at once.
    assert!(db.reconfigure(4, ms(5)).unwrap());
    assert_eq!((db.available(), db.max_wait()), (4, ms(5)));
    assert!(!db.reconfigure(4, ms(5)).unwrap(), "nothing changed");
    assert!(db.reconfigure(0, ms(5)).is_err());
    assert_eq!(db.max_concurrent(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_rate_limiter_takes_its_new_rate_from_the_next_permit() {
    let orch = Orchestrator::new();
    let slow = "[rate_limiters.inventory]\npermits = 10\nper = \"1s\"\nburst = 1\n";
    orch.apply(&toml(slow).unwrap()).unwrap();
    let limiter = orch.rate_limiter("inventory").unwrap();
    assert_eq!(limiter.try_acquire(), Ok(()));
    assert_eq!(limiter.try_acquire(), Err(ms(100)));
    let fast = "rate_limiters:\n  inventory: { permits: 100, per: 1s, burst: 1, max_wait: 20ms }\n";
    let applied = orch.apply(&yaml(fast).unwrap()).unwrap();
    assert_eq!(applied.changes()[0].action, ConfigAction::Updated);
    assert_eq!(limiter.rate(), (100, Duration::from_secs(1), 1));
    assert_eq!(limiter.wait_bound(), ms(20));
    // The slot reserved under the old rate stands; from it on, permits are 10 ms apart.
    assert_eq!(limiter.try_acquire(), Err(ms(100)));
    sleep(ms(100)).await;
    assert_eq!(limiter.try_acquire(), Ok(()));
    assert_eq!(limiter.acquire(None).await, Ok(ms(10)));
    // An impossible rate leaves it as it was.
    assert!(
        limiter
            .reconfigure(0, Duration::from_secs(1), 1, Duration::ZERO)
            .is_err()
    );
    assert_eq!(limiter.rate(), (100, Duration::from_secs(1), 1));
}

#[test]
fn a_retry_budget_with_new_settings_is_refused_not_ignored() {
    let orch = Orchestrator::new();
    orch.apply(&toml("[retry_budgets.r]\nratio = 0.1\n").unwrap())
        .unwrap();
    let same = orch
        .apply(&toml("[retry_budgets.r]\nratio = 0.1\n").unwrap())
        .unwrap();
    assert_eq!(same.changes()[0].action, ConfigAction::Unchanged);
    let e = orch
        .apply(&json(r#"{ "retry_budgets": { "r": { "ratio": 0.3 } } }"#).unwrap())
        .unwrap_err();
    assert_eq!(
        (e.path(), e.kind()),
        ("retry_budgets.r", &ConfigErrorKind::NotInPlace)
    );
}
