//! [`Fallback`]: the value a node produces when every inner layer failed: the attempts, the
//! retries and the breaker.
//!
//! It runs only after the inner layers failed — never on success, never on cancellation —
//! and receives the error they ended with. Its value makes the node `Recovered`; the error
//! stays in the report.

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::FutureExt;

use crate::error::{BoxError, NodeError, UserCode};

type AsyncFallback<T> = Arc<
    dyn Fn(Arc<NodeError>) -> Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>
        + Send
        + Sync,
>;

/// How a node recovers when its inner layers failed.
///
/// - [`Fallback::value`]: a fixed value, shared between runs, not cloned.
/// - [`Fallback::from_fn`]: a function of the error.
/// - [`Fallback::from_async`]: an async function of the error, which may itself fail.
///
/// A fallback that panics or fails leaves the node `Failed` with
/// [`NodeError::FallbackFailed`], which keeps the original error.
pub struct Fallback<T> {
    kind: Kind<T>,
}

enum Kind<T> {
    Value(Arc<T>),
    Fn(Arc<dyn Fn(&NodeError) -> T + Send + Sync>),
    Async(AsyncFallback<T>),
}

impl<T> Clone for Fallback<T> {
    fn clone(&self) -> Self {
        let kind = match &self.kind {
            Kind::Value(v) => Kind::Value(Arc::clone(v)),
            Kind::Fn(f) => Kind::Fn(Arc::clone(f)),
            Kind::Async(f) => Kind::Async(Arc::clone(f)),
        };
        Fallback { kind }
    }
}

impl<T> fmt::Debug for Fallback<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            Kind::Value(_) => "value",
            Kind::Fn(_) => "fn",
            Kind::Async(_) => "async fn",
        };
        f.debug_struct("Fallback").field("kind", &kind).finish()
    }
}

impl<T: Send + Sync + 'static> Fallback<T> {
    /// Recovers with `value`.
    #[must_use]
    pub fn value(value: T) -> Self {
        Fallback {
            kind: Kind::Value(Arc::new(value)),
        }
    }

    /// Recovers with `f(&error)`; `error` is what the inner layers ended with. See
    /// [`NodeError::task_error`] to reach the task's own error.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{BoxError, Fallback, Pipeline};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let quote = Pipeline::<String>::builder("quote")
    ///     .timeout(Duration::from_millis(100))
    ///     .fallback(Fallback::from_fn(|e| format!("cached quote ({})", e.kind())))
    ///     .build()?;
    /// let value = quote
    ///     .call(|_| async {
    ///         tokio::time::sleep(Duration::from_secs(1)).await;
    ///         Ok::<_, BoxError>("live quote".to_owned())
    ///     })
    ///     .await?;
    /// assert_eq!(value, "cached quote (timeout)");
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn from_fn(f: impl Fn(&NodeError) -> T + Send + Sync + 'static) -> Self {
        Fallback {
            kind: Kind::Fn(Arc::new(f)),
        }
    }

    /// Recovers with the value of `f(error).await`; an `Err` leaves the node `Failed` with
    /// [`NodeError::FallbackFailed`].
    ///
    /// ```
    /// use baton_graph::{BoxError, Fallback, Outcome, Pipeline};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let user = Pipeline::<String>::builder("user")
    ///     .fallback(Fallback::from_async(|_error| async {
    ///         // e.g. read the replica instead
    ///         Ok::<_, BoxError>("ada (from the replica)".to_owned())
    ///     }))
    ///     .build()?;
    /// let call = user.run(|_| async { Err::<String, BoxError>("primary down".into()) }).await;
    /// assert_eq!(call.outcome(), Outcome::Recovered);
    /// assert_eq!(call.value().map(String::as_str), Some("ada (from the replica)"));
    /// assert_eq!(call.error().map(|e| e.to_string()).as_deref(), Some("primary down"));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn from_async<F, Fut, E>(f: F) -> Self
    where
        F: Fn(Arc<NodeError>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        Fallback {
            kind: Kind::Async(Arc::new(move |e| {
                let fut = f(e);
                Box::pin(async move { fut.await.map_err(Into::into) })
            })),
        }
    }

    /// Runs the fallback for `error`, catching panics.
    pub(crate) async fn recover(
        &self,
        node: &str,
        error: Arc<NodeError>,
    ) -> Result<Recovered<T>, NodeError> {
        let failed = |e: NodeError, original: Arc<NodeError>| NodeError::FallbackFailed {
            node: node.to_owned(),
            error: Box::new(e),
            original,
        };
        match &self.kind {
            Kind::Value(v) => Ok(Recovered::Shared(Arc::clone(v))),
            Kind::Fn(f) => match std::panic::catch_unwind(AssertUnwindSafe(|| f(&error))) {
                Ok(v) => Ok(Recovered::Owned(v)),
                Err(p) => Err(failed(
                    NodeError::from_panic(UserCode::Fallback, p.as_ref()),
                    error,
                )),
            },
            Kind::Async(f) => recover_async(node, error, |e| f(e))
                .await
                .map(Recovered::Owned),
        }
    }
}

