//! tower, both ways (`docs/contract.md`, rule 18): a service as a node's task, a graph as a
//! service, the pipeline as a layer, and (feature `axum`) run errors as HTTP responses. On
//! tokio's paused clock.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use baton_graph::{
    Backoff, BoxError, CircuitBreaker, FailureMode, Graph, NodeError, Outcome, Pipeline, Retry,
    RunError, RunOptions,
    tower::{GraphService, PipelineLayer},
};
use tokio::time::{Instant, Sleep, sleep};
use tower::{Service, ServiceBuilder, ServiceExt, service_fn};

use crate::ms;

/// A downstream's own error, to find again in the node's error chain.
#[derive(Debug, thiserror::Error)]
#[error("price service answered {0}")]
struct Status(u16);

/// A service that becomes ready `warm_up` after each clone first polls it, counts its
/// clones, readiness checks and calls, and answers `request * 10` after `latency`, or
/// `Status(503)` for the first `fail_first` calls.
struct Downstream {
    warm_up: Duration,
    latency: Duration,
    fail_first: u32,
    ready: Option<Pin<Box<Sleep>>>,
    counts: Arc<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    clones: AtomicU32,
    readiness_checks: AtomicU32,
    calls: AtomicU32,
}

impl Downstream {
    fn new(warm_up: Duration, latency: Duration, fail_first: u32) -> (Self, Arc<Counts>) {
        let counts = Arc::new(Counts::default());
        let svc = Downstream {
            warm_up,
            latency,
            fail_first,
            ready: None,
            counts: Arc::clone(&counts),
        };
        (svc, counts)
    }
}

impl Clone for Downstream {
    fn clone(&self) -> Self {
        self.counts.clones.fetch_add(1, Ordering::Relaxed);
        Downstream {
            ready: None,
            counts: Arc::clone(&self.counts),
            ..*self
        }
    }
}

