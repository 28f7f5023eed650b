//! One [`Pipeline`](super::Pipeline) call: what its task sees of each [`Attempt`], what it
//! returns as a [`Call`], and the onion's host for it.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use super::Host;
use super::pipeline::{Inner, RecoverFuture};
use super::tell::{self, Subject, Teller};
use crate::error::{BoxError, NodeError, UserCode};
use crate::id::RunId;
use crate::observe::Event;
use crate::observe::stats::Local;
use crate::orchestrator::deliver;
use crate::policy::deadline::TimerHook;
use crate::policy::limit::bulkhead::BulkheadPermit;
use crate::report::{AttemptReport, Outcome};

/// One attempt of a pipeline call, as its task sees it.
#[derive(Debug, Clone, Copy)]
pub struct Attempt {
    number: u32,
    deadline: Option<Instant>,
}

impl Attempt {
    /// The attempt number, starting at 1.
    #[must_use]
    pub fn number(&self) -> u32 {
        self.number
    }

    /// When this attempt will be cut: the earlier of its timeout and the call's budget;
    /// `None` when neither applies. A tokio instant, which is monotonic.
    #[must_use]
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// The time left before [`deadline`](Self::deadline), zero once it passed. Pass it
    /// downstream as the request's timeout.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{BoxError, Pipeline};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let user = Pipeline::<Duration>::builder("user")
    ///     .timeout(Duration::from_millis(300))
    ///     .build()?;
    /// let left = user
    ///     .call(|attempt| async move {
    ///         // Give the HTTP request what is left, not a timeout of its own.
    ///         Ok::<_, BoxError>(attempt.remaining().unwrap_or(Duration::MAX))
    ///     })
    ///     .await?;
    /// assert_eq!(left, Duration::from_millis(300));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// The time left of this attempt less `margin`, to send downstream with the request;
    /// see [`Budget`](crate::deadline::Budget). `None` when no deadline applies.
    #[must_use]
    pub fn budget(&self, margin: Duration) -> Option<crate::policy::Budget> {
        self.remaining()
            .map(|left| crate::policy::Budget::new(left.saturating_sub(margin)))
    }
}

/// What one [`Pipeline::run`](crate::Pipeline::run) did.
#[derive(Debug)]
pub struct Call<T> {
    pub(super) result: Result<T, Arc<NodeError>>,
    pub(super) recovered_from: Option<Arc<NodeError>>,
    pub(super) attempt_log: Vec<AttemptReport>,
    pub(super) attempts: u32,
    pub(super) run: RunId,
    pub(super) elapsed: Duration,
}

impl<T> Call<T> {
    /// `Succeeded`, `Recovered` when the fallback answered, or `Failed`.
    #[must_use]
    pub fn outcome(&self) -> Outcome {
        match (&self.result, &self.recovered_from) {
            (Ok(_), None) => Outcome::Succeeded,
            (Ok(_), Some(_)) => Outcome::Recovered,
            (Err(_), _) => Outcome::Failed,
        }
    }

    /// The value, from the task or the fallback.
    #[must_use]
    pub fn value(&self) -> Option<&T> {
        self.result.as_ref().ok()
    }

    /// The error: why the call failed, or what the fallback recovered from.
    #[must_use]
    pub fn error(&self) -> Option<&NodeError> {
        match (&self.result, &self.recovered_from) {
            (Err(e), _) | (Ok(_), Some(e)) => Some(e),
            (Ok(_), None) => None,
        }
    }

    /// The value, or the error the call failed with.
    ///
    /// # Errors
    /// The call's final error when no value came from the task or the fallback.
    ///
    /// ```
    /// use baton_graph::{BoxError, Pipeline};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let price = Pipeline::<u64>::builder("price").build()?;
    /// let call = price.run(|_| async { Ok::<_, BoxError>(59_900) }).await;
    /// assert_eq!(call.attempts(), 1);
    /// assert!(call.attempt_log().is_empty()); // one attempt that succeeded: nothing to log
    /// assert_eq!(call.into_result()?, 59_900);
    /// # Ok(())
    /// # }
    /// ```
    pub fn into_result(self) -> Result<T, Arc<NodeError>> {
        self.result
    }

    /// How many attempts started.
    #[must_use]
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Each attempt's start, end, preceding backoff and error, from the call's start, as a
    /// node's. Filled when the call retried or failed; empty after one successful attempt.
    #[must_use]
    pub fn attempt_log(&self) -> &[AttemptReport] {
        &self.attempt_log
    }

