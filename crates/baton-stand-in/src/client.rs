//! The client of the stand-in services: [`OrderApi`], one typed call per endpoint over one
//! connection pool, which can pass the caller's time budget on; and [`CallError`].

use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;

use crate::wire::{
    DeductStock, DeductStockRef, Delivery, Dispatch, DispatchRequest, Notice, Notification,
    OrderRequest, Sku, Stock, User,
};
use crate::{BUDGET_HEADER, CLIENT_TIMEOUT_GRACE, Channel, Service};

/// A call to one of the services that did not produce its value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// The service answered an error status, e.g. `stock answered 503 Service Unavailable`.
    #[error("{service} answered {status}")]
    Status {
        /// The service called.
        service: Service,
        /// Its answer.
        status: StatusCode,
    },
    /// The request could not be sent or the answer not read (including the client's own
    /// timeout, see [`OrderApi::within`]).
    #[error("calling {service} failed")]
    Transport {
        /// The service called.
        service: Service,
        /// What reqwest reported.
        #[source]
        source: reqwest::Error,
    },
}

impl CallError {
    /// The service whose call failed.
    #[must_use]
    pub fn service(&self) -> Service {
        match self {
            CallError::Status { service, .. } | CallError::Transport { service, .. } => *service,
        }
    }
}

/// A client for the services: one [`reqwest::Client`] (and so one connection pool), the
/// server's base URL, and optionally a time budget for its requests. Cheap to clone;
/// clones share the pool.
#[derive(Debug, Clone)]
pub struct OrderApi {
    http: reqwest::Client,
    base_url: Arc<str>,
    budget: Option<Duration>,
    grace: Duration,
}

impl OrderApi {
    /// A client for the server at `base_url` (e.g. [`OrderServer::base_url`](crate::OrderServer::base_url)), without a
    /// time budget.
    #[must_use]
    pub fn new(http: reqwest::Client, base_url: &str) -> Self {
        OrderApi {
            http,
            base_url: Arc::from(base_url.trim_end_matches('/')),
            budget: None,
            grace: CLIENT_TIMEOUT_GRACE,
        }
    }

