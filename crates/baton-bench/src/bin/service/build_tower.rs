//! Build (c): the order flow over a tower stack per downstream, as a tower user writes it:
//! tower's `timeout` layer per attempt, tower's `retry` layer with a policy of three attempts
//! and an exponential backoff clipped by the request's deadline, and `tower-resilience`'s
//! circuit breaker layer around the retries (one result per series, as baton's). Each
//! stack is built once and cloned per call (`ServiceExt::oneshot`); the fallbacks are
//! `match` arms.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use baton_graph::BoxError;
use tokio::time::{Instant, Sleep};
use tower::retry::{Policy, RetryLayer};
use tower::util::BoxCloneSyncService;
use tower::{ServiceBuilder, ServiceExt};
use tower_resilience::circuitbreaker::{CircuitBreakerError, CircuitBreakerLayer};

use crate::front::Place;
use crate::policy::{
    ATTEMPT_TIMEOUT, ATTEMPTS, BACKOFF, BACKOFF_FACTOR, BREAKER_FAILURES, BREAKER_OPEN, DEADLINE,
    IN_APP, clip_backoff,
};
use baton_stand_in::{
    CallError, DeductStock, Dispatch, DispatchRequest, Notification, OrderApi, OrderRequest,
    Service, Sku, Stock, User,
};

use crate::answer::OrderResult;

/// A request and the deadline of the front request it serves (the retry policy reads it).
#[derive(Debug, Clone)]
struct Deadlined<R> {
    deadline: Instant,
    req: R,
}

/// Tower's retry policy: at most [`ATTEMPTS`] attempts, exponential backoff, none past
/// the deadline.
#[derive(Debug, Clone)]
struct DeadlineRetry {
    left: u32,
    next: Duration,
}

impl<R: Clone, T> Policy<Deadlined<R>, T, BoxError> for DeadlineRetry {
    type Future = Sleep;

    fn retry(
        &mut self,
        req: &mut Deadlined<R>,
        result: &mut Result<T, BoxError>,
    ) -> Option<Self::Future> {
        if result.is_ok() || self.left == 0 {
            return None;
        }
        let delay = clip_backoff(self.next, req.deadline)?;
        self.left -= 1;
        self.next = self.next.mul_f64(BACKOFF_FACTOR);
        Some(tokio::time::sleep(delay))
    }

    fn clone_request(&mut self, req: &Deadlined<R>) -> Option<Deadlined<R>> {
        Some(req.clone())
    }
}

type Svc<R, T> = BoxCloneSyncService<Deadlined<R>, T, BoxError>;

/// The stack of one downstream: breaker → retry → timeout → `call`.
fn stack<R, T, F, Fut>(service: Service, call: F) -> Result<Svc<R, T>, BoxError>
where
    R: Clone + Send + Sync + 'static,
    T: Send + 'static,
    F: Fn(R) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<T, CallError>> + Send + 'static,
{
    let breaker = CircuitBreakerLayer::builder()
        .name(service.name())
        .consecutive_failures(BREAKER_FAILURES as usize)
        .wait_duration_in_open(BREAKER_OPEN)
        .permitted_calls_in_half_open(1)
        .build()?;
    let svc = ServiceBuilder::new()
        .map_err(|e: CircuitBreakerError<BoxError>| -> BoxError {
            match e {
                CircuitBreakerError::Inner(e) => e,
                open => Box::new(open),
            }
        })
        .layer(breaker)
        .layer(RetryLayer::new(DeadlineRetry {
            left: ATTEMPTS - 1,
            next: BACKOFF,
        }))
        .timeout(ATTEMPT_TIMEOUT)
        .service_fn(move |d: Deadlined<R>| call(d.req));
    Ok(BoxCloneSyncService::new(svc))
}

/// A stack per downstream.
#[derive(Debug)]
pub(crate) struct Flow {
    user: Svc<u64, User>,
    sku: Svc<u64, Sku>,
    stock: Svc<Arc<DeductStock>, Stock>,
    ship: Svc<DispatchRequest, Dispatch>,
    shortage: Svc<DispatchRequest, Dispatch>,
    notify: Svc<Arc<Dispatch>, Notification>,
}

impl Flow {
    /// Builds the six stacks over `api`.
    pub(crate) fn new(api: &OrderApi) -> Result<Flow, BoxError> {
        let a = api.clone();
        let user = stack(Service::User, move |id| {
            let a = a.clone();
            async move { a.user(id).await }
        })?;
        let a = api.clone();
        let sku = stack(Service::Sku, move |id| {
            let a = a.clone();
            async move { a.sku(id).await }
        })?;
        let a = api.clone();
        let stock = stack(Service::Stock, move |body: Arc<DeductStock>| {
            let a = a.clone();
            async move { a.stock(&body).await }
        })?;
        let a = api.clone();
        let dispatch = move |req: DispatchRequest| {
            let a = a.clone();
            async move { a.dispatch(&req).await }
        };
        let ship = stack(Service::Ship, dispatch.clone())?;
        let shortage = stack(Service::Shortage, dispatch)?;
        let a = api.clone();
        let notify = stack(Service::Notify, move |d: Arc<Dispatch>| {
            let a = a.clone();
            async move { a.notify(&d).await }
        })?;
        Ok(Flow {
            user,
            sku,
            stock,
            ship,
            shortage,
            notify,
        })
    }

    async fn flow(&self, order: OrderRequest, deadline: Instant) -> Result<OrderResult, String> {
        let at = |req| Deadlined { deadline, req };
        let (user, sku) = tokio::try_join!(
            self.user.clone().oneshot(at(order.user_id)),
            self.sku.clone().oneshot(at(order.sku_id)),
        )
        .map_err(|e| e.to_string())?;
        let body = Arc::new(DeductStock { user, sku });
        let stock = self.stock.clone().oneshot(Deadlined {
            deadline,
            req: body,
        });
        let quantity = match stock.await {
            Ok(stock) => stock.quantity,
            Err(_) => 0,
        };
        let req = DispatchRequest {
            user_id: order.user_id,
            sku_id: order.sku_id,
            quantity,
        };
        let branch = if quantity > 0 {
            &self.ship
        } else {
            &self.shortage
        };
        let dispatch = branch
            .clone()
            .oneshot(Deadlined { deadline, req })
            .await
            .map_err(|e| e.to_string())?;
        let dispatch = Arc::new(dispatch);
        let notify = self.notify.clone().oneshot(Deadlined {
            deadline,
            req: Arc::clone(&dispatch),
        });
        let message = match notify.await {
            Ok(notification) => notification.message,
            Err(_) => IN_APP.to_owned(),
        };
        Ok(OrderResult::new(quantity, &dispatch, message))
    }
}

impl Place for Flow {
    async fn place(&self, order: OrderRequest) -> Result<OrderResult, String> {
        // The request's deadline, as tower's `timeout` layer would put it around the handler.
        let deadline = Instant::now() + DEADLINE;
        match tokio::time::timeout_at(deadline, self.flow(order, deadline)).await {
            Ok(result) => result,
            Err(_) => Err("the request's deadline passed".to_owned()),
        }
    }
}
