//! A load test's results: per-request records reduced to the serving table (TTFT, TPOT, ITL,
//! E2EL: mean, p50, p90, p99), throughput in and out, goodput at the SLOs, errors by kind; as
//! markdown, CSV or JSON. Definitions: docs/metrics.md, "Load tests".

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::metrics::remote::VllmRecord;
use crate::metrics::{ms, LatencyStats};
use crate::remote::{RequestError, RequestRecord};

/// Service-level objectives; a request meets them when every one set holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub(crate) struct Slo {
    pub ttft: Option<Duration>,
    pub tpot: Option<Duration>,
    pub e2e: Option<Duration>,
}

impl Slo {
    pub(crate) fn is_empty(&self) -> bool {
        self.ttft.is_none() && self.tpot.is_none() && self.e2e.is_none()
    }

    /// On tokscope's figures: TTFT, TPOT and E2E each at or under its target; a request
    /// without a TPOT (one output token) is judged on the others.
    pub(crate) fn met_by(&self, r: &RequestRecord) -> bool {
        self.ttft.is_none_or(|t| r.ttft <= t)
            && self.tpot.is_none_or(|t| r.tpot.is_none_or(|p| p <= t))
            && self.e2e.is_none_or(|t| r.e2e <= t)
    }

    /// vLLM's goodput rule on vLLM's figures (`calculate_metrics` in
    /// `vllm/benchmarks/serve.py`): each target at or under its SLO, a TPOT of 0 for a request
    /// of at most one output token.
    pub(crate) fn met_by_vllm(&self, r: &VllmRecord) -> bool {
        self.ttft.is_none_or(|t| r.ttft <= t)
            && self.tpot.is_none_or(|t| r.tpot <= t)
            && self.e2e.is_none_or(|t| r.e2e <= t)
    }

    /// Parses `ttft=500ms,tpot=50ms,e2e=10s`.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let mut slo = Slo::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("'{part}': expected KEY=DURATION, e.g. ttft=500ms"))?;
            let d = parse_duration(value.trim())
                .ok_or_else(|| format!("'{value}': expected a duration like 500ms or 2s"))?;
            match key.trim() {
                "ttft" => slo.ttft = Some(d),
                "tpot" => slo.tpot = Some(d),
                "e2e" | "e2el" => slo.e2e = Some(d),
                other => return Err(format!("unknown SLO '{other}' (ttft, tpot, e2e)")),
            }
        }
        if slo.is_empty() {
            return Err("no target given (e.g. ttft=500ms,tpot=50ms)".into());
        }
        Ok(slo)
    }

    pub(crate) fn describe(&self) -> String {
        self.describe_with("")
    }

    /// "TTFT p99 ≤ 500 ms and TPOT p99 ≤ 50 ms".
    pub(crate) fn describe_p99(&self) -> String {
        self.describe_with(" p99")
    }

    fn describe_with(&self, suffix: &str) -> String {
        let mut parts = Vec::new();
        for (name, target) in [("TTFT", self.ttft), ("TPOT", self.tpot), ("E2E", self.e2e)] {
            if let Some(t) = target {
                parts.push(format!(
                    "{name}{suffix} ≤ {} ms",
                    crate::fmt::opt(Some(ms(t)), 0)
                ));
            }
        }
        parts.join(" and ")
    }
}

/// `500ms`, `2s`, `1.5s`, `250us`.
pub(crate) fn parse_duration(s: &str) -> Option<Duration> {
    let (number, scale) = [("ms", 1e-3), ("us", 1e-6), ("s", 1.0)]
        .into_iter()
        .find_map(|(unit, scale)| Some((s.strip_suffix(unit)?, scale)))?;
    let v: f64 = number.trim().parse().ok()?;
    (v.is_finite() && v >= 0.0 && v * scale < 1e6).then(|| Duration::from_secs_f64(v * scale))
}

