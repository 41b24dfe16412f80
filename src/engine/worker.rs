//! The engine thread's body: load a model, create its context, then serve generation requests
//! until told to load another model or to stop. `LlamaContext` borrows the model and is not
//! `Send`, so both live on this thread's stack for their whole life.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use super::protocol::{
    AbReport, EngineCommand, EngineConfig, EngineEvent, EventSender, GenerateRequest, LoadStage,
    RequestId, StopReason, TurnReport,
};
use super::score::cancel_of;
use super::session::Session;
use super::spec::{vocab_difference, DraftModel};
use crate::llama;
use crate::llama::error::EngineError;
use crate::llama::settings::SpecMode;
use crate::llama::LoadedModel;
use crate::metrics::LoadRead;

enum Next {
    Load(EngineConfig),
    /// A model loaded beside the old one, checked, and now to be served (the old one was
    /// dropped on the way here).
    Serve(Box<LoadedModel>, EngineConfig, Instant),
    Shutdown,
}

pub(super) fn run(
    config: EngineConfig,
    commands: mpsc::Receiver<EngineCommand>,
    events: EventSender,
    cancel_through: Arc<AtomicU64>,
    exposition: Option<crate::metrics::exposition::Export>,
) {
    let io = Io {
        commands: &commands,
        events: &events,
        cancel_through: &cancel_through,
        exposition: exposition.as_ref(),
    };
    let mut next = Next::Load(config);
    loop {
        next = match next {
            Next::Load(cfg) => load_and_serve(&cfg, &io),
            Next::Serve(model, cfg, started) => serve(&model, &cfg, started, &io),
            Next::Shutdown => break,
        };
    }
}

/// Load a model, reporting progress as `progress` says; `keep_going` is asked between
/// progress steps, and a false answer aborts the load.
fn load_with_progress(
    cfg: &EngineConfig,
    progress: impl Fn(f32, LoadRead) -> EngineEvent + 'static,
    events: &EventSender,
    keep_going: impl Fn() -> bool + 'static,
) -> Result<LoadedModel, EngineError> {
    let progress_events = events.clone();
    let mut last_percent = -1i32;
    let file_bytes = std::fs::metadata(&cfg.model_path).map_or(0, |m| m.len());
    // llama.cpp's first call comes before the first tensor is read (progress 0): the read's
    // clock starts there, after the checks and the metadata.
    let mut first_call: Option<Instant> = None;
    load_served(&cfg.model_path, cfg, move |p| {
        let started = *first_call.get_or_insert_with(Instant::now);
        let percent = (p * 100.0) as i32;
        if percent != last_percent {
            last_percent = percent;
            let read = LoadRead {
                file_bytes,
                elapsed: started.elapsed(),
            };
            let _ = progress_events.send(progress(p, read));
        }
        keep_going()
    })
}

/// Load the model at `path` the way the chat's model is loaded under `cfg`: on its GPU layers
/// setting and its kernel set (in the file layout when the kernels are to be batch-invariant).
/// The chat's model and an A/B's model B both come through here, so that B is measured on
/// the kernels A is.
fn load_served(
    path: &std::path::Path,
    cfg: &EngineConfig,
    on_progress: impl FnMut(f32) -> bool + 'static,
) -> Result<LoadedModel, EngineError> {
    llama::load_model_placed(
        path,
        cfg.settings.n_gpu_layers,
        &Default::default(),
        cfg.settings.spec.batch_invariant_kernels(),
        on_progress,
    )
}

fn load_and_serve(cfg: &EngineConfig, io: &Io<'_>) -> Next {
    let started = Instant::now();
    let shutdown = Arc::clone(io.cancel_through);
    let _ = io.events.send(EngineEvent::Loading {
        stage: LoadStage::Checking,
        progress: 0.0,
        read: None,
    });
    let loaded = load_with_progress(
        cfg,
        |progress, read| EngineEvent::Loading {
            stage: LoadStage::Weights,
            progress,
            read: Some(read),
        },
        io.events,
        // Shutting down (the user quit while a large model loads): abort the load.
        move || shutdown.load(Ordering::SeqCst) != u64::MAX,
    );
    match loaded {
        Ok(model) => {
            let _ = io.events.send(EngineEvent::Loading {
                stage: LoadStage::Context,
                progress: 1.0,
                read: None,
            });
            serve(&model, cfg, started, io)
        }
        Err(e) => load_failed(e, io),
    }
}

