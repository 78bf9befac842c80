//! The shapes phase's table: one row per shape, with each database node's
//! CPU per item.

use comfy_table::{Table, presets::ASCII_MARKDOWN};

use crate::cpu::CpuUse;
use crate::drain::mib;
use crate::report::Report;
use crate::shapes::{describe_prune, label, leasing};

/// The shapes phase: one row per shape, then the prune figure. Each
/// PostgreSQL node's CPU has a column of its own (`db`; on Citus `coord`
/// and `w<port>`), and on a backend of several nodes their sum.
pub(crate) fn print_shapes(report: &Report) {
    let runs = || {
        report
            .backends
            .iter()
            .filter_map(|b| b.shapes.as_ref())
            .flat_map(|sh| &sh.shapes)
            .filter_map(|s| s.run.as_ref())
    };
    let mut nodes: Vec<&str> = Vec::new();
    for n in runs().flat_map(|r| &r.node_cpu) {
        if !nodes.contains(&n.node.as_str()) {
            nodes.push(&n.node);
        }
    }
    let several = runs().any(|r| r.node_cpu.len() > 1);
    let mut header: Vec<String> = [
        "backend",
        "partitions × items each",
        "items/s",
        "÷ reference shape (100 × N/100)",
        "stmts/item",
        "CPU µs/item: processor",
        "CPU µs/item: database",
    ]
    .map(String::from)
    .into();
    header.extend(nodes.iter().map(|n| format!("{n} µs/item")));
    if several {
        header.push("all nodes µs/item".into());
    }
    header.extend(["peak RSS", "leasing time", "backlog setup"].map(String::from));
    let mut t = Table::new();
    t.load_style(ASCII_MARKDOWN).set_header(header);
    let (mut prunes, mut notes) = (Vec::new(), Vec::new());
    for b in &report.backends {
        let Some(sh) = &b.shapes else { continue };
        for s in &sh.shapes {
            let name = format!(
                "{}{}",
                label(s),
                if s.partitions == sh.reference_partitions {
                    " (reference)"
                } else {
                    ""
                }
            );
            let Some(r) = &s.run else {
                let why = s.error.clone().unwrap_or_default();
                t.add_row(vec![b.backend.clone(), name, format!("error: {why}")]);
                continue;
            };
            let us = |f: fn(&CpuUse) -> f64| {
                r.cpu
                    .map_or("n/a".into(), |c| format!("{:.0}", r.us_per_item(f(&c))))
            };
            let mut row = vec![
                b.backend.clone(),
                name,
                format!(
                    "{:.0}{}",
                    r.items_per_s,
                    if r.timed_out {
                        " (timed out: partial)"
                    } else {
                        ""
                    }
                ),
                s.ratio_to_reference
                    .map_or("n/a".into(), |x| format!("{x:.2}×")),
                format!("{:.2}", r.statements_per_item),
                us(|c| c.processor_s),
                if b.backend == "sqlite" {
                    "in the processor".into()
                } else {
                    us(|c| c.database_s)
                },
            ];
            row.extend(nodes.iter().map(|&n| {
                r.node_cpu
                    .iter()
                    .find(|c| c.node == n)
                    .map_or(String::new(), |c| format!("{:.0}", r.us_per_item(c.cpu_s)))
            }));
            if several {
                let all: f64 = r.node_cpu.iter().map(|c| c.cpu_s).sum();
                row.push(if r.node_cpu.is_empty() {
                    String::new()
                } else {
                    format!("{:.0}", r.us_per_item(all))
                });
            }
            row.extend([
                mib(r.peak_rss_mib),
                leasing(r),
                format!("{:.1} s", r.enqueue_s),
            ]);
            t.add_row(row);
            let others = r.others_note();
            if !others.is_empty() {
                notes.push(format!("  {}, {}: node CPU{others}", b.backend, label(s)));
            }
        }
        if let Some(p) = &sh.prune {
            prunes.push(format!(
                "  {}: prune after the {}-partition shape: {}",
                b.backend,
                p.shape_partitions,
                describe_prune(p)
            ));
        }
        if let Some(e) = &sh.prune_error {
            prunes.push(format!("  {}: prune failed: {e}", b.backend));
        }
    }
    if t.is_empty() {
        return;
    }
    println!(
        "\nShapes: the same items per backend as partitions × items each, one processor at its defaults; \
         leasing time = spawn → every partition leased once (or the drain done)"
    );
    if !nodes.is_empty() {
        println!(
            "  CPU µs/item: database = every postgres/mariadbd process on this machine; \
             <node> µs/item = that PostgreSQL node's postmaster and its backends, exited ones \
             included (db: the server; coord: the Citus coordinator; w<port>: a Citus worker)"
        );
    }
    println!("{t}");
    for p in notes.into_iter().chain(prunes) {
        println!("{p}");
    }
}
