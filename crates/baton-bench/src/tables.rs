//! The harness's Markdown tables: run time per node, the order graph's runs per second,
//! build, run and drop at the largest size, and memory per node.

use std::fmt::Write as _;

use crate::imps::Imp;
use crate::report::{Cell, Row, Stats, fmt_ms, fmt_ns, fmt_rate};
use crate::shapes::Shape;

/// The rows of one (shape, size, threads) point, in `imps` order.
fn points(rows: &[Row]) -> Vec<Vec<&Row>> {
    let mut out: Vec<Vec<&Row>> = Vec::new();
    for r in rows {
        match out.last_mut() {
            Some(p)
                if p[0].shape == r.shape && p[0].size == r.size && p[0].threads == r.threads =>
            {
                p.push(r);
            }
            _ => out.push(vec![r]),
        }
    }
    out
}

fn find<'a>(point: &[&'a Row], imp: Imp) -> Option<&'a Row> {
    point.iter().copied().find(|r| r.imp == imp)
}

fn stats(point: &[&Row], imp: Imp) -> Option<Stats> {
    match &find(point, imp)?.cell {
        Cell::Measured(s) => Some(s.clone()),
        _ => None,
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "-".to_owned(),
    }
}

/// Cell text for the time table: run ns/node, and for rebuilding implementations the
/// build + run + drop figure in brackets.
fn time_cell(row: Option<&Row>, size: usize, footnotes: &mut Vec<String>) -> String {
    let Some(row) = row else {
        return "".to_owned();
    };
    match &row.cell {
        Cell::Measured(s) if s.rebuilds => format!(
            "{} ({})",
            fmt_ns(s.run_node),
            fmt_ns((s.build_graph + s.run_graph + s.drop_graph) / size.max(1) as f64)
        ),
        Cell::Measured(s) => fmt_ns(s.run_node),
        Cell::Skipped(why) | Cell::Failed(why) => {
            footnotes.push(format!(
                "{} {} n={} thr={}: {why}",
                row.imp, row.shape, row.size, row.threads
            ));
            format!("skipped[{}]", footnotes.len())
        }
    }
}

/// All tables.
pub(crate) fn markdown(rows: &[Row], imps: &[Imp]) -> String {
    let mut md = String::new();
    let mut footnotes = Vec::new();
    let pts = points(rows);
    let shown: Vec<Imp> = imps
        .iter()
        .copied()
        .filter(|i| !matches!(i, Imp::TokioJoin | Imp::TokioSpawn))
        .collect();
    time_table(&mut md, &pts, &shown, &mut footnotes);
    order_table(&mut md, &pts, imps, &mut footnotes);
    phases_table(&mut md, &pts);
    memory_table(&mut md, &pts, &shown);
    if !footnotes.is_empty() {
        md.push('\n');
        for (k, f) in footnotes.iter().enumerate() {
            let _ = writeln!(md, "[{}] {f}  ", k + 1);
        }
    }
    let _ = writeln!(
        md,
        "\nnoise: the largest interquartile range of the run-time samples in the row, as ± half of it relative to the median; load: the 1-minute load average before -> after the row."
    );
    md
}

/// The run time per node of every shape but the order graph, with the ratios.
fn time_table(md: &mut String, pts: &[Vec<&Row>], shown: &[Imp], footnotes: &mut Vec<String>) {
    let _ = writeln!(
        md,
        "### Run time per node (median ns/node; dagx and dagrs: run only, and in brackets build + run + drop, as they build a graph per run)\n"
    );
    let mut head = "| shape | nodes | thr |".to_owned();
    let mut rule = "|---|---:|---:|".to_owned();
    for i in shown {
        let _ = write!(head, " {i} |");
        rule.push_str("---:|");
    }
    head.push_str(
        " baton/tokio | spread/tokio | baton/dagx | baton/dagrs | policies/baton | policies/tokio-timeout | baton graphs/s | noise | load |",
    );
    rule.push_str("---:|---:|---:|---:|---:|---:|---:|---:|---|");
    let _ = writeln!(md, "{head}\n{rule}");
    for p in pts.iter().filter(|p| p[0].shape != Shape::Order) {
        let r0 = p[0];
        let mut line = format!("| {} | {} | {} |", r0.shape, r0.size, r0.threads);
        for &i in shown {
            let _ = write!(line, " {} |", time_cell(find(p, i), r0.size, footnotes));
        }
        let b = stats(p, Imp::Baton).map(|s| s.run_node);
        let graphs = stats(p, Imp::Baton)
            .filter(|_| r0.size <= 1_000)
            .map_or("-".to_owned(), |s| fmt_rate(1e9 / s.run_graph));
        let noise = p
            .iter()
            .filter_map(|r| match &r.cell {
                Cell::Measured(s) => Some(s.spread()),
                _ => None,
            })
            .fold(0.0f64, f64::max);
        let _ = writeln!(
            line,
            " {} | {} | {} | {} | {} | {} | {} | ±{:.0}% | {} |",
            ratio(b, stats(p, Imp::Tokio).map(|s| s.run_node)),
            ratio(
                stats(p, Imp::BatonSpread).map(|s| s.run_node),
                stats(p, Imp::Tokio).map(|s| s.run_node)
            ),
            ratio(b, stats(p, Imp::Dagx).map(|s| s.run_node)),
            ratio(b, stats(p, Imp::Dagrs).map(|s| s.run_node)),
            ratio(stats(p, Imp::BatonPolicies).map(|s| s.run_node), b),
            ratio(
                stats(p, Imp::BatonPolicies).map(|s| s.run_node),
                stats(p, Imp::TokioTimeout).map(|s| s.run_node)
            ),
            graphs,
            50.0 * noise,
            r0.load
        );
        md.push_str(&line);
    }
}

