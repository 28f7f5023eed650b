//! Hand-written tokio baselines: what a good engineer writes without a framework.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};

use crate::probe::Probe;
use crate::shapes::Dag;

/// The shape as the baselines use it: built once, shared by every run.
#[derive(Debug)]
pub(crate) struct Plan {
    dag: Dag,
    in_degree: Box<[u32]>,
    roots: Box<[u32]>,
}

impl Plan {
    pub(crate) fn new(dag: &Dag) -> Plan {
        let n = dag.len();
        Plan {
            dag: dag.clone(),
            in_degree: (0..n).map(|i| dag.ups(i).len() as u32).collect(),
            roots: (0..n as u32)
                .filter(|&i| dag.ups(i as usize).is_empty())
                .collect(),
        }
    }
}

/// The per-node timeout of `tokio-timeout`: `baton-policies`' (`baton_impl.rs`).
pub(crate) const TIMEOUT: Duration = Duration::from_secs(1);

/// Per-run state of the join-counter baseline.
struct CounterRun {
    plan: Arc<Plan>,
    probe: Probe,
    /// Every body runs under `tokio::time::timeout` of this (`tokio-timeout`).
    timeout: Option<Duration>,
    pending: Box<[AtomicU32]>,
    left: AtomicUsize,
    done: Notify,
}

/// Spawns node `id`: it runs its body, decrements its downstreams' counters, spawns each
/// one that reaches zero, and the last node to finish wakes the caller.
fn spawn_node(run: Arc<CounterRun>, id: u32) {
    tokio::spawn(async move {
        if let Some(limit) = run.timeout {
            // A body cut by its timeout counts as run: the no-op bodies never are.
            let _ = tokio::time::timeout(limit, run.probe.step(id)).await;
        } else if run.probe.waits() {
            run.probe.step(id).await;
        } else {
            run.probe.hit(id);
        }
        for &d in run.plan.dag.downs(id as usize) {
            if run.pending[d as usize].fetch_sub(1, Ordering::AcqRel) == 1 {
                spawn_node(Arc::clone(&run), d);
            }
        }
        if run.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            run.done.notify_one();
        }
    });
}

/// One run with join counters: a task per node, spawned when it becomes ready; with
/// `timeout`, each body under `tokio::time::timeout`.
pub(crate) async fn run_counters(plan: &Arc<Plan>, probe: &Probe, timeout: Option<Duration>) {
    let n = plan.in_degree.len();
    if n == 0 {
        return;
    }
    let run = Arc::new(CounterRun {
        plan: Arc::clone(plan),
        probe: probe.clone(),
        timeout,
        pending: plan.in_degree.iter().map(|&d| AtomicU32::new(d)).collect(),
        left: AtomicUsize::new(n),
        done: Notify::new(),
    });
    for &r in plan.roots.iter() {
        spawn_node(Arc::clone(&run), r);
    }
    // `notify_one` stores a permit when nobody waits yet, so this cannot miss it.
    run.done.notified().await;
}

/// One run with channels: every node spawned up front, awaiting a `oneshot` per upstream.
pub(crate) async fn run_oneshot(plan: &Arc<Plan>, probe: &Probe) -> Result<(), String> {
    let dag = &plan.dag;
    let n = dag.len();
    let mut senders: Vec<Vec<oneshot::Sender<()>>> = (0..n)
        .map(|i| Vec::with_capacity(dag.downs(i).len()))
        .collect();
    let mut receivers: Vec<Vec<oneshot::Receiver<()>>> = Vec::with_capacity(n);
    for i in 0..n {
        let ups = dag.ups(i);
        let mut rxs = Vec::with_capacity(ups.len());
        for &u in ups {
            let (tx, rx) = oneshot::channel();
            senders[u as usize].push(tx);
            rxs.push(rx);
        }
        receivers.push(rxs);
    }
    let mut handles = Vec::with_capacity(n);
    for (i, (rxs, txs)) in receivers.into_iter().zip(senders).enumerate() {
        let probe = probe.clone();
        handles.push(tokio::spawn(async move {
            for rx in rxs {
                if rx.await.is_err() {
                    return Err("an upstream dropped its sender".to_owned());
                }
            }
            probe.step(i as u32).await;
            for tx in txs {
                let _ = tx.send(());
            }
            Ok(())
        }));
    }
    for h in handles {
        h.await.map_err(|e| e.to_string())??;
    }
    Ok(())
}

async fn step(probe: &Probe, id: u32) {
    if probe.waits() {
        probe.step(id).await;
    } else {
        probe.hit(id);
    }
}

/// The order graph as plain async code: `join!` the independent calls, then the chain.
pub(crate) async fn order_join(probe: &Probe) {
    tokio::join!(step(probe, 0), step(probe, 1));
    step(probe, 2).await;
    step(probe, 3).await;
    step(probe, 4).await;
}

/// The order graph with the independent calls spawned (so they run on two workers), joined,
/// then the chain inline.
pub(crate) async fn order_spawn(probe: &Probe) -> Result<(), String> {
    let (p0, p1) = (probe.clone(), probe.clone());
    let (a, b) = tokio::join!(
        tokio::spawn(async move { step(&p0, 0).await }),
        tokio::spawn(async move { step(&p1, 1).await })
    );
    a.map_err(|e| e.to_string())?;
    b.map_err(|e| e.to_string())?;
    step(probe, 2).await;
    step(probe, 3).await;
    step(probe, 4).await;
    Ok(())
}