/// Say why no model serves, then answer every request with `NoModel` until a switch.
fn load_failed(e: EngineError, io: &Io<'_>) -> Next {
    let _ = io.events.send(EngineEvent::LoadFailed(e));
    serve_without_model(io)
}

/// Load the model `cfg` names beside whatever is loaded now, and check that a context can be
/// made for it and its template resolved. The caller switches only when this succeeds; on
/// any failure (or Esc, which cancels request `id`) nothing of the current model is touched.
fn load_beside(id: RequestId, cfg: &EngineConfig, io: &Io<'_>) -> Result<LoadedModel, EngineError> {
    let cancelled = cancel_of(io.cancel_through, id);
    let keep_going = Arc::clone(&cancelled);
    let loaded = load_with_progress(
        cfg,
        move |progress, _| EngineEvent::SwitchProgress {
            request_id: id,
            progress,
        },
        io.events,
        move || !keep_going(),
    );
    if cancelled() {
        return Err(EngineError::Cancelled);
    }
    let model = loaded?;
    // The same checks `serve` makes, so that it cannot fail there for a reason known now
    // (the draft model, when speculating, must share the new model's vocabulary).
    Session::new(&model, cfg, Instant::now())?;
    drop(load_draft(&model, cfg)?);
    if cancelled() {
        return Err(EngineError::Cancelled);
    }
    Ok(model)
}

/// Answer a switch request: `Some(next)` to leave the current model for the new one, `None`
/// (after a `SwitchFailed` event) to stay.
fn try_switch(id: RequestId, cfg: EngineConfig, io: &Io<'_>) -> Option<Next> {
    let started = Instant::now();
    match load_beside(id, &cfg, io) {
        Ok(model) => Some(Next::Serve(Box::new(model), cfg, started)),
        Err(error) => {
            let _ = io.events.send(EngineEvent::SwitchFailed {
                request_id: id,
                error,
            });
            None
        }
    }
}

fn serve(model: &LoadedModel, cfg: &EngineConfig, started: Instant, io: &Io<'_>) -> Next {
    // The draft model lives beside the target for as long as it serves.
    let draft = match load_draft(model, cfg) {
        Ok(d) => d,
        Err(e) => return load_failed(e, io),
    };
    let session = Session::new(model, cfg, started).and_then(|mut s| {
        if let Some(d) = draft.as_ref() {
            let ratio = if model.size() > 0 {
                d.size() as f64 / model.size() as f64
            } else {
                0.0
            };
            let draft_ctx =
                DraftModel::new(d, &cfg.settings).map_err(|e| EngineError::Draft(Box::new(e)))?;
            s.set_draft_model(draft_ctx, ratio);
        }
        Ok(s)
    });
    let mut session = match session {
        Ok(s) => s,
        Err(e) => return load_failed(e, io),
    };
    if cfg.settings.spec.active() {
        session.row_cost = measure_row_cost(model, &cfg.settings);
    }
    let _ = io
        .events
        .send(EngineEvent::Ready(Box::new(session.info.clone())));
    // bench's tg test (`BenchTg`): its context, kept for the next request of the same length.
    let mut tg: Option<(u32, llama::measure::Bencher<'_>)> = None;
    // The reference model answers are scored against, kept for the next answer; the scoring
    // contexts borrow it, so they live in `serve_with`, one call per reference.
    let mut reference: Option<Reference> = None;
    // A score that asked for another reference, served once that one is loaded.
    let mut replay: Option<EngineCommand> = None;
    loop {
        let stretch = serve_with(
            model,
            cfg,
            io,
            (&mut session, &mut tg),
            reference.as_ref(),
            &mut replay,
        );
        match stretch {
            Served::Leave(next) => return next,
            Served::Reference(path) => {
                // The old reference (and the contexts that borrowed it) go before the new loads.
                reference = None;
                match load_reference(model, cfg, &path) {
                    Ok(loaded) => reference = Some(loaded),
                    Err(error) => {
                        if let Some(
                            EngineCommand::ScoreLast { id, .. }
                            | EngineCommand::ScoreText { id, .. },
                        ) = replay.take()
                        {
                            let _ = io.events.send(EngineEvent::Failed {
                                request_id: id,
                                error,
                            });
                        }
                    }
                }
            }
        }
    }
}

/// The reference model answers are scored against, kept between answers, with its load time
/// (reported by the first score after the load).
struct Reference {
    path: std::path::PathBuf,
    model: LoadedModel,
    load_ms: f64,
}

/// The engine's ends of the channels, and the cancel mark.
struct Io<'a> {
    commands: &'a mpsc::Receiver<EngineCommand>,
    events: &'a EventSender,
    cancel_through: &'a Arc<AtomicU64>,
    /// Where each turn is counted for `--prometheus`/`--otlp` (the chat's and `run`'s
    /// exporters), whichever model is loaded.
    exposition: Option<&'a crate::metrics::exposition::Export>,
}

