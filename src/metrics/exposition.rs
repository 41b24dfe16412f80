//! tokscope's own client-side figures of a load test, where dashboards read them: fixed-bucket
//! histograms of every finished request, written as Prometheus text (vLLM's metric names and
//! bucket bounds with `tokscope:` for `vllm:`, so a vLLM dashboard's panels work with the prefix
//! changed) and as OpenTelemetry GenAI client metrics (an OTLP/HTTP JSON export request).
//! Definitions: docs/metrics.md, "Exported figures".
//!
//! Pure: the load generator feeds it (`load::publish` serves and sends what it writes).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

/// vLLM's `time_to_first_token_seconds` bounds (`vllm/v1/metrics/loggers.py`).
pub(crate) const VLLM_TTFT_BOUNDS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// vLLM's `inter_token_latency_seconds` and `request_time_per_output_token_seconds` bounds.
pub(crate) const VLLM_ITL_BOUNDS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// vLLM's request latency bounds (`e2e_request_latency_seconds` and the request phases).
pub(crate) const VLLM_E2E_BOUNDS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];
/// vLLM's token-count bounds (`build_1_2_5_buckets`), here up to a million tokens (vLLM stops
/// at the model's context length, which a client does not know).
pub(crate) const VLLM_TOKEN_BOUNDS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5,
    5e5, 1e6,
];
/// The GenAI conventions' advice for `gen_ai.client.operation.duration`.
pub(crate) const OTEL_DURATION_BOUNDS: &[f64] = &[
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
/// The GenAI conventions' time-to-first-token bounds, for `time_to_first_chunk`.
pub(crate) const OTEL_FIRST_CHUNK_BOUNDS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
/// The GenAI conventions' time-per-output-token bounds, for `time_per_output_chunk`.
pub(crate) const OTEL_CHUNK_BOUNDS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
];
/// The GenAI conventions' advice for `gen_ai.client.token.usage`.
pub(crate) const OTEL_TOKEN_BOUNDS: &[f64] = &[
    1.0,
    4.0,
    16.0,
    64.0,
    256.0,
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262_144.0,
    1_048_576.0,
    4_194_304.0,
    16_777_216.0,
    67_108_864.0,
];

/// A histogram of fixed bounds: bucket `i` counts the values in `(bounds[i-1], bounds[i]]`, the
/// last one those above every bound (Prometheus' `le` and OTLP's explicit bounds alike).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Histogram {
    bounds: &'static [f64],
    /// Per bucket, not cumulative: `bounds.len() + 1` of them.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
    min: f64,
    max: f64,
}

impl Histogram {
    pub(crate) fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }

    /// Counts `v`; a value that is not finite or is negative is not a measurement and is left
    /// out.
    pub(crate) fn observe(&mut self, v: f64) {
        if !(v.is_finite() && v >= 0.0) {
            return;
        }
        let i = self.bounds.partition_point(|b| *b < v);
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    /// Prometheus' `_bucket` values: the observations at or under each bound, then all.
    fn cumulative(&self) -> Vec<u64> {
        self.counts
            .iter()
            .scan(0u64, |acc, c| {
                *acc += c;
                Some(*acc)
            })
            .collect()
    }
}

/// One finished request as the exporter counts it (`load::report::RequestRecord`'s figures).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Observed<'a> {
    /// Request sent → first chunk on any channel (a reasoning chunk included).
    pub ttft: Duration,
    /// Request sent → first answer chunk (AIPerf's TTFO); `None` without one.
    pub ttfo: Option<Duration>,
    /// Tokens of the reasoning channel, part of `completion_tokens`.
    pub reasoning_tokens: u64,
    /// Per-token gaps (tokscope's ITL).
    pub itl: &'a [Duration],
    /// Gaps between content chunks, undivided (OTel's time per output chunk).
    pub chunk_gaps: &'a [Duration],
    pub tpot: Option<Duration>,
    pub e2e: Duration,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

