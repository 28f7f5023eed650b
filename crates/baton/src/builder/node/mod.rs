//! [`NodeBuilder`]: one node's upstreams, policies and callbacks, then its task.

mod map;
mod policy_setters;
mod subgraph;

use std::fmt;
use std::future::Future;

use super::compensate::CompensateSpec;
use super::graph_builder::{GraphBuilder, NewNode};
use super::policy::Declared;
use crate::engine::{
    BlockingTask, Ctx, Extras, Named, NodeFallback, TaskRef, Tasks, TypedTask, Upstreams,
};
use crate::error::{BoxError, BuildError};
use crate::id::Node;
use crate::observe::NodeCallbacks;
use crate::onion::Policies;
use crate::report::NodeReport;

/// One node being defined: its upstreams and policies, then its task.
///
/// `U` is the upstreams' shape, as [`Upstreams`] describes, and `T` the task's value;
/// both are inferred. The node is added to the graph when [`task`](Self::task) or
/// [`blocking_task`](Self::blocking_task) is called.
///
/// # Policies and their defaults
/// Policies compose in a fixed onion, inner to outer: the attempt, then retry, then the
/// circuit breaker, then the fallback. An attempt takes its rate-limit permit and its
/// bulkhead permit, draws its injected faults, and runs the task under its per-attempt
/// timeout; a hedge races further attempts against it. The
/// [contract's rule 3](crate::contract#3-the-onion) gives the details. The setters are
/// those of [`Policies`], which [`policies`](Self::policies) takes whole. Without a setter
/// call, a node has:
/// - [`timeout`](Self::timeout): no per-attempt limit; only a deadline cuts an attempt;
/// - [`retry`](Self::retry): one attempt, never retried;
/// - [`budget`](Self::budget): no budget of its own; the run's deadline applies if it has
///   one;
/// - [`min_attempt_time`](Self::min_attempt_time): 10 ms;
/// - [`breaker`](Self::breaker): no breaker, and so [`breaker_ignore`](Self::breaker_ignore)
///   has nothing to tell; with a breaker, every error counts;
/// - [`bulkhead`](Self::bulkhead), [`rate_limit`](Self::rate_limit): no limit on attempts;
/// - [`hedge`](Self::hedge): one attempt at a time;
/// - [`chaos`](Self::chaos): no injected faults;
/// - [`fallback`](Self::fallback), [`fallback_with`](Self::fallback_with): none, so a node
///   whose attempts all failed ends `Failed`.
#[must_use = "a node is only added to the graph when `.task(..)` is called"]
pub struct NodeBuilder<'g, I, U, T> {
    /// Holds the node's name, pending since [`Names::begin`], until the node is added.
    builder: &'g mut GraphBuilder<I>,
    upstreams: U,
    /// Boxed on first use: most nodes have no policy and no callback, and a small builder
    /// is cheap to move through `.after(..)` and `.task(..)`.
    extras: Option<Box<Extras<Declared>>>,
    fallback: Option<NodeFallback<I, T>>,
    /// For a map node: how many items run at once, when given.
    concurrency: Option<usize>,
    /// Its compensation, if it has one.
    pub(super) compensation: Option<Box<CompensateSpec<I>>>,
}

impl<I, U: fmt::Debug, T> fmt::Debug for NodeBuilder<'_, I, U, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeBuilder")
            .field("name", &self.builder.names.pending())
            .field("upstreams", &self.upstreams)
            .field("fallback", &self.fallback)
            .finish_non_exhaustive()
    }
}