/// How serving with one reference (or none) ended.
enum Served {
    /// Leave this model: load another, serve another, or stop.
    Leave(Next),
    /// A score asked for the reference at this path: load it, then serve that command (kept in
    /// `replay`) with it.
    Reference(std::path::PathBuf),
}

/// Serve commands while `reference` is the kept reference (`replay` first, when there is
/// one). The chat's scoring contexts (`ScoreCache`) live here, between answers: they borrow
/// the reference, so a score against another one ends this stretch, and leaving the model
/// ends it too; either way they are dropped.
fn serve_with<'m>(
    model: &'m LoadedModel,
    cfg: &EngineConfig,
    io: &Io<'_>,
    (session, tg): (
        &mut Session<'m>,
        &mut Option<(u32, llama::measure::Bencher<'m>)>,
    ),
    reference: Option<&Reference>,
    replay: &mut Option<EngineCommand>,
) -> Served {
    let Io {
        commands,
        events,
        cancel_through,
        exposition,
    } = *io;
    let mut score_cache: Option<super::score::ScoreCache<'_, '_>> = None;
    let mut load_ms = reference.map_or(0.0, |r| r.load_ms);
    loop {
        let command = replay.take().map_or_else(|| commands.recv(), Ok);
        // A score against another reference than the kept one: load that one, then replay it.
        let kept = match &command {
            Ok(
                EngineCommand::ScoreLast {
                    reference: path, ..
                }
                | EngineCommand::ScoreText {
                    reference: path, ..
                },
            ) => match reference.filter(|r| r.path == *path) {
                Some(r) => Some(r),
                None => {
                    let path = path.clone();
                    *replay = command.ok();
                    return Served::Reference(path);
                }
            },
            _ => None,
        };
        match command {
            Ok(EngineCommand::BenchTg { id, n_gen }) => {
                let result = bench_tg(model, &cfg.settings, tg, n_gen);
                let _ = events.send(outcome(id, result, |request_id, sample| {
                    EngineEvent::TgMeasured { request_id, sample }
                }));
            }
            Ok(EngineCommand::Generate(req)) => {
                let id = req.id;
                if let Some(export) = exposition {
                    export.sent();
                }
                let result = session.generate(&req, events, cancel_through).map(Box::new);
                if let Some(export) = exposition {
                    let counted = match &result {
                        Ok(r) if r.stop_reason == StopReason::Cancelled => Err("cancelled"),
                        Ok(r) => Ok(&r.timeline),
                        Err(EngineError::Cancelled) => Err("cancelled"),
                        Err(_) => Err("engine"),
                    };
                    export.count_local(counted, req.submitted_at.elapsed());
                }
                let _ = events.send(outcome(id, result, |request_id, report| {
                    EngineEvent::Finished { request_id, report }
                }));
            }
            Ok(EngineCommand::Sweep { id, plan }) => {
                let error = sweep(model, &cfg.settings, id, &plan, events, cancel_through).err();
                let _ = events.send(EngineEvent::SweepDone {
                    request_id: id,
                    error,
                });
            }
            Ok(EngineCommand::AbGenerate {
                path,
                request,
                reference,
            }) => {
                let id = request.id;
                // A again, from a fresh context of the chat's model (the chat's own context
                // and KV cache are untouched), so that A and B are measured alike. Its events
                // go nowhere: the screen shows A's text from the conversation.
                let a_fresh = (|| {
                    let mut fresh = Session::new(model, cfg, Instant::now())?;
                    let (sink, _dropped) = tokio::sync::mpsc::unbounded_channel();
                    let mut a_request = request.clone();
                    a_request.submitted_at = Instant::now();
                    fresh.generate(&a_request, &sink, cancel_through)
                })();
                let sides = AbSides {
                    b: &path,
                    reference: reference.as_deref(),
                };
                if let Err(error) = ab_generate(sides, (model, cfg), request, a_fresh.ok(), io) {
                    let _ = events.send(EngineEvent::Failed {
                        request_id: id,
                        error,
                    });
                }
            }
            Ok(EngineCommand::ScoreLast {
                id,
                reference: path,
            }) => {
                let Some(r) = kept else { continue };
                let cancelled = cancel_of(cancel_through, id);
                let load_ms = std::mem::take(&mut load_ms);
                let result = session
                    .score_last(&r.model, &path, &mut score_cache, &cancelled)
                    .map(|mut score| {
                        score.reference_load_ms = load_ms;
                        r.describe_in(&mut score);
                        Box::new(score)
                    });
                let _ = events.send(outcome(id, result, |request_id, score| {
                    EngineEvent::Scored { request_id, score }
                }));
            }
            Ok(EngineCommand::ScoreText {
                id,
                reference: path,
                text,
                chunking,
                passes,
            }) => {
                let Some(r) = kept else { continue };
                let cancelled = cancel_of(cancel_through, id);
                let load_ms = std::mem::take(&mut load_ms);
                let result = session
                    .score_text(&r.model, &path, &text, chunking, passes, &*cancelled)
                    .map(|mut score| {
                        score.reference_load_ms = load_ms;
                        Box::new(score)
                    });
                let _ = events.send(outcome(id, result, |request_id, score| {
                    EngineEvent::Scored { request_id, score }
                }));
            }
            Ok(EngineCommand::SwitchModel { id, config }) => {
                if let Some(next) = try_switch(id, config, io) {
                    return Served::Leave(next);
                }
            }
            Ok(EngineCommand::Shutdown) | Err(_) => return Served::Leave(Next::Shutdown),
        }
    }
}