impl Observed<'_> {
    /// A local engine's turn counted as a server's request is (`chat` and `run` without
    /// `--url`: docs/metrics.md, "Exported figures"), handed to `count`: TTFT from the request
    /// handed to the engine to the first token of any kind, TTFO to the first answer token,
    /// the thinking's tokens as reasoning tokens, every token its own chunk (so the per-token
    /// and per-chunk gaps are the same), TPOT (E2E − TTFT) ÷ (N − 1), the templated prompt's
    /// tokens and the generated ones. `None` for a turn without a token (counted as failed).
    pub(crate) fn of_local<R>(
        t: &super::TurnTimeline,
        count: impl FnOnce(&Observed<'_>) -> R,
    ) -> Option<R> {
        let ttft = t.ttft()?;
        let e2e = t.e2e()?;
        let n = t.tokens_generated();
        let gaps = t.inter_token_latencies();
        let (ttfo, reasoning_tokens) = match t.thinking {
            Some(span) => (span.first_answer_at, span.tokens as u64),
            None => (Some(ttft), 0),
        };
        Some(count(&Observed {
            ttft,
            ttfo,
            reasoning_tokens,
            itl: &gaps,
            chunk_gaps: &gaps,
            tpot: (n > 1).then(|| e2e.saturating_sub(ttft) / u32::try_from(n - 1).unwrap_or(1)),
            e2e,
            prompt_tokens: t.prompt_tokens.unwrap_or(0) as u64,
            completion_tokens: n as u64,
        }))
    }
}

/// Where a chat's or a run's turns are counted for its exporters (`load::publish`): the
/// figures, and a notice after each turn is counted (the OTLP sinks are then sent them).
#[derive(Debug, Clone)]
pub(crate) struct Export {
    pub metrics: std::sync::Arc<std::sync::Mutex<ClientMetrics>>,
    /// Notified after each turn is counted.
    pub counted: std::sync::Arc<tokio::sync::Notify>,
}

impl Export {
    /// A turn was handed over (the in-flight gauge).
    pub(crate) fn sent(&self) {
        if let Ok(mut m) = self.metrics.lock() {
            m.sent();
        }
    }

    /// A local engine's turn ended: counted as [`Observed::of_local`] says, or as failed with
    /// `failed_kind` (`cancelled`, `no_content`, `engine`) after `took`; then the sinks are
    /// told.
    pub(crate) fn count_local(&self, turn: Result<&super::TurnTimeline, &str>, took: Duration) {
        if let Ok(mut m) = self.metrics.lock() {
            match turn {
                Ok(t) => {
                    if Observed::of_local(t, |o| m.observe(o)).is_none() {
                        m.failed("no_content", took);
                    }
                }
                Err(kind) => m.failed(kind, took),
            }
        }
        self.counted.notify_one();
    }
}

/// One load level's series.
#[derive(Debug, Clone)]
struct LevelSeries {
    level: String,
    started: SystemTime,
    ttft: Histogram,
    ttfo: Histogram,
    /// Per-token ITL (each chunk's gap shared among its tokens).
    itl: Histogram,
    /// Per-chunk gaps, undivided: what vLLM's own `inter_token_latency_seconds` observes.
    chunk_itl: Histogram,
    tpot: Histogram,
    e2e: Histogram,
    prompt_tokens: Histogram,
    generation_tokens: Histogram,
    reasoning_tokens: Histogram,
    success: u64,
    /// Failed requests by error kind.
    failures: BTreeMap<String, u64>,
    prompt_total: u64,
    generation_total: u64,
    reasoning_total: u64,
    /// `gen_ai.client.operation.duration` of the requests that completed, and of the failed
    /// ones by error kind (`error.type`).
    duration: Histogram,
    duration_failed: BTreeMap<String, Histogram>,
    first_chunk: Histogram,
    first_output: Histogram,
    per_chunk: Histogram,
    usage_input: Histogram,
    usage_output: Histogram,
    usage_reasoning: Histogram,
}

