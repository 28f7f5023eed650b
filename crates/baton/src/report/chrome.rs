//! A report as a Chrome trace: the Trace Event Format's JSON object form, which Perfetto
//! at <https://ui.perfetto.dev> and `chrome://tracing` open.
//!
//! One process is the run. Its first track, `run`, holds one slice from the run's start to
//! its makespan. Each node has a track of its own, named after it and sorted in
//! declaration order, holding one slice from the node's start to its end. Nested inside
//! it are its attempts, the backoff before each retry and, for a `Recovered` node, its
//! fallback. A node that never started has an instant event at its end instead. Attempts
//! that overlap, hedges and the attempts they race, go to extra tracks named after the
//! node with a lane number, since slices on one track must nest.
//!
//! A map node's items are slices nested in the node's slice, each named after its item,
//! such as `prices[3]`, with its attempts nested in it. Items that run at once go to the node's
//! lanes. Compensations, when they ran, are on a track named `compensation` after the
//! nodes': one slice per compensation, named after its node, with its attempts.

use std::fmt::Write as _;
use std::time::Duration;

use super::{AttemptReport, NodeReport, Outcome, Report};

/// The run's process id in the trace.
const PID: u32 = 1;

impl Report {
    /// The run as a Chrome trace, JSON text in the Trace Event Format, to save as a
    /// `.json` file and open in Perfetto or `chrome://tracing`.
    ///
    /// The object has `traceEvents` and `displayTimeUnit`. Slices are complete events,
    /// `"ph": "X"`, with `ts` and `dur` in microseconds from the run's start, a `pid` for
    /// the run and a `tid` for the track. `cat` is `run`, `node`, `item`, `attempt`,
    /// `backoff`, `fallback` or `compensation`, and `args` carries the outcome, the attempt
    /// number, the item's index and the error. Tracks are named by `thread_name` metadata
    /// events, `"ph": "M"`. Node `i` is on track `i + 1`. Overlapping attempts, such as
    /// hedges, and items are on lanes, tracks after the last node's, as is the
    /// `compensation` track.
    ///
    /// ```
    /// use baton_graph::{BoxError, Graph, Retry};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let mut g = Graph::<()>::builder();
    /// g.node("user").retry(Retry::new(3)).task(|ctx, ()| async move {
    ///     if ctx.attempt() < 2 { Err("503".into()) } else { Ok::<_, BoxError>("ada") }
    /// });
    /// let trace = g.build()?.run(()).await?.to_chrome_trace();
    /// assert!(trace.starts_with(r#"{"displayTimeUnit":"ms","traceEvents":["#));
    /// assert!(trace.contains(r#"{"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{"name":"user"}}"#));
    /// // Attempt 1 failed at once, a 100 ms backoff, attempt 2 at 100 ms.
    /// assert!(trace.contains(r#""name":"backoff","cat":"backoff","ph":"X","ts":0.000,"dur":100000.000"#));
    /// assert!(trace.contains(r#""name":"attempt 2","cat":"attempt","ph":"X","ts":100000.000"#));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn to_chrome_trace(&self) -> String {
        let mut trace = Trace::default();
        trace.meta(
            "process_name",
            0,
            "name",
            &json_string(&format!("baton run {}", self.run_id())),
        );
        trace.track(0, "run", 0);
        let c = self.counts();
        let args = format!(
            "\"succeeded\":{},\"recovered\":{},\"failed\":{},\"skipped\":{},\"not_taken\":{},\"cancelled\":{}",
            c.succeeded, c.recovered, c.failed, c.skipped, c.not_taken, c.cancelled
        );
        trace.slice("run", "run", 0, Duration::ZERO, self.makespan(), &args);
        let mut next_lane_tid = self.len() as u64 + 1;
        for node in self.nodes() {
            let tid = node.index() as u64 + 1;
            trace.track(tid, node.name(), sort_index(node.index(), 0));
            let mut lanes = Lanes::new(node.name(), node.index(), tid);
            node_events(&mut trace, &node, &mut lanes, &mut next_lane_tid);
        }
        if let Some(compensations) = self.compensation() {
            let tid = next_lane_tid;
            next_lane_tid += 1;
            trace.track(tid, "compensation", sort_index(self.len(), 0));
            let mut lanes = Lanes::new("compensation", self.len(), tid);
            let mut all: Vec<_> = compensations.iter().collect();
            all.sort_by_key(|c| c.start());
            for c in all {
                let piece = Piece {
                    name: c.node(),
                    cat: "compensation",
                    outcome: c.outcome(),
                    attempts: c.attempts(),
                    start: Some(c.start()),
                    end: c.end(),
                    log: c.attempt_log(),
                    message: c.error().map(ToString::to_string),
                    extra: String::new(),
                };
                let lane = lanes.take(&mut trace, c.start(), c.end(), &mut next_lane_tid);
                piece_events(&mut trace, &piece, lane, &mut lanes, &mut next_lane_tid);
            }
        }
        trace.finish()
    }
}