impl Service<u64> for Downstream {
    type Response = u64;
    type Error = Status;
    type Future = Pin<Box<dyn Future<Output = Result<u64, Status>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        self.counts.readiness_checks.fetch_add(1, Ordering::Relaxed);
        let warm_up = self.warm_up;
        let ready = self.ready.get_or_insert_with(|| Box::pin(sleep(warm_up)));
        ready.as_mut().poll(cx).map(Ok)
    }

    fn call(&mut self, request: u64) -> Self::Future {
        // tower's rule: a service is called only after it said it was ready.
        assert!(
            self.ready.as_ref().is_some_and(|r| r.is_elapsed()),
            "called before it was ready"
        );
        let n = self.counts.calls.fetch_add(1, Ordering::Relaxed);
        let (latency, fail) = (self.latency, n < self.fail_first);
        Box::pin(async move {
            sleep(latency).await;
            if fail {
                return Err(Status(503));
            }
            Ok(request * 10)
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_service_is_a_nodes_task_with_its_request_from_ctx_and_upstreams() {
    let (svc, counts) = Downstream::new(ms(0), ms(30), 0);
    let mut g = Graph::<u64>::builder();
    let sku = g
        .node("sku")
        .task(|ctx, ()| async move { Ok::<_, BoxError>(*ctx.input() + 1) });
    let price = g
        .node("price")
        .after(sku)
        .service(svc, |ctx, sku: Arc<u64>| *ctx.input() * 100 + *sku);
    let report = g.build().unwrap().run(4).await.unwrap();
    assert_eq!(report.get(price), Some(&4_050));
    assert_eq!(report.node(price).unwrap().attempts(), 1);
    assert_eq!(report.makespan(), ms(30));
    assert_eq!(counts.calls.load(Ordering::Relaxed), 1);
}

/// Each attempt clones the service, waits until the clone is ready (inside the attempt's
/// timeout), and only then calls it; a retry starts from a fresh clone.
#[tokio::test(start_paused = true)]
async fn a_service_is_cloned_per_attempt_and_called_only_when_ready() {
    let (svc, counts) = Downstream::new(ms(40), ms(10), 1);
    let mut g = Graph::<u64>::builder();
    let price = g
        .node("price")
        .retry(Retry::new(3).backoff(Backoff::constant(ms(5))))
        .service(svc, |ctx, ()| *ctx.input());
    let report = g.build().unwrap().run(7).await.unwrap();
    let node = report.node(price).unwrap();
    assert_eq!(report.get(price), Some(&70));
    assert_eq!(node.attempts(), 2);
    // 40 ms warm-up + 10 ms call, a 5 ms backoff, 40 ms warm-up of the new clone + 10 ms.
    assert_eq!(node.end(), ms(105));
    assert_eq!(counts.clones.load(Ordering::Relaxed), 2);
    assert_eq!(counts.calls.load(Ordering::Relaxed), 2);
    assert!(counts.readiness_checks.load(Ordering::Relaxed) >= 4);

    // A warm-up longer than the timeout: the attempt is cut while it waits for readiness,
    // and the service is never called.
    let (slow, counts) = Downstream::new(ms(500), ms(10), 0);
    let mut g = Graph::<u64>::builder();
    let price = g
        .node("price")
        .timeout(ms(100))
        .service(slow, |ctx, ()| *ctx.input());
    let report = g.build().unwrap().run(7).await.unwrap();
    let node = report.node(price).unwrap();
    assert_eq!(node.outcome(), Outcome::Failed);
    assert!(
        matches!(node.error(), Some(NodeError::Timeout { attempt: 1, .. })),
        "{:?}",
        node.error()
    );
    assert_eq!(node.end(), ms(100));
    assert_eq!(counts.calls.load(Ordering::Relaxed), 0);
}

#[tokio::test(start_paused = true)]
async fn a_services_error_is_the_nodes_task_error_with_its_source() {
    let (svc, _counts) = Downstream::new(ms(0), ms(10), u32::MAX);
    let seen = Arc::new(AtomicU32::new(0));
    let s = Arc::clone(&seen);
    let mut g = Graph::<u64>::builder();
    let price = g
        .node("price")
        .retry(
            Retry::new(3)
                .backoff(Backoff::constant(ms(5)))
                .retry_if(move |e| {
                    s.fetch_add(1, Ordering::Relaxed);
                    // The predicate finds the service's own error in the chain.
                    e.task_error()
                        .and_then(|e| e.downcast_ref::<Status>())
                        .is_some_and(|s| s.0 == 503)
                }),
        )
        .service(svc, |ctx, ()| *ctx.input());
    let report = g.build().unwrap().run(7).await.unwrap();
    let node = report.node(price).unwrap();
    assert_eq!(node.outcome(), Outcome::Failed);
    assert_eq!(node.attempts(), 3);
    assert_eq!(seen.load(Ordering::Relaxed), 2);
    let error = node.error().unwrap();
    assert!(matches!(error.last_attempt(), NodeError::Task(_)));
    let status = error.task_error().and_then(|e| e.downcast_ref::<Status>());
    assert_eq!(status.map(|s| s.0), Some(503));
    let chain: Vec<String> = node.error_chain().map(ToString::to_string).collect();
    assert_eq!(
        chain.last().map(String::as_str),
        Some("price service answered 503")
    );
}

/// The rest of the onion sees a service's error as any task's: the breaker counts it and
/// opens, the fallback receives it, and once open the breaker rejects without a call.
#[tokio::test(start_paused = true)]
async fn a_services_error_reaches_the_breaker_and_the_fallback() {
    let (svc, counts) = Downstream::new(ms(0), ms(10), u32::MAX);
    let breaker = CircuitBreaker::builder("prices")
        .consecutive_failures(2)
        .open_duration(ms(1_000))
        .build()
        .unwrap();
    let mut g = Graph::<u64>::builder();
    let price = g
        .node("price")
        .breaker(&breaker)
        .fallback_with(|_ctx, (), error| async move {
            // The service's own status, or 0 when baton refused to call it.
            let status = error.task_error().and_then(|e| e.downcast_ref::<Status>());
            Ok::<_, BoxError>(status.map_or(0, |s| u64::from(s.0)))
        })
        .service(svc, |ctx, ()| *ctx.input());
    let graph = g.build().unwrap();
    let mut values = Vec::new();
    for _ in 0..3 {
        let report = graph.run(7).await.unwrap();
        assert_eq!(report.node(price).unwrap().outcome(), Outcome::Recovered);
        values.push(*report.get(price).unwrap());
    }
    assert_eq!(values, [503, 503, 0]);
    assert!(breaker.is_open());
    assert_eq!(counts.calls.load(Ordering::Relaxed), 2);
}

fn assert_service<S: Service<u64> + Clone + Send + Sync + 'static>(_: &S)
where
    S::Future: Send + 'static,
{
}

#[tokio::test(start_paused = true)]
async fn a_graph_is_a_cloneable_send_service_of_its_input() {
    let mut g = Graph::<u64>::builder();
    let slow = g.node("slow").task(|ctx, ()| async move {
        sleep(ms(*ctx.input())).await;
        Ok::<_, BoxError>(*ctx.input())
    });
    let graph = g.build().unwrap();
    let svc: GraphService<u64> = graph.clone().into_service();
    assert_service(&svc);

    // The response is the report; calls are runs of their own, concurrently.
    let t0 = Instant::now();
    let (a, b) = tokio::join!(svc.clone().oneshot(30), svc.clone().oneshot(50));
    assert_eq!(a.unwrap().get(slow), Some(&30));
    assert_eq!(b.unwrap().get(slow), Some(&50));
    assert_eq!(t0.elapsed(), ms(50));

    // Mapped, and with run options for every call.
    let mut mapped = svc
        .options(
            RunOptions::new()
                .timeout(ms(40))
                .failure_mode(FailureMode::FailAll),
        )
        .map_report(move |report| report.get(slow).copied());
    assert_service(&mapped);
    let ok = mapped.ready().await.unwrap().call(10).await.unwrap();
    assert_eq!(ok, Some(10));
    let err = mapped.ready().await.unwrap().call(60).await.unwrap_err();
    match err {
        RunError::Failed { node, report, .. } => {
            assert_eq!(node, "slow");
            let error = report.node(slow).and_then(|n| n.error());
            assert!(matches!(error, Some(NodeError::DeadlineExceeded { .. })));
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn the_pipeline_layer_calls_a_service_through_the_policies() {
    let (svc, counts) = Downstream::new(ms(0), ms(10), 2);
    let pipeline = Pipeline::<u64>::builder("prices")
        .timeout(ms(100))
        .retry(Retry::new(3).backoff(Backoff::constant(ms(20))))
        .build()
        .unwrap();
    let mut stack = ServiceBuilder::new()
        .layer(PipelineLayer::new(pipeline.clone()))
        .service(svc);
    let t0 = Instant::now();
    let value = stack.ready().await.unwrap().call(7).await.unwrap();
    assert_eq!(value, 70);
    // Three attempts of 10 ms, two backoffs of 20 ms; each attempt had its own clone of
    // the service and of the request.
    assert_eq!(t0.elapsed(), ms(70));
    assert_eq!(counts.calls.load(Ordering::Relaxed), 3);
    assert_eq!(counts.clones.load(Ordering::Relaxed), 4); // one per attempt, one per call

    // The inner service's readiness is awaited inside the attempt's timeout.
    let (slow, counts) = Downstream::new(ms(500), ms(10), 0);
    let err = pipeline.layer().layer_oneshot(slow, 1).await.unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert!(matches!(err.last_attempt(), NodeError::Timeout { node, .. } if node == "prices"));
    assert_eq!(counts.calls.load(Ordering::Relaxed), 0);
}

/// `layer_oneshot`: a layer around one service, called once.
trait LayerOnce<S> {
    fn layer_oneshot(
        &self,
        svc: S,
        request: u64,
    ) -> impl Future<Output = Result<u64, Arc<NodeError>>>;
}

impl<S> LayerOnce<S> for PipelineLayer<u64>
where
    S: Service<u64, Response = u64> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    fn layer_oneshot(
        &self,
        svc: S,
        request: u64,
    ) -> impl Future<Output = Result<u64, Arc<NodeError>>> {
        tower::Layer::layer(self, svc).oneshot(request)
    }
}

#[tokio::test(start_paused = true)]
async fn the_pipeline_layers_breaker_rejects_without_calling_the_service() {
    let breaker = CircuitBreaker::builder("prices")
        .consecutive_failures(2)
        .open_duration(ms(1_000))
        .build()
        .unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let c = Arc::clone(&calls);
    let failing = service_fn(move |_: u64| {
        c.fetch_add(1, Ordering::Relaxed);
        async { Err::<u64, _>(Status(500)) }
    });
    let layer = Pipeline::builder("prices")
        .breaker(&breaker)
        .build()
        .unwrap()
        .layer();
    let svc = ServiceBuilder::new().layer(layer).service(failing);
    for _ in 0..2 {
        let err = svc.clone().oneshot(1).await.unwrap_err();
        assert!(matches!(*err, NodeError::Task(_)), "{err}");
    }
    let err = svc.clone().oneshot(1).await.unwrap_err();
    assert!(
        matches!(&*err, NodeError::BreakerOpen { breaker, .. } if breaker == "prices"),
        "{err}"
    );
    assert_eq!(calls.load(Ordering::Relaxed), 2);
    // The error converts into tower's `BoxError` for the layers outside.
    let boxed: BoxError = err.into();
    assert!(
        boxed
            .to_string()
            .contains("circuit breaker `prices` is open")
    );
}

#[cfg(feature = "axum")]
mod http {
    use axum::Json;
    use axum::body::{Body, to_bytes};
    use axum::http::{Request, StatusCode};
    use axum::response::IntoResponse;
    use baton_graph::Bulkhead;
    use serde_json::Value;

    use super::*;

    async fn json(response: axum::response::Response) -> (StatusCode, Value) {
        let status = response.status();
        let ct = response.headers().get("content-type").cloned();
        let bytes = to_bytes(response.into_body(), 1 << 16).await.unwrap();
        let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if value != Value::Null && status != StatusCode::OK {
            assert_eq!(ct.unwrap(), "application/json");
        }
        (status, value)
    }

    /// A rate limiter's refusal and an open breaker answer 503, with a `Retry-After`
    /// header (whole seconds, rounded up) when the error knows when to try again.
    #[tokio::test(start_paused = true)]
    async fn a_refusal_that_knows_when_answers_503_with_retry_after() {
        let limiter = baton_graph::RateLimiter::new("partner", 1, ms(1_500))
            .max_wait(std::time::Duration::ZERO);
        let mut g = Graph::<()>::builder();
        g.failure_mode(FailureMode::FailFast);
        let _ = g
            .node("partner")
            .rate_limit(&limiter)
            .task(|_ctx, ()| async { Ok::<u32, BoxError>(1) });
        let graph = g.build().unwrap();
        graph.run(()).await.unwrap();
        let err = graph.run(()).await.unwrap_err();
        let response = err.into_response();
        let after = response.headers().get("retry-after").cloned();
        let (status, body) = json(response).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["error"], "rate_limited");
        assert_eq!(after.unwrap(), "2");
    }

    /// A graph whose node `node` has the given policies and task.
    async fn failing(
        build: impl FnOnce(&mut baton_graph::GraphBuilder<()>),
    ) -> (StatusCode, Value) {
        let mut g = Graph::<()>::builder();
        g.failure_mode(FailureMode::FailAll);
        build(&mut g);
        let err = g.build().unwrap().run(()).await.unwrap_err();
        json(err.into_response()).await
    }

    #[tokio::test(start_paused = true)]
    async fn run_errors_become_responses_naming_the_failing_node() {
        // The downstream's own error: 502.
        let (status, body) = failing(|g| {
            g.node("price")
                .task(|_ctx, ()| async { Err::<u32, _>(Status(500)) });
        })
        .await;
        assert_eq!(status, StatusCode::BAD_GATEWAY);
        assert_eq!(body["node"], "price");
        assert_eq!(body["error"], "task");
        // baton's words, not the downstream's: its answer stays in the report.
        let message = body["message"].as_str().unwrap_or_default();
        assert!(message.contains("node `price` failed"), "{message}");
        assert!(!message.contains("answered 500"), "{message}");

        // Time ran out, after retries: 504, named by the series' error.
        let (status, body) = failing(|g| {
            g.node("stock")
                .timeout(ms(50))
                .retry(Retry::new(2).backoff(Backoff::constant(ms(5))))
                .task(|_ctx, ()| async {
                    sleep(ms(100)).await;
                    Ok::<u32, BoxError>(1)
                });
        })
        .await;
        assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(
            (body["node"].as_str(), body["error"].as_str()),
            (Some("stock"), Some("gave_up"))
        );

        // Refused by baton: an open breaker, a full bulkhead: 503.
        let open = CircuitBreaker::builder("inventory")
            .consecutive_failures(1)
            .build()
            .unwrap();
        open.try_acquire().unwrap().failure(ms(1));
        let (status, body) = failing(|g| {
            g.node("stock")
                .breaker(&open)
                .task(|_ctx, ()| async { Ok::<u32, BoxError>(1) });
        })
        .await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["error"], "breaker_open");
        let full = Bulkhead::new("db", 1, ms(10));
        let (status, body) = failing(|g| {
            g.node("report").bulkhead(&full).task(|_ctx, ()| async {
                sleep(ms(100)).await; // holds the only permit
                Ok::<u32, BoxError>(1)
            });
            g.node("db")
                .bulkhead(&full)
                .task(|_ctx, ()| async { Ok::<u32, BoxError>(1) });
        })
        .await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            (body["node"].as_str(), body["error"].as_str()),
            (Some("db"), Some("bulkhead_full"))
        );

        // A bug: 500.
        let (status, body) = failing(|g| {
            g.node("render")
                .task(|_ctx, ()| async { panic!("bug") as Result<u32, BoxError> });
        })
        .await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(body["error"], "panicked");

        // A run that could not start names no node.
        let (status, body) = json(RunError::ShuttingDown.into_response()).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["node"], Value::Null);
        assert_eq!(body["error"], "shutting_down");
    }

    #[tokio::test(start_paused = true)]
    async fn a_missing_value_becomes_a_response_naming_the_node() {
        let mut g = Graph::<()>::builder();
        let user = g
            .node("user")
            .task(|_ctx, ()| async { Err::<u32, _>(Status(503)) });
        let order = g
            .node("order")
            .after(user)
            .task(|_ctx, _user| async { Ok::<u32, BoxError>(1) });
        let report = g.build().unwrap().run(()).await.unwrap();
        let missing = report.require(order).unwrap_err();
        let (status, body) = json(missing.into_response()).await;
        assert_eq!(status, StatusCode::BAD_GATEWAY);
        assert_eq!(body["node"], "order");
        let message = body["message"].as_str().unwrap_or_default();
        assert!(message.contains("user"), "{message}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_graph_serves_an_axum_route() {
        let mut g = Graph::<u64>::builder();
        let user = g.node("user").task(|ctx, ()| async move {
            if *ctx.input() == 0 {
                return Err(Status(404));
            }
            Ok(*ctx.input())
        });
        let greeting = g
            .node("greeting")
            .after(user)
            .task(|_ctx, user| async move { Ok::<_, BoxError>(format!("hello {user}")) });
        let svc = g
            .build()
            .unwrap()
            .into_service()
            .map_report(move |report| report.require(greeting).map(|g| Json(g.clone())))
            .http(|Json(id): Json<u64>| id);
        let app = axum::Router::new().route_service("/greet", svc);

        let post = |body: &'static str| {
            Request::post("/greet")
                .header("content-type", "application/json")
                .body(Body::from(body))
                .unwrap()
        };
        let (status, body) = json(app.clone().oneshot(post("7")).await.unwrap()).await;
        assert_eq!((status, body), (StatusCode::OK, Value::from("hello 7")));
        let (status, body) = json(app.clone().oneshot(post("0")).await.unwrap()).await;
        assert_eq!(status, StatusCode::BAD_GATEWAY);
        assert_eq!(body["node"], "greeting");
        // The extractor's rejection, untouched.
        let response = app.clone().oneshot(post("not json")).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    }

    /// A router whose chosen branch was refused by a rate limiter answers as the branch's
    /// refusal: 503 with `Retry-After`, and the branch as the root cause.
    #[tokio::test(start_paused = true)]
    async fn a_routers_refused_branch_answers_503_with_retry_after() {
        let limiter = baton_graph::RateLimiter::new("partner", 1, ms(1_500)).max_wait(ms(0));
        let mut g = Graph::<()>::builder();
        g.failure_mode(FailureMode::FailFast);
        let _ = g
            .router("dispatch")
            .select(|_input, ()| "partner")
            .branch("partner", |b| {
                b.rate_limit(&limiter)
                    .task(|_ctx, ()| async { Ok::<u32, BoxError>(1) })
            })
            .finish();
        let graph = g.build().unwrap();
        graph.run(()).await.unwrap();
        let err = graph.run(()).await.unwrap_err();
        let error = err
            .report()
            .and_then(|r| r.by_name("dispatch"))
            .and_then(|n| n.error());
        assert_eq!(error.map(NodeError::kind), Some("branch_failed"));
        assert_eq!(error.and_then(NodeError::retry_after), Some(ms(1_500)));
        let response = err.into_response();
        let after = response.headers().get("retry-after").cloned();
        let (status, body) = json(response).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(after.as_ref().map(|v| v.to_str().unwrap()), Some("2"));
        assert_eq!(body["node"], "dispatch");
        assert_eq!(body["cause"]["node"], "partner");
        assert_eq!(body["cause"]["error"], "rate_limited");
    }

    /// A failed request's body names the root cause, node and error kind, besides the node
    /// the handler required.
    #[tokio::test(start_paused = true)]
    async fn a_failed_requests_body_names_its_root_cause() {
        let mut g = Graph::<()>::builder();
        let stock = g
            .node("stock")
            .timeout(ms(50))
            .retry(Retry::new(2).backoff(Backoff::constant(ms(5))))
            .task(|_ctx, ()| async {
                sleep(ms(100)).await;
                Ok::<u32, BoxError>(1)
            });
        let total = g
            .node("total")
            .after(stock)
            .task(|_ctx, stock| async move { Ok::<u32, BoxError>(*stock * 2) });
        let graph = g.build().unwrap();
        let report = graph.run(()).await.unwrap();
        let missing = report.require(total).unwrap_err();
        assert_eq!(missing.cause_node(), Some("stock"));
        let (status, body) = json(missing.into_response()).await;
        assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(body["node"], "total");
        assert_eq!(body["cause"]["node"], "stock");
        assert_eq!(body["cause"]["error"], "timeout");

        let err = graph
            .run_with((), RunOptions::new().failure_mode(FailureMode::FailFast))
            .await
            .unwrap_err();
        let (_, body) = json(err.into_response()).await;
        assert_eq!(
            (body["node"].as_str(), body["error"].as_str()),
            (Some("stock"), Some("gave_up"))
        );
        assert_eq!(body["cause"]["node"], "stock");
        assert_eq!(body["cause"]["error"], "timeout");
        let (_, body) = json(RunError::ShuttingDown.into_response()).await;
        assert_eq!(body["cause"], Value::Null);
    }

    /// Served with `post_service`, as the docs show, other methods get 405, not the
    /// extractor's 415.
    #[tokio::test(start_paused = true)]
    async fn a_graph_served_with_post_service_answers_405_to_other_methods() {
        let mut g = Graph::<u64>::builder();
        let double = g
            .node("double")
            .task(|ctx, ()| async move { Ok::<_, BoxError>(ctx.input() * 2) });
        let svc = g
            .build()
            .unwrap()
            .into_service()
            .map_report(move |report| report.require(double).map(|v| Json(*v)))
            .http(|Json(n): Json<u64>| n);
        let app = axum::Router::new().route("/double", axum::routing::post_service(svc));
        let get = Request::get("/double").body(Body::empty()).unwrap();
        let response = app.clone().oneshot(get).await.unwrap();
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
        let post = Request::post("/double")
            .header("content-type", "application/json")
            .body(Body::from("21"))
            .unwrap();
        let (status, body) = json(app.oneshot(post).await.unwrap()).await;
        assert_eq!((status, body), (StatusCode::OK, Value::from(42)));
    }
}