    /// A client for the server at `base_url` with a pool of its own, made for load: no
    /// proxy, every idle connection kept open, `TCP_NODELAY` on.
    ///
    /// # Errors
    /// When reqwest cannot build the client (its TLS or resolver set-up failed).
    pub fn pooled(base_url: &str) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(usize::MAX)
            .tcp_nodelay(true)
            .build()?;
        Ok(OrderApi::new(http, base_url))
    }

    /// The same client (same pool), whose requests carry the time budget `budget`: it is
    /// sent in the [`BUDGET_HEADER`] header so that the server stops working when the
    /// caller stops waiting (deadline propagation), and it is each request's
    /// timeout (plus [`CLIENT_TIMEOUT_GRACE`]). Pass a task's `ctx.remaining()`. `None`: no
    /// budget.
    #[must_use]
    pub fn within(&self, budget: Option<Duration>) -> OrderApi {
        OrderApi {
            budget,
            ..self.clone()
        }
    }

    /// The same client, whose requests with a budget time out `grace` after it instead of
    /// [`CLIENT_TIMEOUT_GRACE`]: a long grace waits for the server's own answer.
    #[must_use]
    pub fn with_grace(&self, grace: Duration) -> OrderApi {
        OrderApi {
            grace,
            ..self.clone()
        }
    }

    /// The time budget of this client's requests, if any.
    #[must_use]
    pub fn budget(&self) -> Option<Duration> {
        self.budget
    }

    /// The underlying HTTP client.
    #[must_use]
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// Opens `connections` pooled connections by calling `GET /health` that many times at
    /// once, so that the first calls measured do not pay for connecting.
    ///
    /// # Errors
    /// The first health call that failed.
    pub async fn warm_up(&self, connections: usize) -> Result<(), reqwest::Error> {
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..connections {
            let request = self.http.get(format!("{}/health", self.base_url));
            calls.spawn(async move { request.send().await?.error_for_status() });
        }
        while let Some(done) = calls.join_next().await {
            if let Ok(result) = done {
                result?;
            }
        }
        Ok(())
    }

    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        service: Service,
        mut request: reqwest::RequestBuilder,
    ) -> Result<T, CallError> {
        if let Some(budget) = self.budget {
            // Whole milliseconds, rounded up: the server never stops before the caller.
            let ms = budget.as_micros().div_ceil(1000);
            request = request
                .timeout(budget.saturating_add(self.grace))
                .header(BUDGET_HEADER, ms.to_string());
        }
        let transport = |source| CallError::Transport { service, source };
        let response = request.send().await.map_err(transport)?;
        let status = response.status();
        if !status.is_success() {
            return Err(CallError::Status { service, status });
        }
        response.json::<T>().await.map_err(transport)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    /// `GET /user/{id}`.
    ///
    /// # Errors
    /// [`CallError`] for an error status or a transport failure.
    pub async fn user(&self, id: u64) -> Result<User, CallError> {
        let request = self.http.get(self.url(&format!("/user/{id}")));
        self.call(Service::User, request).await
    }

    /// `GET /sku/{id}`.
    ///
    /// # Errors
    /// [`CallError`] for an error status or a transport failure.
    pub async fn sku(&self, id: u64) -> Result<Sku, CallError> {
        let request = self.http.get(self.url(&format!("/sku/{id}")));
        self.call(Service::Sku, request).await
    }

    /// `POST /stock/deduct` with the user and the sku, serialized from the references: the
    /// same body as [`stock`](Self::stock) sends, with nothing cloned.
    ///
    /// # Errors
    /// [`CallError`] for an error status or a transport failure.
    pub async fn deduct_stock(&self, user: &User, sku: &Sku) -> Result<Stock, CallError> {
        let request = self
            .http
            .post(self.url("/stock/deduct"))
            .json(&DeductStockRef { user, sku });
        self.call(Service::Stock, request).await
    }

    /// `POST /stock/deduct` with a body made already.
    ///
    /// # Errors
    /// [`CallError`] for an error status or a transport failure.
    pub async fn stock(&self, body: &DeductStock) -> Result<Stock, CallError> {
        let request = self.http.post(self.url("/stock/deduct")).json(body);
        self.call(Service::Stock, request).await
    }

    /// `POST /ship`: ships the reserved unit.
    ///
    /// # Errors
    /// [`CallError`] for an error status or a transport failure.
    pub async fn ship(&self, req: &DispatchRequest) -> Result<Dispatch, CallError> {
        let request = self.http.post(self.url("/ship")).json(req);
        self.call(Service::Ship, request).await
    }

    /// `POST /shortage`: records the shortage.
    ///
    /// # Errors
    /// [`CallError`] for an error status or a transport failure.
    pub async fn shortage(&self, req: &DispatchRequest) -> Result<Dispatch, CallError> {
        let request = self.http.post(self.url("/shortage")).json(req);
        self.call(Service::Shortage, request).await
    }

    /// `POST /ship` when `req.quantity > 0`, else `POST /shortage`: the dispatch decision
    /// and its call in one.
    ///
    /// # Errors
    /// [`CallError`] for an error status or a transport failure.
    pub async fn dispatch(&self, req: &DispatchRequest) -> Result<Dispatch, CallError> {
        if req.quantity > 0 {
            self.ship(req).await
        } else {
            self.shortage(req).await
        }
    }

    /// `POST /notify` with how the order was dispatched.
    ///
    /// # Errors
    /// [`CallError`] for an error status or a transport failure.
    pub async fn notify(&self, dispatch: &Dispatch) -> Result<Notification, CallError> {
        let request = self.http.post(self.url("/notify")).json(dispatch);
        self.call(Service::Notify, request).await
    }

    /// `POST /mail`, `/sms` or `/push` with `notice`.
    ///
    /// # Errors
    /// [`CallError`] for an error status or a transport failure.
    pub async fn send(&self, channel: Channel, notice: &Notice) -> Result<Delivery, CallError> {
        let request = self
            .http
            .post(self.url(&format!("/{}", channel.name())))
            .json(notice);
        self.call(channel.service(), request).await
    }

    /// The order placement written the seed's original way: one call after the other,
    /// `user`, `sku`, `stock`, then `ship` or `shortage`, then `notify`.
    ///
    /// # Errors
    /// The first call that failed; the later ones are not made.
    pub async fn place_order_serially(
        &self,
        order: &OrderRequest,
    ) -> Result<Notification, CallError> {
        let user = self.user(order.user_id).await?;
        let sku = self.sku(order.sku_id).await?;
        let stock = self.deduct_stock(&user, &sku).await?;
        let req = DispatchRequest {
            user_id: user.id,
            sku_id: sku.id,
            quantity: stock.quantity,
        };
        let dispatch = self.dispatch(&req).await?;
        self.notify(&dispatch).await
    }
}
