//! Deadlines across service hops (`docs/contract.md`, rule 22): the caller's budget read
//! from `grpc-timeout` or a millisecond header by the graph service, the HTTP service and
//! the pipeline layer; an expired request answered at once; the attempt's budget sent
//! downstream; a downstream's "deadline expired" answer not retried. On tokio's paused
//! clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::Json;
use axum::body::{Body, to_bytes};
use axum::http::{HeaderName, Request, StatusCode};
use axum::response::IntoResponse;
use baton_graph::{
    BoxError, FailureMode, Graph, NodeError, Pipeline, Retry, RunOptions,
    deadline::DownstreamDeadlineExceeded,
    tower::{DeadlineHeaders, DeadlineLayer, RequestDeadline},
};
use serde_json::Value;
use tokio::time::{Instant, sleep};
use tower::{Service, ServiceBuilder, ServiceExt, service_fn};

use crate::ms;

async fn json(response: axum::response::Response) -> (StatusCode, Value) {
    let status = response.status();
    let bytes = to_bytes(response.into_body(), 1 << 16).await.unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// A request to `/` with `headers` and `body`.
fn request<B>(headers: &[(&str, &str)], body: B) -> Request<B> {
    let mut builder = Request::post("/").header("content-type", "application/json");
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(body).unwrap()
}

/// The graph service runs under `min(own timeout, caller's budget)`, the budget read from
/// `grpc-timeout` or the millisecond header (the smaller when both are sent).
#[tokio::test(start_paused = true)]
async fn the_graph_service_runs_under_the_callers_budget() {
    let mut g = Graph::<Request<()>>::builder();
    let left = g
        .node("left")
        .task(|ctx, ()| async move { Ok::<_, BoxError>(ctx.remaining()) });
    let mut svc = g
        .build()
        .unwrap()
        .into_service()
        .options(RunOptions::new().timeout(ms(1_000)))
        .deadline_headers(DeadlineHeaders::new())
        .map_report(move |report| report.get(left).copied().flatten());
    let mut call = async |headers: &[(&str, &str)]| {
        svc.ready()
            .await
            .unwrap()
            .call(request(headers, ()))
            .await
            .unwrap()
    };
    assert_eq!(call(&[("grpc-timeout", "100m")]).await, Some(ms(100)));
    assert_eq!(
        call(&[("x-envoy-expected-rq-timeout-ms", "300")]).await,
        Some(ms(300))
    );
    let both = [
        ("grpc-timeout", "2S"),
        ("x-envoy-expected-rq-timeout-ms", "250"),
    ];
    assert_eq!(call(&both).await, Some(ms(250)));
    assert_eq!(
        call(&[("grpc-timeout", "5S")]).await,
        Some(ms(1_000)),
        "own timeout"
    );
    assert_eq!(call(&[]).await, Some(ms(1_000)));
    assert_eq!(
        call(&[("grpc-timeout", "soon")]).await,
        Some(ms(1_000)),
        "malformed"
    );

    // The millisecond header's name is configurable.
    let mut g = Graph::<Request<()>>::builder();
    let left = g
        .node("left")
        .task(|ctx, ()| async move { Ok::<_, BoxError>(ctx.remaining()) });
    let headers =
        DeadlineHeaders::new().millis_header(HeaderName::from_static("request-timeout-ms"));
    let mut svc = g
        .build()
        .unwrap()
        .into_service()
        .deadline_headers(headers)
        .map_report(move |report| report.get(left).copied().flatten());
    let answer = svc
        .ready()
        .await
        .unwrap()
        .call(request(&[("request-timeout-ms", "40")], ()))
        .await;
    assert_eq!(answer.unwrap(), Some(ms(40)));
}

/// A request whose caller has no time left is answered at once, and no user code runs:
/// 504 (or the status set) from the HTTP service without reading the body; a run whose
/// every node ends `DeadlineExceeded` from the graph service; `DeadlineExceeded` from the
/// pipeline layer without calling its service.
#[tokio::test(start_paused = true)]
async fn an_expired_request_is_answered_at_once_and_runs_no_user_code() {
    let calls = Arc::new(AtomicU32::new(0));
    let seen = calls.clone();
    let mut g = Graph::<u64>::builder();
    let double = g.node("double").task(move |ctx, ()| {
        seen.fetch_add(1, Ordering::Relaxed);
        let n = *ctx.input();
        async move { Ok::<_, BoxError>(n * 2) }
    });
    let graph = g.build().unwrap();
    let extracted = Arc::new(AtomicU32::new(0));
    let counted = extracted.clone();
    let http = graph
        .clone()
        .into_service()
        .map_report(move |report| report.require(double).map(|v| Json(*v)))
        .http(move |Json(n): Json<u64>| {
            counted.fetch_add(1, Ordering::Relaxed);
            n
        });
    let started = Instant::now();
    let expired = [("grpc-timeout", "0m")];
    let (status, body) = json(
        http.clone()
            .oneshot(request(&expired, Body::from("21")))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(body["error"], "deadline_exceeded");
    let own_status = http.clone().expired_status(StatusCode::REQUEST_TIMEOUT);
    let response = own_status.oneshot(request(
        &[("x-envoy-expected-rq-timeout-ms", "0")],
        Body::from("21"),
    ));
    assert_eq!(
        response.await.unwrap().status(),
        StatusCode::REQUEST_TIMEOUT
    );
    // A malformed budget is the caller's mistake, named.
    let (status, body) = json(
        http.clone()
            .oneshot(request(&[("grpc-timeout", "1 s")], Body::from("21")))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("bad_budget"))
    );
    assert!(body["message"].as_str().unwrap().contains("grpc-timeout"));
    assert_eq!(
        (
            calls.load(Ordering::Relaxed),
            extracted.load(Ordering::Relaxed)
        ),
        (0, 0)
    );

    // The graph service: the run's deadline has passed, so no task starts.
    let mut g = Graph::<Request<()>>::builder();
    let seen = calls.clone();
    let node = g.node("work").task(move |_ctx, ()| {
        seen.fetch_add(1, Ordering::Relaxed);
        async { Ok::<u32, BoxError>(1) }
    });
    let svc = g
        .build()
        .unwrap()
        .into_service()
        .deadline_headers(DeadlineHeaders::new());
    let report = svc.oneshot(request(&expired, ())).await.unwrap();
    let error = report
        .node(node)
        .and_then(|n| n.error().map(NodeError::kind));
    assert_eq!(error, Some("deadline_exceeded"));

    // The pipeline layer: the inner service is not called.
    let pipeline = Pipeline::<u32>::builder("stock").build().unwrap();
    let seen = calls.clone();
    let inner = service_fn(move |_request: Request<()>| {
        seen.fetch_add(1, Ordering::Relaxed);
        async { Ok::<u32, BoxError>(1) }
    });
    let svc = ServiceBuilder::new()
        .layer(pipeline.layer().budget_from(DeadlineHeaders::new()))
        .service(inner);
    let err = svc.oneshot(request(&expired, ())).await.unwrap_err();
    assert_eq!(err.kind(), "deadline_exceeded");
    assert_eq!(calls.load(Ordering::Relaxed), 0);
    assert_eq!(started.elapsed(), Duration::ZERO, "answered at once");
}

/// The pipeline layer's call ends at the caller's deadline when it comes before the
/// pipeline's own timeout.
#[tokio::test(start_paused = true)]
async fn the_pipeline_layer_runs_under_the_callers_budget() {
    let pipeline = Pipeline::<u32>::builder("stock")
        .timeout(ms(1_000))
        .build()
        .unwrap();
    let inner = service_fn(|_request: Request<()>| async {
        sleep(ms(500)).await;
        Ok::<u32, BoxError>(1)
    });
    let svc = ServiceBuilder::new()
        .layer(pipeline.layer().budget_from(DeadlineHeaders::new()))
        .service(inner);
    let started = Instant::now();
    let err = svc
        .clone()
        .oneshot(request(&[("grpc-timeout", "100m")], ()))
        .await
        .unwrap_err();
    assert_eq!(
        (err.kind(), started.elapsed()),
        ("deadline_exceeded", ms(100))
    );
    assert_eq!(svc.oneshot(request(&[], ())).await.unwrap(), 1);
}

/// The HTTP service gives each run the caller's deadline, the `Idempotency-Key` header as
/// its idempotency key, and what the options hook makes of the request's head.
#[tokio::test(start_paused = true)]
async fn the_http_service_takes_run_options_from_the_request() {
    let mut g = Graph::<u64>::builder();
    let seen = g.node("charge").task(|ctx, ()| async move {
        Ok::<_, BoxError>((ctx.idempotency_key().to_string(), ctx.remaining()))
    });
    let fails = g
        .node("fails")
        .task(|_ctx, ()| async { Err::<u32, BoxError>("503".into()) });
    let http = g
        .build()
        .unwrap()
        .into_service()
        .options(RunOptions::new().timeout(ms(900)))
        .map_report(move |report| {
            let _ = report.require(fails)?;
            report.require(seen).map(|v| Json(v.clone()))
        })
        .http(|Json(n): Json<u64>| n)
        .run_options(|head, options| match head.headers.get("x-fail-fast") {
            Some(_) => options.failure_mode(FailureMode::FailFast),
            None => options,
        });
    let headers = [("idempotency-key", "order-7"), ("grpc-timeout", "300m")];
    let (status, body) = json(
        http.clone()
            .oneshot(request(&headers, Body::from("7")))
            .await
            .unwrap(),
    )
    .await;
    // Preserve-partial: the run goes on, `fails` is the missing value (502).
    assert_eq!(
        (status, body["node"].as_str()),
        (StatusCode::BAD_GATEWAY, Some("fails"))
    );
    let fast = [("x-fail-fast", "1")];
    let (status, body) = json(
        http.clone()
            .oneshot(request(&fast, Body::from("7")))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::BAD_GATEWAY, Some("task"))
    );

    // Without the failing node, the answer shows the key and the budget.
    let mut g = Graph::<u64>::builder();
    let seen = g.node("charge").task(|ctx, ()| async move {
        Ok::<_, BoxError>((
            ctx.idempotency_key().to_string(),
            ctx.remaining().map(|d| d.as_millis() as u64),
        ))
    });
    let http = g
        .build()
        .unwrap()
        .into_service()
        .options(RunOptions::new().timeout(ms(900)))
        .map_report(move |report| report.require(seen).map(|v| Json(v.clone())))
        .http(|Json(n): Json<u64>| n);
    let (status, body) = json(
        http.oneshot(request(&headers, Body::from("7")))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, serde_json::json!(["order-7-0", 300]));
}

