//! A report as a Chrome trace: the Trace Event Format's JSON object form, which Perfetto
//! (<https://ui.perfetto.dev>) and `chrome://tracing` open.
//!
//! One process is the run. Its first track, `run`, holds one slice from the run's start to
//! its makespan. Each node has a track of its own, named after it and sorted in
//! declaration order, holding one slice from the node's start to its end. Nested inside
//! it are its attempts, the backoff before each retry and, for a `Recovered` node, its
//! fallback. A node that never started has an instant event at its end instead. Attempts
//! that overlap, hedges and the attempts they race, go to extra tracks named after the
//! node with a lane number, since slices on one track must nest.

use std::fmt::Write as _;
use std::time::Duration;

use super::{AttemptReport, NodeReport, Outcome, Report};

/// The run's process id in the trace.
const PID: u32 = 1;

impl Report {
    /// The run as a Chrome trace (JSON text in the Trace Event Format), to save as a
    /// `.json` file and open in Perfetto or `chrome://tracing`.
    ///
    /// The object has `traceEvents` and `displayTimeUnit`. Slices are complete events
    /// (`"ph": "X"`) with `ts` and `dur` in microseconds from the run's start, a `pid`
    /// (the run) and a `tid` (the track); `cat` is `run`, `node`, `attempt`, `backoff` or
    /// `fallback`, and `args` carries the outcome, the attempt number and the error.
    /// Tracks are named by `thread_name` metadata events (`"ph": "M"`). Node `i` is on
    /// track `i + 1`; overlapping attempts (hedges) are on tracks after the last node's.
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
            node_events(&mut trace, &node, tid, &mut next_lane_tid);
        }
        trace.finish()
    }
}

/// Where a node's track `lane` sorts: the node's own track, then its lanes for hedges.
fn sort_index(node: usize, lane: usize) -> u64 {
    (node as u64 + 1) * 1_000 + lane as u64
}

/// The events of `node`, on its track `tid` and on lanes for its overlapping attempts.
fn node_events(trace: &mut Trace, node: &NodeReport<'_>, tid: u64, next_lane_tid: &mut u64) {
    let mut args = format!(
        "\"outcome\":\"{}\",\"attempts\":{}",
        node.outcome().as_str(),
        node.attempts()
    );
    if let Some(message) = node.message() {
        let _ = write!(args, ",\"error\":{}", json_string(&message));
    }
    let Some(start) = node.start() else {
        trace.instant(node.name(), tid, node.end(), &args);
        return;
    };
    let end = node.end();
    trace.slice(node.name(), "node", tid, start, end, &args);
    let log = node.attempt_log();
    if log.is_empty() {
        // No attempt log: one attempt that is the node's own span, or none at all, as when
        // an open breaker sent the node straight to its fallback.
        if node.attempts() == 1 {
            trace.slice("attempt 1", "attempt", tid, start, end, "\"number\":1");
        } else if node.outcome() == Outcome::Recovered {
            trace.slice("fallback", "fallback", tid, start, end, "");
        }
        return;
    }
    // Lane `k` ends at `lanes[k].1`; lane 0 is the node's own track.
    let mut lanes: Vec<(u64, Duration)> = vec![(tid, start)];
    let mut last_end = start;
    for attempt in log {
        let from = attempt
            .start
            .saturating_sub(attempt.delay_before)
            .max(start);
        let lane = match lanes.iter().position(|(_, free)| *free <= from) {
            Some(lane) => lane,
            None => {
                let lane_tid = *next_lane_tid;
                *next_lane_tid += 1;
                let name = format!("{} · lane {}", node.name(), lanes.len());
                trace.track(lane_tid, &name, sort_index(node.index(), lanes.len()));
                lanes.push((lane_tid, from));
                lanes.len() - 1
            }
        };
        let lane_tid = lanes[lane].0;
        if attempt.delay_before > Duration::ZERO {
            trace.slice("backoff", "backoff", lane_tid, from, attempt.start, "");
        }
        let name = format!("attempt {}", attempt.number);
        trace.slice(
            &name,
            "attempt",
            lane_tid,
            attempt.start,
            attempt.end,
            &attempt_args(attempt),
        );
        lanes[lane].1 = attempt.end;
        last_end = last_end.max(attempt.end);
    }
    if node.outcome() == Outcome::Recovered && last_end <= end {
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
    fn instant(&mut self, name: &str, tid: u64, at: Duration, args: &str) {
        self.push(format_args!(
            "{{\"name\":{},\"cat\":\"node\",\"ph\":\"i\",\"s\":\"t\",\"ts\":{},\"pid\":{PID},\"tid\":{tid},\"args\":{{{args}}}}}",
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
