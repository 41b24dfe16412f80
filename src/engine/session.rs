//! A loaded model's session: its context, the tokens its KV cache holds, how its prompts are
//! built, and the decode loop of one turn (prefill, then per token: check the cancel flag,
//! sample, decode, send the token's event stamped on this thread).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

use super::detok::{StopMatcher, Utf8Stream};
use super::prompt::{common_prefix_len, PromptBuilder, COMPLETION_STOPS};
use super::protocol::{
    ChatMessage, EngineConfig, EngineEvent, EventSender, GenerateRequest, LlamaCounters,
    StopReason, TurnReport,
};
use super::spec::Drafter;
use super::thinking::ThinkingDetector;
use crate::llama;
use crate::llama::error::{decode_error, EngineError};
use crate::llama::model_info::ModelInfo;
use crate::llama::sampler::{
    backend_chain, choose_place, HostSampler, PlaceContext, SamplingPlace,
};
use crate::llama::settings::{EngineSettings, SamplingParams, SpecMode};
use crate::metrics::host::HostTimes;
use crate::metrics::spec::SpecStats;
use crate::metrics::TurnTimeline;

/// The loaded model's context and the tokens its KV cache holds.
pub(super) struct Session<'m> {
    model: &'m LlamaModel,
    ctx: LlamaContext<'m>,
    pub(super) info: ModelInfo,
    /// How this model's prompts are built (its template) and tokenized.
    prompt: PromptBuilder<'m>,
    /// The text of the last turn's prompt, as the model was given it (`run --show-prompt`,
    /// the chat's `/prompt`).
    last_prompt: String,
    /// Tokens per prefill decode call: one micro-batch (llama.cpp's n_ubatch, at most
    /// n_batch). llama.cpp computes a larger call one micro-batch after another anyway, so
    /// the work is the same, and checking the cancel flag between calls stops a long prefill
    /// within one micro-batch. (llama.cpp's abort callback would stop it within a graph node:
    /// the vendored llama-cpp-2 has `set_abort_check`, which the scoring contexts use; the
    /// chat's own decode does not yet.)
    n_batch: usize,
    /// Tokens whose KV entries are in sequence 0, in position order.
    cached: Vec<LlamaToken>,
    /// Where the kept part of the conversation started last turn (index and message), so a
    /// conversation that outgrew the context keeps one prefix across turns.
    kept_from: Option<(usize, ChatMessage)>,
    /// The text of each token of the last turn (whole characters, before stop strings are
    /// held back), for the A/B comparison's divergence point.
    pub(super) pieces: Vec<String>,
    /// Speculative decoding's guesser, when the settings ask for one.
    drafter: Option<Drafter<'m>>,
    /// One draft token's cost relative to a target pass under the roofline (0 for n-gram).
    draft_cost_ratio: f64,
    /// ρ, the roofline's compute term (`metrics::spec::RowCost`) for the speculation figures,
    /// when measured.
    pub(super) row_cost: Option<f64>,
    /// The context's settings, to create it again with another backend sampler chain.
    settings: EngineSettings,
    /// The sampling whose chain runs inside the context's graph (backend sampling); `None`:
    /// the context copies the logits out and the host samples.
    backend_chain: Option<SamplingParams>,
    /// The output layer runs on a GPU (auto samples on the backend only then).
    output_on_gpu: bool,
    /// The step profiler watching the context's graph (`profile_rate` > 0).
    profiler: Option<std::sync::Arc<llama::profile::StepProfiler>>,
    /// The last finished turn's prompt and answer tokens, for scoring it against a reference
    /// (`score_last`); `None` before the first turn and after a failed one.
    last_turn: Option<(Vec<LlamaToken>, Vec<LlamaToken>)>,
    /// Thinking markers the vocabulary holds as single control tokens, with their texts:
    /// their pieces are empty without special rendering, so the detector is given the text.
    marker_tokens: Vec<(LlamaToken, &'static str)>,
}

impl<'m> Session<'m> {
    pub(super) fn new(
        model: &'m llama::LoadedModel,
        cfg: &EngineConfig,
        started: Instant,
    ) -> Result<Self, EngineError> {
        // The first turn's chain on the backend when it can run there, so that the first turn
        // does not create the context again.
        let output_on_gpu = model.output_on_gpu();
        let backend = cfg.settings.first_sampling.clone().filter(|p| {
            let cx = PlaceContext {
                speculative: cfg.settings.spec.active(),
                needs_logits: false,
                output_on_gpu,
            };
            choose_place(cfg.settings.sampling, p, cx).is_ok_and(|place| place.backend)
        });
        // The KV cache is sized before llama.cpp allocates it, and refused where it would not
        // fit in host memory.
        let on_host = llama::gpu_devices().is_empty() || model.layer_split().none_on_gpu();
        llama::check_kv_cache_fits(&cfg.model_path, &cfg.settings, on_host)?;
        if let Some(bytes) = llama::kv_cache_bytes(&cfg.model_path, &cfg.settings) {
            // Beside llama.cpp's own "llama_kv_cache: size = …" lines in the log, which
            // tests/real_model.rs checks it against.
            tracing::info!(kv_cache_bytes = bytes, "KV cache sized before the context");
        }
        let context_started = Instant::now();
        let profiler = (cfg.settings.profile_rate > 0).then(llama::profile::StepProfiler::new);
        let ctx = llama::new_session_context(
            model,
            &cfg.settings,
            backend.as_ref().map(backend_chain),
            profiler.clone(),
        )?;
        let context = context_started.elapsed();
        let prompt = PromptBuilder::new(model, &cfg.settings.template)?;
        let mut info = llama::describe(model, &ctx, &cfg.model_path, &cfg.settings, started);
        info.load_stages = crate::llama::model_info::LoadStages {
            checks_ms: crate::metrics::ms(model.checks),
            weights_ms: crate::metrics::ms(model.weights),
            context_ms: crate::metrics::ms(context),
        };
        info.template = prompt.label.clone();
        info.template_note = prompt.note.clone();
        if let Some(p) = &profiler {
            p.set_kv_shape(info.kv_shape);
        }
        Ok(Self {
            model: &**model,
            n_batch: ctx.n_ubatch().min(ctx.n_batch()).max(1) as usize,
            ctx,
            info,
            prompt,
            last_prompt: String::new(),
            cached: Vec::new(),
            last_turn: None,
            kept_from: None,
            pieces: Vec::new(),
            marker_tokens: marker_tokens(model),
            drafter: (cfg.settings.spec.mode == SpecMode::Ngram && cfg.settings.spec.active())
                .then(|| Drafter::Ngram {
                    n: cfg.settings.spec.ngram_n.max(1) as usize,
                }),
            draft_cost_ratio: 0.0,
            row_cost: None,
            settings: cfg.settings.clone(),
            backend_chain: backend,
            output_on_gpu,
            profiler,
        })
    }

