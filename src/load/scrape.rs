//! The server's own Prometheus metrics, read during `load` (issue 35, item 4): a baseline
//! before the level's warm-up, then a scrape of `GET /metrics` every interval while it runs,
//! and one after it. What the server counted over the level (a counter's delta), how busy it
//! was (a gauge's mean and largest value over the scrapes) and its own latency histograms
//! (the delta of each bucket, so only this level's requests) are reported beside tokscope's
//! client-side figures.
//!
//! Names are matched by suffix, so one table serves every engine: vLLM (`vllm:`), SGLang
//! (`sglang:`), llama-server (`llamacpp:`, with `--metrics`), TensorRT-LLM (`trtllm:`), NVIDIA
//! Dynamo's frontend (`dynamo_frontend_`), llm-d (vLLM's names), and vLLM behind Ray Serve
//! (`ray_vllm:`) or KServe (`kserve_vllm:`). The text is parsed here (the exposition format
//! 0.0.4 and OpenMetrics' `# EOF`), bounded in size; tests hold the parser against
//! `prometheus_client`'s on each engine's fixture.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::remote::RemoteClient;

/// The largest exposition read (a vLLM server with many models and LoRAs is well under it).
pub(crate) const MAX_EXPOSITION_BYTES: usize = 8 << 20;
/// How long one scrape may take (a server busy with the load answers `/metrics` slower; one
/// that does not answer at all must not hold the level).
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);
/// The most samples kept from one exposition.
const MAX_SAMPLES: usize = 200_000;

/// One sample line: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses an exposition (`text/plain; version=0.0.4` or OpenMetrics). Comments and `# HELP` /
/// `# TYPE` lines are skipped (the kind of each metric tokscope reads is known by its name);
/// a malformed sample line is an error naming its line.
pub(crate) fn parse(text: &str) -> Result<Vec<Sample>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if out.len() >= MAX_SAMPLES {
            return Err(format!("more than {MAX_SAMPLES} samples"));
        }
        out.push(sample(line).map_err(|e| format!("line {}: {e}: {}", n + 1, excerpt(line)))?);
    }
    Ok(out)
}

fn excerpt(line: &str) -> String {
    let cut: String = line.chars().take(80).collect();
    crate::text::terminal_safe(&cut).into_owned()
}

fn is_name_char(c: char, first: bool) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':' || (!first && c.is_ascii_digit())
}

fn sample(line: &str) -> Result<Sample, String> {
    let name_end = line
        .char_indices()
        .find(|&(i, c)| !is_name_char(c, i == 0))
        .map_or(line.len(), |(i, _)| i);
    if name_end == 0 {
        return Err("no metric name".into());
    }
    let name = line[..name_end].to_string();
    let (labels, rest) = match line[name_end..].strip_prefix('{') {
        Some(after) => label_set(after)?,
        None => (Vec::new(), &line[name_end..]),
    };
    let mut fields = rest.split_whitespace();
    let value = fields.next().ok_or("no value")?;
    // Rust's parse reads the format's `+Inf`, `Inf`, `-Inf` and `NaN` as well.
    let value = value
        .parse::<f64>()
        .map_err(|_| format!("'{value}' is not a number"))?;
    // An optional timestamp; anything after it is malformed.
    if let Some(ts) = fields.next() {
        ts.parse::<f64>()
            .map_err(|_| format!("'{ts}' is not a timestamp"))?;
    }
    if fields.next().is_some() {
        return Err("text after the value".into());
    }
    Ok(Sample {
        name,
        labels,
        value,
    })
}

/// `k="v",k2="v2"}` → the pairs and what follows the `}`.
/// Labels as parsed: (name, value) pairs.
type Labels = Vec<(String, String)>;

