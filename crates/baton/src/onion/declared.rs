//! [`Policies`]: a node's or a call's policies as declared, one value for both, and
//! [`PolicyRef`], a circuit breaker, bulkhead or rate limiter given as a handle or a name.
//!
//! The per-policy setters are defined once, in `policy_setters!`, and generated on
//! [`Policies`], [`NodeBuilder`](crate::NodeBuilder) and [`PipelineBuilder`](super::PipelineBuilder)
//! as inherent methods, so the three take the same parameter types and a user needs no
//! trait in scope to call them.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::policies::ResolvedPolicies;
use super::{ErrorFilter, Retry};
use crate::error::BuildError;
use crate::orchestrator::{NameTaken, Orchestrator};
use crate::policy::{Bulkhead, Chaos, CircuitBreaker, Hedge, RateLimiter};
use crate::util::same_opt;

/// A circuit breaker, bulkhead or rate limiter given to a node or a pipeline: the handle
/// itself, or its name, looked up in the [`Orchestrator`] when the graph or the pipeline is
/// built.
///
/// Converts from a handle, such as `CircuitBreaker` or `&CircuitBreaker`, and from a name,
/// a `&str` or a `String`.
#[derive(Debug, Clone)]
pub enum PolicyRef<H> {
    /// This handle; registered in the orchestrator under its name at `build()`.
    Handle(H),
    /// The handle the orchestrator has under this name.
    Name(String),
}

impl<H> From<&str> for PolicyRef<H> {
    fn from(name: &str) -> Self {
        PolicyRef::Name(name.to_owned())
    }
}

impl<H> From<String> for PolicyRef<H> {
    fn from(name: String) -> Self {
        PolicyRef::Name(name)
    }
}

macro_rules! handle_ref {
    ($($H:ty),*) => {$(
        impl From<$H> for PolicyRef<$H> {
            fn from(h: $H) -> Self {
                PolicyRef::Handle(h)
            }
        }
        impl From<&$H> for PolicyRef<$H> {
            fn from(h: &$H) -> Self {
                PolicyRef::Handle(h.clone())
            }
        }
    )*};
}
handle_ref!(CircuitBreaker, Bulkhead, RateLimiter);

impl<H> PolicyRef<H> {
    /// The same handle, as `same` decides, or the same name.
    fn same(&self, other: &Self, same: impl Fn(&H, &H) -> bool) -> bool {
        match (self, other) {
            (PolicyRef::Handle(a), PolicyRef::Handle(b)) => same(a, b),
            (PolicyRef::Name(a), PolicyRef::Name(b)) => a == b,
            _ => false,
        }
    }
}

