//! The task body every implementation runs, and the recorder that checks them.
//!
//! For timing the body is a no-op: [`Probe::hit`] tests one `Option` that is `None`. The
//! smoke test gives a [`Recorder`] instead, which counts each node's executions and stamps
//! the order in which they ran, so that [`Recorder::verify`] can check "every node exactly
//! once, after its upstreams".

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::shapes::Dag;

/// The no-op task body, optionally recording.
#[derive(Debug, Clone, Default)]
pub(crate) struct Probe(Option<Arc<Recorder>>);

impl Probe {
    /// The plain no-op body (what is timed).
    pub(crate) fn none() -> Probe {
        Probe(None)
    }

    /// A body that records into `recorder`.
    pub(crate) fn recording(recorder: &Arc<Recorder>) -> Probe {
        Probe(Some(Arc::clone(recorder)))
    }

    /// Node `id` ran.
    #[inline(always)]
    pub(crate) fn hit(&self, id: u32) {
        if let Some(r) = &self.0 {
            r.hit(id);
        } else {
            std::hint::black_box(id);
        }
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
