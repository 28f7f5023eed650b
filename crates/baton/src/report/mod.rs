//! The report of a run: every node's outcome, value, error, attempts and timing.
//!
//! Every node of the graph appears in the report with exactly one [`Outcome`]: a node
//! skipped because an upstream produced no value is recorded too, with that upstream and
//! the root cause. This is [rule 2 of the contract](crate::contract#2-exactly-one-outcome-per-node).
//!
//! A [`Report`] holds one [`NodeReport`] per node. [`Report::get`] reads its value, and
//! [`Report::require`] gives a [`MissingValue`] saying why there is none. The report also
//! holds each node's attempts as [`AttemptReport`]s, a map node's items as
//! [`ItemReport`]s, and the run's compensations as [`CompensationReport`]s. [`Counts`]
//! tallies the outcomes. It prints as a timeline, one line per node.

mod attempt_report;
mod chrome;
mod compensation;
mod items;
#[cfg(feature = "serde")]
mod json;
mod missing;
mod outcome;
mod record;
mod timeline;

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub use attempt_report::AttemptReport;
pub(crate) use attempt_report::winner;
pub(crate) use compensation::{CompensationEntry, CompensationRecord};
pub use compensation::{CompensationReport, Compensations};
pub(crate) use items::{Detail, ItemCold, ItemRecord, MapRecord, item_name};
pub use items::{ItemReport, Items};
pub use missing::MissingValue;
pub use outcome::{Counts, Outcome};
pub(crate) use record::{Record, Settled};
use tokio::time::Instant;

use crate::error::{CancelReason, NodeError};
use crate::id::{Node, RunId};
use crate::util::value::Value;

/// What a report reads of a run: its nodes' names, records and values, and its timing.
/// The engine implements it; every node has a record once the run has ended.
pub(crate) trait RunRecords: Send + Sync + 'static {
    /// The run's id.
    fn run_id(&self) -> RunId;
    /// The id of the graph the run belongs to, which a [`Node`] handle names.
    fn graph_id(&self) -> u64;
    /// How many nodes the graph has.
    fn len(&self) -> usize;
    /// Node `id`'s name.
    fn name(&self, id: u32) -> &str;
    /// The node called `name`, if any.
    fn find(&self, name: &str) -> Option<u32>;
    /// Node `id`'s record, once written.
    fn record(&self, id: u32) -> Option<&Settled>;
    /// Node `id`'s value, once it ended with one.
    fn value(&self, id: u32) -> Option<&Value>;
    /// How many attempts of node `id` started.
    fn attempts(&self, id: u32) -> u32;
    /// How many blocking attempts of node `id` were abandoned still running.
    fn abandoned(&self, id: u32) -> u32;
    /// `at` as an offset from the run's start; zero before it started.
    fn offset(&self, at: Instant) -> Duration;
    /// Why the run was cancelled, if it was.
    fn cancel_reason(&self) -> Option<&CancelReason>;
    /// What node `id` kept beside its record, such as a map node's items, if anything.
    fn detail(&self, _id: u32) -> Option<Arc<Detail>> {
        None
    }
    /// What the run's compensations did, if they ran.
    fn compensation(&self) -> Option<Arc<CompensationRecord>> {
        None
    }
}

/// What a run produced: every node of the graph with exactly one [`Outcome`], its value,
/// error, attempts and timing.
///
/// Cheap to clone: it is an `Arc` of the run's state, which it keeps alive as long as it
/// lives, the run input included. `Display` prints a text timeline: one line per node with
/// its outcome, a bar from its start to its end scaled to the makespan, its attempts, and its
/// error. With the `serde` feature it serializes to JSON; the README's section "The report"
/// lists the fields.
///
/// ```
/// use baton_graph::{BoxError, Graph, Outcome};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), BoxError> {
/// let mut g = Graph::<()>::builder();
/// let stock = g.node("stock").task(|_ctx, ()| async { Err::<u32, BoxError>("503".into()) });
/// let promo = g.node("promo").after(stock).task(|_ctx, _| async { Ok::<_, BoxError>(5_u64) });
/// let report = g.build()?.run(()).await?;
/// let promo = report.node(promo).unwrap();
/// assert_eq!(promo.outcome(), Outcome::Skipped);
/// assert_eq!(promo.root_cause().map(|n| n.name()), Some("stock"));
/// assert_eq!(report.counts().without_value(), 2);
/// assert!(report.to_string().contains("promo")); // the text timeline
/// # #[cfg(feature = "serde")] {
/// let json = serde_json::to_value(&report)?;
/// assert_eq!(json["nodes"][1]["skipped_because"], "stock");
/// # }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Report {
    run: Arc<dyn RunRecords>,
}

