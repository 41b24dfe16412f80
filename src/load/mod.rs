//! The serving load test: many streamed requests against one OpenAI-compatible server, sent
//! at a rate (a gamma arrival process) or held at a concurrency, each measured by the remote
//! client exactly as `run --url` measures one; then reduced to the serving table and goodput.

pub(crate) mod arrivals;
pub(crate) mod capacity;
pub(crate) mod publish;
pub(crate) mod report;
pub(crate) mod scrape;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::engine::{ChatMessage, Role};
use crate::remote::{ChatRequest, RemoteClient, RemoteError, RemoteTurn, StreamEnd};
use arrivals::{next_gap, Rng};
use report::{summarize, LoadSummary, RequestError, RequestRecord, Slo};

/// How requests arrive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Arrivals {
    /// Requests per second, gamma-distributed gaps of this shape (1 = Poisson).
    Rate { per_s: f64, burstiness: f64 },
    /// This many requests in flight at all times.
    Concurrency(usize),
}

impl Arrivals {
    pub(crate) fn label(&self) -> String {
        match self {
            Arrivals::Rate { per_s, burstiness } if *burstiness == 1.0 => {
                format!("rate={per_s}/s")
            }
            Arrivals::Rate { per_s, burstiness } => {
                format!("rate={per_s}/s burstiness={burstiness}")
            }
            Arrivals::Concurrency(c) => format!("concurrency={c}"),
        }
    }
}

/// One load level to run.
#[derive(Debug, Clone)]
pub(crate) struct LoadPlan {
    pub arrivals: Arrivals,
    /// Stop sending after this many measured requests…
    pub requests: Option<usize>,
    /// …or after this long, whichever comes first.
    pub duration: Option<Duration>,
    /// Requests sent (one at a time) before measuring, excluded from every figure.
    pub warmup: usize,
    pub model: String,
    pub output_len: u32,
    pub ignore_eos: bool,
    pub slo: Option<Slo>,
    pub seed: u64,
    /// How long to wait for requests in flight after a stop.
    pub drain: Duration,
}

/// Prompts the load test draws from, in order, round robin.
#[derive(Debug, Clone)]
pub(crate) struct PromptSet {
    pub prompts: Vec<Vec<ChatMessage>>,
    /// How their lengths were set, in words.
    pub source: String,
}

impl PromptSet {
    /// Cuts `text` into prompts of `lo..=hi` tokens with the server's own tokenizer
    /// (llama-server's `/tokenize` and `/detokenize`); when it has none, of `lo..=hi` words.
    pub(crate) async fn from_text(
        client: &RemoteClient,
        text: &str,
        (lo, hi): (usize, usize),
        count: usize,
        seed: u64,
    ) -> Self {
        let mut rng = Rng::new(seed);
        let tokens: Option<Vec<u64>> = client
            .root_post("/tokenize", &json!({"content": text}))
            .await
            .ok()
            .and_then(|v| {
                v.get("tokens")?
                    .as_array()?
                    .iter()
                    .map(|t| t.as_u64())
                    .collect()
            });
        let mut prompts = Vec::new();
        if let Some(tokens) = tokens.filter(|t| t.len() > hi) {
            for _ in 0..count {
                let n = rng.range(lo, hi);
                let start = rng.range(0, tokens.len() - n);
                let slice = &tokens[start..start + n];
                let piece = client
                    .root_post("/detokenize", &json!({"tokens": slice}))
                    .await
                    .ok()
                    .and_then(|v| v.get("content")?.as_str().map(String::from));
                match piece {
                    Some(p) => prompts.push(vec![ChatMessage::new(Role::User, p)]),
                    None => break,
                }
            }
            if prompts.len() == count {
                return Self {
                    prompts,
                    source: "cut to --input-len tokens of the server's tokenizer (/tokenize)"
                        .into(),
                };
            }
        }
        let words: Vec<&str> = text.split_whitespace().collect();
        let prompts = (0..count)
            .map(|_| {
                let n = rng.range(lo, hi).min(words.len());
                let start = rng.range(0, words.len() - n);
                vec![ChatMessage::new(
                    Role::User,
                    words[start..start + n].join(" "),
                )]
            })
            .collect();
        Self {
            prompts,
            source: "cut to --input-len words (the server has no /tokenize; token counts come from its usage)".into(),
        }
    }
}

