//! The engine thread's body: load a model, create its context, then serve generation requests
//! until told to load another model or to stop. `LlamaContext` borrows the model and is not
//! `Send`, so both live on this thread's stack for their whole life.

use std::num::NonZeroU32;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;

use super::backend;
use super::error::llama_says;
use super::model_info::fingerprint;
use super::prompt::template_for_architecture;
use super::{
    check_model_file, common_prefix_len, completion_transcript, quantization_name, ChatMessage,
    EngineCommand, EngineConfig, EngineError, EngineEvent, EventSender, GenerateRequest,
    LlamaCounters, ModelInfo, SamplingParams, StopMatcher, StopReason, TemplateChoice, TurnReport,
    Utf8Stream, COMPLETION_STOPS,
};
use crate::metrics::TurnTimeline;

/// The llama.cpp bindings this build links (pinned in Cargo.toml).
pub const LLAMA_CPP_BINDINGS: &str = "llama-cpp-sys-2 0.1.160";

enum Next {
    Load(EngineConfig),
    Shutdown,
}

pub(super) fn run(
    config: EngineConfig,
    commands: mpsc::Receiver<EngineCommand>,
    events: EventSender,
    cancel_through: Arc<AtomicU64>,
) {
    let backend = match backend() {
        Ok(b) => b,
        Err(e) => {
            let _ = events.send(EngineEvent::LoadFailed(e));
            return;
        }
    };
    let mut next = Next::Load(config);
    while let Next::Load(cfg) = next {
        next = load_and_serve(backend, &cfg, &commands, &events, &cancel_through);
    }
}

fn load_and_serve(
    backend: &LlamaBackend,
    cfg: &EngineConfig,
    commands: &mpsc::Receiver<EngineCommand>,
    events: &EventSender,
    cancel_through: &Arc<AtomicU64>,
) -> Next {
    let started = Instant::now();
    let model = match load_model(backend, cfg, events) {
        Ok(m) => m,
        Err(e) => {
            let _ = events.send(EngineEvent::LoadFailed(e));
            return serve_without_model(commands, events);
        }
    };
    let mut session = match Session::new(backend, &model, cfg, started) {
        Ok(s) => s,
        Err(e) => {
            let _ = events.send(EngineEvent::LoadFailed(e));
            return serve_without_model(commands, events);
        }
    };
    let _ = events.send(EngineEvent::Ready(Box::new(session.info.clone())));
    loop {
        match commands.recv() {
            Ok(EngineCommand::Generate(req)) => {
                let id = req.id;
                let event = match session.generate(&req, events, cancel_through) {
                    Ok(report) => EngineEvent::Finished {
                        request_id: id,
                        report: Box::new(report),
                    },
                    Err(error) => EngineEvent::Failed {
                        request_id: id,
                        error,
                    },
                };
                let _ = events.send(event);
            }
            Ok(EngineCommand::LoadModel(c)) => return Next::Load(c),
            Ok(EngineCommand::Shutdown) | Err(_) => return Next::Shutdown,
        }
    }
}

fn serve_without_model(commands: &mpsc::Receiver<EngineCommand>, events: &EventSender) -> Next {
    loop {
        match commands.recv() {
            Ok(EngineCommand::Generate(req)) => {
                let _ = events.send(EngineEvent::Failed {
                    request_id: req.id,
                    error: EngineError::NoModel,
                });
            }
            Ok(EngineCommand::LoadModel(c)) => return Next::Load(c),
            Ok(EngineCommand::Shutdown) | Err(_) => return Next::Shutdown,
        }
    }
}

fn load_model(
    backend: &LlamaBackend,
    cfg: &EngineConfig,
    events: &EventSender,
) -> Result<LlamaModel, EngineError> {
    let path = &cfg.model_path;
    check_model_file(path)?;
    crate::logging::clear_llama_problems();
    let progress_events = events.clone();
    let mut last_percent = -1i32;
    let params = LlamaModelParams::default()
        .with_n_gpu_layers(requested_gpu_layers(cfg.settings.n_gpu_layers))
        .with_progress_callback(move |progress| {
            let percent = (progress * 100.0) as i32;
            if percent != last_percent {
                last_percent = percent;
                let _ = progress_events.send(EngineEvent::Loading { progress });
            }
            true
        });
    LlamaModel::load_from_file(backend, path, &params).map_err(|_| EngineError::LoadFailed {
        path: path.clone(),
        llama_says: llama_says(),
    })
}