/// The reduced result of one load level.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct LoadSummary {
    /// "rate=4/s, burstiness 1" or "concurrency=2".
    pub level: String,
    pub completed: usize,
    pub failed: usize,
    pub errors_by_kind: BTreeMap<String, usize>,
    /// The first error message of each kind, so a failed request says why.
    pub first_error_by_kind: BTreeMap<String, String>,
    pub duration_s: f64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Sum of llama-server's `timings.prompt_n`, when every request reported it.
    pub server_prompt_n: Option<u64>,
    pub request_per_s: Option<f64>,
    pub input_tok_per_s: Option<f64>,
    pub output_tok_per_s: Option<f64>,
    /// Mean output tok/s of one request (output tokens / E2E), the per-user speed.
    pub per_user_tok_per_s: Option<f64>,
    /// Request sent → first chunk on any channel (a reasoning chunk included).
    pub ttft: Option<LatencyStats>,
    /// Request sent → first answer chunk (AIPerf's `time_to_first_output_token`, TTFO), over
    /// the requests that had an answer; equal to TTFT without reasoning.
    pub ttfo: Option<LatencyStats>,
    pub tpot: Option<LatencyStats>,
    pub itl: Option<LatencyStats>,
    pub e2el: Option<LatencyStats>,
    /// Reasoning tokens of the completed requests (AIPerf's `total_reasoning_tokens`), part of
    /// `completion_tokens`.
    pub total_reasoning_tokens: u64,
    /// Completed requests whose stream ended while the model still thought (no answer).
    pub ended_while_thinking: usize,
    pub slo: Option<Slo>,
    pub good_requests: Option<usize>,
    /// Requests per second meeting every SLO on tokscope's figures.
    pub goodput_req_per_s: Option<f64>,
    /// The level under vLLM's benchmark's definitions (`VllmFigures`), over the requests
    /// that had them (every completed one, against a server that sends `choices`).
    pub vllm_convention: Option<VllmLevel>,
    /// What the server's own Prometheus metrics say of the level (`None`: the server has no
    /// `/metrics`, or scraping was off).
    pub server_metrics: Option<super::scrape::ServerMetrics>,
    /// The CPU time (user + system, every thread) the load process itself used over the
    /// level's duration: its streams, scrapes and progress line (`with_client_cpu`).
    pub client_cpu_s: Option<f64>,
    /// `client_cpu_s` ÷ the requests sent (completed and failed), in ms.
    pub client_cpu_ms_per_request: Option<f64>,
    /// `client_cpu_s` ÷ `duration_s`: the share of one core the client kept busy (0.05 = 5%;
    /// up to `client_threads`).
    pub client_cpu_core_share: Option<f64>,
    /// The client's runtime threads, which read the streams (`load::client_threads`).
    pub client_threads: Option<u32>,
}

/// A level's figures under vLLM's benchmark's definitions (`VllmFigures`): TTFT at the first
/// chunk with a choice, ITL one undivided gap per chunk, E2E at the last chunk with a choice,
/// TPOT (E2E − TTFT) ÷ (N − 1); percentiles interpolated as numpy's; goodput by vLLM's rule
/// on these figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct VllmLevel {
    pub requests: usize,
    pub ttft: Option<LatencyStats>,
    pub tpot: Option<LatencyStats>,
    pub itl: Option<LatencyStats>,
    pub e2el: Option<LatencyStats>,
    pub good_requests: Option<usize>,
    pub goodput_req_per_s: Option<f64>,
}

fn vllm_level(records: &[RequestRecord], secs: f64, slo: Option<Slo>) -> Option<VllmLevel> {
    let v: Vec<&VllmRecord> = records.iter().filter_map(|r| r.vllm.as_ref()).collect();
    if v.is_empty() {
        return None;
    }
    let stats = |f: &dyn Fn(&VllmRecord) -> Option<Duration>| {
        let values: Vec<Duration> = v.iter().filter_map(|r| f(r)).collect();
        LatencyStats::from_durations_interpolated(&values)
    };
    let itls: Vec<Duration> = v.iter().flat_map(|r| r.itl.iter().copied()).collect();
    let good = slo.map(|s| v.iter().filter(|r| s.met_by_vllm(r)).count());
    Some(VllmLevel {
        requests: v.len(),
        ttft: stats(&|r| Some(r.ttft)),
        // vLLM's TPOT table holds only requests of more than one output token.
        tpot: stats(&|r| (r.output_tokens > 1).then_some(r.tpot)),
        itl: LatencyStats::from_durations_interpolated(&itls),
        e2el: stats(&|r| Some(r.e2e)),
        good_requests: good,
        goodput_req_per_s: good.and_then(|g| per_s(g as f64, secs)),
    })
}