/// What a node with no record would read as. It cannot happen: every node is recorded
/// before a report exists.
fn missing() -> &'static Settled {
    static MISSING: std::sync::OnceLock<Settled> = std::sync::OnceLock::new();
    MISSING.get_or_init(|| Settled::empty(Outcome::Cancelled, tokio::time::Instant::now()))
}

impl Report {
    pub(crate) fn new(run: Arc<dyn RunRecords>) -> Self {
        Report { run }
    }

    fn record(&self, id: u32) -> &Settled {
        record_of(&*self.run, id)
    }

    fn owns<T>(&self, node: Node<T>) -> bool {
        node.graph == self.run.graph_id() && node.index() < self.len()
    }

    /// Node `id`'s name.
    pub(crate) fn node_name(&self, id: u32) -> &str {
        self.run.name(id)
    }

    /// The run's id.
    #[must_use]
    pub fn run_id(&self) -> RunId {
        self.run.run_id()
    }

    /// The value `node` produced, typed, when it `Succeeded` or `Recovered`. `None` when it
    /// produced none, or when `node` belongs to another graph.
    #[must_use]
    pub fn get<T: Send + Sync + 'static>(&self, node: Node<T>) -> Option<&T> {
        if !self.owns(node) {
            return None;
        }
        self.run
            .value(node.index)
            .and_then(|v| v.downcast_ref::<T>())
    }

    /// The value `node` produced, or why it has none: works with `?` in the default
    /// failure mode, where a run returns its report even when nodes failed.
    ///
    /// ```
    /// use baton_graph::{BoxError, Graph};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// let price = g.node("price").task(|_ctx, ()| async { Ok::<_, BoxError>(59_900_u64) });
    /// let stock = g.node("stock").task(|_ctx, ()| async { Err::<u32, BoxError>("503".into()) });
    /// let report = g.build()?.run(()).await?;
    /// assert_eq!(*report.require(price)?, 59_900);
    /// let missing = report.require(stock).unwrap_err();
    /// assert_eq!(missing.to_string(), "node `stock` failed");
    /// assert_eq!(missing.cause().map(ToString::to_string).as_deref(), Some("503"));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`MissingValue`], naming the node, its outcome and why: its error when failed, the
    /// upstream and root cause when skipped, the cancel reason when cancelled, or that it is
    /// a branch not taken. Also for a handle of another graph.
    pub fn require<T: Send + Sync + 'static>(&self, node: Node<T>) -> Result<&T, MissingValue> {
        if let Some(value) = self.get(node) {
            return Ok(value);
        }
        let Some(entry) = self.node(node) else {
            return Err(MissingValue::new(
                format!("#{}", node.index()),
                None,
                "the handle belongs to another graph".to_owned(),
                None,
            ));
        };
        let outcome = entry.outcome();
        let named = |n: NodeReport<'_>| {
            let error = n.record.error().cloned()?;
            Some((n.name().to_owned(), error))
        };
        let cause = match outcome {
            Outcome::Skipped => entry.root_cause().and_then(named),
            _ => named(entry),
        };
        // The error itself is the source, not part of the message.
        let message = match outcome {
            Outcome::NotTaken => "its router chose another branch".to_owned(),
            Outcome::Failed => String::new(),
            Outcome::Skipped => match (entry.skipped_because(), entry.root_cause()) {
                (Some(because), Some(root)) if because.index() == root.index() => {
                    format!("upstream `{}` {}", root.name(), root.outcome())
                }
                (Some(because), Some(root)) => format!(
                    "upstream `{}` skipped; root cause `{}` {}",
                    because.name(),
                    root.name(),
                    root.outcome()
                ),
                _ => String::new(),
            },
            _ => entry.message().unwrap_or_default(),
        };
        Err(MissingValue::new(
            entry.name().to_owned(),
            Some(outcome),
            message,
            cause,
        ))
    }

    /// Like [`get`](Self::get), as a shared `Arc<T>` that outlives the report.
    #[must_use]
    pub fn value<T: Send + Sync + 'static>(&self, node: Node<T>) -> Option<Arc<T>> {
        if !self.owns(node) {
            return None;
        }
        let value = self.run.value(node.index)?;
        value.to_arc::<T>()
    }

    /// Everything the report knows about `node`; `None` when `node` belongs to another
    /// graph.
    #[must_use]
    pub fn node<T>(&self, node: Node<T>) -> Option<NodeReport<'_>> {
        self.owns(node).then(|| self.entry(node.index))
    }

    /// Everything the report knows about the node called `name`, if there is one.
    ///
    /// O(1). The graph's first lookup by name builds its name table, once per graph, in
    /// O(nodes). Prefer [`node`](Self::node) with a handle where you have one.
    #[must_use]
    pub fn by_name(&self, name: &str) -> Option<NodeReport<'_>> {
        let id = self.run.find(name)?;
        Some(self.entry(id))
    }

    /// Every node, in the order they were added to the graph.
    #[must_use]
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = NodeReport<'_>> {
        (0..self.len() as u32).map(|id| self.entry(id))
    }

    fn entry(&self, id: u32) -> NodeReport<'_> {
        NodeReport::new(&*self.run, id, self.record(id))
    }

    /// How many nodes the graph has. The report has one entry per node.
    #[must_use]
    pub fn len(&self) -> usize {
        self.run.len()
    }

    /// Whether the graph has no nodes.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The time from the run's start to the end of its last node; `Duration::ZERO` for an
    /// empty graph. On tokio's paused clock with sleeping tasks this is exactly the
    /// critical path.
    #[must_use]
    pub fn makespan(&self) -> Duration {
        self.nodes()
            .map(|n| n.end())
            .max()
            .unwrap_or(Duration::ZERO)
    }

    /// How many nodes ended with each outcome.
    ///
    /// ```
    /// use baton_graph::{BoxError, Graph};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// let stock = g.node("stock").task(|_ctx, ()| async { Err::<u32, BoxError>("503".into()) });
    /// g.node("promo").after(stock).task(|_ctx, _| async { Ok::<_, BoxError>(5_u64) });
    /// g.node("price").task(|_ctx, ()| async { Ok::<_, BoxError>(59_900_u64) });
    /// let report = g.build()?.run(()).await?;
    /// let counts = report.counts();
    /// assert_eq!((counts.succeeded, counts.failed, counts.skipped), (1, 1, 1));
    /// assert!(!report.is_clean());
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn counts(&self) -> Counts {
        let mut counts = Counts::default();
        for node in self.nodes() {
            counts.add(node.outcome());
        }
        counts
    }

    /// Whether every node produced a value or was a branch not taken, so that no node
    /// failed, was skipped or was cancelled.
    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.counts().without_value() == 0
    }

    /// Why the run was cancelled, if it was.
    #[must_use]
    pub fn cancel_reason(&self) -> Option<&CancelReason> {
        self.run.cancel_reason()
    }
}

