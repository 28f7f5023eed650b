//! [`NodeBuilder`]: one node's upstreams, policies and callbacks, then its task.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::graph::{GraphBuilder, NewNode};
use super::policy::{PolicyRef, PolicySpec};
use crate::engine::{
    BlockingTask, Ctx, Extras, Named, NodeFallback, TaskRef, Tasks, TypedTask, Upstreams,
};
use crate::error::{BoxError, NodeError};
use crate::id::Node;
use crate::observe::NodeCallbacks;
use crate::onion::{Fallback, Retry};
use crate::policy::{Bulkhead, CircuitBreaker, RateLimiter};
use crate::report::NodeReport;

/// One node being defined: its upstreams and policies, then its task.
///
/// `U` is the upstreams' shape (see [`Upstreams`]) and `T` the value the task produces;
/// both are inferred. The node is added to the graph when [`task`](Self::task) or
/// [`blocking_task`](Self::blocking_task) is called.
///
/// # Policies and their defaults
/// Policies compose in a fixed onion, inner to outer: attempt (rate-limit permit +
/// bulkhead permit + task + per-attempt timeout) → retry → circuit breaker → fallback
/// (`docs/contract.md`, rule 3).
/// - [`timeout`](Self::timeout): none;
/// - [`retry`](Self::retry): none (one attempt);
/// - [`budget`](Self::budget): none (only the run's deadline, if any, applies);
/// - [`min_attempt_time`](Self::min_attempt_time): 10 ms;
/// - [`breaker`](Self::breaker), [`bulkhead`](Self::bulkhead),
///   [`rate_limit`](Self::rate_limit), [`fallback`](Self::fallback): none.
#[must_use = "a node is only added to the graph when `.task(..)` is called"]
pub struct NodeBuilder<'g, I, U, T> {
    /// Holds the node's name, pending ([`Names::begin`]), until the node is added.
    builder: &'g mut GraphBuilder<I>,
    upstreams: U,
    /// Boxed on first use: most nodes have no policy and no callback, and a small builder
    /// is cheap to move through `.after(..)` and `.task(..)`.
    extras: Option<Box<Extras<PolicySpec>>>,
    fallback: Option<NodeFallback<I, T>>,
}

impl<I, U: fmt::Debug, T> fmt::Debug for NodeBuilder<'_, I, U, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeBuilder")
            .field("name", &self.builder.names.pending())
            .field("upstreams", &self.upstreams)
            .field("fallback", &self.fallback)
            .finish_non_exhaustive()
    }
}

impl<'g, I: Send + Sync + 'static, T> NodeBuilder<'g, I, (), T> {
    /// Declares the node's upstreams: a [`Node`] handle, a tuple of 1 to 16 handles, or a
    /// `Vec` of handles of one type. The task then receives their values typed, each as an
    /// `Arc`: `(Node<User>, Node<Sku>)` gives `(Arc<User>, Arc<Sku>)`.
    ///
    /// The node's first attempt starts only after every upstream ended with a value; when one
    /// did not, the node ends `Skipped` naming it.
    pub fn after<U: Upstreams>(self, upstreams: U) -> NodeBuilder<'g, I, U, T> {
        NodeBuilder {
            builder: self.builder,
            upstreams,
            extras: self.extras,
            fallback: self.fallback,
        }
    }

    /// Declares the node's upstreams by name, for graphs built from configuration. Each
    /// must produce a `V`; the task receives their values as [`Inputs<V>`](crate::Inputs).
    ///
    /// Names may refer to nodes added later. `build()` reports an unknown name
    /// ([`BuildError::UnknownUpstream`]), an upstream of another type
    /// ([`BuildError::TypeMismatch`]) and a cycle ([`BuildError::Cycle`]).
    pub fn after_names<V, S>(
        self,
        names: impl IntoIterator<Item = S>,
    ) -> NodeBuilder<'g, I, Named<V>, T>
    where
        V: Send + Sync + 'static,
        S: Into<String>,
    {
        self.after(Named::new(names.into_iter().map(Into::into).collect()))
    }
}

