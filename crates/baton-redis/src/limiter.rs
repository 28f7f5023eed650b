//! A rate limiter shared by the fleet: every permit is one atomic script (GCRA on Redis's
//! clock), and a replica that cannot reach Redis falls back as configured.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use baton_graph::RateLimiter;
use baton_graph::shared::{SharedFuture, SharedLimit, SharedRateLimit};
use redis::aio::ConnectionManager;
use redis::{FromRedisValue, ParsingError, RedisError, Script, Value};
use tokio::time::Instant;

use crate::{RedisBreakers, RedisOptions};

/// The Lua script that makes every decision of a fleet rate limiter.
pub const LIMIT_SCRIPT: &str = include_str!("limit.lua");

/// What a replica's fleet rate limiter does while Redis cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LimitFallback {
    /// A local limiter at this replica's share of the rate: the rate divided by the number
    /// of replicas given (and the burst too, at least 1).
    Share(NonZeroU32),
    /// Fail open: every request passes.
    Admit,
    /// Fail closed: every request is refused (its retry-after: the resync interval).
    Reject,
}

/// A fleet rate limiter's change between deciding with Redis and falling back.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimitTransition {
    /// The limiter's name.
    pub limiter: String,
    /// `true`: Redis answers again and decides; `false`: it was lost, the fallback decides.
    pub shared: bool,
    /// The fallback configured.
    pub fallback: LimitFallback,
}

type Listener = Arc<dyn Fn(&LimitTransition) + Send + Sync>;

/// The backend of a rate limiter shared by the fleet: give it to
/// [`RateLimiter::shared`]. Made by [`RedisBreakers::rate_limit`]; one per limiter.
///
/// [`RateLimiter::acquire`] (what nodes and pipelines call) makes one script call per
/// permit, within [`timeout`](RedisOptions::timeout). [`RateLimiter::try_acquire`] cannot
/// wait on Redis: it decides with the replica's share of the rate (or `Admit`/`Reject` as
/// configured) and counts the permit in Redis in the background.
#[derive(Clone)]
pub struct RedisRateLimit {
    inner: Arc<LimitInner>,
}

struct LimitInner {
    conn: ConnectionManager,
    options: RedisOptions,
    runtime: tokio::runtime::Handle,
    script: Script,
    fallback: LimitFallback,
    setup: Mutex<Option<Arc<Setup>>>,
    healthy: AtomicBool,
    retrying: AtomicBool,
    listeners: Mutex<Vec<Listener>>,
}

/// What `attach` made of the limiter's settings.
struct Setup {
    name: String,
    key: String,
    interval_us: u64,
    tolerance_us: u64,
    /// The local limiter at this replica's share.
    local: RateLimiter,
}

impl std::fmt::Debug for RedisRateLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisRateLimit")
            .field("fallback", &self.inner.fallback)
            .field("shared", &self.inner.healthy.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// One call of the limiter script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LimitOp {
    /// Reserves one permit that conforms within `max_wait`.
    Take { max_wait: Duration },
    /// Counts permits granted without asking (by `try_acquire`).
    Consume { permits: u32 },
    /// Reads the clock only: is Redis there?
    Peek,
}

/// The script's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Decision {
    granted: bool,
    /// Until the permit conforms (granted), or would (refused).
    wait: Duration,
}

