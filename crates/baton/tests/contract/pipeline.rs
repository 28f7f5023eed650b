//! A graph node and a pipeline call with the same policies behave alike: every scenario
//! here runs both ways, on the paused clock, and compares what each did (outcome, value,
//! attempts, attempt log, error, timing, events).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_graph::{
    Backoff, BoxError, BuildError, Bulkhead, CircuitBreaker, Event, Fallback, Graph, NodeError,
    Orchestrator, Outcome, Pipeline, Policies, RateLimiter, Retry, RetryBudget,
};
use tokio::time::{Instant, sleep};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// What one attempt of the task does.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Answers at once.
    Value(u32),
    /// Fails at once.
    Fail,
    /// Panics at once.
    Panic,
    /// Waits this long, then takes the next step.
    Wait(u64, &'static Step),
}

const VALUE: Step = Step::Value(7);
const FAIL: Step = Step::Fail;

impl Step {
    async fn run(self) -> Result<u32, BoxError> {
        let mut step = self;
        loop {
            match step {
                Step::Value(v) => return Ok(v),
                Step::Fail => return Err("downstream 503".into()),
                Step::Panic => panic!("bug in the task"),
                Step::Wait(n, then) => {
                    sleep(ms(n)).await;
                    step = *then;
                }
            }
        }
    }
}

/// The policies of one scenario; breakers and bulkheads are made afresh for each side.
#[derive(Clone, Default)]
struct Spec {
    timeout: Option<Duration>,
    retry: Option<Retry>,
    budget: Option<Duration>,
    min_attempt: Option<Duration>,
    breaker: Option<u32>,
    ignore_failures: bool,
    bulkhead: Option<(usize, Duration)>,
    /// A rate limiter of one permit per this interval, waiting up to this long.
    rate_limit: Option<(Duration, Duration)>,
    fallback: Option<fn() -> Fallback<u32>>,
    /// Steps of attempts 1, 2, …; the last repeats.
    steps: Vec<Step>,
    /// Calls made one after the other (the same breaker sees them all).
    calls: usize,
    /// A call that holds the bulkhead's only permit this long, alongside the first call.
    holder: Option<u64>,
}

/// What one call (or run) did, as both sides report it.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    outcome: Outcome,
    value: Option<u32>,
    attempts: u32,
    /// (start, end, delay before, error, rate-limit wait) per logged attempt, in ms.
    log: Vec<(u128, u128, u128, Option<String>, u128)>,
    error: Option<String>,
    took: Duration,
    events: Vec<String>,
}

fn limiter(spec: &Spec) -> Option<RateLimiter> {
    let (every, wait) = spec.rate_limit?;
    Some(RateLimiter::new("quota", 1, every).burst(1).max_wait(wait))
}

fn breaker(threshold: u32) -> CircuitBreaker {
    CircuitBreaker::builder("downstream")
        .consecutive_failures(threshold)
        .open_duration(Duration::from_secs(5))
        .build()
        .expect("a valid breaker")
}

/// An orchestrator whose observer keeps each node-level event's text.
fn observed() -> (Orchestrator, Arc<Mutex<Vec<String>>>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&events);
    let orch = Orchestrator::builder()
        .observer(move |e: &Event<'_>| match e {
            Event::RunStarted { .. } | Event::RunFinished { .. } => {}
            Event::BreakerTransition(t) => {
                seen.lock()
                    .unwrap()
                    .push(format!("breaker {} -> {}", t.from(), t.to()));
            }
            other => seen.lock().unwrap().push(other.to_string()),
        })
        .build();
    (orch, events)
}

/// The task of `spec`: attempt `n` takes step `n` (the last repeats); counts its calls.
fn task(
    spec: &Spec,
    calls: &Arc<AtomicU32>,
    attempt: u32,
) -> impl Future<Output = Result<u32, BoxError>> + use<> {
    calls.fetch_add(1, Ordering::SeqCst);
    let at = (attempt as usize - 1).min(spec.steps.len() - 1);
    spec.steps[at].run()
}