    /// The attempt whose value the call has, when it `Succeeded`, as
    /// [`NodeReport::winner`](crate::NodeReport::winner).
    #[must_use]
    pub fn winner(&self) -> Option<u32> {
        crate::report::winner(&self.attempt_log, self.outcome() == Outcome::Succeeded)
    }

    /// The call's id: the run id its events carry.
    #[must_use]
    pub fn id(&self) -> RunId {
        self.run
    }

    /// How long the call took.
    #[must_use]
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }
}

/// The onion's host for one pipeline call.
pub(super) struct CallHost<'a, T, F> {
    pub(super) inner: &'a Inner<T>,
    pub(super) task: &'a F,
    pub(super) run: RunId,
    pub(super) started: Instant,
    pub(super) attempts: AtomicU32,
}

impl<T, F> CallHost<'_, T, F> {
    pub(super) fn emit<'e>(&'e self, event: impl FnOnce(RunId, &'e str) -> Event<'e>) {
        if let Some(orch) = &self.inner.orchestrator {
            if !orch.observers().is_empty() {
                deliver(orch.observers(), &event(self.run, &self.inner.name));
            }
        }
    }
}

impl<T, F> Teller for CallHost<'_, T, F> {
    fn stripe(&self) -> Option<Local<'_>> {
        let orchestrator = self.inner.orchestrator.as_ref()?;
        Some(orchestrator.counters().local())
    }

    fn observed(&self) -> bool {
        self.inner
            .orchestrator
            .as_ref()
            .is_some_and(|o| !o.observers().is_empty())
    }

    fn subject(&self) -> Subject<'_> {
        Subject {
            run: self.run,
            graph: None,
            node: &self.inner.name,
            item: None,
        }
    }

    fn tell(&self, event: &Event<'_>) {
        if let Some(orchestrator) = &self.inner.orchestrator {
            deliver(orchestrator.observers(), event);
        }
    }
}

impl<T, F, Fut, E> Host for CallHost<'_, T, F>
where
    T: Send + Sync + 'static,
    F: Fn(Attempt) -> Fut + Send + Sync,
    Fut: Future<Output = Result<T, E>> + Send,
    E: Into<BoxError>,
{
    type Value = T;
    type Attempt = Held<Fut>;
    type Recover = RecoverFuture<T>;

    fn name(&self) -> &str {
        &self.inner.name
    }

    fn call(
        &self,
        number: u32,
        cut: Option<Instant>,
        permit: Option<BulkheadPermit>,
    ) -> Result<Held<Fut>, NodeError> {
        let attempt = Attempt {
            number,
            deadline: cut,
        };
        let fut = std::panic::catch_unwind(AssertUnwindSafe(|| (self.task)(attempt)))
            .map_err(|panic| NodeError::from_panic(UserCode::Task, panic.as_ref()))?;
        Ok(Held { fut, permit })
    }

    fn fallback(
        &self,
        error: &Arc<NodeError>,
        _attempts: u32,
        _deadline: Option<Instant>,
    ) -> Option<Self::Recover> {
        let fallback = self.inner.fallback.as_ref()?;
        Some(fallback(&self.inner.name, Arc::clone(error)))
    }

    fn timer_hook(&self) -> Option<&dyn TimerHook> {
        None
    }

    fn offset(&self, at: Instant) -> Duration {
        at.saturating_duration_since(self.started)
    }

    fn attempt_started(&self, number: u32, budget: Option<Duration>) {
        self.attempts.fetch_add(1, Ordering::Relaxed);
        tell::attempt_started(self, number, budget);
    }

    fn attempt_ended(&self, _number: u32) {}

    fn attempt_failed(&self, number: u32, error: &NodeError) {
        tell::attempt_failed(self, &self.inner.name, number, error);
    }
}

pin_project_lite::pin_project! {
    /// An attempt of a pipeline call or of a map item: the task's future, with its error
    /// boxed, holding its bulkhead permit until it ends or is dropped.
    pub(crate) struct Held<Fut> {
        #[pin]
        fut: Fut,
        permit: Option<BulkheadPermit>,
    }
}

impl<Fut> Held<Fut> {
    /// `fut`, holding `permit` until it ends or is dropped.
    pub(crate) fn new(fut: Fut, permit: Option<BulkheadPermit>) -> Self {
        Held { fut, permit }
    }
}

impl<Fut, T, E> Future for Held<Fut>
where
    Fut: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let out = std::task::ready!(this.fut.poll(cx));
        drop(this.permit.take());
        Poll::Ready(out.map_err(Into::into))
    }
}
