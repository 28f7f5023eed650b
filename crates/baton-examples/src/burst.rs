//! The `/checkout` burst: bursts of concurrent requests whose `inventory` node calls one
//! downstream through a shared circuit breaker, while the downstream is down and after it
//! recovers.
//!
//! The downstream is simulated in the process and time is tokio's paused clock, so every
//! figure is exact and the same on every machine: [`run`] must be called on a
//! current-thread runtime whose clock is paused (`tokio::time::pause`, or
//! `#[tokio::test(start_paused = true)]`).
//!
//! ```
//! use baton_examples::burst::{self, Options, Scenario};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), baton_graph::BoxError> {
//! tokio::time::pause();
//! let figures = burst::run(&Scenario::default(), Options::default()).await?;
//! assert_eq!(figures.failed, 0, "the fallback serves every rejected request");
//! # Ok(())
//! # }
//! ```

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use baton_graph::{
    Backoff, BoxError, BuildError, CircuitBreaker, Fallback, Graph, Node, Outcome, Retry,
    breaker::BreakerState,
};
use tokio::time::{Instant, sleep_until};

/// The `/checkout` graph: one `inventory` node calling the downstream through `breaker`,
/// with a 200 ms timeout, 4 attempts 50 ms apart, and a fallback of 0 units.
fn checkout_graph(
    breaker: CircuitBreaker,
    downstream: &Arc<Downstream>,
) -> Result<(Graph<()>, Node<u32>), BuildError> {
    let mut g = Graph::<()>::builder();
    let api = Arc::clone(downstream);
    let inventory = g
        .node("inventory")
        .timeout(Duration::from_millis(200))
        .retry(Retry::new(4).backoff(Backoff::constant(Duration::from_millis(50))))
        .breaker(breaker)
        .fallback(Fallback::value(0u32))
        .task(move |_ctx, ()| {
            let api = Arc::clone(&api);
            async move { api.call().await }
        });
    Ok((g.build()?, inventory))
}

/// The traffic and the downstream.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// How many bursts arrive.
    pub bursts: u32,
    /// Requests per burst, all at the same instant.
    pub burst_size: u32,
    /// Time between bursts.
    pub every: Duration,
    /// How long the downstream is down from the start; it answers normally after.
    pub down_for: Duration,
    /// How long the downstream takes to answer (or to fail).
    pub latency: Duration,
}

impl Default for Scenario {
    /// 200 concurrent requests every 100 ms for 4 s; the downstream is down for the first
    /// 2 s and answers in 20 ms.
    fn default() -> Self {
        Scenario {
            bursts: 40,
            burst_size: 200,
            every: Duration::from_millis(100),
            down_for: Duration::from_secs(2),
            latency: Duration::from_millis(20),
        }
    }
}

/// The breaker options under test. The rest of the policy is fixed: a 200 ms timeout, 4
/// attempts 50 ms apart, a breaker that trips after 5 consecutive failures and stays open
/// 500 ms, one half-open probe, and a fallback value.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// [`CircuitBreakerBuilder::count_every_attempt`](baton_graph::breaker::CircuitBreakerBuilder::count_every_attempt).
    pub count_every_attempt: bool,
    /// [`CircuitBreakerBuilder::recovery_ramp`](baton_graph::breaker::CircuitBreakerBuilder::recovery_ramp).
    pub recovery_ramp: Option<Duration>,
}

/// What one scenario run measured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Figures {
    /// Calls that reached the downstream while it was down, before the breaker first opened.
    pub calls_before_open: u64,
    /// Calls that reached the downstream while it was down, in all.
    pub calls_while_down: u64,
    /// Requests that arrived in the first second after the downstream recovered.
    pub arrived_after_recovery: u32,
    /// Of those, the requests the downstream served (the rest were served by the fallback).
    pub served_after_recovery: u32,
    /// The most calls the downstream had in flight at once in the first second after it
    /// recovered.
    pub peak_after_recovery: u32,
    /// Requests the fallback served, over the whole scenario.
    pub fell_back: u32,
    /// Requests that failed, over the whole scenario.
    pub failed: u32,
}

/// The simulated downstream: counts the calls it receives.
#[derive(Debug)]
struct Downstream {
    recovers_at: Instant,
    latency: Duration,
    /// Start times of the calls received while down.
    calls_down: Mutex<Vec<Instant>>,
    in_flight: AtomicU32,
    peak_after_recovery: AtomicU32,
}

