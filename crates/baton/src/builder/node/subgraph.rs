//! A graph as a node: [`NodeBuilder::subgraph`].

use std::sync::Arc;

use super::NodeBuilder;
use crate::engine::{Ctx, Graph, NodeKind, RunOptions, Upstreams};
use crate::error::BoxError;
use crate::id::Node;
use crate::report::Report;

impl<I, U, T> NodeBuilder<'_, I, U, T>
where
    I: Send + Sync + 'static,
    U: Upstreams,
    T: Send + Sync + 'static,
{
    /// Makes the node run `graph`, a built graph, as its task: `input` makes the inner
    /// run's input from the run input and the upstreams' values, and `output` the node's
    /// value from the inner run's report. The same graph can be a node of several graphs
    /// and run on its own.
    ///
    /// The inner run inherits the attempt's deadline, made of its timeout, the node's
    /// budget and the run's deadline, and the attempt's cancellation. When the node's
    /// timeout cuts the attempt, or its run is cancelled, the inner run is dropped, which
    /// cancels it alone. Its idempotency key is the node's, so its nodes' keys are prefixed
    /// by it, as in `…-4-2`. Its events reach the outer run's observers, as the outer
    /// run's, its nodes named after this node and a slash, as in `user/name`. They also
    /// reach the observers of the orchestrator `graph` was built with, as a run of its own.
    /// An observer of both, when one orchestrator built both graphs, hears each event once,
    /// as the outer run's. Its report is nested in the node's, in [`Report::inner`], in the
    /// timeline, indented, and in the JSON under `inner`. That holds also when the attempt
    /// was cut before the inner run ended: the report is then as it stood at the cut, its
    /// unfinished nodes `Cancelled`. An inner run that is an error fails the node's attempt
    /// with the [`RunError`](crate::RunError) as its task error; the node's policies, such
    /// as retry and fallback, apply to it as to any task.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use baton_graph::{BoxError, Graph};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// // A flow of its own: a user's name and entitlements, from a user id.
    /// let mut inner = Graph::<u64>::builder();
    /// let name = inner.node("name").task(|ctx, ()| {
    ///     let id = *ctx.input();
    ///     async move { Ok::<_, BoxError>(format!("user {id}")) }
    /// });
    /// let profile = inner.build()?;
    ///
    /// let mut g = Graph::<u64>::builder();
    /// let user = g.node("user").subgraph(
    ///     &profile,
    ///     |id: &u64, ()| *id,
    ///     move |report| report.require(name).cloned(),
    /// );
    /// let report = g.build()?.run(7).await?;
    /// assert_eq!(report.get(user).map(String::as_str), Some("user 7"));
    /// let nested = report.inner(user).unwrap();
    /// assert_eq!(nested.get(name).map(String::as_str), Some("user 7"));
    /// assert!(profile.run(8).await.is_ok()); // and on its own
    /// # let _ = Arc::new(());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// The inner graph's input type is checked when the graph is built, by the compiler:
    /// an `input` that makes another type does not compile.
    ///
    /// ```compile_fail
    /// use baton_graph::{BoxError, Graph};
    ///
    /// let mut inner = Graph::<u64>::builder(); // takes a user id
    /// let name = inner.node("name").task(|_ctx, ()| async { Ok::<_, BoxError>(1_u32) });
    /// let profile = inner.build().unwrap();
    /// let mut g = Graph::<String>::builder();
    /// // `input` makes a `String`, the inner graph takes a `u64`: a type error.
    /// g.node("user").subgraph(&profile, |id: &String, ()| id.clone(), move |r| {
    ///     r.require(name).copied()
    /// });
    /// ```
    pub fn subgraph<J, In, Out, E>(mut self, graph: &Graph<J>, input: In, output: Out) -> Node<T>
    where
        J: Send + Sync + 'static,
        In: Fn(&I, U::Values) -> J + Send + Sync + 'static,
        Out: Fn(&Report) -> Result<T, E> + Send + Sync + 'static,
        E: Into<BoxError> + 'static,
    {
        self.extras.get_or_insert_with(Box::default).kind = NodeKind::Subgraph;
        let graph = graph.clone();
        let output = Arc::new(output);
        self.task(move |ctx: Ctx<I>, values| {
            let inner_input = input(ctx.input(), values);
            let mut options = RunOptions::new().idempotency_key(ctx.idempotency_key().to_string());
            if let Some(deadline) = ctx.deadline() {
                options = options.deadline(deadline);
            }
            let run = ctx.run_nested(&graph, inner_input, options);
            let output = Arc::clone(&output);
            async move {
                let result = run.await;
                match result {
                    Ok(report) => output(&report).map_err(Into::into),
                    Err(error) => Err(Box::new(error) as BoxError),
                }
            }
        })
    }
}