fn label_set(mut s: &str) -> Result<(Labels, &str), String> {
    let mut labels = Vec::new();
    loop {
        s = s.trim_start();
        if let Some(tail) = s.strip_prefix('}') {
            return Ok((labels, tail));
        }
        let eq = s.find('=').ok_or("a label without '='")?;
        let key = s[..eq].trim().to_string();
        if key.is_empty()
            || !key
                .chars()
                .enumerate()
                .all(|(i, c)| is_name_char(c, i == 0) && c != ':')
        {
            return Err(format!("bad label name '{key}'"));
        }
        s = s[eq + 1..].trim_start();
        s = s.strip_prefix('"').ok_or("a label value without quotes")?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let unterminated = "an unterminated label value";
        let end = loop {
            match chars.next().ok_or(unterminated)? {
                (i, '"') => break i,
                (_, '\\') => match chars.next().ok_or(unterminated)? {
                    (_, 'n') => value.push('\n'),
                    (_, c) => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        labels.push((key, value));
        s = s[end + 1..].trim_start();
        if let Some(tail) = s.strip_prefix(',') {
            s = tail;
        } else if !s.starts_with('}') {
            return Err("labels not separated by ','".into());
        }
    }
}

/// How a metric is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A level at each scrape: its mean and largest value over the level.
    Gauge,
    /// Only grows: its delta over the level.
    Counter,
    /// Buckets, sum and count: the deltas, so this level's observations only.
    Histogram,
}

/// What tokscope reads, by the name's ending after the engine's prefix (the first suffix an
/// engine has wins: vLLM exposes both its older and newer names).
const KNOWN: &[(&str, Kind, &[&str])] = &[
    (
        "running",
        Kind::Gauge,
        &[
            "num_requests_running",
            "num_running_reqs",
            "requests_processing",
            "inflight_requests",
        ],
    ),
    (
        "waiting",
        Kind::Gauge,
        &[
            "num_requests_waiting",
            "num_queue_reqs",
            "requests_deferred",
            "queued_requests",
        ],
    ),
    (
        "kv_cache_usage",
        Kind::Gauge,
        &[
            "kv_cache_usage_perc",
            "gpu_cache_usage_perc",
            "kv_cache_usage_ratio",
            "token_usage",
            "kv_cache_utilization",
        ],
    ),
    (
        "preemptions",
        Kind::Counter,
        &["num_preemptions_total", "num_retracted_reqs_total"],
    ),
    (
        "prefix_cache_hits",
        Kind::Counter,
        &["prefix_cache_hits_total"],
    ),
    (
        "prefix_cache_queries",
        Kind::Counter,
        &["prefix_cache_queries_total"],
    ),
    ("prompt_tokens", Kind::Counter, &["prompt_tokens_total"]),
    (
        "generation_tokens",
        Kind::Counter,
        &["generation_tokens_total", "tokens_predicted_total"],
    ),
    ("ttft", Kind::Histogram, &["time_to_first_token_seconds"]),
    (
        "itl",
        Kind::Histogram,
        &[
            "inter_token_latency_seconds",
            "time_per_output_token_seconds",
        ],
    ),
    (
        "e2e",
        Kind::Histogram,
        &["e2e_request_latency_seconds", "request_duration_seconds"],
    ),
    (
        "queue_time",
        Kind::Histogram,
        &["request_queue_time_seconds"],
    ),
];

/// The engine prefixes tokscope names in its report, longest first.
const PREFIXES: &[&str] = &[
    "kserve_vllm:",
    "ray_vllm:",
    "llamacpp:",
    "sglang:",
    "trtllm:",
    "vllm:",
    "dynamo_frontend_",
];

/// `name` ends in `suffix` at a word boundary (after `:` or `_`, or the whole name).
fn ends_with_metric(name: &str, suffix: &str) -> bool {
    name == suffix
        || name
            .strip_suffix(suffix)
            .is_some_and(|head| head.ends_with(':') || head.ends_with('_'))
}

/// A histogram's cumulative buckets (upper bound, count), sum and count.
#[derive(Debug, Clone, Default, PartialEq)]
struct Histogram {
    buckets: BTreeMap<OrderedBound, f64>,
    sum: f64,
    count: f64,
}

/// A bucket bound as a map key (`+Inf` sorts last).
#[derive(Debug, Clone, Copy, PartialEq)]
struct OrderedBound(f64);
impl Eq for OrderedBound {}
impl PartialOrd for OrderedBound {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for OrderedBound {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// What one scrape gave of the metrics tokscope reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Snapshot {
    /// Since the level's baseline.
    pub at: Duration,
    scalars: BTreeMap<&'static str, f64>,
    histograms: BTreeMap<&'static str, Histogram>,
    /// The metric names matched (`vllm:num_requests_running`, …), for the report's source.
    matched: Vec<String>,
}

impl Snapshot {
    /// The known metrics in `samples`. Several series of one metric (one per model or engine
    /// label) are summed, except the KV cache's usage, a fraction, which is averaged.
    pub(crate) fn of(samples: &[Sample], at: Duration) -> Self {
        let mut snap = Snapshot {
            at,
            ..Default::default()
        };
        for (canonical, kind, suffixes) in KNOWN {
            // The first suffix with any sample is this metric's name on this server.
            let Some(family) = suffixes.iter().find_map(|suffix| {
                samples.iter().find_map(|s| {
                    let base = match kind {
                        Kind::Histogram => s
                            .name
                            .strip_suffix("_bucket")
                            .or_else(|| s.name.strip_suffix("_sum"))
                            .or_else(|| s.name.strip_suffix("_count"))?,
                        _ => s.name.as_str(),
                    };
                    ends_with_metric(base, suffix).then(|| base.to_string())
                })
            }) else {
                continue;
            };
            match kind {
                Kind::Gauge | Kind::Counter => {
                    let values: Vec<f64> = samples
                        .iter()
                        .filter(|s| s.name == family && s.value.is_finite())
                        .map(|s| s.value)
                        .collect();
                    if values.is_empty() {
                        continue;
                    }
                    let total: f64 = values.iter().sum();
                    let value = if *canonical == "kv_cache_usage" {
                        total / values.len() as f64
                    } else {
                        total
                    };
                    snap.scalars.insert(canonical, value);
                }
                Kind::Histogram => {
                    let mut h = Histogram::default();
                    for s in samples.iter().filter(|s| s.value.is_finite()) {
                        if s.name.strip_suffix("_bucket") == Some(family.as_str()) {
                            // `+Inf` and `Inf` parse as infinity.
                            let Some(le) = s.label("le").and_then(|v| v.parse::<f64>().ok()) else {
                                continue;
                            };
                            *h.buckets.entry(OrderedBound(le)).or_insert(0.0) += s.value;
                        } else if s.name.strip_suffix("_sum") == Some(family.as_str()) {
                            h.sum += s.value;
                        } else if s.name.strip_suffix("_count") == Some(family.as_str()) {
                            h.count += s.value;
                        }
                    }
                    snap.histograms.insert(canonical, h);
                }
            }
            snap.matched.push(family);
        }
        snap
    }

    fn is_empty(&self) -> bool {
        self.scalars.is_empty() && self.histograms.is_empty()
    }
}

/// A gauge over a level's scrapes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct GaugeStats {
    pub mean: f64,
    pub max: f64,
}

/// What a server histogram's quantile is: a value inside a bucket, or only a bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum QuantileIs {
    /// Linear within its bucket, between two finite bounds (Prometheus' `histogram_quantile`).
    Interpolated,
    /// In the first bucket: at most the figure (the bucket's bound); nothing says where below.
    AtMost,
    /// In the `+Inf` bucket: above the figure (the largest finite bound).
    Above,
}

/// A server histogram over one level: this level's observations, from the buckets' deltas.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct ServerLatency {
    /// Observations this level.
    pub count: u64,
    /// What one observation is: `requests` (TTFT, E2E, queue time) or `token_gaps` (ITL: one
    /// per gap between two output tokens).
    pub count_of: &'static str,
    pub mean_ms: Option<f64>,
    /// Interpolated within the bucket, as Prometheus' `histogram_quantile`, except in the
    /// first and the `+Inf` bucket, where it is the bound (`p50_is`, `p99_is`).
    pub p50_ms: Option<f64>,
    pub p50_is: Option<QuantileIs>,
    pub p99_ms: Option<f64>,
    pub p99_is: Option<QuantileIs>,
}

