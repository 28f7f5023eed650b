//! The backend of one breaker: what the breaker's callers queue (outcomes, probe requests)
//! for the backend's task (`task.rs`) to send to Redis.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use baton_graph::breaker::ManualControl;
use baton_graph::shared::{
    BreakerMirror, SharedBreakerState, SharedFuture, SharedOutcome, SharedRecord, SharedRules,
};
use redis::Script;
use redis::aio::ConnectionManager;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::op::{Counts, Op, ProbeResult};
use crate::{RedisBreakers, RedisOptions, SCRIPT};

/// A breaker's shared state in Redis: give it to
/// [`CircuitBreakerBuilder::shared`](baton_graph::breaker::CircuitBreakerBuilder::shared). Made by
/// [`RedisBreakers::backend`]; one per breaker.
#[derive(Clone)]
pub struct RedisBreakerState {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for RedisBreakerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBreakerState")
            .field("keys", &self.inner.keys.get().map(|k| &k.state))
            .finish_non_exhaustive()
    }
}

pub(crate) struct Inner {
    pub(crate) client: redis::Client,
    pub(crate) conn: ConnectionManager,
    pub(crate) options: RedisOptions,
    runtime: tokio::runtime::Handle,
    pub(crate) script: Script,
    pub(crate) mirror: OnceLock<BreakerMirror>,
    pub(crate) keys: OnceLock<Keys>,
    pub(crate) rules: OnceLock<SharedRules>,
    queue: Mutex<Queue>,
    pub(crate) wake: Notify,
    /// Held while a reply is adopted: one at a time, so that an older one never follows
    /// a newer one.
    pub(crate) adopting: Mutex<()>,
    /// This replica's id: in a quorum's set of tripped replicas, in its batches'
    /// acknowledgements, and in the probe slots it owns.
    pub(crate) replica: String,
}

/// `<prefix>:{<name>}:state`, and the prefix of the breaker's other keys.
#[derive(Debug)]
pub(crate) struct Keys {
    pub(crate) state: String,
    pub(crate) prefix: String,
    pub(crate) channel: String,
}

/// What waits to be sent, and what the backend knows of the shared state.
#[derive(Debug, Default)]
pub(crate) struct Queue {
    /// Whether the breaker follows the shared state (the last call to Redis answered).
    pub(crate) healthy: bool,
    /// Whether the loss of the shared state was reported (a transition, a log line) and
    /// not yet followed by a resync.
    pub(crate) down: bool,
    /// The shared generation and epoch last adopted, and the local generation they map to.
    pub(crate) remote: u64,
    pub(crate) epoch: String,
    pub(crate) local: u64,
    /// Closed-state outcomes since the last flush, of local generation `batch_local`.
    pub(crate) batch: Counts,
    pub(crate) batch_local: u64,
    /// Batches taken from `batch`, kept until Redis acknowledges them, oldest first.
    pub(crate) pending: VecDeque<Pending>,
    pub(crate) last_batch: u64,
    /// Probe slots this process holds, oldest first, and results to send.
    pub(crate) slots: VecDeque<u32>,
    pub(crate) results: VecDeque<Op<'static>>,
    pub(crate) want_probe: bool,
    /// The latest attempt deadline of the callers that asked for a probe (none: unbounded).
    pub(crate) want_until: Option<Instant>,
    /// Probe requests whose answers were lost: each may hold a slot to free.
    pub(crate) orphans: VecDeque<u64>,
    pub(crate) last_request: u64,
    pub(crate) sync: bool,
    /// Whether the server holds the breaker's rules, as far as the backend knows.
    pub(crate) configured: bool,
    /// Quorum mode: the breaker tripped by its own counts and judges alone; and whether
    /// the trip is yet to be reported.
    pub(crate) alone: bool,
    pub(crate) trip: bool,
    /// Redis's clock (ms) as last read, and when.
    pub(crate) clock: Option<(Instant, u64)>,
}

/// A batch of outcomes waiting for Redis to acknowledge it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pending {
    pub(crate) batch: u64,
    pub(crate) generation: u64,
    pub(crate) counts: Counts,
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
                adopting: Mutex::new(()),
                replica: crate::replica_id(),
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
        self.inner.runtime.spawn(crate::task::run(inner));
    }

    fn trips_locally(&self) -> bool {
        self.inner.options.quorum.is_some()
    }

    fn tripped(&self) {
        let mut q = self.inner.lock();
        q.alone = true;
        q.trip = true;
        drop(q);
        self.inner.wake.notify_one();
    }

    fn record(&self, r: SharedRecord) {
        if !r.probe && self.inner.options.quorum.is_some() {
            return; // each replica trips by its own counts: nothing to pool
        }
        let mut q = self.inner.lock();
        if r.probe {
            if r.generation != q.local {
                return;
            }
            let Some(slot) = q.slots.pop_front() else {
                return;
            };
            let result = match r.outcome {
                SharedOutcome::Success(_) => ProbeResult::Succeeded,
                SharedOutcome::Failure(_) => ProbeResult::Failed,
                _ => ProbeResult::Released,
            };
            let generation = q.remote;
            q.results.push_back(Op::ProbeEnd {
                generation,
                slot,
                result,
            });
            drop(q);
            self.inner.wake.notify_one();
            return;
        }
        if r.generation != q.batch_local {
            if r.generation < q.batch_local {
                return; // stale
            }
            q.batch_local = r.generation;
            q.batch = Counts::default();
        }
        let b = &mut q.batch;
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

    fn wants_probe(&self, until: Option<Instant>) {
        let mut q = self.inner.lock();
        // The slot serves whichever asker still waits: the latest deadline, or none.
        q.want_until = match (q.want_probe, q.want_until, until) {
            (false, _, until) => until,
            (true, Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
        q.want_probe = true;
        drop(q);
        self.inner.wake.notify_one();
    }

    fn control(&self, op: ManualControl) -> SharedFuture<'_, bool> {
        Box::pin(async move {
            let reply = self.inner.call(&Op::Control(op)).await;
            self.inner.answered(reply)
        })
    }
}

impl Inner {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}