impl<'g, I, T> NodeBuilder<'g, I, (), T> {
    /// A node builder for the name `builder` holds pending.
    pub(super) fn new(builder: &'g mut GraphBuilder<I>) -> Self {
        NodeBuilder {
            builder,
            upstreams: (),
            extras: None,
            fallback: None,
        }
    }
}

impl<'g, I, U, T> NodeBuilder<'g, I, U, T> {
    pub(super) fn for_branch(builder: &'g mut GraphBuilder<I>, name: &str, upstreams: U) -> Self {
        builder.names.begin(name);
        NodeBuilder {
            builder,
            upstreams,
            extras: None,
            fallback: None,
        }
    }

    fn policy(&mut self) -> &mut PolicySpec {
        self.extras
            .get_or_insert_with(Box::default)
            .policy
            .get_or_insert_with(PolicySpec::default)
    }

    fn callbacks(&mut self) -> &mut NodeCallbacks {
        self.extras
            .get_or_insert_with(Box::default)
            .callbacks
            .get_or_insert_with(Box::default)
    }
}

impl<I, U, T: Send + Sync + 'static> NodeBuilder<'_, I, U, T> {
    /// Calls `f` with the node's value when it ends `Succeeded` or `Recovered`. Several
    /// callbacks stack and fire in registration order, exactly once per run; a panicking
    /// one is caught and logged.
    pub fn on_success(mut self, f: impl Fn(&T) + Send + Sync + 'static) -> Self {
        self.callbacks().on_success(f);
        self
    }

    /// Calls `f` with the node's report entry when it ends `Failed` or `Skipped`: its
    /// [`error`](NodeReport::error), or, for a skip, the upstream that
    /// [caused](NodeReport::skipped_because) it and the [root cause](NodeReport::root_cause).
    /// Stacks like [`on_success`](Self::on_success).
    pub fn on_failure(mut self, f: impl Fn(&NodeReport<'_>) + Send + Sync + 'static) -> Self {
        self.callbacks().on_failure(f);
        self
    }

    /// Calls `f` with the node's report entry whatever its outcome, after `on_success` /
    /// `on_failure`. Stacks like [`on_success`](Self::on_success).
    pub fn on_complete(mut self, f: impl Fn(&NodeReport<'_>) + Send + Sync + 'static) -> Self {
        self.callbacks().on_complete(f);
        self
    }
}

impl<I, U, T> NodeBuilder<'_, I, U, T> {
    /// Limits each attempt to `limit`; an attempt that runs longer is dropped (it stops at
    /// its next `.await`) and fails with [`NodeError::Timeout`] naming the node, the
    /// attempt and the limit. The effective limit is `min(limit, time left before the
    /// deadline)`. A zero limit is rejected by `build()`
    /// ([`BuildError::InvalidPolicy`]).
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.policy().timeout = Some(limit);
        self
    }

    /// Retries failed attempts per `retry` (attempts, backoff, jitter, which errors, retry
    /// budget), inside the node's deadline.
    pub fn retry(mut self, retry: Retry) -> Self {
        self.policy().retry = Some(retry);
        self
    }

    /// Gives the node a time budget from its start: every attempt, backoff and bulkhead wait
    /// must end by then (and by the run's deadline, if earlier). When it runs out mid-attempt
    /// the attempt is cut at the deadline, and the node fails with
    /// [`NodeError::DeadlineExceeded`] (or [`NodeError::GaveUp`] saying how many attempts
    /// ran and how long the series took).
    pub fn budget(mut self, budget: Duration) -> Self {
        self.policy().budget = Some(budget);
        self
    }

    /// No attempt starts with less than `min` left before the deadline, and backoffs are
    /// clipped to leave it (default 10 ms).
    pub fn min_attempt_time(mut self, min: Duration) -> Self {
        self.policy().min_attempt = Some(min);
        self
    }

