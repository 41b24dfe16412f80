//! Each answer scored against a reference model (`chat --ref`, `/ref`, config `[quality]
//! ref`): asked of the engine when the answer finishes, never while it decodes, and stopped
//! when a new message, a regeneration, a new conversation or a model switch comes first, so
//! that the next turn's TTFT never waits for a score.

use std::path::PathBuf;

use super::conversation::TurnQuality;
use super::{App, Effect, EngineStatus, NoticeKind};
use crate::engine::{EngineError, RequestId};
use crate::metrics::quality::AnswerScore;

/// What the quality block shows for the conversation: the scored answers' tokens pooled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConversationQuality {
    pub answers: usize,
    pub tokens: usize,
    /// Mean KLD over every scored token of the conversation (nats).
    pub kld_mean: f64,
    pub same_top_pct: f64,
    /// Tokens the reference gave under `LOW_P`.
    pub below_low_p: usize,
}

impl App {
    /// The finished answer of request `turn_id` goes to the reference, when one is set and
    /// this chat runs its model here.
    pub(super) fn score_finished(&mut self, turn_id: RequestId) -> Vec<Effect> {
        let Some(reference) = self.reference.clone() else {
            return Vec::new();
        };
        let id = self.request_ids.next();
        let Some(turn) = self.conversation.turn_for(turn_id) else {
            return Vec::new();
        };
        turn.quality = Some(TurnQuality::Scoring(id));
        vec![Effect::Score { id, reference }]
    }

    /// The latest score against the reference in use (the one that tells its size and
    /// placement); `None` while none has been made with it, or scoring is off.
    pub(crate) fn reference_loaded(&self) -> Option<&AnswerScore> {
        let reference = self.reference.as_ref()?;
        self.conversation
            .exchanges
            .iter()
            .rev()
            .filter_map(|e| e.assistant.as_ref()?.quality.as_ref()?.score())
            .find(|s| &s.reference == reference && s.reference_file_bytes > 0)
    }

    /// The request id of the score in flight, if any.
    pub(crate) fn scoring(&self) -> Option<RequestId> {
        self.conversation
            .exchanges
            .iter()
            .filter_map(|e| e.assistant.as_ref())
            .find_map(|a| match a.quality {
                Some(TurnQuality::Scoring(id)) => Some(id),
                _ => None,
            })
    }

    /// Stops the score in flight (the engine stops between two passes) and says why in the
    /// quality block.
    pub(super) fn stop_scoring(&mut self, why: &str) -> Vec<Effect> {
        let Some(id) = self.scoring() else {
            return Vec::new();
        };
        if let Some(a) = self.scored_turn(id) {
            a.quality = Some(TurnQuality::NotScored(why.to_string()));
        }
        vec![Effect::Cancel(id)]
    }

    /// `Scored` for request `id`: the answer it belongs to keeps it (and the history too).
    pub(super) fn on_scored(
        &mut self,
        id: RequestId,
        score: Box<AnswerScore>,
        now_unix_s: u64,
    ) -> Vec<Effect> {
        let Some(turn) = self.scored_turn(id) else {
            return Vec::new();
        };
        turn.quality = Some(TurnQuality::Scored(score));
        vec![Effect::Save(self.conversation.to_saved(now_unix_s))]
    }

    /// `Failed` for request `id`; `false` when `id` is no score of this chat's. A reference
    /// that cannot be used (missing, not a model, another vocabulary) is turned off, so that
    /// the next answer does not try it again.
    pub(super) fn on_score_failed(&mut self, id: RequestId, error: &EngineError) -> bool {
        let Some(turn) = self.scored_turn(id) else {
            return false;
        };
        if matches!(error, EngineError::Cancelled) {
            turn.quality = Some(TurnQuality::NotScored("stopped".to_string()));
            return true;
        }
        turn.quality = Some(TurnQuality::NotScored(error.to_string()));
        let unusable = matches!(error, EngineError::RefVocabMismatch { .. })
            || matches!(error, EngineError::Reference(inner) if !matches!(**inner, EngineError::Decode(_)));
        if unusable {
            self.reference = None;
            self.notice(
                NoticeKind::Error,
                format!("{error} (scoring is off: /ref PATH sets another reference)"),
            );
        } else {
            self.notice(NoticeKind::Error, format!("not scored: {error}"));
        }
        true
    }

