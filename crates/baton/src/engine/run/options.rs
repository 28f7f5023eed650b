//! A run's options: [`RunOptions`], and the [`FailureMode`] a run or graph follows.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::start::StartMode;

/// What a run does when a node fails.
///
/// Whatever the mode, the report accounts for every node.
///
/// ```
/// use baton_graph::{BoxError, FailureMode, Graph, Outcome, RunOptions, run::CancelReason};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), BoxError> {
/// let mut g = Graph::<()>::builder();
/// g.node("stock").task(|_ctx, ()| async { Err::<u32, BoxError>("503".into()) });
/// let slow = g.node("slow").task(|_ctx, ()| async {
///     tokio::time::sleep(Duration::from_secs(1)).await;
///     Ok::<_, BoxError>(())
/// });
/// let mode: FailureMode = "fail-fast".parse()?; // e.g. from configuration
/// let err = g.build()?.run_with((), RunOptions::new().failure_mode(mode)).await.unwrap_err();
/// let report = err.report().unwrap();
/// assert_eq!(report.cancel_reason(), Some(&CancelReason::FailFast { node: "stock".into() }));
/// assert_eq!(report.node(slow).map(|n| n.outcome()), Some(Outcome::Cancelled));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum FailureMode {
    /// Run everything that can run; the run returns `Ok(report)` even when nodes failed.
    /// The default: what succeeded is kept for diagnosis and compensation.
    #[default]
    PreservePartial,
    /// Run everything that can run; if any node did not produce a value, the run is
    /// [`RunError::Failed`](crate::RunError::Failed), which still carries the report.
    FailAll,
    /// The first node that fails cancels every node in flight, which end `Cancelled`;
    /// pending nodes downstream of the failure end `Skipped`. The run is
    /// [`RunError::Failed`](crate::RunError::Failed) with the report.
    FailFast,
}

impl fmt::Display for FailureMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FailureMode::PreservePartial => "preserve-partial",
            FailureMode::FailAll => "fail-all",
            FailureMode::FailFast => "fail-fast",
        })
    }
}

impl std::str::FromStr for FailureMode {
    type Err = String;

    /// Parses `preserve-partial`, `fail-all` or `fail-fast`, with `-` or `_`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.replace('_', "-").as_str() {
            "preserve-partial" => Ok(FailureMode::PreservePartial),
            "fail-all" => Ok(FailureMode::FailAll),
            "fail-fast" => Ok(FailureMode::FailFast),
            other => Err(format!(
                "unknown failure mode `{other}` (expected preserve-partial, fail-all or fail-fast)"
            )),
        }
    }
}

/// Per-run options for [`Graph::run_with`](crate::Graph::run_with).
///
/// # Defaults
/// - failure mode: the graph's, set by [`GraphBuilder::failure_mode`](crate::GraphBuilder::failure_mode);
/// - start mode: the graph's, set by [`GraphBuilder::start_mode`](crate::GraphBuilder::start_mode);
/// - timeout and deadline: none;
/// - idempotency keys: made from the run's id, unless
///   [`idempotency_key`](Self::idempotency_key) gives another;
/// - span: a child of the current span, unless [`detached_span`](Self::detached_span).
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub(in crate::engine) mode: Option<FailureMode>,
    pub(in crate::engine) start: Option<StartMode>,
    pub(in crate::engine) timeout: Option<Duration>,
    pub(in crate::engine) deadline: Option<Instant>,
    pub(in crate::engine) key: Option<Arc<str>>,
    pub(in crate::engine) detached: bool,
}

impl RunOptions {
    /// Options that change nothing: the graph's defaults apply.
    #[must_use]
    pub fn new() -> Self {
        RunOptions::default()
    }

    /// Overrides the graph's failure mode for this run.
    #[must_use]
    pub fn failure_mode(mut self, mode: FailureMode) -> Self {
        self.mode = Some(mode);
        self
    }