/// Live counters for the progress line.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    pub sent: AtomicUsize,
    pub done: AtomicUsize,
    pub failed: AtomicUsize,
    pub in_flight: AtomicUsize,
}

/// A measured request's record, or the kind of its error.
fn record(turn: &RemoteTurn) -> Result<RequestRecord, RequestError> {
    match &turn.end {
        Ok(StreamEnd::Done) => {}
        Ok(StreamEnd::Cancelled) => {
            return Err(RequestError::new("cancelled", "stopped by Ctrl-C"))
        }
        Err(e) => return Err(RequestError::new(e.kind(), e.to_string())),
    }
    let t = &turn.timeline;
    let usage = t.usage.ok_or_else(|| {
        if turn.notes.is_empty() {
            RequestError::new("no_usage", "the stream ended without a usage object")
        } else {
            // The usage came but could not be true (the client dropped it): say what it was.
            RequestError::new("implausible_usage", turn.notes.join("; "))
        }
    })?;
    let ttft = t
        .ttft()
        .ok_or_else(|| RequestError::new("no_content", "the stream had no content chunk"))?;
    let e2e = t.e2e();
    let n = usage.completion_tokens;
    let tpot = (n > 1).then(|| (e2e.saturating_sub(ttft)) / u32::try_from(n - 1).unwrap_or(1));
    Ok(RequestRecord {
        ttft,
        tpot,
        itl: t.inter_token_latencies(),
        chunk_gaps: t
            .chunks
            .windows(2)
            .map(|w| w[1].at.saturating_sub(w[0].at))
            .collect(),
        e2e,
        prompt_tokens: usage.prompt_tokens,
        completion_tokens: n,
        server_prompt_n: t.server_timings.map(|s| s.prompt_n),
        vllm: t.vllm_record(),
    })
}

async fn one(
    client: &RemoteClient,
    plan: &LoadPlan,
    messages: Vec<ChatMessage>,
    stop: &AtomicBool,
) -> Result<RequestRecord, RequestError> {
    let request = ChatRequest {
        model: plan.model.clone(),
        messages,
        max_tokens: Some(plan.output_len),
        temperature: Some(0.0),
        top_p: None,
        seed: None,
        ignore_eos: plan.ignore_eos,
    };
    let mut sink = |_: &str, _: Duration| {};
    match client
        .stream_chat(&request, None, &|| stop.load(Ordering::SeqCst), &mut sink)
        .await
    {
        Ok(turn) => record(&turn),
        Err(e) => Err(RequestError::new(e.kind(), e.to_string())),
    }
}

/// The level's warm-up requests (`plan.warmup`, short answers), before its clock starts. A
/// failure says the server is not usable; Ctrl-C ends it early.
pub(crate) async fn warm_up(
    client: &RemoteClient,
    plan: &LoadPlan,
    prompts: &PromptSet,
    stop: &AtomicBool,
) -> Result<(), RemoteError> {
    for i in 0..plan.warmup {
        let messages = prompts.prompts[i % prompts.prompts.len()].clone();
        // A warm-up failure says the server is not usable: stop here with its error.
        let request = ChatRequest {
            model: plan.model.clone(),
            messages,
            max_tokens: Some(plan.output_len.min(16)),
            temperature: Some(0.0),
            top_p: None,
            seed: None,
            ignore_eos: plan.ignore_eos,
        };
        let mut sink = |_: &str, _: Duration| {};
        let stopped = || stop.load(Ordering::SeqCst);
        let turn = match client
            .stream_chat(&request, None, &stopped, &mut sink)
            .await
        {
            Err(RemoteError::Cancelled) => break,
            other => other?,
        };
        if matches!(turn.end, Ok(StreamEnd::Cancelled)) {
            // Ctrl-C during the warm-up: no level is run, the (empty) report is printed.
            break;
        }
        turn.end?;
    }
    Ok(())
}