impl LevelSeries {
    fn new(level: String, started: SystemTime) -> Self {
        Self {
            level,
            started,
            ttft: Histogram::new(VLLM_TTFT_BOUNDS),
            ttfo: Histogram::new(VLLM_TTFT_BOUNDS),
            itl: Histogram::new(VLLM_ITL_BOUNDS),
            chunk_itl: Histogram::new(VLLM_ITL_BOUNDS),
            tpot: Histogram::new(VLLM_ITL_BOUNDS),
            e2e: Histogram::new(VLLM_E2E_BOUNDS),
            prompt_tokens: Histogram::new(VLLM_TOKEN_BOUNDS),
            generation_tokens: Histogram::new(VLLM_TOKEN_BOUNDS),
            reasoning_tokens: Histogram::new(VLLM_TOKEN_BOUNDS),
            success: 0,
            failures: BTreeMap::new(),
            prompt_total: 0,
            generation_total: 0,
            reasoning_total: 0,
            duration: Histogram::new(OTEL_DURATION_BOUNDS),
            duration_failed: BTreeMap::new(),
            first_chunk: Histogram::new(OTEL_FIRST_CHUNK_BOUNDS),
            first_output: Histogram::new(OTEL_FIRST_CHUNK_BOUNDS),
            per_chunk: Histogram::new(OTEL_CHUNK_BOUNDS),
            usage_input: Histogram::new(OTEL_TOKEN_BOUNDS),
            usage_output: Histogram::new(OTEL_TOKEN_BOUNDS),
            usage_reasoning: Histogram::new(OTEL_TOKEN_BOUNDS),
        }
    }
}

/// A histogram family of the text format: its name after `tokscope:`, its help, its series.
type HistogramFamily = (&'static str, &'static str, fn(&LevelSeries) -> &Histogram);
/// A counter family: its name after `tokscope:`, its help, its value in a level.
type CounterFamily = (&'static str, &'static str, fn(&LevelSeries) -> u64);

/// Everything a load test exports: one series per level, for one model on one server.
#[derive(Debug, Clone)]
pub(crate) struct ClientMetrics {
    model: String,
    server_address: String,
    server_port: u16,
    levels: Vec<LevelSeries>,
    in_flight: u64,
}

impl ClientMetrics {
    pub(crate) fn new(model: &str, server_address: &str, server_port: u16) -> Self {
        Self {
            model: model.to_string(),
            server_address: server_address.to_string(),
            server_port,
            levels: Vec::new(),
            in_flight: 0,
        }
    }

    /// The server's model name, once it is known.
    pub(crate) fn set_model(&mut self, model: &str) {
        self.model = model.to_string();
    }

    /// A level starts: what follows is counted in its series until the next one starts.
    pub(crate) fn start_level(&mut self, level: &str, now: SystemTime) {
        self.levels.push(LevelSeries::new(level.to_string(), now));
    }

    /// A measured request was sent.
    pub(crate) fn sent(&mut self) {
        self.in_flight += 1;
    }

    fn current(&mut self) -> &mut LevelSeries {
        if self.levels.is_empty() {
            self.start_level("", SystemTime::now());
        }
        let last = self.levels.len() - 1;
        &mut self.levels[last]
    }

    /// A measured request completed.
    pub(crate) fn observe(&mut self, o: &Observed) {
        self.in_flight = self.in_flight.saturating_sub(1);
        let s = self.current();
        s.ttft.observe(o.ttft.as_secs_f64());
        if let Some(t) = o.ttfo {
            s.ttfo.observe(t.as_secs_f64());
            s.first_output.observe(t.as_secs_f64());
        }
        for gap in o.itl {
            s.itl.observe(gap.as_secs_f64());
        }
        for gap in o.chunk_gaps {
            s.chunk_itl.observe(gap.as_secs_f64());
        }
        if let Some(t) = o.tpot {
            s.tpot.observe(t.as_secs_f64());
        }
        s.e2e.observe(o.e2e.as_secs_f64());
        s.prompt_tokens.observe(o.prompt_tokens as f64);
        s.generation_tokens.observe(o.completion_tokens as f64);
        s.reasoning_tokens.observe(o.reasoning_tokens as f64);
        s.reasoning_total = s.reasoning_total.saturating_add(o.reasoning_tokens);
        s.success += 1;
        s.prompt_total = s.prompt_total.saturating_add(o.prompt_tokens);
        s.generation_total = s.generation_total.saturating_add(o.completion_tokens);
        s.duration.observe(o.e2e.as_secs_f64());
        s.first_chunk.observe(o.ttft.as_secs_f64());
        for gap in o.chunk_gaps {
            s.per_chunk.observe(gap.as_secs_f64());
        }
        s.usage_input.observe(o.prompt_tokens as f64);
        s.usage_output.observe(o.completion_tokens as f64);
        s.usage_reasoning.observe(o.reasoning_tokens as f64);
    }