/// The policies of a node or of a pipeline's calls: per-attempt timeout, retry, budget,
/// minimum attempt time, circuit breaker and the errors it ignores, bulkhead, rate
/// limiter, hedge and injected faults. Built once with the same setters as
/// [`NodeBuilder`](crate::NodeBuilder) and [`PipelineBuilder`](crate::pipeline::PipelineBuilder),
/// and given to either with `.policies(..)`; setters called after it refine it for that
/// node or pipeline only.
///
/// A breaker, bulkhead or rate limiter is kept as given, a handle or a name, in a
/// [`PolicyRef`]; a name is looked up in the orchestrator when the graph or the pipeline is
/// built. Nothing is checked before then: `build()` reports a policy that cannot work as
/// [`BuildError::InvalidPolicy`] naming the node.
///
/// The fallback is not here: its type is the node's value type, so it stays with the node,
/// in [`NodeBuilder::fallback`](crate::NodeBuilder::fallback), or the pipeline, in
/// [`PipelineBuilder::fallback`](crate::pipeline::PipelineBuilder::fallback).
///
/// Two values are equal when they declare the same policies: equal settings, the same names
/// or the same handles by identity, not by configuration, and the same closures by pointer.
///
/// # Defaults
/// [`Policies::new`], like `default()`, declares nothing: no timeout, one attempt, no
/// budget, a minimum attempt time of 10 ms, no breaker, bulkhead, rate limiter, hedge or
/// injected fault.
///
/// ```
/// use std::time::Duration;
/// use baton_graph::{BoxError, CircuitBreaker, Graph, Pipeline, Policies, Retry};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let inventory = CircuitBreaker::builder("inventory").consecutive_failures(5).build()?;
/// let calls = Policies::new()
///     .timeout(Duration::from_millis(300))
///     .retry(Retry::new(3))
///     .breaker(&inventory);
/// assert_eq!(calls, calls.clone());
/// assert_ne!(calls, calls.clone().retry(Retry::new(2)));
///
/// let mut g = Graph::<()>::builder();
/// let stock = g
///     .node("stock")
///     .policies(&calls)
///     .task(|_ctx, ()| async { Err::<u32, BoxError>("503".into()) });
/// let reserve = g
///     .node("reserve")
///     .policies(&calls)
///     .retry(Retry::new(1)) // this node only: never retried
///     .task(|_ctx, ()| async { Err::<u32, BoxError>("503".into()) });
/// let report = g.build()?.run(()).await?;
/// assert_eq!(report.node(stock).map(|n| n.attempts()), Some(3));
/// assert_eq!(report.node(reserve).map(|n| n.attempts()), Some(1));
///
/// // The same policies around a single call.
/// let pipeline = Pipeline::<u32>::builder("stock").policies(calls).build()?;
/// let call = pipeline.run(|_| async { Err::<u32, BoxError>("503".into()) }).await;
/// assert_eq!(call.attempts(), 3);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
#[must_use = "give the policies to a node or a pipeline with `.policies(..)`"]
pub struct Policies {
    pub(crate) timeout: Option<Duration>,
    pub(crate) retry: Option<Retry>,
    pub(crate) budget: Option<Duration>,
    pub(crate) min_attempt: Option<Duration>,
    pub(crate) breaker: Option<PolicyRef<CircuitBreaker>>,
    pub(crate) breaker_ignore: Option<ErrorFilter>,
    pub(crate) bulkhead: Option<PolicyRef<Bulkhead>>,
    pub(crate) rate_limit: Option<PolicyRef<RateLimiter>>,
    pub(crate) hedge: Option<Hedge>,
    pub(crate) chaos: Option<Chaos>,
    /// The orchestrator's named policy set that fills what these do not set.
    #[cfg(feature = "serde")]
    pub(crate) policy_set: Option<String>,
}

