//! Feature `http`: deadlines across service hops. [`DeadlineHeaders`] reads the caller's
//! budget from a request and writes this attempt's on an outbound one; [`DeadlineLayer`]
//! writes it on every request of a tower HTTP client.
//!
//! Only durations cross the wire: a hop adds the budget it was given to its own clock, so
//! clock skew between hosts does not matter.

use std::fmt;
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::time::Instant;
use tower_layer::Layer;
use tower_service::Service;

use super::ReadBudget;
use crate::policy::Budget;

/// The gRPC header of the caller's budget.
const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");

/// The headers that carry a deadline across a hop, with feature `http`. One is
/// `grpc-timeout`, gRPC's wire format of 1 to 8 digits and a unit `H M S m u n`. The other
/// is one header in whole milliseconds, by default [`MILLIS_HEADER`](Self::MILLIS_HEADER),
/// `x-envoy-expected-rq-timeout-ms`, which Envoy and Istio set on the requests they forward.
///
/// Inbound, the caller's budget is the smaller of the two when both are present. Outbound,
/// both are written with the time left less the [`margin`](Self::margin).
///
/// ```
/// use std::time::Duration;
/// use baton_graph::tower::DeadlineHeaders;
/// use http::HeaderMap;
///
/// let headers = DeadlineHeaders::new().margin(Duration::from_millis(5));
/// let mut sent = HeaderMap::new();
/// headers.write(&mut sent, Duration::from_millis(105));
/// assert_eq!(sent["grpc-timeout"], "100000u");
/// assert_eq!(sent["x-envoy-expected-rq-timeout-ms"], "100");
/// assert_eq!(headers.read(&sent), Ok(Some(Duration::from_millis(100))));
/// ```
#[derive(Debug, Clone)]
pub struct DeadlineHeaders {
    millis: HeaderName,
    margin: Duration,
}

impl Default for DeadlineHeaders {
    fn default() -> Self {
        DeadlineHeaders::new()
    }
}

/// A budget header whose value is not in its format; [`DeadlineHeaders::read`]'s error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("header `{header}` is not a budget: {value:?}")]
pub struct BadBudgetHeader {
    /// The header's name.
    pub header: String,
    /// Its value, lossily as text.
    pub value: String,
}

impl DeadlineHeaders {
    /// The default millisecond header: `x-envoy-expected-rq-timeout-ms`.
    pub const MILLIS_HEADER: &'static str = "x-envoy-expected-rq-timeout-ms";

    /// `grpc-timeout` and [`MILLIS_HEADER`](Self::MILLIS_HEADER), no margin.
    #[must_use]
    pub fn new() -> Self {
        DeadlineHeaders {
            millis: HeaderName::from_static(Self::MILLIS_HEADER),
            margin: Duration::ZERO,
        }
    }

    /// Reads and writes the budget in milliseconds in `name` instead, for example
    /// `request-timeout-ms`.
    #[must_use]
    pub fn millis_header(mut self, name: HeaderName) -> Self {
        self.millis = name;
        self
    }

    /// Sends `margin` less than the time left: what the request's trip and the answer's
    /// take, so that the answer comes back before this attempt is cut. Zero by default.
    #[must_use]
    pub fn margin(mut self, margin: Duration) -> Self {
        self.margin = margin;
        self
    }

    /// The millisecond header's name.
    #[must_use]
    pub fn millis_header_name(&self) -> &HeaderName {
        &self.millis
    }