impl Reference {
    /// The reference's size and placement, for the score that used it.
    fn describe_in(&self, score: &mut crate::metrics::quality::AnswerScore) {
        score.reference_file_bytes = std::fs::metadata(&self.path).map_or(0, |m| m.len());
        score.reference_n_layer = self.model.n_layer();
        score.reference_gpu_layers = self.model.layer_split().offloaded();
    }
}

/// The reference at `path` for scoring, loaded (checked like any model file, on the model's
/// GPU layers setting) and refused when its vocabulary is not the model's.
fn load_reference(
    model: &LoadedModel,
    cfg: &EngineConfig,
    path: &std::path::Path,
) -> Result<Reference, EngineError> {
    let started = Instant::now();
    let loaded = llama::load_model(path, cfg.settings.n_gpu_layers, |_| true)
        .map_err(|e| EngineError::Reference(Box::new(e)))?;
    if let Some((id, model_text, reference_text)) = vocab_difference(model, &loaded) {
        return Err(EngineError::RefVocabMismatch {
            reference: path.to_path_buf(),
            id,
            model_text,
            reference_text,
        });
    }
    Ok(Reference {
        path: path.to_path_buf(),
        model: loaded,
        load_ms: crate::metrics::ms(started.elapsed()),
    })
}

/// The draft model the settings name for speculative decoding (none unless the mode is
/// `draft`), loaded with the same checks as any model and refused when its vocabulary is not
/// the target's.
/// The draft runs on the target's kernel set: with batch-invariant kernels its weights stay in
/// their file layout too, so that its one-token passes compute what the target's one-token
/// path does (a repacked draft's gemv can part from the file layout's vec_dot at a near tie:
/// on an AVX2-only CPU the demo model drafting for itself had 2 of 39 tokens rejected).
fn load_draft(
    target: &LoadedModel,
    cfg: &EngineConfig,
) -> Result<Option<LoadedModel>, EngineError> {
    let spec = &cfg.settings.spec;
    if spec.mode != SpecMode::Draft || !spec.active() {
        return Ok(None);
    }
    let wrap = |e: EngineError| EngineError::Draft(Box::new(e));
    let path = spec
        .draft_model
        .as_deref()
        .ok_or_else(|| wrap(EngineError::ModelNotFound(std::path::PathBuf::new())))?;
    let draft = llama::load_model_placed(
        path,
        spec.draft_n_gpu_layers,
        &Default::default(),
        spec.batch_invariant_kernels(),
        |_| true,
    )
    .map_err(wrap)?;
    if let Some((id, target_text, draft_text)) = vocab_difference(target, &draft) {
        return Err(EngineError::VocabMismatch {
            draft: path.to_path_buf(),
            id,
            target_text,
            draft_text,
        });
    }
    if draft.size() >= target.size() {
        tracing::warn!(
            "the draft model ({} bytes of weights) is not smaller than the target ({}): speculation cannot pay",
            draft.size(),
            target.size()
        );
    }
    Ok(Some(draft))
}

