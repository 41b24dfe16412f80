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
        for a in self
            .conversation
            .exchanges
            .iter_mut()
            .filter_map(|e| e.assistant.as_mut())
        {
            if a.quality == Some(TurnQuality::Scoring(id)) {
                a.quality = Some(TurnQuality::NotScored(why.to_string()));
            }
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
        let mut out = ConversationQuality {
            answers: 0,
            tokens: 0,
            kld_mean: 0.0,
            same_top_pct: 0.0,
            below_low_p: 0,
        };
        let mut kld_sum = 0.0;
        let mut same = 0usize;
        for score in self
            .conversation
            .exchanges
            .iter()
            .filter_map(|e| e.assistant.as_ref()?.quality.as_ref()?.score())
            .filter(|s| !s.tokens.is_empty())
        {
            out.answers += 1;
            out.tokens += score.tokens.len();
            kld_sum += score.tokens.iter().map(|t| t.score.kld).sum::<f64>();
            same += score.tokens.iter().filter(|t| t.score.same_top).count();
            out.below_low_p += score.summary.as_ref().map_or(0, |s| s.below_low_p);
        }
        if out.tokens == 0 {
            return None;
        }
        out.kld_mean = kld_sum / out.tokens as f64;
        out.same_top_pct = 100.0 * same as f64 / out.tokens as f64;
        Some(out)
    }

    /// `Alt+K`: scored answers in their tokens' KLD colours, or back to Markdown.
    pub(super) fn toggle_quality_colours(&mut self) {
        self.quality_colours = !self.quality_colours;
        let text = match (self.quality_colours, self.conversation_quality().is_some()) {
            (false, _) => "tokens no longer coloured (Alt+K colours them again)",
            (true, true) => "scored answers coloured by each token's KLD against the reference (Alt+K: Markdown again)",
            (true, false) => "no answer is scored yet: /ref PATH sets a reference, and scored answers show their tokens' KLD colours",
        };
        self.notice(NoticeKind::Info, text);
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
                self.notice(NoticeKind::Info, text);
                Vec::new()
            }
            "off" | "--off" => {
                let effects = self.stop_scoring("stopped: /ref off");
                self.reference = None;
                self.notice(NoticeKind::Info, "scoring is off");
                effects
            }
            _ if crate::remote::is_url(&self.model_path) => {
                self.notice(
                    NoticeKind::Error,
                    "/ref scores a local model's answers (a server sends no full distributions)",
                );
                Vec::new()
            }
            path => {
                let path: PathBuf = crate::config::expand_home(std::path::Path::new(path));
                let mut effects = self.stop_scoring("stopped: the reference changed");
                self.reference = Some(path.clone());
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
                match scorable {
                    Some(turn_id) => {
                        effects.extend(self.score_finished(turn_id));
                        self.notice(
                            NoticeKind::Info,
                            format!(
                                "reference {}: scoring the last answer, then each answer after it finishes",
                                path.display()
                            ),
                        );
                    }
                    None => self.notice(
                        NoticeKind::Info,
                        format!(
                            "reference {}: each answer is scored against it after it finishes",
                            path.display()
                        ),
                    ),
                }
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

    /// Sends `text` and finishes its answer; returns the effects of the finish.
    fn answered(app: &mut App, text: &str) -> Vec<Effect> {
        type_text(app, text);
        let fx = enter(app);
        let Some(Effect::Generate { id, .. }) = fx
            .into_iter()
            .find(|e| matches!(e, Effect::Generate { .. }))
        else {
            panic!("no turn started")
        };
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
}