impl<'g, I: Send + Sync + 'static, T> NodeBuilder<'g, I, (), T> {
    /// Declares the node's upstreams: a [`Node`] handle, a tuple of 1 to 16 handles, or a
    /// `Vec` of handles of one type. The task then receives their values typed, each as an
    /// `Arc`: `(Node<User>, Node<Sku>)` gives `(Arc<User>, Arc<Sku>)`.
    ///
    /// The node's first attempt starts only after every upstream ended with a value; when one
    /// did not, the node ends `Skipped` naming it.
    ///
    /// ```
    /// use baton_graph::{BoxError, Graph};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// let user = g.node("user").task(|_ctx, ()| async { Ok::<_, BoxError>("ada") });
    /// let sku = g.node("sku").task(|_ctx, ()| async { Ok::<_, BoxError>(42_u32) });
    /// let line = g.node("line").after((user, sku)).task(|_ctx, (user, sku)| async move {
    ///     Ok::<_, BoxError>(format!("{user} buys sku {sku}"))
    /// });
    /// let report = g.build()?.run(()).await?;
    /// assert_eq!(report.get(line).map(String::as_str), Some("ada buys sku 42"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn after<U: Upstreams>(self, upstreams: U) -> NodeBuilder<'g, I, U, T> {
        NodeBuilder {
            builder: self.builder,
            upstreams,
            extras: self.extras,
            fallback: self.fallback,
            concurrency: self.concurrency,
            compensation: self.compensation,
        }
    }

    /// Declares the node's upstreams by name, for graphs built from configuration. Each
    /// must produce a `V`; the task receives their values as [`Inputs<V>`](crate::Inputs).
    /// Name `V` with a turbofish, as in `after_names::<u64>([..])`, unless the task's
    /// arguments say it.
    ///
    /// Names may refer to nodes added later. `build()` reports an unknown name as
    /// [`BuildError::UnknownUpstream`](crate::BuildError::UnknownUpstream), an upstream of
    /// another type as [`BuildError::TypeMismatch`](crate::BuildError::TypeMismatch) and a
    /// cycle as [`BuildError::Cycle`](crate::BuildError::Cycle).
    ///
    /// ```
    /// use baton_graph::{BoxError, Graph};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<()>::builder();
    /// // From configuration: `total` sums the nodes it names.
    /// let total = g.node("total").after_names::<u64>(["a", "b"]).task(|_ctx, inputs| async move {
    ///     Ok::<_, BoxError>(inputs.iter().map(|(_name, v)| **v).sum::<u64>())
    /// });
    /// for (name, v) in [("a", 40_u64), ("b", 2)] {
    ///     g.node(name).task(move |_ctx, ()| async move { Ok::<_, BoxError>(v) });
    /// }
    /// let report = g.build()?.run(()).await?;
    /// assert_eq!(report.get(total), Some(&42));
    /// # Ok(())
    /// # }
    /// ```
    pub fn after_names<V>(
        self,
        names: impl IntoIterator<Item = impl Into<String>>,
    ) -> NodeBuilder<'g, I, Named<V>, T>
    where
        V: Send + Sync + 'static,
    {
        self.after(Named::new(names.into_iter().map(Into::into).collect()))
    }
}

impl<'g, I, T> NodeBuilder<'g, I, (), T> {
    /// A node builder for the name `builder` holds pending.
    pub(super) fn new(builder: &'g mut GraphBuilder<I>) -> Self {
        NodeBuilder {
            builder,
            upstreams: (),
            extras: None,
            fallback: None,
            concurrency: None,
            compensation: None,
        }
    }
}

impl<'g, I, U, T> NodeBuilder<'g, I, U, T> {
    pub(super) fn for_branch(builder: &'g mut GraphBuilder<I>, name: &str, upstreams: U) -> Self {
        builder.names.begin(name);
        NodeBuilder {
            builder,
            upstreams,
            extras: None,
            fallback: None,
            concurrency: None,
            compensation: None,
        }
    }

    fn declared(&mut self) -> &mut Declared {
        self.extras
            .get_or_insert_with(Box::default)
            .policy
            .get_or_insert_with(Declared::default)
    }

    fn policies_mut(&mut self) -> &mut Policies {
        &mut self.declared().policies
    }

    fn callbacks(&mut self) -> &mut NodeCallbacks {
        self.extras
            .get_or_insert_with(Box::default)
            .callbacks
            .get_or_insert_with(Box::default)
    }
}