/// One scrape during the level, for the time slices.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Slice {
    pub t_s: f64,
    pub running: Option<f64>,
    pub waiting: Option<f64>,
    pub kv_cache_usage: Option<f64>,
}

/// What the server's own metrics say of one level.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ServerMetrics {
    /// The engine prefix of the names read (`vllm:`, `llamacpp:`, …; "" when none).
    pub source: String,
    /// The metric names read, as the server spells them.
    pub names: Vec<String>,
    /// Scrapes between the baseline and the end (the end included).
    pub scrapes: usize,
    /// Scrapes that failed during the level (left out).
    pub failed_scrapes: usize,
    pub interval_ms: u64,
    /// Requests running / waiting and the KV cache's usage (a fraction) over the scrapes.
    pub running: Option<GaugeStats>,
    pub waiting: Option<GaugeStats>,
    pub kv_cache_usage: Option<GaugeStats>,
    /// Counted by the server over the level (warm-up excluded when the baseline follows it).
    pub prompt_tokens: Option<f64>,
    pub generation_tokens: Option<f64>,
    pub preemptions: Option<f64>,
    pub prefix_cache_hits: Option<f64>,
    pub prefix_cache_queries: Option<f64>,
    /// The server's own latency histograms over the level.
    pub ttft: Option<ServerLatency>,
    pub itl: Option<ServerLatency>,
    pub e2e: Option<ServerLatency>,
    pub queue_time: Option<ServerLatency>,
    pub slices: Vec<Slice>,
}