impl LoadSummary {
    /// Adds the client's own CPU time over the level (`None`: it could not be read), spent
    /// on `threads` runtime threads.
    pub(crate) fn with_client_cpu(mut self, cpu: Option<Duration>, threads: u32) -> Self {
        self.client_threads = Some(threads);
        let Some(cpu) = cpu else { return self };
        let secs = cpu.as_secs_f64();
        let sent = self.completed + self.failed;
        self.client_cpu_s = Some(secs);
        self.client_cpu_ms_per_request = (sent > 0).then(|| secs * 1e3 / sent as f64);
        self.client_cpu_core_share = per_s(secs, self.duration_s);
        self
    }

    /// The level's one-line progress report.
    pub(crate) fn line(&self) -> String {
        format!(
            "{}: {} ok, {} failed, {} req/s, {} out tok/s, goodput {} req/s",
            self.level,
            self.completed,
            self.failed,
            crate::fmt::opt(self.request_per_s, 2),
            crate::fmt::opt(self.output_tok_per_s, 1),
            crate::fmt::opt(self.goodput_req_per_s, 2),
        )
    }
}

fn per_s(count: f64, secs: f64) -> Option<f64> {
    (secs > 0.0).then(|| count / secs)
}

/// Reduces the records of one level.
pub(crate) fn summarize(
    level: String,
    records: &[RequestRecord],
    errors: &[RequestError],
    duration: Duration,
    slo: Option<Slo>,
) -> LoadSummary {
    let secs = duration.as_secs_f64();
    let mut errors_by_kind = BTreeMap::new();
    let mut first_error_by_kind = BTreeMap::new();
    for e in errors {
        *errors_by_kind.entry(e.kind.clone()).or_insert(0) += 1;
        first_error_by_kind
            .entry(e.kind.clone())
            .or_insert_with(|| e.detail.clone());
    }
    let prompt_tokens = records.iter().map(|r| r.prompt_tokens).sum();
    let completion_tokens: u64 = records.iter().map(|r| r.completion_tokens).sum();
    let server_prompt_n = records
        .iter()
        .map(|r| r.server_prompt_n)
        .sum::<Option<u64>>()
        .filter(|_| !records.is_empty());
    let ttfts: Vec<Duration> = records.iter().map(|r| r.ttft).collect();
    let ttfos: Vec<Duration> = records.iter().filter_map(|r| r.ttfo).collect();
    let tpots: Vec<Duration> = records.iter().filter_map(|r| r.tpot).collect();
    let itls: Vec<Duration> = records.iter().flat_map(|r| r.itl.iter().copied()).collect();
    let e2es: Vec<Duration> = records.iter().map(|r| r.e2e).collect();
    let user_rates: Vec<f64> = records
        .iter()
        .filter(|r| !r.e2e.is_zero() && r.completion_tokens > 0)
        .map(|r| r.completion_tokens as f64 / r.e2e.as_secs_f64())
        .collect();
    let good = slo.map(|s| records.iter().filter(|r| s.met_by(r)).count());
    LoadSummary {
        level,
        completed: records.len(),
        failed: errors.len(),
        errors_by_kind,
        first_error_by_kind,
        duration_s: secs,
        prompt_tokens,
        completion_tokens,
        server_prompt_n,
        request_per_s: per_s(records.len() as f64, secs),
        input_tok_per_s: per_s(prompt_tokens as f64, secs),
        output_tok_per_s: per_s(completion_tokens as f64, secs),
        per_user_tok_per_s: (!user_rates.is_empty())
            .then(|| user_rates.iter().sum::<f64>() / user_rates.len() as f64),
        ttft: LatencyStats::from_durations(&ttfts),
        ttfo: LatencyStats::from_durations(&ttfos),
        total_reasoning_tokens: records.iter().map(|r| r.reasoning_tokens).sum(),
        ended_while_thinking: records.iter().filter(|r| r.ended_while_thinking).count(),
        tpot: LatencyStats::from_durations(&tpots),
        itl: LatencyStats::from_durations(&itls),
        e2el: LatencyStats::from_durations(&e2es),
        slo,
        good_requests: good,
        goodput_req_per_s: good.and_then(|g| per_s(g as f64, secs)),
        vllm_convention: vllm_level(records, secs, slo),
        ..LoadSummary::default()
    }
}