    /// Where this turn samples; the context is created again when its backend chain is not
    /// the one the turn needs (a changed setting, or host sampling after backend sampling).
    /// That drops the KV cache: the turn prefills its whole prompt.
    fn place_sampling(
        &mut self,
        p: &SamplingParams,
        needs_logits: bool,
    ) -> Result<SamplingPlace, EngineError> {
        let cx = PlaceContext {
            speculative: self.drafter.is_some() && self.settings.spec.active(),
            needs_logits,
            output_on_gpu: self.output_on_gpu,
        };
        let place = choose_place(self.settings.sampling, p, cx)?;
        let want = place.backend.then(|| p.clone());
        if want != self.backend_chain {
            tracing::info!(
                "creating the context again for {} sampling ({})",
                place.as_str(),
                place.why
            );
            self.ctx = llama::new_session_context(
                self.model,
                &self.settings,
                want.as_ref().map(backend_chain),
                self.profiler.clone(),
            )?;
            self.backend_chain = want;
            self.cached.clear();
        }
        Ok(place)
    }

    /// Speculate with a draft model (its own context), whose draft token costs
    /// `draft_cost_ratio` of a target pass.
    pub(super) fn set_draft_model(
        &mut self,
        draft: super::spec::DraftModel<'m>,
        draft_cost_ratio: f64,
    ) {
        self.drafter = Some(Drafter::Model(Box::new(draft)));
        self.draft_cost_ratio = draft_cost_ratio;
    }

    /// A token's text (invalid UTF-8 replaced), for scores and confidences: off the decode path.
    fn text_of(&self, t: i32) -> String {
        let piece = self
            .model
            .vocab()
            .token_to_piece(LlamaToken(t), false, None);
        String::from_utf8_lossy(&piece).into_owned()
    }

    /// Drops the KV cache's sequence 0 (and `cached`) from position `keep` on.
    fn keep_cached(&mut self, keep: usize) -> Result<(), EngineError> {
        self.ctx
            .clear_kv_cache_seq(Some(0), Some(keep as u32), None)
            .map_err(decode_error)?;
        self.cached.truncate(keep);
        Ok(())
    }

