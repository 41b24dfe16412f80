//! The conversation and the chat turn as a small state machine, with no I/O:
//! idle → prefill → streaming → done / stopped / failed. Live metrics of the turn in flight
//! are kept as the same `TurnTimeline` the engine reports, filled from token events as they
//! arrive, so the live pane and the final figures use one definition.

use std::time::Duration;

use crate::engine::{ChatMessage, RequestId, Role, StopReason, TurnReport};
/// The settings an answer was generated with (so that an A/B comparison can repeat them, and
/// the history keeps them).
pub use crate::history::TurnSettings;
use crate::history::{SavedConversation, SavedModel, SavedTurn};
use crate::metrics::{TurnSummary, TurnTimeline};

/// Where a turn stands.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum TurnPhase {
    /// Sent to the engine; waiting for prefill to start (queue, template, tokenize).
    #[default]
    Queued,
    /// Prefill running.
    Prefill,
    /// Tokens arriving.
    Streaming,
    /// Finished (end of generation, max tokens, stop string or full context).
    Done(StopReason),
    /// Stopped by the user; the partial answer is kept.
    Stopped,
    /// The engine failed; the message says why.
    Failed(String),
}

impl TurnPhase {
    /// How a turn that ended for `reason` stands (a cancelled one is stopped).
    fn ended(reason: StopReason) -> Self {
        match reason {
            StopReason::Cancelled => TurnPhase::Stopped,
            other => TurnPhase::Done(other),
        }
    }

    pub(crate) fn is_active(&self) -> bool {
        matches!(
            self,
            TurnPhase::Queued | TurnPhase::Prefill | TurnPhase::Streaming
        )
    }
}

/// An assistant answer, finished or in flight.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AssistantTurn {
    pub request_id: RequestId,
    /// The answer's text (without the thinking of a model that thought first).
    pub text: String,
    /// The thinking's text, markers left out, of a turn that thought (`None`: no thinking
    /// span); its figures are `timeline.thinking` and the summary's `thinking`.
    pub thinking: Option<String>,
    pub phase: TurnPhase,
    /// Live while streaming, replaced by the engine's report at the end.
    pub timeline: TurnTimeline,
    /// Figures of a finished turn (also for turns loaded from history, which have no timeline).
    pub summary: Option<TurnSummary>,
    pub model_file: Option<String>,
    /// The model it ran on (`None`: not known, as for a turn saved by an older tokscope); the
    /// roofline of a turn is only drawn against this model's ceiling.
    pub model: Option<SavedModel>,
    /// When it finished (Unix seconds), kept in the history as the turn's own.
    pub finished_unix_s: Option<u64>,
    /// Tokens in the KV cache after the turn.
    pub context_used: Option<usize>,
    /// What it was generated with (unknown for answers saved by an older tokscope).
    pub settings: Option<TurnSettings>,
    /// Prefill progress: tokens of this turn's prefill done so far, of the total.
    pub prefill_progress: Option<(usize, usize)>,
    /// Esc was pressed: the engine stops at its next check (within one micro-batch of
    /// prefill or one token); shown as "stopping…" until it does.
    pub stopping: bool,
    /// Speculative decoding's figures: live after each target pass, then the report's.
    pub spec: Option<crate::metrics::spec::SpecStats>,
    /// Where the finished turn sampled and its host time per token (the metrics detail).
    pub host: Option<HostDetail>,
    /// The step profiler's record of the finished turn (`--profile`): its nodes go into the
    /// chat's `/trace`.
    pub profile: Option<Box<crate::metrics::profile::ProfileRecord>>,
    /// The answer against the reference model (`--ref`, `/ref`): being scored, scored, or why
    /// not (`None`: no reference was set when it finished).
    pub quality: Option<TurnQuality>,
    /// The answer's own confidence token by token (asked for while `Alt+K` colours answers
    /// and no reference is set; `None`: not asked for).
    pub confidence: Option<TurnConfidence>,
}