/// The serving table: one line per level, then each level's errors by kind.
pub(crate) fn markdown(rows: &[LoadSummary]) -> String {
    use crate::fmt::opt as f;
    use crate::report::{table, Align};
    let d = |x: &Option<LatencyStats>| {
        x.map_or("—".into(), |d| {
            format!(
                "{:.1} / {:.1} / {:.1} / {:.1}",
                d.mean_ms, d.p50_ms, d.p90_ms, d.p99_ms
            )
        })
    };
    /// Both tables' headers: the level, then right-aligned figures.
    fn headers<'a>(names: &[&'a str]) -> Vec<(&'a str, Align)> {
        let figures = names.iter().map(|n| (*n, Align::Right));
        std::iter::once(("level", Align::Left))
            .chain(figures)
            .collect()
    }
    let latencies = ["TTFT", "TPOT", "ITL", "E2EL"].map(|m| format!("{m} mean/p50/p90/p99 ms"));
    let latencies = latencies.each_ref().map(String::as_str);
    let main = [
        "ok",
        "err",
        "req/s",
        "in tok/s",
        "out tok/s",
        "user tok/s",
        "goodput req/s",
    ];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.level.clone(),
                r.completed.to_string(),
                r.failed.to_string(),
                f(r.request_per_s, 2),
                f(r.input_tok_per_s, 1),
                f(r.output_tok_per_s, 1),
                f(r.per_user_tok_per_s, 1),
                f(r.goodput_req_per_s, 2),
                d(&r.ttft),
                d(&r.tpot),
                d(&r.itl),
                d(&r.e2el),
            ]
        })
        .collect();
    let mut out = table(&headers(&[&main[..], &latencies[..]].concat()), &cells);
    let vllm: Vec<(&LoadSummary, &VllmLevel)> = rows
        .iter()
        .filter_map(|r| r.vllm_convention.as_ref().map(|v| (r, v)))
        .collect();
    if !vllm.is_empty() {
        out.push_str(
            "\nThe same requests under vLLM's benchmark's definitions (TTFT to the first chunk \
             with a choice, one undivided ITL per chunk, E2E to the last chunk with a choice, \
             percentiles interpolated; docs/metrics.md, \"Load tests\"):\n\n",
        );

        let cells: Vec<Vec<String>> = vllm
            .iter()
            .map(|(r, v)| {
                vec![
                    r.level.clone(),
                    v.requests.to_string(),
                    f(v.goodput_req_per_s, 2),
                    d(&v.ttft),
                    d(&v.tpot),
                    d(&v.itl),
                    d(&v.e2el),
                ]
            })
            .collect();
        let names = [&["requests", "goodput req/s"][..], &latencies[..]].concat();
        out.push_str(&table(&headers(&names), &cells));
    }
    let thinking: Vec<String> = rows
        .iter()
        .filter(|r| r.total_reasoning_tokens > 0)
        .map(|r| {
            format!(
                "reasoning at {}: TTFO (first answer token) mean/p50/p90/p99 {} ms · {} reasoning tokens of {} output tokens · {} requests ended while thinking",
                r.level,
                d(&r.ttfo),
                r.total_reasoning_tokens,
                r.completion_tokens,
                r.ended_while_thinking,
            )
        })
        .collect();
    if !thinking.is_empty() {
        out.push_str(&format!(
            "\nA reasoning model: TTFT above is the first token on any channel, thinking included; the answer's own start is TTFO (docs/metrics.md, \"Remote servers\"):\n{}\n",
            thinking.join("\n")
        ));
    }
    let cpu: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            Some(format!(
                "client CPU at {}: {} ms a request, {}% of one core ({} s of CPU over {} s, on {} runtime thread(s))",
                r.level,
                f(r.client_cpu_ms_per_request, 2),
                f(r.client_cpu_core_share.map(|s| s * 100.0), 1),
                f(Some(r.client_cpu_s?), 3),
                f(Some(r.duration_s), 2),
                r.client_threads.unwrap_or(1),
            ))
        })
        .collect();
    if !cpu.is_empty() {
        out.push_str(&format!(
            "\ntokscope's own cost (its CPU time over the level, user + system):\n{}\n",
            cpu.join("\n")
        ));
    }
    for r in rows.iter().filter(|r| client_saturated(r)) {
        let threads = r.client_threads.unwrap_or(1);
        out.push_str(&format!(
            "!! at {} the client kept its {threads} thread(s) {}% busy: past {:.0}% its streams are read late, so TPOT, ITL and tok/s there may be the client's limit, not the server's; run fewer streams per load process (several processes or machines for more)\n",
            r.level,
            f(r.client_cpu_core_share.map(|s| s * 100.0 / f64::from(threads)), 0),
            CLIENT_SATURATED_SHARE * 100.0,
        ));
    }
    for r in rows.iter().filter(|r| !r.errors_by_kind.is_empty()) {
        let kinds: Vec<String> = r
            .errors_by_kind
            .iter()
            .map(|(k, n)| match r.first_error_by_kind.get(k) {
                Some(first) => format!("{k} {n} (first: {first})"),
                None => format!("{k} {n}"),
            })
            .collect();
        out.push_str(&format!("\nerrors at {}: {}\n", r.level, kinds.join(", ")));
    }
    out
}