impl FromRedisValue for Decision {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let items: Vec<Value> = FromRedisValue::from_redis_value(v)?;
        let mut d = Decision {
            granted: false,
            wait: Duration::ZERO,
        };
        let mut it = items.into_iter();
        while let (Some(name), Some(value)) = (it.next(), it.next()) {
            let name: String = FromRedisValue::from_redis_value(name)?;
            let n: u64 = FromRedisValue::from_redis_value(value)?;
            match name.as_str() {
                "granted" => d.granted = n == 1,
                "wait_us" => d.wait = Duration::from_micros(n),
                _ => {}
            }
        }
        Ok(d)
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl RedisBreakers {
    /// A backend for one rate limiter shared by every replica: give it to
    /// [`RateLimiter::shared`]. Every limiter with the same name (and key prefix) on this
    /// server shares one limit.
    ///
    /// ```no_run
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use baton_graph::RateLimiter;
    /// use baton_redis::{LimitFallback, RedisBreakers, RedisOptions};
    ///
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// let redis = RedisBreakers::connect("redis://127.0.0.1:6379/", RedisOptions::default()).await?;
    /// // 100 calls per second for the whole fleet of 4; 25 per second each without Redis.
    /// let share = LimitFallback::Share(NonZeroU32::new(4).unwrap());
    /// let quota = RateLimiter::new("inventory", 100, Duration::from_secs(1))
    ///     .burst(1)
    ///     .shared(redis.rate_limit(share));
    /// quota.acquire(None).await.ok();
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn rate_limit(&self, fallback: LimitFallback) -> RedisRateLimit {
        RedisRateLimit {
            inner: Arc::new(LimitInner {
                conn: self.conn.clone(),
                options: self.options.clone(),
                runtime: self.runtime.clone(),
                script: Script::new(LIMIT_SCRIPT),
                fallback,
                setup: Mutex::new(None),
                healthy: AtomicBool::new(true),
                retrying: AtomicBool::new(false),
                listeners: Mutex::new(Vec::new()),
            }),
        }
    }
}

impl RedisRateLimit {
    /// Calls `f` on every change between deciding with Redis and falling back (logged
    /// too: a warning when Redis is lost, an information line when it answers again).
    pub fn on_transition(&self, f: impl Fn(&LimitTransition) + Send + Sync + 'static) {
        lock(&self.inner.listeners).push(Arc::new(f));
    }

    /// Whether Redis decides (it answered the last call).
    #[must_use]
    pub fn is_shared(&self) -> bool {
        self.inner.healthy.load(Ordering::Acquire)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl SharedRateLimit for RedisRateLimit {
    fn attach(&self, limit: SharedLimit) {
        let per_us = micros(limit.per);
        let interval_us = match limit.permits {
            0 => u64::MAX / 4,
            n => (per_us / u64::from(n)).max(1),
        };
        let replicas = match self.inner.fallback {
            LimitFallback::Share(n) => n.get(),
            _ => 1,
        };
        let local = RateLimiter::new(
            limit.name.clone(),
            limit.permits,
            limit.per.saturating_mul(replicas),
        )
        .burst((limit.burst / replicas).max(1))
        .max_wait(Duration::from_secs(86_400));
        let setup = Setup {
            key: format!("{}:{{{}}}:rate", self.inner.options.key_prefix, limit.name),
            name: limit.name,
            interval_us,
            tolerance_us: interval_us.saturating_mul(u64::from(limit.burst.saturating_sub(1))),
            local,
        };
        *lock(&self.inner.setup) = Some(Arc::new(setup));
    }

    fn reserve(&self, max_wait: Duration) -> SharedFuture<'_, Result<Duration, Duration>> {
        Box::pin(async move {
            let Some(setup) = self.inner.setup() else {
                return Err(Duration::MAX);
            };
            if self.inner.healthy.load(Ordering::Acquire) {
                match self.inner.call(&setup, LimitOp::Take { max_wait }).await {
                    Ok(d) if d.granted => return Ok(d.wait),
                    Ok(d) => return Err(d.wait),
                    Err(e) => self.inner.lost(&setup, &e),
                }
            }
            self.inner.fall_back(&setup, max_wait).await
        })
    }

    fn try_reserve(&self) -> Result<(), Duration> {
        let Some(setup) = self.inner.setup() else {
            return Err(Duration::MAX);
        };
        if !self.inner.healthy.load(Ordering::Acquire) {
            return match self.inner.fallback {
                LimitFallback::Share(_) => setup.local.try_acquire(),
                LimitFallback::Admit => Ok(()),
                LimitFallback::Reject => Err(self.inner.options.resync_every),
            };
        }
        setup.local.try_acquire()?;
        let inner = Arc::clone(&self.inner);
        self.inner.runtime.spawn(async move {
            if let Err(e) = inner.call(&setup, LimitOp::Consume { permits: 1 }).await {
                inner.lost(&setup, &e);
            }
        });
        Ok(())
    }
}

impl LimitInner {
    fn setup(&self) -> Option<Arc<Setup>> {
        lock(&self.setup).clone()
    }