/// The order graph's runs per second, with the ratios.
fn order_table(md: &mut String, pts: &[Vec<&Row>], imps: &[Imp], footnotes: &mut Vec<String>) {
    let order: Vec<_> = pts.iter().filter(|p| p[0].shape == Shape::Order).collect();
    if !order.is_empty() {
        let _ = writeln!(
            md,
            "\n### Order graph (user ∥ sku → stock → promo → notify), runs per second, one run at a time (dagx, dagrs: run only, build + run + drop in brackets)\n"
        );
        let mut head = "| thr |".to_owned();
        let mut rule = "|---:|".to_owned();
        for i in imps {
            let _ = write!(head, " {i} |");
            rule.push_str("---:|");
        }
        head.push_str(
            " baton/tokio-spawn | spread/tokio-spawn | baton/tokio-join | noise | load |",
        );
        rule.push_str("---:|---:|---:|---:|---|");
        let _ = writeln!(md, "{head}\n{rule}");
        for p in order {
            let r0 = p[0];
            let mut line = format!("| {} |", r0.threads);
            for &i in imps {
                let cell = match find(p, i).map(|r| &r.cell) {
                    Some(Cell::Measured(s)) if s.rebuilds => format!(
                        "{} ({})",
                        fmt_rate(1e9 / s.run_graph),
                        fmt_rate(1e9 / (s.build_graph + s.run_graph + s.drop_graph))
                    ),
                    Some(Cell::Measured(s)) => fmt_rate(1e9 / s.run_graph),
                    Some(_) => time_cell(find(p, i), r0.size, footnotes),
                    None => String::new(),
                };
                let _ = write!(line, " {cell} |");
            }
            // Time ratios (baton time / baseline time).
            let b = stats(p, Imp::Baton).map(|s| s.run_graph);
            let noise = p
                .iter()
                .filter_map(|r| match &r.cell {
                    Cell::Measured(s) => Some(s.spread()),
                    _ => None,
                })
                .fold(0.0f64, f64::max);
            let _ = writeln!(
                line,
                " {} | {} | {} | ±{:.0}% | {} |",
                ratio(b, stats(p, Imp::TokioSpawn).map(|s| s.run_graph)),
                ratio(
                    stats(p, Imp::BatonSpread).map(|s| s.run_graph),
                    stats(p, Imp::TokioSpawn).map(|s| s.run_graph)
                ),
                ratio(b, stats(p, Imp::TokioJoin).map(|s| s.run_graph)),
                50.0 * noise,
                r0.load
            );
            md.push_str(&line);
        }
    }
}

/// Build, run and drop of one graph at the largest size of each shape.
fn phases_table(md: &mut String, pts: &[Vec<&Row>]) {
    let _ = writeln!(
        md,
        "\n### Build, run and drop of one graph at the largest size measured (ms; baton and tokio build once and run many times, so their run includes the per-run state and report)\n"
    );
    let _ = writeln!(
        md,
        "| shape | nodes | thr | impl | build | run | drop | build + run + drop |\n|---|---:|---:|---|---:|---:|---:|---:|"
    );
    let mut largest: Vec<&Vec<&Row>> = Vec::new();
    for p in pts.iter().filter(|p| p[0].shape != Shape::Order) {
        match largest
            .iter_mut()
            .find(|q| q[0].shape == p[0].shape && q[0].threads == p[0].threads)
        {
            Some(q) if q[0].size < p[0].size => *q = p,
            Some(_) => {}
            None => largest.push(p),
        }
    }
    for p in largest {
        for r in p.iter() {
            if let Cell::Measured(s) = &r.cell {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} | {} | {} | {} |",
                    r.shape,
                    r.size,
                    r.threads,
                    r.imp,
                    fmt_ms(s.build_graph),
                    fmt_ms(s.run_graph),
                    fmt_ms(s.drop_graph),
                    fmt_ms(s.build_graph + s.run_graph + s.drop_graph)
                );
            }
        }
    }
}

/// The memory per node, where it was measured.
fn memory_table(md: &mut String, pts: &[Vec<&Row>], shown: &[Imp]) {
    let mem_points: Vec<_> = pts
        .iter()
        .filter(|p| {
            p.iter()
                .any(|r| matches!(&r.cell, Cell::Measured(s) if s.mem.is_some()))
        })
        .collect();
    if !mem_points.is_empty() {
        let _ = writeln!(
            md,
            "\n### Memory per node (bytes; RSS growth in a fresh child process: peak over build + one run, and in brackets resident after build)\n"
        );
        let mut head = "| shape | nodes | thr |".to_owned();
        let mut rule = "|---|---:|---:|".to_owned();
        for i in shown {
            let _ = write!(head, " {i} |");
            rule.push_str("---:|");
        }
        let _ = writeln!(md, "{head}\n{rule}");
        for p in mem_points {
            let r0 = p[0];
            let mut line = format!("| {} | {} | {} |", r0.shape, r0.size, r0.threads);
            for &i in shown {
                let cell = match find(p, i).map(|r| &r.cell) {
                    Some(Cell::Measured(Stats { mem: Some(m), .. })) => format!(
                        "{:.0} ({:.0})",
                        m.peak as f64 / r0.size as f64,
                        m.resident as f64 / r0.size as f64
                    ),
                    Some(Cell::Measured(_)) => "?".to_owned(),
                    Some(_) => "skipped".to_owned(),
                    None => String::new(),
                };
                let _ = write!(line, " {cell} |");
            }
            md.push_str(&line);
            md.push('\n');
        }
    }
}
