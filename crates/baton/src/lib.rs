//! # baton
//!
//! Run a graph of async tasks on tokio: independent tasks run at once, a task starts the
//! moment its upstreams finish, and every run returns a [`Report`] of what each node did and
//! why.
//!
//! An order placement: `user` and `sku` do not depend on each other,
//! `stock` needs both, `promo` needs `stock`, `notify` needs `promo`. Called one after the
//! other they take 200 + 200 + 150 + 100 + 50 = 700 ms; as a graph, 500 ms.
//!
//! ```
//! use std::time::Duration;
//! use baton_graph::{BoxError, Graph, Outcome};
//! use tokio::time::sleep;
//!
//! struct Order { user_id: u64, sku_id: u64 }
//! struct User { id: u64 }
//! struct Sku { id: u64, price_cents: u64 }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut g = Graph::<Order>::builder();
//! let user = g.node("user").task(|ctx, ()| async move {
//!     sleep(Duration::from_millis(200)).await; // GET /user/{id}
//!     Ok::<_, BoxError>(User { id: ctx.input().user_id })
//! });
//! let sku = g.node("sku").task(|ctx, ()| async move {
//!     sleep(Duration::from_millis(200)).await; // GET /sku/{id}
//!     Ok::<_, BoxError>(Sku { id: ctx.input().sku_id, price_cents: 59_900 })
//! });
//! let stock = g.node("stock").after((user, sku)).task(|_ctx, (user, sku)| async move {
//!     sleep(Duration::from_millis(150)).await; // POST /stock/deduct {user, sku}
//!     Ok::<_, BoxError>(format!("reserved sku {} for user {}", sku.id, user.id))
//! });
//! let promo = g.node("promo").after(stock).task(|_ctx, _stock| async move {
//!     sleep(Duration::from_millis(100)).await;
//!     Ok::<_, BoxError>(500_u64) // discount in cents
//! });
//! let notify = g.node("notify").after(promo).task(|_ctx, _promo| async move {
//!     sleep(Duration::from_millis(50)).await;
//!     Ok::<_, BoxError>(())
//! });
//! let graph = g.build()?; // validated once, runs many times
//!
//! let report = graph.run(Order { user_id: 7, sku_id: 42 }).await?;
//! assert_eq!(report.makespan(), Duration::from_millis(500)); // not 700
//! assert_eq!(report.get(promo), Some(&500));
//! assert_eq!(report.node(notify).map(|n| n.outcome()), Some(Outcome::Succeeded));
//! println!("{report}"); // the timeline
//! # Ok(())
//! # }
//! ```
//!
//! ## Policies, routing, observing
//! Each node can carry a per-attempt timeout, a retry policy inside a deadline budget, a
//! circuit breaker shared by name, a bulkhead and a fallback, composed in a fixed onion:
//! attempt → retry → breaker → fallback. A router picks one of its branches at run time.
//!
//! ```
//! use std::time::Duration;
//! use baton_graph::{Backoff, BoxError, CircuitBreaker, Fallback, Orchestrator, Outcome, Retry};
//! use tokio::time::sleep;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let orch = Orchestrator::new();
//! let inventory = CircuitBreaker::builder("inventory").consecutive_failures(5).build()?;
//! let mut g = orch.graph::<()>();
//! let stock = g
//!     .node("stock")
//!     .timeout(Duration::from_millis(300))
//!     .retry(Retry::new(3).backoff(Backoff::exponential(Duration::from_millis(100))))
//!     .breaker(&inventory)
//!     .fallback(Fallback::value(0_u32))
//!     .task(|ctx, ()| async move {
//!         sleep(Duration::from_millis(500)).await; // too slow: every attempt times out
//!         Ok::<_, BoxError>(ctx.attempt())
//!     });
//! let dispatch = g
//!     .router("dispatch")
//!     .after(stock)
//!     .select(|_input, stock| if **stock > 0 { "ship" } else { "shortage" })
//!     .branch("ship", |b| b.task(|_ctx, _| async { Ok::<_, BoxError>("shipped") }))
//!     .branch("shortage", |b| b.task(|_ctx, _| async { Ok::<_, BoxError>("backordered") }))
//!     .finish();
//! let report = g.build()?.run(()).await?;
//!
//! let stock_r = report.node(stock).unwrap();
//! assert_eq!(stock_r.outcome(), Outcome::Recovered); // the fallback served 0
//! assert_eq!(stock_r.attempts(), 3);
//! // 300 ms, backoff 100 ms, 300 ms, backoff 200 ms, 300 ms.
//! assert_eq!(stock_r.end(), Duration::from_millis(1200));
//! assert_eq!(report.get(dispatch), Some(&"backordered"));
//! assert_eq!(report.by_name("ship").unwrap().outcome(), Outcome::NotTaken);
//! # Ok(())
//! # }
//! ```
//!
//! ## Writing tasks
//! A task is `|ctx, values| async move { .. }`, whose future resolves to `Result<T, E>`
//! with `E: Into<BoxError>`. It is called once per attempt, so its future must own what it
//! uses: clone a captured value inside the closure, before `async move`, or give it to the
//! graph once with [`GraphBuilder::state`] and read it with [`Ctx::state`].
//!
//! `?` inside an `async` block needs the block's error type. End the block with
//! [`ok(value)`](ok) or `Ok::<_, BoxError>(value)`, or write the task as an `async fn`
//! returning [`TaskResult<T>`], or as an async closure that captures nothing,
//! `async |ctx, ()| -> TaskResult<T> { .. }`.
//!
//! ## Compile errors
//! What the compiler says, and what to change:
//! - "type annotations needed … cannot infer type of the type parameter `E`", at the
//!   block's `Ok(..)`: a `?` in the block, and nothing names the error type. End the block
//!   with `ok(..)`.
//! - "`Fallback<&str>` is not a fallback for this node, whose task returns `User`": the
//!   task sets the node's value type, and the fallback produces another. See
//!   [`NodeBuilder::fallback`].
//! - "type annotations needed for `Node<_>` … multiple `impl`s satisfying
//!   `Fallback<u64>: IntoFallback<_>`": a task that only fails, after a `Fallback`, names
//!   no value type. Write `Err::<u64, _>(..)`.
//! - At `.task(..)`, "expected `Result<A, _>`, found `Result<B, _>`": something before the
//!   task fixed the node's type to `A`, such as a [`NodeBuilder::fallback_with`] returning
//!   `A`, or the task's block does not end in `Ok(..)`.
//! - "type mismatch in closure arguments … expected closure signature
//!   `fn(Ctx<_>, (Arc<A>, Arc<B>)) -> _`": the task's second argument receives the
//!   upstreams' values in the shape of `.after(..)`; see [`Upstreams`].
//! - "`[Node<u32>; 2]` cannot be a node's upstreams": use a tuple or a `Vec` of handles.
//! - "type annotations needed for `Inputs<_>`", at `after_names`: write
//!   `after_names::<V>([..])`.
//! - "closure may outlive the current function, but it borrows `x`", or, after adding
//!   `move`, "references to captured variables can't escape the closure": the future
//!   borrows from the closure. Clone `x` inside the closure, before `async move`.
//! - "async closure does not implement `Fn` because it captures state": write
//!   `|ctx, values| async move { .. }` instead.
//! - "future cannot be sent between threads safely": the task holds a value that is not
//!   `Send`, such as an `Rc` or a `std::sync::MutexGuard`, across an `.await`. Drop it
//!   before the `.await`.
//! - "`Result<..>` is not a future": `task` takes an async closure; a synchronous one goes
//!   to [`NodeBuilder::blocking_task`], which in turn says "expected `Result<_, _>`, found
//!   `async` block" when given an async one.
//!
//! ## What a run guarantees
//! - A node's task starts only after every upstream produced a value; independent nodes run
//!   concurrently on the runtime's workers, and waiting holds no thread.
//! - Every node ends with exactly one [`Outcome`]. A node whose upstream produced no value
//!   is `Skipped`, naming that upstream and the root cause; nothing is silently absent.
//! - A panic in a task becomes that node's `Failed` outcome; the run goes on.
//! - Dropping a [`Run`] cancels every node of it; a [`RunCanceller`](run::RunCanceller)
//!   cancels it from elsewhere. When a run resolves, no node of it is still running. The
//!   one exception is a blocking closure abandoned after its timeout: a thread cannot be
//!   stopped from outside.
//! - The [`FailureMode`] decides whether failures make the run an error; the report is kept
//!   either way.
//! - The [`StartMode`](run::StartMode) decides where nodes run on a multi-thread runtime.
//!   With `Inline`, the default, they run in the task that awaits the run, as
//!   `tokio::join!` would: no task is spawned, nodes that wait included, unless the run
//!   spreads past one poll's budget of nodes on several workers. With `Spread`, they run in
//!   tasks of the run's own, spread over the workers, so nodes that compute run in
//!   parallel.
//!
//! The execution contract, rule by rule with the tests that check each, is the
//! [`contract`] module.
//!
//! ## Without a graph
//! A [`Pipeline`] runs the same policies, in the same order, around a single call, with
//! the same errors, events and attempt log as a node.
//!
//! ## Layout
//! The crate root holds what a first graph, a first pipeline and a first report need. The
//! rest is in a module per concept, each opening with a short guide:
//!
//! - [`graph`] and [`run`] for building and running a graph;
//! - [`pipeline`] for one call with policies;
//! - [`retry`], [`deadline`], [`breaker`], [`hedge`] and [`chaos`];
//! - [`limit`] for bulkheads and rate limiters;
//! - [`map`] for map nodes;
//! - [`compensate`] for compensations;
//! - [`error`], [`report`] and [`orchestrator`];
//! - [`observe`] for callbacks, observers, stats, tracing spans and metrics;
//! - `tower`, with feature `tower`, for services and layers, and with `http` the deadline
//!   headers;
//! - [`shared`] for what a shared-state backend implements;
//! - [`contract`] for the execution contract.
//!
//! Inside, the modules form layers, each using only those below it: leaf utilities,
//! identifiers, policy primitives, errors, the report, observing, the orchestrator, the
//! onion with the pipeline, the engine with the compiled graph, run state and drivers, and
//! the builder. `docs/architecture.md` in the repository is the map.
//!
//! ## Features
//! - `tracing`, on by default: spans per run, node and attempt.
//! - `serde`: `Serialize` for [`Report`] and [`Stats`](observe::Stats).
//! - `metrics`: `observe::MetricsObserver`, an observer that records runs, nodes,
//!   attempts, breakers and bulkheads as counters, gauges and histograms with the `metrics`
//!   crate.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![deny(clippy::print_stdout, clippy::print_stderr)]

