//! [`Pipeline`]: the onion around a single call, without a graph.

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use super::fallback::Recovered;
use super::{Execution, Fallback, Host, Policies, Retry};
use crate::error::{BoxError, BuildError, NodeError};
use crate::id::RunId;
use crate::observe::Event;
use crate::orchestrator::{Orchestrator, deliver};
use crate::policy::bulkhead::BulkheadPermit;
use crate::policy::deadline::TimerHook;
use crate::policy::{Bulkhead, CircuitBreaker};
use crate::report::{AttemptReport, Outcome};

/// The policies of a graph node around a single call: attempt (bulkhead permit, task,
/// per-attempt timeout) → retry inside a deadline budget → circuit breaker → fallback, in
/// that fixed order, with the same errors, events and attempt log as a node.
///
/// Cheap to clone (`Arc` inside), `Send + Sync`; one pipeline serves any number of calls at
/// once. `T` is the value a call produces.
///
/// ```
/// use std::time::Duration;
/// use baton::{Backoff, BoxError, CircuitBreaker, Fallback, Pipeline, Retry};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let inventory = CircuitBreaker::builder("inventory").consecutive_failures(5).build()?;
/// let stock = Pipeline::builder("stock")
///     .timeout(Duration::from_millis(300))
///     .retry(Retry::new(3).backoff(Backoff::constant(Duration::from_millis(100))))
///     .breaker(&inventory)
///     .fallback(Fallback::value(0_u32))
///     .build()?;
///
/// // Fails twice, then answers.
/// let call = stock
///     .run(|attempt| async move {
///         if attempt.number() < 3 {
///             return Err::<u32, BoxError>("503 Service Unavailable".into());
///         }
///         Ok(7)
///     })
///     .await;
/// assert_eq!(call.value(), Some(&7));
/// assert_eq!(call.attempts(), 3);
/// assert_eq!(call.attempt_log()[1].delay_before, Duration::from_millis(100));
///
/// // Too slow every time: each attempt is cut at 300 ms, then the fallback answers.
/// let slow = stock.call(|_| async {
///     tokio::time::sleep(Duration::from_secs(1)).await;
///     Ok::<u32, BoxError>(1)
/// });
/// assert_eq!(slow.await?, 0);
/// # Ok(())
/// # }
/// ```
pub struct Pipeline<T> {
    inner: Arc<Inner<T>>,
}

struct Inner<T> {
    name: String,
    policies: Policies,
    fallback: Option<Recover<T>>,
    orchestrator: Option<Orchestrator>,
}

/// A fallback's run: the call's name and error in, its value out.
type RecoverFuture<T> = Pin<Box<dyn Future<Output = Result<T, NodeError>> + Send>>;
type Recover<T> = Arc<dyn Fn(&str, Arc<NodeError>) -> RecoverFuture<T> + Send + Sync>;

impl<T> Clone for Pipeline<T> {
    fn clone(&self) -> Self {
        Pipeline {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<T> fmt::Debug for Pipeline<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pipeline")
            .field("name", &self.inner.name)
            .field("policies", &self.inner.policies)
            .field("fallback", &self.inner.fallback.is_some())
            .finish_non_exhaustive()
    }
}

/// Configures a [`Pipeline`]; from [`Pipeline::builder`].
///
/// # Defaults
/// The same as a node's: no timeout, one attempt, no budget, a minimum attempt time of
/// 10 ms, no breaker, bulkhead or fallback, no orchestrator (events go nowhere, nothing is
/// counted).
#[must_use = "call `.build()` to get the pipeline"]
pub struct PipelineBuilder<T> {
    name: String,
    timeout: Option<Duration>,
    retry: Option<Retry>,
    budget: Option<Duration>,
    min_attempt: Option<Duration>,
    breaker: Option<CircuitBreaker>,
    breaker_ignore: Option<super::ErrorFilter>,
    bulkhead: Option<Bulkhead>,
    fallback: Option<Recover<T>>,
    orchestrator: Option<Orchestrator>,
}

impl<T> fmt::Debug for PipelineBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PipelineBuilder")
            .field("name", &self.name)
            .field("timeout", &self.timeout)
            .field("retry", &self.retry)
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl<T: Send + Sync + 'static> Pipeline<T> {
    /// A pipeline called `name`: the name its errors and events carry, as a node's do.
    pub fn builder(name: impl Into<String>) -> PipelineBuilder<T> {
        PipelineBuilder {
            name: name.into(),
            timeout: None,
            retry: None,
            budget: None,
            min_attempt: None,
            breaker: None,
            breaker_ignore: None,
            bulkhead: None,
            fallback: None,
            orchestrator: None,
        }
    }