    /// Template and tokenize the conversation so that it fits the context with room for an
    /// answer. When it does not, the oldest exchanges (after the system prompt) are left out,
    /// and enough of them that the kept part fills about half the context: the next turns then
    /// extend the same prefix and reuse the KV cache until the context is full again (a context
    /// shift), instead of re-prefilling everything on every turn. Returns the tokens and how
    /// many messages were left out. With `ContextFull::Stop` nothing is left out: the turn
    /// fails with `EngineError::ContextFull`, which names the user's choices.
    fn fit_prompt(
        &mut self,
        messages: &[ChatMessage],
        n_ctx: usize,
        max_tokens: u32,
        policy: super::ContextFull,
    ) -> Result<(Vec<LlamaToken>, usize), EngineError> {
        // Room to answer: what was asked for, but at most a quarter of the context.
        let reserve = (max_tokens as usize).clamp(1, (n_ctx / 4).max(1));
        let system = messages
            .iter()
            .take_while(|m| m.role == super::Role::System)
            .count();
        // Where the kept part may start: everything, then from each later user message on.
        let starts: Vec<usize> = std::iter::once(system)
            .chain((system + 1..messages.len()).filter(|&i| messages[i].role == super::Role::User))
            .collect();
        type Built = (Vec<LlamaToken>, String);
        let tokens_from = |this: &Self, start: usize| -> Result<Built, EngineError> {
            let mut kept: Vec<ChatMessage> = messages[..system].to_vec();
            kept.extend_from_slice(&messages[start..]);
            let (tokens, text) = this.prompt.tokenize_messages(&kept)?;
            if tokens.is_empty() {
                return Err(EngineError::EmptyPrompt);
            }
            Ok((tokens, text))
        };
        let remember = |this: &mut Self, start: usize, (tokens, text): Built| {
            this.kept_from = messages.get(start).cloned().map(|m| (start, m));
            this.last_prompt = text;
            Ok((tokens, start - system))
        };
        // The same start as last turn, when it is the same conversation and still fits.
        let candidates = match &self.kept_from {
            Some((start, first)) if *start > system && messages.get(*start) == Some(first) => {
                vec![system, *start]
            }
            _ => vec![system],
        };
        let mut whole = None;
        for start in candidates {
            let built = tokens_from(self, start)?;
            if built.0.len() + reserve <= n_ctx {
                return remember(self, start, built);
            }
            whole.get_or_insert(built.0.len());
        }
        if policy == super::ContextFull::Stop {
            return Err(EngineError::ContextFull {
                prompt_tokens: whole.unwrap_or(0),
                n_ctx: n_ctx as u32,
                reserve,
            });
        }
        // Drop from the front: the earliest start whose prompt fits half the context, else
        // the whole context (binary search: later starts give fewer tokens).
        for budget in [n_ctx / 2, n_ctx] {
            let (mut lo, mut hi) = (0usize, starts.len());
            let mut found = None;
            while lo < hi {
                let mid = (lo + hi) / 2;
                let built = tokens_from(self, starts[mid])?;
                if built.0.len() + reserve <= budget {
                    found = Some((starts[mid], built));
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            if let Some((start, built)) = found {
                return remember(self, start, built);
            }
        }
        // Only the last user message is left; it may still fit without room for a full answer.
        let last = starts.last().copied().unwrap_or(system);
        let built = tokens_from(self, last)?;
        if built.0.len() < n_ctx {
            return remember(self, last, built);
        }
        let tokens = built.0;
        Err(EngineError::PromptTooLong {
            prompt_tokens: tokens.len(),
            n_ctx: n_ctx as u32,
        })
    }

    pub(super) fn generate(
        &mut self,
        req: &GenerateRequest,
        events: &EventSender,
        cancel_through: &Arc<AtomicU64>,
    ) -> Result<TurnReport, EngineError> {
        self.last_turn = None;
        let result = self.generate_inner(req, events, cancel_through);
        if result.is_err() {
            // A prefill that failed early may have left its abort check set: nothing of this
            // turn stays on the context.
            self.ctx.set_abort_check(None);
            // The KV cache may hold a half-decoded batch: start the next turn from scratch.
            self.ctx.clear_kv_cache();
            self.cached.clear();
            if let Some(d) = self.drafter.as_mut() {
                d.reset();
            }
        }
        result
    }

    /// Scores the last finished answer against `reference` (`engine::score`): each token's
    /// figures, both models' most likely tokens at each position, and the answer's. Reads the
    /// conversation in `cache`'s contexts, kept between answers (only what follows their common
    /// prefix with this one is read); leaves this session's context and KV cache as they are.
    pub(super) fn score_last<'r>(
        &self,
        reference: &'r LlamaModel,
        reference_path: &std::path::Path,
        cache: &mut Option<super::score::ScoreCache<'m, 'r>>,
        cancelled: &super::score::Cancel,
    ) -> Result<crate::metrics::quality::AnswerScore, EngineError> {
        let (prompt, answer) = self.last_turn.as_ref().ok_or_else(|| {
            EngineError::Reference(Box::new(EngineError::Decode(
                "there is no finished answer to score".to_string(),
            )))
        })?;
        let started = Instant::now();
        let scored = super::score::score_chat_answer(
            cache,
            self.model,
            reference,
            &self.settings,
            prompt,
            answer,
            cancelled,
        )?;
        let mut score = self.answer_score(reference_path, scored.scores, answer, prompt.len());
        let top_tokens = |top: super::score::Top| {
            top.into_iter()
                .map(|(i, p)| {
                    let token = i32::try_from(i).unwrap_or(i32::MAX);
                    crate::metrics::quality::TopToken {
                        token,
                        text: self.text_of(token),
                        p,
                    }
                })
                .collect()
        };
        for (t, (top_ref, top_cand)) in score.tokens.iter_mut().zip(scored.tops) {
            t.top_ref = top_tokens(top_ref);
            t.top_cand = top_tokens(top_cand);
        }
        score.reused_tokens = scored.reused_tokens;
        score.score_ms = crate::metrics::ms(started.elapsed());
        Ok(score)
    }

    /// Scores an evaluation `text` against `reference` through the path `score_last` takes
    /// (`engine::score::score_answer`), the text cut as llama-perplexity cuts it: chunks of
    /// n_ctx tokens, each starting with BOS (when the vocabulary adds one), the first
    /// n_ctx/2 + 1 tokens read as the prompt and the rest as the answer, so that positions
    /// n_ctx/2 … n_ctx − 2 are scored as llama-perplexity scores them. `doctor scoring` holds
    /// the result against llama-perplexity's own figures (scripts/compare-llama-perplexity.sh).
    pub(super) fn score_text(
        &self,
        reference: &LlamaModel,
        reference_path: &std::path::Path,
        text: &str,
        chunking: crate::metrics::quality::Chunking,
        passes: super::score::Passes,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<crate::metrics::quality::AnswerScore, EngineError> {
        let started = Instant::now();
        let tokens = crate::llama::runs::tokenize_checked(self.model, text, true, false)?;
        let count = chunking
            .chunks(tokens.len())
            .map_err(EngineError::EvalText)?;
        let n = chunking.n_ctx as usize;
        let vocab = self.model.vocab();
        let bos = vocab.should_add_bos().then(|| vocab.bos());
        let (mut scores, mut answers) = (Vec::new(), Vec::new());
        for c in 0..count {
            let mut chunk = tokens[c * n..(c + 1) * n].to_vec();
            if let Some(bos) = bos {
                chunk[0] = bos;
            }
            let (prompt, answer) = chunk.split_at(n / 2 + 1);
            scores.extend(super::score::score_answer(
                self.model,
                reference,
                &self.settings,
                prompt,
                answer,
                passes,
                cancelled,
            )?);
            answers.extend_from_slice(answer);
        }
        let mut score = self.answer_score(reference_path, scores, &answers, n / 2 + 1);
        score.score_ms = crate::metrics::ms(started.elapsed());
        Ok(score)
    }

    /// The score of `answer`'s tokens (their texts looked up) after `prompt_len` prompt tokens.
    fn answer_score(
        &self,
        reference_path: &std::path::Path,
        scores: Vec<crate::metrics::quality::TokenScore>,
        answer: &[LlamaToken],
        prompt_len: usize,
    ) -> crate::metrics::quality::AnswerScore {
        let ids: Vec<i32> = answer.iter().map(|t| t.0).collect();
        let texts = answer.iter().map(|t| self.text_of(t.0)).collect();
        let path = reference_path.to_path_buf();
        crate::metrics::quality::AnswerScore::new(path, scores, &ids, texts, prompt_len)
    }

    fn generate_inner(
        &mut self,
        req: &GenerateRequest,
        events: &EventSender,
        cancel_through: &Arc<AtomicU64>,
    ) -> Result<TurnReport, EngineError> {
        let cancelled = || cancel_through.load(Ordering::SeqCst) >= req.id;
        // llama.cpp asks it between graph nodes during prefill (`prefill`).
        let abort = super::score::cancel_of(cancel_through, req.id);
        let n_ctx = self.ctx.n_ctx() as usize;
        let mut timeline = TurnTimeline {
            submitted_at: Some(req.submitted_at),
            ..TurnTimeline::default()
        };
        // The breakdown's boundaries are taken as offsets from t0, one after the other, so
        // queue + template/tokenize + prefill + first sample add up to TTFT exactly.
        // Creating the context again for another sampling placement (`place_sampling`) is
        // the engine getting ready for the turn, not templating it: it ends the queue part,
        // and template/tokenize starts after it.
        let place = self.place_sampling(&req.turn.sampling, req.turn.capture_first_logits)?;
        let picked_up = Instant::now();
        timeline.queue = Some(picked_up.saturating_duration_since(req.submitted_at));
        let (tokens, dropped_messages) = self.fit_prompt(
            &req.turn.messages,
            n_ctx,
            req.turn.max_tokens,
            req.turn.context_full,
        )?;
        let (batch, logits_index, stop_reason) = self.prefill(
            req,
            events,
            &tokens,
            dropped_messages,
            picked_up,
            &mut timeline,
            &abort,
        )?;
        let first_logits = (req.turn.capture_first_logits && stop_reason.is_none())
            .then(|| self.ctx.get_logits_ith(logits_index).to_vec());
        // The prompt's text left a thinking span open: the first token is thinking.
        let starts_in_thinking = super::thinking::prompt_opens_thinking(&self.last_prompt);
        let mut turn = self.start_decode(req, batch, logits_index, tokens.len(), timeline);
        turn.thinking = ThinkingDetector::new(starts_in_thinking);
        turn.stop_reason = stop_reason;
        // Only asked for, and only where the host has the logits: backend sampling is kept
        // as it is and the confidence said to be unavailable.
        if req.confidence && !place.backend {
            turn.confidence = Some(Vec::with_capacity(turn.answer.capacity()));
        }
        while turn.stop_reason.is_none() {
            let (token, from_pass) = self.next_token(&mut turn, place.backend)?;
            turn.stop_reason = self.emit(&mut turn, req, events, token, from_pass, &cancelled);
            if turn.stop_reason.is_none() && !from_pass {
                self.decode_pass(&mut turn, req, events, token)?;
            }
        }
        let confidence = turn.confidence.take();
        let report = self.finish(turn, place, first_logits, dropped_messages)?;
        if req.confidence {
            // The texts are made now, after the answer: off the decode path.
            let tokens = confidence.map(|mut tokens| {
                for c in &mut tokens {
                    c.text = self.text_of(c.token);
                    for top in &mut c.top {
                        top.text = self.text_of(top.token);
                    }
                }
                tokens
            });
            let _ = events.send(EngineEvent::Confidence {
                request_id: req.id,
                tokens,
            });
        }
        Ok(report)
    }

    /// Prefill: keep the KV cache's common prefix, decode the rest of the prompt one
    /// micro-batch per call (checking the cancel flag between calls, and llama.cpp between
    /// the graph's nodes on the CPU), and time it. Returns the batch for reuse, the logits row
    /// to sample the first token from, and `Cancelled` when Esc came during prefill.
    #[allow(clippy::too_many_arguments)]
    fn prefill(
        &mut self,
        req: &GenerateRequest,
        events: &EventSender,
        tokens: &[LlamaToken],
        dropped_messages: usize,
        picked_up: Instant,
        timeline: &mut TurnTimeline,
        cancelled: &super::score::Cancel,
    ) -> Result<(LlamaBatch<'static>, i32, Option<StopReason>), EngineError> {
        let t0 = req.submitted_at;
        // KV reuse: keep the cached prefix, prefill the rest. At least one token is decoded
        // so that there are logits to sample from.
        let reuse = common_prefix_len(&self.cached, tokens).min(tokens.len() - 1);
        self.keep_cached(reuse)?;
        timeline.prompt_tokens = Some(tokens.len());
        timeline.cached_tokens = Some(reuse);
        let _ = events.send(EngineEvent::PrefillStarted {
            request_id: req.id,
            prompt_tokens: tokens.len(),
            cached_tokens: reuse,
            dropped_messages,
        });
        self.ctx.reset_timings();

        let mut batch = LlamaBatch::new(self.n_batch, 1);
        let step = Instant::now();
        let template_tokenize = step.saturating_duration_since(picked_up);
        timeline.template_tokenize = Some(template_tokenize);
        let mut logits_index = 0i32;
        let new_tokens = &tokens[reuse..];
        let n_chunks = new_tokens.len().div_ceil(self.n_batch);
        let mut stop_reason = None;
        // Esc stops a micro-batch between two graph nodes (a micro-batch of an 8B model on a
        // CPU takes seconds); llama.cpp then takes its positions out of the KV cache, and
        // `cached` never had them. Off again for the decode steps.
        let abort = Arc::clone(cancelled);
        self.ctx.set_abort_check(Some(Box::new(move || abort())));
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
                batch.add(*token, pos, &[0], logits).map_err(decode_error)?;
            }
            match self.ctx.decode(&mut batch) {
                Ok(()) => {}
                Err(llama_cpp_2::DecodeError::Unknown(2)) => {
                    stop_reason = Some(StopReason::Cancelled);
                    break;
                }
                Err(e) => {
                    self.ctx.set_abort_check(None);
                    return Err(EngineError::Decode(e.to_string()));
                }
            }
            timeline.prefill_chunk_done_at.push(t0.elapsed());
            self.cached.extend_from_slice(chunk);
            logits_index = chunk.len() as i32 - 1;
            let _ = events.send(EngineEvent::PrefillProgress {
                request_id: req.id,
                done: (chunk_no * self.n_batch + chunk.len()).min(new_tokens.len()),
                total: new_tokens.len(),
                at: t0.elapsed(),
            });
        }
        self.ctx.set_abort_check(None);
        self.ctx.synchronize();
        let prefill_done = Instant::now();
        let prefill = prefill_done.saturating_duration_since(step);
        let prefill_done_at = prefill_done.saturating_duration_since(t0);
        timeline.prefill = Some(prefill);
        timeline.prefill_done_at = Some(prefill_done_at);
        let _ = events.send(EngineEvent::PrefillDone {
            request_id: req.id,
            template_tokenize,
            prefill,
            at: prefill_done_at,
        });
        Ok((batch, logits_index, stop_reason))
    }

