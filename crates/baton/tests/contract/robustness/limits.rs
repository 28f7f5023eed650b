//! Counts at their limits: every count a policy accepts runs without an overflow, a wrap or
//! a panic, at its largest accepted value; past it, building fails naming the value.

use std::time::Duration;

use baton_graph::{
    Backoff, BoxError, Bulkhead, CircuitBreaker, Graph, NodeError, Outcome, RateLimiter, Retry,
    breaker::BreakerWindow, retry::RetryBudget,
};

use crate::ms;

/// `Retry::new(u32::MAX)`, a retry budget of `u32::MAX` retries per second, a breaker of
/// `u32::MAX` consecutive failures, 65 535 probes and a window of a million calls, a
/// bulkhead of `Bulkhead::MAX_CONCURRENT` permits and a limiter of `u32::MAX` permits and
/// burst: each builds and runs as any other, ending as its settings say.
#[tokio::test(start_paused = true)]
async fn every_count_at_its_limit_runs_without_overflow() {
    let breaker = CircuitBreaker::builder("wide")
        .consecutive_failures(u32::MAX)
        .half_open_probes(65_535)
        .failure_rate(1.0, BreakerWindow::Count(1_000_000), 1_000_000)
        .build()
        .unwrap();
    let budget = RetryBudget::with("wide", Duration::from_secs(10), u32::MAX, 1000.0);
    let limiter = RateLimiter::new("wide", u32::MAX, Duration::from_secs(10)).burst(u32::MAX);
    let bulkhead = Bulkhead::new("wide", Bulkhead::MAX_CONCURRENT, ms(1));
    let mut g = Graph::<()>::builder();
    let forever = g
        .node("forever")
        .budget(ms(50))
        .retry(Retry::new(u32::MAX).backoff(Backoff::constant(ms(1))))
        .breaker(&breaker)
        .task(|_ctx, ()| async { Err::<u32, BoxError>("503".into()) });
    let budgeted = g
        .node("budgeted")
        .retry(
            Retry::new(3)
                .backoff(Backoff::constant(ms(1)))
                .budget(budget),
        )
        .rate_limit(&limiter)
        .bulkhead(&bulkhead)
        .task(|_ctx, ()| async { Err::<u32, BoxError>("503".into()) });
    let passing = g
        .node("passing")
        .breaker(&breaker)
        .rate_limit(&limiter)
        .bulkhead(&bulkhead)
        .task(|_ctx, ()| async { Ok::<_, BoxError>(1_u32) });
    let report = g.build().unwrap().run(()).await.unwrap();
    let n = report.node(forever).unwrap();
    assert_eq!(n.outcome(), Outcome::Failed);
    assert!(
        matches!(n.error(), Some(NodeError::GaveUp { attempts, .. }) if *attempts > 10),
        "{n:?}"
    );
    let n = report.node(budgeted).unwrap();
    assert_eq!((n.outcome(), n.attempts()), (Outcome::Failed, 3));
    assert_eq!(report.get(passing), Some(&1));
    assert_eq!(breaker.state(), baton_graph::breaker::BreakerState::Closed);
}
