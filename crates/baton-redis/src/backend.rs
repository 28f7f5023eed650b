//! The backend of one breaker: what the breaker's callers queue (outcomes, probe requests)
//! and the task that sends it to Redis and adopts the replies.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use baton_graph::ManualControl;
use baton_graph::shared::{
    BreakerMirror, SharedBreakerState, SharedFuture, SharedOutcome, SharedRecord, SharedRules,
    SharedView,
};
use baton_graph::{BreakerState, TransitionReason};
use futures_util::StreamExt;
use redis::aio::ConnectionManager;
use redis::{RedisError, Script};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::reply::{self, PROBE_FAILURE, PROBE_RELEASED, PROBE_SUCCESS, Reply};
use crate::{RedisBreakers, RedisOptions, SCRIPT};

/// A breaker's shared state in Redis: give it to
/// [`CircuitBreakerBuilder::shared`](baton_graph::CircuitBreakerBuilder::shared). Made by
/// [`RedisBreakers::backend`]; one per breaker.
#[derive(Clone)]
pub struct RedisBreakerState {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RedisBreakerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBreakerState")
            .field("keys", &self.inner.keys.get().map(|k| &k.state))
            .finish_non_exhaustive()
    }
}

struct Inner {
    client: redis::Client,
    conn: ConnectionManager,
    options: RedisOptions,
    runtime: tokio::runtime::Handle,
    script: Script,
    mirror: OnceLock<BreakerMirror>,
    keys: OnceLock<Keys>,
    rules: OnceLock<SharedRules>,
    queue: Mutex<Queue>,
    wake: Notify,
}

/// `<prefix>:{<name>}:state`, the prefix of windows and probe slots, and the channel.
#[derive(Debug)]
struct Keys {
    state: String,
    prefix: String,
    channel: String,
}

/// What waits to be sent, and what the backend knows of the shared state.
#[derive(Debug, Default)]
struct Queue {
    /// Whether the breaker follows the shared state (the last call to Redis answered).
    healthy: bool,
    /// The shared generation and the local one it was adopted as.
    remote: u64,
    local: u64,
    /// Closed-state outcomes since the last flush.
    batch: Batch,
    /// Probe slots this process holds, oldest first, and results to send.
    slots: VecDeque<u32>,
    results: Vec<(u64, u32, u8)>,
    want_probe: bool,
    sync: bool,
    /// Whether the shared state was lost since it was last followed.
    lost: bool,
}

#[derive(Debug, Default, Clone, Copy)]
struct Batch {
    /// The local generation of its calls (perhaps adopted a moment ago, and not yet
    /// mapped to its shared one: then it waits for the next round).
    local: u64,
    any_success: bool,
    tail_failures: u32,
    failures: u32,
    calls: u32,
}

impl RedisBreakerState {
    pub(crate) fn new(redis: &RedisBreakers) -> Self {
        RedisBreakerState {
            inner: Arc::new(Inner {
                client: redis.client.clone(),
                conn: redis.conn.clone(),
                options: redis.options.clone(),
                runtime: redis.runtime.clone(),
                script: Script::new(SCRIPT),
                mirror: OnceLock::new(),
                keys: OnceLock::new(),
                rules: OnceLock::new(),
                queue: Mutex::new(Queue::default()),
                wake: Notify::new(),
            }),
        }
    }
}

