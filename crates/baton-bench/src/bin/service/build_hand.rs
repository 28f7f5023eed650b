//! Build (b): the order flow written by hand: `tokio::try_join!` for the two independent
//! calls, `tokio::time::timeout` per attempt, `backon` for the retries (their backoff
//! clipped by the request's deadline), a `failsafe` breaker per downstream around each
//! call's retry series (asked once, told one result, as baton's), and the fallbacks as
//! `match` arms.

use std::fmt;
use std::future::Future;

use backon::{ExponentialBuilder, Retryable};
use failsafe::backoff::Constant;
use failsafe::failure_policy::ConsecutiveFailures;
use failsafe::futures::CircuitBreaker as _;
use failsafe::{Config, StateMachine};
use tokio::time::Instant;

use crate::front::Place;
use crate::policy::{
    ATTEMPTS, BACKOFF, BACKOFF_FACTOR, BREAKER_FAILURES, BREAKER_OPEN, DEADLINE, IN_APP,
    attempt_limit, clip_backoff,
};
use baton_stand_in::{CallError, DeductStock, DispatchRequest, OrderApi, OrderRequest, Service};

use crate::answer::OrderResult;

type Breaker = StateMachine<ConsecutiveFailures<Constant>, ()>;

/// Why a guarded call produced no value.
#[derive(Debug)]
enum Failed {
    /// The last attempt timed out.
    Timeout(Service),
    /// The last attempt's error.
    Call(CallError),
    /// The service's breaker is open: no call was made.
    Rejected(Service),
}

impl fmt::Display for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failed::Timeout(s) => write!(f, "{} timed out", s.name()),
            Failed::Call(e) => e.fmt(f),
            Failed::Rejected(s) => write!(f, "breaker `{}` open", s.name()),
        }
    }
}

/// The client and a breaker per downstream.
#[derive(Debug)]
pub(crate) struct Flow {
    api: OrderApi,
    breakers: Vec<Breaker>,
}

impl Flow {
    /// A breaker per service: open after [`BREAKER_FAILURES`] consecutive failures, for
    /// [`BREAKER_OPEN`].
    pub(crate) fn new(api: &OrderApi) -> Flow {
        let breakers = Service::ORDER_FLOW
            .iter()
            .map(|_| {
                Config::new()
                    .failure_policy(failsafe::failure_policy::consecutive_failures(
                        BREAKER_FAILURES,
                        failsafe::backoff::constant(BREAKER_OPEN),
                    ))
                    .build()
            })
            .collect();
        Flow {
            api: api.clone(),
            breakers,
        }
    }

    /// `call` under the policies of `service`: timeout per attempt, retries with backoff
    /// inside `deadline`, the service's breaker around the series.
    async fn guarded<T, F, Fut>(
        &self,
        service: Service,
        deadline: Instant,
        mut call: F,
    ) -> Result<T, Failed>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, CallError>>,
    {
        let attempt = || {
            let call = call();
            async move {
                match tokio::time::timeout(attempt_limit(deadline), call).await {
                    Ok(result) => result.map_err(Failed::Call),
                    Err(_) => Err(Failed::Timeout(service)),
                }
            }
        };
        let backoff = ExponentialBuilder::default()
            .with_min_delay(BACKOFF)
            .with_factor(BACKOFF_FACTOR as f32)
            .with_max_times(ATTEMPTS as usize - 1);
        let series = attempt
            .retry(backoff)
            .sleep(tokio::time::sleep)
            .adjust(move |_e, delay| delay.and_then(|d| clip_backoff(d, deadline)));
        match self.breakers[service as usize].call(series).await {
            Ok(value) => Ok(value),
            Err(failsafe::Error::Inner(e)) => Err(e),
            Err(failsafe::Error::Rejected) => Err(Failed::Rejected(service)),
        }
    }

    async fn flow(&self, order: OrderRequest, deadline: Instant) -> Result<OrderResult, String> {
        let api = &self.api;
        let (user, sku) = tokio::try_join!(
            self.guarded(Service::User, deadline, || api.user(order.user_id)),
            self.guarded(Service::Sku, deadline, || api.sku(order.sku_id)),
        )
        .map_err(|e| e.to_string())?;
        let body = DeductStock { user, sku };
        let quantity = match self
            .guarded(Service::Stock, deadline, || api.stock(&body))
            .await
        {
            Ok(stock) => stock.quantity,
            Err(_) => 0,
        };
        let req = DispatchRequest {
            user_id: order.user_id,
            sku_id: order.sku_id,
            quantity,
        };
        let branch = if quantity > 0 {
            Service::Ship
        } else {
            Service::Shortage
        };
        let dispatch = self
            .guarded(branch, deadline, || api.dispatch(&req))
            .await
            .map_err(|e| e.to_string())?;
        let message = match self
            .guarded(Service::Notify, deadline, || api.notify(&dispatch))
            .await
        {
            Ok(notification) => notification.message,
            Err(_) => IN_APP.to_owned(),
        };
        Ok(OrderResult::new(quantity, &dispatch, message))
    }
}

impl Place for Flow {
    async fn place(&self, order: OrderRequest) -> Result<OrderResult, String> {
        let deadline = Instant::now() + DEADLINE;
        match tokio::time::timeout_at(deadline, self.flow(order, deadline)).await {
            Ok(result) => result,
            Err(_) => Err("the request's deadline passed".to_owned()),
        }
    }
}
