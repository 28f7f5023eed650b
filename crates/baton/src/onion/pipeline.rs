//! [`Pipeline`]: the onion around a single call, without a graph.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::call::{Attempt, Call, CallHost};
use super::fallback::Recovered;
use super::{ErrorFilter, Execution, Fallback, Policies, Retry};
use crate::error::{BoxError, BuildError, NodeError};
use crate::id::RunId;
use crate::observe::{Event, log};
use crate::orchestrator::{NameTaken, Orchestrator};
use crate::policy::{Bulkhead, Chaos, CircuitBreaker, Hedge, RateLimiter};

/// The policies of a graph node around a single call: attempt (bulkhead permit, task,
/// per-attempt timeout) → retry inside a deadline budget → circuit breaker → fallback, in
/// that fixed order, with the same errors, events and attempt log as a node.
///
/// Cheap to clone (`Arc` inside), `Send + Sync`; one pipeline serves any number of calls at
/// once. `T` is the value a call produces.
///
/// ```
/// use std::time::Duration;
/// use baton_graph::{Backoff, BoxError, CircuitBreaker, Fallback, Pipeline, Retry};
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

pub(super) struct Inner<T> {
    pub(super) name: String,
    pub(super) policies: Policies,
    pub(super) fallback: Option<Recover<T>>,
    pub(super) orchestrator: Option<Orchestrator>,
}

