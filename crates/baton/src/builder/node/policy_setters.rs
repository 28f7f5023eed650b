//! A node's policies: timeout, retry, budget, breaker, bulkhead and fallback.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::NodeBuilder;
use crate::builder::policy::PolicyRef;
use crate::engine::{Ctx, NodeFallback, Upstreams};
use crate::error::{BoxError, NodeError};
use crate::onion::{IntoFallback, Retry};
use crate::policy::{Bulkhead, Chaos, CircuitBreaker, Hedge, RateLimiter};

impl<I, U, T> NodeBuilder<'_, I, U, T> {
    /// Limits each attempt to `limit`; an attempt that runs longer is dropped (it stops at
    /// its next `.await`) and fails with [`NodeError::Timeout`] naming the node, the
    /// attempt and the limit. The effective limit is `min(limit, time left before the
    /// deadline)`. A zero limit is rejected by `build()`
    /// ([`BuildError::InvalidPolicy`](crate::BuildError::InvalidPolicy)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{BoxError, Graph, Outcome};
    /// use tokio::time::sleep;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// let slow = g.node("slow").timeout(Duration::from_millis(50)).task(|_ctx, ()| async {
    ///     sleep(Duration::from_secs(1)).await;
    ///     Ok::<_, BoxError>(())
    /// });
    /// let report = g.build()?.run(()).await?;
    /// let slow = report.node(slow).unwrap();
    /// assert_eq!(slow.outcome(), Outcome::Failed);
    /// assert_eq!(slow.error().map(|e| e.kind()), Some("timeout"));
    /// assert_eq!(slow.end(), Duration::from_millis(50));
    /// # Ok(())
    /// # }
    /// ```
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.policy().timeout = Some(limit);
        self
    }

    /// Takes the policies of the orchestrator's policy set `name` (from a configuration:
    /// [`Orchestrator::apply`](crate::Orchestrator::apply)) when the graph is built, as
    /// the set is then; a policy also given to this node keeps the node's. A set the
    /// orchestrator does not have fails `build()`
    /// ([`BuildError::UnknownPolicy`](crate::BuildError::UnknownPolicy)).
    ///
    /// ```
    /// use baton_graph::{BoxError, Config, Orchestrator};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let text = r#"{ "policies": { "stock": { "timeout": "50ms" } } }"#;
    /// let orch = Orchestrator::new();
    /// orch.apply(&Config::from_deserializer(&mut serde_json::Deserializer::from_str(text))?)?;
    /// let mut g = orch.graph::<()>();
    /// let stock = g.node("stock").policy_set("stock").task(|_ctx, ()| async {
    ///     tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    ///     Ok::<_, BoxError>(())
    /// });
    /// let report = g.build()?.run(()).await?;
    /// assert_eq!(report.node(stock).unwrap().error().map(|e| e.kind()), Some("timeout"));
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "serde")]
    pub fn policy_set(mut self, name: impl Into<String>) -> Self {
        self.policy().policy_set = Some(name.into());
        self
    }

    /// Retries failed attempts per `retry` (attempts, backoff, jitter, which errors, retry
    /// budget), inside the node's deadline. [`Retry::new(n)`](Retry::new) counts attempts:
    /// `Retry::new(3)` is the first attempt and at most 2 retries.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{Backoff, BoxError, Graph, Retry};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// let stock = g
    ///     .node("stock")
    ///     .retry(Retry::new(3).backoff(Backoff::constant(Duration::from_millis(100))))
    ///     .task(|_ctx, ()| async { Err::<u32, BoxError>("503".into()) });
    /// let report = g.build()?.run(()).await?;
    /// let stock = report.node(stock).unwrap();
    /// assert_eq!(stock.attempts(), 3); // the first attempt and two retries
    /// assert_eq!(stock.error().map(|e| e.kind()), Some("gave_up"));
    /// assert_eq!(stock.end(), Duration::from_millis(200)); // two backoffs of 100 ms
    /// # Ok(())
    /// # }
    /// ```
    pub fn retry(mut self, retry: Retry) -> Self {
        self.policy().retry = Some(retry);
        self
    }

    /// Gives the node a time budget from its start: every attempt, backoff and bulkhead wait
    /// must end by then (and by the run's deadline, if earlier). When it runs out mid-attempt
    /// the attempt is cut at the deadline, and the node fails with
    /// [`NodeError::DeadlineExceeded`] (or [`NodeError::GaveUp`] saying how many attempts
    /// ran and how long the series took).
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{Backoff, BoxError, Graph, Retry};
    /// use tokio::time::sleep;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// let quote = g
    ///     .node("quote")
    ///     .timeout(Duration::from_millis(100))
    ///     .retry(Retry::new(10).backoff(Backoff::constant(Duration::from_millis(50))))
    ///     .budget(Duration::from_millis(300)) // all attempts and backoffs together
    ///     .task(|_ctx, ()| async {
    ///         sleep(Duration::from_secs(1)).await; // every attempt times out
    ///         Ok::<_, BoxError>(())
    ///     });
    /// let report = g.build()?.run(()).await?;
    /// let quote = report.node(quote).unwrap();
    /// assert_eq!(quote.end(), Duration::from_millis(300));
    /// assert_eq!(quote.attempts(), 3);
    /// assert_eq!(quote.error().map(|e| e.kind()), Some("gave_up"));
    /// let starts: Vec<_> = quote.attempt_log().iter().map(|a| a.start.as_millis()).collect();
    /// // The last backoff is clipped to leave the minimum attempt time (10 ms).
    /// assert_eq!(starts, [0, 150, 290]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn budget(mut self, budget: Duration) -> Self {
        self.policy().budget = Some(budget);
        self
    }

    /// No first attempt starts with less than `min` left before the deadline, and backoffs
    /// are clipped to leave it (default 10 ms). A retry whose backoff timer fired late
    /// starts with whatever is left, as the series' last.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{BoxError, Graph, RunOptions};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// let quote = g
    ///     .node("quote")
    ///     .min_attempt_time(Duration::from_millis(100)) // a call takes at least this long
    ///     .task(|_ctx, ()| async { Ok::<_, BoxError>(1_u32) });
    /// let options = RunOptions::new().timeout(Duration::from_millis(50));
    /// let report = g.build()?.run_with((), options).await?;
    /// let quote = report.node(quote).unwrap();
    /// assert_eq!(quote.attempts(), 0); // 50 ms left: not worth starting
    /// assert_eq!(quote.error().map(|e| e.kind()), Some("deadline_exceeded"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn min_attempt_time(mut self, min: Duration) -> Self {
        self.policy().min_attempt = Some(min);
        self
    }

    /// Guards the node with a circuit breaker: a handle, or the name of one registered in
    /// the graph's [`Orchestrator`](crate::Orchestrator). It is asked once before the retry series (when open,
    /// the task does not run and the node fails with [`NodeError::BreakerOpen`]) and told
    /// one result per series.
    ///
    /// ```
    /// use baton_graph::{BoxError, CircuitBreaker, Graph};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let inventory = CircuitBreaker::builder("inventory").consecutive_failures(2).build()?;
    /// let mut g = Graph::<()>::builder();
    /// let stock = g
    ///     .node("stock")
    ///     .breaker(&inventory)
    ///     .task(|_ctx, ()| async { Err::<u32, BoxError>("503".into()) });
    /// let graph = g.build()?;
    /// graph.run(()).await?;
    /// graph.run(()).await?; // the second failure in a row opens it
    /// assert!(inventory.is_open());
    /// let report = graph.run(()).await?;
    /// let stock = report.node(stock).unwrap();
    /// assert_eq!(stock.error().map(|e| e.kind()), Some("breaker_open"));
    /// assert_eq!(stock.attempts(), 0); // the task did not run
    /// # Ok(())
    /// # }
    /// ```
    pub fn breaker(mut self, breaker: impl Into<PolicyRef<CircuitBreaker>>) -> Self {
        self.policy().breaker = Some(breaker.into());
        self
    }

    /// Errors for which `ignore` returns `true` do not count for or against the node's
    /// breaker (the permit is released uncounted), like resilience4j's `ignoreExceptions`.
    ///
    /// ```
    /// use baton_graph::{BoxError, CircuitBreaker, Graph, NodeError};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let users = CircuitBreaker::builder("users").consecutive_failures(1).build()?;
    /// let mut g = Graph::<()>::builder();
    /// g.node("user")
    ///     .breaker(&users)
    ///     // A "404 not found" is the caller's problem, not the service's.
    ///     .breaker_ignore(|e: &NodeError| e.to_string().contains("404"))
    ///     .task(|_ctx, ()| async { Err::<u32, BoxError>("404 not found".into()) });
    /// g.build()?.run(()).await?;
    /// assert!(!users.is_open());
    /// # Ok(())
    /// # }
    /// ```
    pub fn breaker_ignore(
        mut self,
        ignore: impl Fn(&NodeError) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.policy().breaker_ignore = Some(Arc::new(ignore));
        self
    }

    /// Takes a permit of `bulkhead` (a handle, or the name of one registered in the graph's
    /// [`Orchestrator`](crate::Orchestrator)) for each attempt, and holds it until the
    /// attempt has really stopped. Permits go first come, first served, as tokio's semaphore
    /// gives them: a retry asks again, behind the attempts already waiting.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{BoxError, Bulkhead, Graph};
    /// use tokio::time::sleep;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let db = Bulkhead::new("db", 1, Duration::from_secs(1)); // one query at a time
    /// let mut g = Graph::<()>::builder();
    /// for name in ["orders", "invoices"] {
    ///     g.node(name).bulkhead(&db).task(|_ctx, ()| async {
    ///         sleep(Duration::from_millis(100)).await;
    ///         Ok::<_, BoxError>(())
    ///     });
    /// }
    /// let report = g.build()?.run(()).await?;
    /// assert_eq!(report.makespan(), Duration::from_millis(200)); // one after the other
    /// let second = report.by_name("invoices").unwrap();
    /// assert_eq!(second.attempt_log()[0].permit_wait, Duration::from_millis(100));
    /// # Ok(())
    /// # }
    /// ```
    pub fn bulkhead(mut self, bulkhead: impl Into<PolicyRef<Bulkhead>>) -> Self {
        self.policy().bulkhead = Some(bulkhead.into());
        self
    }

    /// Takes a permit of `limiter` (a handle, or the name of one registered in the graph's
    /// [`Orchestrator`](crate::Orchestrator)) for each attempt, before its bulkhead permit.
    /// The wait for it counts toward the attempt's timeout; an attempt whose permit would
    /// not come within the limiter's maximum wait, or before its cut, fails at once with
    /// [`NodeError::RateLimited`] (retried by default). A limiter that could never grant a
    /// permit is rejected by `build()` ([`BuildError::InvalidPolicy`](crate::BuildError::InvalidPolicy)).
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

    /// Hedges slow attempts: when an attempt has not ended after `hedge`'s delay, another
    /// starts in parallel, and the first to succeed wins while the others are dropped
    /// (see [`Hedge`] for how hedges count against the retry, its budget, the deadline
    /// and the breaker). The attempt log marks each hedge and each cancelled loser; the
    /// report's [`NodeReport::winner`](crate::NodeReport::winner) is the attempt that won.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{BoxError, Graph, Hedge};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// let price = g
    ///     .node("price")
    ///     .hedge(Hedge::new(Duration::from_millis(20)))
    ///     .task(|ctx, ()| async move {
    ///         // The first call is stuck; the hedge, 20 ms later, answers in 5 ms.
    ///         let took = if ctx.attempt() == 1 { 1_000 } else { 5 };
    ///         tokio::time::sleep(Duration::from_millis(took)).await;
    ///         Ok::<_, BoxError>(ctx.attempt())
    ///     });
    /// let report = g.build()?.run(()).await?;
    /// assert_eq!(report.get(price), Some(&2));
    /// let node = report.node(price).unwrap();
    /// assert_eq!((node.winner(), node.end()), (Some(2), Duration::from_millis(25)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn hedge(mut self, hedge: Hedge) -> Self {
        self.policy().hedge = Some(hedge);
        self
    }

    /// Injects faults into the node's attempts per `chaos` (latency before the task, an
    /// error instead of it, at configured rates, from a seeded generator): for testing a
    /// graph's resilience on the paused clock. The injected latency counts toward the
    /// attempt's timeout; the attempt log records what was injected.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{BoxError, Chaos, Graph, Retry};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// // Every attempt fails: the node's own retry cannot recover.
    /// let chaos = Chaos::new(1).error(1.0);
    /// let mut g = Graph::<()>::builder();
    /// let price = g
    ///     .node("price")
    ///     .chaos(&chaos)
    ///     .retry(Retry::new(2))
    ///     .task(|ctx, ()| async move { Ok::<_, BoxError>(ctx.attempt()) });
    /// let graph = g.build()?;
    /// let report = graph.run(()).await?;
    /// assert_eq!(report.get(price), None, "both attempts were failed by chaos");
    /// chaos.set_enabled(false);
    /// assert_eq!(graph.run(()).await?.get(price), Some(&1));
    /// # Ok(())
    /// # }
    /// ```
    pub fn chaos(mut self, chaos: &Chaos) -> Self {
        self.policy().chaos = Some(chaos.clone());
        self
    }

    /// Recovers with `fallback` when the inner layers failed: the node ends `Recovered` with
    /// the fallback's value, and the report keeps the error. Replaces a fallback set before.
    ///
    /// `fallback` is a [`Fallback<T>`](crate::Fallback) or a plain `T` ([`IntoFallback`]).
    /// The task sets the node's value type, and the fallback must produce the same.
    ///
    /// ```
    /// use baton_graph::{BoxError, Graph, Outcome};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// let price = g
    ///     .node("price")
    ///     .fallback(0_u64) // as `Fallback::value(0_u64)`
    ///     .task(|_ctx, ()| async { Err::<u64, _>("pricing service is down") });
    /// let report = g.build()?.run(()).await?;
    /// assert_eq!(report.get(price), Some(&0));
    /// assert_eq!(report.node(price).map(|n| n.outcome()), Some(Outcome::Recovered));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// A fallback of the wrong type is an error at the fallback: "`Fallback<&str>` is not a
    /// fallback for this node, whose task returns `User`".
    ///
    /// ```compile_fail,E0277
    /// # use baton_graph::{BoxError, Fallback, Graph};
    /// # struct User;
    /// # let mut g = Graph::<()>::builder();
    /// g.node("user")
    ///     .fallback(Fallback::value("anonymous")) // error[E0277] here
    ///     .task(|_ctx, ()| async { Ok::<_, BoxError>(User) });
    /// ```
    ///
    /// A task that only fails, after a `Fallback`, leaves the type open ("type annotations
    /// needed"): write `Err::<u64, _>(..)` in it.
    ///
    /// ```compile_fail,E0283
    /// # use baton_graph::{BoxError, Fallback, Graph};
    /// # let mut g = Graph::<()>::builder();
    /// g.node("price")
    ///     .fallback(Fallback::value(0_u64))
    ///     .task(|_ctx, ()| async { Err::<_, BoxError>("down".into()) }); // error[E0283]
    /// ```
    pub fn fallback(mut self, fallback: impl IntoFallback<T>) -> Self {
        self.fallback = Some(NodeFallback::Plain(fallback.__into_fallback()));
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
