//! Error types: what `build()` rejects, why a node produced no value, and why a run is an
//! error.
//!
//! Every error names its culprit, such as the node, the upstream or the cycle path, so
//! that the message alone tells the reader where to look.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

mod codes;

pub use crate::policy::StopReason;
use crate::util::human::Human;
pub use codes::{CancelReason, UserCode};

/// A boxed error, as tasks return it.
///
/// A task may return any `E: Into<BoxError>`: every `std::error::Error + Send + Sync`,
/// `String` and `&'static str` qualify, and so does `anyhow::Error` through its `Into`.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What a task returns when its error type is [`BoxError`]: the return type to give an
/// `async fn` used as a task, in which `?` converts any error.
///
/// ```
/// use baton_graph::{Ctx, Graph, TaskResult};
///
/// async fn parse(ctx: Ctx<&'static str>) -> TaskResult<u32> {
///     Ok(ctx.input().parse::<u32>()?) // `?` turns the `ParseIntError` into a `BoxError`
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), baton_graph::BoxError> {
/// let mut g = Graph::<&'static str>::builder();
/// let n = g.node("parse").task(|ctx, ()| parse(ctx));
/// let report = g.build()?.run("42").await?;
/// assert_eq!(report.get(n), Some(&42));
/// # Ok(())
/// # }
/// ```
pub type TaskResult<T> = Result<T, BoxError>;

/// `Ok(value)` as a [`TaskResult`]: ends a task's `async` block so that `?` inside it
/// knows the error type.
///
/// Without it, `async move { let n = s.parse::<u32>()?; Ok(n) }` does not compile: "type
/// annotations needed". Nothing says what `?` converts the error into. With `ok(n)` as
/// the block's last expression, the error type is [`BoxError`].
///
/// ```
/// use baton_graph::{Graph, ok};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), baton_graph::BoxError> {
/// let mut g = Graph::<&'static str>::builder();
/// let n = g.node("parse").task(|ctx, ()| async move {
///     let n = ctx.input().parse::<u32>()?;
///     ok(n * 2)
/// });
/// let report = g.build()?.run("21").await?;
/// assert_eq!(report.get(n), Some(&42));
/// # Ok(())
/// # }
/// ```
pub fn ok<T>(value: T) -> TaskResult<T> {
    Ok(value)
}

/// A graph definition that [`GraphBuilder::build`](crate::GraphBuilder::build) rejected.
///
/// `build()` reports one problem: the first, in declaration order, of the first check that
/// finds any; see [`GraphBuilder::build`](crate::GraphBuilder::build). Nothing runs until
/// every problem is fixed, so a bad graph never hangs or panics at run time.
///
/// ```
/// use baton_graph::{BoxError, BuildError, Graph};
///
/// let mut g = Graph::<()>::builder();
/// g.node("total")
///     .after_names::<u64>(["price"])
///     .task(|_ctx, _| async { Ok::<_, BoxError>(0_u64) });
/// let err = g.build().unwrap_err();
/// let expected = BuildError::UnknownUpstream { node: "total".into(), upstream: "price".into() };
/// assert_eq!(err, expected);
/// assert_eq!(
///     err.to_string(),
///     "node `total` names upstream `price`, which is not a node of this graph"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A node or a pipeline was given an empty name: it could not be told apart in the
    /// report, the timeline, errors and events.
    #[error("node #{index} has an empty name: every node needs a name")]
    EmptyName {
        /// The node's position in declaration order, from 0; 0 for a pipeline.
        index: usize,
    },
    /// Two nodes were given the same name.
    #[error("duplicate node name `{name}`: every node of a graph needs its own name")]
    DuplicateName {
        /// The name used twice.
        name: String,
    },
    /// A node names an upstream that no node of the graph has.
    #[error("node `{node}` names upstream `{upstream}`, which is not a node of this graph")]
    UnknownUpstream {
        /// The node that declared the upstream.
        node: String,
        /// The missing upstream's name.
        upstream: String,
    },
    /// A node was given a [`Node`](crate::Node) handle that another builder returned.
    #[error(
        "node `{node}` was given the handle of `{upstream}`, which belongs to another graph \
         (handles only work in the builder that returned them)"
    )]
    ForeignHandle {
        /// The node that declared the upstream.
        node: String,
        /// The foreign node's name, as its own builder knows it, or `#index` when unknown.
        upstream: String,
    },
    /// The dependencies form a cycle, so no node on it could ever start.
    ///
    /// `path` lists the cycle in flow direction, upstream before downstream, and repeats its
    /// first node at the end: `["a", "b", "c", "a"]` prints as `a -> b -> c -> a`.
    #[error("dependency cycle: {}", path.join(" -> "))]
    Cycle {
        /// The node names along the cycle, first node repeated at the end.
        path: Vec<String>,
    },
    /// A name-based upstream produces a different type than the node expects.
    #[error(
        "node `{node}` expects upstream `{upstream}` to produce `{expected}`, but it produces `{found}`"
    )]
    TypeMismatch {
        /// The node that declared the upstream.
        node: String,
        /// The upstream whose type differs.
        upstream: String,
        /// The type the node's task expects.
        expected: &'static str,
        /// The type the upstream produces.
        found: &'static str,
    },
    /// A node's policy is misconfigured, such as zero attempts or a backoff multiplier below 1.
    #[error("node `{node}`: invalid {policy} policy: {reason}")]
    InvalidPolicy {
        /// The node.
        node: String,
        /// Which policy: `retry`, `timeout`, `budget`, `rate limit`, `hedge`, `chaos`, ….
        policy: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A router is misdefined: it has no branch, a branch was not defined by the builder it
    /// was given, a branch declares upstreams of its own, or the router was never finished
    /// because [`Router::finish`](crate::graph::Router::finish) was not called.
    #[error("router `{router}` is invalid: {reason}")]
    InvalidRouter {
        /// The router.
        router: String,
        /// What is wrong.
        reason: String,
    },
    /// A node names a circuit breaker, bulkhead, rate limiter or retry budget that the
    /// orchestrator does not have.
    #[error("node `{node}` names {kind} `{name}`, which the orchestrator does not have")]
    UnknownPolicy {
        /// The node.
        node: String,
        /// `circuit breaker`, `bulkhead`, `rate limiter` or `retry budget`.
        kind: &'static str,
        /// The name it used.
        name: String,
    },
    /// Two different circuit breakers, bulkheads, rate limiters or retry budgets share a
    /// name in one orchestrator; names identify downstreams, so each must be unique.
    #[error(
        "node `{node}` uses a {kind} named `{name}`, but the orchestrator already has a different {kind} with that name"
    )]
    PolicyConflict {
        /// The node that brought the second one.
        node: String,
        /// `circuit breaker`, `bulkhead`, `rate limiter` or `retry budget`.
        kind: &'static str,
        /// The shared name.
        name: String,
    },
}

