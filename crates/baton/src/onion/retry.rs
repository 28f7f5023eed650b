//! [`Retry`]: run an attempt again after a backoff, inside the deadline.
//!
//! Waiting between attempts is a tokio timer, so it holds no thread: with one worker
//! thread, two nodes that each fail twice with a 1 s backoff finish in about 2 s, not 4 s.
//! The retry layer sits outside the per-attempt timeout, so each attempt gets its own, and
//! inside the circuit breaker, so a series counts once. When to stop is decided in
//! `policy::retry`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::NodeError;
use crate::policy::{Backoff, DownstreamDeadlineExceeded, RetryBudget};
use crate::util::same_opt;

/// Which errors a retry series retries.
pub(crate) type RetryPredicate = Arc<dyn Fn(&NodeError) -> bool + Send + Sync>;

/// The delay an error asks for before the next attempt, if it asks for one.
pub(crate) type DelayHint = Arc<dyn Fn(&NodeError) -> Option<Duration> + Send + Sync>;

/// A retry policy: how many attempts, how long to wait between them, which errors to retry,
/// and an optional per-downstream [`RetryBudget`].
///
/// # Defaults
/// - attempts: 3, one attempt and two retries;
/// - backoff: exponential from 100 ms, ×2, capped at 30 s, no jitter;
/// - retryable: [`Retry::default_retryable`], which retries task errors, per-attempt
///   timeouts, full bulkheads and spent rate limits, and never breaker rejections,
///   exhausted deadlines or panics;
/// - retry budget: none;
/// - delay from the error: none, so the backoff's delay applies.
#[derive(Clone)]
pub struct Retry {
    pub(crate) max_attempts: u32,
    pub(crate) backoff: Backoff,
    pub(crate) retryable: Option<RetryPredicate>,
    pub(crate) budget: Option<RetryBudget>,
    pub(crate) delay_from: Option<DelayHint>,
}

impl fmt::Debug for Retry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Retry")
            .field("max_attempts", &self.max_attempts)
            .field("backoff", &self.backoff)
            .field("custom_predicate", &self.retryable.is_some())
            .field("budget", &self.budget.as_ref().map(RetryBudget::name))
            .field("delay_from", &self.delay_from.is_some())
            .finish()
    }
}

impl Default for Retry {
    fn default() -> Self {
        Retry::new(3)
    }
}

impl Retry {
    /// At most `max_attempts` attempts in all, the first one included, with the default
    /// backoff, exponential from 100 ms. It counts attempts, not retries: `Retry::new(3)`
    /// retries at most twice, and `Retry::new(1)` never retries. `max_attempts` of 0 is
    /// rejected with [`BuildError::InvalidPolicy`](crate::BuildError::InvalidPolicy) when
    /// the graph is built.
    ///
    /// ```
    /// use baton_graph::{BoxError, Pipeline, Retry};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let stock = Pipeline::<u32>::builder("stock").retry(Retry::new(3)).build()?;
    /// let call = stock.run(|_| async { Err::<u32, BoxError>("503".into()) }).await;
    /// assert_eq!(call.attempts(), 3); // 1 attempt + 2 retries, not 3 retries
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn new(max_attempts: u32) -> Self {
        Retry {
            max_attempts,
            backoff: Backoff::exponential(std::time::Duration::from_millis(100)),
            retryable: None,
            budget: None,
            delay_from: None,
        }
    }

    /// Sets the backoff between attempts.
    #[must_use]
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Retries only the errors for which `predicate` returns `true`. A breaker rejection
    /// and an exhausted deadline are never retried, whatever the predicate says.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{BoxError, NodeError, Pipeline, Retry};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let only_timeouts = Retry::new(5).retry_if(|e: &NodeError| e.is_timeout());
    /// let stock = Pipeline::<u32>::builder("stock")
    ///     .timeout(Duration::from_millis(100))
    ///     .retry(only_timeouts)
    ///     .build()?;
    /// let call = stock.run(|_| async { Err::<u32, BoxError>("400 bad request".into()) }).await;
    /// assert_eq!(call.attempts(), 1); // a task error, not a timeout: not retried
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn retry_if(
        mut self,
        predicate: impl Fn(&NodeError) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.retryable = Some(Arc::new(predicate));
        self
    }

