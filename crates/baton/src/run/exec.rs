//! The driver: the tokio task that runs a node, records its outcome, and carries on with one
//! downstream it made ready (Taskflow's continuation: a chain runs in one task, not one
//! spawn per node).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use futures_util::FutureExt;

use super::state::{Record, RunCore, RunState};
use crate::error::NodeError;
use crate::report::Outcome;
use crate::task::{Ctx, Value};

/// How many ready downstreams a driver runs inline before it spawns the next one instead,
/// so that a long chain yields its worker now and then.
const INLINE_LIMIT: u32 = 64;

/// Runs node `first` (already `RUNNING`), then, while finishing a node makes exactly one
/// downstream ready to run here, that downstream.
pub(crate) async fn drive<I: Send + Sync + 'static>(run: Arc<RunState<I>>, first: u32) {
    let mut id = first;
    let mut inline_left = INLINE_LIMIT;
    loop {
        let record = run_node(&run, id).await;
        match run.finish(id, record) {
            Some(next) if inline_left > 0 => {
                inline_left -= 1;
                id = next;
            }
            Some(next) => {
                run.spawn(next);
                return;
            }
            None => return,
        }
    }
}

async fn run_node<I: Send + Sync + 'static>(run: &Arc<RunState<I>>, id: u32) -> Record {
    let core = &run.core;
    let start = core.elapsed();
    let ended = Cancellable {
        core,
        id,
        polled: false,
        fut: execute(run, id),
    }
    .await;
    let end = core.elapsed();
    match ended {
        Ended::Done(Ok(value)) => Record {
            outcome: Outcome::Succeeded,
            value: Some(value),
            error: None,
            start: Some(start),
            end,
            because: None,
        },
        Ended::Done(Err(error)) => Record {
            outcome: Outcome::Failed,
            value: None,
            error: Some(error),
            start: Some(start),
            end,
            because: None,
        },
        Ended::Cancelled { started } => Record {
            outcome: Outcome::Cancelled,
            value: None,
            error: None,
            start: started.then_some(start),
            end,
            because: None,
        },
    }
}

/// One attempt of node `id`'s task, with panics caught.
async fn execute<I: Send + Sync + 'static>(
    run: &Arc<RunState<I>>,
    id: u32,
) -> Result<Value, NodeError> {
    let core = &run.core;
    let meta = &run.graph.meta;
    let Some(task) = run.graph.tasks.get(id as usize) else {
        return Err(NodeError::Internal {
            message: "node index out of range",
        });
    };
    if let Some(slot) = core.slot(id) {
        slot.attempts.fetch_add(1, Ordering::Relaxed);
    }
    let cx = super::FetchCx {
        ups: meta.upstreams(id),
        slots: &core.slots,
        names: &meta.names,
    };
    let ctx = Ctx::new(Arc::clone(run), id, 1);
    let attempt = match std::panic::catch_unwind(AssertUnwindSafe(|| task.call(ctx, &cx))) {
        Ok(Some(attempt)) => attempt,
        Ok(None) => {
            return Err(NodeError::Internal {
                message: "an upstream value is missing or of another type",
            });
        }
        Err(panic) => return Err(NodeError::from_panic(panic.as_ref())),
    };
    match AssertUnwindSafe(attempt).catch_unwind().await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(NodeError::Task(error)),
        Err(panic) => Err(NodeError::from_panic(panic.as_ref())),
    }
}

enum Ended<T> {
    Done(T),
    Cancelled { started: bool },
}

pin_project_lite::pin_project! {
    /// Polls a node's future unless the run is cancelled; registers the driver's waker in the
    /// node's slot so that `cancel` can wake it.
    struct Cancellable<'a, F> {
        core: &'a RunCore,
        id: u32,
        polled: bool,
        #[pin]
        fut: F,
    }
}

impl<F: Future> Future for Cancellable<'_, F> {
    type Output = Ended<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if this.core.is_cancelled() {
            return Poll::Ready(Ended::Cancelled {
                started: *this.polled,
            });
        }
        *this.polled = true;
        if let Poll::Ready(out) = this.fut.poll(cx) {
            return Poll::Ready(Ended::Done(out));
        }
        if let Some(slot) = this.core.slot(*this.id) {
            slot.waker.register(cx.waker());
        }
        // `cancel` sets the flag, then wakes: re-check after registering.
        if this.core.is_cancelled() {
            return Poll::Ready(Ended::Cancelled { started: true });
        }
        Poll::Pending
    }
}