    /// Guards the node with a circuit breaker: a handle, or the name of one registered in
    /// the graph's [`Orchestrator`]. It is asked once before the retry series (when open,
    /// the task does not run and the node fails with [`NodeError::BreakerOpen`]) and told
    /// one result per series.
    pub fn breaker(mut self, breaker: impl Into<PolicyRef<CircuitBreaker>>) -> Self {
        self.policy().breaker = Some(breaker.into());
        self
    }

    /// Errors for which `ignore` returns `true` do not count for or against the node's
    /// breaker (the permit is released uncounted), like resilience4j's `ignoreExceptions`.
    pub fn breaker_ignore(
        mut self,
        ignore: impl Fn(&NodeError) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.policy().breaker_ignore = Some(Arc::new(ignore));
        self
    }

    /// Takes a permit of `bulkhead` (a handle, or the name of one registered in the graph's
    /// [`Orchestrator`]) for each attempt, and holds it until the attempt has really
    /// stopped.
    pub fn bulkhead(mut self, bulkhead: impl Into<PolicyRef<Bulkhead>>) -> Self {
        self.policy().bulkhead = Some(bulkhead.into());
        self
    }

    /// Takes a permit of `limiter` (a handle, or the name of one registered in the graph's
    /// [`Orchestrator`]) for each attempt, before its bulkhead permit. The wait for it
    /// counts toward the attempt's timeout; an attempt whose permit would not come within
    /// the limiter's maximum wait, or before its cut, fails at once with
    /// [`NodeError::RateLimited`] (retried by default). A limiter that could never grant a
    /// permit is rejected by `build()` ([`BuildError::InvalidPolicy`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{BoxError, Graph, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// // 2 calls per second to the mail service, each waiting up to 1 s for its turn.
    /// let mail = RateLimiter::new("mail", 2, Duration::from_secs(1))
    ///     .burst(1)
    ///     .max_wait(Duration::from_secs(1));
    /// let mut g = Graph::<()>::builder();
    /// for to in ["ann", "bob", "eve"] {
    ///     let _ = g.node(to).rate_limit(&mail).task(|_ctx, ()| async { Ok::<_, BoxError>(()) });
    /// }
    /// let report = g.build()?.run(()).await?;
    /// let ends: Vec<_> = report.nodes().map(|n| n.end().as_millis()).collect();
    /// assert_eq!(ends, [0, 500, 1_000]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn rate_limit(mut self, limiter: impl Into<PolicyRef<RateLimiter>>) -> Self {
        self.policy().rate_limit = Some(limiter.into());
        self
    }

    /// Recovers with `fallback` when the inner layers failed: the node ends `Recovered` with
    /// the fallback's value, and the report keeps the error. Replaces a fallback set before.
    pub fn fallback(mut self, fallback: Fallback<T>) -> Self {
        self.fallback = Some(NodeFallback::Plain(fallback));
        self.policy().has_fallback = true;
        self
    }
}

impl<I, U, T> NodeBuilder<'_, I, U, T>
where
    I: Send + Sync + 'static,
    U: Upstreams,
    T: Send + Sync + 'static,
{
    /// Recovers like [`fallback`](Self::fallback), with an async function that is also
    /// given the node's context and its upstream values: `|ctx, values, error| async move
    /// { .. }`. `ctx` gives the run input, the graph's state and
    /// [`ctx.attempt()`](Ctx::attempt), here the number of attempts that ran; `values` are
    /// the upstreams' values as the task receives them; `error` is what the inner layers
    /// ended with. An `Err` or a panic leaves the node `Failed` with
    /// [`NodeError::FallbackFailed`], and the fallback is cut at the node's deadline like
    /// any other. Replaces a fallback set before.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use baton_graph::{BoxError, Graph, Outcome};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<&'static str>::builder(); // the run input: a SKU
    /// let currency = g.node("currency").task(|_ctx, ()| async { Ok::<_, BoxError>("EUR") });
    /// let price = g
    ///     .node("price")
    ///     .after(currency)
    ///     .fallback_with(|ctx, currency: Arc<&'static str>, _error| async move {
    ///         // The list price for this SKU, in the currency the upstream gave.
    ///         Ok::<_, BoxError>(format!("{}: 10.00 {currency}", ctx.input()))
    ///     })
    ///     .task(|_ctx, _currency| async { Err::<String, _>("pricing service is down") });
    /// let report = g.build()?.run("sku-1").await?;
    /// assert_eq!(report.node(price).map(|n| n.outcome()), Some(Outcome::Recovered));
    /// assert_eq!(report.get(price).map(String::as_str), Some("sku-1: 10.00 EUR"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn fallback_with<F, Fut, E>(mut self, f: F) -> Self
    where
        F: Fn(Ctx<I>, U::Values, Arc<NodeError>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        self.fallback = Some(NodeFallback::with_ctx::<U, _, _, _>(f));
        self.policy().has_fallback = true;
        self
    }
}

