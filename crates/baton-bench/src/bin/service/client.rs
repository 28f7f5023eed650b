//! The one HTTP client every build calls the stand-ins with: a `reqwest::Client` (one
//! keep-alive connection pool) and typed calls, one per endpoint.

use std::fmt;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::stand_in::Service;
use crate::wire::{DeductStock, Dispatch, DispatchRequest, Notification, Sku, Stock, User};

/// A call that did not produce its value.
#[derive(Debug)]
pub(crate) enum CallError {
    /// The service answered an error status.
    Status {
        service: Service,
        status: reqwest::StatusCode,
    },
    /// The request could not be sent or the answer not read.
    Transport {
        service: Service,
        source: reqwest::Error,
    },
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Status { service, status } => {
                write!(f, "{} answered {status}", service.name())
            }
            CallError::Transport { service, .. } => write!(f, "calling {} failed", service.name()),
        }
    }
}

impl std::error::Error for CallError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CallError::Status { .. } => None,
            CallError::Transport { source, .. } => Some(source),
        }
    }
}

/// The client of the stand-ins; cheap to clone (clones share the pool).
#[derive(Debug, Clone)]
pub(crate) struct Api {
    http: reqwest::Client,
    base: Arc<str>,
}

impl Api {
    /// A client of the stand-ins at `base` (`http://127.0.0.1:PORT`), with keep-alive.
    pub(crate) fn new(base: &str) -> Result<Api, reqwest::Error> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(usize::MAX)
            .tcp_nodelay(true)
            .build()?;
        Ok(Api {
            http,
            base: Arc::from(base.trim_end_matches('/')),
        })
    }

    async fn call<T: DeserializeOwned>(
        &self,
        service: Service,
        request: reqwest::RequestBuilder,
    ) -> Result<T, CallError> {
        let transport = |source| CallError::Transport { service, source };
        let response = request.send().await.map_err(transport)?;
        let status = response.status();
        if !status.is_success() {
            return Err(CallError::Status { service, status });
        }
        response.json::<T>().await.map_err(transport)
    }

    fn url(&self, path: &str) -> String {
        let mut url = String::with_capacity(self.base.len() + path.len());
        url.push_str(&self.base);
        url.push_str(path);
        url
    }

    /// `GET /user/{id}`.
    pub(crate) async fn user(&self, id: u64) -> Result<User, CallError> {
        let request = self.http.get(self.url(&format!("/user/{id}")));
        self.call(Service::User, request).await
    }

    /// `GET /sku/{id}`.
    pub(crate) async fn sku(&self, id: u64) -> Result<Sku, CallError> {
        let request = self.http.get(self.url(&format!("/sku/{id}")));
        self.call(Service::Sku, request).await
    }

    /// `POST /stock/deduct`.
    pub(crate) async fn stock(&self, body: &DeductStock) -> Result<Stock, CallError> {
        let request = self.http.post(self.url("/stock/deduct")).json(body);
        self.call(Service::Stock, request).await
    }

    /// `POST /ship` when `quantity > 0`, else `POST /shortage`.
    pub(crate) async fn dispatch(&self, req: &DispatchRequest) -> Result<Dispatch, CallError> {
        let (service, path) = if req.quantity > 0 {
            (Service::Ship, "/ship")
        } else {
            (Service::Shortage, "/shortage")
        };
        let request = self.http.post(self.url(path)).json(req);
        self.call(service, request).await
    }

    /// `POST /notify`.
    pub(crate) async fn notify(&self, dispatch: &Dispatch) -> Result<Notification, CallError> {
        let request = self.http.post(self.url("/notify")).json(dispatch);
        self.call(Service::Notify, request).await
    }
}
