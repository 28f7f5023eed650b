//! A `redis-server` of the example's own, on a free loopback port.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use baton_graph::BoxError;

/// A `redis-server` on a free loopback port, killed when dropped.
pub(crate) struct RedisServer {
    child: Child,
    port: u16,
}

impl RedisServer {
    pub(crate) fn start() -> Result<Self, BoxError> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("redis-server (install it, or pass --redis URL): {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return Err("redis-server did not start".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(RedisServer { child, port })
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