    fn scored_turn(&mut self, id: RequestId) -> Option<&mut super::conversation::AssistantTurn> {
        self.conversation
            .exchanges
            .iter_mut()
            .filter_map(|e| e.assistant.as_mut())
            .find(|a| a.quality == Some(TurnQuality::Scoring(id)))
    }

    /// The conversation's scored answers pooled (`None`: none scored).
    pub(crate) fn conversation_quality(&self) -> Option<ConversationQuality> {
        let scores: Vec<&AnswerScore> = self
            .conversation
            .exchanges
            .iter()
            .filter_map(|e| e.assistant.as_ref()?.quality.as_ref()?.score())
            .filter(|s| !s.tokens.is_empty())
            .collect();
        let tokens: usize = scores.iter().map(|s| s.tokens.len()).sum();
        let kld_sum: f64 = scores
            .iter()
            .map(|s| s.tokens.iter().map(|t| t.score.kld).sum::<f64>())
            .sum();
        let same = scores
            .iter()
            .flat_map(|s| &s.tokens)
            .filter(|t| t.score.same_top);
        (tokens > 0).then(|| ConversationQuality {
            answers: scores.len(),
            tokens,
            kld_mean: kld_sum / tokens as f64,
            same_top_pct: 100.0 * same.count() as f64 / tokens as f64,
            below_low_p: scores
                .iter()
                .map(|s| s.summary.as_ref().map_or(0, |s| s.below_low_p))
                .sum(),
        })
    }

    /// `Alt+K`: answers drawn token by token in colour, or back to Markdown. Scored answers
    /// take their KLD against the reference; without a reference the engine measures each
    /// token's own confidence from the next answer on, and those answers take its colours.
    pub(super) fn toggle_quality_colours(&mut self) -> Vec<Effect> {
        if !self.quality_colours && crate::remote::is_url(&self.model_path) {
            return self.notice_only(
                NoticeKind::Error,
                "token colours need a local model's logits (a server sends none): chat -m MODEL.gguf",
            );
        }
        self.quality_colours = !self.quality_colours;
        let effects = self.sync_confidence();
        let text = match (self.quality_colours, self.reference.is_some()) {
            (false, _) => "tokens no longer coloured (Alt+K colours them again)",
            (true, true) if self.conversation_quality().is_some() => {
                "scored answers coloured by each token's KLD against the reference (Alt+K: Markdown again)"
            }
            (true, true) => "answers are coloured by each token's KLD once the reference has scored them (Alt+K: Markdown again)",
            (true, false) => "answers from now on are coloured by the model's own confidence in each token (its probability; the cost shows in host µs/token); /ref PATH scores them against a reference instead · Alt+T: each token's top 5 · Alt+K: Markdown",
        };
        self.notice(NoticeKind::Info, text);
        effects
    }

    /// Tells the engine whether to measure each token's own confidence: while the colours are
    /// on and no reference scores the answers (a reference gives the model's own
    /// probabilities too), never unasked.
    pub(super) fn sync_confidence(&mut self) -> Vec<Effect> {
        let want = self.quality_colours && self.reference.is_none();
        if want == self.own_confidence {
            return Vec::new();
        }
        self.own_confidence = want;
        vec![Effect::SetConfidence(want)]
    }