/// An answer's own confidence: the probability of each chosen token and its distribution's
/// entropy and top tokens, from the logits the host sampled from.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnConfidence {
    Measured(Vec<crate::metrics::quality::TokenConfidence>),
    /// Asked for, but the turn sampled on the backend: no logits reached the host.
    Unavailable,
}

impl TurnConfidence {
    /// The tokens' figures, when measured.
    pub(crate) fn tokens(&self) -> Option<&[crate::metrics::quality::TokenConfidence]> {
        match self {
            TurnConfidence::Measured(t) => Some(t),
            TurnConfidence::Unavailable => None,
        }
    }
}

/// An answer's score against the reference model, after the answer (never while it decodes).
#[derive(Debug, Clone, PartialEq)]
pub enum TurnQuality {
    /// The engine scores it under this request id.
    Scoring(RequestId),
    Scored(Box<crate::metrics::quality::AnswerScore>),
    /// Not scored, and why (a new message came first, the reference failed to load, …).
    NotScored(String),
}

impl TurnQuality {
    /// The score, when there is one.
    pub(crate) fn score(&self) -> Option<&crate::metrics::quality::AnswerScore> {
        match self {
            TurnQuality::Scored(s) => Some(s),
            _ => None,
        }
    }
}

impl AssistantTurn {
    pub fn new(request_id: RequestId, model_file: Option<String>) -> Self {
        Self {
            request_id,
            model_file,
            ..Self::default()
        }
    }

    pub(crate) fn on_prefill_progress(&mut self, done: usize, total: usize) {
        self.prefill_progress = Some((done, total));
    }

    pub(crate) fn is_finished(&self) -> bool {
        matches!(self.phase, TurnPhase::Done(_) | TurnPhase::Stopped)
    }

    /// The turn's figures: the final ones when finished, else derived from the live timeline.
    pub(crate) fn current_summary(&self) -> TurnSummary {
        self.summary
            .clone()
            .unwrap_or_else(|| self.timeline.summary())
    }

    pub fn on_prefill_started(&mut self, prompt_tokens: usize, cached_tokens: usize) {
        if self.phase == TurnPhase::Queued {
            self.phase = TurnPhase::Prefill;
        }
        self.timeline.prompt_tokens = Some(prompt_tokens);
        self.timeline.cached_tokens = Some(cached_tokens);
    }

    pub(crate) fn on_prefill_done(
        &mut self,
        template_tokenize: Duration,
        prefill: Duration,
        at: Duration,
    ) {
        self.timeline.template_tokenize = Some(template_tokenize);
        self.timeline.prefill = Some(prefill);
        self.timeline.prefill_done_at = Some(at);
        // The engine takes the breakdown's boundaries one after the other from the request's
        // submission, so what precedes the template step is the queue.
        self.timeline.queue = Some(at.saturating_sub(template_tokenize + prefill));
    }

    pub fn on_token(&mut self, text: &str, at: Duration) {
        if matches!(self.phase, TurnPhase::Queued | TurnPhase::Prefill) {
            self.phase = TurnPhase::Streaming;
        }
        self.text.push_str(text);
        self.timeline.token_ready_at.push(at);
    }

    /// The thinking span after a token that changed it, and the token's thinking text.
    pub fn on_thinking(&mut self, span: crate::metrics::ThinkingSpan, text: &str) {
        self.thinking.get_or_insert_with(String::new).push_str(text);
        self.timeline.thinking = Some(span);
    }

    pub fn on_finished(&mut self, report: TurnReport) {
        self.text = report.text;
        self.thinking = report.thinking_text;
        self.summary = Some(report.timeline.summary());
        self.timeline = report.timeline;
        self.context_used = Some(report.context_used);
        self.spec = report.spec;
        self.profile = report.profile.map(Box::new);
        self.host = Some(HostDetail {
            host_us_per_token: report.host.summary().host_us_per_token,
            sampler: report.sampler,
            place: report.sampling,
        });
        self.phase = TurnPhase::ended(report.stop_reason);
    }

