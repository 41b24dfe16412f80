//! The derived figures of one frame, built once at the top of `ui::draw` from the state and
//! `now`, then handed to the panes by reference: the answer in focus and its figures, its ITL
//! gaps, the waiting clock, the context used, the roofline and the A/B sides. The panes only
//! choose what fits and format it.
//!
//! A figure that is not defined yet (a stage the turn has not reached, a rate without tokens)
//! is `None` here, and every pane shows `None` as "—". Building a `View` is pure: no I/O, no
//! clock other than the `now` passed in.

use std::time::{Duration, Instant};

use crate::app::conversation::{AssistantTurn, TurnPhase};
use crate::app::App;
use crate::metrics::LatencyStats;

/// Everything the panes of one frame show that is computed rather than stored.
pub(crate) struct View<'a> {
    /// The answer whose figures the metrics show: the one in flight, else the last finished.
    pub focus: Option<Focus<'a>>,
    /// How long the answer in flight has waited for its first token (queued or in prefill).
    pub waiting: Option<Duration>,
    /// Context used: while an answer is in flight, its prompt plus the tokens so far;
    /// otherwise what the last finished turn left in the KV cache.
    pub context_used: usize,
    /// The context window of the loaded model.
    pub n_ctx: Option<u32>,
    /// The roofline of the answer in focus at the current context depth.
    pub roofline: Roofline,
    /// The A/B screen's two sides, when it is open.
    pub ab: Option<AbView>,
}

/// The answer in focus.
pub(crate) struct Focus<'a> {
    /// 1-based turn number in the conversation.
    pub number: usize,
    pub turn: &'a AssistantTurn,
    pub figures: Figures,
    /// Inter-token gaps, oldest first (the sparkline and the "last" ITL cell).
    pub gaps: Vec<Duration>,
}

/// One answer's figures, each `None` while undefined.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Figures {
    pub ttft_ms: Option<f64>,
    /// The TTFT breakdown: known once prefill is done (the engine reports it then).
    pub queue_ms: Option<f64>,
    pub template_tokenize_ms: Option<f64>,
    pub prefill_ms: Option<f64>,
    pub first_sample_ms: Option<f64>,
    pub prefill_tok_per_s: Option<f64>,
    /// Prompt and cache counts: known once prefill starts.
    pub prefilled_tokens: Option<usize>,
    pub cached_tokens: Option<usize>,
    pub decode_tok_per_s: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub tokens_generated: usize,
    /// Undefined for an answer in flight until its first token is ready.
    pub e2e_ms: Option<f64>,
    pub itl: Option<LatencyStats>,
    /// Gaps between target passes and tokens per pass (a finished local turn): beside ITL
    /// when speculation delivers several tokens a pass.
    pub pass_gap: Option<LatencyStats>,
    pub tokens_per_pass: Option<f64>,
    /// A turn answered by a server: its own TTFT breakdown instead of the local stages.
    pub remote: Option<RemoteFigures>,
    /// A turn that thought before it answered: its thinking and answer figures
    /// (docs/metrics.md, "Thinking"); `None` for a turn without thinking.
    pub thinking: Option<crate::metrics::ThinkingSummary>,
    /// The answer in flight is still in its thinking span.
    pub still_thinking: bool,
}

/// A remote turn's TTFT breakdown and where its token counts come from (docs/metrics.md,
/// "Remote servers"): known when the turn has finished; a part the server does not report
/// stays `None`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RemoteFigures {
    pub network_rtt_ms: Option<f64>,
    pub server_prompt_ms: Option<f64>,
    /// The server's model load for this turn (ollama's `load_duration`).
    pub server_load_ms: Option<f64>,
    /// vLLM's (or TGI's) queue time and vLLM's own time to first token.
    pub server_queue_ms: Option<f64>,
    pub server_first_token_ms: Option<f64>,
    pub prompt_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
    /// TTFT − network RTT − the server's part (`RemoteSummary::queue_transport_ms`).
    pub rest_ms: Option<f64>,
    /// Whose per-request report the server figures are (`None`: the server sent none).
    pub timing_source: Option<&'static str>,
    /// The turn woke the server or waited for a model load.
    pub cold: Option<crate::metrics::remote::ColdStart>,
    /// In words, e.g. "server usage, 1 token per chunk (exact)".
    pub token_source: &'static str,
}