/// The files of an A/B turn: model B, and the chat's reference when one is set.
struct AbSides<'p> {
    b: &'p std::path::Path,
    reference: Option<&'p std::path::Path>,
}

/// Model B of an A/B comparison: loaded with the chat's settings into a context of its own,
/// prompted the way the chat's model would be (its template resolved by the same rule), asked
/// once (`AbFinished`), its answer then scored (`AbScored`: the chat's scoring path, in
/// contexts of their own) against the chat's reference when one is set (the baseline A's
/// answers are scored against, so both sides share it), else against model A; then dropped.
/// The chat's model, context and KV cache are not touched. `Err`: B could not answer.
fn ab_generate(
    sides: AbSides<'_>,
    (model_a, cfg): (&LoadedModel, &EngineConfig),
    mut request: GenerateRequest,
    a_fresh: Option<TurnReport>,
    io: &Io<'_>,
) -> Result<(), EngineError> {
    let Io {
        events,
        cancel_through,
        ..
    } = *io;
    let path = sides.b;
    let id = request.id;
    let started = Instant::now();
    let cancelled = cancel_of(cancel_through, id);
    let keep_going = Arc::clone(&cancelled);
    // Esc while model B loads aborts the load. B runs on A's kernels (under speculation:
    // batch-invariant), or the two answers would differ by more than the model.
    let model = load_served(path, cfg, move |_| !keep_going());
    if cancelled() {
        return Err(EngineError::Cancelled);
    }
    let model = model?;
    let b_cfg = EngineConfig {
        model_path: path.to_path_buf(),
        settings: cfg.settings.clone(),
    };
    let mut session = Session::new(&model, &b_cfg, started)?;
    // B's clock starts once it is loaded, so its TTFT is comparable with A's (queue +
    // template + prefill + first sample, not the load).
    request.submitted_at = Instant::now();
    let turn = session.generate(&request, events, cancel_through)?;
    let mut not_scored = if cancelled() {
        Some("not scored: stopped".to_string())
    } else {
        vocab_difference(model_a, &model).map(|(token, a, b)| {
            format!(
                "not scored: B's vocabulary is not A's (token {token} is {b:?} in B, {a:?} in \
                 A), so their distributions cannot be compared"
            )
        })
    };
    // The chat's reference, when it is another file than A's: loaded here (Esc aborts the
    // load) and held to B's vocabulary as A's model is.
    let own_reference = match sides.reference.filter(|r| *r != cfg.model_path.as_path()) {
        Some(r) if not_scored.is_none() => {
            let keep_going = Arc::clone(&cancelled);
            match llama::load_model(r, cfg.settings.n_gpu_layers, move |_| !keep_going()) {
                Ok(m) => Some((m, r)),
                Err(e) => {
                    not_scored = Some(format!(
                        "not scored: the reference {} did not load: {e}",
                        r.display()
                    ));
                    None
                }
            }
        }
        _ => None,
    };
    let (reference, reference_path): (&llama_cpp_2::model::LlamaModel, &std::path::Path) =
        match &own_reference {
            Some((m, r)) => (&**m, *r),
            None => (&**model_a, cfg.model_path.as_path()),
        };
    if not_scored.is_none() && own_reference.is_some() {
        not_scored = vocab_difference(reference, &model).map(|(token, r, b)| {
            format!(
                "not scored: B's vocabulary is not the reference's (token {token} is {b:?} in \
                 B, {r:?} in the reference), so their distributions cannot be compared"
            )
        });
    }
    let scoring = not_scored.is_none();
    let _ = events.send(EngineEvent::AbFinished {
        request_id: id,
        report: Box::new(AbReport {
            model: session.info.clone(),
            turn,
            a_fresh,
            pieces: std::mem::take(&mut session.pieces),
            not_scored,
        }),
    });
    if scoring {
        let score = session
            .score_last(reference, reference_path, &mut None, &cancelled)
            .map(Box::new)
            .map_err(|e| match e {
                EngineError::Cancelled => "stopped".to_string(),
                e => e.to_string(),
            });
        let _ = events.send(EngineEvent::AbScored {
            request_id: id,
            score,
        });
    }
    Ok(())
}