/// Why a node produced no value or, for a `Recovered` node, what the fallback recovered
/// from.
///
/// The task's own error is kept as it was returned, as [`NodeError::Task`], so its
/// [`source`](std::error::Error::source) chain is intact and it can be downcast; see
/// [`NodeError::task_error`]. Errors that come from a policy name the node, the attempt and
/// the limit involved.
///
/// ```
/// use std::time::Duration;
/// use baton_graph::{BoxError, Graph, NodeError};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), BoxError> {
/// let mut g = Graph::<()>::builder();
/// let quote = g.node("quote").timeout(Duration::from_millis(50)).task(|_ctx, ()| async {
///     tokio::time::sleep(Duration::from_secs(1)).await;
///     Ok::<_, BoxError>(())
/// });
/// let report = g.build()?.run(()).await?;
/// let err = report.node(quote).and_then(|n| n.error()).unwrap();
/// let limit = Duration::from_millis(50);
/// assert!(matches!(err, NodeError::Timeout { attempt: 1, limit: l, .. } if *l == limit));
/// assert!(err.is_timeout());
/// assert_eq!(err.to_string(), "node `quote` attempt 1 timed out after 50 ms");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// The task returned an error.
    #[error(transparent)]
    Task(BoxError),
    /// User code panicked, in the task or a closure of its policies; the panic was caught
    /// and the run went on.
    #[error("{code} panicked: {message}")]
    #[non_exhaustive]
    Panicked {
        /// Which code panicked.
        code: UserCode,
        /// The panic payload, when it was a string; `"<non-string panic payload>"` otherwise.
        message: String,
    },
    /// An attempt ran longer than the node's per-attempt timeout and was dropped: it stopped
    /// at its next `.await`. A blocking attempt is abandoned instead; see
    /// [`NodeReport::abandoned`](crate::NodeReport::abandoned).
    #[error("node `{node}` attempt {attempt} timed out after {}", Human(*.limit))]
    Timeout {
        /// The node.
        node: String,
        /// The attempt that timed out, from 1.
        attempt: u32,
        /// The per-attempt timeout.
        limit: Duration,
    },
    /// The node's deadline, its budget or the run's deadline, passed: either an attempt was
    /// cut at the deadline, or too little time was left to start one, less than the
    /// node's minimum attempt time.
    #[error(
        "node `{node}` ran out of its deadline after {attempts} attempt(s) in {}",
        Human(*.elapsed)
    )]
    DeadlineExceeded {
        /// The node.
        node: String,
        /// How many attempts had started.
        attempts: u32,
        /// Time from the node's start to the end of the series.
        elapsed: Duration,
    },
    /// The node's circuit breaker was open, or half-open with every probe taken: the task
    /// did not run. Never retried.
    #[error("node `{node}` rejected: circuit breaker `{breaker}` is {}", .state.as_str().replace('_', "-"))]
    BreakerOpen {
        /// The node.
        node: String,
        /// The breaker's name.
        breaker: String,
        /// Its state: open, or half-open with every probe permit taken.
        state: crate::policy::breaker::BreakerState,
        /// When the breaker will let a probe through, if known.
        retry_after: Option<Duration>,
    },
    /// No permit of the node's bulkhead came free within its maximum wait, or before the
    /// node's deadline.
    #[error(
        "node `{node}` attempt {attempt}: bulkhead `{bulkhead}` full after waiting {}",
        Human(*.waited)
    )]
    BulkheadFull {
        /// The node.
        node: String,
        /// The attempt, from 1.
        attempt: u32,
        /// The bulkhead's name.
        bulkhead: String,
        /// How long the attempt waited for a permit.
        waited: Duration,
    },
    /// The node's rate limiter had no permit for the attempt within its maximum wait, or
    /// before the attempt's cut: the task did not run. Retryable by default.
    #[error(
        "node `{node}` attempt {attempt}: rate limiter `{limiter}` has no permit for {}",
        Human(*.retry_after)
    )]
    RateLimited {
        /// The node.
        node: String,
        /// The attempt, from 1.
        attempt: u32,
        /// The rate limiter's name.
        limiter: String,
        /// How long until a permit would have been free; `Duration::MAX` for a limiter
        /// that never grants one.
        retry_after: Duration,
    },
    /// A retrying node stopped retrying; `last` is the last attempt's error.
    #[error(
        "node `{node}` gave up after {attempts} attempt(s) in {} ({reason})",
        Human(*.elapsed)
    )]
    GaveUp {
        /// The node.
        node: String,
        /// How many attempts ran.
        attempts: u32,
        /// Time from the node's start to the end of the series.
        elapsed: Duration,
        /// Why the series stopped.
        reason: StopReason,
        /// The last attempt's error.
        #[source]
        last: Box<NodeError>,
    },
    /// The fallback itself failed: it returned an error or panicked. `original` is what it
    /// tried to recover from.
    #[error("node `{node}` fallback failed: {error}; it was recovering from: {original}")]
    FallbackFailed {
        /// The node.
        node: String,
        /// The fallback's error.
        error: Box<NodeError>,
        /// The error the fallback was recovering from.
        original: Arc<NodeError>,
    },
    /// A router's key matched none of its branches; the router fails and every branch ends
    /// `NotTaken`.
    #[error("router `{router}` chose unknown branch `{key}` (known: {})", known.join(", "))]
    UnknownBranch {
        /// The router.
        router: String,
        /// The key its selector returned.
        key: String,
        /// Its branches' keys, in declaration order.
        known: Vec<String>,
    },
    /// The branch a router chose failed or was skipped; `error` is the branch's own error.
    #[error("router `{router}`: branch `{branch}` failed")]
    BranchFailed {
        /// The router.
        router: String,
        /// The chosen branch.
        branch: String,
        /// The branch's error, when it has one.
        #[source]
        error: Option<Arc<NodeError>>,
    },
    /// An item of a map node was cancelled, before it started or while it ran, because
    /// the node's completion rule was decided. It is the result such an item has in
    /// [`NodeBuilder::map_settled`](crate::NodeBuilder::map_settled)'s value.
    #[error("an item of map node `{node}` was cancelled: its completion rule was decided")]
    ItemCancelled {
        /// The map node.
        node: String,
    },
}

