//! The simulated `inventory` downstream: down until a given instant, then answering, each
//! call taking a fixed latency on tokio's clock. It counts what it receives.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use baton_graph::BoxError;
use tokio::time::Instant;

/// The simulated downstream: counts the calls it receives.
#[derive(Debug)]
pub(crate) struct Downstream {
    recovers_at: Instant,
    latency: Duration,
    /// Start times of the calls received while down.
    calls_down: Mutex<Vec<Instant>>,
    in_flight: AtomicU32,
    peak_after_recovery: AtomicU32,
}

impl Downstream {
    /// A downstream down until `recovers_at`, whose calls take `latency`.
    pub(crate) fn new(recovers_at: Instant, latency: Duration) -> Downstream {
        Downstream {
            recovers_at,
            latency,
            calls_down: Mutex::new(Vec::new()),
            in_flight: AtomicU32::new(0),
            peak_after_recovery: AtomicU32::new(0),
        }
    }

    /// One call: 7 units after the latency, or, while down, a 503 after the latency.
    ///
    /// # Errors
    /// While the downstream is down.
    pub(crate) async fn call(&self) -> Result<u32, BoxError> {
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

    /// The start times of the calls received while down.
    pub(crate) fn calls_while_down(&self) -> Vec<Instant> {
        self.calls_down
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The most calls in flight at once in the first second after the recovery.
    pub(crate) fn peak_after_recovery(&self) -> u32 {
        self.peak_after_recovery.load(Ordering::SeqCst)
    }
}