/// The extractor runs before the run: a body that trickles in is cut at the caller's
/// deadline and answered as expired, without a run.
#[tokio::test(start_paused = true)]
async fn a_slow_body_is_cut_at_the_callers_deadline() {
    let calls = Arc::new(AtomicU32::new(0));
    let seen = calls.clone();
    let mut g = Graph::<String>::builder();
    let echo = g.node("echo").task(move |ctx, ()| {
        seen.fetch_add(1, Ordering::Relaxed);
        let body = ctx.input().clone();
        async move { Ok::<_, BoxError>(body) }
    });
    let http = g
        .build()
        .unwrap()
        .into_service()
        .map_report(move |report| report.require(echo).cloned())
        .http(|body: String| body);
    // One byte every 300 ms, for ever.
    let trickle = futures::stream::unfold((), |()| async {
        sleep(ms(300)).await;
        Some((
            Ok::<_, std::io::Error>(axum::body::Bytes::from_static(b"x")),
            (),
        ))
    });
    let started = Instant::now();
    let slow = request(&[("grpc-timeout", "1S")], Body::from_stream(trickle));
    let (status, body) = json(http.oneshot(slow).await.unwrap()).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(body["error"], "deadline_exceeded");
    assert_eq!(started.elapsed(), ms(1_000));
    assert_eq!(calls.load(Ordering::Relaxed), 0);
}

