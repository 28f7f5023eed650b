//! The public types have the auto traits a tokio user relies on: graphs, handles, runs,
//! reports and errors cross tasks and threads, and errors box into `BoxError`. Tasks can
//! use `?` without naming their error type.

use baton_graph::{
    BoxError, BuildError, Ctx, FailureMode, Graph, Node, NodeError, NodeReport, Outcome, Report,
    Run, RunError, RunOptions, TaskResult,
    graph::IdempotencyKey,
    ok,
    report::Counts,
    run::{CancelReason, RunCanceller, RunId},
};

fn send_sync<T: Send + Sync>() {}
fn send_sync_static<T: Send + Sync + 'static>() {}
fn clone<T: Clone>() {}
fn copy<T: Copy>() {}
fn debug<T: std::fmt::Debug>() {}
fn error<T: std::error::Error + Send + Sync + 'static>() {}
fn unpin<T: Unpin>() {}

struct NotClone;

#[test]
fn public_types_have_the_expected_auto_traits() {
    send_sync_static::<Graph<()>>();
    clone::<Graph<NotClone>>();
    debug::<Graph<()>>();
    send_sync_static::<Node<NotClone>>();
    copy::<Node<NotClone>>();
    debug::<Node<NotClone>>();
    send_sync::<Run<()>>();
    unpin::<Run<()>>();
    debug::<Run<()>>();
    send_sync_static::<RunCanceller>();
    clone::<RunCanceller>();
    send_sync_static::<Report>();
    clone::<Report>();
    debug::<Report>();
    send_sync::<NodeReport<'static>>();
    copy::<NodeReport<'static>>();
    send_sync::<Ctx<()>>();
    debug::<Ctx<()>>();
    send_sync::<IdempotencyKey>();
    copy::<RunId>();
    copy::<Outcome>();
    copy::<Counts>();
    copy::<FailureMode>();
    clone::<RunOptions>();
    clone::<CancelReason>();
    error::<BuildError>();
    error::<NodeError>();
    error::<RunError>();
}

#[test]
fn errors_box_into_box_error() {
    let e: BoxError = BuildError::DuplicateName {
        name: "a".to_owned(),
    }
    .into();
    assert_eq!(
        e.to_string(),
        "duplicate node name `a`: every node of a graph needs its own name"
    );
    let e: BoxError = RunError::NoRuntime.into();
    assert!(e.downcast_ref::<RunError>().is_some());
    let e: BoxError = NodeError::Timeout {
        node: "stock".to_owned(),
        attempt: 2,
        limit: std::time::Duration::from_millis(300),
    }
    .into();
    assert_eq!(
        e.to_string(),
        "node `stock` attempt 2 timed out after 300 ms"
    );
}

#[test]
fn cancel_reasons_display() {
    assert_eq!(
        CancelReason::Requested.to_string(),
        "cancelled through its handle"
    );
    assert_eq!(CancelReason::Dropped.to_string(), "run future dropped");
    assert_eq!(
        CancelReason::FailFast {
            node: "n".to_owned()
        }
        .to_string(),
        "fail-fast after `n` failed"
    );
}

async fn parse_task(ctx: Ctx<&'static str>) -> TaskResult<u32> {
    Ok(ctx.input().parse::<u32>()?)
}

/// Four ways to use `?` in a task without `Ok::<_, BoxError>`: an `async` block ending in
/// `ok(..)`, an `async fn` returning `TaskResult`, an async closure with a return type, a
/// blocking closure ending in `ok(..)`. Each fails with the `?`'s error on bad input.
#[tokio::test]
async fn tasks_use_question_mark_without_naming_the_error_type() {
    let mut g = Graph::<&'static str>::builder();
    let block = g.node("block").task(|ctx, ()| async move {
        let n = ctx.input().parse::<u32>()?;
        ok(n + 1)
    });
    let func = g.node("func").task(|ctx, ()| parse_task(ctx));
    let closure = g
        .node("closure")
        .task(async |ctx, ()| -> TaskResult<u32> { Ok(ctx.input().parse::<u32>()? + 2) });
    let blocking = g.node("blocking").blocking_task(|ctx, ()| {
        let n = ctx.input().parse::<u32>()?;
        ok(n + 3)
    });
    let graph = g.build().unwrap();

    let report = graph.run("40").await.unwrap();
    let values = [block, func, closure, blocking].map(|n| report.get(n).copied());
    assert_eq!(values, [Some(41), Some(40), Some(42), Some(43)]);

    let report = graph.run("forty").await.unwrap();
    for node in report.nodes() {
        assert_eq!(node.outcome(), Outcome::Failed, "{}", node.name());
        let error = node.error().unwrap().task_error().unwrap();
        assert!(error.is::<std::num::ParseIntError>(), "{}", node.name());
    }
}
