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
use crate::remote::{
    record, ChatRequest, RemoteClient, RemoteError, RemoteTurn, RequestError, RequestRecord,
    StreamEnd,
};
use arrivals::{next_gap, Rng};
use report::{summarize, LoadSummary, Slo};

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
    /// Prompts for the warm-up alone, never sent in a level (`set_apart_for_warmup`); empty:
    /// the warm-up reuses `prompts`.
    pub warmup: Vec<Vec<ChatMessage>>,
    /// How their lengths were set, in words.
    pub source: String,
}

/// Which form of `/tokenize` and `/detokenize` a server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TokenizeForm {
    /// llama-server: `{"content": TEXT}` → `{"tokens": [...]}`; `{"tokens": [...]}` →
    /// `{"content": TEXT}`.
    LlamaServer,
    /// vLLM and SGLang: `{"model": M, "prompt": TEXT}` → `{"tokens": [...], "count": N}`;
    /// `{"model": M, "tokens": [...]}` → `{"prompt": TEXT}` (vLLM) or `{"text": TEXT}`.
    Vllm,
}

impl TokenizeForm {
    fn label(self) -> &'static str {
        match self {
            TokenizeForm::LlamaServer => "llama-server's form, {\"content\"}",
            TokenizeForm::Vllm => "vLLM's and SGLang's form, {\"model\", \"prompt\"}",
        }
    }

    fn tokenize_body(self, model: &str, text: &str) -> serde_json::Value {
        match self {
            TokenizeForm::LlamaServer => json!({"content": text}),
            // Without the BOS a chat template adds again (vLLM adds it by default).
            TokenizeForm::Vllm => {
                json!({"model": model, "prompt": text, "add_special_tokens": false})
            }
        }
    }

    fn detokenize_body(self, model: &str, tokens: &[u64]) -> serde_json::Value {
        match self {
            TokenizeForm::LlamaServer => json!({"tokens": tokens}),
            TokenizeForm::Vllm => json!({"model": model, "tokens": tokens}),
        }
    }
}

/// The token ids of a `/tokenize` answer (either form's), or what is wrong with it.
fn tokens_of(answer: &serde_json::Value) -> Result<Vec<u64>, String> {
    let tokens: Vec<u64> = answer
        .get("tokens")
        .and_then(|t| t.as_array())
        .ok_or("its answer has no \"tokens\" list")?
        .iter()
        .map(|t| t.as_u64())
        .collect::<Option<_>>()
        .ok_or("its \"tokens\" are not all token ids")?;
    match answer.get("count").and_then(|c| c.as_u64()) {
        Some(n) if n != tokens.len() as u64 => Err(format!(
            "its \"count\" ({n}) is not the number of its \"tokens\" ({})",
            tokens.len()
        )),
        _ => Ok(tokens),
    }
}

/// `text` as the server's token ids: llama-server's form first, and vLLM's (SGLang's) when
/// the server refuses it with a 4xx. Err: why neither gave tokens, for stderr.
async fn tokenize(
    client: &RemoteClient,
    model: &str,
    text: &str,
) -> Result<(Vec<u64>, TokenizeForm), String> {
    let mut why = Vec::new();
    for form in [TokenizeForm::LlamaServer, TokenizeForm::Vllm] {
        match client
            .root_post("/tokenize", &form.tokenize_body(model, text))
            .await
        {
            Ok(answer) => {
                return tokens_of(&answer)
                    .map(|t| (t, form))
                    .map_err(|e| format!("{} ({})", e, form.label()))
            }
            Err(e) => {
                why.push(format!("{e} ({})", form.label()));
                // A 4xx: this server may speak the other form.
                if !matches!(e, RemoteError::Status { status, .. } if (400..500).contains(&status))
                {
                    break;
                }
            }
        }
    }
    Err(why.join("; then "))
}

/// `tokens` as text, in the form `/tokenize` took.
async fn detokenize(
    client: &RemoteClient,
    form: TokenizeForm,
    model: &str,
    tokens: &[u64],
) -> Result<String, String> {
    let answer = client
        .root_post("/detokenize", &form.detokenize_body(model, tokens))
        .await
        .map_err(|e| e.to_string())?;
    ["content", "prompt", "text"]
        .iter()
        .find_map(|k| answer.get(*k)?.as_str())
        .map(String::from)
        .ok_or_else(|| "its answer has no \"content\", \"prompt\" or \"text\" string".into())
}

