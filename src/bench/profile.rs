//! The tables of where a decode step's time goes (`--profile`): the parts with their physics,
//! the layers, the operations. `run` prints them on stderr, `bench` under its table.

use crate::metrics::profile::{Limits, Part, ProfileLevel, StepBreakdown, TurnProfile};
use crate::report::{table, Align};

fn ms(v: f64) -> String {
    crate::fmt::sig(v, 3)
}

fn opt(v: Option<f64>, digits: u32) -> String {
    v.map_or_else(|| "—".to_string(), |v| crate::fmt::sig(v, digits))
}

/// What a profile's parts are set against on this machine: the roofline's `bandwidth`
/// (bytes/s) and its last-level cache size (the correction is measured by the record).
pub(crate) fn limits(bandwidth: Option<f64>) -> Limits {
    Limits {
        bandwidth,
        llc_bytes: crate::hw::last_level_cache_bytes(),
        ..Limits::default()
    }
}

/// A table's headers: the first column left-aligned, the figures right-aligned.
fn headers<'a>(names: &[&'a str]) -> Vec<(&'a str, Align)> {
    let align = |i| if i == 0 { Align::Left } else { Align::Right };
    names
        .iter()
        .enumerate()
        .map(|(i, &n)| (n, align(i)))
        .collect()
}

/// The parts table of one breakdown.
fn parts_table(b: &StepBreakdown) -> String {
    let rows: Vec<Vec<String>> = b
        .parts
        .iter()
        .map(|p| {
            vec![
                p.part.to_string(),
                ms(p.ms),
                crate::fmt::pct(Some(p.share), 1),
                if p.weight_bytes + p.kv_bytes > 0 {
                    crate::fmt::bytes(p.weight_bytes + p.kv_bytes)
                } else {
                    "—".to_string()
                },
                opt(p.gb_per_s, 3),
                p.mbu_pct.map_or_else(|| "—".into(), |m| format!("{m:.0}%")),
                opt(p.gflop_per_s, 3),
                p.caveats
                    .iter()
                    .map(|c| c.label())
                    .collect::<Vec<_>>()
                    .join(", "),
            ]
        })
        .collect();
    let names = [
        "part", "ms", "share", "reads", "GB/s", "MBU", "GFLOP/s", "note",
    ];
    table(&headers(&names), &rows)
}

/// The operations table of one breakdown.
fn ops_table(b: &StepBreakdown) -> String {
    let mut rows: Vec<Vec<String>> = b
        .ops
        .iter()
        .map(|o| {
            vec![
                o.op.to_string(),
                o.nodes.to_string(),
                ms(o.ms),
                crate::fmt::pct(Some(o.share), 1),
            ]
        })
        .collect();
    // The step's time outside the graph's nodes, so that the rows add up to its wall time.
    let outside = [
        Part::Host,
        Part::GraphInputs,
        Part::Sync,
        Part::Output,
        Part::Profiling,
    ];
    for p in b
        .parts
        .iter()
        .filter(|p| outside.iter().any(|o| o.label() == p.part))
    {
        rows.push(vec![
            format!("({})", p.part),
            "—".into(),
            ms(p.ms),
            crate::fmt::pct(Some(p.share), 1),
        ]);
    }
    table(&headers(&["op", "nodes", "ms", "share"]), &rows)
}

/// The layer strip: each layer's time, and the slowest against the median.
fn layers_line(b: &StepBreakdown) -> Option<String> {
    let median = crate::metrics::median(&b.layers_ms)?;
    let (slowest, most) = b
        .layers_ms
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))?;
    Some(format!(
        "layers   {} ms each (median {}; slowest layer {slowest}: {}, {:.2}× the median)\n",
        b.layers_ms
            .iter()
            .map(|v| ms(*v))
            .collect::<Vec<_>>()
            .join(" "),
        ms(median),
        ms(*most),
        most / median.max(f64::MIN_POSITIVE),
    ))
}

/// The block of a turn's (or a bench row's) profile.
pub(crate) fn human(p: &TurnProfile, level: ProfileLevel) -> String {
    let b = &p.mean;
    let which = if p.rate == 1 {
        format!(
            "every decode step but 1 in {} (unprofiled, to measure profiling's cost)",
            crate::metrics::profile::RATE_ONE_UNPROFILED_EVERY
        )
    } else {
        format!("1 decode step in {}", p.rate)
    };
    let mut out = format!(
        "profile  {which} · {} sampled · mean per step, {} row{} at depth {}\n",
        b.steps,
        b.rows,
        if b.rows == 1 { "" } else { "s" },
        b.depth,
    );
    if !b.by_name {
        out.push_str(
            "         this graph's weight names are not llama.cpp's usual ones: by operation only\n",
        );
    }
    if let Some(why) = &p.not_meaningful {
        out.push_str(&format!("         shares not meaningful: {why}\n"));
    }
    if level == ProfileLevel::Parts && b.by_name {
        out.push_str(&parts_table(b));
        if let Some(line) = layers_line(b) {
            out.push_str(&line);
        }
    } else {
        out.push_str(&ops_table(b));
    }
    out.push_str(&format!(
        "         parts add up to {} of {} ms wall",
        ms(b.sum_ms),
        ms(b.wall_ms)
    ));
    if let (Some(on), Some(off), Some(cost)) =
        (p.profiled_call_ms, p.unprofiled_call_ms, p.sampled_cost())
    {
        out.push_str(&format!(
            " · a profiled decode call {} ms, an unprofiled one {} ms ({:+.1}%)",
            ms(on),
            ms(off),
            cost * 100.0
        ));
    }
    out.push('\n');
    let c = &p.correction;
    out.push_str(&if c.samples > 0 {
        format!(
            "         profiling adds {} ± {} µs a node (median and sd over {} profiled call{}), \
             taken off each node\n",
            crate::fmt::sig(c.per_node.as_secs_f64() * 1e6, 3),
            crate::fmt::sig(c.spread.as_secs_f64() * 1e6, 2),
            c.samples,
            if c.samples == 1 { "" } else { "s" },
        )
    } else {
        "         profiling's cost per node not measured (no unprofiled call): nothing taken off\n"
            .to_string()
    });
    if let Some(eval) = b.llama_eval_ms {
        out.push_str(&format!(
            "         llama.cpp's own clock of a profiled call (t_eval): {} ms\n",
            ms(eval)
        ));
    }
    if let (Some(without), Some(all)) = (p.decode_tok_per_s_unsampled, p.decode_tok_per_s_all) {
        out.push_str(&format!(
            "         decode {} tok/s without the profiled steps ({} with them)\n",
            crate::fmt::sig(without, 3),
            crate::fmt::sig(all, 3)
        ));
    }
    out
}
