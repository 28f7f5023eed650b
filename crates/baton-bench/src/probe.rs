//! The task body every implementation runs, and the recorder that checks them.
//!
//! For timing the body is a no-op: [`Probe::hit`] tests one `Option` that is `None`. With
//! `--waits` it also waits ([`Probe::step`]: `Pending` twice, waking its task each time, as
//! a node whose I/O comes back at once would). The smoke test gives a
//! [`Recorder`] instead, which counts each node's executions and stamps the order in which
//! they ran, so that [`Recorder::verify`] can check "every node exactly once, after its
//! upstreams".

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use std::task::{Context, Poll};

use crate::shapes::Dag;

/// The no-op task body, optionally recording, optionally waiting.
#[derive(Debug, Clone, Default)]
pub(crate) struct Probe {
    recorder: Option<Arc<Recorder>>,
    waits: bool,
}

impl Probe {
    /// The plain no-op body (what is timed).
    pub(crate) fn none() -> Probe {
        Probe::default()
    }

    /// A body that records into `recorder`.
    pub(crate) fn recording(recorder: &Arc<Recorder>) -> Probe {
        Probe {
            recorder: Some(Arc::clone(recorder)),
            waits: false,
        }
    }

    /// This body, waiting in every node when `waits` ([`step`](Self::step)).
    pub(crate) fn waiting(self, waits: bool) -> Probe {
        Probe { waits, ..self }
    }

    /// Whether each node waits: the implementations then run [`step`](Self::step)
    /// instead of [`hit`](Self::hit).
    pub(crate) fn waits(&self) -> bool {
        self.waits
    }

    /// Node `id` ran.
    #[inline(always)]
    pub(crate) fn hit(&self, id: u32) {
        if let Some(r) = &self.recorder {
            r.hit(id);
        } else {
            std::hint::black_box(id);
        }
    }

    /// Node `id` runs (on the first poll) and, if this body waits, returns `Pending` on its
    /// first [`WAIT_POLLS`] polls, having woken its task each time: the task is scheduled
    /// again behind the others, as a node whose I/O comes back at once would be. Every
    /// implementation awaits the same future.
    pub(crate) fn step(&self, id: u32) -> Step {
        Step {
            probe: self.clone(),
            id,
            polls: 0,
        }
    }
}

/// How many polls of a waiting body return `Pending` (each after waking the task): two,
/// so that a node's wait is not over on the poll that immediately follows its first
/// `Pending` in the same task (a scheduler that polls again at once, as a timeout wrapper
/// does, would otherwise see it end there, which real I/O does not).
const WAIT_POLLS: u8 = 2;

/// The future of [`Probe::step`].
#[derive(Debug)]
pub(crate) struct Step {
    probe: Probe,
    id: u32,
    /// How many times it returned `Pending`.
    polls: u8,
}

impl Future for Step {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.polls == 0 {
            self.probe.hit(self.id);
        }
        if self.probe.waits && self.polls < WAIT_POLLS {
            self.polls += 1;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(())
    }
}

/// Counts executions per node and stamps their order.
#[derive(Debug)]
pub(crate) struct Recorder {
    seq: AtomicU64,
    count: Vec<AtomicU32>,
    /// Sequence number of the (last) start and end of each node's body.
    start: Vec<AtomicU64>,
}

impl Recorder {
    pub(crate) fn new(n: usize) -> Recorder {
        Recorder {
            seq: AtomicU64::new(1),
            count: (0..n).map(|_| AtomicU32::new(0)).collect(),
            start: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn hit(&self, id: u32) {
        let stamp = self.seq.fetch_add(1, Ordering::SeqCst);
        if let (Some(c), Some(s)) = (self.count.get(id as usize), self.start.get(id as usize)) {
            c.fetch_add(1, Ordering::SeqCst);
            s.store(stamp, Ordering::SeqCst);
        }
    }

    /// Checks that every node of `dag` ran exactly `runs` times and, in the last run, after
    /// each of its upstreams.
    pub(crate) fn verify(&self, dag: &Dag, runs: u32) -> Result<(), String> {
        for i in 0..dag.len() {
            let c = self.count[i].load(Ordering::SeqCst);
            if c != runs {
                return Err(format!("node {i} ran {c} times, expected {runs}"));
            }
            let s = self.start[i].load(Ordering::SeqCst);
            for &u in dag.ups(i) {
                let su = self.start[u as usize].load(Ordering::SeqCst);
                if su >= s {
                    return Err(format!(
                        "node {i} (stamp {s}) ran before its upstream {u} (stamp {su})"
                    ));
                }
            }
        }
        Ok(())
    }
}
