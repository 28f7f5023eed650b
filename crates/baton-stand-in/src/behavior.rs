//! How each service answers: a [`Behavior`] per service, held by a live, shared
//! [`Downstreams`] handle that the server reads on every call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use reqwest::StatusCode;

use crate::{BUDGET_HEADER, DEFAULT_STOCK, Service};

/// How one service answers its calls.
///
/// The default answers successfully after the service's
/// [base latency](Service::base_latency), and `stock` answers [`DEFAULT_STOCK`]. Build one
/// with the chainable methods and hand it to [`Downstreams::set`], or change the current
/// one with [`Downstreams::update`].
///
/// A new mode is a field, a setter, and a line in the private `plan` method, which turns
/// the behaviour and the call's sequence number into what the server does; the server and
/// the handle do not change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Behavior {
    extra_latency: Duration,
    fail_with: Option<StatusCode>,
    fail_first: u64,
    fail_percent: u8,
    at_once: bool,
    stock: Option<u64>,
}

impl Behavior {
    /// Answers successfully after the base latency.
    #[must_use]
    pub fn new() -> Self {
        Behavior::default()
    }

    /// Answers every call with `503 Service Unavailable` (after the usual latency).
    #[must_use]
    pub fn fail(self) -> Self {
        self.fail_with(StatusCode::SERVICE_UNAVAILABLE)
    }

    /// Answers every call with `status` (after the usual latency).
    #[must_use]
    pub fn fail_with(mut self, status: StatusCode) -> Self {
        self.fail_with = Some(status);
        self
    }

    /// Answers the service's first `k` calls (counted since the server started, or since
    /// [`Downstreams::reset`]) with `503 Service Unavailable`, then as otherwise configured:
    /// a flaky service that recovers.
    #[must_use]
    pub fn fail_first(mut self, k: u64) -> Self {
        self.fail_first = k;
        self
    }

    /// Answers `percent` of the calls (drawn from the seeded generator of
    /// [`Downstreams::seed`]) with `503 Service Unavailable`, after the usual latency: a
    /// service that fails at a steady rate. `percent` above 100 counts as 100.
    #[must_use]
    pub fn fail_percent(mut self, percent: u8) -> Self {
        self.fail_percent = percent.min(100);
        self
    }

    /// Answers every call with `503 Service Unavailable` at once, without the latency: a
    /// service that is down and says so quickly.
    #[must_use]
    pub fn down(mut self) -> Self {
        self.at_once = true;
        self.fail()
    }

    /// Answers successfully again (keeps the extra latency and the stock quantity).
    #[must_use]
    pub fn succeed(mut self) -> Self {
        self.fail_with = None;
        self.fail_first = 0;
        self.fail_percent = 0;
        self.at_once = false;
        self
    }

    /// Adds `extra` to the base latency of every call (replacing any extra set before).
    #[must_use]
    pub fn slow_by(mut self, extra: Duration) -> Self {
        self.extra_latency = extra;
        self
    }

    /// For `stock`: answers that `quantity` units are in stock (`0`: out of stock). Other
    /// services ignore it.
    #[must_use]
    pub fn stock(mut self, quantity: u64) -> Self {
        self.stock = Some(quantity);
        self
    }

    /// The latency added to the base latency.
    #[must_use]
    pub fn extra_latency(&self) -> Duration {
        self.extra_latency
    }

    /// The error status every call answers with, if any.
    #[must_use]
    pub fn failure_status(&self) -> Option<StatusCode> {
        self.fail_with
    }

    /// What the server does for call number `call` (from 1) of `service`; `roll` is a
    /// number in `0..100` drawn for [`fail_percent`](Self::fail_percent).
    pub(crate) fn plan(&self, service: Service, call: u64, roll: u8) -> Plan {
        let flaky = call <= self.fail_first || roll < self.fail_percent;
        let flaky = flaky.then_some(StatusCode::SERVICE_UNAVAILABLE);
        let delay = if self.at_once {
            Duration::ZERO
        } else {
            service.base_latency().saturating_add(self.extra_latency)
        };
        Plan {
            delay,
            status: self.fail_with.or(flaky),
            stock: self.stock.unwrap_or(DEFAULT_STOCK),
        }
    }
}

/// What the server does for one call: wait `delay`, then answer `status` or the value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    pub(crate) delay: Duration,
    pub(crate) status: Option<StatusCode>,
    pub(crate) stock: u64,
}

#[derive(Debug, Default)]
struct Slot {
    behavior: Mutex<Behavior>,
    calls: AtomicU64,
    stopped_early: AtomicU64,
}