    /// The decode loop's state after prefill: the sampler, the text assembly, whether this
    /// turn speculates, and the host-time clock started.
    fn start_decode(
        &mut self,
        req: &GenerateRequest,
        batch: LlamaBatch<'static>,
        logits_index: i32,
        prompt_tokens: usize,
        mut timeline: TurnTimeline,
    ) -> Turn<'m> {
        let sampler = HostSampler::new(&req.turn.sampling, self.model.n_vocab());
        let stops = if self.prompt.is_completion() && !req.turn.ignore_eos {
            StopMatcher::new(&COMPLETION_STOPS)
        } else {
            StopMatcher::new(&[])
        };
        self.pieces.clear();
        // Speculation verifies drafts against the target's greedy choice; another sampler
        // (temperature, penalties) decodes one token per pass.
        let spec_on = self.drafter.is_some() && self.settings.spec.active();
        let greedy = sampler.path() == crate::llama::sampler::HostPath::Greedy;
        // Temperature with top-k (no penalty): the speculative sampling rule, which keeps
        // the target's distribution, on probabilities computed like the host chain's.
        let sampling_rule = sampler.path() == crate::llama::sampler::HostPath::TopK;
        let spec_stats = self.drafter.as_ref().map(|d| SpecStats {
            mode: d.mode(),
            draft_max: self.settings.spec.draft_max as usize,
            draft_cost_ratio: self.draft_cost_ratio,
            row_cost: self.row_cost,
            off_reason: (!greedy && !sampling_rule)
                .then_some("a repetition penalty or top-k 0: one token per pass"),
            ..SpecStats::default()
        });
        let max_tokens = req.turn.max_tokens.min(1 << 16) as usize;
        // Room for every pass's end up front: no allocation inside a timed pass.
        timeline.pass_done_at.reserve(max_tokens);
        timeline.pass_started_at.reserve(max_tokens);
        let model: &'m LlamaModel = self.model;
        Turn {
            t0: req.submitted_at,
            n_ctx: self.ctx.n_ctx() as usize,
            prompt_tokens,
            vocab: model.vocab(),
            batch,
            logits_index,
            sampler,
            utf8: Utf8Stream::new(),
            stops,
            text: String::new(),
            thinking: ThinkingDetector::new(false),
            thinking_text: String::new(),
            greedy,
            speculate: spec_on && (greedy || sampling_rule),
            rng: crate::ids::SplitMix64(u64::from(req.turn.sampling.seed) ^ 0x5bec_u64),
            forced_next: None,
            spec_stats,
            accepted_queue: std::collections::VecDeque::new(),
            pass_done_at: req.submitted_at.elapsed(),
            drafts: Vec::new(),
            history: Vec::new(),
            // Room for every token up front: no allocation inside a timed step.
            answer: Vec::with_capacity(max_tokens),
            // Host time per token (docs/metrics.md): each gap between two decode calls, and
            // its parts, timed where they happen.
            host: HostTimes {
                gaps: Vec::with_capacity(max_tokens),
                ..HostTimes::default()
            },
            gap_start: Instant::now(),
            timeline,
            stop_reason: None,
            confidence: None,
            pending_confidence: None,
            queue_row: 0,
            profile: self
                .profiler
                .as_ref()
                .map(|_| crate::metrics::profile::ProfileRecord {
                    rate: self.settings.profile_rate,
                    calls: Vec::with_capacity(max_tokens),
                    ..Default::default()
                }),
        }
    }

    /// The next token and whether a verify pass already decoded it: an accepted draft, else
    /// the replacement a rejection drew, else a sample from the last pass's logits.
    fn next_token(
        &mut self,
        turn: &mut Turn<'m>,
        backend: bool,
    ) -> Result<(LlamaToken, bool), EngineError> {
        let mark = Instant::now();
        let host = &mut turn.host;
        Ok(
            match (turn.accepted_queue.pop_front(), turn.forced_next.take()) {
                (Some(t), forced) => {
                    turn.forced_next = forced;
                    // Accepted draft i was verified against row i of its pass.
                    let row = turn.queue_row;
                    turn.queue_row += 1;
                    self.measure_confidence(turn, row, t);
                    (t, true)
                }
                (None, Some(t)) => {
                    self.measure_confidence(turn, turn.logits_index, t);
                    (t, false)
                }
                (None, None) if backend => {
                    // Sampled inside the graph: no logits row leaves the context.
                    let index = turn.logits_index;
                    let token = self.ctx.sampled_token_ith(index).ok_or_else(|| {
                    EngineError::Decode(format!(
                        "llama.cpp sampled no token on the backend (output {index}); use --sampling host"
                    ))
                })?;
                    crate::llama::sampler::backend_output_finite(
                        self.ctx.sampled_probs_ith(index),
                        self.ctx.sampled_logits_ith(index),
                        token,
                        usize::try_from(turn.vocab.n_tokens()).unwrap_or(0),
                    )
                    .map_err(|_| EngineError::NonFiniteLogits {
                        at_token: turn.timeline.token_ready_at.len(),
                    })?;
                    host.sampling += mark.elapsed();
                    (token, false)
                }
                (None, None) => {
                    let logits = self.ctx.get_logits_ith(turn.logits_index);
                    let sampled_at = Instant::now();
                    host.logits_out += sampled_at - mark;
                    let token =
                        turn.sampler
                            .sample(logits)
                            .map_err(|_| EngineError::NonFiniteLogits {
                                at_token: turn.timeline.token_ready_at.len(),
                            })?;
                    host.sampling += sampled_at.elapsed();
                    self.measure_confidence(turn, turn.logits_index, token);
                    (token, false)
                }
            },
        )
    }

    /// The chosen token's own confidence from row `row` of the last pass's logits, when the
    /// turn asks for it; its time is a named part of the host gap (`host.confidence`), so that
    /// host µs/token includes it.
    fn measure_confidence(&self, turn: &mut Turn<'m>, row: i32, token: LlamaToken) {
        if turn.confidence.is_none() {
            return;
        }
        let started = Instant::now();
        let logits = self.ctx.get_logits_ith(row);
        turn.pending_confidence = usize::try_from(token.0)
            .ok()
            .filter(|&t| t < logits.len())
            .map(|t| crate::metrics::quality::TokenConfidence::of(logits, t));
        turn.host.confidence += started.elapsed();
    }

    /// Emits one token: end of generation, its text (whole characters, stop strings held
    /// back), its event stamped now (or at its verify pass's end), then whether the turn
    /// stops here.
    fn emit(
        &mut self,
        turn: &mut Turn<'m>,
        req: &GenerateRequest,
        events: &EventSender,
        token: LlamaToken,
        from_pass: bool,
        cancelled: &dyn Fn() -> bool,
    ) -> Option<StopReason> {
        let mark = Instant::now();
        let confidence = turn.pending_confidence.take();
        let host = &mut turn.host;
        host.tokens += 1;
        if turn.vocab.is_eog(token) && !req.turn.ignore_eos {
            return Some(StopReason::EndOfGeneration);
        }
        turn.answer.push(token);
        if let (Some(all), Some(c)) = (turn.confidence.as_mut(), confidence) {
            all.push(c);
        }
        let mut piece = turn.vocab.token_to_piece(token, false, None);
        if piece.is_empty() {
            if let Some((_, text)) = self.marker_tokens.iter().find(|(t, _)| *t == token) {
                piece = text.as_bytes().to_vec();
            }
        }
        let whole = turn.utf8.push(&piece);
        let (visible, hit_stop) = turn.stops.push(&whole);
        self.pieces.push(whole);
        let at = if from_pass {
            turn.pass_done_at
        } else {
            turn.t0.elapsed()
        };
        let split = turn.thinking.push(visible, at);
        let detokenized = Instant::now();
        host.detokenize += detokenized - mark;
        let timeline = &mut turn.timeline;
        let index = timeline.token_ready_at.len();
        timeline.token_ready_at.push(at);
        turn.text.push_str(&split.answer);
        let _ = events.send(EngineEvent::Token {
            request_id: req.id,
            index,
            text: split.answer,
            at,
        });
        if split.changed.is_some() || !split.thinking.is_empty() {
            turn.thinking_text.push_str(&split.thinking);
            if let Some(span) = turn.thinking.span() {
                let _ = events.send(EngineEvent::Thinking {
                    request_id: req.id,
                    span,
                    text: split.thinking,
                });
            }
        }
        host.event += detokenized.elapsed();
        let emitted = timeline.token_ready_at.len();
        // The context check counts the tokens a one-token-per-pass decode would hold by now,
        // so that speculation stops where plain decoding stops.
        if hit_stop {
            Some(StopReason::StopString)
        } else if emitted >= req.turn.max_tokens as usize {
            Some(StopReason::MaxTokens)
        } else if turn.prompt_tokens + emitted >= turn.n_ctx {
            Some(StopReason::ContextFull)
        } else if !from_pass && cancelled() {
            // Checked before each decode call: the tokens of a finished pass are all
            // delivered, and Esc stops within one pass.
            Some(StopReason::Cancelled)
        } else {
            None
        }
    }

    /// One target pass: the pending token (and a draft continuing it, when speculating)
    /// decoded in one call, the draft verified, and the pass's time split into decode
    /// compute, verify or plain time and host gap.
    fn decode_pass(
        &mut self,
        turn: &mut Turn<'m>,
        req: &GenerateRequest,
        events: &EventSender,
        token: LlamaToken,
    ) -> Result<(), EngineError> {
        let t0 = turn.t0;
        let draft_time = self.draft(turn, req, token)?;
        let batch = &mut turn.batch;
        batch.clear();
        for (i, &t) in std::iter::once(&token).chain(&turn.drafts).enumerate() {
            batch
                .add(t, (self.cached.len() + i) as i32, &[0], true)
                .map_err(decode_error)?;
        }
        let profiler = self.profiler.as_ref().filter(|_| {
            crate::metrics::profile::sampled(turn.timeline.decode_calls, self.settings.profile_rate)
        });
        let rows = batch.n_tokens() as usize;
        let step = Instant::now();
        let gap = (step - turn.gap_start).saturating_sub(draft_time);
        turn.host.gaps.push(gap);
        turn.host.total += gap;
        turn.timeline
            .pass_started_at
            .push(step.saturating_duration_since(t0));
        // llama.cpp's own clock of the call, read around it only when it is profiled.
        let eval_before = profiler.map(|_| self.ctx.timings().t_eval_ms());
        if let Some(p) = profiler {
            p.arm(step);
        }
        let decoded = self.ctx.decode(batch);
        self.ctx.synchronize();
        let call_end = Instant::now();
        let llama_eval = eval_before
            .filter(|_| rows == 1)
            .map(|before| self.ctx.timings().t_eval_ms() - before)
            .filter(|ms| ms.is_finite() && *ms >= 0.0)
            .map(|ms| std::time::Duration::from_nanos((ms * 1e6) as u64));
        turn.timeline
            .pass_done_at
            .push(call_end.saturating_duration_since(t0));
        if let Some(record) = turn.profile.as_mut() {
            let call = call_end - step;
            record.calls.push((call, profiler.is_some()));
            if let Some(p) = profiler {
                let step =
                    p.finish_step(call_end, gap, call, (rows, self.cached.len()), llama_eval);
                let _ = events.send(EngineEvent::StepProfiled {
                    request_id: req.id,
                    step: Box::new(step.clone()),
                    per_node: record.correction_with(&step),
                });
                record.steps.push(step);
            }
        }
        decoded.map_err(decode_error)?;
        self.cached.push(token);
        turn.logits_index = 0;
        turn.queue_row = 0;
        let accepted = if turn.drafts.is_empty() {
            0
        } else {
            let accepted = self.verify(turn, &req.turn.sampling)?;
            turn.timeline.accepted_drafts += accepted;
            turn.logits_index = accepted as i32;
            turn.pass_done_at = t0.elapsed();
            accepted
        };
        // One end of the pass for the decode compute, the verify or plain time and the next
        // host gap, so that they add up (the Spec event below is host time).
        turn.gap_start = Instant::now();
        let pass_time = turn.gap_start - step;
        turn.timeline.decode_compute += pass_time;
        turn.timeline.decode_calls += 1;
        if let Some(s) = turn.spec_stats.as_mut().filter(|_| turn.speculate) {
            s.draft_time += draft_time;
            if turn.drafts.is_empty() {
                s.plain_passes += 1;
                s.plain_time += pass_time;
            } else {
                s.verify_passes += 1;
                s.drafted += turn.drafts.len();
                s.accepted += accepted;
                s.rejections += usize::from(accepted < turn.drafts.len());
                s.verify_time += pass_time;
            }
            let _ = events.send(EngineEvent::Spec {
                request_id: req.id,
                stats: Box::new(s.clone()),
            });
        }
        Ok(())
    }

    /// Proposes a draft continuing the context and the pending token into `turn.drafts`
    /// (empty when not speculating or too short); returns the time it took.
    fn draft(
        &mut self,
        turn: &mut Turn<'m>,
        req: &GenerateRequest,
        token: LlamaToken,
    ) -> Result<std::time::Duration, EngineError> {
        turn.drafts.clear();
        if !turn.speculate {
            return Ok(std::time::Duration::ZERO);
        }
        let emitted = turn.timeline.token_ready_at.len();
        let remaining = req.turn.max_tokens as usize - emitted;
        let k_max = (self.settings.spec.draft_max as usize)
            .min(remaining.saturating_sub(1))
            .min(turn.n_ctx.saturating_sub(self.cached.len() + 2));
        if k_max == 0 {
            return Ok(std::time::Duration::ZERO);
        }
        let started = Instant::now();
        turn.history.clear();
        turn.history.extend_from_slice(&self.cached);
        turn.history.push(token);
        if let Some(drafter) = self.drafter.as_mut() {
            turn.drafts = drafter.propose(&turn.history, k_max, self.settings.spec.draft_p_min)?;
        }
        if turn.drafts.len() < self.settings.spec.draft_min as usize {
            turn.drafts.clear();
        }
        Ok(started.elapsed())
    }

    /// Verifies the pass's draft: row i holds the target's choice after the pending token
    /// and the first i drafted tokens. Greedy accepts drafted tokens while they match it;
    /// sampling applies the speculative sampling rule and leaves the next token in
    /// `forced_next`. Rejected positions leave the KV cache; returns how many were accepted.
    fn verify(
        &mut self,
        turn: &mut Turn<'m>,
        sampling: &SamplingParams,
    ) -> Result<usize, EngineError> {
        let drafts = &turn.drafts;
        let mut accepted = 0usize;
        if turn.greedy {
            while accepted < drafts.len()
                && crate::llama::sampler::argmax(self.ctx.get_logits_ith(accepted as i32))
                    == drafts[accepted].0 as usize
            {
                accepted += 1;
            }
        } else {
            // Position by position; the token after the last accepted one is the residual's
            // draw (or, when all were accepted, a draw from the last row).
            let mut replacement = None;
            for (i, d) in drafts.iter().enumerate() {
                let probs = super::spec::chain_probs(self.ctx.get_logits_ith(i as i32), sampling);
                match super::spec::accept_or_resample(&probs, d.0, &mut turn.rng) {
                    Ok(()) => accepted += 1,
                    Err(t) => {
                        replacement = Some(t);
                        break;
                    }
                }
            }
            let next = replacement.unwrap_or_else(|| {
                let probs = super::spec::chain_probs(
                    self.ctx.get_logits_ith(drafts.len() as i32),
                    sampling,
                );
                super::spec::draw(&probs, &mut turn.rng)
            });
            turn.forced_next = Some(LlamaToken(next));
        }
        self.cached.extend_from_slice(&drafts[..accepted]);
        self.keep_cached(self.cached.len())?;
        turn.accepted_queue
            .extend(drafts[..accepted].iter().copied());
        Ok(accepted)
    }

    /// Ends the turn: the KV cache trimmed to what plain decoding leaves, the last host gap,
    /// the held-back text flushed, llama.cpp's counters read, the report built.
    fn finish(
        &mut self,
        mut turn: Turn<'m>,
        place: SamplingPlace,
        first_logits: Option<Vec<f32>>,
        dropped_messages: usize,
    ) -> Result<TurnReport, EngineError> {
        let emitted = turn.timeline.token_ready_at.len();
        if turn.speculate {
            // The KV cache keeps exactly what one-token-per-pass decoding would have left in
            // it: the prompt and the answer's tokens, all but a last token still pending.
            // Accepted tokens past the end of the answer (a stop, max tokens) leave it too.
            let pending =
                usize::from(emitted > 0 && turn.stop_reason != Some(StopReason::EndOfGeneration));
            self.keep_cached((turn.prompt_tokens + emitted - pending).min(self.cached.len()))?;
        }
        let host = &mut turn.host;
        let last_gap = turn.gap_start.elapsed();
        if host.gaps.len() < host.tokens {
            host.gaps.push(last_gap);
        }
        host.total += last_gap;
        if let Some(s) = turn.spec_stats.as_mut() {
            // The per-token split of the decode phase: draft, verify, plain and host time.
            s.tokens = host.tokens;
            s.host_time = host.total;
        }
        let stop_reason = turn.stop_reason.unwrap_or(StopReason::EndOfGeneration);
        let mut text = turn.text;
        let tail = if stop_reason == StopReason::StopString {
            String::new()
        } else {
            let (mut tail, _) = turn.stops.push(&turn.utf8.finish());
            tail.push_str(&turn.stops.finish());
            tail
        };
        // What the thinking detector still holds goes where it belongs.
        let split = turn.thinking.finish(tail);
        text.push_str(&split.answer);
        turn.thinking_text.push_str(&split.thinking);
        if stop_reason == StopReason::StopString {
            // The transcript's separator before the next "Question:" is not part of the answer.
            text.truncate(text.trim_end().len());
        }
        self.last_turn = self
            .cached
            .get(..turn.prompt_tokens)
            .map(|prompt| (prompt.to_vec(), std::mem::take(&mut turn.answer)));
        let mut timeline = turn.timeline;
        timeline.finished_at = Some(turn.t0.elapsed());
        timeline.thinking = turn.thinking.span();
        let t = self.ctx.timings();
        Ok(TurnReport {
            text,
            // Off the decode path: the answer is whole.
            prompt: self.prompt.shown(
                &self.last_prompt,
                &self.cached[..turn.prompt_tokens.min(self.cached.len())],
            ),
            thinking_text: timeline.thinking.map(|_| turn.thinking_text),
            stop_reason,
            timeline,
            context_used: self.cached.len(),
            dropped_messages,
            llama_counters: LlamaCounters {
                prompt_eval_ms: t.t_p_eval_ms(),
                prompt_eval_tokens: t.n_p_eval(),
                eval_ms: t.t_eval_ms(),
                eval_tokens: t.n_eval(),
            },
            first_logits,
            host: turn.host,
            sampler: if place.backend {
                "backend"
            } else {
                turn.sampler.path().as_str()
            },
            sampling: place,
            spec: turn.spec_stats,
            profile: turn.profile,
        })
    }
}

