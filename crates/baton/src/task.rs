//! What a task sees: the per-attempt context [`Ctx`], and the type-erased form in which the
//! graph stores tasks.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use tokio_util::sync::{CancellationToken, DropGuard};

use crate::error::BoxError;
use crate::graph::Upstreams;
use crate::run::{FetchCx, RunId, RunState};

/// A node's value, type-erased while it sits in the run's slot.
pub(crate) type Value = Arc<dyn Any + Send + Sync>;

/// One attempt of a task, boxed.
pub(crate) type AttemptFuture = Pin<Box<dyn Future<Output = Result<Value, BoxError>> + Send>>;

/// A task with its upstreams' types erased, as the graph stores it.
pub(crate) trait ErasedTask<I>: Send + Sync + 'static {
    /// Fetches the upstream values and starts one attempt; `None` when a value is missing
    /// or of another type, which validation rules out.
    fn call(&self, ctx: Ctx<I>, cx: &FetchCx<'_>) -> Option<AttemptFuture>;
}

pub(crate) struct TypedTask<U, F, T, E, Fut> {
    upstreams: U,
    task: F,
    _types: PhantomData<fn() -> (T, E, Fut)>,
}

impl<U, F, T, E, Fut> TypedTask<U, F, T, E, Fut> {
    pub(crate) fn new(upstreams: U, task: F) -> Self {
        TypedTask {
            upstreams,
            task,
            _types: PhantomData,
        }
    }
}

impl<I, U, F, T, E, Fut> ErasedTask<I> for TypedTask<U, F, T, E, Fut>
where
    I: Send + Sync + 'static,
    U: Upstreams,
    F: Fn(Ctx<I>, U::Values) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
    T: Send + Sync + 'static,
    E: Into<BoxError> + 'static,
{
    fn call(&self, ctx: Ctx<I>, cx: &FetchCx<'_>) -> Option<AttemptFuture> {
        let values = self.upstreams.__fetch(cx)?;
        let attempt = (self.task)(ctx, values);
        Some(Box::pin(async move {
            match attempt.await {
                Ok(value) => Ok(Arc::new(value) as Value),
                Err(e) => Err(e.into()),
            }
        }))
    }
}

/// The context of one attempt of one node's task.
///
/// A fresh `Ctx` is passed to every attempt. It gives the run input, the attempt number,
/// the node's name, an idempotency key, and a cancellation token for work the attempt hands
/// off. It is cheap (one `Arc` and a few words) and `Send + Sync`.
pub struct Ctx<I> {
    run: Arc<RunState<I>>,
    node: u32,
    attempt: u32,
    token: OnceLock<(CancellationToken, DropGuard)>,
}

impl<I> Ctx<I> {
    pub(crate) fn new(run: Arc<RunState<I>>, node: u32, attempt: u32) -> Self {
        Ctx {
            run,
            node,
            attempt,
            token: OnceLock::new(),
        }
    }

    /// The run input: what [`Graph::run`](crate::Graph::run) was given (the request).
    #[must_use]
    pub fn input(&self) -> &I {
        &self.run.input
    }

    /// The attempt number, starting at 1.
    #[must_use]
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The name of the node this attempt belongs to.
    #[must_use]
    pub fn node_name(&self) -> &str {
        self.run.graph.meta.name(self.node)
    }

    /// The run this attempt belongs to.
    #[must_use]
    pub fn run_id(&self) -> RunId {
        self.run.core.run_id
    }

    /// A key that is the same for every attempt of this node in this run and differs
    /// between nodes and runs: send it with side effects (an `Idempotency-Key` header) so
    /// that the downstream can deduplicate a retried request whose first attempt did reach
    /// it (seed 000, "timeouts cause duplicate side effects").
    #[must_use]
    pub fn idempotency_key(&self) -> IdempotencyKey {
        IdempotencyKey {
            run: self.run.core.run_id,
            node: self.node,
        }
    }

    /// A token that is cancelled when this attempt ends in any way (it completed, timed out,
    /// or its run was cancelled or dropped).
    ///
    /// The attempt's own future needs no token: it is dropped when it is cancelled, so it
    /// stops at its next `.await`. Give the token to work the attempt spawns or hands to a
    /// thread, so that nothing outlives the attempt. Created on first call; later calls
    /// return clones of it.
    #[must_use]
    pub fn cancellation_token(&self) -> CancellationToken {
        let (token, _guard) = self.token.get_or_init(|| {
            let token = self.run.core.run_token().child_token();
            let guard = token.clone().drop_guard();
            (token, guard)
        });
        token.clone()
    }
}

impl<I> fmt::Debug for Ctx<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ctx")
            .field("node", &self.node_name())
            .field("attempt", &self.attempt)
            .field("run", &self.run.core.run_id)
            .finish_non_exhaustive()
    }
}

/// The idempotency key of one node in one run; see [`Ctx::idempotency_key`].
///
/// Displays as 32 hex digits of the run id, a dash, and the node's index:
/// `3f9a…c1-4`. Unique within a process; across processes the run id's first 64 bits are
/// random per process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IdempotencyKey {
    run: RunId,
    node: u32,
}

impl IdempotencyKey {
    /// The run part of the key.
    #[must_use]
    pub fn run_id(self) -> RunId {
        self.run
    }

    /// The node's index in its graph.
    #[must_use]
    pub fn node_index(self) -> usize {
        self.node as usize
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.run, self.node)
    }
}