    /// Draws every retry from `budget`, shared by the nodes that call one downstream, so
    /// that a failing downstream cannot be hit by a retry storm.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{BoxError, NodeError, Pipeline, Retry, retry::{RetryBudget, StopReason}};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// // No retry allowed at all: 0 per second, 0 % on top of first attempts.
    /// let budget = RetryBudget::with("inventory", Duration::from_secs(10), 0, 0.0);
    /// let stock = Pipeline::<u32>::builder("stock").retry(Retry::new(3).budget(budget)).build()?;
    /// let call = stock.run(|_| async { Err::<u32, BoxError>("503".into()) }).await;
    /// assert_eq!(call.attempts(), 1);
    /// let Some(NodeError::GaveUp { reason, .. }) = call.error() else { panic!("should give up") };
    /// assert_eq!(*reason, StopReason::RetryBudgetExhausted { budget: "inventory".into() });
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn budget(mut self, budget: RetryBudget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Takes the delay before the next attempt from the error the attempt failed with,
    /// when `delay` returns one: an HTTP 429 or 503 response's `Retry-After`, say. `None`
    /// keeps the backoff's delay. The task's own error is reachable through
    /// [`NodeError::task_error`] and a downcast.
    ///
    /// The backoff still decides whether the series goes on: a custom backoff that ran out
    /// stops it. The delay, from the error or not, is clipped by the deadline like every
    /// backoff: it leaves room for one minimum attempt, and the attempt after a clipped
    /// delay is the series' last. No jitter is added to it. `delay` is called only for an
    /// error that is retried, and a panic in it fails the node with
    /// [`NodeError::Panicked`], naming
    /// [`UserCode::RetryDelay`](crate::error::UserCode::RetryDelay).
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{Backoff, BoxError, NodeError, Pipeline, Retry};
    ///
    /// /// What an HTTP client returns for a 429 or 503 answer.
    /// #[derive(Debug)]
    /// struct Unavailable {
    ///     retry_after: Option<Duration>,
    /// }
    /// # impl std::fmt::Display for Unavailable {
    /// #     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    /// #         f.write_str("503 Service Unavailable")
    /// #     }
    /// # }
    /// # impl std::error::Error for Unavailable {}
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let retry = Retry::new(3)
    ///     .backoff(Backoff::exponential(Duration::from_millis(100)))
    ///     .delay_from(|error: &NodeError| {
    ///         let unavailable = error.task_error()?.downcast_ref::<Unavailable>()?;
    ///         unavailable.retry_after
    ///     });
    /// let prices = Pipeline::builder("prices").retry(retry).build()?;
    /// let call = prices
    ///     .run(|attempt| async move {
    ///         if attempt.number() == 1 {
    ///             let retry_after = Some(Duration::from_secs(2));
    ///             return Err::<u32, BoxError>(Box::new(Unavailable { retry_after }));
    ///         }
    ///         Ok(59_900)
    ///     })
    ///     .await;
    /// assert_eq!(call.value(), Some(&59_900));
    /// assert_eq!(call.attempt_log()[1].delay_before, Duration::from_secs(2));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn delay_from(
        mut self,
        delay: impl Fn(&NodeError) -> Option<Duration> + Send + Sync + 'static,
    ) -> Self {
        self.delay_from = Some(Arc::new(delay));
        self
    }

    /// The default predicate: task errors, per-attempt timeouts, full bulkheads and rate
    /// limiters without a permit are retryable, since a full bulkhead and a spent rate
    /// limit are short-lived, local shortages. Panics are not: they are bugs, and usually
    /// deterministic.
    ///
    /// ```
    /// use baton_graph::{NodeError, Retry, breaker::BreakerState};
    ///
    /// assert!(Retry::default_retryable(&NodeError::Task("503".into())));
    /// let rejected = NodeError::BreakerOpen {
    ///     node: "stock".into(),
    ///     breaker: "inventory".into(),
    ///     state: BreakerState::Open,
    ///     retry_after: None,
    /// };
    /// assert!(!Retry::default_retryable(&rejected));
    /// ```
    #[must_use]
    pub fn default_retryable(error: &NodeError) -> bool {
        matches!(
            error,
            NodeError::Task(_)
                | NodeError::Timeout { .. }
                | NodeError::BulkheadFull { .. }
                | NodeError::RateLimited { .. }
        )
    }

    /// Whether the series may retry after `error`.
    pub(crate) fn is_retryable(&self, error: &NodeError) -> bool {
        if matches!(
            error,
            NodeError::BreakerOpen { .. } | NodeError::DeadlineExceeded { .. }
        ) {
            return false;
        }
        // A downstream that said the deadline passed: a retry has no time either.
        if let NodeError::Task(e) = error
            && DownstreamDeadlineExceeded::is_in(e.as_ref())
        {
            return false;
        }
        match &self.retryable {
            Some(p) => p(error),
            None => Retry::default_retryable(error),
        }
    }

    /// Whether `self` and `other` retry alike: the same attempts and backoff, the same
    /// closure as predicate, and the same handle as retry budget.
    pub(crate) fn same(&self, other: &Self) -> bool {
        self.max_attempts == other.max_attempts
            && self.backoff.same(&other.backoff)
            && same_opt(&self.retryable, &other.retryable, Arc::ptr_eq)
            && same_opt(&self.budget, &other.budget, RetryBudget::same_as)
            && same_opt(&self.delay_from, &other.delay_from, Arc::ptr_eq)
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.max_attempts == 0 {
            return Err("retry needs at least 1 attempt, got 0".to_owned());
        }
        if let Some(budget) = &self.budget {
            budget.validate()?;
        }
        self.backoff.validate()
    }
}