/// The share of its threads' time past which `load`'s client may fall behind the streams it
/// reads. Measured on the 2-core VM against a scripted server on the same machine: on one
/// thread (raw `benchmarks/stream-quiet-20261207.txt`) 64 streams × 2,000 tok/s kept it 48%
/// busy with every stream within 0.01% of the server's rate, 64 × 10,000 kept it 89% busy and
/// read 38% slow; on two (`benchmarks/stream-load-threads-20261207.txt`) 32% busy and within
/// 0.1%, then 69% busy and 25% slow (the server took the rest of the machine).
pub(crate) const CLIENT_SATURATED_SHARE: f64 = 0.6;

/// The client was busy enough at this level that its own reading may have set the pace.
fn client_saturated(r: &LoadSummary) -> bool {
    let threads = f64::from(r.client_threads.unwrap_or(1).max(1));
    r.client_cpu_core_share
        .is_some_and(|s| s >= CLIENT_SATURATED_SHARE * threads)
}

/// The table as CSV (empty cells for unknown figures).
pub(crate) fn csv(rows: &[LoadSummary]) -> String {
    let o = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.4}"));
    let lines: Vec<Vec<(String, String)>> = rows
        .iter()
        .map(|r| {
            let mut fields: Vec<(String, String)> = [
                ("level", r.level.clone()),
                ("completed", r.completed.to_string()),
                ("failed", r.failed.to_string()),
                ("duration_s", format!("{:.4}", r.duration_s)),
                ("prompt_tokens", r.prompt_tokens.to_string()),
                ("completion_tokens", r.completion_tokens.to_string()),
                (
                    "total_reasoning_tokens",
                    r.total_reasoning_tokens.to_string(),
                ),
                ("ended_while_thinking", r.ended_while_thinking.to_string()),
                ("req_per_s", o(r.request_per_s)),
                ("input_tok_per_s", o(r.input_tok_per_s)),
                ("output_tok_per_s", o(r.output_tok_per_s)),
                ("per_user_tok_per_s", o(r.per_user_tok_per_s)),
                ("goodput_req_per_s", o(r.goodput_req_per_s)),
                ("client_cpu_s", o(r.client_cpu_s)),
                ("client_cpu_ms_per_request", o(r.client_cpu_ms_per_request)),
                ("client_cpu_core_share", o(r.client_cpu_core_share)),
                (
                    "client_threads",
                    r.client_threads.map_or(String::new(), |n| n.to_string()),
                ),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
            let v = r.vllm_convention.as_ref();
            fields.push((
                "vllm_goodput_req_per_s".to_owned(),
                o(v.and_then(|v| v.goodput_req_per_s)),
            ));
            for (m, d) in [
                ("ttft", r.ttft),
                ("ttfo", r.ttfo),
                ("tpot", r.tpot),
                ("itl", r.itl),
                ("e2el", r.e2el),
                ("vllm_ttft", v.and_then(|v| v.ttft)),
                ("vllm_tpot", v.and_then(|v| v.tpot)),
                ("vllm_itl", v.and_then(|v| v.itl)),
                ("vllm_e2el", v.and_then(|v| v.e2el)),
            ] {
                for (s, v) in [
                    ("mean", d.map(|d| d.mean_ms)),
                    ("p50", d.map(|d| d.p50_ms)),
                    ("p90", d.map(|d| d.p90_ms)),
                    ("p99", d.map(|d| d.p99_ms)),
                ] {
                    fields.push((format!("{m}_{s}_ms"), o(v)));
                }
            }
            fields
        })
        .collect();
    crate::report::csv_lines(&lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(ttft_ms: u64, tpot_ms: u64, n: u64) -> RequestRecord {
        let ttft = Duration::from_millis(ttft_ms);
        let tpot = Duration::from_millis(tpot_ms);
        RequestRecord {
            ttft,
            ttfo: Some(ttft),
            reasoning_tokens: 0,
            ended_while_thinking: false,
            tpot: Some(tpot),
            itl: vec![tpot; (n - 1) as usize],
            chunk_gaps: vec![tpot; (n - 1) as usize],
            e2e: ttft + tpot * (n as u32 - 1),
            prompt_tokens: 10,
            completion_tokens: n,
            server_prompt_n: Some(10),
            vllm: None,
        }
    }

    #[test]
    fn vllm_goodput_is_judged_on_vllms_figures() {
        // Content arrives at 100 ms, but a role-only chunk came at 40 ms: vLLM's TTFT is 40.
        let mut r = rec(100, 10, 5);
        r.vllm = Some(VllmRecord {
            ttft: Duration::from_millis(40),
            itl: vec![Duration::from_millis(60), Duration::from_millis(40)],
            e2e: Duration::from_millis(140),
            tpot: Duration::from_millis(25),
            output_tokens: 5,
        });
        let one_token = RequestRecord {
            vllm: Some(VllmRecord {
                ttft: Duration::from_millis(50),
                itl: vec![],
                e2e: Duration::from_millis(50),
                tpot: Duration::ZERO,
                output_tokens: 1,
            }),
            ..rec(50, 0, 1)
        };
        let slo = Slo::parse("ttft=80ms,tpot=30ms").unwrap();
        let s = summarize(
            "c=1".into(),
            &[r, one_token],
            &[],
            Duration::from_secs(1),
            Some(slo),
        );
        // tokscope's figures: the first misses TTFT; the one-token request meets it.
        assert_eq!(s.good_requests, Some(1));
        let v = s.vllm_convention.clone().expect("vLLM figures");
        assert_eq!(v.requests, 2);
        assert_eq!(v.good_requests, Some(2));
        assert_eq!(v.goodput_req_per_s, Some(2.0));
        // Only the request of more than one token has a TPOT in vLLM's table.
        assert_eq!(v.tpot.map(|t| t.count), Some(1));
        assert_eq!(v.itl.map(|t| t.count), Some(2));
        // Interpolated: the median of 40 and 50 is 45.
        assert_eq!(v.ttft.map(|t| t.p50_ms), Some(45.0));
        let md = markdown(std::slice::from_ref(&s));
        assert!(md.contains("vLLM's benchmark's definitions"), "{md}");
        let csv = csv(std::slice::from_ref(&s));
        assert!(
            csv.lines().next().unwrap().contains("vllm_ttft_p50_ms"),
            "{csv}"
        );
    }

    #[test]
    fn goodput_counts_requests_meeting_every_target() {
        let records = vec![rec(100, 10, 5), rec(600, 10, 5), rec(100, 80, 5)];
        let slo = Slo::parse("ttft=500ms,tpot=50ms").unwrap();
        let s = summarize(
            "c=1".into(),
            &records,
            &[RequestError::new("timeout", "no response within 1 s")],
            Duration::from_secs(2),
            Some(slo),
        );
        assert_eq!(s.good_requests, Some(1));
        assert_eq!(s.goodput_req_per_s, Some(0.5));
        assert_eq!(s.request_per_s, Some(1.5));
        assert_eq!(s.completion_tokens, 15);
        assert_eq!(s.server_prompt_n, Some(30));
        assert_eq!(s.errors_by_kind.get("timeout"), Some(&1));
        assert_eq!(s.ttft.unwrap().p50_ms, 100.0);
        assert_eq!(s.ttft.unwrap().p99_ms, 600.0);
        assert!(markdown(std::slice::from_ref(&s))
            .contains("timeout 1 (first: no response within 1 s)"));
        assert_eq!(csv(&[s]).lines().count(), 2);
    }

    #[test]
    fn slo_parsing_names_the_problem() {
        let s = Slo::parse("ttft=0.5s, e2e=10s").unwrap();
        assert_eq!(s.ttft, Some(Duration::from_millis(500)));
        assert_eq!(s.e2e, Some(Duration::from_secs(10)));
        assert!(Slo::parse("ttfb=1s").unwrap_err().contains("ttfb"));
        assert!(Slo::parse("ttft=fast").unwrap_err().contains("fast"));
        assert!(Slo::parse("").is_err());
    }

    #[test]
    fn the_clients_own_cpu_time_is_per_request_and_a_share_of_one_core() {
        let s = summarize(
            "c=1".into(),
            &[rec(100, 10, 5), rec(100, 10, 5), rec(100, 10, 5)],
            &[RequestError::new("timeout", "no response within 1 s")],
            Duration::from_secs(2),
            None,
        )
        .with_client_cpu(Some(Duration::from_millis(200)), 1);
        assert_eq!(s.client_cpu_s, Some(0.2));
        assert_eq!(s.client_cpu_ms_per_request, Some(50.0));
        assert_eq!(s.client_cpu_core_share, Some(0.1));
        let md = markdown(std::slice::from_ref(&s));
        assert!(
            md.contains("client CPU at c=1: 50.00 ms a request, 10.0% of one core"),
            "{md}"
        );
        let csv = csv(std::slice::from_ref(&s));
        assert!(csv.contains("client_cpu_ms_per_request"), "{csv}");
        assert!(csv.contains("50.0000"), "{csv}");
        // Unread, it is unknown, not zero.
        let none = summarize("x".into(), &[], &[], Duration::ZERO, None).with_client_cpu(None, 1);
        assert_eq!(none.client_cpu_ms_per_request, None);
        assert!(!markdown(&[none]).contains("client CPU"));
        // 10% of a core: not a warning; 89% (64 streams × 10,000 tok/s on one thread): one.
        assert!(!md.contains("!! at c=1"), "{md}");
        let busy = s
            .clone()
            .with_client_cpu(Some(Duration::from_millis(1780)), 1);
        let md = markdown(&[busy]);
        assert!(
            md.contains("!! at c=1 the client kept its 1 thread(s) 89% busy: past 60%"),
            "{md}"
        );
        // On two threads the same CPU time is 45% of them: not a warning.
        let two = s.with_client_cpu(Some(Duration::from_millis(1780)), 2);
        assert!(!markdown(&[two]).contains("!! at c=1"));
    }

    #[test]
    fn empty_levels_have_no_figures_rather_than_zeros() {
        let s = summarize("x".into(), &[], &[], Duration::ZERO, None);
        assert_eq!(s.request_per_s, None);
        assert_eq!(s.ttft, None);
        assert_eq!(s.server_prompt_n, None);
        assert_eq!(s.goodput_req_per_s, None);
    }
}