/// Runs one load level after its warm-up (`warm_up`). `stop` (Ctrl-C) ends sending; requests
/// in flight get `plan.drain` to finish, after which they are dropped (closing their
/// connections). Each measured request is also counted in `export` (a series of its own for
/// the level), for `--prometheus` and `--otlp`.
pub(crate) async fn run_level(
    client: Arc<RemoteClient>,
    plan: &LoadPlan,
    prompts: &PromptSet,
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
    export: Option<&publish::Shared>,
) -> Result<LoadSummary, RemoteError> {
    let limit = plan.requests.unwrap_or(usize::MAX);
    let deadline = plan.duration.map(|d| Instant::now() + d);
    if let Some(Ok(mut m)) = export.map(|m| m.lock()) {
        m.start_level(&plan.arrivals.label(), std::time::SystemTime::now());
    }
    let started = Instant::now();
    let results = Arc::new(std::sync::Mutex::new(Vec::<
        Result<RequestRecord, RequestError>,
    >::new()));
    let next_index = Arc::new(AtomicUsize::new(0));
    let sending_over = |sent: usize| {
        stop.load(Ordering::SeqCst)
            || sent >= limit
            || deadline.is_some_and(|d| Instant::now() >= d)
    };
    let cancel_streams = Arc::new(AtomicBool::new(false));
    let mut tasks = tokio::task::JoinSet::new();
    let spawn_one = |tasks: &mut tokio::task::JoinSet<()>, index: usize| {
        let client = Arc::clone(&client);
        let plan = plan.clone();
        let messages = prompts.prompts[index % prompts.prompts.len()].clone();
        let results = Arc::clone(&results);
        let progress = Arc::clone(&progress);
        let cancel = Arc::clone(&cancel_streams);
        let export = export.cloned();
        progress.sent.fetch_add(1, Ordering::SeqCst);
        progress.in_flight.fetch_add(1, Ordering::SeqCst);
        if let Some(Ok(mut m)) = export.as_ref().map(|m| m.lock()) {
            m.sent();
        }
        tasks.spawn(async move {
            let sent = Instant::now();
            let outcome = one(&client, &plan, messages, &cancel).await;
            if let Some(Ok(mut m)) = export.as_ref().map(|m| m.lock()) {
                match &outcome {
                    Ok(r) => m.observe(&r.observed()),
                    Err(e) => m.failed(&e.kind, sent.elapsed()),
                }
            }
            progress.in_flight.fetch_sub(1, Ordering::SeqCst);
            match &outcome {
                Ok(_) => progress.done.fetch_add(1, Ordering::SeqCst),
                Err(_) => progress.failed.fetch_add(1, Ordering::SeqCst),
            };
            if let Ok(mut r) = results.lock() {
                r.push(outcome);
            }
        });
    };
    match plan.arrivals {
        Arrivals::Concurrency(c) => {
            let c = c.max(1);
            loop {
                while tasks.len() < c {
                    let i = next_index.load(Ordering::SeqCst);
                    if sending_over(i) {
                        break;
                    }
                    next_index.fetch_add(1, Ordering::SeqCst);
                    spawn_one(&mut tasks, i);
                }
                if tasks.is_empty() {
                    break;
                }
                tokio::select! {
                    _ = tasks.join_next() => {}
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
                if stop.load(Ordering::SeqCst) {
                    break;
                }
            }
        }
        Arrivals::Rate { per_s, burstiness } => {
            let mut rng = Rng::new(plan.seed);
            let mut next_at = Instant::now();
            loop {
                let i = next_index.load(Ordering::SeqCst);
                if sending_over(i) {
                    break;
                }
                let now = Instant::now();
                if next_at > now {
                    tokio::select! {
                        _ = tokio::time::sleep(next_at - now) => {}
                        _ = tasks.join_next(), if !tasks.is_empty() => { continue; }
                    }
                    continue;
                }
                next_index.fetch_add(1, Ordering::SeqCst);
                spawn_one(&mut tasks, i);
                next_at += next_gap(&mut rng, per_s, burstiness);
            }
        }
    }
    // Let the requests in flight finish; after a stop, for at most `drain`.
    let wait_all = async { while tasks.join_next().await.is_some() {} };
    if stop.load(Ordering::SeqCst) {
        if tokio::time::timeout(plan.drain, wait_all).await.is_err() {
            cancel_streams.store(true, Ordering::SeqCst);
            tasks.abort_all();
        }
    } else {
        wait_all.await;
    }
    let elapsed = started.elapsed();
    let outcomes = results.lock().map(|r| r.clone()).unwrap_or_default();
    let (mut records, mut errors) = (Vec::new(), Vec::new());
    for o in outcomes {
        match o {
            Ok(r) => records.push(r),
            Err(e) => errors.push(e),
        }
    }
    Ok(summarize(
        plan.arrivals.label(),
        &records,
        &errors,
        elapsed,
        plan.slo,
    ))
}