impl<I, U, T: Send + Sync + 'static> NodeBuilder<'_, I, U, T> {
    /// Calls `f` with the node's value when it ends `Succeeded` or `Recovered`. Several
    /// callbacks stack and fire in registration order, exactly once per run; a panicking
    /// one is caught and logged.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use baton_graph::{BoxError, Graph};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let last_price = Arc::new(AtomicU64::new(0));
    /// let seen = Arc::clone(&last_price);
    /// let mut g = Graph::<()>::builder();
    /// g.node("price")
    ///     .on_success(move |cents: &u64| seen.store(*cents, Ordering::Relaxed))
    ///     .task(|_ctx, ()| async { Ok::<_, BoxError>(59_900_u64) });
    /// g.build()?.run(()).await?;
    /// assert_eq!(last_price.load(Ordering::Relaxed), 59_900);
    /// # Ok(())
    /// # }
    /// ```
    pub fn on_success(mut self, f: impl Fn(&T) + Send + Sync + 'static) -> Self {
        self.callbacks().on_success(f);
        self
    }

    /// Calls `f` with the node's report entry when it ends `Failed` or `Skipped`: its
    /// [`error`](NodeReport::error), or, for a skip, the upstream that
    /// [caused](NodeReport::skipped_because) it and the [root cause](NodeReport::root_cause).
    /// Stacks like [`on_success`](Self::on_success).
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use baton_graph::{BoxError, Graph};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let failures = Arc::new(Mutex::new(Vec::new()));
    /// let log = Arc::clone(&failures);
    /// let mut g = Graph::<()>::builder();
    /// let stock = g.node("stock").task(|_ctx, ()| async { Err::<u32, BoxError>("503".into()) });
    /// g.node("promo")
    ///     .after(stock)
    ///     .on_failure(move |n| log.lock().unwrap().push(n.message().unwrap_or_default()))
    ///     .task(|_ctx, _stock| async { Ok::<_, BoxError>(()) });
    /// g.build()?.run(()).await?; // preserve-partial: `Ok` with the failures in the report
    /// assert_eq!(*failures.lock().unwrap(), ["upstream `stock` failed: 503"]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn on_failure(mut self, f: impl Fn(&NodeReport<'_>) + Send + Sync + 'static) -> Self {
        self.callbacks().on_failure(f);
        self
    }

    /// Calls `f` with the node's report entry whatever its outcome, after `on_success` /
    /// `on_failure`. Stacks like [`on_success`](Self::on_success).
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use baton_graph::{BoxError, Graph, Outcome};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let ended = Arc::new(Mutex::new(None));
    /// let record = Arc::clone(&ended);
    /// let mut g = Graph::<()>::builder();
    /// g.node("price")
    ///     .fallback(0_u64)
    ///     .on_complete(move |n| *record.lock().unwrap() = Some(n.outcome()))
    ///     .task(|_ctx, ()| async { Err::<u64, BoxError>("503".into()) });
    /// g.build()?.run(()).await?;
    /// assert_eq!(*ended.lock().unwrap(), Some(Outcome::Recovered));
    /// # Ok(())
    /// # }
    /// ```
    pub fn on_complete(mut self, f: impl Fn(&NodeReport<'_>) + Send + Sync + 'static) -> Self {
        self.callbacks().on_complete(f);
        self
    }
}

