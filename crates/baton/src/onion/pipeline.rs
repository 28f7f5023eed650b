//! [`Pipeline`]: the onion around a single call, without a graph.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use tokio::time::Instant;

use super::call::{Attempt, Call, CallHost};
use super::fallback::Recovered;
use super::reload::{self, Reload};
use super::{Execution, Fallback, IntoFallback, Policies, ResolvedPolicies, policy_setters};
use crate::error::{BoxError, BuildError, NodeError};
use crate::id::RunId;
use crate::observe::{Event, log};
use crate::orchestrator::Orchestrator;

/// The policies of a graph node around a single call, in this fixed order: attempt, made of
/// the bulkhead permit, the task and the per-attempt timeout → retry inside a deadline
/// budget → circuit breaker → fallback. It has the same errors, events and attempt log as a
/// node.
///
/// Cheap to clone, with an `Arc` inside, and `Send + Sync`; one pipeline serves any number
/// of calls at once. `T` is the value a call produces.
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
    pub(super) policies: ResolvedPolicies,
    pub(super) fallback: Option<Recover<T>>,
    pub(super) orchestrator: Option<Orchestrator>,
    /// When the policies name a policy set: what a reload resolves again.
    reload: Option<Reload>,
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
/// 10 ms, no breaker, bulkhead or fallback, and no orchestrator, so events go nowhere and
/// nothing is counted.
#[must_use = "call `.build()` to get the pipeline"]
pub struct PipelineBuilder<T> {
    name: String,
    policies: Policies,
    fallback: Option<Recover<T>>,
    orchestrator: Option<Orchestrator>,
}

impl<T> fmt::Debug for PipelineBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PipelineBuilder")
            .field("name", &self.name)
            .field("policies", &self.policies)
            .field("fallback", &self.fallback.is_some())
            .finish_non_exhaustive()
    }
}

impl<T: Send + Sync + 'static> Pipeline<T> {
    /// A pipeline called `name`: the name its errors and events carry, as a node's do.
    pub fn builder(name: impl Into<String>) -> PipelineBuilder<T> {
        PipelineBuilder {
            name: name.into(),
            policies: Policies::default(),
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
    /// `task` is called once per attempt, with the attempt's number and deadline. Each
    /// attempt's future is dropped when it is cut, so it stops at its next `.await`. A
    /// panic in `task` or its future is caught and fails the attempt, as in a node.
    ///
    /// The future is `Send`, so it can be given to `tokio::spawn`, whatever the task's
    /// error type.
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
        // A call takes the policies current when it starts: after a reload, the new ones.
        let reloaded = match (&inner.reload, &inner.orchestrator) {
            (Some(reload), Some(orch)) => reload.current(orch),
            _ => None,
        };
        let policies = reload::current(&inner.policies, reloaded.as_deref());
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
        } = super::execute(&host, policies, deadline, started, None).await;
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

impl<T> PipelineBuilder<T> {
    fn policies_mut(&mut self) -> &mut Policies {
        &mut self.policies
    }

    policy_setters!();
}

impl<T: Send + Sync + 'static> PipelineBuilder<T> {
    /// Takes `policies`, given by value or by reference, as this pipeline's. Setters called
    /// after it refine them; setters called before it are replaced.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{BoxError, Pipeline, Policies, Retry};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let calls = Policies::new().retry(Retry::new(3)).timeout(Duration::from_millis(50));
    /// let stock = Pipeline::<u32>::builder("stock")
    ///     .policies(&calls)
    ///     .retry(Retry::new(2)) // refines: two attempts, still 50 ms each
    ///     .build()?;
    /// let call = stock
    ///     .run(|_| async {
    ///         tokio::time::sleep(Duration::from_secs(1)).await;
    ///         Ok::<u32, BoxError>(1)
    ///     })
    ///     .await;
    /// assert_eq!(call.attempts(), 2);
    /// assert_eq!(call.elapsed(), Duration::from_millis(200)); // 50, the 100 ms backoff, 50
    /// # Ok(())
    /// # }
    /// ```
    pub fn policies(mut self, policies: impl Into<Policies>) -> Self {
        self.policies = policies.into();
        self
    }

    /// Recovers with `fallback` when the inner layers failed, as
    /// [`NodeBuilder::fallback`](crate::NodeBuilder::fallback): a [`Fallback<T>`] or a plain
    /// `T`. A fixed value is cloned for each call it answers. Replaces a fallback set before.
    ///
    /// ```
    /// use baton_graph::{BoxError, Pipeline};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), BoxError> {
    /// let price = Pipeline::builder("price").fallback(0_u64).build()?;
    /// let call = price.run(|_| async { Err::<u64, _>("pricing service is down") }).await;
    /// assert_eq!(call.value(), Some(&0));
    /// assert_eq!(call.error().map(|e| e.kind()), Some("task"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn fallback(mut self, fallback: impl IntoFallback<T>) -> Self
    where
        T: Clone,
    {
        let fallback = fallback.__into_fallback();
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

    /// Recovers like [`fallback`](Self::fallback), with an async function of the error the
    /// inner layers ended with: `|error| async move { .. }`, as
    /// [`NodeBuilder::fallback_with`](crate::NodeBuilder::fallback_with) without the node's
    /// context and upstream values, which a pipeline has not. An `Err` or a panic fails the
    /// call with [`NodeError::FallbackFailed`]; the fallback is cut at the call's deadline.
    /// Replaces a fallback set before.
    ///
    /// ```
    /// use baton_graph::{BoxError, Pipeline};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), BoxError> {
    /// let price = Pipeline::builder("price")
    ///     .fallback_with(|error| async move {
    ///         Ok::<_, BoxError>(format!("list price ({})", error.kind()))
    ///     })
    ///     .build()?;
    /// let call = price.run(|_| async { Err::<String, _>("down") }).await;
    /// assert_eq!(call.value().map(String::as_str), Some("list price (task)"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn fallback_with<F, Fut, E>(self, f: F) -> Self
    where
        T: Clone,
        F: Fn(Arc<NodeError>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        self.fallback(Fallback::from_async(f))
    }

    /// Reports to `orchestrator`: its observers receive the calls' events, each call being
    /// a run of its own id, and its statistics count their attempts, retries, timeouts,
    /// breaker rejections and fallbacks. The breaker, bulkhead and rate limiter join its
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

    /// Validates the policies and returns the pipeline.
    ///
    /// # Errors
    /// [`BuildError::EmptyName`] for an empty name. [`BuildError::InvalidPolicy`] for a
    /// zero timeout or budget, a budget below the minimum attempt time, or an invalid
    /// retry. With an orchestrator, [`BuildError::PolicyConflict`] when another breaker,
    /// bulkhead, rate limiter or retry budget has the name of one of these. Each names the
    /// pipeline as the node.
    pub fn build(self) -> Result<Pipeline<T>, BuildError> {
        let name = self.name;
        if name.is_empty() {
            return Err(BuildError::EmptyName { index: 0 });
        }
        let changes = self
            .orchestrator
            .as_ref()
            .map(Orchestrator::policy_sets_changed);
        let mut policies = self.policies.resolve(&name, self.orchestrator.as_ref())?;
        let reload = policies.named_set.clone().and_then(|declared| {
            policies.reload_slot = Some(0);
            Reload::new(vec![(name.as_str().into(), declared)], changes.unwrap_or(0))
        });
        Ok(Pipeline {
            inner: Arc::new(Inner {
                name,
                policies,
                fallback: self.fallback,
                orchestrator: self.orchestrator,
                reload,
            }),
        })
    }
}
