//! The answer to "which one should I use": one line per candidate in words (its decode speed
//! against the reference, called real only beyond the noise; its quality loss named by a band
//! anchored to llama.cpp's published Llama 3 8B table), and, with a quality budget
//! (`--max-kld`, `--min-same-top`), the fastest candidate within it.

use super::report::{kl, pace, speed_threshold, CompareRow, Control, Pace, Speed};

/// The quality a user will give up at most, from `--max-kld` and `--min-same-top`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Budget {
    /// Mean KL divergence to the reference, nats.
    pub max_kld: Option<f64>,
    /// Share of positions whose most likely token is the reference's, in %.
    pub min_same_top_pct: Option<f64>,
}

impl Budget {
    fn given(&self) -> bool {
        self.max_kld.is_some() || self.min_same_top_pct.is_some()
    }

    fn words(&self) -> String {
        let mut parts = Vec::new();
        if let Some(k) = self.max_kld {
            parts.push(format!("KLD ≤ {}", crate::fmt::sig(k, 2)));
        }
        if let Some(p) = self.min_same_top_pct {
            parts.push(format!("same top token ≥ {}%", crate::fmt::sig(p, 3)));
        }
        parts.join(" and ")
    }

    fn admits(&self, row: &CompareRow) -> bool {
        let kld = kl(row);
        // The reference's own positions agree with themselves.
        let same_top = row
            .quality
            .same_top_pct
            .unwrap_or(if row.reference { 100.0 } else { 0.0 });
        self.max_kld.is_none_or(|m| kld <= m) && self.min_same_top_pct.is_none_or(|m| same_top >= m)
    }
}

/// How much quality a mean KL divergence gives up, in bands whose edges sit between the types
/// of llama.cpp's own scoreboard (`tools/perplexity/README.md` of the linked llama.cpp,
/// "LLaMA 3 8b Scoreboard", KLD against FP16 on Wikitext-2): Q8_0 0.0014; Q6_K 0.0055, Q5_K_M
/// 0.011; Q5_0 0.022, Q4_K_M 0.031, Q4_K_S 0.043; Q4_0 0.072, Q3_K_M 0.10; Q3_K_S 0.23, Q2_K
/// 0.45. A different model or text moves the figures, so the band is a guide, named as one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Loss {
    Negligible,
    Small,
    Moderate,
    Large,
    Severe,
}

impl Loss {
    /// The band's upper edges, in nats.
    pub(crate) const EDGES: [f64; 4] = [0.002, 0.012, 0.05, 0.15];

    pub(crate) fn of(kld_mean: f64) -> Self {
        match kld_mean {
            k if k < Self::EDGES[0] => Self::Negligible,
            k if k < Self::EDGES[1] => Self::Small,
            k if k < Self::EDGES[2] => Self::Moderate,
            k if k < Self::EDGES[3] => Self::Large,
            _ => Self::Severe,
        }
    }

    /// Each band in words, and the published types that fall in it.
    const WORDS: [(&'static str, &'static str); 5] = [
        ("a negligible quality loss", "Q8_0 0.0014"),
        ("a small quality loss", "Q6_K 0.0055, Q5_K_M 0.011"),
        ("a moderate quality loss", "Q5_0 0.022, Q4_K_M 0.031"),
        ("a large quality loss", "Q4_0 0.072, Q3_K_M 0.10"),
        ("a severe quality loss", "Q3_K_S 0.23, Q2_K 0.45"),
    ];

    pub(crate) fn words(self) -> &'static str {
        Self::WORDS[self as usize].0
    }

    fn like(self) -> &'static str {
        Self::WORDS[self as usize].1
    }
}

/// The advice lines: the budget's pick first (when a budget is given), then one line per
/// candidate other than the reference, front first.
pub(crate) fn lines(
    rows: &[CompareRow],
    control: Option<&Control>,
    budget: &Budget,
) -> Vec<String> {
    let Some(reference) = rows.iter().find(|r| r.reference) else {
        return Vec::new();
    };
    let systematic = control.map_or(0.0, Control::systematic);
    let mut out = Vec::new();
    if budget.given() {
        out.push(pick(rows, systematic, budget));
    }
    let mut others: Vec<&CompareRow> = rows.iter().filter(|r| !r.reference).collect();
    // Front first, keeping the table's order within each group.
    others.sort_by_key(|r| !r.pareto);
    for row in others {
        out.push(candidate_line(row, reference, systematic));
    }
    out
}