/// The per-policy setters of [`Policies`], [`NodeBuilder`](crate::NodeBuilder) and
/// [`PipelineBuilder`](crate::pipeline::PipelineBuilder): generated as inherent methods of the type
/// whose `impl` block invokes it, which has a `fn policies_mut(&mut self) -> &mut Policies`.
macro_rules! policy_setters {
    () => {
        /// Limits each attempt to `limit`. An attempt that runs longer is dropped, so it
        /// stops at its next `.await`, and fails with
        /// [`NodeError::Timeout`](crate::NodeError::Timeout) naming the node or pipeline,
        /// the attempt and the limit. The effective limit is
        /// `min(limit, time left before the deadline)`. A zero limit is rejected by
        /// `build()` with [`BuildError::InvalidPolicy`](crate::BuildError::InvalidPolicy).
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
        pub fn timeout(mut self, limit: ::std::time::Duration) -> Self {
            self.policies_mut().timeout = Some(limit);
            self
        }

        /// Retries failed attempts per `retry`, inside the deadline. `retry` says the
        /// attempts, backoff, jitter, which errors, and the retry budget.
        /// [`Retry::new(n)`](crate::Retry::new) counts attempts: `Retry::new(3)` is the
        /// first attempt and at most 2 retries.
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
        pub fn retry(mut self, retry: $crate::onion::Retry) -> Self {
            self.policies_mut().retry = Some(retry);
            self
        }

        /// Gives the node a time budget from its start; a pipeline gives one to each call.
        /// Every attempt, backoff and bulkhead wait must end by then, and by the run's
        /// deadline if that is earlier. When it runs out mid-attempt the attempt is cut at
        /// the deadline, and the series fails with
        /// [`NodeError::DeadlineExceeded`](crate::NodeError::DeadlineExceeded), or with
        /// [`NodeError::GaveUp`](crate::NodeError::GaveUp) saying how many attempts ran and
        /// how long the series took.
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
        pub fn budget(mut self, budget: ::std::time::Duration) -> Self {
            self.policies_mut().budget = Some(budget);
            self
        }

        /// No first attempt starts with less than `min` left before the deadline, and
        /// backoffs are clipped to leave it. The default is 10 ms. A retry whose backoff
        /// timer fired late starts with whatever is left, as the series' last.
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
        pub fn min_attempt_time(mut self, min: ::std::time::Duration) -> Self {
            self.policies_mut().min_attempt = Some(min);
            self
        }

        /// Guards the node, or each call, with a circuit breaker: a handle, or the name of
        /// one registered in the graph's or the pipeline's
        /// [`Orchestrator`](crate::Orchestrator). It is asked once before the retry series
        /// and told one result per series. When it is open, the task does not run and the
        /// series fails with [`NodeError::BreakerOpen`](crate::NodeError::BreakerOpen).
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
        pub fn breaker(
            mut self,
            breaker: impl Into<$crate::onion::PolicyRef<$crate::policy::CircuitBreaker>>,
        ) -> Self {
            self.policies_mut().breaker = Some(breaker.into());
            self
        }

        /// Errors for which `ignore` returns `true` do not count for or against the
        /// breaker: the permit is released uncounted, like resilience4j's
        /// `ignoreExceptions`.
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
            ignore: impl Fn(&$crate::error::NodeError) -> bool + Send + Sync + 'static,
        ) -> Self {
            self.policies_mut().breaker_ignore = Some(::std::sync::Arc::new(ignore));
            self
        }

        /// Takes a permit of `bulkhead` for each attempt, and holds it until the attempt
        /// has really stopped. `bulkhead` is a handle, or the name of one registered in the
        /// [`Orchestrator`](crate::Orchestrator). Permits go first come, first served, as
        /// tokio's semaphore gives them: a retry asks again, behind the attempts already
        /// waiting.
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
        pub fn bulkhead(
            mut self,
            bulkhead: impl Into<$crate::onion::PolicyRef<$crate::policy::Bulkhead>>,
        ) -> Self {
            self.policies_mut().bulkhead = Some(bulkhead.into());
            self
        }

        /// Takes a permit of `limiter` for each attempt, before its bulkhead permit.
        /// `limiter` is a handle, or the name of one registered in the
        /// [`Orchestrator`](crate::Orchestrator). The wait for it counts toward the
        /// attempt's timeout. An attempt whose permit would not come within the limiter's
        /// maximum wait, or before its cut, fails at once with
        /// [`NodeError::RateLimited`](crate::NodeError::RateLimited), which is retried by
        /// default. A limiter that could never grant a permit is rejected by `build()` with
        /// [`BuildError::InvalidPolicy`](crate::BuildError::InvalidPolicy).
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
        pub fn rate_limit(
            mut self,
            limiter: impl Into<$crate::onion::PolicyRef<$crate::policy::RateLimiter>>,
        ) -> Self {
            self.policies_mut().rate_limit = Some(limiter.into());
            self
        }

        /// Hedges slow attempts: when an attempt has not ended after `hedge`'s delay,
        /// another starts in parallel, and the first to succeed wins while the others are
        /// dropped. [`Hedge`](crate::Hedge) says how hedges count against the retry, its
        /// budget, the deadline and the breaker. The attempt log marks each hedge and each
        /// cancelled loser; the report's [`NodeReport::winner`](crate::NodeReport::winner)
        /// is the attempt that won.
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
        pub fn hedge(mut self, hedge: $crate::policy::Hedge) -> Self {
            self.policies_mut().hedge = Some(hedge);
            self
        }

        /// Injects faults into the attempts per `chaos`: latency before the task, or an
        /// error instead of it, at configured rates, from a seeded generator. It is for
        /// testing a graph's resilience on the paused clock. The injected latency counts
        /// toward the attempt's timeout; the attempt log records what was injected.
        ///
        /// ```
        /// use std::time::Duration;
        /// use baton_graph::{BoxError, Graph, Retry, chaos::Chaos};
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
        pub fn chaos(mut self, chaos: &$crate::policy::Chaos) -> Self {
            self.policies_mut().chaos = Some(chaos.clone());
            self
        }

        /// Takes the policies of the orchestrator's policy set `name`, as a configuration
        /// gives them through [`Orchestrator::apply`](crate::Orchestrator::apply). A policy
        /// set here too keeps its own value, whether set before or after. When a later
        /// `apply` changes the set, the runs and calls that start after it take the new
        /// one; those in flight keep theirs. A set the orchestrator does not have fails the
        /// build, as does any set when there is no orchestrator, with
        /// [`BuildError::UnknownPolicy`](crate::BuildError::UnknownPolicy).
        ///
        /// ```
        /// use std::time::Duration;
        /// use baton_graph::{BoxError, Orchestrator, Pipeline, config::Config};
        ///
        /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
        /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
        /// let text = r#"{ "policies": { "stock": {
        ///     "timeout": "50ms",
        ///     "retry": { "max_attempts": 3, "backoff": { "constant": "10ms" } }
        /// } } }"#;
        /// let orch = Orchestrator::new();
        /// orch.apply(&Config::from_deserializer(&mut serde_json::Deserializer::from_str(text))?)?;
        ///
        /// let mut g = orch.graph::<()>();
        /// let stock = g.node("stock").policy_set("stock").task(|_ctx, ()| async {
        ///     tokio::time::sleep(Duration::from_secs(1)).await;
        ///     Ok::<_, BoxError>(())
        /// });
        /// let report = g.build()?.run(()).await?;
        /// let stock = report.node(stock).unwrap();
        /// // Three attempts of 50 ms, 10 ms apart.
        /// assert_eq!((stock.attempts(), stock.end()), (3, Duration::from_millis(170)));
        ///
        /// let call = Pipeline::<u32>::builder("stock").orchestrator(&orch).policy_set("stock");
        /// let call = call.build()?.run(|_| async { Err::<u32, BoxError>("503".into()) }).await;
        /// assert_eq!(call.attempts(), 3);
        /// # Ok(())
        /// # }
        /// ```
        #[cfg(feature = "serde")]
        pub fn policy_set(mut self, name: impl Into<String>) -> Self {
            self.policies_mut().policy_set = Some(name.into());
            self
        }
    };
}
pub(crate) use policy_setters;

