//! JSON form of a report, with feature `serde`.
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
//!       // Subgraph nodes only (Report::inner): the inner run's report, this schema again.
//!       "inner": { "run_id": "…", "makespan_ms": 1.0, "counts": { … }, "nodes": [ … ] },
//!       // Map nodes only (Report::items):
//!       "completion": { "rule": "all_succeed", "met": true, "total": 2,
//!                       "succeeded": 2, "failed": 0, "cancelled": 0 },
//!       "items": [ { "index": 0, "name": "prices[0]", "outcome": "succeeded",
//!                    "attempts": 1, "start_ms": 0.0, "end_ms": 1.0, "error": null,
//!                    "attempt_log": [] } ]
//!     }
//!   ],
//!   // Only when compensations ran (Report::compensation):
//!   "compensation": { "complete": true, "not_compensated": ["user"], "not_run": [],
//!                     "entries": [ { "node": "stock", "outcome": "succeeded", "attempts": 1,
//!                                    "start_ms": 430.1, "end_ms": 431.0, "error": null,
//!                                    "attempt_log": [] } ] }
//! }
//! ```

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

use super::{CompensationReport, Compensations, ItemReport, Items, NodeReport, Report};

fn ms_f64(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Serializes a `Duration` as float milliseconds.
pub(super) fn ms<S: Serializer>(d: &std::time::Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(ms_f64(*d))
}

impl Serialize for Report {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let compensation = self.compensation();
        let mut map = serializer.serialize_map(Some(4 + usize::from(compensation.is_some())))?;
        map.serialize_entry("run_id", &self.run_id().to_string())?;
        map.serialize_entry("makespan_ms", &ms_f64(self.makespan()))?;
        map.serialize_entry("counts", &self.counts())?;
        map.serialize_entry("nodes", &Nodes(self))?;
        if let Some(compensation) = &compensation {
            map.serialize_entry("compensation", &Undo(compensation))?;
        }
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
        let items = self.items();
        let inner = self.inner();
        let extra = if items.is_some() { 2 } else { 0 } + usize::from(inner.is_some());
        let mut map = serializer.serialize_map(Some(12 + extra))?;
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
        if let Some(items) = &items {
            map.serialize_entry("completion", &Rule(items))?;
            map.serialize_entry("items", &ItemList(items))?;
        }
        if let Some(inner) = &inner {
            map.serialize_entry("inner", inner)?;
        }
        map.end()
    }
}

struct Undo<'a>(&'a Compensations);

impl Serialize for Undo<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let c = self.0;
        let mut map = serializer.serialize_map(Some(4))?;
        map.serialize_entry("complete", &c.complete())?;
        let entries: Vec<Entry<'_>> = c.iter().map(Entry).collect();
        map.serialize_entry("entries", &entries)?;
        map.serialize_entry("not_compensated", &c.not_compensated().collect::<Vec<_>>())?;
        map.serialize_entry("not_run", &c.not_run().collect::<Vec<_>>())?;
        map.end()
    }
}

struct Entry<'a>(CompensationReport<'a>);

impl Serialize for Entry<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let c = &self.0;
        let mut map = serializer.serialize_map(Some(7))?;
        map.serialize_entry("node", c.node())?;
        map.serialize_entry("outcome", &c.outcome())?;
        map.serialize_entry("attempts", &c.attempts())?;
        map.serialize_entry("start_ms", &ms_f64(c.start()))?;
        map.serialize_entry("end_ms", &ms_f64(c.end()))?;
        map.serialize_entry("error", &c.error().map(ToString::to_string))?;
        map.serialize_entry("attempt_log", c.attempt_log())?;
        map.end()
    }
}

struct Rule<'a>(&'a Items);

impl Serialize for Rule<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let d = self.0.decision();
        let mut map = serializer.serialize_map(Some(6))?;
        map.serialize_entry("rule", self.0.completion().as_str())?;
        map.serialize_entry("met", &d.met)?;
        map.serialize_entry("total", &d.total)?;
        map.serialize_entry("succeeded", &d.succeeded)?;
        map.serialize_entry("failed", &d.failed)?;
        map.serialize_entry("cancelled", &d.cancelled)?;
        map.end()
    }
}

struct ItemList<'a>(&'a Items);

impl Serialize for ItemList<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for item in self.0.iter() {
            seq.serialize_element(&item)?;
        }
        seq.end()
    }
}

impl Serialize for ItemReport<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(8))?;
        map.serialize_entry("index", &self.index())?;
        map.serialize_entry("name", &self.name())?;
        map.serialize_entry("outcome", &self.outcome())?;
        map.serialize_entry("attempts", &self.attempts())?;
        map.serialize_entry("start_ms", &self.start().map(ms_f64))?;
        map.serialize_entry("end_ms", &ms_f64(self.end()))?;
        map.serialize_entry("error", &self.message())?;
        map.serialize_entry("attempt_log", self.attempt_log())?;
        map.end()
    }
}