/// A fallback's run: the call's name and error in, its value out.
pub(super) type RecoverFuture<T> = Pin<Box<dyn Future<Output = Result<T, NodeError>> + Send>>;
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
    breaker_ignore: Option<ErrorFilter>,
    bulkhead: Option<Bulkhead>,
    rate_limit: Option<RateLimiter>,
    hedge: Option<Hedge>,
    chaos: Option<Chaos>,
    fallback: Option<Recover<T>>,
    orchestrator: Option<Orchestrator>,
    #[cfg(feature = "serde")]
    policy_set: Option<String>,
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
            rate_limit: None,
            hedge: None,
            chaos: None,
            fallback: None,
            orchestrator: None,
            #[cfg(feature = "serde")]
            policy_set: None,
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
    ///
    /// ```
    /// use baton_graph::{BoxError, Pipeline, Retry};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let stock = Pipeline::<u32>::builder("stock").retry(Retry::new(2)).build()?;
    /// let err = stock.call(|_| async { Err::<u32, BoxError>("503".into()) }).await.unwrap_err();
    /// assert_eq!(err.kind(), "gave_up");
    /// assert_eq!(
    ///     err.to_string(),
    ///     "node `stock` gave up after 2 attempt(s) in 100 ms (max attempts reached)"
    /// );
    /// assert_eq!(err.task_error().map(|e| e.to_string()).as_deref(), Some("503"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn call<'a, F, Fut, E>(
        &'a self,
        task: F,
    ) -> impl Future<Output = Result<T, Arc<NodeError>>> + Send + 'a
    where
        F: Fn(Attempt) -> Fut + Send + Sync + 'a,
        Fut: Future<Output = Result<T, E>> + Send + 'a,
        E: Into<BoxError> + 'a,
    {
        let run = self.run(task);
        async move { run.await.result }
    }

    /// Runs `task` through the policies and returns what the call did: its value or error,
    /// what the fallback recovered from, and each attempt.
    ///
    /// `task` is called once per attempt, with the attempt's number and deadline; each
    /// attempt's future is dropped when it is cut (it stops at its next `.await`). A panic
    /// in `task` or its future is caught and fails the attempt, as in a node.
    ///
    /// The future is `Send` (it can be given to `tokio::spawn`) whatever the task's error
    /// type.
    // Not an `async fn`: the `Send` in the signature is what lets callers spawn it.
    #[allow(clippy::manual_async_fn)]
    pub fn run<'a, F, Fut, E>(&'a self, task: F) -> impl Future<Output = Call<T>> + Send + 'a
    where
        F: Fn(Attempt) -> Fut + Send + Sync + 'a,
        Fut: Future<Output = Result<T, E>> + Send + 'a,
        E: Into<BoxError> + 'a,
    {
        async move { self.run_inner(task, None).await }
    }

    /// [`call`](Self::call) under the caller's `deadline` too: the call's deadline is the
    /// earlier of its budget's end and `deadline`.
    #[cfg(feature = "tower")]
    pub(crate) async fn call_until<F, Fut, E>(
        &self,
        deadline: Option<Instant>,
        task: F,
    ) -> Result<T, Arc<NodeError>>
    where
        F: Fn(Attempt) -> Fut + Send + Sync,
        Fut: Future<Output = Result<T, E>> + Send,
        E: Into<BoxError>,
    {
        self.run_inner(task, deadline).await.result
    }

    async fn run_inner<F, Fut, E>(&self, task: F, deadline: Option<Instant>) -> Call<T>
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
        host.emit(|run, node| Event::NodeStarted {
            run,
            graph: None,
            node,
        });
        let Execution {
            result,
            recovered_from,
            attempts: attempt_log,
            ..
        } = super::execute(&host, &inner.policies, deadline, started, None).await;
        let call = Call {
            result,
            recovered_from,
            attempt_log,
            attempts: host.attempts.load(Ordering::Relaxed),
            run: host.run,
            elapsed: started.elapsed(),
        };
        let outcome = call.outcome();
        log::node_ended(&inner.name, outcome, call.error());
        host.emit(|run, node| Event::NodeFinished {
            run,
            graph: None,
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

    /// No first attempt starts with less than `min` left before the deadline, and backoffs
    /// are clipped to leave it (default 10 ms).
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

    /// Takes a permit of `limiter` for each attempt, before its bulkhead permit, as
    /// [`NodeBuilder::rate_limit`](crate::NodeBuilder::rate_limit).
    pub fn rate_limit(mut self, limiter: &RateLimiter) -> Self {
        self.rate_limit = Some(limiter.clone());
        self
    }

    /// Hedges slow attempts per `hedge`, as [`NodeBuilder::hedge`](crate::NodeBuilder::hedge).
    pub fn hedge(mut self, hedge: Hedge) -> Self {
        self.hedge = Some(hedge);
        self
    }

    /// Injects faults into the attempts per `chaos`, as
    /// [`NodeBuilder::chaos`](crate::NodeBuilder::chaos).
    pub fn chaos(mut self, chaos: &Chaos) -> Self {
        self.chaos = Some(chaos.clone());
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
    /// rejections and fallbacks, and the breaker, bulkhead and rate limiter join its
    /// registries.
    ///
    /// ```
    /// use baton_graph::{BoxError, Orchestrator, Pipeline, Retry};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let orch = Orchestrator::new();
    /// let stock = Pipeline::<u32>::builder("stock")
    ///     .retry(Retry::new(2))
    ///     .orchestrator(&orch)
    ///     .build()?;
    /// stock.run(|_| async { Err::<u32, BoxError>("503".into()) }).await;
    /// let stats = orch.stats();
    /// assert_eq!((stats.attempts, stats.retries), (2, 1));
    /// # Ok(())
    /// # }
    /// ```
    pub fn orchestrator(mut self, orchestrator: &Orchestrator) -> Self {
        self.orchestrator = Some(orchestrator.clone());
        self
    }

    /// Takes the policies of the orchestrator's policy set `name` (from a configuration:
    /// [`Orchestrator::apply`]) when the pipeline is built, as the set is then; a policy
    /// also given to this builder keeps the builder's. Needs
    /// [`orchestrator`](Self::orchestrator).
    ///
    /// ```
    /// use baton_graph::{BoxError, Config, Orchestrator, Pipeline};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let text = r#"{ "policies": { "stock": { "retry": { "max_attempts": 3 } } } }"#;
    /// let orch = Orchestrator::new();
    /// orch.apply(&Config::from_deserializer(&mut serde_json::Deserializer::from_str(text))?)?;
    /// let stock = Pipeline::<u32>::builder("stock").orchestrator(&orch).policy_set("stock").build()?;
    /// let call = stock.run(|_| async { Err::<u32, BoxError>("503".into()) }).await;
    /// assert_eq!(call.attempts(), 3);
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "serde")]
    pub fn policy_set(mut self, name: impl Into<String>) -> Self {
        self.policy_set = Some(name.into());
        self
    }

    /// Fills what the builder was not given from its policy set, if it has one.
    #[cfg(feature = "serde")]
    fn with_policy_set(mut self) -> Result<Self, BuildError> {
        let Some(set) = self.policy_set.take() else {
            return Ok(self);
        };
        let Some(orch) = &self.orchestrator else {
            return Err(BuildError::UnknownPolicy {
                node: self.name,
                kind: "policy set",
                name: set,
            });
        };
        let set = super::resolve_set(orch, &set, &self.name)?;
        self.timeout = self.timeout.or(set.timeout);
        self.budget = self.budget.or(set.budget);
        self.min_attempt = self.min_attempt.or(set.min_attempt);
        self.retry = self.retry.or(set.retry);
        self.breaker = self.breaker.or(set.breaker);
        self.bulkhead = self.bulkhead.or(set.bulkhead);
        self.rate_limit = self.rate_limit.or(set.rate_limit);
        self.hedge = self.hedge.or(set.hedge);
        Ok(self)
    }

    /// Validates the policies and returns the pipeline.
    ///
    /// # Errors
    /// [`BuildError::EmptyName`] for an empty name, [`BuildError::InvalidPolicy`] (a zero
    /// timeout or budget, a budget below the minimum
    /// attempt time, an invalid retry) or, with an orchestrator,
    /// [`BuildError::PolicyConflict`] (another breaker, bulkhead, rate limiter or retry
    /// budget has the name of one of these), each naming the pipeline as the node;
    /// [`BuildError::UnknownPolicy`] for a [`policy_set`](Self::policy_set) (or a policy it
    /// names) that the orchestrator does not have, or without an orchestrator.
    pub fn build(self) -> Result<Pipeline<T>, BuildError> {
        #[cfg(feature = "serde")]
        let this = self.with_policy_set()?;
        #[cfg(not(feature = "serde"))]
        let this = self;
        this.build_checked()
    }

    fn build_checked(self) -> Result<Pipeline<T>, BuildError> {
        let policies = Policies::new(
            self.timeout,
            self.retry,
            self.budget,
            self.min_attempt,
            self.breaker,
            self.breaker_ignore,
            self.bulkhead,
        )
        .limited(self.rate_limit)
        .hedged(self.hedge, self.chaos);
        let name = self.name;
        if name.is_empty() {
            return Err(BuildError::EmptyName { index: 0 });
        }
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

/// Registers the pipeline's breaker, bulkhead, rate limiter and retry budget in `orch`.
fn register(orch: &Orchestrator, name: &str, policies: &Policies) -> Result<(), BuildError> {
    let conflict = |taken: NameTaken| BuildError::PolicyConflict {
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
    if let Some(limiter) = &policies.rate_limit {
        orch.add_rate_limiter(limiter).map_err(conflict)?;
    }
    if let Some(budget) = policies.retry.as_ref().and_then(|r| r.budget.as_ref()) {
        orch.add_retry_budget(budget).map_err(conflict)?;
    }
    Ok(())
}