/// The shared, live configuration of the services, and their call counters.
///
/// Cloning gives another handle to the same state: configure it from the example while the
/// server reads it on every call. Changes apply to calls that arrive afterwards.
#[derive(Debug, Clone)]
pub struct Downstreams {
    slots: Arc<[Slot; 9]>,
    rng: Arc<Mutex<fastrand::Rng>>,
}

impl Default for Downstreams {
    fn default() -> Self {
        Downstreams {
            slots: Arc::default(),
            rng: Arc::new(Mutex::new(fastrand::Rng::with_seed(1))),
        }
    }
}

impl Downstreams {
    /// Every service with the default [`Behavior`] and no calls counted.
    #[must_use]
    pub fn new() -> Self {
        Downstreams::default()
    }

    fn slot(&self, service: Service) -> &Slot {
        &self.slots[service.index()]
    }

    /// Replaces the behaviour of `service`.
    pub fn set(&self, service: Service, behavior: Behavior) {
        self.update(service, |_| behavior);
    }

    /// Changes the behaviour of `service` with `change`, e.g.
    /// `downstreams.update(Service::Stock, Behavior::fail)`.
    pub fn update(&self, service: Service, change: impl FnOnce(Behavior) -> Behavior) {
        let mut current = self
            .slot(service)
            .behavior
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *current = change(std::mem::take(&mut *current));
    }

    /// The current behaviour of `service`.
    #[must_use]
    pub fn behavior(&self, service: Service) -> Behavior {
        self.slot(service)
            .behavior
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many calls `service` has received (answered or not).
    #[must_use]
    pub fn calls(&self, service: Service) -> u64 {
        self.slot(service).calls.load(Ordering::Relaxed)
    }

    /// How many calls of `service` would have outlasted the caller's deadline (its
    /// [`BUDGET_HEADER`]), so the server stopped them there (or earlier, when the caller
    /// hung up) instead of finishing work nobody waits for.
    #[must_use]
    pub fn stopped_early(&self, service: Service) -> u64 {
        self.slot(service).stopped_early.load(Ordering::Relaxed)
    }

    /// Restores every default behaviour and sets every counter to zero.
    pub fn reset(&self) {
        for service in Service::ALL {
            self.set(service, Behavior::default());
            let slot = self.slot(service);
            slot.calls.store(0, Ordering::Relaxed);
            slot.stopped_early.store(0, Ordering::Relaxed);
        }
    }

    /// Reseeds the generator that [`Behavior::fail_percent`] draws from (seeded with 1 at
    /// first), so that a run of calls fails the same calls again.
    pub fn seed(&self, seed: u64) {
        *self.rng.lock().unwrap_or_else(PoisonError::into_inner) = fastrand::Rng::with_seed(seed);
    }

    /// Counts a call of `service` and decides what to do with it.
    pub(crate) fn begin(&self, service: Service) -> Plan {
        let slot = self.slot(service);
        let call = slot.calls.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        let behavior = slot
            .behavior
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let roll = if behavior.fail_percent > 0 {
            self.rng
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .u8(0..100)
        } else {
            100
        };
        behavior.plan(service, call, roll)
    }

    /// Plays a call of `service` out: waits, then fails or lets the handler answer with the
    /// plan's stock quantity. Stops at the caller's deadline when the call carries one.
    pub(crate) async fn serve(&self, service: Service, headers: &HeaderMap) -> Result<Plan, Fault> {
        let plan = self.begin(service);
        let budget = headers
            .get(BUDGET_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .map(Duration::from_millis);
        if let Some(budget) = budget.filter(|b| *b < plan.delay) {
            // Counted now: if the caller hangs up first, hyper drops this future mid-sleep.
            self.slot(service)
                .stopped_early
                .fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(budget).await;
            tracing::debug!(%service, ?budget, "stopped at the caller's deadline");
            return Err(Fault {
                service,
                status: StatusCode::GATEWAY_TIMEOUT,
            });
        }
        tokio::time::sleep(plan.delay).await;
        match plan.status {
            Some(status) => {
                tracing::debug!(%service, %status, "answering with an error status");
                Err(Fault { service, status })
            }
            None => {
                tracing::debug!(%service, "answering");
                Ok(plan)
            }
        }
    }
}

/// An error answer of the server.
#[derive(Debug)]
pub(crate) struct Fault {
    service: Service,
    status: StatusCode,
}

impl IntoResponse for Fault {
    fn into_response(self) -> Response {
        let body = format!("{} answers {}", self.service, self.status);
        (self.status, body).into_response()
    }
}