/// Measure the loaded model as `plan` asks, point by point, in contexts of its own (the chat's
/// context and its KV cache are left as they are); a cancel stops it between points.
fn sweep(
    model: &llama_cpp_2::model::LlamaModel,
    settings: &crate::llama::settings::EngineSettings,
    id: super::RequestId,
    plan: &super::SweepPlan,
    events: &EventSender,
    cancel_through: &AtomicU64,
) -> Result<(), EngineError> {
    let cancelled = || cancel_through.load(Ordering::SeqCst) >= id;
    match plan {
        super::SweepPlan::Batch {
            batches,
            n_prompt,
            n_gen,
        } => {
            for &b in batches {
                if cancelled() {
                    break;
                }
                let (point, prefill_ms) =
                    crate::llama::measure::measure_batch(model, settings, b, *n_prompt, *n_gen)?;
                let _ = events.send(EngineEvent::BatchPoint {
                    request_id: id,
                    point,
                    prefill_ms,
                });
            }
        }
        super::SweepPlan::Depth { depths, n_gen } => {
            for &depth in depths {
                if cancelled() {
                    break;
                }
                let run = crate::llama::measure::measure_depth(model, settings, depth, *n_gen)?;
                let _ = events.send(EngineEvent::DepthPoint {
                    request_id: id,
                    run,
                });
            }
        }
    }
    Ok(())
}

