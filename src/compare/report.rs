//! The comparison table: one row per candidate (model file × runtime settings) with its
//! quality beside its speed, the Pareto front (no other candidate both faster and closer to
//! the reference), a verdict in words, and the output formats.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::quality::QualityStats;
use crate::fmt::bytes as size;
use crate::fmt::opt;
use crate::report::{cell, csv_lines, table, Align};

/// One candidate's line of the table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompareRow {
    /// Short name: the file name, plus the settings that vary between candidates.
    pub label: String,
    pub model: String,
    pub quantization: String,
    pub file_size_bytes: u64,
    /// File bits per model parameter.
    pub bits_per_weight: f64,
    pub n_gpu_layers: i64,
    pub type_k: String,
    pub type_v: String,
    pub flash_attn: String,
    /// The reference every KL divergence is measured against (this row's KL is its own
    /// evaluation against itself, so 0 when llama.cpp is deterministic).
    pub reference: bool,
    /// The file was quantized by `compare --quantize`.
    pub quantized_here: bool,
    pub quality: QualityStats,
    pub pp_tok_per_s: Option<f64>,
    pub pp_tok_per_s_sd: Option<f64>,
    pub tg_tok_per_s: Option<f64>,
    pub tg_tok_per_s_sd: Option<f64>,
    pub ceiling_tok_per_s: Option<f64>,
    pub mbu_pct: Option<f64>,
    pub cost_per_million_tokens_usd: Option<f64>,
    /// On the Pareto front of tg speed against mean KL divergence.
    pub pareto: bool,
    /// Labels of the candidates that are both at least as fast and at least as close to the
    /// reference (one of them strictly).
    pub dominated_by: Vec<String>,
    pub synthetic: bool,
    /// The quantization of the already quantized file this one was made from
    /// (`--quantize … --allow-requantize`): its losses are measured against those weights.
    #[serde(default)]
    pub requantized_from: Option<String>,
    /// Made by `--quantize`: the tensors llama.cpp's quantizer gave another type than the one
    /// asked for (their rows do not fit its blocks), so the file is partly another type.
    #[serde(default)]
    pub fallback: Option<super::quantize::Fallback>,
    /// The K/V pair's CUDA flash-attention mark (`ModelInfo::fa_kv_kernel`): its tg is not
    /// the pair's own kernel's speed on this build.
    #[serde(default)]
    pub fa_kv_kernel: Option<String>,
}

impl CompareRow {
    /// The row's (mean, sd) of one speed.
    pub(crate) fn speed(&self, which: Speed) -> (Option<f64>, Option<f64>) {
        match which {
            Speed::Pp => (self.pp_tok_per_s, self.pp_tok_per_s_sd),
            Speed::Tg => (self.tg_tok_per_s, self.tg_tok_per_s_sd),
        }
    }

    /// A quarter or more of its tensors fell back to another type: the type it is named by
    /// is not what most of it is.
    pub(crate) fn mostly_fallback(&self) -> bool {
        self.fallback.is_some_and(|f| f.share() >= FALLBACK_SHARE)
    }
}

/// The share of tensors fallen back to other types from which a file is no longer held to its
/// named type's published figures.
pub(crate) const FALLBACK_SHARE: f64 = 0.25;

/// The two speeds a verdict weighs: prefill (pp, the prompt) and decode (tg, the answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Speed {
    Pp,
    Tg,
}

impl Speed {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Speed::Pp => "pp",
            Speed::Tg => "tg",
        }
    }

    /// "at prefill", "at decoding".
    pub(crate) fn at(self) -> &'static str {
        match self {
            Speed::Pp => "at prefill",
            Speed::Tg => "at decoding",
        }
    }
}

/// How one candidate's speed stands against another's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pace {
    Faster,
    AsFast,
    Slower,
    /// Both measured, but one round has no spread: nothing is called.
    NotJudged,
}

/// `a`'s `which` speed against `b`'s, beyond the rounds' spread and the control's systematic
/// error; `None` when either was not measured.
pub(crate) fn pace(a: &CompareRow, b: &CompareRow, which: Speed, systematic: f64) -> Option<Pace> {
    let ((sa, da), (sb, db)) = (a.speed(which), b.speed(which));
    let (sa, sb) = (sa?, sb?);
    let Some((da, db)) = da.zip(db) else {
        return Some(Pace::NotJudged);
    };
    let t = crate::metrics::noise_threshold(da, db, systematic * sa.max(sb));
    Some(match sa - sb {
        d if d > t => Pace::Faster,
        d if d < -t => Pace::Slower,
        _ => Pace::AsFast,
    })
}