    pub fn on_failed(&mut self, message: String) {
        self.phase = TurnPhase::Failed(message);
    }
}

/// Where a finished turn sampled and what the host did per token between decode calls.
#[derive(Debug, Clone, PartialEq)]
pub struct HostDetail {
    /// Host time per generated token between two decode calls, µs (docs/metrics.md).
    pub host_us_per_token: Option<f64>,
    /// The sampling path (`host-greedy`, `host-top-k`, `host-chain`, `backend`, `server`).
    pub sampler: &'static str,
    pub place: crate::llama::sampler::SamplingPlace,
}

/// One user message and its answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Exchange {
    pub user: String,
    pub assistant: Option<AssistantTurn>,
}

/// The conversation on screen.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Conversation {
    pub id: String,
    pub created_unix_s: u64,
    pub system_prompt: Option<String>,
    pub exchanges: Vec<Exchange>,
}

impl Conversation {
    pub fn new(id: String, created_unix_s: u64, system_prompt: Option<String>) -> Self {
        Self {
            id,
            created_unix_s,
            system_prompt,
            exchanges: Vec::new(),
        }
    }

    /// The messages to send for the last exchange: system prompt, every earlier exchange that
    /// has an answer (failed ones are left out), then the last user message.
    pub(crate) fn messages_for_last(&self) -> Vec<ChatMessage> {
        let mut out: Vec<_> = self
            .system_prompt
            .iter()
            .map(|s| ChatMessage::new(Role::System, s.clone()))
            .collect();
        let Some((last, earlier)) = self.exchanges.split_last() else {
            return out;
        };
        for ex in earlier {
            let answered = ex.assistant.as_ref();
            if let Some(a) = answered.filter(|a| !matches!(a.phase, TurnPhase::Failed(_))) {
                if !a.text.is_empty() {
                    out.push(ChatMessage::new(Role::User, ex.user.clone()));
                    out.push(ChatMessage {
                        reasoning: a.thinking.clone(),
                        ..ChatMessage::new(Role::Assistant, a.text.clone())
                    });
                }
            }
        }
        out.push(ChatMessage::new(Role::User, last.user.clone()));
        out
    }

    /// The answer in flight, if any.
    pub fn active(&self) -> Option<&AssistantTurn> {
        self.exchanges
            .last()
            .and_then(|e| e.assistant.as_ref())
            .filter(|a| a.phase.is_active())
    }

    pub(crate) fn active_mut(&mut self) -> Option<&mut AssistantTurn> {
        self.exchanges
            .last_mut()
            .and_then(|e| e.assistant.as_mut())
            .filter(|a| a.phase.is_active())
    }

    /// The answer belonging to a request, when it is the latest one (events of older
    /// requests are dropped).
    pub(crate) fn turn_for(&mut self, id: RequestId) -> Option<&mut AssistantTurn> {
        self.exchanges
            .last_mut()
            .and_then(|e| e.assistant.as_mut())
            .filter(|a| a.request_id == id)
    }

    /// The last finished answer (the most recent with figures).
    pub(crate) fn last_finished(&self) -> Option<&AssistantTurn> {
        self.exchanges
            .iter()
            .rev()
            .filter_map(|e| e.assistant.as_ref())
            .find(|a| a.summary.is_some())
    }

    /// What is saved to disk: every exchange with a finished or stopped answer.
    pub(crate) fn to_saved(&self, updated_unix_s: u64) -> SavedConversation {
        let turns = self
            .exchanges
            .iter()
            .filter_map(|e| {
                let a = e.assistant.as_ref()?;
                let stop_reason = match &a.phase {
                    TurnPhase::Done(r) => *r,
                    TurnPhase::Stopped => StopReason::Cancelled,
                    _ => return None,
                };
                // A turn finished before its time was kept (none should be): the save's.
                let finished = a.finished_unix_s.unwrap_or(updated_unix_s);
                Some(saved_turn(&e.user, a, stop_reason, finished))
            })
            .collect();
        let last_answer = self
            .exchanges
            .iter()
            .rev()
            .find_map(|e| e.assistant.as_ref().filter(|a| a.model_file.is_some()));
        SavedConversation {
            version: crate::history::FORMAT_VERSION,
            id: self.id.clone(),
            created_unix_s: self.created_unix_s,
            updated_unix_s,
            model_file: last_answer.and_then(|a| a.model_file.clone()),
            model: last_answer.and_then(|a| a.model.clone()),
            system_prompt: self.system_prompt.clone(),
            turns,
        }
    }