/// Why a map node failed: its completion rule was not met. It is the node's task error,
/// which [`NodeError::task_error`] downcasts to; its source is the first item's error.
#[derive(Debug, Clone, thiserror::Error)]
#[error("map node `{node}`: completion rule \"{completion}\" not met ({decision})")]
pub struct MapFailed {
    /// The map node.
    pub node: String,
    /// Its rule.
    pub completion: crate::policy::Completion,
    /// What the rule decided, and the counts.
    pub decision: crate::policy::Decision,
    /// The index of the first item that failed, if one did.
    pub first_failed: Option<usize>,
    /// That item's error.
    #[source]
    pub first_error: Option<Arc<NodeError>>,
}

impl NodeError {
    /// The task's own error, looking through retry and fallback wrappers to the last
    /// attempt. `None` when the last attempt did not end with an error of the task, as for
    /// a timeout, a rejection or a panic.
    ///
    /// Use it to downcast to your error type:
    /// `err.task_error().and_then(|e| e.downcast_ref::<MyError>())`.
    ///
    /// ```
    /// use std::io;
    /// use baton_graph::{BoxError, Graph, Retry};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// let user = g.node("user").retry(Retry::new(2)).task(|_ctx, ()| async {
    ///     Err::<u32, _>(io::Error::new(io::ErrorKind::ConnectionRefused, "refused"))
    /// });
    /// let report = g.build()?.run(()).await?;
    /// let err = report.node(user).and_then(|n| n.error()).unwrap();
    /// assert_eq!(err.kind(), "gave_up"); // the retry wrapper
    /// let io = err.task_error().and_then(|e| e.downcast_ref::<io::Error>()).unwrap();
    /// assert_eq!(io.kind(), io::ErrorKind::ConnectionRefused); // the task's own error
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn task_error(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        match self {
            NodeError::Task(e) => Some(e.as_ref()),
            NodeError::GaveUp { last, .. } => last.task_error(),
            NodeError::FallbackFailed { original, .. } => original.task_error(),
            NodeError::BranchFailed {
                error: Some(error), ..
            } => error.task_error(),
            _ => None,
        }
    }