impl Policies {
    /// No policy: the defaults listed above. The same as `Policies::default()`.
    pub fn new() -> Self {
        Policies::default()
    }

    fn policies_mut(&mut self) -> &mut Policies {
        self
    }

    policy_setters!();

    /// Whether no policy is declared.
    pub(crate) fn is_empty(&self) -> bool {
        *self == Policies::default()
    }

    /// Validates the policies of `node` and resolves its breaker, bulkhead and rate limiter:
    /// registered in `orchestrator` when given as handles, looked up there when given by
    /// name. Without an orchestrator, handles are used as they are.
    ///
    /// # Errors
    /// [`BuildError::InvalidPolicy`] for a policy that cannot work,
    /// [`BuildError::PolicyConflict`] when another policy of the orchestrator has the name
    /// of one of these, and [`BuildError::UnknownPolicy`] for a name it does not know, or
    /// for any name without an orchestrator. Each names `node`.
    pub(crate) fn resolve(
        mut self,
        node: &str,
        orchestrator: Option<&Orchestrator>,
    ) -> Result<ResolvedPolicies, BuildError> {
        #[cfg(feature = "serde")]
        if self.policy_set.is_some() {
            let declared = Arc::new(self.clone());
            let mut resolved = self
                .with_policy_set(node, orchestrator)?
                .resolve(node, orchestrator)?;
            resolved.named_set = Some(declared);
            return Ok(resolved);
        }
        let (breaker, bulkhead, rate_limit) = (
            self.breaker.take(),
            self.bulkhead.take(),
            self.rate_limit.take(),
        );
        let policies = ResolvedPolicies::unguarded(self);
        policies.validate().map_err(|e| e.for_node(node))?;
        if let (Some(orch), Some(budget)) = (orchestrator, policies.retry_budget()) {
            orch.add_retry_budget(budget)
                .map_err(|taken| conflict(node, taken))?;
        }
        let breaker = lookup(
            node,
            breaker,
            "circuit breaker",
            orchestrator.map(|o| {
                (
                    |b: &CircuitBreaker| o.add_breaker(b),
                    |n: &str| o.breaker(n),
                )
            }),
        )?;
        let bulkhead = lookup(
            node,
            bulkhead,
            "bulkhead",
            orchestrator.map(|o| (|b: &Bulkhead| o.add_bulkhead(b), |n: &str| o.bulkhead(n))),
        )?;
        let rate_limit = lookup(
            node,
            rate_limit,
            "rate limiter",
            orchestrator.map(|o| {
                (
                    |l: &RateLimiter| o.add_rate_limiter(l),
                    |n: &str| o.rate_limiter(n),
                )
            }),
        )?;
        let policies = policies.guarded_by(breaker, bulkhead, rate_limit);
        // The bulkhead and the rate limiter may come from the orchestrator: check them now.
        policies.validate().map_err(|e| e.for_node(node))?;
        Ok(policies)
    }
}