// The README's examples are compiled and run as tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod builder;
mod engine;
pub mod error;
mod id;
pub mod observe;
mod onion;
pub mod orchestrator;
mod policy;
pub mod report;
#[cfg(feature = "tower")]
pub mod tower;
mod util;

pub mod graph {
    //! Building a graph: a [`GraphBuilder`] adds nodes with [`NodeBuilder`] and routers with
    //! [`RouterBuilder`]. Each node gets a typed handle, a [`Node`], that later nodes name as
    //! [`Upstreams`]. `build()` validates and compiles it into a [`Graph`] that runs any
    //! number of times.
    //!
    //! ```
    //! use baton_graph::{BoxError, Graph};
    //!
    //! # #[tokio::main(flavor = "current_thread")]
    //! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    //! let mut g = Graph::<u64>::builder();
    //! let double = g.node("double").task(|ctx, ()| async move {
    //!     Ok::<_, BoxError>(*ctx.input() * 2)
    //! });
    //! let plus_one = g.node("plus_one").after(double).task(|_ctx, double| async move {
    //!     Ok::<_, BoxError>(*double + 1)
    //! });
    //! let graph = g.build()?;
    //! assert_eq!(graph.run(20).await?.get(plus_one), Some(&41));
    //! # Ok(())
    //! # }
    //! ```
    pub use crate::builder::{GraphBuilder, NodeBuilder, Router, RouterBuilder};
    pub use crate::engine::{Ctx, Graph, Inputs, Upstreams};
    pub use crate::id::{IdempotencyKey, Node};
}