impl PromptSet {
    /// Cuts `text` into `count` prompts of `lo..=hi` tokens with the server's own tokenizer
    /// (`/tokenize` and `/detokenize`, llama-server's or vLLM's form); when it has none, of
    /// `lo..=hi` words. `warmup` more are cut after them for the warm-up alone. Also returns
    /// what to say on stderr: which form was used, or why the prompts were cut by words.
    pub(crate) async fn from_text(
        client: &RemoteClient,
        model: &str,
        text: &str,
        (lo, hi): (usize, usize),
        (count, warmup): (usize, usize),
        seed: u64,
    ) -> (Self, String) {
        let mut rng = Rng::new(seed);
        let total = count + warmup;
        let set = |prompts, source: &str| {
            Self {
                prompts,
                warmup: Vec::new(),
                source: source.into(),
            }
            .set_apart_for_warmup(warmup)
        };
        let why_words = match tokenize(client, model, text).await {
            Ok((tokens, _)) if tokens.len() <= hi => format!(
                "the text is {} tokens, fewer than --input-len's {hi}",
                tokens.len()
            ),
            Ok((tokens, form)) => {
                let cut = async {
                    let mut prompts = Vec::new();
                    while prompts.len() < total {
                        let n = rng.range(lo, hi);
                        let start = rng.range(0, tokens.len() - n);
                        let p = detokenize(client, form, model, &tokens[start..start + n]).await?;
                        prompts.push(vec![ChatMessage::new(Role::User, p)]);
                    }
                    Ok::<_, String>(prompts)
                };
                match cut.await {
                    Ok(prompts) => return (
                        set(prompts, "cut to --input-len tokens of the server's tokenizer (/tokenize)"),
                        format!(
                            "prompts: cut to --input-len tokens by the server's /tokenize and /detokenize ({})",
                            form.label()
                        ),
                    ),
                    Err(e) => format!("/detokenize failed: {e} ({})", form.label()),
                }
            }
            Err(why) => format!("/tokenize failed: {why}"),
        };
        let words: Vec<&str> = text.split_whitespace().collect();
        let prompts = (0..total)
            .map(|_| {
                let n = rng.range(lo, hi).min(words.len());
                let start = rng.range(0, words.len() - n);
                vec![ChatMessage::new(
                    Role::User,
                    words[start..start + n].join(" "),
                )]
            })
            .collect();
        (
            set(prompts, "cut to --input-len words (no usable /tokenize on the server; token counts come from its usage)"),
            format!("prompts: cut to --input-len words, not tokens: {why_words}; token counts come from the server's usage (a server with /tokenize in llama-server's or vLLM's form gives exact lengths)"),
        )
    }

    /// Keeps the last `n` prompts for the warm-up alone, where at least one is left for the
    /// levels: a warm-up prompt is then never one a level sends, so the server's prompt cache
    /// holds none of the level's prompts when it starts.
    pub(crate) fn set_apart_for_warmup(mut self, n: usize) -> Self {
        if n > 0 && self.prompts.len() > n {
            self.warmup = self.prompts.split_off(self.prompts.len() - n);
        }
        self
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

/// One of the plan's requests (greedy, at most `max_tokens`), streamed until `stop`.
async fn stream(
    client: &RemoteClient,
    plan: &LoadPlan,
    messages: Vec<ChatMessage>,
    max_tokens: u32,
    stop: &AtomicBool,
) -> Result<RemoteTurn, RemoteError> {
    let request = ChatRequest {
        model: plan.model.clone(),
        messages,
        max_tokens: Some(max_tokens),
        temperature: Some(0.0),
        top_p: None,
        seed: None,
        ignore_eos: plan.ignore_eos,
    };
    let mut sink = |_: &str, _: Duration| {};
    client
        .stream_chat(&request, None, &|| stop.load(Ordering::SeqCst), &mut sink)
        .await
}

async fn one(
    client: &RemoteClient,
    plan: &LoadPlan,
    messages: Vec<ChatMessage>,
    stop: &AtomicBool,
) -> Result<RequestRecord, RequestError> {
    match stream(client, plan, messages, plan.output_len, stop).await {
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
    let pool = if prompts.warmup.is_empty() {
        &prompts.prompts
    } else {
        &prompts.warmup
    };
    for i in 0..plan.warmup {
        let messages = pool[i % pool.len()].clone();
        // A warm-up failure says the server is not usable: stop here with its error.
        let turn = match stream(client, plan, messages, plan.output_len.min(16), stop).await {
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
    let cpu_before = process_cpu();
    let started = Instant::now();
    let results: Arc<std::sync::Mutex<Vec<Result<RequestRecord, RequestError>>>> = Arc::default();
    let mut next_index = 0;
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
                    if sending_over(next_index) {
                        break;
                    }
                    spawn_one(&mut tasks, next_index);
                    next_index += 1;
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
                if sending_over(next_index) {
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
                spawn_one(&mut tasks, next_index);
                next_index += 1;
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
    let client_cpu = process_cpu()
        .zip(cpu_before)
        .map(|(after, before)| after.saturating_sub(before));
    let (records, errors): (Vec<_>, Vec<_>) = results
        .lock()
        .map(|r| {
            let records = r.iter().filter_map(|o| o.as_ref().ok().cloned()).collect();
            (
                records,
                r.iter().filter_map(|o| o.as_ref().err().cloned()).collect(),
            )
        })
        .unwrap_or_default();
    Ok(
        summarize(plan.arrivals.label(), &records, &errors, elapsed, plan.slo)
            .with_client_cpu(client_cpu, u32::try_from(client_threads()).unwrap_or(1)),
    )
}

/// The runtime threads that read `load`'s streams: one per core, at most 4. One thread reads
/// about 400,000 chunks a second here (2.4 µs a chunk on the 2-core VM: raw
/// `benchmarks/stream-quiet-20261207.txt`), which 64 streams of 10,000 tok/s exceed.
pub(crate) fn client_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().clamp(1, 4))
}

/// The CPU time (user + system, every thread) this process has used so far: `getrusage`,
/// to the microsecond (`/proc/self/stat` counts in 10 ms ticks, too coarse for a level).
#[allow(unsafe_code)]
fn process_cpu() -> Option<Duration> {
    // SAFETY: getrusage writes one `rusage` through a valid pointer to one; an all-zero
    // `rusage` is a valid value, so it is initialised whatever the call does.
    let usage = unsafe {
        let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        let ok = libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr()) == 0;
        ok.then(|| u.assume_init())
    }?;
    let time = |t: libc::timeval| {
        Some(
            Duration::from_secs(u64::try_from(t.tv_sec).ok()?)
                + Duration::from_micros(u64::try_from(t.tv_usec).ok()?),
        )
    };
    Some(time(usage.ru_utime)? + time(usage.ru_stime)?)
}