/// Where track `lane` of node `node` sorts: the node's own track, then its lanes. The
/// compensation track sorts as node `len`.
fn sort_index(node: usize, lane: usize) -> u64 {
    (node as u64 + 1) * 1_000 + lane as u64
}

/// The tracks of one node or of the compensations: its own, then lanes for slices that
/// overlap. Each lane records when it is free again.
struct Lanes<'a> {
    name: &'a str,
    index: usize,
    lanes: Vec<(u64, Duration)>,
}

impl<'a> Lanes<'a> {
    fn new(name: &'a str, index: usize, tid: u64) -> Self {
        Self {
            name,
            index,
            lanes: vec![(tid, Duration::ZERO)],
        }
    }

    /// A track free from `from`, held until `until`: the first free lane, or a new one.
    fn take(&mut self, trace: &mut Trace, from: Duration, until: Duration, next: &mut u64) -> u64 {
        if let Some(lane) = self.lanes.iter_mut().find(|(_, free)| *free <= from) {
            lane.1 = until;
            return lane.0;
        }
        let tid = *next;
        *next += 1;
        let name = format!("{} · lane {}", self.name, self.lanes.len());
        trace.track(tid, &name, sort_index(self.index, self.lanes.len()));
        self.lanes.push((tid, until));
        tid
    }

    /// Frees every lane from `at` on.
    fn free_from(&mut self, at: Duration) {
        for lane in &mut self.lanes {
            lane.1 = at;
        }
    }
}

/// One slice with attempts: a node, an item of a map node, or a compensation.
struct Piece<'a> {
    name: &'a str,
    cat: &'static str,
    outcome: Outcome,
    attempts: u32,
    start: Option<Duration>,
    end: Duration,
    log: &'a [AttemptReport],
    message: Option<String>,
    extra: String,
}

/// The events of `node`: its slice with its attempts, then its items if it maps a list.
fn node_events(trace: &mut Trace, node: &NodeReport<'_>, lanes: &mut Lanes<'_>, next: &mut u64) {
    let items = node.items();
    let piece = Piece {
        name: node.name(),
        cat: "node",
        outcome: node.outcome(),
        attempts: node.attempts(),
        start: node.start(),
        end: node.end(),
        // A map node's attempts are its items'.
        log: if items.is_some() {
            &[]
        } else {
            node.attempt_log()
        },
        message: node.message(),
        extra: String::new(),
    };
    let tid = lanes.lanes[0].0;
    // The node holds its own track until its end.
    lanes.lanes[0].1 = node.end();
    if items.is_some() {
        piece_slice(trace, &piece, tid);
    } else {
        piece_events(trace, &piece, tid, lanes, next);
    }
    let (Some(items), Some(start)) = (items, node.start()) else {
        return;
    };
    // Items nest inside the node's slice, from its start on.
    lanes.free_from(start);
    let mut all: Vec<_> = items.iter().collect();
    all.sort_by_key(|item| item.start());
    for item in all {
        let name = item.name();
        let piece = Piece {
            name: &name,
            cat: "item",
            outcome: item.outcome(),
            attempts: item.attempts(),
            start: item.start(),
            end: item.end(),
            log: item.attempt_log(),
            message: item.message(),
            extra: format!(",\"index\":{}", item.index()),
        };
        let lane = match item.start() {
            Some(from) => lanes.take(trace, from, item.end(), next),
            None => tid,
        };
        piece_events(trace, &piece, lane, lanes, next);
    }
}

/// The slice of `piece` on track `tid`, or an instant at its end when it never started.
/// Returns whether it started.
fn piece_slice(trace: &mut Trace, piece: &Piece<'_>, tid: u64) -> bool {
    let mut args = format!(
        "\"outcome\":\"{}\",\"attempts\":{}{}",
        piece.outcome.as_str(),
        piece.attempts,
        piece.extra
    );
    if let Some(message) = &piece.message {
        let _ = write!(args, ",\"error\":{}", json_string(message));
    }
    match piece.start {
        Some(start) => trace.slice(piece.name, piece.cat, tid, start, piece.end, &args),
        None => trace.instant(piece.name, piece.cat, tid, piece.end, &args),
    }
    piece.start.is_some()
}