/// A whole comparison, as printed and as kept in the comparisons log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub id: String,
    pub unix_time_s: u64,
    pub command_line: String,
    /// The evaluation text: its path or `builtin:<name>`, and its token count.
    pub text: String,
    pub text_tokens: u64,
    pub n_ctx: u32,
    pub chunks: u32,
    pub reference: String,
    /// Why that file is the reference (`--reference`, the source of `--quantize`, the most
    /// bits per weight of the real weights); empty in comparisons logged before it was kept.
    #[serde(default)]
    pub reference_why: String,
    pub rows: Vec<CompareRow>,
    pub verdict: Vec<String>,
    pub llama_cpp: String,
    /// The self-copy control: the reference against a byte-identical copy of itself, timed in
    /// the same alternating rounds. Their difference is the systematic error of the speed
    /// measurement (file placement, order, drift), below which no difference is called real.
    #[serde(default)]
    pub control: Option<Control>,
}

/// The self-copy control's result.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Control {
    pub reference_tg_tok_per_s: f64,
    pub copy_tg_tok_per_s: f64,
}

impl Control {
    /// |copy − reference| ÷ reference: the systematic error as a fraction.
    pub(crate) fn systematic(&self) -> f64 {
        if self.reference_tg_tok_per_s > 0.0 {
            (self.copy_tg_tok_per_s - self.reference_tg_tok_per_s).abs()
                / self.reference_tg_tok_per_s
        } else {
            0.0
        }
    }
}

/// The smallest tg difference between `a` and `b` called real: the sum of their rounds' sds,
/// or the control's systematic error at their speed, whichever is larger. `None` when a speed
/// or a spread is missing (one round has no spread: then nothing is called).
pub(super) fn speed_threshold(a: &CompareRow, b: &CompareRow, systematic: f64) -> Option<f64> {
    let (sa, sb) = (a.tg_tok_per_s?, b.tg_tok_per_s?);
    let (da, db) = (a.tg_tok_per_s_sd?, b.tg_tok_per_s_sd?);
    Some(crate::metrics::noise_threshold(
        da,
        db,
        systematic * sa.max(sb),
    ))
}

/// `a` dominates `b`: slower at neither decoding (tg) nor prefill (pp, when measured), at
/// least as close to the reference, and faster at one of them or closer. Without a spread
/// (one round) nothing dominates; a candidate that prefills faster is never dominated by one
/// that only decodes as fast.
fn dominates(a: &CompareRow, b: &CompareRow, systematic: f64) -> bool {
    let Some(tg) = pace(a, b, Speed::Tg, systematic) else {
        return false;
    };
    let pp = pace(a, b, Speed::Pp, systematic).unwrap_or(Pace::AsFast);
    if [tg, pp]
        .iter()
        .any(|p| matches!(p, Pace::Slower | Pace::NotJudged))
    {
        return false;
    }
    let (ka, kb) = (kl(a), kl(b));
    ka <= kb && (tg == Pace::Faster || pp == Pace::Faster || ka < kb)
}