impl<I, U, T> NodeBuilder<'_, I, U, T>
where
    I: Send + Sync + 'static,
    U: Upstreams,
    T: Send + Sync + 'static,
{
    /// Sets the node's task, adds the node to the graph, and returns its typed handle.
    ///
    /// The task is an `async` closure `|ctx, values| async move { .. }` returning
    /// `Result<T, E>` with `E: Into<BoxError>`. It is `Fn`, not `FnOnce`: a retrying node
    /// calls it once per attempt, each time with a fresh [`Ctx`] and the same upstream
    /// values. A panic inside it (before or after its first `.await`) is caught and becomes
    /// the node's `Failed` outcome with the panic message.
    ///
    /// Between `.await`s the task holds the run's driver, like any future holds its tokio
    /// worker, and a run has at most as many drivers draining its ready nodes as the
    /// runtime has workers: work that blocks its thread (file or socket I/O without
    /// `.await`, long computations, `block_in_place`) belongs in
    /// [`blocking_task`](Self::blocking_task), whose nodes wait like any other. By default
    /// ([`StartMode::Inline`](crate::StartMode::Inline)), or where one thread runs every
    /// task, the run's first nodes start in the task that awaits the run
    /// and move to a task of their own at their first `.await` that waits (see
    /// [`Run`](crate::Run)).
    pub fn task<F, Fut, E>(self, task: F) -> Node<T>
    where
        F: Fn(Ctx<I>, U::Values) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        let task = TypedTask::<U, _, _, _, _>::new(task);
        self.finish(|tasks, fallback| match fallback {
            None => tasks.push(task),
            Some(fallback) => tasks.push(task.with_fallback(fallback)),
        })
    }

    /// Sets a synchronous (blocking) task, run on tokio's blocking pool, adds the node and
    /// returns its handle.
    ///
    /// When an attempt times out (or the run is cancelled) the node moves on at once; the
    /// closure cannot be stopped from outside, so its thread keeps running until it returns
    /// (the one exception to "no attempt outlives its run"). The report counts such attempts as
    /// abandoned ([`NodeReport::abandoned`](crate::NodeReport::abandoned)), and
    /// [`Ctx::cancellation_token`] is cancelled so that a closure that checks it can stop
    /// early. A bulkhead permit stays held until the closure returns. An attempt abandoned
    /// while it still waited for a thread of the blocking pool never runs.
    pub fn blocking_task<F, E>(self, task: F) -> Node<T>
    where
        F: Fn(Ctx<I>, U::Values) -> Result<T, E> + Send + Sync + 'static,
        E: Into<BoxError> + 'static,
    {
        self.finish(|tasks, fallback| {
            tasks.push(BlockingTask::<I, U, _, _, _>::new(task, fallback))
        })
    }

    /// Adds the node, its task stored by `store` (given the node's fallback, if any).
    fn finish(
        self,
        store: impl FnOnce(&mut Tasks, Option<NodeFallback<I, T>>) -> TaskRef<I>,
    ) -> Node<T> {
        let NodeBuilder {
            builder,
            upstreams,
            extras,
            fallback,
        } = self;
        let graph = builder.id;
        builder.declare(&upstreams);
        let node = NewNode {
            task: store(&mut builder.tasks, fallback),
            extras,
        };
        let index = builder.add(node);
        Node::new(graph, index)
    }
}