impl<I, U, T> NodeBuilder<'_, I, U, T>
where
    I: Send + Sync + 'static,
    U: Upstreams,
    T: Send + Sync + 'static,
{
    /// Sets the node's task, adds the node to the graph, and returns its typed handle.
    ///
    /// The task is an `async` closure `|ctx, values| async move { .. }` returning
    /// `Result<T, E>` with `E: Into<BoxError>`. It is `Fn`, not `FnOnce`: a retrying node
    /// calls it once per attempt, each time with a fresh [`Ctx`] and the same upstream
    /// values. A panic inside it, before or after its first `.await`, is caught and becomes
    /// the node's `Failed` outcome with the panic message.
    ///
    /// Between `.await`s the task holds the run's driver, like any future holds its tokio
    /// worker, and a run has at most as many drivers draining its ready nodes as the
    /// runtime has workers. Work that blocks its thread, such as file or socket I/O without
    /// `.await`, long computations or `block_in_place`, belongs in
    /// [`blocking_task`](Self::blocking_task), whose nodes wait like any other. By default,
    /// with [`StartMode::Inline`](crate::run::StartMode::Inline), or where one thread runs every
    /// task, the run's first nodes start in the task that awaits the run and move to a task
    /// of their own at their first `.await` that waits; [`Run`](crate::Run) says more.
    ///
    /// ```
    /// use baton_graph::{BoxError, Graph, Retry};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<u64>::builder(); // the run input: a user id
    /// let user = g.node("user").retry(Retry::new(3)).task(|ctx, ()| async move {
    ///     if ctx.attempt() < 3 {
    ///         return Err::<String, BoxError>("connection reset".into());
    ///     }
    ///     Ok(format!("user {}", ctx.input()))
    /// });
    /// let report = g.build()?.run(7).await?;
    /// assert_eq!(report.get(user).map(String::as_str), Some("user 7"));
    /// assert_eq!(report.node(user).map(|n| n.attempts()), Some(3));
    /// # Ok(())
    /// # }
    /// ```
    pub fn task<F, Fut, E>(self, task: F) -> Node<T>
    where
        F: Fn(Ctx<I>, U::Values) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        let task = TypedTask::<U, _, _, _, _>::new(task);
        self.finish(|tasks, fallback| match fallback {
            None => tasks.push(task),
            Some(fallback) => tasks.push(task.with_fallback(fallback)),
        })
    }

    /// Sets a synchronous, blocking task, run on tokio's blocking pool, adds the node and
    /// returns its handle.
    ///
    /// When an attempt times out, or the run is cancelled, the node moves on at once. The
    /// closure cannot be stopped from outside, so its thread keeps running until it
    /// returns: the one exception to "no attempt outlives its run". The report counts such
    /// attempts as abandoned in [`NodeReport::abandoned`](crate::NodeReport::abandoned),
    /// and [`Ctx::cancellation_token`] is cancelled so that a closure that checks it can
    /// stop early. A bulkhead permit stays held until the closure returns. An attempt
    /// abandoned while it still waited for a thread of the blocking pool never runs.
    ///
    /// On tokio's paused clock, set by `start_paused` or `tokio::time::pause`, the clock
    /// does not advance on its own while a blocking closure runs: the closure takes no time
    /// in the report, its timeout cannot cut it, and other nodes' timers wait until it
    /// returns. To test a blocking task's timeout, move the clock with
    /// `tokio::time::advance`.
    ///
    /// ```
    /// use baton_graph::{BoxError, Graph};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), BoxError> {
    /// let mut g = Graph::<&'static str>::builder();
    /// let checksum = g.node("checksum").blocking_task(|ctx, ()| {
    ///     // CPU-bound or blocking I/O: runs on tokio's blocking pool.
    ///     Ok::<_, BoxError>(ctx.input().bytes().map(u64::from).sum::<u64>())
    /// });
    /// let report = g.build()?.run("abc").await?;
    /// assert_eq!(report.get(checksum), Some(&294));
    /// # Ok(())
    /// # }
    /// ```
    pub fn blocking_task<F, E>(self, task: F) -> Node<T>
    where
        F: Fn(Ctx<I>, U::Values) -> Result<T, E> + Send + Sync + 'static,
        E: Into<BoxError> + 'static,
    {
        self.finish(|tasks, fallback| {
            tasks.push(BlockingTask::<I, U, _, _, _>::new(task, fallback))
        })
    }

    /// Adds the node, its task stored by `store`, which is given the node's fallback, if
    /// any.
    fn finish(
        self,
        store: impl FnOnce(&mut Tasks, Option<NodeFallback<I, T>>) -> TaskRef<I>,
    ) -> Node<T> {
        let NodeBuilder {
            builder,
            upstreams,
            extras,
            fallback,
            concurrency,
            compensation,
        } = self;
        let graph = builder.id;
        builder.declare(&upstreams);
        let node = NewNode {
            task: store(&mut builder.tasks, fallback),
            extras,
        };
        let index = builder.add(node);
        if let Some(compensation) = compensation {
            builder.compensations.push((index, compensation));
        }
        if concurrency.is_some() {
            builder.invalid_node(
                index,
                BuildError::InvalidPolicy {
                    node: builder.names.get(index).to_owned(),
                    policy: "concurrency",
                    reason: "only a map node (`map`, `map_settled`) has a concurrency".to_owned(),
                },
            );
        }
        Node::new(graph, index)
    }
}