pub mod run {
    //! Running a graph: [`Graph::run`](crate::Graph::run) returns a [`Run`], a future
    //! that resolves to the run's report, or to a [`RunError`]. [`RunOptions`] give a run
    //! its deadline, its [`FailureMode`] and its [`StartMode`]; a [`RunCanceller`] cancels
    //! it from elsewhere, with a [`CancelReason`]. Each run has a [`RunId`].
    pub use crate::engine::{FailureMode, Run, RunCanceller, RunError, RunOptions, StartMode};
    pub use crate::error::CancelReason;
    pub use crate::id::RunId;
}

pub mod pipeline {
    //! The policies of a node around a single call, without a graph: a [`Pipeline`] is
    //! built once with [`PipelineBuilder`] and called many times. Each call's task sees its
    //! [`Attempt`], and the call returns a [`Call`] with the value or the error and the
    //! attempt log. A [`Fallback`], or anything that is [`IntoFallback`], serves a value when
    //! every attempt failed. [`Policies`] is one value of a node's or a call's policies,
    //! given to a node or a pipeline with `.policies(p)`; a breaker, bulkhead or rate
    //! limiter in it is a [`PolicyRef`]: a handle, or a name the orchestrator resolves.
    pub use crate::onion::{
        Attempt, Call, Fallback, IntoFallback, Pipeline, PipelineBuilder, Policies, PolicyRef,
    };
}