impl fmt::Debug for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Report")
            .field("run", &self.run_id())
            .field("makespan", &self.makespan())
            .field("nodes", &self.nodes().collect::<Vec<_>>())
            .finish()
    }
}

fn record_of(run: &dyn RunRecords, id: u32) -> &Settled {
    match run.record(id) {
        Some(record) => record,
        None => missing(),
    }
}

/// One node's entry in a [`Report`]. It is also what `on_failure` and `on_complete`
/// callbacks receive.
#[derive(Clone, Copy)]
pub struct NodeReport<'r> {
    run: &'r dyn RunRecords,
    id: u32,
    record: &'r Settled,
}

impl<'r> NodeReport<'r> {
    pub(crate) fn new(run: &'r dyn RunRecords, id: u32, record: &'r Settled) -> Self {
        NodeReport { run, id, record }
    }

    fn entry(&self, id: u32) -> NodeReport<'r> {
        NodeReport::new(self.run, id, record_of(self.run, id))
    }

    /// The node's name.
    #[must_use]
    pub fn name(&self) -> &'r str {
        self.run.name(self.id)
    }

    /// The node's position in the graph, in order of addition, from 0.
    #[must_use]
    pub fn index(&self) -> usize {
        self.id as usize
    }

    /// How the node ended.
    #[must_use]
    pub fn outcome(&self) -> Outcome {
        self.record.outcome
    }

    /// How many attempts of its task started; 0 when it never started.
    #[must_use]
    pub fn attempts(&self) -> u32 {
        self.run.attempts(self.id)
    }

    /// Whether its shared circuit breaker judged it alone, by the local machine: the shared
    /// state could not be reached or, in a quorum mode, the breaker had tripped by its own
    /// counts. `false` for a breaker of this process alone, and for a node without a
    /// breaker. Decided when the node first asked its breaker.
    #[must_use]
    pub fn breaker_local(&self) -> bool {
        self.record.breaker_local()
    }

    /// Blocking attempts that timed out or were cancelled while their closure kept running
    /// on the blocking pool: the node moved on without them.
    #[must_use]
    pub fn abandoned(&self) -> u32 {
        self.run.abandoned(self.id)
    }

    /// Each attempt's start, end, preceding backoff and error, for nodes with policies that
    /// needed more than one attempt or whose attempt failed. Empty otherwise: a single
    /// successful attempt is the node's own start and end.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{Backoff, BoxError, Graph, Retry};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// let user = g
    ///     .node("user")
    ///     .retry(Retry::new(3).backoff(Backoff::exponential(Duration::from_millis(100))))
    ///     .task(|ctx, ()| async move {
    ///         if ctx.attempt() < 3 { Err("503".into()) } else { Ok::<_, BoxError>("ada") }
    ///     });
    /// let report = g.build()?.run(()).await?;
    /// let log = report.node(user).unwrap().attempt_log();
    /// let delays: Vec<_> = log.iter().map(|a| a.delay_before.as_millis()).collect();
    /// assert_eq!(delays, [0, 100, 200]);
    /// assert_eq!(log[0].error.as_deref(), Some("503"));
    /// assert_eq!(log[2].error, None);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn attempt_log(&self) -> &'r [AttemptReport] {
        self.record.attempt_log()
    }

    /// The attempt whose value the node has, when it `Succeeded`: with a hedge, the
    /// first to succeed; otherwise its last attempt. `None` for any other outcome.
    #[must_use]
    pub fn winner(&self) -> Option<u32> {
        winner(self.attempt_log(), self.outcome() == Outcome::Succeeded)
    }

    /// When the node started, from the run's start; `None` if it never started, as when
    /// skipped or cancelled while pending.
    #[must_use]
    pub fn start(&self) -> Option<Duration> {
        self.record.start.map(|s| self.run.offset(s))
    }

    /// When the node ended, from the run's start.
    #[must_use]
    pub fn end(&self) -> Duration {
        self.run.offset(self.record.end)
    }

    /// `end - start`, or zero if it never started.
    #[must_use]
    pub fn duration(&self) -> Duration {
        self.record.start.map_or(Duration::ZERO, |s| {
            self.record.end.saturating_duration_since(s)
        })
    }

    /// The node's own error: why it `Failed`, or what a `Recovered` node's fallback recovered
    /// from. `None` for the other outcomes; for `Skipped`, see
    /// [`root_cause`](Self::root_cause).
    #[must_use]
    pub fn error(&self) -> Option<&'r NodeError> {
        self.record.error().map(|e| &**e)
    }

    /// The node's error followed by its [`source`](StdError::source) chain, outermost first.
    ///
    /// ```
    /// use baton_graph::{BoxError, Graph, Retry};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// let stock = g
    ///     .node("stock")
    ///     .retry(Retry::new(2))
    ///     .task(|_ctx, ()| async { Err::<u32, BoxError>("503".into()) });
    /// let report = g.build()?.run(()).await?;
    /// let stock = report.node(stock).unwrap();
    /// let chain: Vec<String> = stock.error_chain().map(|e| e.to_string()).collect();
    /// assert_eq!(chain, [
    ///     "node `stock` gave up after 2 attempt(s) in 100 ms (max attempts reached)",
    ///     "503", // the last attempt's error, as the task returned it
    /// ]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn error_chain(&self) -> impl Iterator<Item = &'r (dyn StdError + 'static)> + use<'r> {
        let first = self
            .record
            .error()
            .map(|e| &**e as &(dyn StdError + 'static));
        std::iter::successors(first, |e: &&'r (dyn StdError + 'static)| {
            let e: &'r (dyn StdError + 'static) = *e;
            e.source()
        })
    }

    /// For a router that ran a branch: the branch it chose, whose attempts, attempt log and
    /// outcome say what the router did. The router itself makes no attempt. `None` for
    /// any other node, and for a router that chose none.
    #[must_use]
    pub fn branch(&self) -> Option<NodeReport<'r>> {
        self.record.branch().map(|id| self.entry(id))
    }

    /// For a `Skipped` node: the upstream that produced no value.
    ///
    /// ```
    /// use baton_graph::{BoxError, Graph};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// let stock = g.node("stock").task(|_ctx, ()| async { Err::<u32, BoxError>("503".into()) });
    /// let promo = g.node("promo").after(stock).task(|_ctx, _| async { Ok::<_, BoxError>(5_u64) });
    /// let notify = g.node("notify").after(promo).task(|_ctx, _| async { Ok::<_, BoxError>(()) });
    /// let report = g.build()?.run(()).await?;
    /// let notify = report.node(notify).unwrap();
    /// assert_eq!(notify.skipped_because().map(|n| n.name()), Some("promo"));
    /// assert_eq!(notify.root_cause().map(|n| n.name()), Some("stock"));
    /// let why = notify.message().unwrap();
    /// assert_eq!(why, "upstream `promo` skipped; root cause `stock` failed: 503");
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn skipped_because(&self) -> Option<NodeReport<'r>> {
        self.record.because().map(|id| self.entry(id))
    }

    /// For a `Skipped` node: the node whose failure or cancellation caused the skip,
    /// following skipped upstreams back to the first node that did not skip.
    #[must_use]
    pub fn root_cause(&self) -> Option<NodeReport<'r>> {
        self.record.root().map(|id| self.entry(id))
    }

    /// A one-line explanation of why the node has no value, or what it recovered from:
    /// the error chain joined by `": "` for `Failed` and `Recovered`; the root cause for
    /// `Skipped`; the run's cancel reason for `Cancelled`. `None` for `Succeeded`.
    #[must_use]
    pub fn message(&self) -> Option<String> {
        match self.outcome() {
            Outcome::Skipped => {
                let because = self.skipped_because()?;
                let root = self.root_cause()?;
                let why = root.message().unwrap_or_else(|| root.outcome().to_string());
                Some(if because.index() == root.index() {
                    format!("upstream `{}` {}: {why}", root.name(), root.outcome())
                } else {
                    format!(
                        "upstream `{}` skipped; root cause `{}` {}: {why}",
                        because.name(),
                        root.name(),
                        root.outcome()
                    )
                })
            }
            Outcome::Cancelled => Some(
                self.run
                    .cancel_reason()
                    .map_or_else(|| "cancelled".to_owned(), ToString::to_string),
            ),
            _ => {
                let parts: Vec<String> = self.error_chain().map(ToString::to_string).collect();
                (!parts.is_empty()).then(|| parts.join(": "))
            }
        }
    }
}

impl fmt::Debug for NodeReport<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeReport")
            .field("name", &self.name())
            .field("outcome", &self.outcome())
            .field("attempts", &self.attempts())
            .field("start", &self.start())
            .field("end", &self.end())
            .field("error", &self.message())
            .field("skipped_because", &self.skipped_because().map(|n| n.name()))
            .field("breaker_local", &self.breaker_local())
            .finish()
    }
}