/// An error and its sources, joined by `: `.
fn chain(error: &NodeError) -> String {
    let mut parts = vec![error.to_string()];
    let mut source = std::error::Error::source(error);
    while let Some(e) = source {
        parts.push(e.to_string());
        source = e.source();
    }
    parts.join(": ")
}

fn log_of(log: &[baton_graph::AttemptReport]) -> Vec<(u128, u128, u128, Option<String>, u128)> {
    log.iter()
        .map(|a| {
            (
                a.start.as_millis(),
                a.end.as_millis(),
                a.delay_before.as_millis(),
                a.error.clone(),
                a.rate_limit_wait.as_millis(),
            )
        })
        .collect()
}

/// Runs `spec` as a graph of one node (and, with a holder, a second node holding the
/// bulkhead), once per call.
async fn as_node(spec: &Spec) -> Vec<Seen> {
    let (orch, events) = observed();
    let breaker = spec.breaker.map(breaker);
    let bulkhead = spec
        .bulkhead
        .map(|(n, wait)| Bulkhead::new("pool", n, wait));
    let calls = Arc::new(AtomicU32::new(0));
    let mut g = orch.graph::<()>();
    // Declared first: it takes the bulkhead's permit first, as the pipeline's holder does.
    let holder = match (spec.holder, &bulkhead) {
        (Some(hold), Some(b)) => Some(g.node::<u32>("holder").bulkhead(b).task(
            move |_ctx, ()| async move {
                sleep(ms(hold)).await;
                Ok::<u32, BoxError>(0)
            },
        )),
        _ => None,
    };
    let mut node = g.node::<u32>("downstream");
    if let Some(t) = spec.timeout {
        node = node.timeout(t);
    }
    if let Some(r) = &spec.retry {
        node = node.retry(r.clone());
    }
    if let Some(b) = spec.budget {
        node = node.budget(b);
    }
    if let Some(m) = spec.min_attempt {
        node = node.min_attempt_time(m);
    }
    if let Some(b) = &breaker {
        node = node.breaker(b);
    }
    if spec.ignore_failures {
        node = node.breaker_ignore(|e| e.task_error().is_some());
    }
    if let Some(b) = &bulkhead {
        node = node.bulkhead(b);
    }
    if let Some(l) = limiter(spec) {
        node = node.rate_limit(l);
    }
    if let Some(f) = spec.fallback {
        node = node.fallback(f());
    }
    let s = spec.clone();
    let counted = Arc::clone(&calls);
    let handle = node.task(move |ctx, ()| task(&s, &counted, ctx.attempt()));
    let graph = g.build().expect("a valid graph");
    let mut seen = Vec::new();
    for _ in 0..spec.calls.max(1) {
        events.lock().unwrap().clear();
        let started = Instant::now();
        let report = graph.run(()).await.expect("preserve-partial");
        let n = report.node(handle).expect("the node");
        let mut evs = events.lock().unwrap().clone();
        if let Some(h) = holder {
            let holder = report.node(h).expect("the holder").name().to_owned();
            evs.retain(|e| !e.contains(&format!("`{holder}`")));
        }
        seen.push(Seen {
            outcome: n.outcome(),
            value: report.get(handle).copied(),
            attempts: n.attempts(),
            log: log_of(n.attempt_log()),
            error: n.error().map(chain),
            took: n.end() - n.start().unwrap_or_default(),
            events: evs,
        });
        let _ = started;
    }
    seen
}

