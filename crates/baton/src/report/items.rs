//! The items of a map node in a report, [`Items`]: one [`ItemReport`] per element of its
//! list, and what its [`Completion`] rule decided.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{AttemptReport, Outcome, Report};
use crate::error::NodeError;
use crate::id::Node;
use crate::policy::completion::{Completion, Decision};

/// What a node kept beside its record, for the report: a map node's items.
#[derive(Debug)]
pub(crate) enum Detail {
    /// A map node's items and its rule's decision.
    Map(MapRecord),
    /// A subgraph node's inner run.
    Inner(Report),
}

/// A map node's items, in input order, and what its rule decided.
#[derive(Debug)]
pub(crate) struct MapRecord {
    pub(crate) completion: Completion,
    pub(crate) decision: Decision,
    pub(crate) items: Vec<ItemRecord>,
}

/// One item's end. What only items that did not simply succeed have is boxed apart.
#[derive(Debug)]
pub(crate) struct ItemRecord {
    pub(crate) index: u32,
    pub(crate) outcome: Outcome,
    pub(crate) attempts: u32,
    /// From the run's start; `None` for an item that never started.
    pub(crate) start: Option<Duration>,
    pub(crate) end: Duration,
    pub(crate) cold: Option<Box<ItemCold>>,
}

/// An item's error and attempt log.
#[derive(Debug, Default)]
pub(crate) struct ItemCold {
    pub(crate) error: Option<Arc<NodeError>>,
    pub(crate) attempt_log: Vec<AttemptReport>,
}

impl Report {
    /// The items of map node `node`: one entry per element of its list, in input order,
    /// with the rule it ran under and what that rule decided. `None` for a node that is not
    /// a map node, that never started, or that belongs to another graph.
    ///
    /// ```
    /// use baton_graph::{BoxError, Graph, Outcome};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// let cart = g.node("cart").task(|_ctx, ()| async { Ok::<_, BoxError>(vec![3_u64, 4]) });
    /// let doubled = g.node("double").after(cart).map(|_ctx, n: u64| async move {
    ///     Ok::<_, BoxError>(n * 2)
    /// });
    /// let report = g.build()?.run(()).await?;
    /// assert_eq!(report.get(doubled), Some(&vec![6, 8]));
    /// let items = report.items(doubled).unwrap();
    /// assert_eq!(items.len(), 2);
    /// assert_eq!(items.get(1).map(|i| i.name()).as_deref(), Some("double[1]"));
    /// assert!(items.iter().all(|i| i.outcome() == Outcome::Succeeded));
    /// assert!(items.decision().met);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn items<T>(&self, node: Node<T>) -> Option<Items> {
        if !self.owns(node) {
            return None;
        }
        self.items_of(node.index)
    }

    /// The items of node `id`, if it is a map node that started.
    pub(crate) fn items_of(&self, id: u32) -> Option<Items> {
        let detail = self.run.detail(id)?;
        match &*detail {
            Detail::Map(_) => Some(Items {
                node: self.run.name(id).into(),
                detail,
            }),
            Detail::Inner(_) => None,
        }
    }
}

impl super::NodeReport<'_> {
    /// For a subgraph node: its inner run's report, as [`Report::inner`] gives it.
    #[must_use]
    pub fn inner(&self) -> Option<Report> {
        match &*self.run.detail(self.id)? {
            Detail::Inner(report) => Some(report.clone()),
            Detail::Map(_) => None,
        }
    }

    /// For a map node: its items, as [`Report::items`] gives them.
    #[must_use]
    pub fn items(&self) -> Option<Items> {
        let detail = self.run.detail(self.id)?;
        match &*detail {
            Detail::Map(_) => Some(Items {
                node: self.name().into(),
                detail,
            }),
            Detail::Inner(_) => None,
        }
    }
}

impl Report {
    /// The inner run of subgraph node `node`, made with
    /// [`NodeBuilder::subgraph`](crate::NodeBuilder::subgraph): the report of its last
    /// attempt's run. `None` for another node, or when no inner run ended because the
    /// node's timeout cut it.
    #[must_use]
    pub fn inner<T>(&self, node: Node<T>) -> Option<Report> {
        if !self.owns(node) {
            return None;
        }
        self.inner_of(node.index)
    }

    /// The inner run of node `id`, if it has one.
    pub(crate) fn inner_of(&self, id: u32) -> Option<Report> {
        match &*self.run.detail(id)? {
            Detail::Inner(report) => Some(report.clone()),
            Detail::Map(_) => None,
        }
    }
}