/// What the token counts of a remote answer still streaming are based on.
pub(crate) const LIVE_REMOTE_TOKENS: &str = "1 per chunk until the server's usage arrives";
/// A finished answer without its server record (one resumed from the history, which keeps the
/// figures but not the breakdown, or one that failed).
pub(crate) const UNKNOWN_REMOTE_TOKENS: &str = "not known (no server record for this answer)";

/// Bytes a decode step reads at the current context depth, the bandwidth ceiling that gives,
/// how close decode gets to it and the cost per 1M tokens (all from `metrics::roofline`).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Roofline {
    /// The bandwidth decode reads at, as the model is placed (`Peaks::placed`).
    pub bandwidth: Option<crate::metrics::roofline::Bandwidth>,
    pub bytes_per_token: Option<f64>,
    pub ceiling_tok_per_s: Option<f64>,
    /// Memory-bandwidth utilisation, a fraction.
    pub mbu: Option<f64>,
    pub cost_per_million_tokens: Option<f64>,
    /// The answer in focus ran on another model than the one loaded (a resumed conversation,
    /// or one before `/model`): its file name. Its figures are then never set against this
    /// model's ceiling: no MBU and no cost.
    pub other_model: Option<String>,
}

/// The A/B screen's figures.
pub(crate) struct AbView {
    pub a: Figures,
    pub b: Figures,
    /// Since B was asked for (the loading and prefill clock).
    pub waited: Duration,
}

impl<'a> View<'a> {
    pub(crate) fn new(app: &'a App, now: Instant) -> Self {
        let remote_chat = app
            .model
            .as_ref()
            .is_some_and(|m| m.backend == crate::remote::REMOTE_BACKEND);
        let focus = focus_turn(app).map(|(number, turn)| Focus {
            number,
            turn,
            figures: Figures::of(turn, remote_chat),
            gaps: turn.timeline.inter_token_latencies(),
        });
        let context_used = match app.conversation.active() {
            Some(t) if matches!(t.phase, TurnPhase::Prefill | TurnPhase::Streaming) => {
                t.timeline.prompt_tokens.unwrap_or(0) + t.timeline.tokens_generated()
            }
            _ => app.context_used,
        };
        Self {
            waiting: waiting(app, now),
            context_used,
            // 0: not known (a server's model).
            n_ctx: app.model.as_ref().map(|m| m.n_ctx).filter(|n| *n > 0),
            roofline: Roofline::of(app, context_used, focus.as_ref()),
            ab: app.ab.as_ref().map(|ab| AbView {
                a: Figures::of(&ab.a, remote_chat),
                b: Figures::of(&ab.b, crate::remote::is_url(&ab.b_path)),
                waited: now.saturating_duration_since(ab.started),
            }),
            focus,
        }
    }
}