/// Runs `spec` as a pipeline, once per call (with a holder, a second call of a pipeline on
/// the same bulkhead holds it alongside the first).
async fn as_pipeline(spec: &Spec) -> Vec<Seen> {
    let (orch, events) = observed();
    let breaker = spec.breaker.map(breaker);
    let bulkhead = spec
        .bulkhead
        .map(|(n, wait)| Bulkhead::new("pool", n, wait));
    let calls = Arc::new(AtomicU32::new(0));
    // One `Policies` value, given whole: the node above takes the same setters one by one.
    let mut p = Policies::new();
    if let Some(t) = spec.timeout {
        p = p.timeout(t);
    }
    if let Some(r) = &spec.retry {
        p = p.retry(r.clone());
    }
    if let Some(b) = spec.budget {
        p = p.budget(b);
    }
    if let Some(m) = spec.min_attempt {
        p = p.min_attempt_time(m);
    }
    if let Some(b) = &breaker {
        p = p.breaker(b);
    }
    if spec.ignore_failures {
        p = p.breaker_ignore(|e| e.task_error().is_some());
    }
    if let Some(b) = &bulkhead {
        p = p.bulkhead(b);
    }
    if let Some(l) = limiter(spec) {
        p = p.rate_limit(&l);
    }
    let mut p = Pipeline::<u32>::builder("downstream")
        .orchestrator(&orch)
        .policies(p);
    if let Some(f) = spec.fallback {
        p = p.fallback(f());
    }
    let pipeline = p.build().expect("a valid pipeline");
    let mut seen = Vec::new();
    for i in 0..spec.calls.max(1) {
        events.lock().unwrap().clear();
        let s = spec.clone();
        let counted = Arc::clone(&calls);
        let call = pipeline.run(move |attempt| task(&s, &counted, attempt.number()));
        let call = match (i, spec.holder, &bulkhead) {
            (0, Some(hold), Some(b)) => {
                let holding = Pipeline::<u32>::builder("holder")
                    .bulkhead(b)
                    .build()
                    .unwrap();
                let held = holding.call(move |_| async move {
                    sleep(ms(hold)).await;
                    Ok::<u32, BoxError>(0)
                });
                tokio::join!(held, call).1
            }
            _ => call.await,
        };
        seen.push(Seen {
            outcome: call.outcome(),
            value: call.value().copied(),
            attempts: call.attempts(),
            log: log_of(call.attempt_log()),
            error: call.error().map(chain),
            took: call.elapsed(),
            events: events.lock().unwrap().clone(),
        });
    }
    seen
}

/// Runs `spec` both ways and checks they agree; returns what they saw.
async fn alike(spec: Spec) -> Vec<Seen> {
    let node = as_node(&spec).await;
    let pipeline = as_pipeline(&spec).await;
    assert_eq!(node, pipeline, "a node and a pipeline call differ");
    node
}

fn retry(n: u32, delay: u64) -> Retry {
    Retry::new(n).backoff(Backoff::constant(ms(delay)))
}

#[tokio::test(start_paused = true)]
async fn a_first_attempt_that_succeeds() {
    let seen = alike(Spec {
        timeout: Some(ms(100)),
        retry: Some(retry(3, 10)),
        steps: vec![Step::Wait(20, &VALUE)],
        ..Spec::default()
    })
    .await;
    assert_eq!(seen[0].outcome, Outcome::Succeeded);
    assert_eq!((seen[0].attempts, seen[0].took), (1, ms(20)));
    assert!(seen[0].log.is_empty());
}

#[tokio::test(start_paused = true)]
async fn retries_after_failures_with_their_backoffs() {
    let seen = alike(Spec {
        retry: Some(Retry::new(4).backoff(Backoff::exponential(ms(10)))),
        steps: vec![FAIL, FAIL, Step::Wait(5, &VALUE)],
        ..Spec::default()
    })
    .await;
    assert_eq!(seen[0].value, Some(7));
    assert_eq!(seen[0].attempts, 3);
    let delays: Vec<u128> = seen[0].log.iter().map(|a| a.2).collect();
    assert_eq!(delays, [0, 10, 20]);
    assert_eq!(seen[0].took, ms(35));
}

#[tokio::test(start_paused = true)]
async fn attempts_cut_by_their_timeout_then_the_series_gives_up() {
    let seen = alike(Spec {
        timeout: Some(ms(50)),
        retry: Some(retry(3, 10)),
        steps: vec![Step::Wait(1_000, &VALUE)],
        ..Spec::default()
    })
    .await;
    let s = &seen[0];
    assert_eq!(s.outcome, Outcome::Failed);
    assert_eq!(s.attempts, 3);
    assert_eq!(s.took, ms(170));
    let error = s.error.as_deref().unwrap_or_default();
    assert!(error.contains("gave up after 3 attempt(s)"), "{error}");
    assert!(s.events.iter().any(|e| e.contains("cut after 50 ms")));
}