/// A task gets its attempt's budget less a margin in both wire formats; the outbound
/// helper and the client layer write them on the request.
#[tokio::test(start_paused = true)]
async fn a_task_sends_its_attempts_budget_downstream() {
    let sent = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = sent.clone();
    let client = service_fn(move |request: Request<()>| {
        let headers = request.headers();
        let pair = (
            headers
                .get("grpc-timeout")
                .map(|v| v.to_str().unwrap().to_owned()),
            headers
                .get("x-envoy-expected-rq-timeout-ms")
                .map(|v| v.to_str().unwrap().to_owned()),
        );
        log.lock().unwrap().push(pair);
        async { Ok::<u32, BoxError>(1) }
    });
    let client = ServiceBuilder::new()
        .layer(DeadlineLayer::new(DeadlineHeaders::new().margin(ms(10))))
        .service(client);
    let mut g = Graph::<()>::builder();
    let budget = g
        .node("budget")
        .timeout(ms(300))
        .task(|ctx, ()| async move {
            sleep(ms(50)).await;
            let budget = ctx.budget(ms(20)).unwrap();
            let helper = DeadlineHeaders::new()
                .margin(ms(20))
                .outbound(ctx.deadline());
            let helper = helper["grpc-timeout"].to_str().unwrap().to_owned();
            Ok::<_, BoxError>((budget.grpc_timeout(), budget.millis(), helper))
        });
    let _ = g.node("call").timeout(ms(200)).service(client, |ctx, ()| {
        let mut request = Request::new(());
        if let Some(deadline) = ctx.deadline() {
            request.extensions_mut().insert(RequestDeadline(deadline));
        }
        request
    });
    let report = g
        .build()
        .unwrap()
        .run_with((), RunOptions::new().timeout(ms(250)))
        .await
        .unwrap();
    let (grpc, millis, helper) = report.get(budget).unwrap();
    assert_eq!(
        (grpc.as_str(), millis.as_str(), helper.as_str()),
        ("180000u", "180", "180000u")
    );
    let sent = sent.lock().unwrap().clone();
    assert_eq!(sent, [(Some("190000u".to_owned()), Some("190".to_owned()))]);
    // No deadline: nothing to send.
    assert!(DeadlineHeaders::new().outbound(None).is_empty());
}

