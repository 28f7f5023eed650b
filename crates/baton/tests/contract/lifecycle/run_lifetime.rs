//! What outlives a run: a canceller does not keep it alive, and a run whose runtime shut
//! down says so.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_graph::{
    BoxError, Graph, Node, Outcome, RunError,
    run::{CancelReason, RunCanceller},
};

/// A run input that counts its drops: it lives exactly as long as the run's state.
struct Input(Arc<AtomicUsize>);

impl Drop for Input {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A canceller kept inside a task of its own graph (for later use) makes no reference
/// cycle: once the run's report is dropped, the run's state (its input with it) is freed,
/// while the graph lives on.
#[tokio::test]
async fn a_canceller_kept_in_a_task_of_its_own_graph_does_not_leak_the_run() {
    let kept: Arc<Mutex<Option<RunCanceller>>> = Arc::new(Mutex::new(None));
    let mut g = Graph::<Input>::builder();
    let holder = Arc::clone(&kept);
    let node: Node<bool> = g.node("n").task(move |_ctx, ()| {
        let cancelled = holder
            .lock()
            .unwrap()
            .as_ref()
            .map(RunCanceller::is_cancelled);
        async move { Ok::<_, BoxError>(cancelled == Some(false)) }
    });
    let graph = g.build().unwrap();
    let drops = Arc::new(AtomicUsize::new(0));
    let run = graph.run(Input(Arc::clone(&drops)));
    *kept.lock().unwrap() = Some(run.canceller());
    let report = run.await.unwrap();
    assert_eq!(report.get(node), Some(&true), "the task saw its canceller");
    drop(report);
    assert_eq!(drops.load(Ordering::SeqCst), 1, "the run's state was freed");
    let canceller = kept.lock().unwrap().take().unwrap();
    canceller.cancel(); // a run that is gone: nothing to do
    assert!(!canceller.is_cancelled());
    drop(graph);
}

/// A canceller tells whether its run was cancelled, by itself or otherwise.
#[tokio::test(start_paused = true)]
async fn a_canceller_sees_its_run_cancelled() {
    let mut g = Graph::<()>::builder();
    let _: Node<()> = g.node("slow").task(|_ctx, ()| async {
        tokio::time::sleep(Duration::from_secs(10)).await;
        Ok::<_, BoxError>(())
    });
    let graph = g.build().unwrap();
    let run = graph.run(());
    let canceller = run.canceller();
    let other = canceller.clone();
    assert!(!canceller.is_cancelled());
    let handle = tokio::spawn(run);
    tokio::time::sleep(Duration::from_millis(5)).await;
    other.cancel();
    assert!(canceller.is_cancelled());
    let err = handle.await.unwrap().unwrap_err();
    assert!(matches!(
        err,
        RunError::Cancelled {
            reason: CancelReason::Requested,
            ..
        }
    ));
}

/// The runtime that ran a run's nodes shuts down while the run is awaited elsewhere: the
/// nodes are cancelled for that reason, not as if the run's future had been dropped.
#[test]
fn nodes_whose_runtime_shut_down_are_cancelled_for_that_reason() {
    let mut g = Graph::<()>::builder();
    let node: Node<()> = g.node("slow").task(|_ctx, ()| async {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok::<_, BoxError>(())
    });
    let graph = g.build().unwrap();
    let first = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mut run = Box::pin(graph.run(()));
    first.block_on(async {
        // The node waits, in the run's future (inline); polled from the second runtime, the
        // run hands it to a task of the first, which is gone.
        assert!(futures::poll!(&mut run).is_pending());
    });
    drop(first);
    let second = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let err = second.block_on(run).unwrap_err();
    let RunError::Cancelled { reason, report } = err else {
        panic!("expected a cancelled run, got {err}");
    };
    assert_eq!(reason, CancelReason::RuntimeShutdown);
    let n = report.node(node).unwrap();
    assert_eq!(n.outcome(), Outcome::Cancelled);
    assert_eq!(
        n.message().as_deref(),
        Some("the runtime running its nodes shut down")
    );
}

/// The same with the run polled in tasks: polled twice in a task of the first runtime, then
/// awaited in a task of the second, the run still finds it is away from its own runtime.
#[test]
fn a_run_polled_in_a_task_of_another_runtime_sends_its_nodes_home() {
    let mut g = Graph::<()>::builder();
    let node: Node<()> = g.node("slow").task(|_ctx, ()| async {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok::<_, BoxError>(())
    });
    let graph = g.build().unwrap();
    let first = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    // The run is handed out unawaited on purpose, to be awaited on the second runtime.
    #[allow(clippy::async_yields_async)]
    let run = first.block_on(async {
        tokio::spawn(async move {
            let mut run = Box::pin(graph.run(()));
            assert!(futures::poll!(&mut run).is_pending());
            assert!(futures::poll!(&mut run).is_pending());
            run
        })
        .await
        .unwrap()
    });
    drop(first);
    let second = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let err = second
        .block_on(async { tokio::spawn(run).await })
        .unwrap()
        .unwrap_err();
    let RunError::Cancelled { reason, report } = err else {
        panic!("expected a cancelled run, got {err}");
    };
    assert_eq!(reason, CancelReason::RuntimeShutdown);
    assert_eq!(report.node(node).unwrap().outcome(), Outcome::Cancelled);
}
