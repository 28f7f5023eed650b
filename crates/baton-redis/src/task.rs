//! The backend's task: sends what the breaker's callers queued, resyncs, listens for
//! published transitions, and adopts the replies, newest generation only.

use std::sync::Arc;

use baton_graph::breaker::TransitionReason;
use baton_graph::shared::SharedView;
use futures_util::StreamExt;
use redis::RedisError;
use tokio::time::Instant;

use crate::backend::{Inner, Pending};
use crate::op::{Op, ProbeResult};
use crate::reply::Reply;

/// The most batches that wait for Redis's acknowledgement.
pub(crate) const MAX_PENDING: usize = 64;

/// Runs until the breaker is dropped.
pub(crate) async fn run(inner: Arc<Inner>) {
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

    /// Moves the outcomes batched since the last round to the batches to send. At most
    /// [`MAX_PENDING`] batches wait: beyond, the outcomes join the last batch not yet sent
    /// (only the first one may be in flight), and batches of an older shared generation
    /// (which Redis ignores) are dropped.
    pub(crate) fn stage(&self) {
        let mut q = self.lock();
        if q.batch.calls == 0 || q.batch_local != q.local {
            return;
        }
        let counts = std::mem::take(&mut q.batch);
        let generation = q.remote;
        if q.pending.len() >= MAX_PENDING {
            if let Some(back) = q.pending.back_mut().filter(|b| b.generation == generation) {
                back.counts.merge(counts);
                return;
            }
            q.pending.retain(|p| p.generation == generation);
        }
        q.last_batch += 1;
        let pending = Pending {
            batch: q.last_batch,
            generation,
            counts,
        };
        q.pending.push_back(pending);
    }

    /// One round: a resync after a loss, a quorum trip, the batches, probe results, lost
    /// probe requests, a probe request, a sync. Stops at the first call Redis does not
    /// answer; what was not acknowledged stays queued for the next round.
    async fn step(&self) {
        self.stage();
        if !self.lock().healthy && !self.answered(self.call(&Op::Sync).await) {
            return;
        }
        if std::mem::take(&mut self.lock().trip) {
            let generation = self.lock().remote;
            let trip = Op::Trip {
                generation,
                replica: &self.replica,
            };
            if !self.answered(self.call(&trip).await) {
                self.lock().trip = true;
                return;
            }
        }
        while let Some(p) = self.front(|q| q.pending.front().copied()) {
            let op = Op::Record {
                generation: p.generation,
                replica: &self.replica,
                batch: p.batch,
                counts: p.counts,
            };
            if !self.answered(self.call(&op).await) {
                return;
            }
            self.lock().pending.pop_front();
        }
        while let Some(op) = self.front(|q| q.results.front().cloned()) {
            if !self.answered(self.call(&op).await) {
                return;
            }
            self.lock().results.pop_front();
        }
        while let Some(request) = self.front(|q| q.orphans.front().copied()) {
            let owner = self.owner(request);
            if !self.answered(self.call(&Op::Disown { owner: &owner }).await) {
                return;
            }
            self.lock().orphans.pop_front();
        }
        if std::mem::take(&mut self.lock().want_probe) && !self.request_probe().await {
            return;
        }
        if std::mem::take(&mut self.lock().sync) {
            self.answered(self.call(&Op::Sync).await);
        }
    }

    /// Reads the queue, and unlocks it at once.
    fn front<T>(&self, f: impl FnOnce(&crate::backend::Queue) -> T) -> T {
        f(&self.lock())
    }

    /// The owner a probe request's slot names.
    fn owner(&self, request: u64) -> String {
        format!("{}:{request}", self.replica)
    }

    /// Asks for a probe slot, valid only until this call's own timeout; a request whose
    /// answer is lost is disowned once Redis answers again.
    async fn request_probe(&self) -> bool {
        let now = Instant::now();
        let (request, not_after_ms, slot_until_ms, slot_ms) = {
            let mut q = self.lock();
            let until = q.want_until.take();
            // Nobody waits for a probe past its caller's attempt deadline: ask for none.
            let slot_ms = match until {
                Some(until) if until <= now => return true,
                Some(until) => ms(until - now).max(1),
                None => 0,
            };
            q.last_request += 1;
            let timeout = ms(self.options.timeout);
            // Redis's clock now, as last read.
            let redis_now = q
                .clock
                .map(|(at, redis_ms)| redis_ms.saturating_add(ms(now - at)));
            let not_after = redis_now.map_or(0, |n| {
                let bound = n.saturating_add(timeout);
                if slot_ms > 0 {
                    bound.min(n.saturating_add(slot_ms))
                } else {
                    bound
                }
            });
            let slot_until = match redis_now {
                Some(n) if slot_ms > 0 => n.saturating_add(slot_ms),
                _ => 0,
            };
            (q.last_request, not_after, slot_until, slot_ms)
        };
        let owner = self.owner(request);
        let reply = self
            .call(&Op::Probe {
                owner: &owner,
                not_after_ms,
                slot_until_ms,
                slot_ms,
            })
            .await;
        if reply.is_err() {
            self.lock().orphans.push_back(request);
        }
        self.answered(reply)
    }

    /// Runs the script for `op` within the timeout, storing the rules first when the
    /// server does not hold them (this backend's first call, or a server that lost them).
    pub(crate) async fn call(&self, op: &Op<'_>) -> Result<Reply, RedisError> {
        if !self.lock().configured {
            self.configure().await?;
        }
        let reply = self.invoke(op).await?;
        if reply.configured {
            return Ok(reply);
        }
        self.configure().await?;
        self.invoke(op).await
    }

    async fn configure(&self) -> Result<(), RedisError> {
        let Some(rules) = self.rules.get() else {
            return Err(RedisError::from((redis::ErrorKind::Client, "no rules")));
        };
        let op = Op::Configure {
            rules,
            quorum: self.options.quorum,
        };
        self.invoke(&op).await?;
        self.lock().configured = true;
        Ok(())
    }

    async fn invoke(&self, op: &Op<'_>) -> Result<Reply, RedisError> {
        let Some(keys) = self.keys.get() else {
            return Err(RedisError::from((redis::ErrorKind::Client, "not attached")));
        };
        let mut invocation = self.script.key(&keys.state);
        invocation.key(&keys.prefix).arg(op.args());
        let mut conn = self.conn.clone();
        match tokio::time::timeout(self.options.timeout, invocation.invoke_async(&mut conn)).await {
            Ok(Ok(reply)) => {
                let reply: Reply = reply;
                if !reply.configured {
                    self.lock().configured = false;
                }
                Ok(reply)
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(RedisError::from((redis::ErrorKind::Io, "timed out"))),
        }
    }

    /// Adopts a reply, or reports the shared state lost; whether Redis answered.
    pub(crate) fn answered(&self, reply: Result<Reply, RedisError>) -> bool {
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

    /// Follows `reply`: adopts a new shared generation (or, after a loss, any: a resync),
    /// and takes a granted probe slot. A reply older than the generation already adopted
    /// (a slower answer to an earlier call) is dropped. One reply is adopted at a time;
    /// the queue is not locked while adopting (listeners may call the breaker).
    fn apply(&self, reply: &Reply) {
        let Some(mirror) = self.mirror.get() else {
            return;
        };
        let _one_at_a_time = self.adopting.lock().unwrap_or_else(|e| e.into_inner());
        let (adopt, was_down) = {
            let mut q = self.lock();
            q.clock = Some((Instant::now(), reply.now_ms));
            let same_life = q.epoch == reply.epoch;
            if q.healthy && same_life && reply.generation < q.remote {
                if reply.slot > 0 {
                    q.results.push_back(Op::ProbeEnd {
                        generation: reply.generation,
                        slot: reply.slot,
                        result: ProbeResult::Released,
                    });
                }
                return;
            }
            let adopt = if q.alone {
                // Tripped alone (quorum mode): follow again once the shared state moved,
                // or once the local breaker closed again by itself.
                reply.state != baton_graph::breaker::BreakerState::Closed
                    || reply.generation != q.remote
                    || !same_life
                    || mirror
                        .local()
                        .is_some_and(|(s, _)| s == baton_graph::breaker::BreakerState::Closed)
            } else {
                !q.healthy
                    || !same_life
                    || reply.generation != q.remote
                    || reply.state == baton_graph::breaker::BreakerState::Open
            };
            (adopt, q.down)
        };
        let mut local = None;
        if adopt {
            let mut view: SharedView = reply.view();
            if was_down {
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
            if reply.generation != q.remote || !q.healthy || q.epoch != reply.epoch {
                q.slots.clear();
            }
            q.alone = false;
            q.remote = reply.generation;
            q.epoch.clone_from(&reply.epoch);
            q.local = local;
        }
        q.healthy = true;
        q.down = false;
        if reply.slot > 0 {
            if mirror.grant_probes(q.local, 1) {
                q.slots.push_back(reply.slot);
            } else {
                let generation = q.remote;
                q.results.push_back(Op::ProbeEnd {
                    generation,
                    slot: reply.slot,
                    result: ProbeResult::Released,
                });
            }
        }
    }

    /// Redis did not answer, or refused the call: the breaker judges alone until a resync.
    /// The first failure since the shared state was last followed (or since the backend
    /// was made) is a transition and a log line.
    fn lost(&self, e: &RedisError) {
        let first = {
            let mut q = self.lock();
            q.healthy = false;
            !std::mem::replace(&mut q.down, true)
        };
        if let Some(mirror) = self.mirror.get() {
            if first {
                tracing::warn!(breaker = ?mirror.name(), error = %e, "shared breaker state lost");
            }
            mirror.lose(self.options.unreachable);
        }
    }
}

#[cfg(test)]
#[path = "task_tests.rs"]
mod tests;

/// Whole milliseconds of `d`, saturating.
fn ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