/// A map node's items in a [`Report`], from [`Report::items`].
#[derive(Clone)]
pub struct Items {
    node: Arc<str>,
    detail: Arc<Detail>,
}

impl Items {
    fn map(&self) -> &MapRecord {
        match &*self.detail {
            Detail::Map(map) => map,
            Detail::Inner(_) => unreachable!("`Items` holds a map node's detail"),
        }
    }

    /// The rule the node ran under.
    #[must_use]
    pub fn completion(&self) -> Completion {
        self.map().completion
    }

    /// What the rule decided, and the counts it decided on.
    #[must_use]
    pub fn decision(&self) -> Decision {
        self.map().decision
    }

    /// How many items the list had.
    #[must_use]
    pub fn len(&self) -> usize {
        self.map().items.len()
    }

    /// Whether the list was empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.map().items.is_empty()
    }

    /// Item `index`, its position in the list.
    #[must_use]
    pub fn get(&self, index: usize) -> Option<ItemReport<'_>> {
        let record = self.map().items.get(index)?;
        Some(ItemReport {
            node: &self.node,
            record,
        })
    }

    /// The items, in input order.
    #[must_use]
    pub fn iter(&self) -> impl ExactSizeIterator<Item = ItemReport<'_>> {
        let node = &*self.node;
        self.map()
            .items
            .iter()
            .map(move |record| ItemReport { node, record })
    }
}

impl fmt::Debug for Items {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Items")
            .field("node", &self.node)
            .field("completion", &self.completion())
            .field("decision", &self.decision())
            .field("len", &self.len())
            .finish()
    }
}

/// One item of a map node: its outcome, attempts, timing and error.
#[derive(Clone, Copy)]
pub struct ItemReport<'r> {
    node: &'r str,
    record: &'r ItemRecord,
}

impl<'r> ItemReport<'r> {
    /// The item's position in the list, from 0.
    #[must_use]
    pub fn index(&self) -> usize {
        self.record.index as usize
    }

    /// The item's name, as events and the timeline show it: `node[index]`.
    #[must_use]
    pub fn name(&self) -> String {
        item_name(self.node, self.record.index)
    }

    /// How the item ended: `Succeeded`; `Recovered` when its fallback answered; `Failed`; or
    /// `Cancelled` when the rule was decided while it ran or before it started.
    #[must_use]
    pub fn outcome(&self) -> Outcome {
        self.record.outcome
    }

    /// How many attempts of the item's task started.
    #[must_use]
    pub fn attempts(&self) -> u32 {
        self.record.attempts
    }

    /// When the item started, from the run's start; `None` if it never started.
    #[must_use]
    pub fn start(&self) -> Option<Duration> {
        self.record.start
    }

    /// When the item ended, from the run's start.
    #[must_use]
    pub fn end(&self) -> Duration {
        self.record.end
    }

    /// Why the item failed, or what its fallback recovered from.
    #[must_use]
    pub fn error(&self) -> Option<&'r NodeError> {
        self.record.cold.as_ref()?.error.as_deref()
    }

    /// Each attempt, as a node's [`attempt_log`](super::NodeReport::attempt_log).
    #[must_use]
    pub fn attempt_log(&self) -> &'r [AttemptReport] {
        self.record.cold.as_ref().map_or(&[], |c| &c.attempt_log)
    }

    /// A one-line explanation: the error chain for `Failed` and `Recovered`, why it was
    /// cancelled for `Cancelled`; `None` for `Succeeded`.
    #[must_use]
    pub fn message(&self) -> Option<String> {
        match (self.outcome(), self.error()) {
            (Outcome::Cancelled, _) => Some("cancelled: the completion rule was decided".into()),
            (_, Some(error)) => {
                let mut text = error.to_string();
                let mut source = std::error::Error::source(error);
                while let Some(e) = source {
                    let next = e.to_string();
                    if !text.ends_with(&next) {
                        text.push_str(": ");
                        text.push_str(&next);
                    }
                    source = e.source();
                }
                Some(text)
            }
            (_, None) => None,
        }
    }
}

impl fmt::Debug for ItemReport<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ItemReport")
            .field("name", &self.name())
            .field("outcome", &self.outcome())
            .field("attempts", &self.attempts())
            .field("start", &self.start())
            .field("end", &self.end())
            .field("error", &self.error())
            .finish()
    }
}

/// `node[index]`: an item's name.
pub(crate) fn item_name(node: &str, index: u32) -> String {
    format!("{node}[{index}]")
}
