//! A Redis server for the tests: `BATON_REDIS_URL` when set, or a `redis-server` of the
//! test's own on a free loopback port. Without either, a test skips with a message, unless
//! `CI` is set: then it fails.

#![allow(dead_code)]

pub(crate) mod proxy;

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use baton_graph::{
    CircuitBreaker,
    breaker::{BreakerState, BreakerTransition, TransitionReason},
};
use baton_redis::{RedisBreakers, RedisOptions};
use std::sync::{Arc, Mutex};

/// A `redis-server` child process, killed when dropped.
pub(crate) struct Server {
    child: Option<Child>,
    pub(crate) port: u16,
}

impl Server {
    /// Starts a server on a free port; `None` (after the skip message) without the binary.
    pub(crate) fn start(test: &str) -> Option<Server> {
        if Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_err()
        {
            skip(test, "redis-server is not installed");
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut server = Server { child: None, port };
        server.restart();
        Some(server)
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Stops the server (the process is killed: its data is gone).
    pub(crate) fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the process (`SIGSTOP`): it neither reads nor answers until [`resume`].
    pub(crate) fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets a paused process go on (`SIGCONT`).
    pub(crate) fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        let status = Command::new("kill").args([signal, &pid]).status().unwrap();
        assert!(status.success(), "kill {signal} {pid}");
    }

    /// Starts it again on the same port, and waits until it answers.
    pub(crate) fn restart(&mut self) {
        self.stop();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--enable-debug-command", "yes"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

fn skip(test: &str, why: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: {why}, and CI is set: install redis-server or set BATON_REDIS_URL"
    );
    eprintln!("SKIPPED {test}: {why} (set BATON_REDIS_URL or install redis-server)");
}

/// A server to share: `BATON_REDIS_URL`, or one of our own (kept alive by the guard).
pub(crate) fn any_server(test: &str) -> Option<(String, Option<Server>)> {
    if let Ok(url) = std::env::var("BATON_REDIS_URL") {
        return Some((url, None));
    }
    let server = Server::start(test)?;
    Some((server.url(), Some(server)))
}

/// A breaker name no other test uses.
pub(crate) fn unique(name: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{name}-{nanos}")
}

pub(crate) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A connection whose timeout (1 s) a loaded test machine does not reach by accident: the
/// tests that are not about a slow or lost Redis must not fall back to the local machine.
pub(crate) async fn connect(url: &str) -> RedisBreakers {
    RedisBreakers::connect(url, RedisOptions::default().timeout(Duration::from_secs(1)))
        .await
        .expect("Redis answers")
}

/// Waits, up to a generous bound, until `cond` holds.
pub(crate) async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(ms(2)).await;
    }
}

pub(crate) type Log = Arc<Mutex<Vec<(BreakerState, BreakerState, TransitionReason)>>>;

pub(crate) fn logged(b: &CircuitBreaker) -> Log {
    let log: Log = Arc::default();
    let l = Arc::clone(&log);
    b.on_transition(move |t: &BreakerTransition, _| {
        l.lock().unwrap().push((t.from(), t.to(), t.reason()));
    });
    log
}