    /// Overrides the graph's start mode for this run: where its nodes start. [`StartMode`]
    /// describes each mode.
    #[must_use]
    pub fn start_mode(mut self, start: StartMode) -> Self {
        self.start = Some(start);
        self
    }

    /// Gives the run an overall timeout, counted from its start: its deadline. Every
    /// attempt of every node must end by then; an attempt still running is cut at the
    /// deadline, and a node that would start with less than its minimum attempt time left
    /// fails at once, both with [`NodeError::DeadlineExceeded`](crate::NodeError::DeadlineExceeded).
    /// Node budgets derive from it: the earliest deadline applies.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{BoxError, Graph, RunOptions};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// let quote = g.node("quote").task(|_ctx, ()| async {
    ///     tokio::time::sleep(Duration::from_secs(1)).await;
    ///     Ok::<_, BoxError>(())
    /// });
    /// let options = RunOptions::new().timeout(Duration::from_millis(200));
    /// let report = g.build()?.run_with((), options).await?; // preserve-partial: `Ok`
    /// let quote = report.node(quote).unwrap();
    /// assert_eq!(quote.error().map(|e| e.kind()), Some("deadline_exceeded"));
    /// assert_eq!(report.makespan(), Duration::from_millis(200));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Gives the run's nodes idempotency keys made of `key` instead of the run's id: `key`,
    /// a dash and the node's index, as [`IdempotencyKey`](crate::graph::IdempotencyKey) says. Pass
    /// the `Idempotency-Key` of the request the run serves: the client's retry of that
    /// request is a new run, and it sends the same keys downstream, so it causes no second
    /// side effect.
    ///
    /// ```
    /// use baton_graph::{BoxError, Graph, RunOptions};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// let charge = g.node("charge").task(|ctx, ()| async move {
    ///     Ok::<_, BoxError>(ctx.idempotency_key().to_string()) // sent with the charge
    /// });
    /// let graph = g.build()?;
    /// let options = || RunOptions::new().idempotency_key("order-7f3a");
    /// let first = graph.run_with((), options()).await?;
    /// let retried = graph.run_with((), options()).await?;
    /// assert_eq!(first.get(charge), Some(&"order-7f3a-0".to_owned()));
    /// assert_eq!(first.get(charge), retried.get(charge));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn idempotency_key(mut self, key: impl Into<Arc<str>>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Gives the run an absolute deadline, a monotonic tokio instant, such as the one the
    /// caller's request carries. With [`timeout`](Self::timeout) too, the earlier applies.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{BoxError, Graph, RunOptions};
    /// use tokio::time::{Instant, sleep};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// let left = g.node("left").task(|ctx, ()| async move {
    ///     Ok::<_, BoxError>(ctx.remaining()) // pass it on as the downstream call's timeout
    /// });
    /// let graph = g.build()?;
    /// let request_deadline = Instant::now() + Duration::from_millis(800);
    /// sleep(Duration::from_millis(300)).await; // time spent before the run
    /// let report = graph.run_with((), RunOptions::new().deadline(request_deadline)).await?;
    /// assert_eq!(report.get(left), Some(&Some(Duration::from_millis(500))));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn deadline(mut self, deadline: Instant) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// The options with the deadline `deadline`, or the one they had if it is earlier.
    #[cfg(feature = "http")]
    pub(crate) fn deadline_at_most(mut self, deadline: Instant) -> Self {
        self.deadline = Some(self.deadline.map_or(deadline, |d| d.min(deadline)));
        self
    }

    /// With `true`, the run's `tracing` span has no parent: under OpenTelemetry, the run
    /// is a trace of its own. By default, or with `false`, the span is a child of the span current
    /// where the run is first polled: a run awaited in a request handler nests under the
    /// request's span, in the request's trace.
    #[must_use]
    pub fn detached_span(mut self, detached: bool) -> Self {
        self.detached = detached;
        self
    }
}