    /// The pipeline's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Runs `task` through the policies and returns its value, or the fallback's; the error
    /// the series ended with otherwise. See [`run`](Self::run) for everything the call
    /// did.
    ///
    /// # Errors
    /// The final error, as a node's: [`NodeError::GaveUp`] after retries,
    /// [`NodeError::Timeout`], [`NodeError::BreakerOpen`], [`NodeError::FallbackFailed`], ….
    pub async fn call<F, Fut, E>(&self, task: F) -> Result<T, Arc<NodeError>>
    where
        F: Fn(Attempt) -> Fut + Send + Sync,
        Fut: Future<Output = Result<T, E>> + Send,
        E: Into<BoxError>,
    {
        self.run(task).await.result
    }

    /// Runs `task` through the policies and returns what the call did: its value or error,
    /// what the fallback recovered from, and each attempt.
    ///
    /// `task` is called once per attempt, with the attempt's number and deadline; each
    /// attempt's future is dropped when it is cut (it stops at its next `.await`). A panic
    /// in `task` or its future is caught and fails the attempt, as in a node.
    pub async fn run<F, Fut, E>(&self, task: F) -> Call<T>
    where
        F: Fn(Attempt) -> Fut + Send + Sync,
        Fut: Future<Output = Result<T, E>> + Send,
        E: Into<BoxError>,
    {
        let inner = &*self.inner;
        let started = Instant::now();
        let host = CallHost {
            inner,
            task: &task,
            run: RunId::next(),
            started,
            attempts: AtomicU32::new(0),
        };
        host.emit(|run, node| Event::NodeStarted { run, node });
        let Execution {
            result,
            recovered_from,
            attempts: attempt_log,
        } = super::execute(&host, &inner.policies, None, started, None).await;
        let call = Call {
            result,
            recovered_from,
            attempt_log,
            attempts: host.attempts.load(Ordering::Relaxed),
            run: host.run,
            elapsed: started.elapsed(),
        };
        let outcome = call.outcome();
        host.emit(|run, node| Event::NodeFinished {
            run,
            node,
            outcome,
            duration: call.elapsed,
        });
        call
    }
}

impl<T: Send + Sync + 'static> PipelineBuilder<T> {
    /// Limits each attempt to `limit`, as [`NodeBuilder::timeout`](crate::NodeBuilder::timeout).
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = Some(limit);
        self
    }

    /// Retries failed attempts per `retry`, inside the budget.
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = Some(retry);
        self
    }

    /// Gives each call a time budget from its start: every attempt, backoff and bulkhead
    /// wait must end by then, as [`NodeBuilder::budget`](crate::NodeBuilder::budget).
    pub fn budget(mut self, budget: Duration) -> Self {
        self.budget = Some(budget);
        self
    }

    /// No attempt starts with less than `min` left before the deadline (default 10 ms).
    pub fn min_attempt_time(mut self, min: Duration) -> Self {
        self.min_attempt = Some(min);
        self
    }

    /// Guards each call with `breaker`: asked once before the series, told one result.
    pub fn breaker(mut self, breaker: &CircuitBreaker) -> Self {
        self.breaker = Some(breaker.clone());
        self
    }

    /// Errors for which `ignore` returns `true` do not count for or against the breaker.
    pub fn breaker_ignore(
        mut self,
        ignore: impl Fn(&NodeError) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.breaker_ignore = Some(Arc::new(ignore));
        self
    }

    /// Takes a permit of `bulkhead` for each attempt, held until the attempt has stopped.
    pub fn bulkhead(mut self, bulkhead: &Bulkhead) -> Self {
        self.bulkhead = Some(bulkhead.clone());
        self
    }

    /// Recovers with `fallback` when the inner layers failed. A fixed value
    /// ([`Fallback::value`]) is cloned for each call it answers.
    pub fn fallback(mut self, fallback: Fallback<T>) -> Self
    where
        T: Clone,
    {
        self.fallback = Some(Arc::new(move |node: &str, error| {
            let (fallback, node) = (fallback.clone(), node.to_owned());
            Box::pin(async move {
                match fallback.recover(&node, error).await? {
                    Recovered::Shared(value) => Ok(T::clone(&value)),
                    Recovered::Owned(value) => Ok(value),
                }
            })
        }));
        self
    }

    /// Reports to `orchestrator`: its observers receive the calls' events (each call is a
    /// run of its own id), its statistics count their attempts, retries, timeouts, breaker
    /// rejections and fallbacks, and the breaker and bulkhead join its registries.
    pub fn orchestrator(mut self, orchestrator: &Orchestrator) -> Self {
        self.orchestrator = Some(orchestrator.clone());
        self
    }

    /// Validates the policies and returns the pipeline.
    ///
    /// # Errors
    /// [`BuildError::InvalidPolicy`] (a zero timeout or budget, a budget below the minimum
    /// attempt time, an invalid retry) or, with an orchestrator,
    /// [`BuildError::PolicyConflict`] (another breaker, bulkhead or retry budget has the
    /// name of one of these), each naming the pipeline as the node.
    pub fn build(self) -> Result<Pipeline<T>, BuildError> {
        let policies = Policies::new(
            self.timeout,
            self.retry,
            self.budget,
            self.min_attempt,
            self.breaker,
            self.breaker_ignore,
            self.bulkhead,
        );
        let name = self.name;
        policies
            .validate()
            .map_err(|invalid| BuildError::InvalidPolicy {
                node: name.clone(),
                policy: invalid.policy,
                reason: invalid.reason,
            })?;
        if let Some(orch) = &self.orchestrator {
            register(orch, &name, &policies)?;
        }
        Ok(Pipeline {
            inner: Arc::new(Inner {
                name,
                policies,
                fallback: self.fallback,
                orchestrator: self.orchestrator,
            }),
        })
    }
}

