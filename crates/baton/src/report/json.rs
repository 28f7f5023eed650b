//! JSON form of a report (feature `serde`).
//!
//! # Schema
//! ```json
//! {
//!   "run_id": "5f0c…0001",          // 32 hex digits
//!   "makespan_ms": 502.31,           // float, milliseconds
//!   "counts": { "succeeded": 5, "recovered": 0, "failed": 0, "skipped": 0,
//!               "not_taken": 0, "cancelled": 0 },
//!   "nodes": [                       // one per node, in the order they were added
//!     {
//!       "name": "stock",
//!       "outcome": "failed",         // succeeded | recovered | failed | skipped | not_taken | cancelled
//!       "attempts": 1,               // attempts that started
//!       "start_ms": 201.02,          // float; null if the node never started
//!       "end_ms": 351.60,            // float
//!       "error": "HTTP 503 ...",     // string or null: NodeReport::message()
//!       "skipped_because": null,     // upstream name or null
//!       "root_cause": null,          // for skipped nodes: the node whose failure caused it
//!       "breaker_local": false,      // its shared breaker judged it alone (NodeReport::breaker_local)
//!       "branch": null               // for a router: the branch it ran (NodeReport::branch)
//!     }
//!   ]
//! }
//! ```

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

use super::{NodeReport, Report};

fn ms_f64(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Serializes a `Duration` as float milliseconds.
pub(super) fn ms<S: Serializer>(d: &std::time::Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(ms_f64(*d))
}

impl Serialize for Report {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(4))?;
        map.serialize_entry("run_id", &self.run_id().to_string())?;
        map.serialize_entry("makespan_ms", &ms_f64(self.makespan()))?;
        map.serialize_entry("counts", &self.counts())?;
        map.serialize_entry("nodes", &Nodes(self))?;
        map.end()
    }
}

struct Nodes<'a>(&'a Report);

impl Serialize for Nodes<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for node in self.0.nodes() {
            seq.serialize_element(&node)?;
        }
        seq.end()
    }
}

impl Serialize for NodeReport<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(12))?;
        map.serialize_entry("name", self.name())?;
        map.serialize_entry("outcome", &self.outcome())?;
        map.serialize_entry("attempts", &self.attempts())?;
        map.serialize_entry("start_ms", &self.start().map(ms_f64))?;
        map.serialize_entry("end_ms", &ms_f64(self.end()))?;
        map.serialize_entry("error", &self.message())?;
        map.serialize_entry("skipped_because", &self.skipped_because().map(|n| n.name()))?;
        map.serialize_entry("root_cause", &self.root_cause().map(|n| n.name()))?;
        map.serialize_entry("abandoned", &self.abandoned())?;
        map.serialize_entry("attempt_log", self.attempt_log())?;
        map.serialize_entry("breaker_local", &self.breaker_local())?;
        map.serialize_entry("branch", &self.branch().map(|n| n.name()))?;
        map.end()
    }
}
