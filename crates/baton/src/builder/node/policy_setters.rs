//! A node's policies: the setters it shares with [`Policies`], `policies(..)`, and its
//! fallback.

use std::future::Future;
use std::sync::Arc;

use super::NodeBuilder;
use crate::engine::{Ctx, NodeFallback, Upstreams};
use crate::error::{BoxError, NodeError};
use crate::onion::{IntoFallback, Policies, policy_setters};

impl<I, U, T> NodeBuilder<'_, I, U, T> {
    policy_setters!();

    /// Takes `policies`, given by value or by reference, as this node's. Setters called
    /// after it refine them for this node; setters called before it are replaced. Nodes
    /// given equal policies share one record of them in the graph.
    ///
    /// ```
    /// use std::time::Duration;
    /// use baton_graph::{BoxError, Graph, Policies, Retry};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let calls = Policies::new().retry(Retry::new(3)).timeout(Duration::from_millis(50));
    /// let mut g = Graph::<()>::builder();
    /// let user = g
    ///     .node("user")
    ///     .policies(&calls)
    ///     .task(|_ctx, ()| async { Err::<u32, BoxError>("503".into()) });
    /// let sku = g
    ///     .node("sku")
    ///     .timeout(Duration::from_secs(1)) // replaced by the policies below
    ///     .policies(&calls)
    ///     .retry(Retry::new(1)) // refines them: no retry for this node
    ///     .task(|_ctx, ()| async {
    ///         tokio::time::sleep(Duration::from_millis(200)).await;
    ///         Ok::<u32, BoxError>(7)
    ///     });
    /// let report = g.build()?.run(()).await?;
    /// assert_eq!(report.node(user).map(|n| n.attempts()), Some(3));
    /// let sku = report.node(sku).unwrap();
    /// assert_eq!(sku.end(), Duration::from_millis(50)); // cut by the policies' timeout
    /// assert_eq!(sku.attempts(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn policies(mut self, policies: impl Into<Policies>) -> Self {
        *self.policies_mut() = policies.into();
        self
    }

    /// Recovers with `fallback` when the inner layers failed: the node ends `Recovered` with
    /// the fallback's value, and the report keeps the error. Replaces a fallback set before.
    ///
    /// `fallback` is a [`Fallback<T>`](crate::Fallback) or a plain `T`; see
    /// [`IntoFallback`]. The task sets the node's value type, and the fallback must produce
    /// the same.
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
    /// A task that only fails, after a `Fallback`, leaves the type open, and the compiler
    /// says "type annotations needed": write `Err::<u64, _>(..)` in it.
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
        self.declared().has_fallback = true;
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
        self.declared().has_fallback = true;
        self
    }
}
