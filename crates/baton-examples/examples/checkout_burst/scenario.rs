//! The `/checkout` burst's traffic and what it measures: bursts of requests arriving at the
//! same instant, each a run of the graph, on tokio's paused clock.
//!
//! [`run`] must be called on a current-thread runtime whose clock is paused
//! (`tokio::time::pause`, or `#[tokio::test(start_paused = true)]`): every figure is then
//! exact and the same on every machine.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use baton_graph::{BoxError, CircuitBreaker, Outcome, breaker::BreakerState};
use tokio::time::{Instant, sleep_until};

use crate::downstream::Downstream;
use crate::{checkout_graph, inventory_breaker};

/// The traffic and the downstream.
#[derive(Debug, Clone)]
pub(crate) struct Scenario {
    /// How many bursts arrive.
    pub(crate) bursts: u32,
    /// Requests per burst, all at the same instant.
    pub(crate) burst_size: u32,
    /// Time between bursts.
    pub(crate) every: Duration,
    /// How long the downstream is down from the start; it answers normally after.
    pub(crate) down_for: Duration,
    /// How long the downstream takes to answer (or to fail).
    pub(crate) latency: Duration,
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

/// The breaker options under test; the rest of the breaker is fixed (see
/// [`inventory_breaker`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Options {
    /// [`CircuitBreakerBuilder::count_every_attempt`](baton_graph::breaker::CircuitBreakerBuilder::count_every_attempt).
    pub(crate) count_every_attempt: bool,
    /// [`CircuitBreakerBuilder::recovery_ramp`](baton_graph::breaker::CircuitBreakerBuilder::recovery_ramp).
    pub(crate) recovery_ramp: Option<Duration>,
}

/// What one scenario run measured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Figures {
    /// Calls that reached the downstream while it was down, before the breaker first opened.
    pub(crate) calls_before_open: u64,
    /// Calls that reached the downstream while it was down, in all.
    pub(crate) calls_while_down: u64,
    /// Requests that arrived in the first second after the downstream recovered.
    pub(crate) arrived_after_recovery: u32,
    /// Of those, the requests the downstream served (the rest were served by the fallback).
    pub(crate) served_after_recovery: u32,
    /// The most calls the downstream had in flight at once in the first second after it
    /// recovered.
    pub(crate) peak_after_recovery: u32,
    /// Requests the fallback served, over the whole scenario.
    pub(crate) fell_back: u32,
    /// Requests that failed, over the whole scenario.
    pub(crate) failed: u32,
}

/// When the breaker first opened, once it has.
type FirstOpen = Arc<Mutex<Option<Instant>>>;

/// Records in the returned cell the instant `breaker` first opens.
fn first_open(breaker: &CircuitBreaker) -> FirstOpen {
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
    first_open
}

/// How the requests ended, counted as they end.
#[derive(Debug, Default)]
struct Ends {
    served_after_recovery: AtomicU32,
    fell_back: AtomicU32,
    failed: AtomicU32,
}

/// Runs `scenario` with the breaker `options`; see the module docs for the clock it needs.
///
/// # Errors
/// A [`BreakerConfigError`](baton_graph::breaker::BreakerConfigError) or a
/// [`BuildError`](baton_graph::BuildError) when the breaker or the graph is invalid (only
/// a zero `recovery_ramp` is).
pub(crate) async fn run(scenario: &Scenario, options: Options) -> Result<Figures, BoxError> {
    let t0 = Instant::now();
    let breaker = inventory_breaker(options)?;
    let first_open = first_open(&breaker);
    let recovered = t0 + scenario.down_for;
    let downstream = Arc::new(Downstream::new(recovered, scenario.latency));
    let (graph, inventory) = checkout_graph(breaker, &downstream)?;

    let ends = Arc::new(Ends::default());
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
            let ends = Arc::clone(&ends);
            requests.spawn(async move {
                let outcome = run
                    .await
                    .ok()
                    .and_then(|r| r.node(inventory).map(|n| n.outcome()));
                let counter = match outcome {
                    Some(Outcome::Succeeded) if after_recovery => &ends.served_after_recovery,
                    Some(Outcome::Succeeded) => return,
                    Some(Outcome::Recovered) => &ends.fell_back,
                    _ => &ends.failed,
                };
                counter.fetch_add(1, Ordering::SeqCst);
            });
        }
    }
    while requests.join_next().await.is_some() {}

    let calls = downstream.calls_while_down();
    let first_open = *first_open.lock().unwrap_or_else(PoisonError::into_inner);
    let calls_before_open = match first_open {
        Some(open) => calls.iter().filter(|&&at| at < open).count(),
        None => calls.len(),
    };
    Ok(Figures {
        calls_before_open: calls_before_open as u64,
        calls_while_down: calls.len() as u64,
        arrived_after_recovery,
        served_after_recovery: ends.served_after_recovery.load(Ordering::SeqCst),
        peak_after_recovery: downstream.peak_after_recovery(),
        fell_back: ends.fell_back.load(Ordering::SeqCst),
        failed: ends.failed.load(Ordering::SeqCst),
    })
}