impl Downstream {
    async fn call(&self) -> Result<u32, BoxError> {
        let now = Instant::now();
        let down = now < self.recovers_at;
        if down {
            self.calls_down
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(now);
        }
        let in_flight = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        if !down && now < self.recovers_at + Duration::from_secs(1) {
            self.peak_after_recovery
                .fetch_max(in_flight, Ordering::SeqCst);
        }
        tokio::time::sleep(self.latency).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        if down {
            Err("inventory answered 503".into())
        } else {
            Ok(7)
        }
    }
}

/// When the breaker first opened, once it has.
type FirstOpen = Arc<Mutex<Option<Instant>>>;

/// The `inventory` breaker of `options`, and the instant it first opens.
fn inventory_breaker(options: Options) -> Result<(CircuitBreaker, FirstOpen), BoxError> {
    let mut breaker = CircuitBreaker::builder("inventory")
        .consecutive_failures(5)
        .open_duration(Duration::from_millis(500))
        .count_every_attempt(options.count_every_attempt);
    if let Some(ramp) = options.recovery_ramp {
        breaker = breaker.recovery_ramp(ramp);
    }
    let breaker = breaker.build()?;
    let first_open = Arc::new(Mutex::new(None::<Instant>));
    let opened = Arc::clone(&first_open);
    breaker.on_transition(move |t, _| {
        if t.to() == BreakerState::Open {
            opened
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_or_insert(t.at());
        }
    });
    Ok((breaker, first_open))
}

/// Runs `scenario` with the breaker `options`; see the module docs for the clock it needs.
///
/// # Errors
/// A [`BreakerConfigError`](baton_graph::breaker::BreakerConfigError) or a
/// [`BuildError`] when the breaker or the graph is invalid (only
/// a zero `recovery_ramp` is).
pub async fn run(scenario: &Scenario, options: Options) -> Result<Figures, BoxError> {
    let t0 = Instant::now();
    let (breaker, first_open) = inventory_breaker(options)?;
    let downstream = Arc::new(Downstream {
        recovers_at: t0 + scenario.down_for,
        latency: scenario.latency,
        calls_down: Mutex::new(Vec::new()),
        in_flight: AtomicU32::new(0),
        peak_after_recovery: AtomicU32::new(0),
    });

    let (graph, inventory) = checkout_graph(breaker, &downstream)?;

    let served_after = Arc::new(AtomicU32::new(0));
    let fell_back = Arc::new(AtomicU32::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let recovered = t0 + scenario.down_for;
    let mut arrived_after_recovery = 0;
    let mut requests = tokio::task::JoinSet::new();
    for burst in 0..scenario.bursts {
        let at = t0 + scenario.every * burst;
        sleep_until(at).await;
        let after_recovery = at >= recovered && at < recovered + Duration::from_secs(1);
        if after_recovery {
            arrived_after_recovery += scenario.burst_size;
        }
        for _ in 0..scenario.burst_size {
            let run = graph.run(());
            let (served_after, fell_back, failed) = (
                Arc::clone(&served_after),
                Arc::clone(&fell_back),
                Arc::clone(&failed),
            );
            requests.spawn(async move {
                let Ok(report) = run.await else {
                    failed.fetch_add(1, Ordering::SeqCst);
                    return;
                };
                match report.node(inventory).map(|n| n.outcome()) {
                    Some(Outcome::Succeeded) if after_recovery => {
                        served_after.fetch_add(1, Ordering::SeqCst);
                    }
                    Some(Outcome::Succeeded) => {}
                    Some(Outcome::Recovered) => {
                        fell_back.fetch_add(1, Ordering::SeqCst);
                    }
                    _ => {
                        failed.fetch_add(1, Ordering::SeqCst);
                    }
                }
            });
        }
    }
    while requests.join_next().await.is_some() {}

    let calls = downstream
        .calls_down
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let first_open = *first_open.lock().unwrap_or_else(PoisonError::into_inner);
    let calls_before_open = match first_open {
        Some(open) => calls.iter().filter(|&&at| at < open).count(),
        None => calls.len(),
    };
    Ok(Figures {
        calls_before_open: calls_before_open as u64,
        calls_while_down: calls.len() as u64,
        arrived_after_recovery,
        served_after_recovery: served_after.load(Ordering::SeqCst),
        peak_after_recovery: downstream.peak_after_recovery.load(Ordering::SeqCst),
        fell_back: fell_back.load(Ordering::SeqCst),
        failed: u32::try_from(failed.load(Ordering::SeqCst)).unwrap_or(u32::MAX),
    })
}