/// A downstream's "deadline expired" answer is not retried, whatever the predicate says,
/// in a node and in a pipeline.
#[tokio::test(start_paused = true)]
async fn a_downstreams_deadline_expired_answer_is_not_retried() {
    let mut g = Graph::<()>::builder();
    let stock = g
        .node("stock")
        .retry(Retry::new(3).retry_if(|_| true))
        .task(|_ctx, ()| async {
            let expired = DownstreamDeadlineExceeded::is_expired_answer(504, None);
            assert!(expired);
            Err::<u32, _>(DownstreamDeadlineExceeded::new("stock answered 504"))
        });
    let other = g
        .node("other")
        .retry(Retry::new(3))
        .task(|_ctx, ()| async { Err::<u32, BoxError>("503".into()) });
    let graph = g.build().unwrap();
    let report = graph.run(()).await.unwrap();
    assert_eq!(report.node(stock).map(|n| n.attempts()), Some(1));
    assert_eq!(report.node(other).map(|n| n.attempts()), Some(3));
    // Answered as time running out, not as the downstream's failure.
    let missing = report.require(stock).unwrap_err();
    assert_eq!(
        missing.into_response().status(),
        StatusCode::GATEWAY_TIMEOUT
    );
    let pipeline = Pipeline::<u32>::builder("stock")
        .retry(Retry::new(3))
        .build()
        .unwrap();
    let call = pipeline
        .run(|_attempt| async { Err::<u32, _>(DownstreamDeadlineExceeded::new("grpc-status 4")) })
        .await;
    assert_eq!(call.attempts(), 1);
}