impl SharedBreakerState for RedisBreakerState {
    fn check(&self, rules: &SharedRules) -> Result<(), &'static str> {
        if rules.slow_calls {
            return Err("slow_calls");
        }
        if rules.recovery_ramp {
            return Err("recovery_ramp");
        }
        if matches!(rules.failure_rate, Some((_, None, _))) {
            return Err("failure_rate.window");
        }
        let _ = self.inner.rules.set(rules.clone());
        Ok(())
    }

    fn attach(&self, mirror: BreakerMirror) {
        let name = mirror.name().unwrap_or_default();
        let base = format!("{}:{{{name}}}", self.inner.options.key_prefix);
        let _ = self.inner.keys.set(Keys {
            state: format!("{base}:state"),
            prefix: format!("{base}:"),
            channel: format!("{base}:transitions"),
        });
        let _ = self.inner.mirror.set(mirror);
        self.inner.lock().sync = true;
        let inner = Arc::clone(&self.inner);
        self.inner.runtime.spawn(run(inner));
    }

    fn record(&self, r: SharedRecord) {
        let mut q = self.inner.lock();
        if r.probe {
            if r.generation != q.local {
                return;
            }
            let Some(slot) = q.slots.pop_front() else {
                return;
            };
            let code = match r.outcome {
                SharedOutcome::Success(_) => PROBE_SUCCESS,
                SharedOutcome::Failure(_) => PROBE_FAILURE,
                _ => PROBE_RELEASED,
            };
            let remote = q.remote;
            q.results.push((remote, slot, code));
            drop(q);
            self.inner.wake.notify_one();
            return;
        }
        let b = &mut q.batch;
        if r.generation != b.local {
            if r.generation < b.local {
                return; // stale
            }
            *b = Batch {
                local: r.generation,
                ..Batch::default()
            };
        }
        b.calls += 1;
        match r.outcome {
            SharedOutcome::Failure(_) => {
                b.failures += 1;
                b.tail_failures += 1;
            }
            _ => {
                b.any_success = true;
                b.tail_failures = 0;
            }
        }
    }

    fn wants_probe(&self) {
        self.inner.lock().want_probe = true;
        self.inner.wake.notify_one();
    }

    fn control(&self, op: ManualControl) -> SharedFuture<'_, bool> {
        Box::pin(async move {
            let args = [u64::from(reply::control_code(op)), 0, 0, 0];
            match self.inner.call("ctl", 0, args).await {
                Ok(reply) => {
                    self.inner.apply(&reply);
                    true
                }
                Err(e) => {
                    self.inner.lost(&e);
                    false
                }
            }
        })
    }
}

/// The backend's task: flushes, asks, resyncs, listens; ends with the breaker.
async fn run(inner: Arc<Inner>) {
    let mut transitions = None;
    let mut last_sync = Instant::now();
    let mut last_subscribe: Option<Instant> = None;
    loop {
        let Some(mirror) = inner.mirror.get() else {
            return;
        };
        if !mirror.is_alive() {
            return;
        }
        if transitions.is_none()
            && last_subscribe.is_none_or(|t| t.elapsed() >= inner.options.resync_every)
        {
            last_subscribe = Some(Instant::now());
            transitions = inner.subscribe().await;
        }
        let healthy = inner.lock().healthy;
        let wait = if healthy {
            inner.options.flush_every
        } else {
            inner.options.resync_every
        };
        tokio::select! {
            () = inner.wake.notified() => {}
            () = tokio::time::sleep(wait) => {}
            message = next(&mut transitions) => {
                match message {
                    Some(()) => inner.lock().sync = true,
                    None => transitions = None,
                }
            }
        }
        if last_sync.elapsed() >= inner.options.resync_every {
            inner.lock().sync = true;
            last_sync = Instant::now();
        }
        inner.step().await;
    }
}