impl Figures {
    /// A turn's figures from its summary (the finished one, or the live one of its timeline),
    /// each stage left `None` until the turn has reached it. `remote`: the turn is answered
    /// by a server (known before its record arrives, for the live display).
    pub(crate) fn of(turn: &AssistantTurn, remote: bool) -> Self {
        if let Some(record) = &turn.timeline.remote {
            return Self::of_remote(turn, record);
        }
        let s = turn.current_summary();
        // The engine reports the template, tokenize and prefill durations when prefill is
        // done (and with the finished turn); until then they are undefined.
        let known = turn.summary.is_some() || turn.timeline.prefill_done_at.is_some();
        let if_known = |v: Option<f64>| v.filter(|_| known);
        // Prompt and cache counts arrive when prefill starts.
        let counted = turn.phase != TurnPhase::Queued;
        let if_counted = |v: usize| Some(v).filter(|_| counted);
        let e2e_defined = !turn.phase.is_active() || turn.timeline.tokens_generated() > 0;
        Self {
            ttft_ms: s.ttft_ms,
            queue_ms: if_known(Some(s.queue_ms)),
            template_tokenize_ms: if_known(Some(s.template_tokenize_ms)),
            prefill_ms: if_known(Some(s.prefill_ms)),
            first_sample_ms: if_known(s.first_sample_ms),
            prefill_tok_per_s: if_known(s.prefill_tok_per_s),
            prefilled_tokens: if_counted(s.prefilled_tokens),
            cached_tokens: if_counted(s.cached_tokens),
            decode_tok_per_s: s.decode_tok_per_s,
            tpot_ms: s.tpot_ms,
            tokens_generated: s.tokens_generated,
            e2e_ms: Some(s.e2e_ms).filter(|_| e2e_defined),
            itl: s.itl,
            pass_gap: s.pass_gap,
            tokens_per_pass: s.tokens_per_pass,
            still_thinking: still_thinking(turn),
            thinking: s.thinking,
            remote: remote.then_some(RemoteFigures {
                token_source: if turn.phase.is_active() {
                    LIVE_REMOTE_TOKENS
                } else {
                    UNKNOWN_REMOTE_TOKENS
                },
                ..RemoteFigures::default()
            }),
        }
    }

    /// A finished remote turn: every figure from its record, as `run --url` prints them.
    fn of_remote(turn: &AssistantTurn, record: &crate::metrics::remote::RemoteTimeline) -> Self {
        let r = record.summary();
        let local = turn.current_summary();
        Self {
            ttft_ms: r.ttft_ms,
            prefill_ms: r.server_prompt_ms,
            prefill_tok_per_s: local.prefill_tok_per_s,
            prefilled_tokens: r.server_prompt_tokens.map(|n| n as usize),
            cached_tokens: r.server_cached_tokens.map(|n| n as usize),
            decode_tok_per_s: r.decode_tok_per_s,
            tpot_ms: r.tpot_ms,
            tokens_generated: r.tokens_generated as usize,
            e2e_ms: Some(r.e2e_ms),
            itl: r.itl,
            thinking: local.thinking,
            remote: Some(RemoteFigures {
                network_rtt_ms: r.network_rtt_ms,
                server_prompt_ms: r.server_prompt_ms,
                server_load_ms: r.server_load_ms,
                server_queue_ms: r.server_queue_ms,
                server_first_token_ms: r.server_first_token_ms,
                prompt_tokens: r.prompt_tokens,
                cached_tokens: r.server_cached_tokens,
                rest_ms: r.queue_transport_ms,
                timing_source: r.server_timing_source.map(|s| s.label()),
                cold: r.cold_start,
                token_source: r.token_count_source.label(),
            }),
            ..Self::default()
        }
    }
}

impl Roofline {
    /// `tokens_per_pass` (speculation) turns the decode rate into target passes a second:
    /// each pass reads the weights once, so MBU is measured against the ceiling for that
    /// many tokens a pass, never above 100% merely because passes carry several tokens.
    fn of(app: &App, context_used: usize, focus: Option<&Focus>) -> Self {
        use crate::metrics::roofline::{ceiling_tok_per_s, cost_per_million_tokens};
        let decode_tok_per_s = focus.and_then(|f| f.figures.decode_tok_per_s);
        let tokens_per_pass = focus.and_then(|f| f.figures.tokens_per_pass);
        let other_model = focus
            .map(|f| f.turn)
            .filter(|turn| !ran_on_loaded(turn, app.model.as_ref()))
            .map(|turn| {
                turn.model_file
                    .clone()
                    .unwrap_or_else(|| "another model".to_string())
            });
        let decode_tok_per_s = decode_tok_per_s.filter(|_| other_model.is_none());
        let bytes_per_token = app
            .model
            .as_ref()
            .and_then(|m| m.bytes_per_token(context_used as u64));
        let bandwidth = match app.model.as_ref() {
            Some(m) => app
                .bandwidth
                .placed(m.weight_bytes.as_ref(), m.n_layer, m.n_gpu_layers),
            None => app.bandwidth.before_load(),
        };
        let ceiling = bandwidth
            .as_ref()
            .zip(bytes_per_token)
            .and_then(|(b, bytes)| ceiling_tok_per_s(b.bytes_per_s, bytes));
        Self {
            bandwidth,
            bytes_per_token,
            ceiling_tok_per_s: ceiling,
            mbu: crate::metrics::roofline::mbu_of(decode_tok_per_s, ceiling, tokens_per_pass),
            cost_per_million_tokens: decode_tok_per_s
                .and_then(|r| cost_per_million_tokens(app.price_per_hour_usd, r)),
            other_model,
        }
    }
}