#[tokio::test(start_paused = true)]
async fn a_budget_clips_the_backoff_and_ends_the_series() {
    let seen = alike(Spec {
        retry: Some(retry(10, 400)),
        budget: Some(ms(300)),
        steps: vec![Step::Wait(100, &FAIL)],
        ..Spec::default()
    })
    .await;
    let s = &seen[0];
    assert_eq!(s.outcome, Outcome::Failed);
    assert!(s.took <= ms(300), "{:?}", s.took);
    assert!(s.error.as_deref().unwrap_or_default().contains("deadline"));
}

#[tokio::test(start_paused = true)]
async fn the_fallback_serves_after_the_series_failed() {
    let seen = alike(Spec {
        retry: Some(retry(2, 10)),
        fallback: Some(|| Fallback::value(0)),
        steps: vec![FAIL],
        ..Spec::default()
    })
    .await;
    assert_eq!(seen[0].outcome, Outcome::Recovered);
    assert_eq!(seen[0].value, Some(0));
    assert!(seen[0].events.iter().any(|e| e.contains("fell back after")));
}

#[tokio::test(start_paused = true)]
async fn a_fallback_of_the_error() {
    alike(Spec {
        fallback: Some(|| Fallback::from_fn(|e: &NodeError| e.to_string().len() as u32)),
        steps: vec![FAIL],
        ..Spec::default()
    })
    .await;
    alike(Spec {
        fallback: Some(|| {
            Fallback::from_async(|_e| async {
                sleep(ms(5)).await;
                Err::<u32, BoxError>("the cache is down too".into())
            })
        }),
        steps: vec![FAIL],
        ..Spec::default()
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_panic_fails_the_attempt_and_is_not_retried() {
    let seen = alike(Spec {
        retry: Some(retry(3, 10)),
        steps: vec![Step::Panic],
        ..Spec::default()
    })
    .await;
    assert_eq!(seen[0].attempts, 1);
    assert!(
        seen[0]
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("bug in the task")
    );
}

#[tokio::test(start_paused = true)]
async fn only_retryable_errors_are_retried() {
    let seen = alike(Spec {
        retry: Some(retry(3, 10).retry_if(|e| e.is_timeout())),
        steps: vec![FAIL],
        ..Spec::default()
    })
    .await;
    assert_eq!(seen[0].attempts, 1);
    assert!(
        seen[0]
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("not retryable")
    );
}

#[tokio::test(start_paused = true)]
async fn the_breaker_counts_series_opens_and_rejects() {
    let seen = alike(Spec {
        retry: Some(retry(2, 10)),
        breaker: Some(2),
        fallback: Some(|| Fallback::value(0)),
        steps: vec![FAIL],
        calls: 3,
        ..Spec::default()
    })
    .await;
    assert_eq!(seen[0].attempts, 2, "one series of two attempts");
    assert_eq!(seen[1].attempts, 2);
    assert!(seen[1].events.iter().any(|e| e.contains("-> open")));
    assert_eq!(seen[2].attempts, 0, "rejected without running");
    assert_eq!(seen[2].outcome, Outcome::Recovered);
    assert!(
        seen[2]
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("is open")
    );
}

#[tokio::test(start_paused = true)]
async fn ignored_errors_do_not_count_for_the_breaker() {
    let seen = alike(Spec {
        breaker: Some(1),
        ignore_failures: true,
        steps: vec![FAIL],
        calls: 3,
        ..Spec::default()
    })
    .await;
    assert!(seen.iter().all(|s| s.attempts == 1), "never rejected");
}

#[tokio::test(start_paused = true)]
async fn a_full_bulkhead_makes_the_attempt_wait_then_fail() {
    let seen = alike(Spec {
        bulkhead: Some((1, ms(30))),
        holder: Some(100),
        steps: vec![VALUE],
        ..Spec::default()
    })
    .await;
    assert_eq!(seen[0].outcome, Outcome::Failed);
    assert!(
        seen[0]
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("bulkhead `pool` full")
    );
    let seen = alike(Spec {
        bulkhead: Some((1, ms(300))),
        holder: Some(100),
        steps: vec![VALUE],
        ..Spec::default()
    })
    .await;
    assert_eq!(seen[0].outcome, Outcome::Succeeded);
}

#[tokio::test(start_paused = true)]
async fn a_retry_budget_stops_a_retry_storm() {
    let budget = RetryBudget::with("downstream", Duration::from_secs(10), 0, 0.0);
    let seen = alike(Spec {
        retry: Some(retry(5, 10).budget(budget)),
        steps: vec![FAIL],
        ..Spec::default()
    })
    .await;
    assert_eq!(seen[0].attempts, 1);
    assert!(
        seen[0]
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("retry budget")
    );
}

#[tokio::test(start_paused = true)]
async fn a_custom_backoff_that_runs_out_ends_the_series() {
    let seen = alike(Spec {
        retry: Some(Retry::new(10).backoff(Backoff::custom([ms(5), ms(15)]))),
        steps: vec![FAIL],
        ..Spec::default()
    })
    .await;
    assert_eq!(seen[0].attempts, 3);
    assert_eq!(seen[0].took, ms(20));
    assert!(
        seen[0]
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("backoff sequence exhausted")
    );
}

#[tokio::test(start_paused = true)]
async fn a_backoff_the_budget_clipped_is_followed_by_one_last_attempt() {
    let seen = alike(Spec {
        retry: Some(retry(1_000, 500)),
        budget: Some(ms(1_010)),
        steps: vec![FAIL],
        ..Spec::default()
    })
    .await;
    assert_eq!(seen[0].attempts, 4);
    let seen = alike(Spec {
        retry: Some(retry(2, 1_000)),
        budget: Some(ms(300)),
        steps: vec![FAIL, VALUE],
        ..Spec::default()
    })
    .await;
    assert_eq!((seen[0].outcome, seen[0].attempts), (Outcome::Succeeded, 2));
}

/// A delay taken from the error replaces the backoff's and is clipped by the budget, in a
/// node and in a call alike.
#[tokio::test(start_paused = true)]
async fn a_delay_from_the_error_is_taken_and_clipped_alike() {
    let from_503 = |e: &NodeError| {
        let text = e.task_error()?.to_string();
        text.contains("503").then_some(ms(250))
    };
    let seen = alike(Spec {
        retry: Some(retry(3, 10).delay_from(from_503)),
        steps: vec![FAIL, VALUE],
        ..Spec::default()
    })
    .await;
    assert_eq!(
        seen[0].log[1].2, 250,
        "the error's delay, not the 10 ms backoff"
    );
    let seen = alike(Spec {
        retry: Some(retry(3, 10).delay_from(from_503)),
        budget: Some(ms(200)),
        steps: vec![FAIL, VALUE],
        ..Spec::default()
    })
    .await;
    assert_eq!(seen[0].log[1].2, 190, "clipped to the budget minus 10 ms");
    assert_eq!(seen[0].outcome, Outcome::Succeeded);
}

/// A rate limiter spaces calls made one after the other, each waiting for its permit, and
/// refuses a call whose permit would come too late: the same waits, refusals and retries
/// in a node and in a call.
#[tokio::test(start_paused = true)]
async fn a_rate_limiter_spaces_and_refuses_alike() {
    let seen = alike(Spec {
        rate_limit: Some((ms(100), ms(150))),
        steps: vec![VALUE],
        calls: 3,
        ..Spec::default()
    })
    .await;
    let waits: Vec<u128> = seen
        .iter()
        .map(|s| s.log.first().map_or(0, |a| a.4))
        .collect();
    assert_eq!(waits, [0, 100, 100]);
    let seen = alike(Spec {
        rate_limit: Some((ms(100), ms(50))),
        retry: Some(retry(3, 60)),
        steps: vec![VALUE],
        calls: 2,
        ..Spec::default()
    })
    .await;
    let s = &seen[1];
    assert_eq!((s.outcome, s.attempts), (Outcome::Succeeded, 2));
    assert!(
        s.log[0]
            .3
            .as_deref()
            .unwrap_or_default()
            .contains("rate limiter `quota`"),
        "{:?}",
        s.log
    );
    assert_eq!(
        s.log[1].4, 40,
        "waits the rest of the 100 ms after a 60 ms backoff"
    );
}

/// A call's future is `Send` whatever the task's error type, `BoxError` included, so it
/// can be spawned; so is a graph's run.
#[tokio::test(start_paused = true)]
async fn a_call_can_be_spawned_with_a_box_error() {
    let p: Pipeline<u32> = Pipeline::builder("p").build().unwrap();
    let call =
        tokio::spawn(async move { p.call(|_attempt| async { Ok::<u32, BoxError>(1) }).await });
    assert_eq!(call.await.unwrap().ok(), Some(1));
}

/// Attempts refused by a full bulkhead are attempts like any other: counted, logged from
/// when they asked, with their start and failure events, and retried.
#[tokio::test(start_paused = true)]
async fn attempts_a_full_bulkhead_refused_are_counted_and_told() {
    let seen = alike(Spec {
        bulkhead: Some((1, ms(0))),
        holder: Some(100),
        retry: Some(retry(3, 10)),
        steps: vec![VALUE],
        ..Spec::default()
    })
    .await;
    let s = &seen[0];
    assert_eq!(
        (s.outcome, s.attempts, s.log.len()),
        (Outcome::Failed, 3, 3)
    );
    let starts: Vec<u128> = s.log.iter().map(|a| a.0).collect();
    assert_eq!(starts, [0, 10, 20]);
    let count = |needle: &str| s.events.iter().filter(|e| e.contains(needle)).count();
    assert_eq!(count("started"), 4, "{:#?}", s.events);
    assert_eq!(count("gave up on bulkhead `pool`"), 3);
    assert_eq!(count("failed: node `downstream` attempt"), 3);
    let error = s.error.as_deref().unwrap_or_default();
    assert!(error.contains("gave up after 3 attempt(s)"), "{error}");
}

/// One `Policies` value given to a node and to a pipeline: both run it alike; setters
/// called after `.policies(..)` refine it for that node only, setters before it are
/// replaced.
#[tokio::test(start_paused = true)]
async fn one_policies_value_serves_nodes_and_pipelines_and_setters_refine_it() {
    let calls = Policies::new().timeout(ms(50)).retry(retry(3, 100));
    let slow = |_: u32| async {
        sleep(ms(1_000)).await;
        Ok::<u32, BoxError>(1)
    };
    let mut g = Graph::<()>::builder();
    let shared = g.node("shared").policies(&calls).task(move |_, ()| slow(0));
    let refined = g
        .node("refined")
        .timeout(ms(500)) // replaced by the policies
        .policies(&calls)
        .retry(Retry::new(1))
        .task(move |_, ()| slow(0));
    let report = g.build().unwrap().run(()).await.unwrap();
    let pipeline = Pipeline::<u32>::builder("shared")
        .policies(calls.clone())
        .build()
        .unwrap();
    let call = pipeline.run(|a| slow(a.number())).await;
    let shared = report.node(shared).unwrap();
    assert_eq!((shared.attempts(), call.attempts()), (3, 3));
    assert_eq!(log_of(shared.attempt_log()), log_of(call.attempt_log()));
    assert_eq!(
        shared.end(),
        ms(350),
        "three 50 ms attempts, two 100 ms backoffs"
    );
    let refined = report.node(refined).unwrap();
    assert_eq!(refined.attempts(), 1);
    assert_eq!(refined.error().map(|e| e.kind()), Some("gave_up"));
    assert_eq!(
        refined.end(),
        ms(50),
        "the policies' timeout, not the one before"
    );
}

/// Policies compare by what they declare: settings by value, breakers, bulkheads and rate
/// limiters by identity (or name), closures by pointer.
#[test]
fn policies_compare_by_value_handles_by_identity_and_closures_by_pointer() {
    let a = CircuitBreaker::builder("inventory").build().unwrap();
    let twin = CircuitBreaker::builder("inventory").build().unwrap();
    let base = Policies::new().timeout(ms(300)).retry(retry(3, 100));
    assert_eq!(base, Policies::new().timeout(ms(300)).retry(retry(3, 100)));
    assert_ne!(base, base.clone().timeout(ms(301)));
    assert_eq!(base.clone().breaker(&a), base.clone().breaker(a.clone()));
    assert_ne!(
        base.clone().breaker(&a),
        base.clone().breaker(&twin),
        "another handle"
    );
    assert_eq!(
        base.clone().breaker("inventory"),
        base.clone().breaker("inventory")
    );
    assert_ne!(base.clone().breaker("inventory"), base.clone().breaker(&a));
    let ignore = base.clone().breaker_ignore(|_| true);
    assert_eq!(ignore, ignore.clone(), "the same closure");
    assert_ne!(
        ignore,
        base.clone().breaker_ignore(|_| true),
        "another closure"
    );
    assert_eq!(Policies::new(), Policies::default());
    let debug = format!("{:?}", base.breaker(&a));
    assert!(
        debug.contains("inventory") && debug.contains("300ms"),
        "{debug}"
    );
}

/// A pipeline's breaker, bulkhead and rate limiter may be given by name: its orchestrator
/// has them. Without an orchestrator, or with one that lacks the name, `build()` names it.
#[tokio::test(start_paused = true)]
async fn a_pipeline_finds_its_policies_by_name_in_its_orchestrator() {
    let inventory = CircuitBreaker::builder("inventory")
        .consecutive_failures(1)
        .build()
        .unwrap();
    let orch = Orchestrator::new();
    orch.add_breaker(&inventory).unwrap();
    let stock = Pipeline::<u32>::builder("stock")
        .breaker("inventory")
        .orchestrator(&orch)
        .build()
        .unwrap();
    let _ = stock
        .call(|_| async { Err::<u32, BoxError>("503".into()) })
        .await;
    assert!(
        inventory.is_open(),
        "the named breaker is the registered one"
    );
    for pipeline in [
        Pipeline::<u32>::builder("stock").bulkhead("pool"),
        Pipeline::<u32>::builder("stock")
            .rate_limit("mail")
            .orchestrator(&orch),
    ] {
        match pipeline.build() {
            Err(BuildError::UnknownPolicy { node, kind, name }) => {
                assert_eq!(node, "stock");
                assert!(matches!(
                    (kind, name.as_str()),
                    ("bulkhead", "pool") | ("rate limiter", "mail")
                ));
            }
            other => panic!("expected an unknown policy, got {other:?}"),
        }
    }
}

/// `fallback` takes a plain value on a pipeline as on a node, and `fallback_with` an async
/// function of the error.
#[tokio::test(start_paused = true)]
async fn a_pipeline_takes_a_plain_fallback_value_or_an_async_function() {
    let plain = Pipeline::<u32>::builder("price")
        .fallback(0_u32)
        .build()
        .unwrap();
    let call = plain
        .run(|_| async { Err::<u32, BoxError>("down".into()) })
        .await;
    assert_eq!(
        (call.outcome(), call.value()),
        (Outcome::Recovered, Some(&0))
    );
    let with = Pipeline::<u32>::builder("price")
        .fallback_with(|error| async move {
            sleep(ms(5)).await;
            Ok::<u32, BoxError>(error.to_string().len() as u32)
        })
        .build()
        .unwrap();
    let call = with
        .run(|_| async { Err::<u32, BoxError>("down".into()) })
        .await;
    assert_eq!(call.outcome(), Outcome::Recovered);
    assert!(call.value().is_some_and(|v| *v > 0));
    assert_eq!(call.elapsed(), ms(5));
}