/// The next published transition; never resolves without a subscription.
async fn next(stream: &mut Option<redis::aio::PubSubStream>) -> Option<()> {
    match stream {
        Some(s) => s.next().await.map(|_| ()),
        None => std::future::pending().await,
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn subscribe(&self) -> Option<redis::aio::PubSubStream> {
        let keys = self.keys.get()?;
        let connect = async {
            let mut pubsub = self.client.get_async_pubsub().await?;
            pubsub.subscribe(&keys.channel).await?;
            Ok::<_, RedisError>(pubsub.into_on_message())
        };
        match tokio::time::timeout(self.options.timeout, connect).await {
            Ok(Ok(stream)) => Some(stream),
            _ => None,
        }
    }

    /// One round: the batch, probe results, a probe request, a sync.
    async fn step(&self) {
        let (batch, remote, results, want, sync, healthy) = {
            let mut q = self.lock();
            let batch = if q.batch.local == q.local {
                std::mem::take(&mut q.batch)
            } else {
                Batch::default() // not mapped yet (or stale, and dropped when a newer comes)
            };
            let results = std::mem::take(&mut q.results);
            let sync = q.sync || !q.healthy;
            (batch, q.remote, results, q.want_probe, sync, q.healthy)
        };
        if !healthy {
            // Resync first; what was queued before the loss is sent once it answers.
            match self.call("sync", 0, [0; 4]).await {
                Ok(reply) => self.apply(&reply),
                Err(e) => {
                    self.requeue(batch, results);
                    self.lost(&e);
                    return;
                }
            }
        }
        if batch.calls > 0 {
            let args = [
                u64::from(batch.any_success),
                u64::from(batch.tail_failures),
                u64::from(batch.failures),
                u64::from(batch.calls),
            ];
            if !self.send(self.call("rec", remote, args).await) {
                self.requeue(batch, results);
                return;
            }
        }
        for (i, &(generation, slot, code)) in results.iter().enumerate() {
            let args = [u64::from(slot), u64::from(code), 0, 0];
            if !self.send(self.call("pres", generation, args).await) {
                self.requeue(Batch::default(), results[i..].to_vec());
                return;
            }
        }
        if want {
            self.lock().want_probe = false;
            if !self.send(self.call("probe", 0, [0; 4]).await) {
                return;
            }
        }
        if sync && healthy {
            self.lock().sync = false;
            self.send(self.call("sync", 0, [0; 4]).await);
        }
    }

    /// Applies a reply, or marks the shared state lost; whether Redis answered.
    fn send(&self, reply: Result<Reply, RedisError>) -> bool {
        match reply {
            Ok(reply) => {
                self.apply(&reply);
                true
            }
            Err(e) => {
                self.lost(&e);
                false
            }
        }
    }

    fn requeue(&self, batch: Batch, results: Vec<(u64, u32, u8)>) {
        let mut q = self.lock();
        let b = &mut q.batch;
        if batch.calls > 0 && (b.calls == 0 || b.local == batch.local) {
            b.local = batch.local;
            b.any_success |= batch.any_success;
            b.failures += batch.failures;
            b.calls += batch.calls;
            if b.calls == batch.calls {
                b.tail_failures = batch.tail_failures;
            }
        }
        q.results.extend(results);
    }

    /// Runs the script once, within the timeout.
    async fn call(&self, op: &str, generation: u64, a: [u64; 4]) -> Result<Reply, RedisError> {
        let (Some(keys), Some(rules)) = (self.keys.get(), self.rules.get()) else {
            return Err(RedisError::from((redis::ErrorKind::Client, "not attached")));
        };
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1);
        let (rate, window, min_calls) = match rules.failure_rate {
            Some((rate, Some(window), min)) => (rate, ms(window), min),
            _ => (0.0, 0, 0),
        };
        let (multiplier, cap) = rules.growth.unwrap_or((1.0, rules.open_duration));
        let mut invocation = self.script.key(&keys.state);
        invocation
            .key(&keys.prefix)
            .arg(op)
            .arg(generation)
            .arg(&a[..])
            .arg(rules.consecutive_failures.unwrap_or(0))
            .arg(rate)
            .arg(window)
            .arg(min_calls)
            .arg(ms(rules.open_duration))
            .arg(multiplier)
            .arg(ms(cap))
            .arg(rules.half_open_probes)
            .arg(ms(rules.half_open_max_wait))
            .arg(&keys.channel);
        let mut conn = self.conn.clone();
        match tokio::time::timeout(self.options.timeout, invocation.invoke_async(&mut conn)).await {
            Ok(reply) => reply,
            Err(_) => Err(RedisError::from((redis::ErrorKind::Io, "timed out"))),
        }
    }

    /// Follows `reply`: adopts a new shared generation (or, after a loss, any: a resync),
    /// and takes a granted probe slot. Adopts outside the queue's lock (listeners may call
    /// the breaker, which records here).
    fn apply(&self, reply: &Reply) {
        let Some(mirror) = self.mirror.get() else {
            return;
        };
        let (adopt, was_lost) = {
            let q = self.lock();
            let adopt =
                !q.healthy || reply.generation != q.remote || reply.state == BreakerState::Open;
            (adopt, q.lost)
        };
        let mut local = None;
        if adopt {
            let mut view: SharedView = reply.view();
            if was_lost {
                view.reason = TransitionReason::SharedStateResynced;
                tracing::info!(breaker = ?mirror.name(), "shared breaker state reached again");
            }
            local = mirror.adopt(view);
            if local.is_none() {
                return;
            }
        }
        let mut q = self.lock();
        if let Some(local) = local {
            if reply.generation != q.remote || !q.healthy {
                q.slots.clear();
            }
            q.healthy = true;
            q.lost = false;
            q.remote = reply.generation;
            q.local = local;
        }
        if reply.slot > 0 {
            if mirror.grant_probes(q.local, 1) {
                q.slots.push_back(reply.slot);
            } else {
                let remote = q.remote;
                q.results.push((remote, reply.slot, PROBE_RELEASED));
            }
        }
    }

    /// Redis did not answer: the breaker judges alone until a resync.
    fn lost(&self, e: &RedisError) {
        let was = {
            let mut q = self.lock();
            let was = std::mem::replace(&mut q.healthy, false);
            q.lost |= was;
            was
        };
        if let Some(mirror) = self.mirror.get() {
            if was {
                tracing::warn!(breaker = ?mirror.name(), error = %e, "shared breaker state lost");
            }
            mirror.lose(self.options.unreachable);
        }
    }
}