    /// The error of the last attempt: looks through [`NodeError::GaveUp`].
    #[must_use]
    pub fn last_attempt(&self) -> &NodeError {
        match self {
            NodeError::GaveUp { last, .. } => last.last_attempt(),
            other => other,
        }
    }

    /// Whether the error is, or ends in, a per-attempt timeout or an exhausted deadline.
    #[must_use]
    pub fn is_timeout(&self) -> bool {
        matches!(
            self.last_attempt(),
            NodeError::Timeout { .. } | NodeError::DeadlineExceeded { .. }
        )
    }

    /// The error this one wraps: a retry series' last attempt's for [`NodeError::GaveUp`],
    /// a failed fallback's own for [`NodeError::FallbackFailed`], a router's chosen branch's
    /// for [`NodeError::BranchFailed`]. `None` for an error that wraps none.
    #[must_use]
    pub fn wrapped(&self) -> Option<&NodeError> {
        match self {
            NodeError::GaveUp { last, .. } => Some(last),
            NodeError::FallbackFailed { error, .. } => Some(error),
            NodeError::BranchFailed {
                error: Some(error), ..
            } => Some(error),
            _ => None,
        }
    }

    /// The error at the end of the chain of [`wrapped`](Self::wrapped) errors: what
    /// happened, under the retries, fallbacks and routers that passed it on.
    ///
    /// ```
    /// use baton_graph::{BoxError, Graph, Retry};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// let quote = g.node("quote").timeout(Duration::from_millis(50)).retry(Retry::new(2))
    ///     .task(|_ctx, ()| async {
    ///         tokio::time::sleep(Duration::from_secs(1)).await;
    ///         Ok::<_, BoxError>(())
    ///     });
    /// let report = g.build()?.run(()).await?;
    /// let err = report.node(quote).and_then(|n| n.error()).unwrap();
    /// assert_eq!((err.kind(), err.root_cause().kind()), ("gave_up", "timeout"));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn root_cause(&self) -> &NodeError {
        let mut error = self;
        while let Some(inner) = error.wrapped() {
            error = inner;
        }
        error
    }

    /// How long the error says to wait before trying again, when it says: a rate
    /// limiter's time until its next permit, or an open breaker's until it admits a probe.
    /// Looks through every error that wraps another, as [`root_cause`](Self::root_cause) does:
    /// retries, fallbacks and routers. A retry can take its delay from it:
    /// `Retry::new(3).delay_from(NodeError::retry_after)`.
    #[must_use]
    pub fn retry_after(&self) -> Option<Duration> {
        match self.root_cause() {
            NodeError::RateLimited { retry_after, .. } => Some(*retry_after),
            NodeError::BreakerOpen { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// A short, fixed name of the error's kind, one per variant: `task`, `panicked`,
    /// `timeout`, `deadline_exceeded`, `breaker_open`, `bulkhead_full`, `rate_limited`,
    /// `gave_up`, `fallback_failed`, `unknown_branch`, `branch_failed`, `item_cancelled`. Spans and logs carry it as
    /// `error.type`; it suits a metric label, since the set is small and bounded.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            NodeError::Task(_) => "task",
            NodeError::Panicked { .. } => "panicked",
            NodeError::Timeout { .. } => "timeout",
            NodeError::DeadlineExceeded { .. } => "deadline_exceeded",
            NodeError::BreakerOpen { .. } => "breaker_open",
            NodeError::BulkheadFull { .. } => "bulkhead_full",
            NodeError::RateLimited { .. } => "rate_limited",
            NodeError::GaveUp { .. } => "gave_up",
            NodeError::FallbackFailed { .. } => "fallback_failed",
            NodeError::UnknownBranch { .. } => "unknown_branch",
            NodeError::BranchFailed { .. } => "branch_failed",
            NodeError::ItemCancelled { .. } => "item_cancelled",
        }
    }

    /// The error of a panic of `code`, with its payload's message.
    pub(crate) fn from_panic(code: UserCode, payload: &(dyn std::any::Any + Send)) -> Self {
        NodeError::Panicked {
            code,
            message: panic_message(payload),
        }
    }
}

/// Displays an error's message, then each of its sources', joined by `: `.
pub(crate) struct Chain<'a>(pub(crate) &'a (dyn std::error::Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(error) = source {
            write!(f, ": {error}")?;
            source = error.source();
        }
        Ok(())
    }
}

/// A panic payload's message, when it is a string.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "<non-string panic payload>".to_owned()
    }
}