/// The handle `declared` refers to: registered in the orchestrator with `add` when given as
/// a handle, looked up there with `get` when given by name.
fn lookup<H>(
    node: &str,
    declared: Option<PolicyRef<H>>,
    kind: &'static str,
    orchestrator: Option<(
        impl FnOnce(&H) -> Result<(), NameTaken>,
        impl FnOnce(&str) -> Option<H>,
    )>,
) -> Result<Option<H>, BuildError> {
    let unknown = |name| BuildError::UnknownPolicy {
        node: node.to_owned(),
        kind,
        name,
    };
    match (declared, orchestrator) {
        (None, _) => Ok(None),
        (Some(PolicyRef::Handle(h)), None) => Ok(Some(h)),
        (Some(PolicyRef::Handle(h)), Some((add, _))) => {
            add(&h).map_err(|t| conflict(node, t))?;
            Ok(Some(h))
        }
        (Some(PolicyRef::Name(name)), None) => Err(unknown(name)),
        (Some(PolicyRef::Name(name)), Some((_, get))) => {
            get(&name).map(Some).ok_or_else(|| unknown(name))
        }
    }
}

fn conflict(node: &str, taken: NameTaken) -> BuildError {
    BuildError::PolicyConflict {
        node: node.to_owned(),
        kind: taken.kind,
        name: taken.name,
    }
}

impl From<&Policies> for Policies {
    fn from(policies: &Policies) -> Self {
        policies.clone()
    }
}

impl PartialEq for Policies {
    fn eq(&self, other: &Self) -> bool {
        self.timeout == other.timeout
            && self.budget == other.budget
            && self.min_attempt == other.min_attempt
            && same_opt(&self.retry, &other.retry, Retry::same)
            && same_opt(&self.breaker, &other.breaker, |a, b| {
                a.same(b, CircuitBreaker::same_as)
            })
            && same_opt(&self.breaker_ignore, &other.breaker_ignore, |a, b| {
                Arc::ptr_eq(a, b)
            })
            && same_opt(&self.bulkhead, &other.bulkhead, |a, b| {
                a.same(b, Bulkhead::same_as)
            })
            && same_opt(&self.rate_limit, &other.rate_limit, |a, b| {
                a.same(b, RateLimiter::same_as)
            })
            && same_opt(&self.hedge, &other.hedge, Hedge::same_as)
            && same_opt(&self.chaos, &other.chaos, Chaos::same_as)
            && self.same_set(other)
    }
}

impl Policies {
    /// Whether both name the same policy set, or both name none.
    #[cfg(not(feature = "serde"))]
    fn same_set(&self, _: &Self) -> bool {
        true
    }
}

impl fmt::Debug for Policies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn name<H>(r: &Option<PolicyRef<H>>, name: fn(&H) -> &str) -> Option<&str> {
            r.as_ref().map(|r| match r {
                PolicyRef::Handle(h) => name(h),
                PolicyRef::Name(n) => n.as_str(),
            })
        }
        f.debug_struct("Policies")
            .field("timeout", &self.timeout)
            .field("retry", &self.retry)
            .field("budget", &self.budget)
            .field("min_attempt", &self.min_attempt)
            .field("breaker", &name(&self.breaker, CircuitBreaker::name))
            .field("breaker_ignore", &self.breaker_ignore.is_some())
            .field("bulkhead", &name(&self.bulkhead, Bulkhead::name))
            .field("rate_limit", &name(&self.rate_limit, RateLimiter::name))
            .field("hedge", &self.hedge)
            .field("chaos", &self.chaos)
            .finish()
    }
}
