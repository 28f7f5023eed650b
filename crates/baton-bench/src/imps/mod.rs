//! The implementations under test: one `sample` entry point that builds, runs and drops a
//! shape with each, timing the three phases separately.

pub(crate) mod baton_impl;
mod dagrs_impl;
mod dagx_impl;
mod tokio_impl;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_graph::run::StartMode;

use crate::probe::Probe;
use crate::shapes::{Dag, Shape};

/// One implementation of "run every node of a DAG after its upstreams".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Imp {
    /// baton: the graph is built once and run `reps` times, in the default start mode
    /// (`StartMode::Inline`: the task that awaits the run polls its nodes, as `tokio::join!`
    /// would, so a node that ends at once costs no spawn; nodes made ready together in that
    /// task run one after another there, and what it hands off spreads over the workers).
    Baton,
    /// baton with idle policies on every node: a per-attempt timeout (1 s), a retry (3
    /// attempts), one circuit breaker shared by all nodes and a fallback, none of which the
    /// no-op tasks ever trigger. Measures what configured policies cost when they do nothing.
    BatonPolicies,
    /// baton with `StartMode::Spread`: the run's nodes start in driver tasks of its own,
    /// spread over the workers, never in the task that awaits the run.
    BatonSpread,
    /// Hand-written tokio: per-run join counters (one atomic per node, shared through one
    /// `Arc`), a task spawned for every node when its counter reaches zero.
    Tokio,
    /// `Tokio` with every node's body under `tokio::time::timeout` (1 s, as
    /// `BatonPolicies`' timeout): the hand-written code with timeouts. The
    /// `policies/tokio-timeout` column compares the two whole systems (scheduler included);
    /// what the policies alone cost is `policies/baton` beside `tokio-timeout`'s time over
    /// `tokio`'s.
    TokioTimeout,
    /// Hand-written tokio: every node spawned up front, awaiting one `oneshot` per upstream
    /// edge; the run awaits every `JoinHandle`.
    TokioOneshot,
    /// Order graph only: `tokio::join!(user, sku)`, then `stock`, `promo`, `notify`, all
    /// inline in the caller's task (no spawn at all).
    TokioJoin,
    /// Order graph only: `user` and `sku` spawned, `tokio::join!` on their handles, then the
    /// chain inline.
    TokioSpawn,
    /// dagx 0.3 (`DagRunner`, `#[task]`, `run(|f| tokio::spawn(f))`); a runner runs once,
    /// so every run builds its graph (build time reported apart).
    Dagx,
    /// dagrs 0.9 (`Graph`, `DefaultNode`, `Action`, `async_start`), nodes waiting on their
    /// in-channels and broadcasting on their out-channels as its docs show; rebuilt per run.
    Dagrs,
    /// A plain loop calling the bodies in topological order: the single-core floor.
    Seq,
}

impl Imp {
    pub(crate) const ALL: [Imp; 11] = [
        Imp::Baton,
        Imp::BatonPolicies,
        Imp::BatonSpread,
        Imp::Tokio,
        Imp::TokioTimeout,
        Imp::TokioOneshot,
        Imp::TokioJoin,
        Imp::TokioSpawn,
        Imp::Dagx,
        Imp::Dagrs,
        Imp::Seq,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Imp::Baton => "baton",
            Imp::BatonPolicies => "baton-policies",
            Imp::BatonSpread => "baton-spread",
            Imp::Tokio => "tokio",
            Imp::TokioTimeout => "tokio-timeout",
            Imp::TokioOneshot => "tokio-oneshot",
            Imp::TokioJoin => "tokio-join",
            Imp::TokioSpawn => "tokio-spawn",
            Imp::Dagx => "dagx",
            Imp::Dagrs => "dagrs",
            Imp::Seq => "seq",
        }
    }

    /// Whether this implementation runs `shape` (the join/spawn baselines are written for the
    /// order graph only).
    pub(crate) fn supports(self, shape: Shape) -> bool {
        match self {
            Imp::TokioJoin | Imp::TokioSpawn => shape == Shape::Order,
            _ => true,
        }
    }

    /// Whether the graph is built once and run many times (otherwise every run builds).
    pub(crate) fn reuses_graph(self) -> bool {
        !matches!(self, Imp::Dagx | Imp::Dagrs)
    }
}

impl fmt::Display for Imp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Imp {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Imp::ALL
            .into_iter()
            .find(|i| i.name() == s)
            .ok_or_else(|| format!("unknown implementation `{s}`"))
    }
}

/// Phase times of one sample of `runs` runs.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Timing {
    pub(crate) build: Duration,
    pub(crate) run: Duration,
    pub(crate) drop: Duration,
    pub(crate) runs: u32,
    /// How many graphs were built (1 for graphs reused across runs, `runs` otherwise).
    pub(crate) builds: u32,
}

