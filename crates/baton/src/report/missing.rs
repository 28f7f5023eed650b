//! [`MissingValue`]: why a node a caller needs has no value.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

use super::Outcome;
use crate::error::NodeError;

/// A node that [`Report::require`](super::Report::require) asked for has no value: which
/// node, how it ended, and why. Its [`source`](StdError::source) is the node's own error
/// when it failed, or the root cause's when it was skipped, so `?` keeps the whole chain.
///
/// `Send + Sync + 'static`: it converts into [`BoxError`](crate::BoxError) and
/// `anyhow::Error`.
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
/// let missing = report.require(promo).unwrap_err();
/// assert_eq!(missing.node(), "promo");
/// assert_eq!(missing.outcome(), Some(Outcome::Skipped));
/// assert_eq!(missing.cause().map(|e| e.to_string()).as_deref(), Some("503")); // stock's error
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct MissingValue {
    node: String,
    outcome: Option<Outcome>,
    message: String,
    cause: Option<Arc<NodeError>>,
    cause_node: Option<String>,
}

impl MissingValue {
    pub(super) fn new(
        node: String,
        outcome: Option<Outcome>,
        message: String,
        cause: Option<(String, Arc<NodeError>)>,
    ) -> Self {
        let (cause_node, cause) = match cause {
            Some((node, error)) => (Some(node), Some(error)),
            None => (None, None),
        };
        MissingValue {
            node,
            outcome,
            message,
            cause,
            cause_node,
        }
    }

    /// The node's name, or `#index` for a handle of another graph.
    #[must_use]
    pub fn node(&self) -> &str {
        &self.node
    }

    /// How the node ended: `Failed`, `Skipped`, `NotTaken` or `Cancelled`; `None` for a
    /// handle of another graph.
    #[must_use]
    pub fn outcome(&self) -> Option<Outcome> {
        self.outcome
    }

    /// The error behind it: the node's own when it failed, or the root cause's when it was
    /// skipped because an upstream failed.
    #[must_use]
    pub fn cause(&self) -> Option<&NodeError> {
        self.cause.as_deref()
    }

    /// The node whose error [`cause`](Self::cause) is: this node when it failed, the root
    /// cause when it was skipped.
    #[must_use]
    pub fn cause_node(&self) -> Option<&str> {
        self.cause_node.as_deref()
    }
}

impl fmt::Display for MissingValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.outcome, self.message.is_empty()) {
            (Some(outcome), true) => write!(f, "node `{}` {outcome}", self.node),
            (Some(outcome), false) => {
                write!(f, "node `{}` {outcome}: {}", self.node, self.message)
            }
            (None, _) => write!(f, "node `{}`: {}", self.node, self.message),
        }
    }
}

impl StdError for MissingValue {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.cause
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}