/// Layers to offload: all of them by default when built with CUDA, none on the CPU build.
fn requested_gpu_layers(setting: Option<u32>) -> u32 {
    match setting {
        Some(n) => n,
        None if cfg!(feature = "cuda") => u32::MAX,
        None => 0,
    }
}

/// How prompts are built for the loaded model.
enum PromptStyle {
    Chat(LlamaChatTemplate),
    Completion,
}

/// The loaded model's context and the tokens its KV cache holds.
struct Session<'m> {
    model: &'m LlamaModel,
    ctx: LlamaContext<'m>,
    info: ModelInfo,
    style: PromptStyle,
    n_batch: usize,
    /// Tokens whose KV entries are in sequence 0, in position order.
    cached: Vec<LlamaToken>,
}

impl<'m> Session<'m> {
    fn new(
        backend: &LlamaBackend,
        model: &'m LlamaModel,
        cfg: &EngineConfig,
        started: Instant,
    ) -> Result<Self, EngineError> {
        let s = &cfg.settings;
        let threads = i32::try_from(s.threads).unwrap_or(1);
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(s.n_ctx))
            .with_n_batch(s.n_batch)
            .with_n_ubatch(s.n_batch.min(512))
            .with_n_threads(threads)
            .with_n_threads_batch(threads)
            .with_no_perf(false);
        crate::logging::clear_llama_problems();
        let ctx = model
            .new_context(backend, params)
            .map_err(|_| EngineError::ContextFailed {
                n_ctx: s.n_ctx,
                llama_says: llama_says(),
            })?;
        let (style, template, template_note) = resolve_template(model, &s.template)?;
        let info = model_info(model, &ctx, cfg, template, template_note, started);
        Ok(Self {
            model,
            n_batch: ctx.n_batch().max(1) as usize,
            ctx,
            info,
            style,
            cached: Vec::new(),
        })
    }

    fn build_prompt(&self, messages: &[ChatMessage]) -> Result<String, EngineError> {
        match &self.style {
            PromptStyle::Completion => Ok(completion_transcript(messages)),
            PromptStyle::Chat(template) => {
                let chat = messages
                    .iter()
                    .map(|m| LlamaChatMessage::new(m.role.as_str().into(), m.content.clone()))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| EngineError::Template(e.to_string()))?;
                self.model
                    .apply_chat_template(template, &chat, true)
                    .map_err(|e| EngineError::Template(e.to_string()))
            }
        }
    }

    fn tokenize(&self, prompt: &str) -> Vec<LlamaToken> {
        let vocab = self.model.vocab();
        let mut tokens = vocab.tokenize(prompt.as_bytes(), true, true);
        // A template that writes the BOS text itself would otherwise give two BOS tokens.
        let bos = vocab.bos();
        if tokens.len() >= 2 && tokens[0] == bos && tokens[1] == bos {
            tokens.remove(0);
        }
        tokens
    }

    fn generate(
        &mut self,
        req: &GenerateRequest,
        events: &EventSender,
        cancel_through: &AtomicU64,
    ) -> Result<TurnReport, EngineError> {
        let result = self.generate_inner(req, events, cancel_through);
        if result.is_err() {
            // The KV cache may hold a half-decoded batch: start the next turn from scratch.
            self.ctx.clear_kv_cache();
            self.cached.clear();
        }
        result
    }

    fn generate_inner(
        &mut self,
        req: &GenerateRequest,
        events: &EventSender,
        cancel_through: &AtomicU64,
    ) -> Result<TurnReport, EngineError> {
        let t0 = req.submitted_at;
        let cancelled = || cancel_through.load(Ordering::SeqCst) >= req.id;
        let n_ctx = self.ctx.n_ctx() as usize;
        let mut timeline = TurnTimeline::default();

        let step = Instant::now();
        let prompt = self.build_prompt(&req.messages)?;
        let tokens = self.tokenize(&prompt);
        timeline.template_tokenize = step.elapsed();
        if tokens.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        if tokens.len() >= n_ctx {
            return Err(EngineError::PromptTooLong {
                prompt_tokens: tokens.len(),
                n_ctx: n_ctx as u32,
            });
        }

        // KV reuse: keep the cached prefix, prefill the rest. At least one token is decoded
        // so that there are logits to sample from.
        let reuse = common_prefix_len(&self.cached, &tokens).min(tokens.len() - 1);
        self.ctx
            .clear_kv_cache_seq(Some(0), Some(reuse as u32), None)
            .map_err(|e| EngineError::Decode(e.to_string()))?;
        self.cached.truncate(reuse);
        timeline.prompt_tokens = tokens.len();
        timeline.cached_tokens = reuse;
        let _ = events.send(EngineEvent::PrefillStarted {
            request_id: req.id,
            prompt_tokens: tokens.len(),
            cached_tokens: reuse,
        });
        self.ctx.reset_timings();

        let mut batch = LlamaBatch::new(self.n_batch, 1);
        let step = Instant::now();
        let mut logits_index = 0i32;
        let new_tokens = &tokens[reuse..];
        let n_chunks = new_tokens.len().div_ceil(self.n_batch);
        let mut stop_reason = None;
        for (chunk_no, chunk) in new_tokens.chunks(self.n_batch).enumerate() {
            if cancelled() {
                stop_reason = Some(StopReason::Cancelled);
                break;
            }
            batch.clear();
            let last_chunk = chunk_no + 1 == n_chunks;
            for (i, token) in chunk.iter().enumerate() {
                let pos = (self.cached.len() + i) as i32;
                let logits = last_chunk && i + 1 == chunk.len();
                batch
                    .add(*token, pos, &[0], logits)
                    .map_err(|e| EngineError::Decode(e.to_string()))?;
            }
            self.ctx
                .decode(&mut batch)
                .map_err(|e| EngineError::Decode(e.to_string()))?;
            self.cached.extend_from_slice(chunk);
            logits_index = chunk.len() as i32 - 1;
        }
        self.ctx.synchronize();
        timeline.prefill = step.elapsed();
        timeline.prefill_done_at = t0.elapsed();
        let _ = events.send(EngineEvent::PrefillDone {
            request_id: req.id,
            template_tokenize: timeline.template_tokenize,
            prefill: timeline.prefill,
            at: timeline.prefill_done_at,
        });

        let first_logits = (req.capture_first_logits && stop_reason.is_none())
            .then(|| self.ctx.get_logits_ith(logits_index).to_vec());
        let vocab = self.model.vocab();
        let mut sampler = build_sampler(&req.sampling, self.model.n_vocab());
        let mut utf8 = Utf8Stream::new();
        let mut stops = match self.style {
            PromptStyle::Completion if !req.ignore_eos => StopMatcher::new(&COMPLETION_STOPS),
            _ => StopMatcher::new(&[]),
        };
        let mut text = String::new();
        while stop_reason.is_none() {
            let token = sampler.sample(&self.ctx, logits_index);
            if vocab.is_eog(token) && !req.ignore_eos {
                stop_reason = Some(StopReason::EndOfGeneration);
                break;
            }
            let piece = vocab.token_to_piece(token, false, None);
            let (visible, hit_stop) = stops.push(&utf8.push(&piece));
            let at = t0.elapsed();
            let index = timeline.token_ready_at.len();
            timeline.token_ready_at.push(at);
            text.push_str(&visible);
            let _ = events.send(EngineEvent::Token {
                request_id: req.id,
                index,
                text: visible,
                at,
            });
            stop_reason = if hit_stop {
                Some(StopReason::StopString)
            } else if timeline.token_ready_at.len() >= req.max_tokens as usize {
                Some(StopReason::MaxTokens)
            } else if self.cached.len() + 1 >= n_ctx {
                Some(StopReason::ContextFull)
            } else if cancelled() {
                Some(StopReason::Cancelled)
            } else {
                None
            };
            if stop_reason.is_some() {
                break;
            }
            batch.clear();
            batch
                .add(token, self.cached.len() as i32, &[0], true)
                .map_err(|e| EngineError::Decode(e.to_string()))?;
            let step = Instant::now();
            self.ctx
                .decode(&mut batch)
                .map_err(|e| EngineError::Decode(e.to_string()))?;
            self.ctx.synchronize();
            timeline.decode_compute += step.elapsed();
            timeline.decode_calls += 1;
            self.cached.push(token);
            logits_index = 0;
        }
        let stop_reason = stop_reason.unwrap_or(StopReason::EndOfGeneration);
        if stop_reason == StopReason::StopString {
            // The transcript's separator before the next "Question:" is not part of the answer.
            text.truncate(text.trim_end().len());
        } else {
            let (tail, _) = stops.push(&utf8.finish());
            text.push_str(&tail);
            text.push_str(&stops.finish());
        }
        timeline.finished_at = t0.elapsed();
        let t = self.ctx.timings();
        Ok(TurnReport {
            text,
            stop_reason,
            timeline,
            context_used: self.cached.len(),
            llama_counters: LlamaCounters {
                prompt_eval_ms: t.t_p_eval_ms(),
                prompt_eval_tokens: t.n_p_eval(),
                eval_ms: t.t_eval_ms(),
                eval_tokens: t.n_eval(),
            },
            first_logits,
        })
    }
}