    /// `/ref`, `/ref PATH`, `/ref off`.
    pub(super) fn ref_command(&mut self, arg: &str) -> Vec<Effect> {
        match arg {
            "" => {
                let text = match &self.reference {
                    Some(p) => format!(
                        "reference {}: each answer is scored against it (/ref off turns it off)",
                        p.display()
                    ),
                    None => "no reference: /ref PATH scores each answer against another file of the same model (its F16 or Q8_0)".to_string(),
                };
                self.notice_only(NoticeKind::Info, text)
            }
            "off" | "--off" => {
                let mut effects = self.stop_scoring("stopped: /ref off");
                self.reference = None;
                effects.extend(self.sync_confidence());
                self.notice(NoticeKind::Info, "scoring is off");
                effects
            }
            _ if crate::remote::is_url(&self.model_path) => self.notice_only(
                NoticeKind::Error,
                "/ref scores a local model's answers (a server sends no full distributions)",
            ),
            path => {
                let path: PathBuf = crate::config::expand_home(std::path::Path::new(path));
                let mut effects = self.stop_scoring("stopped: the reference changed");
                self.reference = Some(path.clone());
                effects.extend(self.sync_confidence());
                // The last answer of this session is scored at once; an answer read back from
                // history, or made by a model switched away from, is not the engine's to score.
                let last = self
                    .conversation
                    .exchanges
                    .last()
                    .and_then(|e| e.assistant.as_ref())
                    .filter(|a| a.is_finished() && a.request_id != 0)
                    .map(|a| a.request_id);
                let scorable = last.filter(|_| {
                    self.engine == EngineStatus::Ready
                        && self.switching.is_none()
                        && !self.is_generating()
                        && self.last_answer_on_this_model()
                });
                let what = match scorable {
                    Some(turn_id) => {
                        effects.extend(self.score_finished(turn_id));
                        "scoring the last answer, then each answer after it finishes"
                    }
                    None => "each answer is scored against it after it finishes",
                };
                self.notice(
                    NoticeKind::Info,
                    format!("reference {}: {what}", path.display()),
                );
                effects
            }
        }
    }

    /// The last answer ran on the model loaded now (not on one switched away from).
    fn last_answer_on_this_model(&self) -> bool {
        let Some(info) = self.model.as_ref() else {
            return false;
        };
        self.conversation
            .exchanges
            .last()
            .and_then(|e| e.assistant.as_ref())
            .and_then(|a| a.model.as_ref())
            .is_some_and(|m| m.is(info))
    }
}

/// The token screen's place (`Alt+T`): exchange `exchange`'s answer, its token `token`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenCursor {
    pub exchange: usize,
    pub token: usize,
}