/// Whether `turn` ran on the model now loaded (by fingerprint, else by path). A turn that
/// does not say which model it ran on (saved by an older tokscope) did not, as far as a
/// ceiling is concerned; with no model loaded there is no ceiling to set it against.
pub(crate) fn ran_on_loaded(
    turn: &AssistantTurn,
    loaded: Option<&crate::engine::ModelInfo>,
) -> bool {
    match (&turn.model, loaded) {
        (_, None) => true,
        (Some(model), Some(info)) => model.is(info),
        (None, Some(_)) => false,
    }
}

/// The answer whose figures the metrics show: the one in flight, else the last finished one,
/// with its 1-based turn number.
fn focus_turn(app: &App) -> Option<(usize, &AssistantTurn)> {
    let conversation = &app.conversation;
    let turn = conversation
        .active()
        .or_else(|| conversation.last_finished())?;
    let index = conversation
        .exchanges
        .iter()
        .position(|e| e.assistant.as_ref().is_some_and(|a| std::ptr::eq(a, turn)))?;
    Some((index + 1, turn))
}

/// The answer is in flight and its thinking span has not closed.
fn still_thinking(turn: &AssistantTurn) -> bool {
    turn.phase.is_active()
        && turn
            .timeline
            .thinking
            .is_some_and(|span| span.ended_at.is_none())
}