    /// A measured request failed, of this error kind, after this long.
    pub(crate) fn failed(&mut self, kind: &str, took: Duration) {
        self.in_flight = self.in_flight.saturating_sub(1);
        let s = self.current();
        *s.failures.entry(kind.to_string()).or_default() += 1;
        s.duration_failed
            .entry(kind.to_string())
            .or_insert_with(|| Histogram::new(OTEL_DURATION_BOUNDS))
            .observe(took.as_secs_f64());
    }

    /// The Prometheus text exposition (format 0.0.4) of every level so far.
    pub(crate) fn prometheus(&self) -> String {
        let mut out = String::new();
        let model = label_value(&self.model);
        let labels =
            |s: &LevelSeries| format!("model_name=\"{model}\",level=\"{}\"", label_value(&s.level));
        let histograms: [HistogramFamily; 9] = [
            (
                "time_to_first_token_seconds",
                "Time to first token as the client sees it: request sent to the first chunk with text on any channel (a reasoning chunk included).",
                |s| &s.ttft,
            ),
            (
                "time_to_first_output_token_seconds",
                "Time to first output token (AIPerf's TTFO): request sent to the first answer chunk, after any reasoning; equal to TTFT without reasoning.",
                |s| &s.ttfo,
            ),
            (
                "inter_token_latency_seconds",
                "Inter-token latency as vLLM's own histogram defines it: the gap between two chunks with text, undivided (one observation per chunk).",
                |s| &s.chunk_itl,
            ),
            (
                "inter_token_latency_per_token_seconds",
                "Inter-token latency per token (tokscope's ITL): each chunk's gap shared evenly among its tokens.",
                |s| &s.itl,
            ),
            (
                "request_time_per_output_token_seconds",
                "Time per output token of each request: (E2E - TTFT) / (output tokens - 1).",
                |s| &s.tpot,
            ),
            (
                "e2e_request_latency_seconds",
                "Request latency as the client sees it: request sent to the last chunk with content.",
                |s| &s.e2e,
            ),
            (
                "request_prompt_tokens",
                "Prompt tokens of each request (the server's usage).",
                |s| &s.prompt_tokens,
            ),
            (
                "request_generation_tokens",
                "Output tokens of each request (the server's usage).",
                |s| &s.generation_tokens,
            ),
            (
                "reasoning_token_count",
                "Reasoning tokens of each request (AIPerf's reasoning_token_count; part of its output tokens).",
                |s| &s.reasoning_tokens,
            ),
        ];
        for (name, help, get) in histograms {
            let _ = writeln!(out, "# HELP tokscope:{name} {help}");
            let _ = writeln!(out, "# TYPE tokscope:{name} histogram");
            for s in &self.levels {
                let h = get(s);
                let l = labels(s);
                for (bound, c) in h.bounds.iter().zip(h.cumulative()) {
                    let _ = writeln!(
                        out,
                        "tokscope:{name}_bucket{{{l},le=\"{}\"}} {c}",
                        number(*bound)
                    );
                }
                let _ = writeln!(out, "tokscope:{name}_bucket{{{l},le=\"+Inf\"}} {}", h.count);
                let _ = writeln!(out, "tokscope:{name}_sum{{{l}}} {}", number(h.sum));
                let _ = writeln!(out, "tokscope:{name}_count{{{l}}} {}", h.count);
            }
        }
        let counters: [CounterFamily; 4] = [
            ("request_success_total", "Requests that completed.", |s| {
                s.success
            }),
            (
                "prompt_tokens_total",
                "Prompt tokens of the completed requests (the server's usage).",
                |s| s.prompt_total,
            ),
            (
                "generation_tokens_total",
                "Output tokens of the completed requests (the server's usage).",
                |s| s.generation_total,
            ),
            (
                "reasoning_tokens_total",
                "Reasoning tokens of the completed requests (part of the output tokens).",
                |s| s.reasoning_total,
            ),
        ];
        for (name, help, get) in counters {
            let _ = writeln!(out, "# HELP tokscope:{name} {help}");
            let _ = writeln!(out, "# TYPE tokscope:{name} counter");
            for s in &self.levels {
                let _ = writeln!(out, "tokscope:{name}{{{}}} {}", labels(s), get(s));
            }
        }
        let _ = writeln!(
            out,
            "# HELP tokscope:request_failure_total Requests that failed, by error kind."
        );
        let _ = writeln!(out, "# TYPE tokscope:request_failure_total counter");
        for s in &self.levels {
            for (kind, n) in &s.failures {
                let _ = writeln!(
                    out,
                    "tokscope:request_failure_total{{{},kind=\"{}\"}} {n}",
                    labels(s),
                    label_value(kind)
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP tokscope:num_requests_running Measured requests in flight."
        );
        let _ = writeln!(out, "# TYPE tokscope:num_requests_running gauge");
        let _ = writeln!(
            out,
            "tokscope:num_requests_running{{model_name=\"{model}\"}} {}",
            self.in_flight
        );
        out
    }

    /// One OTLP `ExportMetricsServiceRequest` (the protobuf's JSON mapping, as OTLP/HTTP JSON
    /// carries it): the GenAI client metrics of every level so far, cumulative from the level's
    /// start to `now`.
    pub(crate) fn otlp(&self, now: SystemTime) -> Value {
        let nanos = |t: SystemTime| {
            t.duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
                .to_string()
        };
        let now_ns = nanos(now);
        let attrs = |s: &LevelSeries, extra: &[(&str, &str)]| {
            let mut a = vec![
                kv("gen_ai.operation.name", "chat"),
                kv("gen_ai.provider.name", "openai"),
                kv("gen_ai.request.model", &self.model),
                kv("server.address", &self.server_address),
                json!({"key": "server.port", "value": {"intValue": self.server_port.to_string()}}),
                kv("tokscope.load.level", &s.level),
            ];
            a.extend(extra.iter().map(|(k, v)| kv(k, v)));
            a
        };
        let point = |s: &LevelSeries, h: &Histogram, extra: &[(&str, &str)]| {
            let mut p = json!({
                "attributes": attrs(s, extra),
                "startTimeUnixNano": nanos(s.started),
                "timeUnixNano": now_ns,
                "count": h.count.to_string(),
                "sum": h.sum,
                "bucketCounts": h.counts.iter().map(u64::to_string).collect::<Vec<_>>(),
                "explicitBounds": h.bounds,
            });
            if h.count > 0 {
                p["min"] = json!(h.min);
                p["max"] = json!(h.max);
            }
            p
        };
        let metric = |name: &str, unit: &str, description: &str, points: Vec<Value>| {
            json!({
                "name": name,
                "unit": unit,
                "description": description,
                // AGGREGATION_TEMPORALITY_CUMULATIVE
                "histogram": {"aggregationTemporality": 2, "dataPoints": points},
            })
        };
        let mut duration = Vec::new();
        let (mut first, mut chunk, mut usage) = (Vec::new(), Vec::new(), Vec::new());
        let (mut first_output, mut reasoning) = (Vec::new(), Vec::new());
        for s in &self.levels {
            duration.push(point(s, &s.duration, &[]));
            for (kind, h) in &s.duration_failed {
                duration.push(point(s, h, &[("error.type", kind)]));
            }
            first.push(point(s, &s.first_chunk, &[]));
            chunk.push(point(s, &s.per_chunk, &[]));
            first_output.push(point(s, &s.first_output, &[]));
            reasoning.push(point(s, &s.usage_reasoning, &[]));
            for (h, kind) in [(&s.usage_input, "input"), (&s.usage_output, "output")] {
                usage.push(point(s, h, &[("gen_ai.token.type", kind)]));
            }
        }
        let metrics = vec![
            metric(
                "gen_ai.client.operation.duration",
                "s",
                "GenAI operation duration: request sent to the last chunk with content.",
                duration,
            ),
            metric(
                "gen_ai.client.operation.time_to_first_chunk",
                "s",
                "Request sent to the first chunk with text on any channel (a reasoning chunk included).",
                first,
            ),
            // Not in the GenAI conventions (yet): named as AIPerf names them.
            metric(
                "tokscope.client.time_to_first_output_token",
                "s",
                "Request sent to the first answer chunk, after any reasoning (AIPerf's TTFO).",
                first_output,
            ),
            metric(
                "tokscope.client.reasoning_token_count",
                "{token}",
                "Reasoning tokens of each completed request (part of its output tokens).",
                reasoning,
            ),
            metric(
                "gen_ai.client.operation.time_per_output_chunk",
                "s",
                "Time from one chunk with content to the next, for each chunk after the first.",
                chunk,
            ),
            metric(
                "gen_ai.client.token.usage",
                "{token}",
                "Input and output tokens of each completed request (the server's usage).",
                usage,
            ),
        ];
        json!({
            "resourceMetrics": [{
                "resource": {"attributes": [
                    kv("service.name", "tokscope"),
                    kv("service.version", env!("CARGO_PKG_VERSION")),
                ]},
                "scopeMetrics": [{
                    "scope": {"name": "tokscope.load", "version": env!("CARGO_PKG_VERSION")},
                    "metrics": metrics,
                }],
            }]
        })
    }
}

/// An OTLP string attribute.
fn kv(key: &str, value: &str) -> Value {
    json!({"key": key, "value": {"stringValue": value}})
}

/// A label value in the text format: one line with no control character (a server's model
/// name is its bytes), `\` and `"` escaped.
fn label_value(v: &str) -> String {
    crate::text::one_line(v)
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
}

/// A number as the text format writes it: the shortest form that reads back the same.
fn number(v: f64) -> String {
    if v.is_finite() {
        format!("{v:?}")
    } else if v.is_nan() {
        "NaN".into()
    } else if v > 0.0 {
        "+Inf".into()
    } else {
        "-Inf".into()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_value_on_a_bound_is_counted_in_that_bucket() {
        let mut h = Histogram::new(&[1.0, 2.0]);
        for v in [0.5, 1.0, 1.5, 2.0, 3.0, f64::NAN, -1.0] {
            h.observe(v);
        }
        assert_eq!(h.counts, vec![2, 2, 1]);
        assert_eq!(h.cumulative(), vec![2, 4, 5]);
        assert_eq!(h.count, 5);
        assert!((h.sum - 8.0).abs() < 1e-12);
    }

    fn observed<'a>(itl: &'a [Duration], gaps: &'a [Duration]) -> Observed<'a> {
        Observed {
            ttft: Duration::from_millis(30),
            ttfo: Some(Duration::from_millis(70)),
            reasoning_tokens: 2,
            itl,
            chunk_gaps: gaps,
            tpot: Some(Duration::from_millis(20)),
            e2e: Duration::from_millis(90),
            prompt_tokens: 12,
            completion_tokens: 4,
        }
    }

    #[test]
    fn the_text_has_vllms_buckets_in_seconds_and_a_hostile_name_cannot_break_a_line() {
        let mut m = ClientMetrics::new("evil\"\n\x1b]52;c;x\x07\\", "127.0.0.1", 8080);
        m.start_level("concurrency=2", UNIX_EPOCH);
        let itl = [Duration::from_millis(20); 3];
        m.sent();
        // Three per-token gaps over two chunk gaps (a chunk of two tokens).
        m.observe(&observed(&itl, &itl[..2]));
        m.sent();
        m.failed("http_5xx", Duration::from_millis(5));
        let text = m.prometheus();
        let value = |series: &str| {
            text.lines()
                .find(|l| l.starts_with(&format!("tokscope:{series}{{")))
                .unwrap_or_else(|| panic!("no {series}: {text}"))
                .rsplit(' ')
                .next()
                .unwrap()
                .to_string()
        };
        // vLLM's name holds vLLM's convention (a gap per chunk), the per-token one its own.
        assert_eq!(value("inter_token_latency_seconds_count"), "2");
        assert_eq!(value("inter_token_latency_per_token_seconds_count"), "3");
        assert_eq!(value("time_to_first_output_token_seconds_count"), "1");
        assert_eq!(value("time_to_first_output_token_seconds_sum"), "0.07");
        assert_eq!(value("reasoning_token_count_sum"), "2.0");
        assert_eq!(value("reasoning_tokens_total"), "2");
        let bucket = |le: &str| {
            text.lines()
                .find(|l| {
                    l.starts_with("tokscope:time_to_first_token_seconds_bucket")
                        && l.contains(&format!("le=\"{le}\""))
                })
                .unwrap()
                .rsplit(' ')
                .next()
                .unwrap()
                .to_string()
        };
        // 30 ms: above 0.02, at or under 0.04.
        assert_eq!(bucket("0.02"), "0");
        assert_eq!(bucket("0.04"), "1");
        assert_eq!(bucket("+Inf"), "1");
        assert_eq!(
            text.lines()
                .filter(|l| l.starts_with("tokscope:time_to_first_token_seconds_bucket"))
                .count(),
            VLLM_TTFT_BOUNDS.len() + 1
        );
        assert!(text.contains("tokscope:inter_token_latency_seconds_count{"));
        assert!(text.contains("kind=\"http_5xx\"} 1"), "{text}");
        assert!(text.contains("tokscope:generation_tokens_total{"));
        for line in text.lines() {
            assert!(!line.chars().any(crate::text::is_unsafe), "{line:?}");
        }
        assert!(text.contains("model_name=\"evil\\\""), "{text}");
        assert!(
            !text.contains("x\u{7}\\\""),
            "the backslash is escaped: {text}"
        );
    }

    #[test]
    fn the_otlp_request_holds_per_bucket_counts_and_the_level_window() {
        let mut m = ClientMetrics::new("m", "127.0.0.1", 8080);
        let start = UNIX_EPOCH + Duration::from_secs(100);
        m.start_level("rate=2/s", start);
        let itl = [Duration::from_millis(20); 3];
        m.observe(&observed(&itl, &itl[..2]));
        m.failed("timeout", Duration::from_secs(3));
        let v = m.otlp(start + Duration::from_secs(5));
        let metrics = &v["resourceMetrics"][0]["scopeMetrics"][0]["metrics"];
        let by_name = |n: &str| {
            metrics
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["name"] == n)
                .unwrap()
                .clone()
        };
        let duration = by_name("gen_ai.client.operation.duration");
        let points = duration["histogram"]["dataPoints"].as_array().unwrap();
        assert_eq!(points.len(), 2, "completed, and failed by error.type");
        assert_eq!(points[0]["startTimeUnixNano"], "100000000000");
        assert_eq!(points[0]["timeUnixNano"], "105000000000");
        let counts: Vec<u64> = points[0]["bucketCounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap().parse().unwrap())
            .collect();
        assert_eq!(counts.len(), OTEL_DURATION_BOUNDS.len() + 1);
        assert_eq!(counts.iter().sum::<u64>(), 1, "per bucket, not cumulative");
        assert_eq!(counts[4], 1, "90 ms is in (0.08, 0.16]");
        assert!(points[1]["attributes"]
            .as_array()
            .unwrap()
            .contains(&kv("error.type", "timeout")));
        let chunk = by_name("gen_ai.client.operation.time_per_output_chunk");
        assert_eq!(chunk["histogram"]["dataPoints"][0]["count"], "2");
        let usage = by_name("gen_ai.client.token.usage");
        assert_eq!(usage["unit"], "{token}");
        assert_eq!(usage["histogram"]["dataPoints"][1]["sum"], 4.0);
    }
}
