//! Bulkhead: a concurrency limit shared by the nodes that call one downstream, with a bounded
//! wait for a permit.
//!
//! The permit is taken per attempt and held until the attempt has really stopped: an async
//! attempt releases it when its future completes or is dropped; a blocking attempt that timed
//! out keeps it until its closure returns, because the thread is still calling the
//! downstream. A waiter that gives up never leaks a permit, whether its wait bound elapsed,
//! its deadline passed or its run was cancelled: tokio's semaphore removes a dropped waiter
//! from its queue.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;

use crate::policy::InvalidSetting;

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
    /// The limit; written under `resize`, read lock-free.
    max_concurrent: AtomicUsize,
    /// The maximum wait in nanoseconds; `u64::MAX` for no bound.
    max_wait: AtomicU64,
    /// The free permits. A permit taken is forgotten at once and given back by
    /// `BulkheadPermit`'s drop, so that a permit is one `Arc` of the bulkhead.
    semaphore: Semaphore,
    waiting: AtomicUsize,
    /// Permits still to take out of use after a shrink below the permits in use: each one
    /// released while this is above zero is not given back.
    owed: AtomicUsize,
    /// Serializes changes of the limit.
    resize: Mutex<()>,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn from_nanos(n: u64) -> Duration {
    if n == u64::MAX {
        Duration::MAX
    } else {
        Duration::from_nanos(n)
    }
}

impl fmt::Debug for Bulkhead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bulkhead")
            .field("name", &self.inner.name)
            .field("max_concurrent", &self.max_concurrent())
            .field("max_wait", &self.max_wait())
            .field("available", &self.inner.semaphore.available_permits())
            .field("waiting", &self.waiting())
            .finish()
    }
}

/// A permit of a [`Bulkhead`], given back on drop. When the bulkhead was shrunk below the
/// permits in use, the drop takes it out of use instead.
#[derive(Debug)]
pub(crate) struct BulkheadPermit {
    inner: Arc<Inner>,
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl Drop for BulkheadPermit {
    fn drop(&mut self) {
        let owed = &self.inner.owed;
        let paid = owed.load(Ordering::Relaxed) != 0
            && owed
                .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok();
        if !paid {
            self.inner.semaphore.add_permits(1);
        }
    }
}

impl Bulkhead {
    /// A bulkhead called `name` that lets at most `max_concurrent` attempts run at once. An
    /// attempt waits at most `max_wait` for a permit, and never past its cut, then fails
    /// with [`NodeError::BulkheadFull`](crate::NodeError::BulkheadFull). Permits are granted
    /// in the order attempts ask for them. `Duration::ZERO` means "do not wait".
    ///
    /// A `max_concurrent` of 0, or above [`Bulkhead::MAX_CONCURRENT`], could never work: a
    /// graph or pipeline given such a bulkhead fails to build with
    /// [`BuildError::InvalidPolicy`](crate::BuildError::InvalidPolicy).
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
                max_concurrent: AtomicUsize::new(max_concurrent),
                max_wait: AtomicU64::new(nanos(max_wait)),
                semaphore: Semaphore::new(max_concurrent.min(Self::MAX_CONCURRENT)),
                waiting: AtomicUsize::new(0),
                owed: AtomicUsize::new(0),
                resize: Mutex::new(()),
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
        Self::check(&self.inner.name, self.max_concurrent())
    }

    /// [`validate`](Self::validate) for a bulkhead `name` of `n` permits, before it exists.
    pub(crate) fn check(name: &str, n: usize) -> Result<(), String> {
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
        self.inner.max_concurrent.load(Ordering::Relaxed)
    }

    /// How long an attempt waits at most for a permit.
    #[must_use]
    pub fn max_wait(&self) -> Duration {
        from_nanos(self.inner.max_wait.load(Ordering::Relaxed))
    }