    /// The caller's budget: the smaller of `grpc-timeout` and the millisecond header,
    /// `None` when neither is present.
    ///
    /// # Errors
    /// [`BadBudgetHeader`] when a present header's value is not in its format.
    pub fn read(&self, headers: &HeaderMap) -> Result<Option<Duration>, BadBudgetHeader> {
        let grpc = parse(headers, &GRPC_TIMEOUT, Budget::parse_grpc_timeout)?;
        let millis = parse(headers, &self.millis, Budget::parse_millis)?;
        Ok(match (grpc, millis) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }

    /// Writes the budget `left` less the margin in both headers, replacing what they had.
    pub fn write(&self, headers: &mut HeaderMap, left: Duration) {
        let budget = Budget::new(left.saturating_sub(self.margin));
        for (name, value) in [
            (&GRPC_TIMEOUT, budget.grpc_timeout()),
            (&self.millis, budget.millis()),
        ] {
            if let Ok(value) = HeaderValue::try_from(value) {
                headers.insert(name.clone(), value);
            }
        }
    }

    /// The headers to send for a call that must end by `deadline`, as given by
    /// `Ctx::deadline` or `Attempt::deadline`; empty when there is none. For a client without
    /// middleware, such as `reqwest`:
    /// `client.post(url).headers(headers.outbound(ctx.deadline()))`.
    #[must_use]
    pub fn outbound(&self, deadline: Option<Instant>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(deadline) = deadline {
            self.write(
                &mut headers,
                deadline.saturating_duration_since(Instant::now()),
            );
        }
        headers
    }
}

/// The value of `name` parsed with `parse`; `None` when absent.
fn parse(
    headers: &HeaderMap,
    name: &HeaderName,
    parse: fn(&str) -> Option<Duration>,
) -> Result<Option<Duration>, BadBudgetHeader> {
    let Some(value) = headers.get(name) else {
        return Ok(None);
    };
    match value.to_str().ok().and_then(parse) {
        Some(left) => Ok(Some(left)),
        None => Err(BadBudgetHeader {
            header: name.as_str().to_owned(),
            value: String::from_utf8_lossy(value.as_bytes()).into_owned(),
        }),
    }
}

impl<B> ReadBudget<http::Request<B>> for DeadlineHeaders {
    /// The caller's budget from the request's headers; a malformed header is logged and
    /// read as absent.
    fn budget(&self, request: &http::Request<B>) -> Option<Duration> {
        self.read(request.headers()).unwrap_or_else(|error| {
            tracing::warn!(%error, "ignoring a malformed budget header");
            None
        })
    }
}

/// The deadline an outbound request must meet, as a request extension that
/// [`DeadlineLayer`] turns into headers, with feature `http`. Insert `ctx.deadline()` into it
/// when the task builds the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestDeadline(pub Instant);

/// A [`tower::Layer`](tower_layer::Layer) for HTTP clients that writes each request's
/// budget into its headers, with feature `http`: the time left before the request's
/// [`RequestDeadline`] extension, less the margin, as [`DeadlineHeaders::write`] does. A
/// request without the extension goes out as it is.
///
/// ```
/// use std::time::Duration;
/// use baton_graph::{BoxError, tower::{DeadlineHeaders, DeadlineLayer, RequestDeadline}};
/// use tokio::time::Instant;
/// use tower::{Service, ServiceBuilder, ServiceExt, service_fn};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), BoxError> {
/// let client = service_fn(|request: http::Request<()>| async move {
///     Ok::<_, BoxError>(request.headers()["grpc-timeout"].to_str()?.to_owned())
/// });
/// let mut client = ServiceBuilder::new()
///     .layer(DeadlineLayer::new(DeadlineHeaders::new()))
///     .service(client);
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert(RequestDeadline(Instant::now() + Duration::from_millis(80)));
/// assert_eq!(client.ready().await?.call(request).await?, "80000000n"); // 8 digits at most
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct DeadlineLayer {
    headers: DeadlineHeaders,
}

impl DeadlineLayer {
    /// A layer writing `headers`.
    #[must_use]
    pub fn new(headers: DeadlineHeaders) -> Self {
        DeadlineLayer { headers }
    }
}

impl<S> Layer<S> for DeadlineLayer {
    type Service = DeadlineService<S>;

    fn layer(&self, inner: S) -> DeadlineService<S> {
        DeadlineService {
            inner,
            headers: self.headers.clone(),
        }
    }
}

/// An HTTP client that sends each request's budget; from [`DeadlineLayer`].
#[derive(Clone)]
pub struct DeadlineService<S> {
    inner: S,
    headers: DeadlineHeaders,
}

impl<S: fmt::Debug> fmt::Debug for DeadlineService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeadlineService")
            .field("inner", &self.inner)
            .field("headers", &self.headers)
            .finish()
    }
}

impl<S, B> Service<http::Request<B>> for DeadlineService<S>
where
    S: Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> S::Future {
        if let Some(RequestDeadline(deadline)) = request.extensions().get().copied() {
            let left = deadline.saturating_duration_since(Instant::now());
            self.headers.write(request.headers_mut(), left);
        }
        self.inner.call(request)
    }
}