/// Registers the pipeline's breaker, bulkhead and retry budget in `orch`.
fn register(orch: &Orchestrator, name: &str, policies: &Policies) -> Result<(), BuildError> {
    let conflict = |taken: crate::orchestrator::NameTaken| BuildError::PolicyConflict {
        node: name.to_owned(),
        kind: taken.kind,
        name: taken.name,
    };
    if let Some(breaker) = &policies.breaker {
        orch.add_breaker(breaker).map_err(conflict)?;
    }
    if let Some(bulkhead) = &policies.bulkhead {
        orch.add_bulkhead(bulkhead).map_err(conflict)?;
    }
    if let Some(budget) = policies.retry.as_ref().and_then(|r| r.budget.as_ref()) {
        orch.add_retry_budget(budget).map_err(conflict)?;
    }
    Ok(())
}

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
    /// `None` when neither applies. A tokio (monotonic) instant.
    #[must_use]
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// The time left before [`deadline`](Self::deadline) (zero once it passed); pass it
    /// downstream as the request's timeout.
    #[must_use]
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }
}

/// What one [`Pipeline::run`] did.
#[derive(Debug)]
pub struct Call<T> {
    result: Result<T, Arc<NodeError>>,
    recovered_from: Option<Arc<NodeError>>,
    attempt_log: Vec<AttemptReport>,
    attempts: u32,
    run: RunId,
    elapsed: Duration,
}

impl<T> Call<T> {
    /// `Succeeded`, `Recovered` (the fallback answered) or `Failed`.
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
    pub fn into_result(self) -> Result<T, Arc<NodeError>> {
        self.result
    }

    /// How many attempts started.
    #[must_use]
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Each attempt's start, end, preceding backoff and error, from the call's start, when
    /// the call retried or failed (empty after one successful attempt), as a node's.
    #[must_use]
    pub fn attempt_log(&self) -> &[AttemptReport] {
        &self.attempt_log
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
struct CallHost<'a, T, F> {
    inner: &'a Inner<T>,
    task: &'a F,
    run: RunId,
    started: Instant,
    attempts: AtomicU32,
}

impl<T, F> CallHost<'_, T, F> {
    fn emit<'e>(&'e self, event: impl FnOnce(RunId, &'e str) -> Event<'e>) {
        if let Some(orch) = &self.inner.orchestrator {
            if !orch.observers().is_empty() {
                deliver(orch.observers(), &event(self.run, &self.inner.name));
            }
        }
    }

    fn count(&self, counter: impl FnOnce(&crate::observe::stats::Stripe)) {
        if let Some(orch) = &self.inner.orchestrator {
            counter(orch.counters().local());
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
            .map_err(|panic| NodeError::from_panic(panic.as_ref()))?;
        Ok(Held { fut, permit })
    }

    fn fallback(&self, error: &Arc<NodeError>) -> Option<Self::Recover> {
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
        self.count(|c| {
            c.attempts.incr();
            if number > 1 {
                c.retries.incr();
            }
        });
        self.emit(|run, node| Event::AttemptStarted {
            run,
            node,
            attempt: number,
            budget,
        });
    }

    fn attempt_ended(&self, _number: u32) {}

    fn attempt_failed(&self, number: u32, error: &NodeError) {
        self.emit(|run, node| Event::AttemptFailed {
            run,
            node,
            attempt: number,
            error,
        });
    }

    fn attempt_cut(&self, number: u32, limit: Duration) {
        self.count(|c| c.timeouts.incr());
        self.emit(|run, node| Event::Timeout {
            run,
            node,
            attempt: number,
            limit,
        });
    }

    fn retry_scheduled(&self, next: u32, delay: Duration, remaining: Option<Duration>) {
        self.emit(|run, node| Event::RetryScheduled {
            run,
            node,
            attempt: next,
            delay,
            remaining,
        });
    }

    fn rejected(&self) {
        self.count(|c| c.breaker_rejections.incr());
    }

    fn fell_back(&self, error: &NodeError) {
        self.count(|c| c.fallbacks.incr());
        self.emit(|run, node| Event::FallbackUsed { run, node, error });
    }
}

pin_project_lite::pin_project! {
    /// A pipeline attempt: the task's future, with its error boxed, holding its bulkhead
    /// permit until it ends or is dropped.
    pub(crate) struct Held<Fut> {
        #[pin]
        fut: Fut,
        permit: Option<BulkheadPermit>,
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