/// How long the answer in flight has waited for its first token (queued or in prefill).
pub(crate) fn waiting(app: &App, now: Instant) -> Option<Duration> {
    let turn = app.conversation.active()?;
    if !matches!(turn.phase, TurnPhase::Queued | TurnPhase::Prefill) {
        return None;
    }
    app.active_since
        .map(|since| now.saturating_duration_since(since))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remote_answer_without_its_record_says_its_counts_are_not_known() {
        let mut turn = AssistantTurn::new(1, None);
        assert_eq!(
            Figures::of(&turn, true).remote.map(|r| r.token_source),
            Some(LIVE_REMOTE_TOKENS)
        );
        turn.phase = TurnPhase::Done(crate::engine::StopReason::EndOfGeneration);
        let finished = Figures::of(&turn, true).remote;
        assert_eq!(
            finished.as_ref().map(|r| r.token_source),
            Some(UNKNOWN_REMOTE_TOKENS)
        );
        assert_eq!(finished.and_then(|r| r.network_rtt_ms), None);
        assert!(Figures::of(&turn, false).remote.is_none());
    }

    /// An app with `loaded` ready (a model whose ceiling is defined) and one finished answer
    /// at 50 tok/s that ran on `ran_on`.
    fn app_with_answer(
        loaded: &crate::engine::ModelInfo,
        ran_on: Option<crate::history::SavedModel>,
    ) -> App {
        use crate::metrics::roofline::{Bandwidth, BandwidthSource, Peaks, WeightBytes};
        let mut app = App::new(
            loaded.path.clone(),
            crate::app::conversation::Conversation::new("c".into(), 0, None),
            crate::engine::SamplingParams::default(),
            64,
        );
        app.engine = crate::app::EngineStatus::Ready;
        app.model = Some(crate::engine::ModelInfo {
            weight_bytes: Some(WeightBytes {
                total_bytes: 400_000_000,
                token_embd_bytes: 100_000_000,
                embd_row_bytes: 1_000,
                tied_output: false,
                output_bytes: 100_000_000,
            }),
            ..loaded.clone()
        });
        app.bandwidth = Peaks::configured(Some(Bandwidth {
            bytes_per_s: 1e11,
            source: BandwidthSource::Config,
        }));
        let mut turn = AssistantTurn::new(0, ran_on.as_ref().map(|_| "a.gguf".to_string()));
        turn.phase = TurnPhase::Done(crate::engine::StopReason::EndOfGeneration);
        turn.model = ran_on;
        turn.summary = Some(crate::metrics::TurnSummary {
            tokens_generated: 51,
            decode_tok_per_s: Some(50.0),
            ..turn.timeline.summary()
        });
        app.conversation
            .exchanges
            .push(crate::app::conversation::Exchange {
                user: "q".into(),
                assistant: Some(turn),
            });
        app
    }

    #[test]
    fn an_answer_from_another_model_is_never_set_against_this_model_s_ceiling() {
        let loaded = crate::engine::ModelInfo {
            file_name: "b.gguf".into(),
            path: "/m/b.gguf".into(),
            fingerprint: "00000000000000bb".into(),
            ..Default::default()
        };
        let a = crate::history::SavedModel {
            path: "/m/a.gguf".into(),
            fingerprint: Some("00000000000000aa".into()),
        };
        let same = crate::history::SavedModel::of(&loaded);
        let now = Instant::now();

        let app = app_with_answer(&loaded, Some(same.clone()));
        let r = View::new(&app, now).roofline;
        assert!(r.ceiling_tok_per_s.is_some() && r.mbu.is_some(), "{r:?}");
        assert!(r.cost_per_million_tokens.is_some());
        assert_eq!(r.other_model, None);

        // A resumed answer from model A, with B loaded: B's ceiling, but no MBU or cost of A's
        // answer against it.
        let app = app_with_answer(&loaded, Some(a.clone()));
        let r = View::new(&app, now).roofline;
        assert!(r.ceiling_tok_per_s.is_some(), "{r:?}");
        assert_eq!((r.mbu, r.cost_per_million_tokens), (None, None));
        assert_eq!(r.other_model.as_deref(), Some("a.gguf"));

        // The same path holding another file (its fingerprint changed) is another model.
        let rewritten = crate::history::SavedModel {
            path: loaded.path.clone(),
            fingerprint: Some("00000000000000cc".into()),
        };
        let app = app_with_answer(&loaded, Some(rewritten));
        assert_eq!(View::new(&app, now).roofline.mbu, None);
        // A copy of the same file elsewhere is the same model.
        let copy = crate::history::SavedModel {
            path: "/elsewhere/b.gguf".into(),
            ..same
        };
        let app = app_with_answer(&loaded, Some(copy));
        assert!(View::new(&app, now).roofline.mbu.is_some());
        // An answer saved by an older tokscope, which did not say its model: none either.
        let app = app_with_answer(&loaded, None);
        let r = View::new(&app, now).roofline;
        assert_eq!((r.mbu, r.cost_per_million_tokens), (None, None));
        assert_eq!(r.other_model.as_deref(), Some("another model"));
    }

    /// Issue 60 item 2: the chat's live ceiling follows the conversation's depth. While an
    /// answer is prefilled and streamed, the bytes per token are the weights + the KV cache
    /// at the whole prompt (cached turns included, not only the new tokens) + the tokens
    /// generated so far, never depth 0 nor the depth the last turn ended at; once it
    /// finishes, the depth it ended at.
    #[test]
    fn the_live_ceiling_follows_the_conversation_s_depth() {
        use crate::metrics::roofline::KvShape;
        let loaded = crate::engine::ModelInfo {
            path: "/m/b.gguf".into(),
            fingerprint: "00000000000000bb".into(),
            ..Default::default()
        };
        let mut app = app_with_answer(&loaded, Some(crate::history::SavedModel::of(&loaded)));
        let kv = KvShape {
            n_layer: 16,
            n_embd_k: 512,
            n_embd_v: 512,
            type_k: crate::gguf::kv_type::KvType::F16,
            type_v: crate::gguf::kv_type::KvType::F16,
            sliding_window: None,
        };
        if let Some(m) = app.model.as_mut() {
            m.kv_shape = Some(kv);
        }
        // The first answer ended 500 tokens deep.
        app.context_used = 500;
        let weights = 400_000_000.0 - 100_000_000.0 + 1_000.0;
        let at = |depth: u64| weights + kv.bytes_read_at(depth);
        let now = Instant::now();
        let ceiling_at = |app: &App| {
            let r = View::new(app, now).roofline;
            (r.bytes_per_token, r.ceiling_tok_per_s)
        };
        assert_eq!(ceiling_at(&app), (Some(at(500)), Some(1e11 / at(500))));

        app.conversation
            .exchanges
            .push(crate::app::conversation::Exchange {
                user: "more".into(),
                assistant: Some(AssistantTurn::new(2, None)),
            });
        fn turn(app: &mut App) -> &mut AssistantTurn {
            app.conversation
                .exchanges
                .last_mut()
                .and_then(|e| e.assistant.as_mut())
                .expect("the turn in flight")
        }
        // A 3000-token prompt of which 500 were cached: 3000 deep, not 2500 nor 500.
        turn(&mut app).on_prefill_started(3000, 500);
        assert_eq!(ceiling_at(&app), (Some(at(3000)), Some(1e11 / at(3000))));
        let mut last = at(3000);
        for i in 1..=40u64 {
            turn(&mut app).on_token("x", Duration::from_millis(10 * i));
            let (bytes, ceiling) = ceiling_at(&app);
            assert_eq!(bytes, Some(at(3000 + i)), "after {i} tokens");
            assert!(bytes.unwrap() > last && ceiling < Some(1e11 / last));
            last = bytes.unwrap();
        }
        // Finished: the depth it ended at, as the engine reports it.
        let t = turn(&mut app);
        t.phase = TurnPhase::Done(crate::engine::StopReason::EndOfGeneration);
        app.context_used = 3040;
        assert_eq!(ceiling_at(&app).0, Some(at(3040)));
    }

    #[test]
    fn a_turn_s_stages_are_none_until_it_reaches_them() {
        let mut turn = AssistantTurn::new(1, None);
        let queued = Figures::of(&turn, false);
        assert_eq!(queued.prefilled_tokens, None);
        assert_eq!(queued.prefill_ms, None);
        assert_eq!(queued.ttft_ms, None);
        assert_eq!(queued.e2e_ms, None);

        turn.on_prefill_started(10, 4);
        let prefilling = Figures::of(&turn, false);
        assert_eq!(prefilling.prefilled_tokens, Some(6));
        assert_eq!(prefilling.cached_tokens, Some(4));
        assert_eq!(prefilling.queue_ms, None);
        assert_eq!(prefilling.e2e_ms, None);

        turn.on_prefill_done(
            Duration::from_millis(2),
            Duration::from_millis(5),
            Duration::from_millis(10),
        );
        let prefilled = Figures::of(&turn, false);
        assert_eq!(prefilled.queue_ms, Some(3.0));
        assert_eq!(prefilled.prefill_ms, Some(5.0));
        assert_eq!(prefilled.e2e_ms, None);

        turn.on_token("a", Duration::from_millis(12));
        let streaming = Figures::of(&turn, false);
        assert_eq!(streaming.tokens_generated, 1);
        assert!(streaming.ttft_ms.is_some());
        assert!(streaming.e2e_ms.is_some());
    }
}
