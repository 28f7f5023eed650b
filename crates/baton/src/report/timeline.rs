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
//! Bars are scaled to the makespan (40 columns). A node that never started shows a `·` where
//! it ended. The last column is the node's error, skip cause or cancel reason.
//!
//! Names and messages are written as text a terminal shows on one line: control characters
//! are escaped (`\n`, `\r`, `\t`, `\u{1b}`), and columns are padded by display width, so
//! that a wide (CJK) or emoji name keeps the columns aligned. The JSON keeps them exact.

use std::borrow::Cow;
use std::fmt::{self, Write as _};
use std::time::Duration;

use unicode_width::UnicodeWidthStr;

use super::{NodeReport, Report};

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

fn bar(node: &NodeReport<'_>, span: Duration) -> String {
    let mut cells = [' '; WIDTH];
    let end = column(node.end(), span);
    match node.start() {
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
        let name_w = names.iter().map(|n| n.width()).max().unwrap_or(4).max(4);
        let scale = format!("0 ms{:>w$}", format!("{:.1} ms", ms(span)), w = WIDTH - 4);
        writeln!(
            f,
            "{:name_w$}  {:9}  |{scale}|  {:>17}  tries",
            "node", "outcome", "start → end (ms)"
        )?;
        for (node, name) in self.nodes().zip(&names) {
            let mut line = String::new();
            let start = node
                .start()
                .map_or_else(|| "-".to_owned(), |s| format!("{:.1}", ms(s)));
            let pad = name_w - name.width();
            write!(
                line,
                "{name}{:pad$}  {:9}  |{}|  {:>7} → {:>7.1}  {:>5}",
                "",
                node.outcome().as_str(),
                bar(&node, span),
                start,
                ms(node.end()),
                // A router makes no attempt: its row counts its branch's.
                node.branch().unwrap_or(node).attempts(),
            )?;
            if let Some(msg) = node.message() {
                write!(line, "  {}", one_line(&msg))?;
            }
            if let Some(branch) = node.branch() {
                write!(line, "  (branch {})", one_line(branch.name()))?;
            }
            if let Some(a) = node.attempt_log().iter().find(|a| !a.overran.is_zero()) {
                let (n, by) = (a.number, ms(a.overran));
                write!(line, "  (attempt {n} overran its cut by {by:.1} ms)")?;
            }
            if node.breaker_local() {
                line.push_str("  (breaker judged locally)");
            }
            writeln!(f, "{}", line.trim_end())?;
        }
        Ok(())
    }
}