/// "Q4_0: tg +21% against the reference (beyond …), KLD 0.35 nats, same top token 65%: a
/// severe quality loss (…)."
fn candidate_line(row: &CompareRow, reference: &CompareRow, systematic: f64) -> String {
    let speed = speed_words(row, reference, systematic);
    let quality = if row.synthetic {
        "quality not judged (synthetic weights: random weights have no quality to lose)".to_string()
    } else {
        match row.quality.kld_mean {
            Some(kld) => {
                let loss = Loss::of(kld);
                let same_top = row
                    .quality
                    .same_top_pct
                    .map(|p| format!(", same top token {p:.0}%"))
                    .unwrap_or_default();
                // A file mostly of other types than its name is not held to that type's
                // published figures.
                let like = if row.mostly_fallback() {
                    String::new()
                } else {
                    format!(" (llama.cpp's Llama 3 8B table: {})", loss.like())
                };
                format!(
                    "KLD {} nats{same_top}: {}{like}",
                    crate::fmt::sig(kld, 2),
                    loss.words(),
                )
            }
            None => "quality not measured".to_string(),
        }
    };
    let front = if row.tg_tok_per_s.is_some() && row.pareto {
        " [front]"
    } else {
        ""
    };
    let requantized = match &row.requantized_from {
        Some(from) if row.bits_per_weight >= reference.bits_per_weight => format!(
            "; made from a {from} file, which has fewer bits: it holds no more than those \
             weights, so only its speed means something"
        ),
        Some(from) => format!(
            "; made from a {from} file, so measured against those weights, not the original ones"
        ),
        None => String::new(),
    };
    let fallback = match row.fallback {
        Some(f) if f.tensors > 0 => {
            let named = row.quantization.split(" ← ").next().unwrap_or_default();
            let more = if row.bits_per_weight > reference.bits_per_weight {
                format!(
                    ", more than the reference's {:.2}",
                    reference.bits_per_weight
                )
            } else {
                String::new()
            };
            let (how, published) = if row.mostly_fallback() {
                (
                    "mostly not",
                    format!(": published {named} figures do not apply to it"),
                )
            } else {
                ("partly not", String::new())
            };
            format!(
                "; {} of {} tensors fell back from {named} to other types, so it is {how} \
                 {named} ({:.2} bits per weight{more}){published}",
                f.tensors, f.of, row.bits_per_weight,
            )
        }
        _ => String::new(),
    };
    format!(
        "{}{front}: {speed}, {quality}{requantized}{fallback}.",
        row.label
    )
}

/// Decode (tg) and prefill (pp) speed against the reference, each with whether the difference
/// is beyond the rounds' spread and the self-copy control's systematic error, and which speed
/// it is: "as fast" is never said of decoding alone when prefill differs.
fn speed_words(row: &CompareRow, reference: &CompareRow, systematic: f64) -> String {
    let control = if systematic > 0.0 {
        format!(" and the control's {:.1}%", systematic * 100.0)
    } else {
        String::new()
    };
    let mut parts = Vec::new();
    for which in [Speed::Tg, Speed::Pp] {
        let (Some(s), Some(base)) = (row.speed(which).0, reference.speed(which).0) else {
            continue;
        };
        let Some(change) = crate::metrics::ratio(s - base, base) else {
            continue;
        };
        let pct = format!("{} {:+.0}%", which.name(), change * 100.0);
        let at = which.at();
        parts.push(match pace(row, reference, which, systematic) {
            Some(Pace::Faster) => {
                format!("{pct} (beyond the rounds' spread{control}: faster {at})")
            }
            Some(Pace::Slower) => {
                format!("{pct} (beyond the rounds' spread{control}: slower {at})")
            }
            Some(Pace::AsFast) => {
                format!("{pct} (within the rounds' spread{control}: as fast {at})")
            }
            Some(Pace::NotJudged) | None => format!("{pct} (one round: no spread, not judged)"),
        });
    }
    if parts.is_empty() {
        return "speed not measured".to_string();
    }
    format!("{} against the reference", parts.join(", "))
}