/// What [`NodeBuilder::fallback`](crate::NodeBuilder::fallback) accepts for a node whose
/// task produces a `T`: a [`Fallback<T>`], or a plain `T`, which recovers with that value
/// as [`Fallback::value`] does.
///
/// The node's value type is the one its task returns. A fallback of another type is a
/// compile error at the `.fallback(..)` call, naming the type the task returns.
///
/// ```
/// use baton_graph::{BoxError, Fallback, Graph};
///
/// let mut g = Graph::<()>::builder();
/// let a = g.node("a").fallback(0_u32).task(|_ctx, ()| async { Ok::<_, BoxError>(1_u32) });
/// let b = g
///     .node("b")
///     .fallback(Fallback::from_fn(|_error| 0_u32))
///     .task(|_ctx, ()| async { Ok::<_, BoxError>(2_u32) });
/// # let _ = (a, b);
/// ```
///
/// This is sealed: it is implemented for `Fallback<T>` and `T` only.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a fallback for this node, whose task returns `{T}`",
    label = "expected a `Fallback<{T}>` or a `{T}`",
    note = "a node's value type is the one its task returns; its fallback must produce the same type"
)]
pub trait IntoFallback<T>: sealed::Sealed<T> {
    #[doc(hidden)]
    fn __into_fallback(self) -> Fallback<T>;
}

mod sealed {
    pub trait Sealed<T> {}
}

impl<T: Send + Sync + 'static> sealed::Sealed<T> for Fallback<T> {}
impl<T: Send + Sync + 'static> IntoFallback<T> for Fallback<T> {
    fn __into_fallback(self) -> Fallback<T> {
        self
    }
}

impl<T: Send + Sync + 'static> sealed::Sealed<T> for T {}
impl<T: Send + Sync + 'static> IntoFallback<T> for T {
    fn __into_fallback(self) -> Fallback<T> {
        Fallback::value(self)
    }
}

/// Runs an async fallback: `start(error)` makes its future, which is awaited. A panic in
/// either, which is caught, or an `Err` fails with [`NodeError::FallbackFailed`] naming
/// `node` and keeping `error`.
pub(crate) async fn recover_async<T, Fut>(
    node: &str,
    error: Arc<NodeError>,
    start: impl FnOnce(Arc<NodeError>) -> Fut,
) -> Result<T, NodeError>
where
    Fut: Future<Output = Result<T, BoxError>>,
{
    let failed = |e: NodeError, original: Arc<NodeError>| NodeError::FallbackFailed {
        node: node.to_owned(),
        error: Box::new(e),
        original,
    };
    let fut = match std::panic::catch_unwind(AssertUnwindSafe(|| start(Arc::clone(&error)))) {
        Ok(fut) => fut,
        Err(p) => {
            return Err(failed(
                NodeError::from_panic(UserCode::Fallback, p.as_ref()),
                error,
            ));
        }
    };
    match AssertUnwindSafe(fut).catch_unwind().await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(failed(NodeError::Task(e), error)),
        Err(p) => Err(failed(
            NodeError::from_panic(UserCode::Fallback, p.as_ref()),
            error,
        )),
    }
}

/// A fallback's value: the one a [`Fallback::value`] shares between runs, or one made for
/// this recovery.
#[derive(Debug)]
pub(crate) enum Recovered<T> {
    /// The fixed value, shared.
    Shared(Arc<T>),
    /// A value made from the error.
    Owned(T),
}
