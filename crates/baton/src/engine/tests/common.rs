//! Helpers shared by the scheduler's tests: `embedded.rs`, `fast_path.rs`,
//! `ready_queue.rs` and `ready_queue_turns.rs`.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::BoxError;

/// A runtime of two worker threads, with I/O and timers.
///
/// # Panics
///
/// If tokio cannot build it, as a test must not go on then.
pub(crate) fn two_workers() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime of two workers")
}

/// How long a computing node waits for its siblings before it fails: wall time, and only a
/// failing test waits that long.
pub(crate) const PATIENCE: Duration = Duration::from_secs(10);

/// Spins, synchronously and holding its thread, until `count` reaches `want`. Returns an
/// error naming how many started if that takes longer than [`PATIENCE`].
pub(crate) fn spin_until(count: &AtomicUsize, want: usize) -> Result<(), BoxError> {
    let t0 = Instant::now();
    while count.load(Ordering::SeqCst) < want {
        if t0.elapsed() > PATIENCE {
            // Whether the node that did not start had a task to run it, by tokio's count of
            // live tasks, tells a scheduling bug from an idle worker that was not woken.
            let tokio = tokio::runtime::Handle::try_current().map_or_else(
                |_| "no runtime".to_owned(),
                |h| {
                    let m = h.metrics();
                    format!(
                        "{} tasks alive, {} in the global queue",
                        m.num_alive_tasks(),
                        m.global_queue_depth()
                    )
                },
            );
            return Err(format!(
                "only {} of {want} ever started ({tokio})",
                count.load(Ordering::SeqCst)
            )
            .into());
        }
        std::thread::yield_now();
    }
    Ok(())
}

/// The attempt of a node that computes without awaiting: it counts itself in `started`,
/// then spins until a second node counted there runs beside it, which needs a second
/// worker.
pub(crate) fn compute_beside_another(
    started: &Arc<AtomicUsize>,
) -> impl Future<Output = Result<(), BoxError>> + Send + use<> {
    let started = Arc::clone(started);
    async move {
        started.fetch_add(1, Ordering::SeqCst);
        spin_until(&started, 2)
    }
}
