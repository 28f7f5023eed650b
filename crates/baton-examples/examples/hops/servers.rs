//! The three hops on random ports of `127.0.0.1`, and the first caller's request to A.

use std::io;
use std::time::Duration;

use baton_examples::HttpServer;
use baton_graph::{BoxError, tower::DeadlineHeaders};
use tokio::time::Instant;

use crate::config::HopConfig;
use crate::hop_router;
use crate::reports::{HopReport, Hops};

/// The three hops, serving on random ports of `127.0.0.1`. Dropping it stops them.
#[derive(Debug)]
pub(crate) struct HopServers {
    servers: Vec<HttpServer>,
    /// Every hop's reports.
    hops: Hops,
}

impl HopServers {
    /// Starts C, then B calling C, then A calling B.
    ///
    /// # Errors
    /// When a listener cannot be bound, or a graph does not validate.
    pub(crate) async fn start(config: &HopConfig) -> Result<HopServers, BoxError> {
        let hops = Hops::default();
        let c = HttpServer::start(hop_router("C", None, config, &hops)?).await?;
        let b = HttpServer::start(hop_router("B", Some(c.url_of("/work")), config, &hops)?).await?;
        let a = HttpServer::start(hop_router("A", Some(b.url_of("/work")), config, &hops)?).await?;
        Ok(HopServers {
            servers: vec![a, b, c],
            hops,
        })
    }

    /// Sends A a request with `budget` in `grpc-timeout`, as the first caller; returns
    /// A's status, and the instant A's deadline passes.
    ///
    /// # Errors
    /// When A cannot be reached.
    pub(crate) async fn call(
        &self,
        client: &reqwest::Client,
        budget: Duration,
    ) -> Result<(reqwest::StatusCode, Instant), reqwest::Error> {
        let deadline = Instant::now() + budget;
        let response = client
            .post(self.servers[0].url_of("/work"))
            .headers(DeadlineHeaders::new().outbound(Some(deadline)))
            .send()
            .await?;
        Ok((response.status(), deadline))
    }

    /// Waits until the three hops have reported (at most `wait`), and returns their
    /// reports, A's first.
    pub(crate) async fn reports(&self, wait: Duration) -> Vec<HopReport> {
        let until = Instant::now() + wait;
        let mut reports = Vec::new();
        while reports.len() < 3 && Instant::now() < until {
            reports.extend(self.hops.take());
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        reports.sort_by_key(|r| r.hop);
        reports
    }

    /// Stops the three hops.
    ///
    /// # Errors
    /// A server's I/O error.
    pub(crate) async fn shutdown(self) -> io::Result<()> {
        for server in self.servers {
            server.shutdown().await?;
        }
        Ok(())
    }
}