/// The events of `piece` on track `tid`: its slice, then its attempts, the backoff before
/// each retry and its fallback nested in it. Attempts that overlap, as hedges do, take lanes.
fn piece_events(
    trace: &mut Trace,
    piece: &Piece<'_>,
    tid: u64,
    lanes: &mut Lanes<'_>,
    next: &mut u64,
) {
    if !piece_slice(trace, piece, tid) {
        return;
    }
    let (start, end) = (piece.start.unwrap_or_default(), piece.end);
    if piece.log.is_empty() {
        // No attempt log: one attempt that is the piece's own span, or none at all, as
        // when an open breaker sent it straight to its fallback.
        if piece.attempts == 1 {
            trace.slice("attempt 1", "attempt", tid, start, end, "\"number\":1");
        } else if piece.outcome == Outcome::Recovered {
            trace.slice("fallback", "fallback", tid, start, end, "");
        }
        return;
    }
    // When `tid` is free again inside the piece's slice.
    let mut free = start;
    let mut last_end = start;
    for attempt in piece.log {
        let from = attempt
            .start
            .saturating_sub(attempt.delay_before)
            .max(start);
        let lane_tid = if free <= from {
            free = attempt.end;
            tid
        } else {
            lanes.take(trace, from, attempt.end, next)
        };
        if attempt.delay_before > Duration::ZERO {
            trace.slice("backoff", "backoff", lane_tid, from, attempt.start, "");
        }
        let name = format!("attempt {}", attempt.number);
        let args = attempt_args(attempt);
        trace.slice(
            &name,
            "attempt",
            lane_tid,
            attempt.start,
            attempt.end,
            &args,
        );
        last_end = last_end.max(attempt.end);
    }
    if piece.outcome == Outcome::Recovered && last_end <= end {
        trace.slice("fallback", "fallback", tid, last_end, end, "");
    }
}

fn attempt_args(attempt: &AttemptReport) -> String {
    let mut args = format!("\"number\":{}", attempt.number);
    if let Some(error) = &attempt.error {
        let _ = write!(args, ",\"error\":{}", json_string(error));
    }
    for (key, flag) in [
        ("hedge", attempt.hedge),
        ("cancelled", attempt.cancelled),
        ("injected_error", attempt.injected_error),
    ] {
        if flag {
            let _ = write!(args, ",\"{key}\":true");
        }
    }
    for (key, wait) in [
        ("permit_wait_us", attempt.permit_wait),
        ("rate_limit_wait_us", attempt.rate_limit_wait),
        ("injected_latency_us", attempt.injected_latency),
    ] {
        if wait > Duration::ZERO {
            let _ = write!(args, ",\"{key}\":{}", micros(wait));
        }
    }
    args
}

/// The trace's events, written as JSON as they come.
#[derive(Default)]
struct Trace {
    events: String,
}

impl Trace {
    fn push(&mut self, event: std::fmt::Arguments<'_>) {
        if !self.events.is_empty() {
            self.events.push(',');
        }
        let _ = self.events.write_fmt(event);
    }

    /// A metadata event `name` on track `tid` with one argument.
    fn meta(&mut self, name: &str, tid: u64, key: &str, value: &str) {
        self.push(format_args!(
            "{{\"name\":\"{name}\",\"ph\":\"M\",\"pid\":{PID},\"tid\":{tid},\"args\":{{\"{key}\":{value}}}}}"
        ));
    }

    /// Track `tid`'s name and position.
    fn track(&mut self, tid: u64, name: &str, sort: u64) {
        self.meta("thread_name", tid, "name", &json_string(name));
        self.meta("thread_sort_index", tid, "sort_index", &sort.to_string());
    }

    /// A complete event from `start` to `end` on track `tid`.
    fn slice(
        &mut self,
        name: &str,
        cat: &str,
        tid: u64,
        start: Duration,
        end: Duration,
        args: &str,
    ) {
        let dur = end.saturating_sub(start);
        self.push(format_args!(
            "{{\"name\":{},\"cat\":\"{cat}\",\"ph\":\"X\",\"ts\":{},\"dur\":{},\"pid\":{PID},\"tid\":{tid},\"args\":{{{args}}}}}",
            json_string(name),
            micros(start),
            micros(dur)
        ));
    }

    /// An instant event at `at` on track `tid`.
    fn instant(&mut self, name: &str, cat: &str, tid: u64, at: Duration, args: &str) {
        self.push(format_args!(
            "{{\"name\":{},\"cat\":\"{cat}\",\"ph\":\"i\",\"s\":\"t\",\"ts\":{},\"pid\":{PID},\"tid\":{tid},\"args\":{{{args}}}}}",
            json_string(name),
            micros(at)
        ));
    }

    fn finish(self) -> String {
        format!(
            "{{\"displayTimeUnit\":\"ms\",\"traceEvents\":[{}]}}",
            self.events
        )
    }
}

/// `d` in microseconds with three decimals: exact to the nanosecond.
fn micros(d: Duration) -> String {
    let ns = d.as_nanos();
    format!("{}.{:03}", ns / 1_000, ns % 1_000)
}

/// `s` as a JSON string, quoted and escaped.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped_and_times_exact() {
        assert_eq!(json_string("a\"b\\c\n\u{1}"), r#""a\"b\\c\n\u0001""#);
        assert_eq!(micros(Duration::from_nanos(1_234_567)), "1234.567");
        assert_eq!(micros(Duration::ZERO), "0.000");
    }
}