    /// Changes the limit and the maximum wait in place, for every node, graph and run that
    /// holds the bulkhead; returns whether anything changed.
    ///
    /// Attempts running keep their permits: a bulkhead shrunk below the permits in use
    /// takes the surplus out of use as they are released, so new attempts are admitted
    /// only once fewer than the new limit run. Raised, the new permits are free at once,
    /// to the attempts waiting first. Waits under way keep the bound they started with.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::Bulkhead;
    ///
    /// let db = Bulkhead::new("db", 4, Duration::ZERO);
    /// assert!(db.reconfigure(2, Duration::from_millis(50))?);
    /// assert_eq!((db.available(), db.max_wait()), (2, Duration::from_millis(50)));
    /// # Ok::<(), baton_graph::limit::InvalidSetting>(())
    /// ```
    ///
    /// # Errors
    /// [`InvalidSetting`] for a limit of 0 or above [`MAX_CONCURRENT`](Self::MAX_CONCURRENT);
    /// the bulkhead is then unchanged.
    pub fn reconfigure(
        &self,
        max_concurrent: usize,
        max_wait: Duration,
    ) -> Result<bool, InvalidSetting> {
        let i = &self.inner;
        Self::check(&i.name, max_concurrent).map_err(InvalidSetting::new)?;
        let _resize = i.resize.lock().unwrap_or_else(PoisonError::into_inner);
        let wait = i.max_wait.swap(nanos(max_wait), Ordering::Relaxed) != nanos(max_wait);
        // The semaphore holds at most `MAX_CONCURRENT` of an invalid larger limit.
        let old = i
            .max_concurrent
            .swap(max_concurrent, Ordering::Relaxed)
            .min(Self::MAX_CONCURRENT);
        if max_concurrent > old {
            let mut add = max_concurrent - old;
            // Cancel a debt first: those permits are still in use.
            let _ = i
                .owed
                .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |owed| {
                    let paid = owed.min(max_concurrent - old);
                    add = max_concurrent - old - paid;
                    Some(owed - paid)
                });
            i.semaphore.add_permits(add);
        } else if max_concurrent < old {
            let cut = old - max_concurrent;
            let forgotten = i.semaphore.forget_permits(cut);
            i.owed.fetch_add(cut - forgotten, Ordering::AcqRel);
        }
        Ok(wait || old != max_concurrent)
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

    /// Whether `self` and `other` are the same bulkhead, that is clones of one handle.
    #[must_use]
    pub fn same_as(&self, other: &Bulkhead) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Waits for a permit until `max_wait` or `until`, the end of the attempt that asks,
    /// whichever is first; with the permit, how long it waited. Permits are granted in the
    /// order they were asked for. Cancel-safe: dropping the future gives up the place in
    /// the queue.
    pub(crate) async fn acquire(
        &self,
        until: Option<Instant>,
    ) -> Result<(BulkheadPermit, Duration), Refused> {
        let permit = |p: SemaphorePermit<'_>| {
            p.forget();
            BulkheadPermit {
                inner: Arc::clone(&self.inner),
            }
        };
        if let Ok(p) = self.inner.semaphore.try_acquire() {
            return Ok((permit(p), Duration::ZERO));
        }
        let started = Instant::now();
        let waited = || Instant::now().saturating_duration_since(started);
        // An unrepresentable instant, `Duration::MAX`, means "no bound" from that side.
        let by_wait = started.checked_add(self.max_wait());
        let (limit, cut) = match (by_wait, until) {
            (Some(w), Some(u)) if u <= w => (Some(u), true),
            (Some(w), _) => (Some(w), false),
            (None, u) => (u, u.is_some()),
        };
        let refused = |waited| Refused { waited, cut };
        let Some(limit) = limit else {
            let _waiting = WaitingGuard::new(&self.inner.waiting);
            return match self.inner.semaphore.acquire().await {
                Ok(p) => Ok((permit(p), waited())),
                Err(_) => Err(refused(waited())),
            };
        };
        if limit <= started {
            return Err(refused(Duration::ZERO));
        }
        let _waiting = WaitingGuard::new(&self.inner.waiting);
        let acquire = self.inner.semaphore.acquire();
        match tokio::time::timeout_at(limit, acquire).await {
            Ok(Ok(p)) => Ok((permit(p), waited())),
            // The semaphore is never closed; treat it like a timeout if it were.
            Ok(Err(_)) | Err(_) => Err(refused(waited())),
        }
    }
}

/// No permit came free in time: how long the attempt waited, and whether the attempt's
/// own end, `cut`, rather than the bulkhead's maximum wait, ended the wait.
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