/// An answer's figures token by token: its score against the reference, else its own
/// confidence.
#[derive(Debug, Clone, Copy)]
pub enum AnswerTokens<'a> {
    Scored(&'a AnswerScore),
    Own(&'a [crate::metrics::quality::TokenConfidence]),
}

impl AnswerTokens<'_> {
    pub fn len(&self) -> usize {
        match self {
            AnswerTokens::Scored(s) => s.tokens.len(),
            AnswerTokens::Own(t) => t.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The first token where the two models' most likely tokens differ (scored answers).
    pub fn first_divergence(&self) -> Option<usize> {
        match self {
            AnswerTokens::Scored(s) => s.summary.as_ref().and_then(|q| q.first_divergence),
            AnswerTokens::Own(_) => None,
        }
    }
}

impl App {
    /// Exchange `i`'s finished answer's figures token by token, when it has any.
    pub(crate) fn answer_tokens(&self, i: usize) -> Option<AnswerTokens<'_>> {
        let turn = self
            .conversation
            .exchanges
            .get(i)?
            .assistant
            .as_ref()
            .filter(|a| a.is_finished())?;
        let tokens = match (
            turn.quality.as_ref().and_then(TurnQuality::score),
            turn.confidence.as_ref().and_then(|c| c.tokens()),
        ) {
            (Some(score), _) if !score.tokens.is_empty() => AnswerTokens::Scored(score),
            (_, Some(own)) => AnswerTokens::Own(own),
            _ => return None,
        };
        (!tokens.is_empty()).then_some(tokens)
    }

    /// The exchange with token figures nearest `from` in direction `step` (-1 older, 1
    /// newer), `from` excluded.
    fn answer_with_tokens(&self, from: usize, step: isize) -> Option<usize> {
        let has_tokens = |i: &usize| self.answer_tokens(*i).is_some();
        if step < 0 {
            (0..from).rev().find(has_tokens)
        } else {
            (from + 1..self.conversation.exchanges.len()).find(has_tokens)
        }
    }

    /// `Alt+T`: the token screen on the newest answer with token figures, its cursor on the
    /// first divergence when there is one.
    pub(super) fn open_tokens(&mut self) {
        let n = self.conversation.exchanges.len();
        let Some(exchange) = (0..n).rev().find(|&i| self.answer_tokens(i).is_some()) else {
            let text = if crate::remote::is_url(&self.model_path) {
                "no answer has token figures: a server sends no logits (chat -m MODEL.gguf has them)"
            } else {
                "no answer has token figures yet: Alt+K colours the next answers by the model's own confidence, /ref PATH scores them against a reference"
            };
            self.notice(NoticeKind::Info, text);
            return;
        };
        let token = self
            .answer_tokens(exchange)
            .and_then(|t| t.first_divergence())
            .unwrap_or(0);
        self.token_cursor = Some(TokenCursor { exchange, token });
        self.mode = super::Mode::Tokens;
    }

    /// Moves the token cursor by `by` tokens, kept on the answer's tokens.
    pub(super) fn move_token_cursor(&mut self, by: isize) {
        let Some(cursor) = self.token_cursor else {
            return;
        };
        let Some(len) = self.answer_tokens(cursor.exchange).map(|t| t.len()) else {
            return;
        };
        let token = cursor.token.saturating_add_signed(by).min(len - 1);
        self.token_cursor = Some(TokenCursor { token, ..cursor });
    }

    /// The previous or next answer with token figures, its cursor at its first token.
    pub(super) fn token_answer(&mut self, step: isize) {
        let Some(cursor) = self.token_cursor else {
            return;
        };
        match self.answer_with_tokens(cursor.exchange, step) {
            Some(exchange) => self.token_cursor = Some(TokenCursor { exchange, token: 0 }),
            None => self.notice(
                NoticeKind::Info,
                if step < 0 {
                    "no earlier answer has token figures"
                } else {
                    "no later answer has token figures"
                },
            ),
        }
    }

    /// The cursor to the answer's first divergence from the reference.
    pub(super) fn token_divergence(&mut self) {
        let Some(cursor) = self.token_cursor else {
            return;
        };
        match self.answer_tokens(cursor.exchange) {
            Some(t) => match t.first_divergence() {
                Some(token) => self.token_cursor = Some(TokenCursor { token, ..cursor }),
                None => {
                    let text = match t {
                        AnswerTokens::Scored(_) => {
                            "the two models agree on the top token everywhere in this answer"
                        }
                        AnswerTokens::Own(_) => {
                            "no reference scored this answer: a divergence needs /ref PATH"
                        }
                    };
                    self.notice(NoticeKind::Info, text);
                }
            },
            None => self.mode = super::Mode::Chat,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{finished, now, ready_app, run_line, type_text};
    use super::super::{update, Msg};
    use super::*;
    use crate::engine::{EngineEvent, StopReason};
    use crate::metrics::quality::TokenScore;
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

    fn enter(app: &mut App) -> Vec<Effect> {
        update(
            app,
            Msg::Key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE)),
            now(),
        )
    }

    fn token(kld: f64, same_top: bool, p_ref: f64) -> TokenScore {
        TokenScore {
            kld,
            same_top,
            top_ref: 1,
            top_cand: if same_top { 1 } else { 2 },
            p_ref,
            p_cand: 0.5,
            ln_p_cand: 0.5f64.ln(),
            entropy_ref: Some(1.0),
            entropy_cand: Some(1.0),
        }
    }

    fn score(klds: &[(f64, bool, f64)]) -> Box<AnswerScore> {
        let scores: Vec<_> = klds.iter().map(|&(k, s, p)| token(k, s, p)).collect();
        let ids: Vec<i32> = (0..scores.len() as i32).collect();
        let texts = ids.iter().map(|i| format!("t{i}")).collect();
        Box::new(AnswerScore::new("ref.gguf".into(), scores, &ids, texts, 5))
    }

    /// Types and sends `text`; returns its turn's id.
    fn send(app: &mut App, text: &str) -> RequestId {
        type_text(app, text);
        let Some(Effect::Generate { id, .. }) = enter(app)
            .into_iter()
            .find(|e| matches!(e, Effect::Generate { .. }))
        else {
            panic!("no turn started")
        };
        id
    }

    /// Sends `text` and finishes its answer; returns the effects of the finish.
    fn answered(app: &mut App, text: &str) -> Vec<Effect> {
        let id = send(app, text);
        update(
            app,
            finished(id, "an answer", StopReason::EndOfGeneration),
            now(),
        )
    }

    fn score_effect(fx: &[Effect]) -> Option<RequestId> {
        fx.iter().find_map(|e| match e {
            Effect::Score { id, .. } => Some(*id),
            _ => None,
        })
    }

    #[test]
    fn without_a_reference_nothing_is_scored() {
        let mut app = ready_app();
        let fx = answered(&mut app, "hi");
        assert!(score_effect(&fx).is_none(), "{fx:?}");
        assert!(app.conversation_quality().is_none());
    }

    #[test]
    fn each_finished_answer_is_scored_after_it_is_saved_and_the_score_is_saved_too() {
        let mut app = ready_app();
        app.reference = Some("ref.gguf".into());
        let fx = answered(&mut app, "hi");
        assert!(matches!(fx.first(), Some(Effect::Save(_))), "{fx:?}");
        let Some(Effect::Score { id, reference }) = fx.get(1).cloned() else {
            panic!("the answer is scored after it finished: {fx:?}")
        };
        assert_eq!(reference, std::path::PathBuf::from("ref.gguf"));
        assert_eq!(app.scoring(), Some(id));
        let fx = update(
            &mut app,
            Msg::Engine(EngineEvent::Scored {
                request_id: id,
                score: score(&[(0.0, true, 0.5), (0.2, false, 0.005)]),
            }),
            now(),
        );
        let Some(Effect::Save(saved)) = fx.first() else {
            panic!("the score goes into the history: {fx:?}")
        };
        let q = saved.turns[0]
            .quality
            .as_ref()
            .and_then(|q| q.summary.clone());
        assert_eq!(
            q.map(|q| (q.tokens, q.first_divergence, q.below_low_p)),
            Some((2, Some(1), 1))
        );
        assert_eq!(app.scoring(), None);
        let c = app.conversation_quality().expect("one answer scored");
        assert_eq!((c.answers, c.tokens, c.below_low_p), (1, 2, 1));
        assert!((c.kld_mean - 0.1).abs() < 1e-12 && (c.same_top_pct - 50.0).abs() < 1e-12);
    }

    #[test]
    fn a_new_message_stops_the_score_before_its_turn_starts() {
        let mut app = ready_app();
        app.reference = Some("ref.gguf".into());
        let sid = score_effect(&answered(&mut app, "first")).expect("scored");
        type_text(&mut app, "second");
        let fx = enter(&mut app);
        // The cancel goes to the engine before the new turn: its TTFT never waits for the score.
        assert_eq!(fx.first(), Some(&Effect::Cancel(sid)), "{fx:?}");
        assert!(matches!(fx.get(1), Some(Effect::Generate { id, .. }) if *id > sid));
        let first = app.conversation.exchanges[0]
            .assistant
            .as_ref()
            .expect("answer");
        assert!(
            matches!(&first.quality, Some(TurnQuality::NotScored(w)) if w.contains("new message")),
            "{:?}",
            first.quality
        );
        // The engine's late `Cancelled` for the score changes nothing and says nothing.
        app.notice = None;
        let fx = update(
            &mut app,
            Msg::Engine(EngineEvent::Failed {
                request_id: sid,
                error: EngineError::Cancelled,
            }),
            now(),
        );
        assert!(fx.is_empty() && app.notice.is_none());
        assert!(app.is_generating(), "the new turn goes on");
    }

    #[test]
    fn a_reference_that_cannot_be_used_is_turned_off_with_the_reason() {
        let mut app = ready_app();
        app.reference = Some("other-vocab.gguf".into());
        let sid = score_effect(&answered(&mut app, "hi")).expect("scored");
        let error = EngineError::RefVocabMismatch {
            reference: "other-vocab.gguf".into(),
            id: 7,
            model_text: "a".into(),
            reference_text: "b".into(),
        };
        update(
            &mut app,
            Msg::Engine(EngineEvent::Failed {
                request_id: sid,
                error,
            }),
            now(),
        );
        assert_eq!(app.reference, None);
        let notice = app
            .notice
            .as_ref()
            .map(|n| n.text.clone())
            .unwrap_or_default();
        assert!(
            notice.contains("vocabulary") && notice.contains("/ref PATH"),
            "{notice}"
        );
        let fx = answered(&mut app, "again");
        assert!(score_effect(&fx).is_none(), "not tried again: {fx:?}");
    }

    #[test]
    fn ref_sets_scores_the_last_answer_of_this_model_and_turns_off() {
        let mut app = ready_app();
        let info = crate::engine::ModelInfo {
            path: "m.gguf".into(),
            fingerprint: "f1".into(),
            ..Default::default()
        };
        app.model = Some(info);
        answered(&mut app, "hi");
        let fx = run_line(&mut app, "/ref ref.gguf");
        let sid = score_effect(&fx).expect("the last answer is scored at once");
        assert_eq!(app.reference, Some("ref.gguf".into()));
        run_line(&mut app, "/ref");
        let shown = app
            .notice
            .as_ref()
            .map(|n| n.text.clone())
            .unwrap_or_default();
        assert!(shown.contains("ref.gguf"), "{shown}");
        let fx = run_line(&mut app, "/ref off");
        assert_eq!(fx, vec![Effect::Cancel(sid)]);
        assert_eq!(app.reference, None);
        assert_eq!(app.scoring(), None);
    }

    #[test]
    fn ref_is_refused_for_a_server_and_esc_stops_a_score() {
        let mut app = ready_app();
        app.model_path = "http://127.0.0.1:8080/v1".into();
        let fx = run_line(&mut app, "/ref ref.gguf");
        assert!(fx.is_empty() && app.reference.is_none());
        let refused = app
            .notice
            .as_ref()
            .map(|n| n.text.clone())
            .unwrap_or_default();
        assert!(refused.contains("server"), "{refused}");

        let mut app = ready_app();
        app.reference = Some("ref.gguf".into());
        let sid = score_effect(&answered(&mut app, "hi")).expect("scored");
        let fx = update(
            &mut app,
            Msg::Key(KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE)),
            now(),
        );
        assert_eq!(fx, vec![Effect::Cancel(sid)]);
        assert_eq!(app.scoring(), None);
    }

    fn alt(c: char) -> Msg {
        Msg::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::ALT))
    }

    fn own(ps: &[f32]) -> Vec<crate::metrics::quality::TokenConfidence> {
        use crate::metrics::quality::{TokenConfidence, TopToken};
        ps.iter()
            .enumerate()
            .map(|(i, &p)| TokenConfidence {
                token: i as i32,
                text: format!("t{i}"),
                p,
                entropy: 1.0,
                top: vec![TopToken {
                    token: i as i32,
                    text: format!("t{i}"),
                    p,
                }],
            })
            .collect()
    }

    /// Sends `text`, then the engine's `Confidence` event for its turn; returns the turn's id.
    fn send_with_confidence(
        app: &mut App,
        text: &str,
        tokens: Option<Vec<crate::metrics::quality::TokenConfidence>>,
    ) -> RequestId {
        let id = send(app, text);
        update(
            app,
            Msg::Engine(EngineEvent::Confidence {
                request_id: id,
                tokens,
            }),
            now(),
        );
        id
    }

    #[test]
    fn alt_k_without_a_reference_measures_each_tokens_own_confidence_and_keeps_it() {
        use super::super::conversation::{Conversation, TurnConfidence};
        use super::super::Mode;
        let mut app = ready_app();
        // Nothing to show yet: Alt+T says how to get token figures and the chat stays.
        update(&mut app, alt('t'), now());
        assert_eq!(app.mode, Mode::Chat);
        assert!(app.notice.as_ref().unwrap().text.contains("Alt+K"));
        // Alt+K with no reference: the engine measures from the next answer on.
        assert_eq!(
            update(&mut app, alt('k'), now()),
            vec![Effect::SetConfidence(true)]
        );
        assert!(app.quality_colours && app.own_confidence);
        let id = send_with_confidence(&mut app, "hi", Some(own(&[0.95, 0.3, 0.05])));
        let fx = update(
            &mut app,
            finished(id, "t0t1t2", StopReason::EndOfGeneration),
            now(),
        );
        assert!(score_effect(&fx).is_none(), "no reference: nothing scored");
        let Some(Effect::Save(saved)) = fx.first() else {
            panic!("the answer is saved: {fx:?}")
        };
        let kept = saved.turns[0]
            .confidence
            .as_ref()
            .expect("saved with the turn");
        assert_eq!(kept.len(), 3);
        // Read back from history, the answer keeps its figures.
        let back = Conversation::from_saved(saved);
        assert_eq!(
            back.exchanges[0].assistant.as_ref().unwrap().confidence,
            Some(TurnConfidence::Measured(own(&[0.95, 0.3, 0.05])))
        );
        // Alt+T: the token screen, its cursor kept on the answer's tokens.
        update(&mut app, alt('t'), now());
        assert_eq!(app.mode, Mode::Tokens);
        let at = |app: &App| app.token_cursor.map(|c| (c.exchange, c.token));
        assert_eq!(at(&app), Some((0, 0)));
        let press = |app: &mut App, code| {
            update(
                app,
                Msg::Key(KeyEvent::new(code, KeyModifiers::NONE)),
                now(),
            );
        };
        press(&mut app, KeyCode::Right);
        assert_eq!(at(&app), Some((0, 1)));
        press(&mut app, KeyCode::Down);
        assert_eq!(at(&app), Some((0, 2)), "10 on: the last token");
        press(&mut app, KeyCode::Left);
        press(&mut app, KeyCode::Home);
        assert_eq!(at(&app), Some((0, 0)));
        press(&mut app, KeyCode::Char('d'));
        assert!(app.notice.as_ref().unwrap().text.contains("/ref"));
        press(&mut app, KeyCode::PageUp);
        assert_eq!(at(&app), Some((0, 0)), "no earlier answer");
        press(&mut app, KeyCode::Esc);
        assert_eq!(app.mode, Mode::Chat);
        // A reference takes over (it gives the model's own probabilities too); without it the
        // confidence comes back; Alt+K again stops measuring.
        let fx = run_line(&mut app, "/ref ref.gguf");
        assert!(fx.contains(&Effect::SetConfidence(false)), "{fx:?}");
        let fx = run_line(&mut app, "/ref off");
        assert!(fx.contains(&Effect::SetConfidence(true)), "{fx:?}");
        assert_eq!(
            update(&mut app, alt('k'), now()),
            vec![Effect::SetConfidence(false)]
        );
        assert!(!app.quality_colours && !app.own_confidence);
        // Sampled on the backend: said, not invented.
        update(&mut app, alt('k'), now());
        send_with_confidence(&mut app, "again", None);
        assert_eq!(
            app.conversation.exchanges[1]
                .assistant
                .as_ref()
                .unwrap()
                .confidence,
            Some(TurnConfidence::Unavailable)
        );
    }

    #[test]
    fn the_token_screen_opens_on_the_first_divergence_of_a_scored_answer() {
        use super::super::Mode;
        let mut app = ready_app();
        app.reference = Some("ref.gguf".into());
        let fx = answered(&mut app, "hi");
        let id = score_effect(&fx).expect("scored");
        update(
            &mut app,
            Msg::Engine(EngineEvent::Scored {
                request_id: id,
                score: score(&[(0.0, true, 0.5), (0.0, true, 0.5), (0.3, false, 0.1)]),
            }),
            now(),
        );
        update(&mut app, alt('t'), now());
        assert_eq!(app.mode, Mode::Tokens);
        assert_eq!(app.token_cursor.map(|c| c.token), Some(2));
        update(
            &mut app,
            Msg::Key(KeyEvent::new(KeyCode::Home, KeyModifiers::NONE)),
            now(),
        );
        update(
            &mut app,
            Msg::Key(KeyEvent::new(KeyCode::Char('d'), KeyModifiers::NONE)),
            now(),
        );
        assert_eq!(app.token_cursor.map(|c| c.token), Some(2));
    }
}