/// How `best` stands against `row` in words, speed by speed: "faster (tg 50.0 vs 40.0 tok/s,
/// pp 400 vs 320 tok/s)", "as fast at decoding and faster at prefill (pp …)", "as fast (tg,
/// pp)".
fn pace_words(best: &CompareRow, row: &CompareRow, systematic: f64) -> String {
    let mut faster = Vec::new();
    let mut as_fast = Vec::new();
    for which in [Speed::Tg, Speed::Pp] {
        match pace(best, row, which, systematic) {
            Some(Pace::Faster) => {
                let (b, r) = (best.speed(which).0, row.speed(which).0);
                let (b, r) = (b.unwrap_or(0.0), r.unwrap_or(0.0));
                faster.push((which, format!("{} {b:.1} vs {r:.1} tok/s", which.name())));
            }
            Some(_) => as_fast.push(which),
            None => {}
        }
    }
    match (faster.as_slice(), as_fast.as_slice()) {
        ([], []) => "(speed not measured)".to_string(),
        ([], same) => format!(
            "as fast ({})",
            same.iter().map(|w| w.name()).collect::<Vec<_>>().join(", ")
        ),
        (fast, []) => format!(
            "faster ({})",
            fast.iter()
                .map(|(_, t)| t.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        (fast, same) => format!(
            "faster {} ({}) and as fast {}",
            fast.iter()
                .map(|(w, _)| w.at())
                .collect::<Vec<_>>()
                .join(" and "),
            fast.iter()
                .map(|(_, t)| t.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            same.iter()
                .map(|w| w.at())
                .collect::<Vec<_>>()
                .join(" and ")
        ),
    }
}

pub(super) fn kl(row: &CompareRow) -> f64 {
    row.quality.kld_mean.unwrap_or(0.0)
}

/// Marks the Pareto front and who dominates whom; `control` sets the systematic error below
/// which a speed difference is not called.
pub(crate) fn mark_pareto(rows: &mut [CompareRow], control: Option<&Control>) {
    let systematic = control.map_or(0.0, Control::systematic);
    let snapshot = rows.to_vec();
    for row in rows.iter_mut() {
        row.dominated_by = snapshot
            .iter()
            .filter(|other| other.label != row.label && dominates(other, row, systematic))
            .map(|other| other.label.clone())
            .collect();
        row.pareto = row.dominated_by.is_empty();
    }
}

/// The verdict in words: the front, then each dominated candidate and what beats it.
pub(crate) fn verdict(rows: &[CompareRow], control: Option<&Control>) -> Vec<String> {
    let systematic = control.map_or(0.0, Control::systematic);
    let front: Vec<&str> = rows
        .iter()
        .filter(|r| r.pareto)
        .map(|r| r.label.as_str())
        .collect();
    if rows.iter().all(|r| r.tg_tok_per_s.is_none()) {
        return vec!["No speed was measured (--no-speed): no Pareto front.".to_string()];
    }
    let mut lines = vec![format!(
        "Pareto front (no other candidate is both faster and closer to the reference): {}.",
        front.join(", ")
    )];
    // A candidate whose decode took a fallback kernel: its speed is the build's, not its own.
    lines.extend(rows.iter().filter_map(|r| {
        Some(format!(
            "Warning, {}: {}.",
            r.label,
            r.fa_kv_kernel.as_ref()?
        ))
    }));
    lines.push(match control {
        Some(c) => format!(
            "Control: the reference against a byte-identical copy of itself, in the same \
             alternating rounds: {:.2} vs {:.2} tok/s, {:.1}% apart. That is the systematic \
             error of these measurements; a speed difference is called real only beyond it and \
             beyond the rounds' spread.",
            c.reference_tg_tok_per_s,
            c.copy_tg_tok_per_s,
            c.systematic() * 100.0
        ),
        None => "No self-copy control was measured: speed differences are judged against the \
                 rounds' spread only."
            .to_string(),
    });
    if rows
        .iter()
        .any(|r| r.tg_tok_per_s.is_some() && r.tg_tok_per_s_sd.is_none())
    {
        lines.push(
            "n=1: one round has no spread, so no candidate is called faster or dominated; \
             rerun with -r 3 or more."
                .to_string(),
        );
    }
    for row in rows.iter().filter(|r| !r.pareto) {
        let best = rows
            .iter()
            .filter(|o| row.dominated_by.contains(&o.label))
            .max_by(|a, b| {
                a.tg_tok_per_s
                    .unwrap_or(0.0)
                    .total_cmp(&b.tg_tok_per_s.unwrap_or(0.0))
            });
        if let Some(best) = best {
            // Rounds scatter: say so when the speed difference is inside their spread (or the
            // control's systematic error).
            let speeds = best.tg_tok_per_s.zip(row.tg_tok_per_s);
            let within_noise = (speeds.zip(speed_threshold(best, row, systematic)))
                .is_some_and(|((b, r), t)| (b - r).abs() <= t);
            lines.push(format!(
                "{} is dominated: {} is {} and {} (KL {} vs {}){}.",
                row.label,
                best.label,
                pace_words(best, row, systematic),
                if kl(best) < kl(row) {
                    "closer to the reference"
                } else {
                    "as close to the reference"
                },
                fmt_kl(best),
                fmt_kl(row),
                if within_noise {
                    "; the speed difference is within the spread of the rounds (sd) or the \
                     control's systematic error, so it is not a real difference"
                } else {
                    ""
                },
            ));
        }
    }
    // Like with like: a file's MBU is held only against files of its own type.
    let mbus: Vec<crate::metrics::busy::MbuPeer> = rows
        .iter()
        .filter_map(|r| {
            r.mbu_pct.map(|m| crate::metrics::busy::MbuPeer {
                label: r.label.clone(),
                kind: r.quantization.clone(),
                mbu_pct: m,
            })
        })
        .collect();
    lines.extend(crate::metrics::busy::mbu_outliers(&mbus));
    if rows.iter().any(|r| r.mbu_pct.is_some_and(|m| m > 100.0)) {
        lines.push(format!(
            "MBU ↑: {} (give --bandwidth-gb-s, or rerun the probe on an idle machine).",
            crate::metrics::roofline::ABOVE_CEILING
        ));
    }
    lines
}

fn fmt_kl(row: &CompareRow) -> String {
    match row.quality.kld_mean {
        Some(v) => crate::fmt::sig(v, 3),
        None if row.reference => "0, the reference".into(),
        None => "—".into(),
    }
}

fn mean_sd(mean: Option<f64>, sd: Option<f64>) -> String {
    mean.map_or_else(|| "—".into(), |m| crate::fmt::mean_sd(m, sd))
}

/// The cell of a quality figure that has no meaning (synthetic weights).
const NOT_MEANINGFUL: &str = "n/m";

/// PPL, KLD mean, p99, max, same top % and Δp mean, as precise as the sample allows: a mean
/// with its standard error to the error's second significant digit (`wide`; the narrow
/// table prints the means alone), the tails to three.
fn quality_cells(q: &QualityStats, wide: bool) -> Vec<String> {
    let sig3 = |v: Option<f64>| v.map_or_else(|| "—".to_string(), |v| crate::fmt::sig(v, 3));
    let kld = match (q.kld_mean, q.kld_uncertainty) {
        (Some(m), Some(u)) if wide && u > 0.0 => crate::fmt::mean_pm(m, u),
        (m, _) => sig3(m),
    };
    // The binomial standard error of a share of n positions, in points.
    let same_top = q.same_top_pct.map_or_else(
        || "—".to_string(),
        |p| {
            let n = q.n_scored.max(1) as f64;
            let se = ((p / 100.0) * (1.0 - p / 100.0) / n).sqrt() * 100.0;
            if wide && se > 0.0 {
                crate::fmt::mean_pm(p, se)
            } else {
                format!("{p:.1}")
            }
        },
    );
    vec![
        crate::fmt::mean_pm(q.ppl, q.ppl_uncertainty),
        kld,
        sig3(q.kld_p99),
        sig3(q.kld_max),
        same_top,
        opt(q.delta_p_mean_pct, 3),
    ]
}

/// The widest a candidate's name is in the default table (its middle cut to `…`); `-o md+`,
/// CSV and JSON keep it whole.
const NARROW_LABEL_CHARS: usize = 22;
/// The widest a quant cell is in the default table.
const NARROW_QUANT_CHARS: usize = 16;

/// A speed as the narrow table shows it: the mean with its sd at the mean's precision
/// (`1234±12`, `61.9±0.5`), `61.9 n=1` with one round, `—` when not measured.
fn compact_speed(mean: Option<f64>, sd: Option<f64>) -> String {
    let Some(m) = mean else {
        return "—".into();
    };
    let d = match m.abs() {
        v if v >= 100.0 => 0,
        v if v >= 10.0 => 1,
        _ => 2,
    };
    match sd {
        Some(s) => format!("{m:.d$}±{s:.d$}"),
        None => format!("{m:.d$} n=1"),
    }
}

/// "180/272 (66%)": the tensors that fell back; "0" when none did; "—" for a file not
/// quantized here.
fn fallback_cell(r: &CompareRow, wide: bool) -> String {
    match r.fallback {
        None => "—".into(),
        Some(f) if f.tensors == 0 => "0".into(),
        Some(f) if wide => format!("{}/{} ({:.0}%)", f.tensors, f.of, f.share() * 100.0),
        Some(f) => format!("{:.0}%", f.share() * 100.0),
    }
}

/// The default table, within 120 columns for any realistic set of candidates: who (the name's
/// middle cut when long, the reference marked), which type with its real bits per weight and,
/// when some file's tensors fell back to other types, their share; the mean KLD and same-top
/// rate; pp and tg with their spread; the front (★).
fn narrow_table(c: &Comparison) -> String {
    let fell_back = c
        .rows
        .iter()
        .any(|r| r.fallback.is_some_and(|f| f.tensors > 0));
    let mut headers = vec![
        ("candidate", Align::Left),
        ("quant", Align::Left),
        ("bpw", Align::Right),
    ];
    if fell_back {
        headers.push(("fell back", Align::Right));
    }
    headers.extend([
        ("KLD mean", Align::Right),
        ("same top %", Align::Right),
        ("pp t/s", Align::Right),
        ("tg t/s", Align::Right),
        ("front", Align::Left),
    ]);
    let rows: Vec<Vec<String>> = c
        .rows
        .iter()
        .map(|r| {
            let label = if r.reference {
                format!(
                    "{} (ref)",
                    crate::text::ellipsis_middle(&r.label, NARROW_LABEL_CHARS - 6)
                )
            } else {
                crate::text::ellipsis_middle(&r.label, NARROW_LABEL_CHARS)
            };
            let mut cells = vec![
                label,
                crate::text::ellipsis_middle(&r.quantization, NARROW_QUANT_CHARS),
                format!("{:.2}", r.bits_per_weight),
            ];
            if fell_back {
                cells.push(fallback_cell(r, false));
            }
            if r.synthetic {
                cells.extend([NOT_MEANINGFUL.to_string(), NOT_MEANINGFUL.to_string()]);
            } else {
                let q = quality_cells(&r.quality, false);
                cells.extend([q[1].clone(), q[4].clone()]);
            }
            cells.extend([
                compact_speed(r.pp_tok_per_s, r.pp_tok_per_s_sd),
                compact_speed(r.tg_tok_per_s, r.tg_tok_per_s_sd),
                match (r.tg_tok_per_s, r.pareto) {
                    (None, _) => "—",
                    (Some(_), true) => "★",
                    (Some(_), false) => "",
                }
                .to_string(),
            ]);
            cells
        })
        .collect();
    table(&headers, &rows)
}

/// The Markdown table (every column when `wide`), its notes and the verdict.
pub(crate) fn markdown(c: &Comparison, wide: bool) -> String {
    let headers = [
        ("candidate", Align::Left),
        ("quant", Align::Left),
        ("size", Align::Right),
        ("bpw", Align::Right),
        ("fell back", Align::Right),
        ("PPL", Align::Right),
        ("KLD mean", Align::Right),
        ("KLD p99", Align::Right),
        ("KLD max", Align::Right),
        ("same top %", Align::Right),
        ("Δp mean %", Align::Right),
        ("pp t/s", Align::Right),
        ("tg t/s", Align::Right),
        ("ceiling t/s", Align::Right),
        ("MBU %", Align::Right),
        ("$/1M tok", Align::Right),
        ("Pareto", Align::Left),
    ];
    let rows: Vec<Vec<String>> = c
        .rows
        .iter()
        .map(|r| {
            let q = &r.quality;
            let mut cells = vec![
                if r.reference {
                    format!("{} (reference)", r.label)
                } else {
                    r.label.clone()
                },
                r.quantization.clone(),
                size(r.file_size_bytes),
                format!("{:.2}", r.bits_per_weight),
                fallback_cell(r, true),
            ];
            if r.synthetic {
                // Random weights have no quality to lose: no figure that could be read as one.
                cells.extend(std::iter::repeat_n(NOT_MEANINGFUL.to_string(), 6));
            } else {
                cells.extend(quality_cells(q, true));
            }
            cells.extend([
                mean_sd(r.pp_tok_per_s, r.pp_tok_per_s_sd),
                mean_sd(r.tg_tok_per_s, r.tg_tok_per_s_sd),
                opt(r.ceiling_tok_per_s, 1),
                crate::bench::format::mbu_cell(r.mbu_pct),
                opt(r.cost_per_million_tokens_usd, 3),
                match (r.tg_tok_per_s, r.pareto) {
                    (None, _) => "—",
                    (Some(_), true) => "★ front",
                    (Some(_), false) => "dominated",
                }
                .to_string(),
            ]);
            cells
        })
        .collect();
    let mut out = if wide {
        table(&headers, &rows)
    } else {
        let mut t = narrow_table(c);
        t.push_str(
            "(-o md+: every column, whole names, size, PPL, the errors of the means, the KLD \
             tails, Δp, the ceiling, MBU and the cost; ★: the Pareto front)\n",
        );
        t
    };
    out.push('\n');
    out.push_str(&format!(
        "Quality: {} scored tokens per model ({} chunks of {} tokens, second halves scored) of {} ({} tokens); KL divergence in nats, KL(reference ‖ candidate), reference {}{}.\n",
        c.rows.first().map_or(0, |r| r.quality.n_scored),
        c.chunks,
        c.n_ctx,
        c.text,
        c.text_tokens,
        c.reference,
        if c.reference_why.is_empty() { String::new() } else { format!(" ({})", c.reference_why) },
    ));
    if c.rows.iter().any(|r| r.synthetic) {
        out.push_str(&format!(
            "Note: {}; its quality columns read {NOT_MEANINGFUL} (not meaningful: random weights \
             have no quality to lose).\n",
            crate::engine::ModelInfo::SYNTHETIC_LABEL
        ));
    }
    if c.rows.iter().any(|r| r.requantized_from.is_some()) {
        out.push_str(
            "Note: \"X ← Y\" rows were quantized from an already quantized Y file: their losses \
             add to Y's and are measured against Y, not the original weights.\n",
        );
    }
    if let Some(r) = c
        .rows
        .iter()
        .find(|r| r.fallback.is_some_and(|f| f.tensors > 0))
    {
        let f = r
            .fallback
            .unwrap_or(super::quantize::Fallback { tensors: 0, of: 0 });
        out.push_str(&format!(
            "Note: \"fell back\" is the share of tensors llama.cpp's quantizer gave another type \
             than the one named, because their rows do not fit its blocks ({}: {} of {}); bpw is \
             each file's real bits per weight.\n",
            r.label, f.tensors, f.of
        ));
    }
    out.push('\n');
    for line in &c.verdict {
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Flatten a JSON object into (dotted key, cell) pairs.
fn flatten(prefix: &str, value: &Value, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        Value::Array(items) if items.iter().all(Value::is_string) => out.push((
            prefix.to_string(),
            items
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(";"),
        )),
        other => out.push((prefix.to_string(), cell(Some(other)))),
    }
}

/// One CSV line per candidate with every field (quality.* flattened), plus the comparison's
/// own fields on each line.
pub(crate) fn csv(c: &Comparison) -> Result<String, serde_json::Error> {
    let mut rows = Vec::new();
    for row in &c.rows {
        let mut fields: Vec<(String, String)> = [
            ("comparison_id", c.id.clone()),
            ("text", c.text.clone()),
            ("text_tokens", c.text_tokens.to_string()),
            ("n_ctx", c.n_ctx.to_string()),
            ("chunks", c.chunks.to_string()),
            ("llama_cpp", c.llama_cpp.clone()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let mut value = serde_json::to_value(row)?;
        // Every line has the same columns: a row without a fallback count (a file not made
        // here) gets its two cells empty, not one `fallback` column of its own.
        if value.get("fallback").is_some_and(Value::is_null) {
            value["fallback"] = serde_json::json!({ "of": null, "tensors": null });
        }
        flatten("", &value, &mut fields);
        rows.push(fields);
    }
    Ok(csv_lines(&rows))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn row(label: &str, tg: f64, kld: f64) -> CompareRow {
        CompareRow {
            label: label.into(),
            model: format!("/m/{label}.gguf"),
            quantization: "Q8_0".into(),
            file_size_bytes: 1 << 20,
            bits_per_weight: 8.5,
            n_gpu_layers: -1,
            type_k: "f16".into(),
            type_v: "f16".into(),
            flash_attn: "auto".into(),
            reference: kld == 0.0,
            quantized_here: false,
            quality: QualityStats {
                n_scored: 255,
                ppl: 10.0,
                ppl_uncertainty: 0.1,
                kld_mean: Some(kld),
                kld_uncertainty: Some(0.0),
                kld_median: Some(kld),
                kld_p99: Some(kld * 3.0),
                kld_max: Some(kld * 5.0),
                same_top_pct: Some(99.0),
                delta_p_mean_pct: Some(-0.1),
                delta_p_rms_pct: Some(0.5),
            },
            pp_tok_per_s: Some(tg * 8.0),
            pp_tok_per_s_sd: Some(1.0),
            tg_tok_per_s: Some(tg),
            tg_tok_per_s_sd: Some(0.5),
            ceiling_tok_per_s: Some(tg * 1.5),
            mbu_pct: Some(66.7),
            cost_per_million_tokens_usd: Some(2.0 / (tg * 3600.0) * 1e6),
            pareto: false,
            dominated_by: Vec::new(),
            synthetic: false,
            requantized_from: None,
            fallback: None,
            fa_kv_kernel: None,
        }
    }

    pub(crate) fn comparison(rows: Vec<CompareRow>) -> Comparison {
        Comparison {
            id: "20261130-120000-abcd".into(),
            unix_time_s: 1,
            command_line: "tokscope compare".into(),
            text: "builtin:alice".into(),
            text_tokens: 30000,
            n_ctx: 512,
            chunks: 58,
            reference: "f16.gguf".into(),
            reference_why: "the most bits per weight".into(),
            verdict: verdict(&rows, None),
            rows,
            llama_cpp: "b1".into(),
            control: None,
        }
    }

    #[test]
    fn pareto_front_and_dominated_candidates() {
        let mut rows = vec![
            row("f16", 50.0, 0.0),
            row("q8_0", 90.0, 0.001),
            row("q4_0", 140.0, 0.05),
            // Slower than q4_0 and further away: dominated.
            row("q3_bad", 120.0, 0.08),
            // Slower than q8_0 and further away than q8_0: dominated by q8_0.
            row("q6_slow", 80.0, 0.002),
        ];
        mark_pareto(&mut rows, None);
        let front: Vec<&str> = rows
            .iter()
            .filter(|r| r.pareto)
            .map(|r| r.label.as_str())
            .collect();
        assert_eq!(front, ["f16", "q8_0", "q4_0"]);
        assert_eq!(rows[3].dominated_by, ["q4_0"]);
        assert_eq!(rows[4].dominated_by, ["q8_0"]);
        let words = verdict(&rows, None);
        assert!(words[0].contains("f16, q8_0, q4_0"), "{words:?}");
        assert!(
            words
                .iter()
                .any(|l| l.starts_with("q3_bad is dominated: q4_0 is faster")),
            "{words:?}"
        );
        // q6_slow is 10 tok/s slower than q8_0, with sd 0.5 each: a real difference.
        assert!(
            !words.iter().any(|l| l.contains("within the spread")),
            "{words:?}"
        );
        let mut close = vec![row("a", 50.0, 0.01), row("b", 49.5, 0.02)];
        mark_pareto(&mut close, None);
        let words = verdict(&close, None);
        assert!(
            words
                .iter()
                .any(|l| l.contains("within the spread of the rounds")),
            "{words:?}"
        );
    }

    #[test]
    fn the_self_copy_control_sets_what_counts_as_faster() {
        // 2% apart with sds of 0.5: real without a control...
        let rows = || vec![row("ref", 100.0, 0.0), row("q", 98.0, 0.01)];
        let mut plain = rows();
        mark_pareto(&mut plain, None);
        assert_eq!(plain[1].dominated_by, ["ref"]);
        let words = verdict(&plain, None);
        assert!(
            words
                .iter()
                .any(|l| l.contains("faster (tg 100.0 vs 98.0 tok/s, pp 800.0 vs 784.0 tok/s)")),
            "{words:?}"
        );
        // ...but not when the reference and its own copy measured 3% apart: the reference is
        // then only "as fast" (and closer, so it still dominates, for its KL).
        let control = Control {
            reference_tg_tok_per_s: 100.0,
            copy_tg_tok_per_s: 97.0,
        };
        assert!((control.systematic() - 0.03).abs() < 1e-12);
        let mut judged = rows();
        mark_pareto(&mut judged, Some(&control));
        let words = verdict(&judged, Some(&control));
        assert!(!words.iter().any(|l| l.contains("faster (")), "{words:?}");
        assert!(words.iter().any(|l| l.contains("3.0% apart")), "{words:?}");
        // A faster but further candidate within the control's error is not on a trade-off:
        // it is as fast and further, so the reference dominates it.
        let mut faster = vec![row("ref", 100.0, 0.0), row("q", 102.0, 0.01)];
        mark_pareto(&mut faster, Some(&control));
        assert_eq!(faster[1].dominated_by, ["ref"]);
        mark_pareto(&mut faster, None);
        assert!(
            faster.iter().all(|r| r.pareto),
            "2 tok/s faster is real without a control"
        );
    }

    #[test]
    fn one_round_calls_nothing() {
        let mut rows = vec![row("ref", 100.0, 0.0), row("q", 50.0, 0.01)];
        for r in &mut rows {
            r.tg_tok_per_s_sd = None;
        }
        mark_pareto(&mut rows, None);
        assert!(rows.iter().all(|r| r.pareto));
        let words = verdict(&rows, None);
        assert!(words.iter().any(|l| l.starts_with("n=1")), "{words:?}");
    }

    /// A candidate whose K/V pair this CUDA build converts to f16 at decode says so in the
    /// verdict; the others say nothing of it.
    #[test]
    fn a_fallback_flash_attention_pair_is_named_in_the_verdict() {
        let mut rows = vec![row("f16", 100.0, 0.0), row("kv8", 90.0, 0.01)];
        rows[1].fa_kv_kernel = Some("K/V q8_0-f16: converted to f16".into());
        mark_pareto(&mut rows, None);
        let words = verdict(&rows, None);
        let warned: Vec<&String> = words.iter().filter(|l| l.starts_with("Warning")).collect();
        assert_eq!(
            warned,
            ["Warning, kv8: K/V q8_0-f16: converted to f16."],
            "{words:?}"
        );
    }

    #[test]
    fn synthetic_quality_is_never_a_figure_and_requantized_rows_are_marked() {
        let mut rows = vec![row("f16", 50.0, 0.0), row("q4_0", 140.0, 0.05)];
        rows[1].quantization = "Q4_0 ← Q8_0".into();
        rows[1].requantized_from = Some("Q8_0".into());
        let md = markdown(&comparison(rows.clone()), true);
        assert!(md.contains("Q4_0 ← Q8_0"), "{md}");
        assert!(md.contains("quantized from an already quantized"), "{md}");
        for r in &mut rows {
            r.synthetic = true;
        }
        let md = markdown(&comparison(rows), true);
        let body: Vec<&str> = md
            .lines()
            .filter(|l| l.starts_with("| f16") || l.starts_with("| q4_0"))
            .collect();
        assert_eq!(body.len(), 2, "{md}");
        for line in body {
            assert_eq!(line.matches("n/m").count(), 6, "{line}");
            assert!(!line.contains("10.00"), "{line}");
        }
        assert!(md.contains("not meaningful"), "{md}");
    }

    #[test]
    fn the_default_table_fits_120_columns_and_md_plus_has_every_column() {
        let mut rows = vec![
            row("llama3-8b-f16.gguf", 21.3, 0.0),
            row("llama3-8b-Q8_0", 38.1, 0.00135),
            row("llama3-8b-Q4_K_M", 61.9, 0.0313),
            row("llama3-8b-Q2_K", 77.4, 0.445),
        ];
        for r in &mut rows {
            r.quality.kld_uncertainty = Some(0.00024);
            r.pp_tok_per_s = Some(1234.5);
            r.pp_tok_per_s_sd = Some(12.3);
        }
        mark_pareto(&mut rows, None);
        let c = comparison(rows);
        let narrow = markdown(&c, false);
        let table: Vec<&str> = narrow.lines().filter(|l| l.starts_with('|')).collect();
        assert_eq!(table.len(), 6, "{narrow}");
        for line in &table {
            assert!(
                line.chars().count() <= 120,
                "{} columns: {line}",
                line.chars().count()
            );
        }
        assert!(
            !table[0].contains("MBU") && !table[0].contains("KLD p99"),
            "{}",
            table[0]
        );
        assert!(narrow.contains("-o md+: every column"), "{narrow}");
        let wide = markdown(&c, true);
        let header = wide.lines().next().unwrap();
        for h in [
            "bpw",
            "PPL",
            "KLD p99",
            "KLD max",
            "Δp mean %",
            "ceiling t/s",
            "MBU %",
            "$/1M tok",
        ] {
            assert!(header.contains(h), "{h} in {header}");
        }
    }

    #[test]
    fn every_default_table_fits_120_columns_at_its_widest() {
        // The widest realistic content: long file names quantized here from a quantized
        // source (label and quant "X ← Y"), tensors fallen back, one round (n=1 speeds), pp in
        // the thousands, KLD with its error. The table was 141 columns.
        let names = [
            "SmolLM2-135M-Instruct-Q4_1.gguf",
            "SmolLM2-135M-Instruct-Q4_1-Q8_0 ← Q4_1",
            "SmolLM2-135M-Instruct-Q4_1-Q4_K_M ← Q4_1",
            "SmolLM2-135M-Instruct-Q4_1-Q5_K_M ← Q4_1",
            "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf ngl=99 ctk=q8_0 ctv=q8_0 fa=on #2",
        ];
        let mut rows: Vec<CompareRow> = names
            .iter()
            .enumerate()
            .map(|(i, n)| row(n, 12.345 + i as f64, if i == 0 { 0.0 } else { 0.00135 }))
            .collect();
        for (i, r) in rows.iter_mut().enumerate() {
            r.quantization = if i == 0 {
                "Q4_1".into()
            } else {
                "Q5_K_M ← Q4_K_M".into()
            };
            r.quality.kld_uncertainty = Some(0.00024);
            r.pp_tok_per_s = Some(12345.67);
            r.pp_tok_per_s_sd = None;
            r.tg_tok_per_s_sd = None;
            r.bits_per_weight = 16.01;
            r.fallback = (i > 0).then_some(crate::compare::quantize::Fallback {
                tensors: 180,
                of: 272,
            });
        }
        mark_pareto(&mut rows, None);
        let narrow = markdown(&comparison(rows.clone()), false);
        let table: Vec<&str> = narrow.lines().filter(|l| l.starts_with('|')).collect();
        assert_eq!(table.len(), 7, "{narrow}");
        for line in &table {
            let w = unicode_width::UnicodeWidthStr::width(*line);
            assert!(w <= 120, "{w} columns: {line}");
        }
        assert!(table[0].contains("fell back"), "{}", table[0]);
        assert!(table[0].contains("bpw"), "{}", table[0]);
        assert!(narrow.contains(" 66% |"), "{narrow}");
        assert!(narrow.contains("(ref)"), "{narrow}");
        // The whole names and every column are in md+ and the CSV.
        let wide = markdown(&comparison(rows.clone()), true);
        assert!(wide.contains(names[4]), "{wide}");
        assert!(wide.contains("180/272 (66%)"), "{wide}");
        let csv = csv(&comparison(rows)).unwrap();
        let header = csv.lines().next().unwrap();
        assert!(header.contains("fallback.tensors"), "{csv}");
        // The reference (no fallback count) has the same columns as the others.
        let n = header.split(',').count();
        assert!(csv.lines().all(|l| l.split(',').count() == n), "{csv}");
    }

    #[test]
    fn equal_candidates_do_not_dominate_each_other() {
        let mut rows = vec![row("a", 50.0, 0.01), row("b", 50.0, 0.01)];
        mark_pareto(&mut rows, None);
        assert!(rows.iter().all(|r| r.pareto));
    }

    #[test]
    fn markdown_and_csv_carry_every_candidate() {
        let mut rows = vec![row("f16", 50.0, 0.0), row("q4_0", 140.0, 0.05)];
        mark_pareto(&mut rows, None);
        let c = comparison(rows);
        let md = markdown(&c, true);
        assert!(md.contains("| f16 (reference)"), "{md}");
        // PPL 10 ± 0.1 and KLD without an error: as precise as the sample, no more.
        assert!(md.contains("| 10.00 ± 0.10 |"), "{md}");
        assert!(md.contains(" 0.05 |"), "{md}");
        assert!(!md.contains("0.050000"), "{md}");
        assert!(md.contains("Pareto front"), "{md}");
        let csv = csv(&c).unwrap();
        let mut lines = csv.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        assert!(header.contains(&"quality.kld_mean"));
        assert!(header.contains(&"tg_tok_per_s"));
        assert_eq!(lines.count(), 2);
    }
}