    async fn call(&self, setup: &Setup, op: LimitOp) -> Result<Decision, RedisError> {
        let mut args: Vec<String> = Vec::with_capacity(9);
        let mut put = |k: &str, v: u64| {
            args.push(k.to_owned());
            args.push(v.to_string());
        };
        let name = match op {
            LimitOp::Take { max_wait } => {
                put("max_wait_us", micros(max_wait));
                "take"
            }
            LimitOp::Consume { permits } => {
                put("permits", u64::from(permits));
                "consume"
            }
            LimitOp::Peek => "peek",
        };
        put("interval_us", setup.interval_us);
        put("tolerance_us", setup.tolerance_us);
        let mut invocation = self.script.key(&setup.key);
        invocation.arg(name).arg(args);
        let mut conn = self.conn.clone();
        match tokio::time::timeout(self.options.timeout, invocation.invoke_async(&mut conn)).await {
            Ok(reply) => reply,
            Err(_) => Err(RedisError::from((redis::ErrorKind::Io, "timed out"))),
        }
    }

    /// Decides without Redis, as the fallback says.
    async fn fall_back(&self, setup: &Setup, max_wait: Duration) -> Result<Duration, Duration> {
        match self.fallback {
            LimitFallback::Share(_) => {
                let until = Instant::now()
                    .checked_add(max_wait)
                    .and_then(|u| u.checked_add(Duration::from_nanos(1)));
                setup.local.acquire(until).await.map(|_| Duration::ZERO)
            }
            LimitFallback::Admit => Ok(Duration::ZERO),
            LimitFallback::Reject => Err(self.options.resync_every),
        }
    }

    /// Redis did not answer: the fallback decides until a retry finds it again.
    fn lost(self: &Arc<Self>, setup: &Setup, e: &RedisError) {
        if self.healthy.swap(false, Ordering::AcqRel) {
            tracing::warn!(limiter = %setup.name, error = %e, "fleet rate limit lost, decided locally");
            self.notify(&setup.name, false);
        }
        if !self.retrying.swap(true, Ordering::AcqRel) {
            let weak = Arc::downgrade(self);
            self.runtime.spawn(retry(weak, self.options.resync_every));
        }
    }

    /// Tells the listeners, and sets the `baton_rate_limit_shared_state_reached` gauge
    /// (label `limiter`; 1 while Redis decides, 0 while the fallback does).
    fn notify(&self, limiter: &str, shared: bool) {
        #[cfg(feature = "metrics")]
        metrics::gauge!("baton_rate_limit_shared_state_reached", "limiter" => limiter.to_owned())
            .set(if shared { 1.0 } else { 0.0 });
        let t = LimitTransition {
            limiter: limiter.to_owned(),
            shared,
            fallback: self.fallback,
        };
        let listeners = lock(&self.listeners).clone();
        for f in listeners {
            f(&t);
        }
    }
}

/// Asks Redis every `every` until it answers (or the limiter is dropped).
async fn retry(inner: Weak<LimitInner>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let Some(setup) = inner.setup() else {
            continue;
        };
        if inner.call(&setup, LimitOp::Peek).await.is_ok() {
            inner.retrying.store(false, Ordering::Release);
            inner.healthy.store(true, Ordering::Release);
            tracing::info!(limiter = %setup.name, "fleet rate limit reached again");
            inner.notify(&setup.name, true);
            return;
        }
    }
}