/// llama.cpp's usual chain order: penalties → top-k → top-p → min-p → temperature → draw.
fn build_sampler(p: &SamplingParams, n_vocab: i32) -> LlamaSampler {
    let mut chain = Vec::new();
    if p.repeat_penalty != 1.0 {
        chain.push(LlamaSampler::penalties(
            n_vocab,
            p.repeat_last_n as i32,
            p.repeat_penalty,
            0.0,
            0.0,
        ));
    }
    if p.temperature <= 0.0 {
        chain.push(LlamaSampler::greedy());
    } else {
        if p.top_k > 0 {
            chain.push(LlamaSampler::top_k(p.top_k as i32));
        }
        chain.push(LlamaSampler::top_p(p.top_p, 1));
        chain.push(LlamaSampler::min_p(p.min_p, 1));
        chain.push(LlamaSampler::temp(p.temperature));
        chain.push(LlamaSampler::dist(p.seed));
    }
    LlamaSampler::chain(chain, false)
}

/// Decide how prompts are built: (style, label for the stamp, note when not the model's own).
fn resolve_template(
    model: &LlamaModel,
    choice: &TemplateChoice,
) -> Result<(PromptStyle, String, Option<String>), EngineError> {
    let probe = |t: &LlamaChatTemplate| -> Result<(), String> {
        let msg =
            LlamaChatMessage::new("user".into(), "hello".into()).map_err(|e| e.to_string())?;
        model
            .apply_chat_template(t, &[msg], true)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let embedded = model.chat_template(None).ok();
    let named = |name: &str| -> Result<PromptStyle, EngineError> {
        let t = LlamaChatTemplate::new(name).map_err(|e| EngineError::Template(e.to_string()))?;
        probe(&t).map_err(|e| {
            EngineError::Template(format!(
                "llama.cpp has no built-in template named `{name}` ({e})"
            ))
        })?;
        Ok(PromptStyle::Chat(t))
    };
    match choice {
        TemplateChoice::Completion => Ok((PromptStyle::Completion, "completion".into(), None)),
        TemplateChoice::Named(name) => Ok((named(name)?, name.clone(), None)),
        TemplateChoice::Model => {
            let t = embedded
                .ok_or_else(|| EngineError::Template("the GGUF carries no chat template".into()))?;
            probe(&t).map_err(|e| {
                EngineError::Template(format!("llama.cpp cannot apply the GGUF's template ({e})"))
            })?;
            Ok((PromptStyle::Chat(t), "model".into(), None))
        }
        TemplateChoice::Auto | TemplateChoice::Architecture => {
            if let Some(t) = embedded {
                match probe(&t) {
                    Ok(()) => return Ok((PromptStyle::Chat(t), "model".into(), None)),
                    Err(e) => {
                        return Ok((
                            PromptStyle::Completion,
                            "completion".into(),
                            Some(format!(
                                "llama.cpp cannot apply the GGUF's chat template ({e}); using a completion-style transcript"
                            )),
                        ))
                    }
                }
            }
            if *choice == TemplateChoice::Auto {
                return Ok((
                    PromptStyle::Completion,
                    "completion".into(),
                    Some("no chat template in the GGUF (a base model): completion-style Question/Answer transcript".into()),
                ));
            }
            let arch = model
                .meta_val_str("general.architecture")
                .unwrap_or_default();
            let name =
                template_for_architecture(&arch, has_llama3_tokens(model)).ok_or_else(|| {
                    EngineError::Template(format!(
                        "no built-in template is known for architecture `{arch}`"
                    ))
                })?;
            Ok((
                named(name)?,
                name.to_string(),
                Some(format!(
                    "no chat template in the GGUF: llama.cpp's `{name}` for architecture `{arch}`"
                )),
            ))
        }
    }
}

fn has_llama3_tokens(model: &LlamaModel) -> bool {
    let vocab = model.vocab();
    let t = vocab.tokenize(b"<|eot_id|>", false, true);
    t.len() == 1 && vocab.is_eog(t[0])
}

fn model_info(
    model: &LlamaModel,
    ctx: &LlamaContext<'_>,
    cfg: &EngineConfig,
    template: String,
    template_note: Option<String>,
    started: Instant,
) -> ModelInfo {
    let path = &cfg.model_path;
    let meta = |k: &str| model.meta_val_str(k).ok();
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let devices: Vec<String> = llama_cpp_2::list_llama_ggml_backend_devices()
        .into_iter()
        .map(|d| {
            if d.description.is_empty() {
                format!("{} ({})", d.name, d.backend)
            } else {
                format!("{} ({}: {})", d.name, d.backend, d.description)
            }
        })
        .collect();
    let gpu_backend = llama_cpp_2::list_llama_ggml_backend_devices()
        .into_iter()
        .find(|d| {
            matches!(
                d.device_type,
                llama_cpp_2::LlamaBackendDeviceType::Gpu
                    | llama_cpp_2::LlamaBackendDeviceType::IntegratedGpu
            )
        })
        .map(|d| d.backend);
    let has_gpu = gpu_backend.is_some();
    let n_layer = model.n_layer();
    let n_gpu_layers = if has_gpu {
        requested_gpu_layers(cfg.settings.n_gpu_layers).min(n_layer + 1)
    } else {
        0
    };
    ModelInfo {
        file_name: file_name.clone(),
        file_size_bytes: std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
        fingerprint: fingerprint(path).unwrap_or_default(),
        name: meta("general.name").unwrap_or_else(|| stem(path)),
        architecture: meta("general.architecture").unwrap_or_default(),
        n_params: model.n_params(),
        n_layer,
        n_embd: model.n_embd(),
        n_head: model.n_head(),
        n_head_kv: model.n_head_kv(),
        n_vocab: model.n_vocab(),
        n_ctx_train: model.n_ctx_train(),
        quantization: meta("general.file_type")
            .and_then(|v| v.parse::<u32>().ok())
            .and_then(quantization_name)
            .unwrap_or("unknown")
            .to_string(),
        weights_bytes: model.size(),
        n_ctx: ctx.n_ctx(),
        n_batch: ctx.n_batch(),
        threads: cfg.settings.threads,
        backend: gpu_backend.unwrap_or_else(|| "CPU".to_string()),
        devices,
        n_gpu_layers,
        template,
        template_note,
        synthetic: meta(crate::synth::SYNTHETIC_METADATA_KEY).as_deref() == Some("true"),
        llama_cpp: LLAMA_CPP_BINDINGS.to_string(),
        load_ms: crate::metrics::ms(started.elapsed()),
        path: path.clone(),
    }
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}