pub mod retry {
    //! Retrying: a [`Retry`] runs a failed attempt again after a [`Backoff`] with
    //! [`Jitter`], inside the node's deadline; the series ends with a [`StopReason`]. A
    //! [`RetryBudget`] caps the retries of every caller of one downstream as a share of
    //! their first attempts.
    //!
    //! ```
    //! use std::time::Duration;
    //! use baton_graph::retry::{Backoff, Jitter};
    //!
    //! let backoff = Backoff::exponential(Duration::from_millis(100)).jitter(Jitter::None);
    //! let delays: Vec<Duration> = backoff.iter().take(3).collect();
    //! assert_eq!(delays, [100, 200, 400].map(Duration::from_millis));
    //! ```
    pub use crate::onion::Retry;
    pub use crate::policy::{Backoff, Jitter, RetryBudget, StopReason};
}

pub mod deadline {
    //! Deadlines: every node's attempts share the run's deadline and their node's timeout;
    //! an attempt is cut at the earlier of the two, and is not started with less than
    //! [`DEFAULT_MIN_ATTEMPT_TIME`] left. A [`Budget`] carries the time left across a
    //! service hop, in the two wire formats peers use; a callee that has none left
    //! answers with [`DownstreamDeadlineExceeded`].
    pub use crate::policy::{Budget, DEFAULT_MIN_ATTEMPT_TIME, DownstreamDeadlineExceeded};
}

pub mod breaker {
    //! Circuit breakers: a [`CircuitBreaker`] is shared by every node and run that calls
    //! one downstream. It moves closed → open → half-open by the rules that
    //! [`CircuitBreakerBuilder`] sets, with a [`BreakerWindow`]. [`BreakerState`],
    //! [`BreakerTransition`] and [`TransitionReason`] describe its moves. While open it rejects
    //! calls with [`BreakerOpen`]. An operator reads it as a [`BreakerSnapshot`] and forces it
    //! with [`ManualControl`]; a call outside a graph asks it for a [`BreakerPermit`].
    //!
    //! ```
    //! use baton_graph::breaker::{BreakerState, CircuitBreaker};
    //!
    //! # fn main() -> Result<(), Box<dyn std::error::Error>> {
    //! let inventory = CircuitBreaker::builder("inventory").consecutive_failures(5).build()?;
    //! assert_eq!(inventory.state(), BreakerState::Closed);
    //! # Ok(())
    //! # }
    //! ```
    pub use crate::policy::breaker::{
        BreakerConfigError, BreakerOpen, BreakerPermit, BreakerSnapshot, BreakerState,
        BreakerTransition, BreakerWindow, CircuitBreaker, CircuitBreakerBuilder, ManualControl,
        TransitionReason,
    };
}