/// The candidate to use within the budget: the fastest, unless another within it is as fast
/// within the noise and closer to the reference (then that one, and the fastest is named
/// beside it).
fn pick(rows: &[CompareRow], systematic: f64, budget: &Budget) -> String {
    let what = budget.words();
    if rows.iter().any(|r| r.synthetic) {
        return format!(
            "Within {what}: not judged, the weights are synthetic (random weights have no \
             quality to lose)."
        );
    }
    let within: Vec<&CompareRow> = rows.iter().filter(|r| budget.admits(r)).collect();
    let speed = |r: &CompareRow| r.tg_tok_per_s.unwrap_or(0.0);
    let Some(fastest) = within
        .iter()
        .copied()
        .filter(|r| r.tg_tok_per_s.is_some())
        .max_by(|a, b| speed(a).total_cmp(&speed(b)))
    else {
        return if within.is_empty() {
            format!("Within {what}: no candidate.")
        } else {
            format!(
                "Within {what}: {}; no speed was measured to choose among them.",
                within
                    .iter()
                    .map(|r| r.label.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
    };
    // As fast as the fastest within the noise: of those, the closest to the reference.
    let chosen = within
        .iter()
        .copied()
        .filter(|r| {
            r.label == fastest.label
                || speed_threshold(r, fastest, systematic)
                    .is_some_and(|t| speed(fastest) - speed(r) <= t)
        })
        .min_by(|a, b| kl(a).total_cmp(&kl(b)))
        .unwrap_or(fastest);
    let mut line = format!(
        "Within {what}: use {} ({:.1} tok/s, KLD {})",
        chosen.label,
        speed(chosen),
        crate::fmt::sig(kl(chosen), 2)
    );
    if chosen.label != fastest.label {
        line.push_str(&format!(
            "; {} measured faster ({:.1} tok/s) but within the noise and further from the \
             reference",
            fastest.label,
            speed(fastest)
        ));
    }
    // Prefill counts: a candidate within the budget that reads prompts faster is named.
    let prefills_faster = within
        .iter()
        .copied()
        .filter(|r| pace(r, chosen, Speed::Pp, systematic) == Some(Pace::Faster))
        .max_by(|a, b| {
            a.pp_tok_per_s
                .unwrap_or(0.0)
                .total_cmp(&b.pp_tok_per_s.unwrap_or(0.0))
        });
    if let Some(p) = prefills_faster {
        line.push_str(&format!(
            "; {} prefills faster ({:.1} vs {:.1} tok/s): for long prompts, weigh that",
            p.label,
            p.pp_tok_per_s.unwrap_or(0.0),
            chosen.pp_tok_per_s.unwrap_or(0.0)
        ));
    }
    if fastest.tg_tok_per_s_sd.is_none() {
        line.push_str("; one round has no spread, so ties are not judged (rerun with -r 3)");
    }
    let outside = rows.len() - within.len();
    line.push_str(&format!(
        "; {outside} candidate{} outside the budget.",
        if outside == 1 { "" } else { "s" }
    ));
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::report::tests::row;

    fn with(mut r: CompareRow, sd: f64, same_top: f64) -> CompareRow {
        r.tg_tok_per_s_sd = Some(sd);
        r.quality.same_top_pct = Some(same_top);
        r
    }

    fn table() -> Vec<CompareRow> {
        let mut reference = with(row("F16", 20.0, 0.0), 0.2, 100.0);
        reference.reference = true;
        reference.quality.kld_mean = None;
        vec![
            reference,
            with(row("Q8_0", 36.0, 0.0013), 0.3, 97.7),
            with(row("Q4_K_M", 55.0, 0.031), 0.5, 91.9),
            with(row("Q5_K_M", 54.8, 0.011), 0.5, 96.0),
            with(row("Q2_K", 70.0, 0.45), 0.5, 71.1),
        ]
    }

    #[test]
    fn bands_follow_llama_cpps_table() {
        // The published Llama 3 8B figures land in the band the words give them.
        for (kld, band) in [
            (0.000551, Loss::Negligible),
            (0.001355, Loss::Negligible),
            (0.005452, Loss::Small),
            (0.010762, Loss::Small),
            (0.022239, Loss::Moderate),
            (0.031273, Loss::Moderate),
            (0.043136, Loss::Moderate),
            (0.071940, Loss::Large),
            (0.101913, Loss::Large),
            (0.228217, Loss::Severe),
            (0.445132, Loss::Severe),
        ] {
            assert_eq!(Loss::of(kld), band, "{kld}");
        }
    }

    #[test]
    fn one_line_per_candidate_with_speed_and_loss() {
        let lines = lines(&table(), None, &Budget::default());
        assert_eq!(lines.len(), 4, "{lines:#?}");
        let q2 = lines.iter().find(|l| l.starts_with("Q2_K")).unwrap();
        assert!(
            q2.contains(
                "tg +250% (beyond the rounds' spread: faster at decoding), pp +250% (beyond"
            ),
            "{q2}"
        );
        assert!(q2.contains(") against the reference"), "{q2}");
        assert!(q2.contains("KLD 0.45 nats, same top token 71%"), "{q2}");
        assert!(q2.contains("a severe quality loss"), "{q2}");
        let q8 = lines.iter().find(|l| l.starts_with("Q8_0")).unwrap();
        assert!(q8.contains("a negligible quality loss"), "{q8}");
    }

    #[test]
    fn the_budget_names_the_fastest_within_it_and_the_closer_tie() {
        let budget = Budget {
            max_kld: Some(0.05),
            min_same_top_pct: Some(90.0),
        };
        let lines = lines(&table(), None, &budget);
        let first = &lines[0];
        // Q5_K_M is 0.2 tok/s slower than Q4_K_M, inside the two sds (1.0), and closer.
        assert!(
            first.starts_with(
                "Within KLD ≤ 0.05 and same top token ≥ 90%: use Q5_K_M (54.8 tok/s, KLD 0.011)"
            ),
            "{first}"
        );
        assert!(
            first.contains("Q4_K_M measured faster (55.0 tok/s) but within the noise"),
            "{first}"
        );
        assert!(first.contains("1 candidate outside the budget"), "{first}");
        // A tighter budget leaves Q8_0.
        let tight = Budget {
            max_kld: Some(0.005),
            min_same_top_pct: None,
        };
        let first = &super::lines(&table(), None, &tight)[0];
        assert!(first.contains("use Q8_0 (36.0 tok/s"), "{first}");
        assert!(!first.contains("measured faster"), "{first}");
    }

    #[test]
    fn within_the_noise_is_called_as_fast() {
        let mut t = table();
        t[1].tg_tok_per_s = Some(20.2);
        let lines = lines(&t, None, &Budget::default());
        let q8 = lines.iter().find(|l| l.starts_with("Q8_0")).unwrap();
        // As fast at decoding, but its prefill (pp 288 vs 160) is faster: both are said.
        assert!(
            q8.contains("tg +1% (within the rounds' spread: as fast at decoding), pp +80% (beyond the rounds' spread: faster at prefill)"),
            "{q8}"
        );
        let control = Control {
            reference_tg_tok_per_s: 20.0,
            copy_tg_tok_per_s: 20.5,
        };
        let lines = super::lines(&table(), Some(&control), &Budget::default());
        assert!(lines[0].contains("and the control's 2.5%"), "{}", lines[0]);
    }

    #[test]
    fn as_fast_at_decoding_is_not_as_fast_when_prefill_is_slower() {
        // The case: a Q8_0 decoding as fast as the Q4_1 (within the spread) but
        // prefilling at 116 against 220 tok/s. It must not be called "as fast", and being
        // closer to the reference must not make it dominate the Q4_1.
        let speeds = |mut r: CompareRow, pp: f64| {
            r.pp_tok_per_s = Some(pp);
            r.pp_tok_per_s_sd = Some(2.0);
            r
        };
        let mut f16 = speeds(with(row("f16", 20.0, 0.0), 0.5, 100.0), 90.0);
        f16.reference = true;
        f16.quality.kld_mean = None;
        let q4 = speeds(with(row("q4_1", 40.0, 0.03), 0.5, 93.0), 220.0);
        let q8 = speeds(with(row("q8_0", 40.3, 0.0013), 0.5, 98.0), 116.0);
        let mut rows = vec![f16, q4.clone(), q8.clone()];
        crate::compare::report::mark_pareto(&mut rows, None);
        assert!(rows[1].pareto && rows[2].pareto, "{rows:#?}");
        // Against the Q4_1 as the reference, the words name both speeds.
        let mut reference = q4.clone();
        reference.reference = true;
        reference.quality.kld_mean = None;
        let words = lines(&[reference, q8], None, &Budget::default());
        let line = words.iter().find(|l| l.starts_with("q8_0")).unwrap();
        assert!(line.contains("as fast at decoding"), "{line}");
        assert!(
            line.contains("pp -47% (beyond the rounds' spread: slower at prefill)"),
            "{line}"
        );
        // A budget that picks q8_0 (as fast at decoding, closer) names the faster prefill.
        let budget = Budget {
            max_kld: Some(0.05),
            min_same_top_pct: None,
        };
        let first = &super::lines(&rows, None, &budget)[0];
        assert!(first.contains("use q8_0"), "{first}");
        assert!(
            first.contains("q4_1 prefills faster (220.0 vs 116.0 tok/s)"),
            "{first}"
        );
    }

    #[test]
    fn a_file_mostly_of_fallback_types_is_not_held_to_its_named_type() {
        // The case: "Q4_K_M ← Q4_1" with 180 of 272 tensors fallen back, 6.17 bits
        // per weight against the source's 5.74.
        let mut reference = with(row("q4_1", 40.0, 0.0), 0.5, 100.0);
        reference.reference = true;
        reference.quality.kld_mean = None;
        reference.bits_per_weight = 5.74;
        let mut k = with(row("m-Q4_K_M ← Q4_1", 38.0, 0.03), 0.5, 93.0);
        k.quantization = "Q4_K_M ← Q4_1".into();
        k.requantized_from = Some("Q4_1".into());
        k.bits_per_weight = 6.17;
        k.fallback = Some(crate::compare::quantize::Fallback {
            tensors: 180,
            of: 272,
        });
        let lines = lines(&[reference, k.clone()], None, &Budget::default());
        let line = &lines[0];
        assert!(
            line.contains("180 of 272 tensors fell back from Q4_K_M to other types, so it is mostly not Q4_K_M (6.17 bits per weight, more than the reference's 5.74): published Q4_K_M figures do not apply to it"),
            "{line}"
        );
        assert!(!line.contains("Llama 3 8B table"), "{line}");
        // A few fallen-back tensors keep the published comparison and say "partly".
        k.fallback = Some(crate::compare::quantize::Fallback {
            tensors: 2,
            of: 272,
        });
        let mut reference = with(row("q4_1", 40.0, 0.0), 0.5, 100.0);
        reference.reference = true;
        reference.bits_per_weight = 5.74;
        let lines = super::lines(&[reference, k], None, &Budget::default());
        assert!(lines[0].contains("partly not Q4_K_M"), "{}", lines[0]);
        assert!(lines[0].contains("Llama 3 8B table"), "{}", lines[0]);
    }

    #[test]
    fn synthetic_and_requantized_rows_say_so() {
        let mut t = table();
        t[2].requantized_from = Some("Q6_K".into());
        t[2].bits_per_weight = 4.9;
        t[0].bits_per_weight = 6.6;
        t[1].requantized_from = Some("Q6_K".into());
        t[1].bits_per_weight = 8.5;
        let lines = lines(&t, None, &Budget::default());
        let q4 = lines.iter().find(|l| l.starts_with("Q4_K_M")).unwrap();
        assert!(
            q4.contains("made from a Q6_K file, so measured against"),
            "{q4}"
        );
        let q8 = lines.iter().find(|l| l.starts_with("Q8_0")).unwrap();
        assert!(q8.contains("only its speed means something"), "{q8}");
        for r in &mut t {
            r.synthetic = true;
        }
        let budget = Budget {
            max_kld: Some(0.05),
            min_same_top_pct: None,
        };
        let lines = super::lines(&t, None, &budget);
        assert!(
            lines[0].contains("not judged, the weights are synthetic"),
            "{}",
            lines[0]
        );
        assert!(
            lines[1..].iter().all(|l| l.contains("quality not judged")),
            "{lines:#?}"
        );
        assert!(lines.iter().all(|l| !l.contains("nats")), "{lines:#?}");
    }
}