/// What one turn's decode loop carries from token to token.
struct Turn<'m> {
    /// The request's submission: every offset of the timeline is measured from it.
    t0: Instant,
    n_ctx: usize,
    /// Tokens in the whole templated prompt.
    prompt_tokens: usize,
    vocab: llama_cpp_2::vocab::LlamaVocab<'m>,
    /// One batch for every decode call of the turn.
    batch: LlamaBatch<'static>,
    /// The row of the last pass's logits the next token is sampled from.
    logits_index: i32,
    sampler: HostSampler,
    utf8: Utf8Stream,
    stops: StopMatcher,
    /// The answer's text so far (a thinking span's text is in `thinking_text`).
    text: String,
    /// The thinking span: its detector over the token texts, and its text so far.
    thinking: ThinkingDetector,
    thinking_text: String,
    greedy: bool,
    speculate: bool,
    rng: crate::ids::SplitMix64,
    /// The replacement token a rejection drew: the next token, pending like a sampled one.
    forced_next: Option<LlamaToken>,
    spec_stats: Option<SpecStats>,
    /// Drafted tokens the last verify pass accepted: already in the KV cache, emitted one by
    /// one (each its own token event) with the pass's end as their ready time.
    accepted_queue: std::collections::VecDeque<LlamaToken>,
    pass_done_at: std::time::Duration,
    drafts: Vec<LlamaToken>,
    history: Vec<LlamaToken>,
    /// The answer's tokens, as emitted (an end-of-generation token is not one).
    answer: Vec<LlamaToken>,
    host: HostTimes,
    /// The end of the last decode call (or of prefill): the start of the host gap.
    gap_start: Instant,
    timeline: TurnTimeline,
    stop_reason: Option<StopReason>,
    /// Each answer token's own confidence, in answer order (`None` unless the request asked
    /// for it and the host samples).
    confidence: Option<Vec<crate::metrics::quality::TokenConfidence>>,
    /// The confidence of the token `next_token` returned, until `emit` keeps it (an
    /// end-of-generation token's is dropped with it).
    pending_confidence: Option<crate::metrics::quality::TokenConfidence>,
    /// The row of the last verify pass the next accepted draft was checked against.
    queue_row: i32,
    /// The step profiler's record (`None` when it is off).
    profile: Option<crate::metrics::profile::ProfileRecord>,
}

/// The thinking markers (`thinking::MARKERS`) that the vocabulary holds as one control token
/// each, with their texts.
fn marker_tokens(model: &LlamaModel) -> Vec<(LlamaToken, &'static str)> {
    use llama_cpp_2::token_type::LlamaTokenAttr;
    let vocab = model.vocab();
    super::thinking::MARKERS
        .iter()
        .flat_map(|m| [m.open, m.close])
        .filter_map(
            |text| match vocab.tokenize(text.as_bytes(), false, true)[..] {
                [t] if vocab.attr(t).contains(LlamaTokenAttr::Control) => Some((t, text)),
                _ => None,
            },
        )
        .collect()
}
