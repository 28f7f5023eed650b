//! The report's `Display`: a compact text timeline, one line per node.
//!
//! ```text
//! run 5f0c…0001 · makespan 502.3 ms · 5 succeeded
//! node    outcome    |0 ms                          502.3 ms|  start → end (ms)  tries
//! user    succeeded  |████████████                          |    0.0 →  201.0      1
//! sku     succeeded  |████████████                          |    0.0 →  200.9      1
//! stock   succeeded  |            █████████                 |  201.0 →  351.6      1
//! ```
//!
//! Bars are scaled to the makespan, over 40 columns. A node that never started shows a `·` where
//! it ended. The last column is the node's error, skip cause or cancel reason.
//!
//! Names and messages are written as text a terminal shows on one line: control characters
//! such as `\n`, `\r`, `\t` and `\u{1b}` are escaped, and columns are padded by display
//! width, so that a wide CJK or emoji name keeps the columns aligned. The JSON keeps them
//! exact.

use std::borrow::Cow;
use std::fmt::{self, Write as _};
use std::time::Duration;

use unicode_width::UnicodeWidthStr;

use super::{Compensations, Items, Report};

const WIDTH: usize = 40;

/// `text` as a terminal shows it on one line: control characters escaped.
fn one_line(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn column(at: Duration, span: Duration) -> usize {
    if span.is_zero() {
        return 0;
    }
    let x = at.as_secs_f64() / span.as_secs_f64() * WIDTH as f64;
    (x.round() as usize).min(WIDTH)
}

fn bar(start: Option<Duration>, end: Duration, span: Duration) -> String {
    let mut cells = [' '; WIDTH];
    let end = column(end, span);
    match start {
        Some(start) => {
            let from = column(start, span).min(WIDTH - 1);
            let to = end.max(from + 1).min(WIDTH);
            for c in &mut cells[from..to] {
                *c = '█';
            }
        }
        None => cells[end.min(WIDTH - 1)] = '·',
    }
    cells.iter().collect()
}

/// One row's columns: name, outcome, start and end from the run's start, and attempts.
struct Row<'a> {
    name: Cow<'a, str>,
    outcome: &'static str,
    start: Option<Duration>,
    end: Duration,
    attempts: u32,
}

impl Row<'_> {
    fn line(&self, name_w: usize, span: Duration) -> Result<String, fmt::Error> {
        let mut line = String::new();
        let start = self
            .start
            .map_or_else(|| "-".to_owned(), |s| format!("{:.1}", ms(s)));
        let pad = name_w.saturating_sub(self.name.width());
        write!(
            line,
            "{}{:pad$}  {:9}  |{}|  {:>7} → {:>7.1}  {:>5}",
            self.name,
            "",
            self.outcome,
            bar(self.start, self.end, span),
            start,
            ms(self.end),
            self.attempts,
        )?;
        Ok(line)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let span = self.makespan();
        writeln!(
            f,
            "run {} · makespan {:.1} ms · {}",
            self.run_id(),
            ms(span),
            self.counts()
        )?;
        let names: Vec<Cow<'_, str>> = self.nodes().map(|n| one_line(n.name())).collect();
        let items: Vec<Option<Items>> = (0..self.len() as u32).map(|i| self.items_of(i)).collect();
        // An item's row is indented under its node's: `  prices[3]`.
        let item_w = names
            .iter()
            .zip(&items)
            .filter_map(|(name, items)| {
                let last = items.as_ref()?.len().checked_sub(1)?;
                Some(name.width() + 4 + last.to_string().len())
            })
            .max()
            .unwrap_or(0);
        let name_w = names
            .iter()
            .map(|n| n.width())
            .max()
            .unwrap_or(4)
            .max(4)
            .max(item_w);
        let scale = format!("0 ms{:>w$}", format!("{:.1} ms", ms(span)), w = WIDTH - 4);
        writeln!(
            f,
            "{:name_w$}  {:9}  |{scale}|  {:>17}  tries",
            "node", "outcome", "start → end (ms)"
        )?;
        for ((node, name), items) in self.nodes().zip(&names).zip(&items) {
            let row = Row {
                name: Cow::Borrowed(name),
                outcome: node.outcome().as_str(),
                start: node.start(),
                end: node.end(),
                // A router makes no attempt: its row counts its branch's.
                attempts: node.branch().unwrap_or(node).attempts(),
            };
            let mut tail = String::new();
            if let Some(msg) = node.message() {
                write!(tail, "  {}", one_line(&msg))?;
            }
            if let Some(branch) = node.branch() {
                write!(tail, "  (branch {})", one_line(branch.name()))?;
            }
            if let Some(a) = node.attempt_log().iter().find(|a| !a.overran.is_zero()) {
                let (n, by) = (a.number, ms(a.overran));
                write!(tail, "  (attempt {n} overran its cut by {by:.1} ms)")?;
            }
            if node.breaker_local() {
                tail.push_str("  (breaker judged locally)");
            }
            write_row(f, &row, name_w, span, &tail)?;
            if let Some(items) = items {
                write_items(f, name, items, name_w, span)?;
            }
            if let Some(inner) = node.inner() {
                // The inner run's own timeline, indented under the node's row.
                for line in inner.to_string().lines() {
                    writeln!(f, "    {line}")?;
                }
            }
        }
        if let Some(compensation) = self.compensation() {
            write_compensation(f, &compensation, name_w, span)?;
        }
        Ok(())
    }
}

