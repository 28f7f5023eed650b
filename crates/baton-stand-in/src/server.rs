//! An HTTP/1 server on `127.0.0.1` that cuts slow clients: hyper's header read timeout,
//! which `axum::serve` does not set, and with [`Limits::bound`] a pause limit on the body
//! and a limit on the whole request.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tower_http::timeout::{RequestBodyTimeoutLayer, TimeoutLayer};

/// How long a client may take to send its request.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// To send the request's head (the server closes the connection after it).
    pub header_read: Duration,
    /// The longest pause between two pieces of the body (the body then fails, and the
    /// extractor rejects it).
    pub body_idle: Duration,
    /// For the whole request, its body and its handling included (answered 408): a body
    /// that trickles in without pausing is cut here. Longer than a graph run's budget, so
    /// that the run's own 504 comes first.
    pub request: Duration,
}

impl Default for Limits {
    /// 5 s for the head, pauses of at most 5 s in the body, 10 s for the whole request.
    fn default() -> Self {
        Limits {
            header_read: Duration::from_secs(5),
            body_idle: Duration::from_secs(5),
            request: Duration::from_secs(10),
        }
    }
}

impl Limits {
    /// `router` with its bodies bounded by [`body_idle`](Self::body_idle) and its whole
    /// requests by [`request`](Self::request) (tower-http's `RequestBodyTimeoutLayer` and
    /// `TimeoutLayer`).
    pub fn bound(self, router: Router) -> Router {
        router.layer((
            RequestBodyTimeoutLayer::new(self.body_idle),
            TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, self.request),
        ))
    }
}

/// A server listening on a random free port of `127.0.0.1`. Dropping it stops it.
#[derive(Debug)]
pub struct HttpServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<io::Result<()>>,
}

impl HttpServer {
    /// Binds `127.0.0.1:0` and serves `router` on the current tokio runtime, with the
    /// default [`Limits`]' header read timeout.
    ///
    /// # Errors
    /// When the listener cannot be bound or has no local address.
    pub async fn start(router: Router) -> io::Result<HttpServer> {
        HttpServer::start_with(router, Limits::default()).await
    }

    /// [`start`](Self::start), closing a connection whose request head is not in within
    /// `limits.header_read`. The body limits are the router's: see [`Limits::bound`].
    ///
    /// # Errors
    /// When the listener cannot be bound or has no local address.
    pub async fn start_with(router: Router, limits: Limits) -> io::Result<HttpServer> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve_bounded(listener, router, limits, stopped));
        Ok(HttpServer {
            addr,
            stop: Some(stop),
            task,
        })
    }

    /// `http://127.0.0.1:PORT` followed by `path` (`""` for the base URL).
    #[must_use]
    pub fn url_of(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The address it listens on.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting connections, lets requests in flight finish, and waits for the
    /// server to end.
    ///
    /// # Errors
    /// The server's I/O error, or an error if its task panicked.
    pub async fn shutdown(mut self) -> io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match (&mut self.task).await {
            Ok(result) => result,
            Err(e) => Err(io::Error::other(e)),
        }
    }
}

/// Serves `router` on `listener` with hyper's HTTP/1 server and a header read timeout,
/// until `stopped` (or its sender is dropped); then lets the connections finish their
/// requests.
async fn serve_bounded(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    stopped: oneshot::Receiver<()>,
) -> io::Result<()> {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read);
    let graceful = GracefulShutdown::new();
    let mut stopped = std::pin::pin!(stopped);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    continue;
                }
            },
            _ = &mut stopped => break,
        };
        let service = TowerToHyperService::new(router.clone());
        let connection = http.serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended");
            }
        });
    }
    graceful.shutdown().await;
    Ok(())
}
