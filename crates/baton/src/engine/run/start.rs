//! Where a run's nodes start: in the task that awaits the run, or spread over tokio's workers.

use std::fmt;

/// Where a run's nodes run: by default in the task that awaits the run, as in `tokio::join!`,
/// or in tasks of the run's own, spread over tokio's workers. Set per graph with
/// [`GraphBuilder::start_mode`](crate::GraphBuilder::start_mode), per run with
/// [`RunOptions::start_mode`](crate::RunOptions::start_mode).
///
/// Both run independent nodes at once, so a node that waits never holds up another, and both
/// report the same. They differ in what a node that *computes* in its poll, with no `.await`
/// that waits, does to the others, and in what a run costs. Where one thread runs every
/// task, as on a current-thread runtime or a one-worker runtime awaited from one of its
/// tasks, they are the same.
///
/// Why `Inline` is the default: baton's graphs are mostly handlers fanning out to
/// downstream services, whose nodes wait on I/O; for them `Inline` runs a request in one
/// task, the handler's, with the semantics of the `join!` it replaces, and spawns nothing.
/// A graph of nodes that compute asks for `Spread`.
///
/// ```
/// use baton_graph::{BoxError, Graph, Node, RunOptions, run::StartMode};
///
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut g = Graph::<u64>::builder();
/// // Every run of this graph spreads its nodes over the workers: they compute.
/// g.start_mode(StartMode::Spread);
/// let id: Node<u64> = g
///     .node("sum")
///     .task(|ctx, ()| async move { Ok::<_, BoxError>((0..*ctx.input()).sum()) });
/// let graph = g.build()?;
/// assert_eq!(graph.run(4).await?.get(id), Some(&6));
///
/// // One run in the awaiting task instead.
/// let inline = RunOptions::new().start_mode(StartMode::Inline);
/// assert_eq!(graph.run_with(5, inline).await?.get(id), Some(&10));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum StartMode {
    /// The default. The task that awaits the run polls its nodes, as `tokio::join!` or a
    /// `FuturesUnordered` would, and spawns no task. Nodes that end on their first poll, such
    /// as a cache hit, a no-op or a short computation, run one after another. A node that
    /// waits stays in the run's future, polled again there when it is woken. A wake-up polls
    /// the nodes it woke and at most eight others: up to eight waiting nodes are polled
    /// together, as `tokio::join!` polls its futures. While the run's future is not polled,
    /// its nodes make no progress. A node woken during that future's poll, its I/O ready at
    /// once, is polled again in the same poll, which wakes no task: until 1 024 such polls,
    /// or 1 024 nodes started by them, while the awaiting task's coop budget lasts (they
    /// spend a unit of it per eight); then the task's turn is given back.
    ///
    /// The run uses more than one task only when it spreads: on a runtime with more than
    /// one worker, when one poll of its future would start more nodes than its budget:
    /// 128 nodes, or the awaiting task's coop budget once spent (starting the run spends a
    /// unit, which pays for the first eight nodes it starts then, and each eight after them
    /// spend one), not counting the nodes it starts when it polls again nodes woken during
    /// that poll, or in the poll after one that gave the task's turn back with such work
    /// left. The nodes it has not started then run in tasks of its own, as in
    /// [`Spread`](Self::Spread), so a large graph uses every worker after its first nodes;
    /// nodes already waiting in its future end there.
    /// On one worker it never spreads: its future yields, and goes on at its next poll.
    /// Polled on another runtime than the one it started on, it spreads to that one.
    ///
    /// The price, as with `join!`: nodes that compute in their poll run one after the other
    /// in the awaiting task, not in parallel, and while one computes there, that task does
    /// nothing else: a timeout around the run cannot fire until the node's poll returns.
    /// A node sees the awaiting task's task-locals. For graphs whose nodes wait on I/O — a
    /// handler fanning out to downstream services — that costs nothing; put computations in
    /// a [`blocking_task`](crate::NodeBuilder::blocking_task), or spread the run.
    #[default]
    Inline,
    /// On a multi-thread runtime the run's nodes start in tokio tasks of its own, a few
    /// drivers rather than one task per node, so nodes that compute run in parallel on the
    /// workers, and never in the task that awaits the run: a timeout around the run fires
    /// while a node computes, and the futures that task joins go on. Starting costs a spawn
    /// per driver and wake-ups of the other workers. Where one thread runs every task, its
    /// first nodes start in the awaiting task, and a node that waits moves to a task of its
    /// own, where it goes on while the run's future is not polled.
    Spread,
}

impl fmt::Display for StartMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StartMode::Inline => "inline",
            StartMode::Spread => "spread",
        })
    }
}

impl std::str::FromStr for StartMode {
    type Err = String;

    /// Parses `inline` or `spread`, the names `Display` writes.
    ///
    /// # Errors
    /// Any other text: a message that quotes it and lists the two names.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "inline" => Ok(StartMode::Inline),
            "spread" => Ok(StartMode::Spread),
            other => Err(format!(
                "unknown start mode `{other}` (expected inline or spread)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::StartMode;

    #[test]
    fn names_round_trip_and_unknown_ones_are_named() {
        for mode in [StartMode::Inline, StartMode::Spread] {
            assert_eq!(mode.to_string().parse::<StartMode>(), Ok(mode));
        }
        assert_eq!(StartMode::default(), StartMode::Inline);
        let err = "eager".parse::<StartMode>().unwrap_err();
        assert!(err.contains("`eager`"), "{err}");
    }
}