/// The compensation section: one row per compensation that ran, then the nodes that
/// succeeded without one.
fn write_compensation(
    f: &mut fmt::Formatter<'_>,
    compensation: &Compensations,
    name_w: usize,
    span: Duration,
) -> fmt::Result {
    let verdict = if compensation.complete() {
        "complete"
    } else {
        "partial"
    };
    writeln!(f, "compensation ({verdict}):")?;
    for c in compensation.iter() {
        let row = Row {
            name: one_line(c.node()),
            outcome: c.outcome().as_str(),
            start: Some(c.start()),
            end: c.end(),
            attempts: c.attempts(),
        };
        let tail = c
            .error()
            .map(|e| format!("  {}", one_line(&e.to_string())))
            .unwrap_or_default();
        write_row(f, &row, name_w, span.max(c.end()), &tail)?;
    }
    for node in compensation.not_run() {
        writeln!(f, "  not run (no runtime): {}", one_line(node))?;
    }
    let not: Vec<Cow<'_, str>> = compensation.not_compensated().map(one_line).collect();
    if !not.is_empty() {
        writeln!(f, "  not compensated: {}", not.join(", "))?;
    }
    Ok(())
}

/// Writes `row` and `tail`, without trailing blanks.
fn write_row(
    f: &mut fmt::Formatter<'_>,
    row: &Row<'_>,
    name_w: usize,
    span: Duration,
    tail: &str,
) -> fmt::Result {
    let mut line = row.line(name_w, span)?;
    line.push_str(tail);
    writeln!(f, "{}", line.trim_end())
}

/// A map node's rule, then one row per item, indented under the node's row.
fn write_items(
    f: &mut fmt::Formatter<'_>,
    name: &str,
    items: &Items,
    name_w: usize,
    span: Duration,
) -> fmt::Result {
    writeln!(
        f,
        "  {name}: completion \"{}\" {}",
        items.completion(),
        items.decision()
    )?;
    for item in items.iter() {
        let row = Row {
            name: Cow::Owned(format!("  {name}[{}]", item.index())),
            outcome: item.outcome().as_str(),
            start: item.start(),
            end: item.end(),
            attempts: item.attempts(),
        };
        let tail = item
            .message()
            .map(|m| format!("  {}", one_line(&m)))
            .unwrap_or_default();
        write_row(f, &row, name_w, span, &tail)?;
    }
    Ok(())
}