/// One timed run of bench's tg test of `n_gen` tokens, in `tg`'s context (made, and warmed up,
/// when there is none of this length).
fn bench_tg<'m>(
    model: &'m llama_cpp_2::model::LlamaModel,
    settings: &crate::llama::settings::EngineSettings,
    tg: &mut Option<(u32, llama::measure::Bencher<'m>)>,
    n_gen: u32,
) -> Result<super::TgSample, EngineError> {
    use llama::measure::{Bencher, TestSpec};
    let n_gen = n_gen.max(1);
    let test = TestSpec::Tg { n_gen };
    if tg.as_ref().is_none_or(|(n, _)| *n != n_gen) {
        *tg = None;
        let mut s = settings.clone();
        s.n_ctx = n_gen;
        s.sampling = crate::llama::settings::SamplingMode::Host;
        s.first_sampling = None;
        let mut bencher = Bencher::new(model, llama::new_context(model, &s, 1)?);
        bencher.warm_up(&test)?;
        *tg = Some((n_gen, bencher));
    }
    let Some((_, bencher)) = tg.as_mut() else {
        return Err(EngineError::NoModel);
    };
    // tg feeds random tokens: the sampling is never used.
    let s = bencher.run(&test, 0, &crate::llama::settings::SamplingParams::default())?;
    let n = s.tokens_generated.max(1) as f64;
    Ok(super::TgSample {
        tok_per_s: crate::metrics::rate_per_s(s.tokens_generated as usize, s.total).unwrap_or(0.0),
        decode_call_ms: crate::metrics::ms(s.decode.saturating_sub(s.host)) / n,
        host_us_per_token: s.host.as_secs_f64() * 1e6 / n,
    })
}

/// ρ for the speculation figures' roofline (`metrics::spec::RowCost`), measured once when a
/// speculating engine loads; `None` (logged) when it cannot be.
fn measure_row_cost(
    model: &llama_cpp_2::model::LlamaModel,
    settings: &crate::llama::settings::EngineSettings,
) -> Option<f64> {
    let started = Instant::now();
    let rc = llama::measure::row_cost(model, settings, crate::metrics::spec::ROW_COST_ROWS)
        .inspect_err(|e| tracing::warn!("row cost for the speculation roofline not measured: {e}"))
        .ok()?;
    let rho = rc.in_passes();
    tracing::info!(
        "row cost for the speculation roofline: one row {:.2} ms, {} rows {:.2} ms, ρ {:?} (measured in {:.0} ms)",
        rc.one_row_ms,
        rc.rows,
        rc.rows_ms,
        rho,
        crate::metrics::ms(started.elapsed())
    );
    // A planted error for scripts/spec-bench-sweep.sh --check (`plant` builds only).
    #[cfg(feature = "plant")]
    let rho = rho.map(|r| r * crate::metrics::planted_factor("row_cost").unwrap_or(1.0));
    rho
}

fn serve_without_model(io: &Io<'_>) -> Next {
    loop {
        let request_id = match io.commands.recv() {
            Ok(EngineCommand::Sweep { id, .. }) => {
                let _ = io.events.send(EngineEvent::SweepDone {
                    request_id: id,
                    error: Some(EngineError::NoModel),
                });
                continue;
            }
            Ok(EngineCommand::SwitchModel { id, config }) => match try_switch(id, config, io) {
                Some(next) => return next,
                None => continue,
            },
            Ok(EngineCommand::Shutdown) | Err(_) => return Next::Shutdown,
            Ok(
                EngineCommand::Generate(GenerateRequest { id, .. })
                | EngineCommand::AbGenerate {
                    request: GenerateRequest { id, .. },
                    ..
                }
                | EngineCommand::BenchTg { id, .. }
                | EngineCommand::ScoreLast { id, .. }
                | EngineCommand::ScoreText { id, .. },
            ) => id,
        };
        let _ = io.events.send(EngineEvent::Failed {
            request_id,
            error: EngineError::NoModel,
        });
    }
}

/// The event that ends a request: `done` with the result, or `Failed`.
fn outcome<T>(
    request_id: RequestId,
    result: Result<T, EngineError>,
    done: impl FnOnce(RequestId, T) -> EngineEvent,
) -> EngineEvent {
    match result {
        Ok(report) => done(request_id, report),
        Err(error) => EngineEvent::Failed { request_id, error },
    }
}
