//! The backend's adoption of replies, driven directly (no server: the backend's task
//! waits an hour before its first call).

use std::time::Duration;

use baton_graph::{
    CircuitBreaker,
    breaker::{BreakerState, TransitionReason},
};

use super::Reply;
use crate::{RedisBreakers, RedisOptions};

fn reply(state: BreakerState, generation: u64, reason: TransitionReason) -> Reply {
    Reply {
        state,
        generation,
        epoch: "1".to_owned(),
        reason,
        open_for: Duration::ZERO,
        slot: 0,
        now_ms: 1,
        configured: true,
    }
}

#[tokio::test]
async fn a_reply_older_than_the_adopted_generation_is_dropped() {
    let options = RedisOptions::default().resync_every(Duration::from_secs(3600));
    let redis = RedisBreakers::connect_lazy("redis://127.0.0.1:1/", options).unwrap();
    let backend = redis.backend();
    let b = CircuitBreaker::builder("stale")
        .consecutive_failures(3)
        .shared(backend.clone())
        .build()
        .unwrap();
    let inner = &backend.inner;
    inner.apply(&reply(BreakerState::Closed, 1, TransitionReason::Reset));
    assert!(b.follows_shared_state());
    inner.apply(&reply(
        BreakerState::Isolated,
        2,
        TransitionReason::Isolated,
    ));
    assert_eq!(b.state(), BreakerState::Isolated);
    // A sync sent before the isolation, answered after it.
    inner.apply(&reply(BreakerState::Closed, 1, TransitionReason::Reset));
    assert_eq!(b.state(), BreakerState::Isolated, "the older reply won");
    // A new life of the shared state (a restarted server) is adopted whatever its number.
    let mut fresh = reply(BreakerState::Closed, 0, TransitionReason::Reset);
    fresh.epoch = "2".to_owned();
    inner.apply(&fresh);
    assert_eq!(b.state(), BreakerState::Closed);
}

#[tokio::test]
async fn the_batches_waiting_for_redis_are_capped_and_lose_no_outcome() {
    let options = RedisOptions::default().resync_every(Duration::from_secs(3600));
    let redis = RedisBreakers::connect_lazy("redis://127.0.0.1:1/", options).unwrap();
    let backend = redis.backend();
    let _b = CircuitBreaker::builder("capped")
        .consecutive_failures(3)
        .shared(backend.clone())
        .build()
        .unwrap();
    let inner = &backend.inner;
    let failure = crate::op::Counts {
        any_success: false,
        tail_failures: 1,
        failures: 1,
        calls: 1,
    };
    for _ in 0..100 {
        inner.lock().batch = failure;
        inner.stage();
    }
    let q = inner.lock();
    assert_eq!(q.pending.len(), super::MAX_PENDING);
    let calls: u32 = q.pending.iter().map(|p| p.counts.calls).sum();
    assert_eq!(calls, 100, "every outcome is still queued");
    let last = q.pending.back().map(|p| p.counts);
    assert_eq!(last.map(|c| c.tail_failures), Some(100 - 63));
}
