//! The order graph served by axum (`post_service`) on `127.0.0.1:0`, called with a real
//! HTTP client (reqwest): the answer for a placed order, for a fallback, for each run
//! error (naming the failing node), and for a body that is not an order.
//!
//! Real sockets, so tokio's real clock: the assertions are on statuses, bodies and call
//! counts, never on durations; the budgets leave hundreds of milliseconds of margin.

use std::time::Duration;

use baton_examples::{
    Behavior, Downstreams, HttpServer, Limits, OrderApi, OrderRequest, OrderServer, Service,
};
use reqwest::StatusCode;
use serde_json::Value;

use crate::config::Config;
use crate::{Placed, router};

const ORDER: OrderRequest = OrderRequest {
    user_id: 7,
    sku_id: 42,
};

/// The stand-in services and the order service in front of them.
async fn start(config: &Config) -> (Downstreams, OrderServer, HttpServer) {
    let downstreams = Downstreams::new();
    let services = OrderServer::start(downstreams.clone()).await.unwrap();
    let api = OrderApi::new(reqwest::Client::new(), services.base_url());
    let orders = HttpServer::start(router(&api, config, Limits::default()).unwrap())
        .await
        .unwrap();
    (downstreams, services, orders)
}

async fn post(url: &str, order: &OrderRequest) -> (StatusCode, Value) {
    let response = reqwest::Client::new()
        .post(url)
        .json(order)
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.json().await.unwrap())
}

#[tokio::test]
async fn an_axum_route_serves_the_graph_over_http() {
    let (downstreams, services, orders) = start(&Config::new().unwrap()).await;

    let (status, body) = post(&orders.url_of("/orders"), &ORDER).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let placed: Placed = serde_json::from_value(body).unwrap();
    assert_eq!((placed.user.as_str(), placed.quantity), ("user-7", 42));
    assert_eq!(downstreams.calls(Service::Sku), 1);

    // Stock down: three attempts, then the fallback's 0 units; still a 200.
    downstreams.reset();
    downstreams.update(Service::Stock, Behavior::fail);
    let (status, body) = post(&orders.url_of("/orders"), &ORDER).await;
    assert_eq!(
        (status, &body["quantity"]),
        (StatusCode::OK, &Value::from(0))
    );
    assert_eq!(downstreams.calls(Service::Stock), 3);

    // User down: the run fails fast, and the answer names the node.
    downstreams.reset();
    downstreams.update(Service::User, Behavior::fail);
    let (status, body) = post(&orders.url_of("/orders"), &ORDER).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    assert_eq!(
        (body["node"].as_str(), body["error"].as_str()),
        (Some("user"), Some("task"))
    );
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("node `user` failed"), "{message}");
    assert!(!message.contains("answered 503"), "{message}");
    assert_eq!(downstreams.calls(Service::Stock), 0);

    // Not an order: axum's own rejection.
    let response = reqwest::Client::new()
        .post(orders.url_of("/orders"))
        .header("content-type", "application/json")
        .body("{\"user\": 7}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);

    orders.shutdown().await.unwrap();
    services.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_run_out_of_time_answers_504_naming_the_node() {
    let config = Config {
        run_timeout: Duration::from_millis(1_000),
        ..Config::new().unwrap()
    };
    let (downstreams, services, orders) = start(&config).await;
    // `sku` answers in 200 ms, well inside the run's 1 s even on a loaded machine; `user`
    // would take over 3 s.
    downstreams.update(Service::User, |b| b.slow_by(Duration::from_secs(3)));
    let (status, body) = post(&orders.url_of("/orders"), &ORDER).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{body}");
    assert_eq!(body["node"], "user");
    assert_eq!(body["error"], "deadline_exceeded");
    orders.shutdown().await.unwrap();
    services.shutdown().await.unwrap();
}

/// What a raw TCP client gets back after sending `head` and then one byte of body every
/// 300 ms (until the server answers or closes): the answer's first line, empty when the
/// server closed without one. Bounded: it gives up after 20 s.
async fn trickle(addr: std::net::SocketAddr, head: &str, body_bytes: usize) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let talk = async {
        let mut answer = Vec::new();
        let mut buf = [0_u8; 1024];
        for _ in 0..body_bytes {
            tokio::select! {
                read = stream.read(&mut buf) => match read {
                    Ok(0) | Err(_) => return answer,
                    Ok(n) => answer.extend_from_slice(&buf[..n]),
                },
                () = tokio::time::sleep(Duration::from_millis(300)) => {
                    if stream.write_all(b"{").await.is_err() {
                        break;
                    }
                }
            }
            if answer.ends_with(b"\r\n") {
                return answer;
            }
        }
        while let Ok(n) = stream.read(&mut buf).await {
            if n == 0 {
                break;
            }
            answer.extend_from_slice(&buf[..n]);
        }
        answer
    };
    let answer = tokio::time::timeout(Duration::from_secs(20), talk)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&answer);
    text.lines().next().unwrap_or_default().to_owned()
}

/// Slow clients are cut: a body sent one byte at a time is answered 408 at the request
/// limit, a head sent one byte at a time is disconnected at the header read limit, and
/// neither reaches the graph.
#[tokio::test]
async fn slow_clients_are_cut() {
    let downstreams = Downstreams::new();
    let services = OrderServer::start(downstreams.clone()).await.unwrap();
    let api = OrderApi::new(reqwest::Client::new(), services.base_url());
    let limits = Limits {
        header_read: Duration::from_millis(600),
        body_idle: Duration::from_millis(600),
        request: Duration::from_millis(1_500),
    };
    let app = router(&api, &Config::new().unwrap(), limits).unwrap();
    let orders = HttpServer::start_with(app, limits).await.unwrap();

    let head = "POST /orders HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n";
    let answer = trickle(orders.addr(), head, 1_000).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    // A head that never ends: the connection is closed, with no answer or a 408.
    let answer = trickle(orders.addr(), "POST /orders HTTP/1.1\r\nhost: x\r\n", 1_000).await;
    assert!(answer.is_empty() || answer.contains("408"), "{answer:?}");
    assert_eq!(downstreams.calls(Service::User), 0);

    orders.shutdown().await.unwrap();
    services.shutdown().await.unwrap();
}
