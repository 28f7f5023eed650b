//! Bulkhead: a concurrency limit shared by the nodes that call one downstream, with a bounded
//! wait for a permit.
//!
//! The permit is taken per attempt and held until the attempt has really stopped: an async
//! attempt releases it when its future completes or is dropped; a blocking attempt that timed
//! out keeps it until its closure returns, because the thread is still calling the
//! downstream. A waiter that gives up (its wait bound elapsed, its deadline passed, or its run
//! was cancelled) never leaks a permit: tokio's semaphore removes a dropped waiter from its
//! queue.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// A named concurrency limit; cheap to clone, shared by every node given it.
///
/// Permits go first come, first served: tokio's semaphore is fair, so an attempt waits
/// behind every attempt that asked before it, whatever its node, graph or run. A retry asks
/// again and waits behind the attempts already in the queue.
///
/// ```
/// use std::time::Duration;
/// use baton_graph::{BoxError, Bulkhead, Pipeline};
/// use tokio::time::sleep;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), BoxError> {
/// let db = Bulkhead::new("db", 1, Duration::ZERO); // one query at a time, no waiting
/// let query = Pipeline::<()>::builder("query").bulkhead(&db).build()?;
/// let first = query.call(|_| async {
///     sleep(Duration::from_millis(100)).await;
///     Ok::<_, BoxError>(())
/// });
/// let second = query.call(|_| async { Ok::<_, BoxError>(()) });
/// let (first, second) = tokio::join!(first, second); // `first` asks first
/// assert!(first.is_ok());
/// assert_eq!(second.unwrap_err().kind(), "bulkhead_full");
/// assert_eq!(db.available(), 1);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Bulkhead {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    max_concurrent: usize,
    max_wait: Duration,
    semaphore: Arc<Semaphore>,
    waiting: AtomicUsize,
}

impl fmt::Debug for Bulkhead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bulkhead")
            .field("name", &self.inner.name)
            .field("max_concurrent", &self.inner.max_concurrent)
            .field("max_wait", &self.inner.max_wait)
            .field("available", &self.inner.semaphore.available_permits())
            .field("waiting", &self.waiting())
            .finish()
    }
}

/// A permit of a [`Bulkhead`], released on drop.
#[derive(Debug)]
pub(crate) struct BulkheadPermit {
    _permit: OwnedSemaphorePermit,
}

impl Bulkhead {
    /// A bulkhead called `name` that lets at most `max_concurrent` attempts run at once; an
    /// attempt waits at most `max_wait` for a permit (and never past its cut), then fails
    /// with [`NodeError::BulkheadFull`](crate::NodeError::BulkheadFull). Permits are granted
    /// in the order attempts ask for them. `Duration::ZERO` means "do not wait".
    ///
    /// A `max_concurrent` of 0, or above [`Bulkhead::MAX_CONCURRENT`], could never work: a
    /// graph or pipeline given such a bulkhead fails to build
    /// ([`BuildError::InvalidPolicy`](crate::BuildError::InvalidPolicy)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::Bulkhead;
    ///
    /// // At most 8 calls to the inventory service at once; wait up to 50 ms for a slot.
    /// let inventory = Bulkhead::new("inventory", 8, Duration::from_millis(50));
    /// assert_eq!(inventory.available(), 8);
    /// ```
    #[must_use]
    pub fn new(name: impl Into<String>, max_concurrent: usize, max_wait: Duration) -> Self {
        Bulkhead {
            inner: Arc::new(Inner {
                name: name.into(),
                max_concurrent,
                max_wait,
                semaphore: Arc::new(Semaphore::new(max_concurrent.min(Self::MAX_CONCURRENT))),
                waiting: AtomicUsize::new(0),
            }),
        }
    }

    /// The most permits a bulkhead can have.
    pub const MAX_CONCURRENT: usize = Semaphore::MAX_PERMITS;

    /// Checks that the bulkhead can ever admit an attempt.
    ///
    /// # Errors
    /// Why it cannot: no permit, or more than [`MAX_CONCURRENT`](Self::MAX_CONCURRENT).
    pub(crate) fn validate(&self) -> Result<(), String> {
        let (name, n) = (&self.inner.name, self.inner.max_concurrent);
        if n == 0 {
            return Err(format!(
                "bulkhead `{name}` has 0 permits: no attempt could ever run"
            ));
        }
        if n > Self::MAX_CONCURRENT {
            return Err(format!(
                "bulkhead `{name}` asks for {n} permits, more than the {} a bulkhead can have",
                Self::MAX_CONCURRENT
            ));
        }
        Ok(())
    }

    /// The bulkhead's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Its limit.
    #[must_use]
    pub fn max_concurrent(&self) -> usize {
        self.inner.max_concurrent
    }

    /// How many permits are free right now.
    #[must_use]
    pub fn available(&self) -> usize {
        self.inner.semaphore.available_permits()
    }

    /// How many attempts are waiting for a permit right now.
    #[must_use]
    pub fn waiting(&self) -> usize {
        self.inner.waiting.load(Ordering::Relaxed)
    }

    /// Whether `self` and `other` are the same bulkhead (clones of one handle).
    #[must_use]
    pub fn same_as(&self, other: &Bulkhead) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Waits for a permit until `max_wait` or `until` (the end of the attempt that asks),
    /// whichever is first; with the permit, how long it waited. Permits are granted in the
    /// order they were asked for. Cancel-safe: dropping the future gives up the place in
    /// the queue.
    pub(crate) async fn acquire(
        &self,
        until: Option<Instant>,
    ) -> Result<(BulkheadPermit, Duration), Refused> {
        if let Ok(permit) = Arc::clone(&self.inner.semaphore).try_acquire_owned() {
            return Ok((BulkheadPermit { _permit: permit }, Duration::ZERO));
        }
        let started = Instant::now();
        let waited = || Instant::now().saturating_duration_since(started);
        // An unrepresentable instant (`Duration::MAX`) means "no bound" from that side.
        let by_wait = started.checked_add(self.inner.max_wait);
        let (limit, cut) = match (by_wait, until) {
            (Some(w), Some(u)) if u <= w => (Some(u), true),
            (Some(w), _) => (Some(w), false),
            (None, u) => (u, u.is_some()),
        };
        let refused = |waited| Refused { waited, cut };
        let Some(limit) = limit else {
            let _waiting = WaitingGuard::new(&self.inner.waiting);
            return match Arc::clone(&self.inner.semaphore).acquire_owned().await {
                Ok(permit) => Ok((BulkheadPermit { _permit: permit }, waited())),
                Err(_) => Err(refused(waited())),
            };
        };
        if limit <= started {
            return Err(refused(Duration::ZERO));
        }
        let _waiting = WaitingGuard::new(&self.inner.waiting);
        let acquire = Arc::clone(&self.inner.semaphore).acquire_owned();
        match tokio::time::timeout_at(limit, acquire).await {
            Ok(Ok(permit)) => Ok((BulkheadPermit { _permit: permit }, waited())),
            // The semaphore is never closed; treat it like a timeout if it were.
            Ok(Err(_)) | Err(_) => Err(refused(waited())),
        }
    }
}

/// No permit came free in time: how long the attempt waited, and whether the attempt's
/// own end (`cut`), rather than the bulkhead's maximum wait, ended the wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refused {
    pub(crate) waited: Duration,
    pub(crate) cut: bool,
}

struct WaitingGuard<'a>(&'a AtomicUsize);

impl<'a> WaitingGuard<'a> {
    fn new(counter: &'a AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        WaitingGuard(counter)
    }
}

impl Drop for WaitingGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