impl Timing {
    pub(crate) fn total(&self) -> Duration {
        self.build + self.run + self.drop
    }
}

/// A graph built by one implementation, ready to run.
pub(crate) enum Built {
    Baton(baton_impl::Prepared),
    Tokio(Arc<tokio_impl::Plan>),
    Dagx(Box<dagx_impl::Prepared>),
    Dagrs(Box<dagrs_impl::Prepared>),
    None,
}

impl fmt::Debug for Built {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Built::Baton(_) => "Built::Baton",
            Built::Tokio(_) => "Built::Tokio",
            Built::Dagx(_) => "Built::Dagx",
            Built::Dagrs(_) => "Built::Dagrs",
            Built::None => "Built::None",
        })
    }
}

/// Builds `dag` with `imp`.
pub(crate) fn build(imp: Imp, dag: &Dag, probe: &Probe) -> Built {
    match imp {
        Imp::Baton => Built::Baton(baton_impl::build(dag, probe, false, StartMode::default())),
        Imp::BatonPolicies => {
            Built::Baton(baton_impl::build(dag, probe, true, StartMode::default()))
        }
        Imp::BatonSpread => Built::Baton(baton_impl::build(dag, probe, false, StartMode::Spread)),
        Imp::Tokio | Imp::TokioTimeout | Imp::TokioOneshot => {
            Built::Tokio(Arc::new(tokio_impl::Plan::new(dag)))
        }
        Imp::Dagx => Built::Dagx(Box::new(dagx_impl::build(dag, probe))),
        Imp::Dagrs => Built::Dagrs(Box::new(dagrs_impl::build(dag, probe))),
        Imp::TokioJoin | Imp::TokioSpawn | Imp::Seq => Built::None,
    }
}

/// Runs a built graph once.
pub(crate) async fn run_once(
    imp: Imp,
    built: &mut Built,
    dag: &Dag,
    probe: &Probe,
) -> Result<(), String> {
    match (imp, built) {
        (Imp::Baton | Imp::BatonPolicies | Imp::BatonSpread, Built::Baton(g)) => {
            baton_impl::run(g).await
        }
        (Imp::Tokio, Built::Tokio(plan)) => {
            tokio_impl::run_counters(plan, probe, None).await;
            Ok(())
        }
        (Imp::TokioTimeout, Built::Tokio(plan)) => {
            tokio_impl::run_counters(plan, probe, Some(tokio_impl::TIMEOUT)).await;
            Ok(())
        }
        (Imp::TokioOneshot, Built::Tokio(plan)) => tokio_impl::run_oneshot(plan, probe).await,
        (Imp::TokioJoin, _) => {
            tokio_impl::order_join(probe).await;
            Ok(())
        }
        (Imp::TokioSpawn, _) => tokio_impl::order_spawn(probe).await,
        (Imp::Dagx, Built::Dagx(d)) => dagx_impl::run(d).await,
        (Imp::Dagrs, Built::Dagrs(d)) => dagrs_impl::run(d).await,
        (Imp::Seq, _) => {
            for i in 0..dag.len() as u32 {
                if probe.waits() {
                    probe.step(i).await;
                } else {
                    probe.hit(i);
                }
            }
            Ok(())
        }
        (imp, built) => Err(format!("{imp} cannot run {built:?}")),
    }
}

/// Builds, runs `reps` times and drops `dag` with `imp`, timing each phase. Graphs that can
/// run many times are built once; the others are built (and dropped) once per run.
pub(crate) async fn sample(
    imp: Imp,
    dag: Arc<Dag>,
    reps: u32,
    probe: Probe,
) -> Result<Timing, String> {
    if !imp.supports(dag.shape) {
        return Err(format!("{imp} does not implement {}", dag.shape));
    }
    let mut t = Timing {
        runs: reps,
        ..Timing::default()
    };
    if imp.reuses_graph() {
        let t0 = Instant::now();
        let mut built = build(imp, &dag, &probe);
        let t1 = Instant::now();
        for _ in 0..reps {
            run_once(imp, &mut built, &dag, &probe).await?;
        }
        let t2 = Instant::now();
        drop(built);
        let t3 = Instant::now();
        t.build = t1 - t0;
        t.run = t2 - t1;
        t.drop = t3 - t2;
        t.builds = 1;
    } else {
        for _ in 0..reps {
            let t0 = Instant::now();
            let mut built = build(imp, &dag, &probe);
            let t1 = Instant::now();
            run_once(imp, &mut built, &dag, &probe).await?;
            let t2 = Instant::now();
            drop(built);
            let t3 = Instant::now();
            t.build += t1 - t0;
            t.run += t2 - t1;
            t.drop += t3 - t2;
        }
        t.builds = reps;
    }
    Ok(t)
}
