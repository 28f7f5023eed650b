//! A TCP proxy in front of a Redis server that can black-hole what clients send (their
//! commands never reach the server) and cut every connection through it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub(crate) struct Proxy {
    pub(crate) port: u16,
    black_hole: Arc<AtomicBool>,
    cuts: watch::Sender<u64>,
}

impl Proxy {
    /// A proxy to `127.0.0.1:upstream` on a free port.
    pub(crate) async fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let black_hole = Arc::new(AtomicBool::new(false));
        let (cuts, _) = watch::channel(0);
        let hole = Arc::clone(&black_hole);
        let cut = cuts.subscribe();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                    continue;
                };
                tokio::spawn(pipe(client, server, Arc::clone(&hole), cut.clone()));
            }
        });
        Proxy {
            port,
            black_hole,
            cuts,
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Whether what clients send is dropped.
    pub(crate) fn black_hole(&self, on: bool) {
        self.black_hole.store(on, Ordering::SeqCst);
    }

    /// Closes every connection open through the proxy.
    pub(crate) fn cut(&self) {
        self.cuts.send_modify(|n| *n += 1);
    }
}

async fn pipe(
    mut client: TcpStream,
    mut server: TcpStream,
    black_hole: Arc<AtomicBool>,
    mut cut: watch::Receiver<u64>,
) {
    cut.mark_unchanged();
    let (mut cr, mut cw) = client.split();
    let (mut sr, mut sw) = server.split();
    let mut up = [0u8; 4096];
    let mut down = [0u8; 4096];
    loop {
        tokio::select! {
            _ = cut.changed() => return,
            n = cr.read(&mut up) => match n {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if !black_hole.load(Ordering::SeqCst) && sw.write_all(&up[..n]).await.is_err() {
                        return;
                    }
                }
            },
            n = sr.read(&mut down) => match n {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if cw.write_all(&down[..n]).await.is_err() {
                        return;
                    }
                }
            },
        }
    }
}