    /// The conversation with the answer in flight as a stopped turn (its text so far), for the
    /// in-flight file a crash leaves behind; `None` when no answer is in flight.
    pub(crate) fn to_saved_in_flight(&self, now_unix_s: u64) -> Option<SavedConversation> {
        let exchange = self.exchanges.last()?;
        let a = exchange
            .assistant
            .as_ref()
            .filter(|a| a.phase.is_active())?;
        let mut saved = self.to_saved(now_unix_s);
        saved.turns.push(SavedTurn {
            quality: None,
            confidence: None,
            ..saved_turn(&exchange.user, a, StopReason::Cancelled, now_unix_s)
        });
        Some(saved)
    }

    /// A conversation loaded from history (its KV cache is rebuilt on the next turn).
    pub(crate) fn from_saved(saved: &SavedConversation) -> Self {
        let exchanges = saved
            .turns
            .iter()
            .map(|t| Exchange {
                user: t.user.clone(),
                assistant: Some(AssistantTurn {
                    text: t.assistant.clone(),
                    thinking: t.thinking.clone(),
                    phase: TurnPhase::ended(t.stop_reason),
                    summary: t.metrics.clone(),
                    model: t.model.clone(),
                    finished_unix_s: Some(t.finished_unix_s),
                    settings: t.settings.clone(),
                    quality: t.quality.clone().map(|q| TurnQuality::Scored(Box::new(q))),
                    confidence: t.confidence.clone().map(TurnConfidence::Measured),
                    ..AssistantTurn::new(0, t.model_file.clone())
                }),
            })
            .collect();
        Self {
            id: saved.id.clone(),
            created_unix_s: saved.created_unix_s,
            system_prompt: saved.system_prompt.clone(),
            exchanges,
        }
    }
}

/// Answer `a` to the user message `user` as the history keeps it.
fn saved_turn(user: &str, a: &AssistantTurn, stop_reason: StopReason, finished: u64) -> SavedTurn {
    SavedTurn {
        user: user.to_string(),
        assistant: a.text.clone(),
        thinking: a.thinking.clone(),
        stop_reason,
        metrics: a.summary.clone(),
        model_file: a.model_file.clone(),
        model: a.model.clone(),
        finished_unix_s: finished,
        settings: a.settings.clone(),
        quality: a.quality.as_ref().and_then(TurnQuality::score).cloned(),
        confidence: a
            .confidence
            .as_ref()
            .and_then(TurnConfidence::tokens)
            .map(<[_]>::to_vec),
    }
}

/// Where answer B first parts from answer A.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Divergence {
    /// B's token (0-based) after which B's text so far is no longer a prefix of A's; the
    /// number of B's tokens when B's text is a shorter prefix of A's (B stopped early).
    pub token_index: usize,
    /// Byte offset (a character boundary in both) of the first character that differs.
    pub at_byte: usize,
}