pub mod limit {
    //! Limits on the calls to one downstream, shared by name: a [`Bulkhead`] caps how many
    //! run at once, a [`RateLimiter`] how many start per period. Both wait a bounded time
    //! for a permit, then reject the attempt. Both change their settings in place
    //! with `reconfigure`, and refuse an impossible one with [`InvalidSetting`].
    pub use crate::policy::{Bulkhead, InvalidSetting, RateLimiter};
}

pub mod hedge {
    //! Hedging: when an attempt is slow, a [`Hedge`] starts another beside it and the first
    //! success wins; at most [`MAX_HEDGES`] run beside the first.
    pub use crate::policy::{Hedge, MAX_HEDGES};
}

pub mod chaos {
    //! Fault injection for tests: a node's [`Chaos`] injects latency and errors, such as
    //! [`InjectedFault`], into its attempts at configured rates, from a seed.
    pub use crate::policy::{Chaos, InjectedFault};
}

pub mod map {
    //! Map nodes: one item per element of an upstream's list, each through the node's
    //! policies, at most [`DEFAULT_MAP_CONCURRENCY`] at once unless the node says
    //! otherwise. An item's task sees an [`ItemCtx`]. A [`Completion`] rule decides when
    //! the node is done, as a [`Decision`]; a node that fails by it fails with [`MapFailed`].
    pub use crate::engine::ItemCtx;
    pub use crate::error::MapFailed;
    pub use crate::policy::{Completion, DEFAULT_MAP_CONCURRENCY, Decision};
}

pub mod compensate {
    //! Compensations: a node may declare how to undo what it did. When a run fails by the
    //! graph's [`CompensationTrigger`], the compensations of the nodes that succeeded run,
    //! each seeing a [`CompensationCtx`] and bounded by its timeout, which is
    //! [`DEFAULT_COMPENSATION_TIMEOUT`] unless set. The report says what ran, in
    //! [`CompensationReport`](crate::report::CompensationReport)s.
    pub use crate::builder::DEFAULT_COMPENSATION_TIMEOUT;
    pub use crate::engine::{CompensationCtx, CompensationTrigger};
}

/// What a shared-state backend for [`CircuitBreaker`] implements and uses, as given to
/// [`CircuitBreakerBuilder::shared`](breaker::CircuitBreakerBuilder::shared), and one for
/// [`RateLimiter`], as given to [`RateLimiter::shared`].
pub mod shared {
    pub use crate::policy::breaker::{
        BreakerMirror, SharedBreakerState, SharedFuture, SharedOutcome, SharedRecord, SharedRules,
        SharedView, Unreachable,
    };
    pub use crate::policy::limit::rate_limit_shared::{SharedLimit, SharedRateLimit};
}
/// The execution contract, as `docs/contract.md` in the repository states it.
///
#[doc = include_str!("../contract.md")]
pub mod contract {}
#[cfg(feature = "serde")]
pub use orchestrator::config;

pub use builder::{GraphBuilder, NodeBuilder};
pub use engine::{Ctx, FailureMode, Graph, Inputs, Run, RunError, RunOptions, Upstreams};
pub use error::{BoxError, BuildError, NodeError, TaskResult, ok};
pub use id::Node;
pub use onion::{Fallback, Pipeline, Policies, Retry};
pub use orchestrator::Orchestrator;
pub use policy::breaker::CircuitBreaker;
pub use policy::{Backoff, Bulkhead, Hedge, Jitter, RateLimiter};
pub use report::{NodeReport, Outcome, Report};