/// The report of a level from its baseline and the scrapes after it (in time order, the last
/// taken after the level ended). `None` when the server exposes none of the known metrics.
pub(crate) fn report(
    baseline: &Snapshot,
    scrapes: &[Snapshot],
    interval: Duration,
) -> Option<ServerMetrics> {
    let last = scrapes.last()?;
    if baseline.is_empty() && last.is_empty() {
        return None;
    }
    let gauge = |name: &str| {
        let values: Vec<f64> = scrapes
            .iter()
            .filter_map(|s| s.scalars.get(name).copied())
            .collect();
        (!values.is_empty()).then(|| GaugeStats {
            mean: values.iter().sum::<f64>() / values.len() as f64,
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    };
    // A counter reset (a restarted server) reads as a fall: not a delta.
    let delta = |name: &str| {
        let (a, b) = (baseline.scalars.get(name)?, last.scalars.get(name)?);
        (b >= a).then(|| b - a)
    };
    let latency = |name: &str| {
        let end = last.histograms.get(name)?;
        let empty = Histogram::default();
        let start = baseline.histograms.get(name).unwrap_or(&empty);
        // vLLM's and SGLang's ITL histograms observe every gap between two tokens.
        let count_of = if name == "itl" {
            "token_gaps"
        } else {
            "requests"
        };
        histogram_delta(start, end, count_of)
    };
    let mut names = last.matched.clone();
    names.sort();
    names.dedup();
    let source = names
        .iter()
        .find_map(|n| PREFIXES.iter().find(|p| n.starts_with(*p)))
        .map_or_else(String::new, |p| (*p).to_string());
    Some(ServerMetrics {
        source,
        names,
        scrapes: scrapes.len(),
        failed_scrapes: 0,
        interval_ms: u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
        running: gauge("running"),
        waiting: gauge("waiting"),
        kv_cache_usage: gauge("kv_cache_usage"),
        prompt_tokens: delta("prompt_tokens"),
        generation_tokens: delta("generation_tokens"),
        preemptions: delta("preemptions"),
        prefix_cache_hits: delta("prefix_cache_hits"),
        prefix_cache_queries: delta("prefix_cache_queries"),
        ttft: latency("ttft"),
        itl: latency("itl"),
        e2e: latency("e2e"),
        queue_time: latency("queue_time"),
        slices: scrapes
            .iter()
            .map(|s| Slice {
                t_s: s.at.as_secs_f64(),
                running: s.scalars.get("running").copied(),
                waiting: s.scalars.get("waiting").copied(),
                kv_cache_usage: s.scalars.get("kv_cache_usage").copied(),
            })
            .collect(),
    })
}

/// One scrape of `GET /metrics`, read as a snapshot at `at`.
async fn scrape(client: &RemoteClient, at: Duration) -> Result<Snapshot, String> {
    let text = tokio::time::timeout(
        SCRAPE_TIMEOUT,
        client.root_get_text("/metrics", MAX_EXPOSITION_BYTES),
    )
    .await
    .map_err(|_| {
        format!(
            "GET /metrics gave no answer within {} s",
            SCRAPE_TIMEOUT.as_secs()
        )
    })?
    .map_err(|e| e.to_string())?;
    // Parsing a large exposition (130,000 histogram buckets, 8 MB) takes the CPU for a while:
    // off the runtime's thread, so the load's own streams are read on time meanwhile.
    tokio::task::spawn_blocking(move || {
        let samples = parse(&text).map_err(|e| format!("the exposition is malformed: {e}"))?;
        Ok(Snapshot::of(&samples, at))
    })
    .await
    .map_err(|e| format!("the scrape's parser stopped: {e}"))?
}

/// What a level keeps of its scrapes while it runs: every scrape's gauges (the report's means,
/// maxima and time slices), but the histograms and metric names of the latest scrape only (the
/// report reads them at the baseline and the end). A scrape of a server with 130,000 buckets
/// then costs about a kilobyte kept, not megabytes: the memory of a long level stays flat.
#[derive(Debug, Default)]
struct Record {
    scrapes: Vec<Snapshot>,
    failed: usize,
}

impl Record {
    /// The most scrapes kept: about 9 hours at 500 ms.
    const MAX_SCRAPES: usize = 65_536;

    fn push(&mut self, s: Snapshot) {
        if let Some(previous) = self.scrapes.last_mut() {
            previous.histograms = BTreeMap::new();
            previous.matched = Vec::new();
        }
        if self.scrapes.len() >= Self::MAX_SCRAPES {
            self.scrapes.remove(0);
        }
        self.scrapes.push(s);
    }
}

/// The scraping of one level: the baseline, then a scrape every interval while it runs.
pub(crate) struct Level {
    client: Arc<RemoteClient>,
    baseline: Snapshot,
    started: Instant,
    interval: Duration,
    done: Arc<AtomicBool>,
    record: Arc<std::sync::Mutex<Record>>,
    task: tokio::task::JoinHandle<()>,
}

impl Level {
    /// Takes the baseline and starts scraping; `Err` says why the server's metrics cannot be
    /// read (no `/metrics`, a malformed or empty one), and nothing runs.
    pub(crate) async fn start(
        client: Arc<RemoteClient>,
        interval: Duration,
    ) -> Result<Self, String> {
        let baseline = scrape(&client, Duration::ZERO).await?;
        if baseline.is_empty() {
            return Err(
                "its /metrics holds none of the metrics tokscope reads (docs/load.md)".into(),
            );
        }
        let started = Instant::now();
        let done = Arc::new(AtomicBool::new(false));
        let record = Arc::new(std::sync::Mutex::new(Record::default()));
        let task = {
            let client = Arc::clone(&client);
            let done = Arc::clone(&done);
            let record = Arc::clone(&record);
            tokio::spawn(async move {
                let mut next = started + interval;
                loop {
                    // Sleep to the next tick in small steps, so the end is seen at once.
                    while Instant::now() < next {
                        if done.load(Ordering::SeqCst) {
                            return;
                        }
                        tokio::time::sleep((next - Instant::now()).min(Duration::from_millis(20)))
                            .await;
                    }
                    let result = scrape(&client, started.elapsed()).await;
                    if let Ok(mut r) = record.lock() {
                        match result {
                            Ok(s) => r.push(s),
                            Err(_) => r.failed += 1,
                        }
                    }
                    // A scrape slower than the interval skips the ticks it missed: never two
                    // back to back.
                    next = (next + interval).max(Instant::now() + interval / 2);
                }
            })
        };
        Ok(Self {
            client,
            baseline,
            started,
            interval,
            done,
            record,
            task,
        })
    }

    /// Stops scraping (a scrape in flight is dropped, not waited for: the level ends at its
    /// duration whatever the server does), takes the last scrape and reports the level.
    pub(crate) async fn finish(self) -> Option<ServerMetrics> {
        self.done.store(true, Ordering::SeqCst);
        self.task.abort();
        let _ = self.task.await;
        let mut record = self
            .record
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default();
        match scrape(&self.client, self.started.elapsed()).await {
            Ok(s) => record.push(s),
            Err(_) => record.failed += 1,
        }
        let mut m = report(&self.baseline, &record.scrapes, self.interval)?;
        m.failed_scrapes = record.failed;
        Some(m)
    }
}

/// This level's observations of a histogram: the end's buckets less the baseline's.
fn histogram_delta(
    start: &Histogram,
    end: &Histogram,
    count_of: &'static str,
) -> Option<ServerLatency> {
    let count = end.count - start.count;
    if count.is_nan() || count < 0.0 {
        return None;
    }
    let buckets: Vec<(f64, f64)> = end
        .buckets
        .iter()
        .map(|(le, c)| (le.0, c - start.buckets.get(le).copied().unwrap_or(0.0)))
        .collect();
    let mean_ms = (count > 0.0).then(|| (end.sum - start.sum) / count * 1e3);
    let (p50, p99) = (quantile(&buckets, 0.5), quantile(&buckets, 0.99));
    Some(ServerLatency {
        count: count.round() as u64,
        count_of,
        mean_ms,
        p50_ms: p50.map(|(s, _)| s * 1e3),
        p50_is: p50.map(|(_, is)| is),
        p99_ms: p99.map(|(s, _)| s * 1e3),
        p99_is: p99.map(|(_, is)| is),
    })
}

/// Prometheus' `histogram_quantile` over cumulative `(upper bound, count)` buckets: the rank's
/// bucket, linear within it. Where a histogram says nothing of the values' spread the bound is
/// given and said: a rank in the first bucket gives its bound, `AtMost` (Prometheus would
/// interpolate from 0, inventing a value: vLLM's queue-time buckets start at 0.3 s); a rank in
/// the `+Inf` bucket gives the largest finite bound, `Above`.
fn quantile(buckets: &[(f64, f64)], q: f64) -> Option<(f64, QuantileIs)> {
    let total = buckets.last()?.1;
    if total.is_nan() || total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut lower: Option<(f64, f64)> = None;
    for &(le, count) in buckets {
        if count >= rank {
            return Some(match lower {
                _ if le.is_infinite() => (lower.map_or(0.0, |l| l.0), QuantileIs::Above),
                None => (le, QuantileIs::AtMost),
                Some((lo, below)) => {
                    let in_bucket = count - below;
                    if in_bucket <= 0.0 {
                        (le, QuantileIs::Interpolated)
                    } else {
                        (
                            lo + (le - lo) * (rank - below) / in_bucket,
                            QuantileIs::Interpolated,
                        )
                    }
                }
            });
        }
        lower = Some((le, count));
    }
    lower.map(|l| (l.0, QuantileIs::Above))
}

/// A server quantile for a person: "12.5", "≤ 300.0" (in the first bucket) or "> 80000.0"
/// (in the `+Inf` bucket).
fn quantile_text(ms: Option<f64>, is: Option<QuantileIs>) -> String {
    let v = crate::fmt::opt(ms, 1);
    match (ms, is) {
        (Some(_), Some(QuantileIs::AtMost)) => format!("≤ {v}"),
        (Some(_), Some(QuantileIs::Above)) => format!("> {v}"),
        _ => v,
    }
}

/// The report's lines for a person, one level: "server (vllm:, 12 scrapes every 500 ms): …".
pub(crate) fn lines(level: &str, m: &ServerMetrics) -> Vec<String> {
    let gauge = |g: Option<GaugeStats>, pct: bool| {
        g.map_or_else(
            || "—".to_string(),
            |g| {
                if pct {
                    format!("mean {:.1}% max {:.1}%", g.mean * 100.0, g.max * 100.0)
                } else {
                    format!("mean {:.2} max {:.0}", g.mean, g.max)
                }
            },
        )
    };
    let count = |v: Option<f64>| v.map_or_else(|| "—".to_string(), |v| format!("{v:.0}"));
    let latency = |l: Option<ServerLatency>| {
        l.map_or_else(
            || "—".to_string(),
            |l| {
                format!(
                    "{} {}, mean {} p50 {} p99 {} ms",
                    l.count,
                    l.count_of.replace('_', " "),
                    crate::fmt::opt(l.mean_ms, 1),
                    quantile_text(l.p50_ms, l.p50_is),
                    quantile_text(l.p99_ms, l.p99_is)
                )
            },
        )
    };
    let source = if m.source.is_empty() {
        "unprefixed names".to_string()
    } else {
        m.source.clone()
    };
    let hits = match (m.prefix_cache_hits, m.prefix_cache_queries) {
        (Some(h), Some(q)) if q > 0.0 => format!("{h:.0} of {q:.0} ({:.1}%)", 100.0 * h / q),
        (Some(h), _) => format!("{h:.0}"),
        _ => "—".to_string(),
    };
    let failed = if m.failed_scrapes > 0 {
        format!(", {} failed", m.failed_scrapes)
    } else {
        String::new()
    };
    vec![
        format!(
            "server metrics, {level} ({source}, {} scrapes every {} ms{failed}): running {} · waiting {} · KV cache {}",
            m.scrapes,
            m.interval_ms,
            gauge(m.running, false),
            gauge(m.waiting, false),
            gauge(m.kv_cache_usage, true)
        ),
        format!(
            "  counted by the server: prompt tokens {} · generated tokens {} · preemptions {} · prefix-cache hits {hits}",
            count(m.prompt_tokens),
            count(m.generation_tokens),
            count(m.preemptions),
        ),
        format!(
            "  server TTFT {} · ITL {} · E2E {} · queue {}",
            latency(m.ttft),
            latency(m.itl),
            latency(m.e2e),
            latency(m.queue_time)
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    const LLAMACPP: &str = include_str!("../../tests/fixtures/metrics/llamacpp.txt");
    const VLLM: &str = include_str!("../../tests/fixtures/metrics/vllm.txt");
    const SGLANG: &str = include_str!("../../tests/fixtures/metrics/sglang.txt");
    const TRTLLM: &str = include_str!("../../tests/fixtures/metrics/trtllm.txt");
    const DYNAMO: &str = include_str!("../../tests/fixtures/metrics/dynamo.txt");
    const RAY: &str = include_str!("../../tests/fixtures/metrics/ray_vllm.txt");
    const KSERVE: &str = include_str!("../../tests/fixtures/metrics/kserve_vllm.txt");

    fn snap(text: &str, at_ms: u64) -> Snapshot {
        Snapshot::of(&parse(text).unwrap(), Duration::from_millis(at_ms))
    }

    #[test]
    fn labels_escapes_specials_and_timestamps_parse() {
        let s = parse(
            "# HELP x y\n# TYPE x counter\nx_total{a=\"1\",b=\"q\\\"u\\\\o\\nte\"} 3 1700000000000\nx_bucket{le=\"+Inf\"} +Inf\ny NaN\nz -Inf\n# EOF\n",
        )
        .unwrap();
        assert_eq!(s.len(), 4);
        assert_eq!(s[0].labels[1].1, "q\"u\\o\nte");
        assert_eq!(s[0].value, 3.0);
        assert!(s[1].value.is_infinite() && s[2].value.is_nan());
        for bad in [
            "x{a=1} 2",
            "x{a=\"1\" 2",
            "x 1 2 3",
            "{a=\"1\"} 2",
            "x two",
            "x{a=\"1\"b=\"2\"} 1",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_levels_record_keeps_the_histograms_of_its_latest_scrape_only() {
        let text = "vllm:num_requests_running 2\n\
                    vllm:time_to_first_token_seconds_bucket{le=\"0.1\"} 3\n\
                    vllm:time_to_first_token_seconds_bucket{le=\"+Inf\"} 4\n\
                    vllm:time_to_first_token_seconds_sum 0.5\n\
                    vllm:time_to_first_token_seconds_count 4\n";
        let mut record = Record::default();
        for i in 0..5u64 {
            record.push(snap(text, 100 * i));
        }
        assert_eq!(record.scrapes.len(), 5);
        let (last, earlier) = record.scrapes.split_last().unwrap();
        assert!(!last.histograms.is_empty() && !last.matched.is_empty());
        for s in earlier {
            assert!(s.histograms.is_empty() && s.matched.is_empty(), "{s:?}");
            // The gauges every scrape keeps: the report's means, maxima and slices.
            assert_eq!(s.scalars.get("running"), Some(&2.0));
        }
        // The report reads the same from the slimmed record as from whole scrapes.
        let whole: Vec<Snapshot> = (0..5u64).map(|i| snap(text, 100 * i)).collect();
        let base = snap(text, 0);
        assert_eq!(
            report(&base, &record.scrapes, Duration::from_millis(100)),
            report(&base, &whole, Duration::from_millis(100))
        );
    }

    #[test]
    fn every_engine_is_read_by_the_names_it_uses() {
        for (text, prefix, has_histograms) in [
            (LLAMACPP, "llamacpp:", false),
            (VLLM, "vllm:", true),
            (SGLANG, "sglang:", true),
            (TRTLLM, "trtllm:", true),
            (DYNAMO, "dynamo_frontend_", true),
            (RAY, "ray_vllm:", true),
            (KSERVE, "kserve_vllm:", true),
        ] {
            let base = snap(text, 0);
            let m = report(
                &base,
                std::slice::from_ref(&base),
                Duration::from_millis(500),
            )
            .unwrap_or_else(|| panic!("{prefix}: nothing read"));
            assert_eq!(m.source, prefix, "{:?}", m.names);
            assert!(m.running.is_some(), "{prefix}: running");
            assert!(m.waiting.is_some(), "{prefix}: waiting");
            assert_eq!(m.ttft.is_some(), has_histograms, "{prefix}: ttft");
        }
        // vLLM's newer name wins over its older one, and its fraction is a fraction.
        let m = report(&snap(VLLM, 0), &[snap(VLLM, 0)], Duration::ZERO).unwrap();
        assert!(
            m.names.iter().any(|n| n == "vllm:kv_cache_usage_perc"),
            "{:?}",
            m.names
        );
        assert!(
            m.names.iter().all(|n| n != "vllm:gpu_cache_usage_perc"),
            "{:?}",
            m.names
        );
        let usage = m.kv_cache_usage.unwrap();
        assert!((0.0..=1.0).contains(&usage.mean), "{usage:?}");
    }

    #[test]
    fn a_level_reads_deltas_gauges_over_scrapes_and_its_own_histogram_observations() {
        let base = parse(
            "vllm:num_requests_running 0\nvllm:prompt_tokens_total{model_name=\"m\"} 100\n\
             vllm:generation_tokens_total{model_name=\"m\"} 50\n\
             vllm:time_to_first_token_seconds_bucket{le=\"0.1\"} 2\n\
             vllm:time_to_first_token_seconds_bucket{le=\"0.5\"} 2\n\
             vllm:time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\n\
             vllm:time_to_first_token_seconds_sum 0.1\nvllm:time_to_first_token_seconds_count 2\n",
        )
        .unwrap();
        let mid = "vllm:num_requests_running 4\nvllm:prompt_tokens_total{model_name=\"m\"} 300\n";
        let end = parse(
            "vllm:num_requests_running 2\nvllm:prompt_tokens_total{model_name=\"m\"} 500\n\
             vllm:generation_tokens_total{model_name=\"m\"} 250\n\
             vllm:time_to_first_token_seconds_bucket{le=\"0.1\"} 2\n\
             vllm:time_to_first_token_seconds_bucket{le=\"0.5\"} 12\n\
             vllm:time_to_first_token_seconds_bucket{le=\"+Inf\"} 12\n\
             vllm:time_to_first_token_seconds_sum 3.1\nvllm:time_to_first_token_seconds_count 12\n",
        )
        .unwrap();
        let base = Snapshot::of(&base, Duration::ZERO);
        let scrapes = [
            Snapshot::of(&parse(mid).unwrap(), Duration::from_millis(500)),
            Snapshot::of(&end, Duration::from_millis(1000)),
        ];
        let m = report(&base, &scrapes, Duration::from_millis(500)).unwrap();
        assert_eq!(m.prompt_tokens, Some(400.0));
        assert_eq!(m.generation_tokens, Some(200.0));
        assert_eq!(
            m.running,
            Some(GaugeStats {
                mean: 3.0,
                max: 4.0
            })
        );
        let ttft = m.ttft.unwrap();
        // Ten observations this level, all in (0.1, 0.5]: the median at half of the bucket.
        assert_eq!(ttft.count, 10);
        assert!((ttft.mean_ms.unwrap() - 300.0).abs() < 1e-9, "{ttft:?}");
        assert!((ttft.p50_ms.unwrap() - 300.0).abs() < 1e-9, "{ttft:?}");
        assert_eq!(m.slices.len(), 2);
        assert_eq!(m.slices[0].running, Some(4.0));
        // A restarted server (counters fell) gives no delta, never a negative one.
        let m = report(&scrapes[1], std::slice::from_ref(&base), Duration::ZERO).unwrap();
        assert_eq!(m.prompt_tokens, None);
        assert!(lines("c=1", &m)[1].contains("prompt tokens — · generated tokens —"));
    }

    #[test]
    fn quantiles_follow_prometheus_histogram_quantile_between_finite_bounds() {
        use QuantileIs::*;
        let b = [(1.0, 10.0), (2.0, 20.0), (f64::INFINITY, 20.0)];
        assert_eq!(quantile(&b, 0.75), Some((1.5, Interpolated)));
        assert_eq!(quantile(&b, 1.0), Some((2.0, Interpolated)));
        assert_eq!(quantile(&[(1.0, 0.0)], 0.5), None);
    }

    /// Issue 35: a rank in the first bucket is "≤ its bound", not a value interpolated from 0
    /// (vLLM's queue time: every request under 0.3 s gave a p50 of 150 ms); a rank in the
    /// `+Inf` bucket is "> the last bound".
    #[test]
    fn quantiles_in_the_first_and_the_inf_bucket_are_bounds() {
        use QuantileIs::*;
        let b = [(1.0, 10.0), (2.0, 20.0), (f64::INFINITY, 20.0)];
        assert_eq!(quantile(&b, 0.25), Some((1.0, AtMost)));
        assert_eq!(quantile(&b, 0.5), Some((1.0, AtMost)));
        let inf = [(1.0, 1.0), (f64::INFINITY, 10.0)];
        assert_eq!(quantile(&inf, 0.99), Some((1.0, Above)));
        // vLLM's queue time: 8 requests, all under its first bound (0.3 s).
        let queue = [(0.3, 8.0), (0.5, 8.0), (f64::INFINITY, 8.0)];
        let l = histogram_delta(
            &Histogram::default(),
            &Histogram {
                buckets: queue.iter().map(|&(le, c)| (OrderedBound(le), c)).collect(),
                sum: 0.4,
                count: 8.0,
            },
            "requests",
        )
        .unwrap();
        assert_eq!((l.p50_ms, l.p50_is), (Some(300.0), Some(AtMost)));
        assert_eq!(quantile_text(l.p50_ms, l.p50_is), "≤ 300.0");
        assert_eq!(quantile_text(Some(80_000.0), Some(Above)), "> 80000.0");
        assert_eq!(quantile_text(Some(12.5), Some(Interpolated)), "12.5");
        let json = serde_json::to_value(l).unwrap();
        assert_eq!(json["p50_is"], "at_most", "{json}");
        assert_eq!(json["p50_ms"], 300.0, "{json}");
    }

    /// Issue 35: an ITL histogram counts gaps between tokens, not requests.
    #[test]
    fn counts_are_labelled_by_what_each_histogram_counts() {
        let text = |itl: u32, ttft: u32| {
            format!(
                "vllm:inter_token_latency_seconds_bucket{{le=\"0.01\"}} 0\n\
                 vllm:inter_token_latency_seconds_bucket{{le=\"0.1\"}} {itl}\n\
                 vllm:inter_token_latency_seconds_bucket{{le=\"+Inf\"}} {itl}\n\
                 vllm:inter_token_latency_seconds_sum 1\nvllm:inter_token_latency_seconds_count {itl}\n\
                 vllm:time_to_first_token_seconds_bucket{{le=\"0.1\"}} 0\n\
                 vllm:time_to_first_token_seconds_bucket{{le=\"1\"}} {ttft}\n\
                 vllm:time_to_first_token_seconds_bucket{{le=\"+Inf\"}} {ttft}\n\
                 vllm:time_to_first_token_seconds_sum 1\nvllm:time_to_first_token_seconds_count {ttft}\n"
            )
        };
        let m = report(
            &snap(&text(0, 0), 0),
            &[snap(&text(1008, 16), 500)],
            Duration::ZERO,
        )
        .unwrap();
        assert_eq!(m.itl.unwrap().count_of, "token_gaps");
        assert_eq!(m.ttft.unwrap().count_of, "requests");
        let line = &lines("c=2", &m)[2];
        assert!(line.contains("TTFT 16 requests, mean"), "{line}");
        assert!(line.contains("ITL 1008 token gaps, mean"), "{line}");
        assert!(!line.contains("1008 requests"), "{line}");
    }

    /// Each fixture read by `scripts/prom-parse.py` (prometheus_client's parser; scripts/test.sh
    /// puts it in `TOKSCOPE_PYLIB`): every sample, its labels and value, as this parser reads
    /// them.
    #[test]
    fn the_parser_agrees_with_prometheus_client_on_every_engine_fixture() {
        let root = env!("CARGO_MANIFEST_DIR");
        for name in [
            "llamacpp",
            "vllm",
            "sglang",
            "trtllm",
            "dynamo",
            "ray_vllm",
            "kserve_vllm",
        ] {
            let path = format!("{root}/tests/fixtures/metrics/{name}.txt");
            let mut cmd = std::process::Command::new("python3");
            cmd.arg(format!("{root}/scripts/prom-parse.py")).arg(&path);
            // scripts/test.sh installs prometheus_client there and says so in TOKSCOPE_PYLIB;
            // a plain `cargo test` after it finds it in the same place.
            let lib = std::env::var_os("TOKSCOPE_PYLIB").or_else(|| {
                let home = std::env::var_os("HOME")?;
                let dir = std::path::Path::new(&home).join(".cache/tokscope/pylib");
                dir.is_dir().then(|| dir.into_os_string())
            });
            if let Some(lib) = lib {
                cmd.env("PYTHONPATH", lib);
            }
            let out = cmd.output().expect("python3 runs");
            assert!(
                out.status.success(),
                "{name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let key = |n: &str, labels: &BTreeMap<String, String>| {
                format!("{n} {}", serde_json::to_string(labels).unwrap_or_default())
            };
            let text = std::fs::read_to_string(&path).expect("the fixture");
            let mut theirs: Vec<(String, f64)> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|l| {
                    let (mut n, labels, v): (String, BTreeMap<String, String>, String) =
                        serde_json::from_str(l).expect("one sample per line");
                    // prometheus_client names a counter's sample `_total` even where the
                    // server wrote it without (llama-server's `n_busy_slots_per_decode`).
                    if !text.contains(&format!("{n} ")) && !text.contains(&format!("{n}{{")) {
                        if let Some(base) = n.strip_suffix("_total") {
                            n = base.to_string();
                        }
                    }
                    let v = match v.as_str() {
                        "+Inf" => f64::INFINITY,
                        "-Inf" => f64::NEG_INFINITY,
                        "NaN" => f64::NAN,
                        v => v.parse().expect("a number"),
                    };
                    (key(&n, &labels), v)
                })
                .collect();
            let mut ours: Vec<(String, f64)> = parse(&text)
                .expect("it parses")
                .into_iter()
                .map(|s| (key(&s.name, &s.labels.into_iter().collect()), s.value))
                .collect();
            theirs.sort_by(|a, b| a.0.cmp(&b.0));
            ours.sort_by(|a, b| a.0.cmp(&b.0));
            assert_eq!(ours.len(), theirs.len(), "{name}");
            for (a, b) in ours.iter().zip(&theirs) {
                assert_eq!(a.0, b.0, "{name}");
                assert!(
                    a.1 == b.1 || (a.1.is_nan() && b.1.is_nan()),
                    "{name}: {a:?} {b:?}"
                );
            }
        }
    }

    #[test]
    fn a_server_without_known_metrics_reports_nothing() {
        let s = snap("process_cpu_seconds_total 3\n", 0);
        assert!(report(&s, std::slice::from_ref(&s), Duration::ZERO).is_none());
        assert!(report(&s, &[], Duration::ZERO).is_none());
    }
}