/// The first token where answer B diverges from answer A: walk B's token pieces accumulating
/// text; the first piece after which the text is no longer a prefix of A's is the point.
/// `None` when B's text equals A's.
pub fn first_divergence(a: &str, b: &str, b_pieces: &[String]) -> Option<Divergence> {
    if a == b {
        return None;
    }
    let mut so_far = String::new();
    let token_index = b_pieces
        .iter()
        .position(|piece| {
            so_far.push_str(piece);
            !a.starts_with(&so_far)
        })
        .unwrap_or(b_pieces.len());
    Some(Divergence {
        token_index,
        at_byte: super::complete::common_prefix(a, b).len(),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::engine::LlamaCounters;

    /// A finished turn's report: `tokens` ready at those milliseconds, 42 tokens of context.
    pub(crate) fn report(text: &str, reason: StopReason, tokens: &[u64]) -> TurnReport {
        TurnReport {
            prompt: Default::default(),
            text: text.into(),
            thinking_text: None,
            stop_reason: reason,
            timeline: TurnTimeline {
                token_ready_at: tokens.iter().map(|t| Duration::from_millis(*t)).collect(),
                ..TurnTimeline::default()
            },
            context_used: 42,
            dropped_messages: 0,
            llama_counters: LlamaCounters::default(),
            first_logits: None,
            host: Default::default(),
            sampler: "host-greedy",
            sampling: Default::default(),
            spec: None,
            profile: None,
        }
    }

    #[test]
    fn turn_moves_through_its_phases() {
        let mut t = AssistantTurn::new(1, None);
        assert_eq!(t.phase, TurnPhase::Queued);
        t.on_prefill_started(10, 4);
        assert_eq!(t.phase, TurnPhase::Prefill);
        t.on_token("Hel", Duration::from_millis(30));
        assert_eq!(t.phase, TurnPhase::Streaming);
        t.on_token("lo", Duration::from_millis(40));
        assert_eq!(t.text, "Hello");
        let live = t.current_summary();
        assert_eq!(live.ttft_ms, Some(30.0));
        assert_eq!(live.tokens_generated, 2);
        assert_eq!(live.cached_tokens, 4);
        t.on_finished(report("Hello!", StopReason::EndOfGeneration, &[30, 40, 50]));
        assert_eq!(t.phase, TurnPhase::Done(StopReason::EndOfGeneration));
        assert_eq!(t.text, "Hello!");
        assert_eq!(t.current_summary().tokens_generated, 3);
        assert!(!t.phase.is_active());
    }

    #[test]
    fn cancelled_turn_is_stopped_and_keeps_text() {
        let mut t = AssistantTurn::new(1, None);
        t.on_token("partial", Duration::from_millis(5));
        t.on_finished(report("partial", StopReason::Cancelled, &[5]));
        assert_eq!(t.phase, TurnPhase::Stopped);
        assert_eq!(t.text, "partial");
    }

    #[test]
    fn messages_skip_failed_answers_and_end_with_the_user() {
        let mut c = Conversation::new("x".into(), 0, Some("sys".into()));
        let mut ok = AssistantTurn::new(1, None);
        ok.on_finished(report("four", StopReason::EndOfGeneration, &[1]));
        c.exchanges.push(Exchange {
            user: "2+2?".into(),
            assistant: Some(ok),
        });
        let mut bad = AssistantTurn::new(2, None);
        bad.on_failed("boom".into());
        c.exchanges.push(Exchange {
            user: "broken".into(),
            assistant: Some(bad),
        });
        c.exchanges.push(Exchange {
            user: "next".into(),
            assistant: None,
        });
        let m = c.messages_for_last();
        let roles: Vec<_> = m.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [Role::System, Role::User, Role::Assistant, Role::User]
        );
        assert_eq!(m[3].content, "next");
    }

    #[test]
    fn divergence_is_the_first_token_that_leaves_a_prefix() {
        let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            first_divergence("Hello world", "Hello world", &p(&["Hello", " world"])),
            None
        );
        assert_eq!(
            first_divergence("Hello world", "Hello there", &p(&["Hel", "lo", " there"])),
            Some(Divergence {
                token_index: 2,
                at_byte: 6
            })
        );
        // B stopped early: its text is a prefix of A's.
        assert_eq!(
            first_divergence("Hello world", "Hello", &p(&["Hello"])),
            Some(Divergence {
                token_index: 1,
                at_byte: 5
            })
        );
        // B's first token already differs; multi-byte characters stay whole.
        assert_eq!(
            first_divergence("héllo", "hëllo", &p(&["hë", "llo"])),
            Some(Divergence {
                token_index: 0,
                at_byte: 1
            })
        );
        // A stop string's tokens are in the pieces but not in the text.
        assert_eq!(
            first_divergence("Paris is big", "Paris", &p(&["Paris", "\nQuestion:"])),
            Some(Divergence {
                token_index: 1,
                at_byte: 5
            })
        );
    }

    #[test]
    fn a_thinking_turn_keeps_its_split_live_finished_and_saved() {
        use crate::metrics::ThinkingSpan;
        let ms = Duration::from_millis;
        let mut t = AssistantTurn::new(1, None);
        // The engine's events: a thinking token (its Token event without text), the one that
        // closed the span, then the answer's first token.
        t.on_token("", ms(30));
        let mut span = ThinkingSpan {
            tokens: 1,
            ..ThinkingSpan::default()
        };
        t.on_thinking(span, "hmm");
        assert_eq!(
            t.current_summary().thinking.map(|th| th.thinking_tokens),
            Some(1)
        );
        t.on_token("", ms(40));
        span.tokens = 2;
        span.ended_at = Some(ms(40));
        t.on_thinking(span, "");
        t.on_token("Yes", ms(50));
        span.first_answer_at = Some(ms(50));
        t.on_thinking(span, "");
        assert_eq!(
            (t.text.as_str(), t.thinking.as_deref()),
            ("Yes", Some("hmm"))
        );
        let live = t.current_summary().thinking.unwrap();
        assert_eq!(live.time_to_first_answer_ms, Some(50.0));
        assert_eq!(live.answer_tokens, 1);

        let mut r = report("Yes", StopReason::EndOfGeneration, &[30, 40, 50]);
        r.thinking_text = Some("hmm".into());
        r.timeline.thinking = Some(span);
        t.on_finished(r);
        let mut c = Conversation::new("id".into(), 0, None);
        c.exchanges.push(Exchange {
            user: "q".into(),
            assistant: Some(t),
        });
        // The next prompt carries the answer alone.
        c.exchanges.push(Exchange {
            user: "next".into(),
            assistant: None,
        });
        assert_eq!(c.messages_for_last()[1].content, "Yes");
        let saved = c.to_saved(9);
        assert_eq!(saved.turns[0].thinking.as_deref(), Some("hmm"));
        let back = Conversation::from_saved(&saved);
        let b = back.exchanges[0].assistant.as_ref().unwrap();
        assert_eq!(
            (b.text.as_str(), b.thinking.as_deref()),
            ("Yes", Some("hmm"))
        );
        let th = b.current_summary().thinking.unwrap();
        assert_eq!((th.thinking_tokens, th.answer_tokens), (2, 1));
    }

    #[test]
    fn saved_round_trip_keeps_finished_turns_only() {
        let mut c = Conversation::new("id1".into(), 10, None);
        let mut a = AssistantTurn::new(1, Some("m.gguf".into()));
        a.on_finished(report("yes", StopReason::MaxTokens, &[1, 2]));
        c.exchanges.push(Exchange {
            user: "q".into(),
            assistant: Some(a),
        });
        c.exchanges.push(Exchange {
            user: "in flight".into(),
            assistant: Some(AssistantTurn::new(2, None)),
        });
        let saved = c.to_saved(20);
        assert_eq!(saved.turns.len(), 1);
        assert_eq!(saved.model_file.as_deref(), Some("m.gguf"));
        let back = Conversation::from_saved(&saved);
        assert_eq!(back.exchanges.len(), 1);
        assert_eq!(back.exchanges[0].user, "q");
        let t = back.exchanges[0].assistant.as_ref().unwrap();
        assert_eq!(t.phase, TurnPhase::Done(StopReason::MaxTokens));
        assert_eq!(t.current_summary().tokens_generated, 2);
    }
}
