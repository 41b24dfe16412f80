//! The A/B screen: the last answer beside another model file's answer to the same turns, its
//! state and the events that fill it.

use std::path::PathBuf;
use std::time::Instant;

use super::conversation::{first_divergence, AssistantTurn, Divergence, TurnQuality, TurnSettings};
use super::{App, Effect, EngineStatus, Mode, NoticeKind, Now};
use crate::engine::{EngineEvent, ModelInfo, RequestId};

/// How answer B compares with answer A, once B has finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AbOutcome {
    Identical,
    Diverges(Divergence),
}

/// The A/B screen: the last answer (A, from the loaded model) and the same turns answered by
/// another model file (B) with the same sampling settings and seed. B is never added to the
/// conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct AbScreen {
    /// The last user message, answered by both.
    pub prompt: String,
    pub settings: TurnSettings,
    /// A copy of the conversation's last answer.
    pub a: AssistantTurn,
    pub b_path: PathBuf,
    /// B's answer, filled from its engine events like a chat turn.
    pub b: AssistantTurn,
    /// Model B as the engine loaded it (known once B has finished).
    pub b_model: Option<ModelInfo>,
    /// The text of each of B's tokens.
    pub b_pieces: Vec<String>,
    /// The request in flight, while B loads or generates.
    pub running: Option<RequestId>,
    /// When B was asked for (for the loading clock).
    pub started: Instant,
    pub outcome: Option<AbOutcome>,
    pub error: Option<String>,
    /// Lines scrolled down in both answers.
    pub scroll: usize,
    /// A's figures come from A re-run in a fresh context just before B (both cold, like
    /// for like); until then they are the chat turn's own (warm KV cache).
    pub like_for_like: bool,
    /// The one baseline both sides are scored against: the chat's reference (`--ref`,
    /// `/ref`) when set; `None`: A's model (B is scored against it, A is the baseline).
    pub reference: Option<PathBuf>,
}

impl AbScreen {
    /// The request the engine is still working on for this screen: B's answer, or its score
    /// against A's model once it has answered.
    pub fn in_flight(&self) -> Option<RequestId> {
        self.running.or(match self.b.quality {
            Some(TurnQuality::Scoring(id)) => Some(id),
            _ => None,
        })
    }
}

impl App {
    /// `/ab PATH|URL`: answer the last exchange again with another model file (or another
    /// server, local or remote chat alike: `tui::effects` picks the backend), with the same
    /// turns, sampling settings and seed, and show both side by side.
    pub(super) fn start_ab(&mut self, arg: &str, now: Now) -> Vec<Effect> {
        if arg.is_empty() {
            return self.notice_only(
                NoticeKind::Error,
                "usage: /ab PATH|URL (answers the last prompt again with another model file or server, side by side)",
            );
        }
        if self.engine != EngineStatus::Ready {
            return self.notice_only(NoticeKind::Warning, "the model is not ready yet");
        }
        if self.is_generating() || self.bench.running.is_some() {
            return self.notice_only(
                NoticeKind::Warning,
                "an answer is still streaming: Esc stops it, then /ab",
            );
        }
        let last = self.conversation.exchanges.last();
        let Some((prompt, a)) = last.and_then(|ex| {
            ex.assistant
                .as_ref()
                .filter(|a| a.is_finished() && !a.text.is_empty())
                .map(|a| (ex.user.clone(), a.clone()))
        }) else {
            return self.notice_only(
                NoticeKind::Error,
                "no answer to compare yet: /ab regenerates the last answer with another model",
            );
        };
        let settings = a
            .settings
            .clone()
            .unwrap_or_else(|| self.current_settings());
        let path = crate::config::expand_home(std::path::Path::new(arg));
        let id = self.request_ids.next();
        let b_file = path.file_name().map(|n| n.to_string_lossy().into_owned());
        self.notice(
            NoticeKind::Info,
            format!(
                "A/B: answering the last prompt again with {} (seed {})",
                path.display(),
                settings.sampling.seed
            ),
        );
        // One baseline for both sides: with a reference set, A's answers are scored against
        // it, so B is too (and the screen names it); without one, B against A's model.
        let effect = Effect::Generate {
            id,
            turn: super::turn_request(
                self.conversation.messages_for_last(),
                &settings,
                self.context_full,
            ),
            model: Some(path.clone()),
            ab_reference: self.reference.clone(),
        };
        self.ab = Some(AbScreen {
            prompt,
            settings,
            a,
            b_path: path,
            b: AssistantTurn::new(id, b_file),
            b_model: None,
            b_pieces: Vec::new(),
            running: Some(id),
            started: now.instant,
            outcome: None,
            error: None,
            scroll: 0,
            like_for_like: false,
            reference: self.reference.clone(),
        });
        self.mode = Mode::Ab;
        // B's queue time never holds the last answer's score.
        let mut effects = self.stop_scoring("stopped: /ab came first");
        effects.push(effect);
        effects
    }

    pub(super) fn close_ab(&mut self) -> Vec<Effect> {
        self.mode = Mode::Chat;
        let Some(ab) = self.ab.take() else {
            return Vec::new();
        };
        if ab.running.is_some() {
            self.notice(NoticeKind::Info, "A/B comparison stopped");
        }
        // B's answer, or once B has answered its score against A, stops with the screen.
        Vec::from_iter(ab.in_flight().map(Effect::Cancel))
    }

    /// `AbScored`: B's answer scored against A's model, kept on the screen (never saved: B is
    /// not in the conversation). A late score of a closed screen is dropped.
    pub(super) fn on_ab_scored(
        &mut self,
        id: RequestId,
        score: Result<Box<crate::metrics::quality::AnswerScore>, String>,
    ) {
        let Some(ab) = self
            .ab
            .as_mut()
            .filter(|ab| ab.b.quality == Some(TurnQuality::Scoring(id)))
        else {
            return;
        };
        match score {
            Ok(score) => {
                let line = crate::metrics::quality::summary_line(&score);
                ab.b.quality = Some(TurnQuality::Scored(score));
                self.notice(NoticeKind::Info, format!("A/B: B {line}"));
            }
            Err(why) => {
                ab.b.quality = Some(TurnQuality::NotScored(why.clone()));
                self.notice(NoticeKind::Warning, format!("A/B: B not scored: {why}"));
            }
        }
    }

    /// Events of the A/B request in flight (model B's answer).
    pub(super) fn on_ab_event(&mut self, event: EngineEvent) {
        let Some(ab) = self.ab.as_mut() else {
            return;
        };
        match event {
            EngineEvent::PrefillStarted {
                prompt_tokens,
                cached_tokens,
                ..
            } => ab.b.on_prefill_started(prompt_tokens, cached_tokens),
            EngineEvent::PrefillDone {
                template_tokenize,
                prefill,
                at,
                ..
            } => ab.b.on_prefill_done(template_tokenize, prefill, at),
            EngineEvent::Token { text, at, .. } if ab.b.phase.is_active() => {
                ab.b.on_token(&text, at);
            }
            EngineEvent::AbFinished { request_id, report } => {
                let report = *report;
                ab.running = None;
                ab.b.quality = Some(match report.not_scored {
                    None => TurnQuality::Scoring(request_id),
                    Some(why) => TurnQuality::NotScored(why),
                });
                if let Some(a) = report.a_fresh {
                    // A's text stays the conversation's; its figures become the fresh run's.
                    ab.a.summary = Some(a.timeline.summary());
                    ab.a.timeline = a.timeline;
                    ab.like_for_like = true;
                }
                ab.b.model_file = Some(report.model.file_name.clone());
                ab.b_model = Some(report.model);
                ab.b_pieces = report.pieces;
                ab.b.on_finished(report.turn);
                let divergence = first_divergence(&ab.a.text, &ab.b.text, &ab.b_pieces);
                ab.outcome = Some(divergence.map_or(AbOutcome::Identical, AbOutcome::Diverges));
                let text = match divergence {
                    None => "A/B: B's answer is identical to A's".to_string(),
                    Some(d) => format!(
                        "A/B: B's answer diverges from A's at token {}",
                        d.token_index + 1
                    ),
                };
                self.notice(NoticeKind::Info, text);
            }
            EngineEvent::Failed { error, .. } => {
                ab.running = None;
                ab.b.on_failed(error.to_string());
                ab.error = Some(error.to_string());
                self.notice(NoticeKind::Error, format!("A/B: {error}"));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::tests::*;
    use crate::app::{animates, update, Msg};
    use crate::engine::{StopReason, TurnRequest};
    use crossterm::event::{KeyCode, KeyModifiers};
    use std::time::Duration;

    fn ab_finished(id: RequestId, text: &str, pieces: &[&str]) -> Msg {
        let Msg::Engine(EngineEvent::Finished { report, .. }) =
            finished(id, text, StopReason::EndOfGeneration)
        else {
            unreachable!()
        };
        let model = ModelInfo {
            file_name: "b.gguf".into(),
            ..ModelInfo::default()
        };
        Msg::Engine(EngineEvent::AbFinished {
            request_id: id,
            report: Box::new(crate::engine::AbReport {
                model,
                turn: *report,
                a_fresh: None,
                pieces: pieces.iter().map(|p| p.to_string()).collect(),
                not_scored: Some("not scored: a test".to_string()),
            }),
        })
    }

    #[test]
    fn ab_needs_a_path_and_a_previous_answer() {
        let mut app = ready_app();
        // Without a path: the model picker, to choose B from (Esc closes it).
        let fx = run_line(&mut app, "/ab");
        assert!(
            matches!(fx.as_slice(), [Effect::DiscoverModels { .. }]),
            "{fx:?}"
        );
        assert_eq!(app.mode, Mode::Picker);
        update(&mut app, Msg::Key(key(KeyCode::Esc)), now());
        assert_eq!(app.mode, Mode::Chat);
        assert!(run_line(&mut app, "/ab /m/b.gguf").is_empty());
        let notice = app.notice.clone().unwrap();
        assert_eq!(notice.kind, NoticeKind::Error);
        assert!(notice.text.contains("no answer to compare"), "{notice:?}");
        assert_eq!(app.mode, Mode::Chat);
        assert!(app.ab.is_none());
        // Not while an answer streams.
        type_text(&mut app, "q");
        update(&mut app, Msg::Key(key(KeyCode::Enter)), now());
        assert!(run_line(&mut app, "/ab /m/b.gguf").is_empty());
        assert_eq!(app.notice.as_ref().unwrap().kind, NoticeKind::Warning);
    }

    #[test]
    fn with_a_reference_both_sides_are_scored_against_it() {
        // The case: chat on a Q4_0 with --ref the Q4_1, A/B with a Q8_0. A's answers
        // are scored against the Q4_1, so B must be too, not against A's Q4_0.
        let (mut app, _) = answered_app();
        app.reference = Some(PathBuf::from("/m/q4_1.gguf"));
        let fx = run_line(&mut app, "/ab /m/q8_0.gguf");
        let generate = fx.iter().find(|e| matches!(e, Effect::Generate { .. }));
        assert!(
            matches!(
                generate,
                Some(Effect::Generate { model: Some(b), ab_reference: Some(r), .. })
                    if b == &PathBuf::from("/m/q8_0.gguf") && r == &PathBuf::from("/m/q4_1.gguf")
            ),
            "{fx:?}"
        );
        let ab = app.ab.as_ref().unwrap();
        assert_eq!(ab.reference, Some(PathBuf::from("/m/q4_1.gguf")));
    }

    #[test]
    fn ab_regenerates_the_last_answer_with_another_model_and_finds_the_divergence() {
        let (mut app, a_id) = answered_app();
        // Settings changed after the answer: B still uses the answer's own.
        run_line(&mut app, "/seed 7");
        let before = app.conversation.clone();
        let fx = run_line(&mut app, "/ab /m/b.gguf");
        let Some(Effect::Generate {
            id,
            turn:
                TurnRequest {
                    messages,
                    sampling,
                    max_tokens,
                    ..
                },
            model: Some(path),
            ab_reference: None,
        }) = fx.first().cloned()
        else {
            panic!("{fx:?}")
        };
        assert_ne!(id, a_id);
        assert_eq!(path, PathBuf::from("/m/b.gguf"));
        assert_eq!(messages, before.messages_for_last());
        assert_eq!(
            messages.last().map(|m| m.content.as_str()),
            Some("question")
        );
        assert_eq!(sampling.seed, 1234, "the seed A was sampled with");
        assert_eq!(max_tokens, 64);
        assert_eq!(app.mode, Mode::Ab);
        assert!(animates(&app));
        // B's events fill the B side, never the conversation.
        for (i, piece) in ["Hello", " there"].iter().enumerate() {
            update(
                &mut app,
                Msg::Engine(EngineEvent::Token {
                    request_id: id,
                    index: i,
                    text: piece.to_string(),
                    at: Duration::from_millis(10 + i as u64),
                }),
                now(),
            );
        }
        let ab = app.ab.as_ref().unwrap();
        assert_eq!(ab.b.text, "Hello there");
        assert_eq!(ab.a.text, "Hello world");
        let fx = update(
            &mut app,
            ab_finished(id, "Hello there", &["Hello", " there"]),
            now(),
        );
        assert!(fx.is_empty(), "B is not saved: {fx:?}");
        let ab = app.ab.as_ref().unwrap();
        assert_eq!(ab.running, None);
        assert_eq!(ab.b.model_file.as_deref(), Some("b.gguf"));
        assert_eq!(
            ab.outcome,
            Some(AbOutcome::Diverges(Divergence {
                token_index: 1,
                at_byte: 6
            }))
        );
        // Counted from 1, as the token screen and the quality line count: the second token.
        assert!(
            app.notice
                .as_ref()
                .is_some_and(|n| n.text.ends_with("diverges from A's at token 2")),
            "{:?}",
            app.notice
        );
        assert_eq!(app.conversation, before, "the conversation is untouched");
        assert!(!animates(&app));
        // Esc closes; nothing to cancel.
        let fx = update(&mut app, Msg::Key(key(KeyCode::Esc)), now());
        assert!(fx.is_empty());
        assert_eq!(app.mode, Mode::Chat);
        assert!(app.ab.is_none());
        // The next turn goes on normally.
        type_text(&mut app, "next");
        let fx = update(&mut app, Msg::Key(key(KeyCode::Enter)), now());
        assert!(matches!(
            fx.as_slice(),
            [Effect::Generate { model: None, .. }]
        ));
    }

    #[test]
    fn b_is_scored_against_a_and_closing_the_screen_stops_the_score() {
        use crate::metrics::quality::{AnswerScore, TokenScore};
        let b_score = || {
            let token = TokenScore {
                kld: 0.25,
                same_top: false,
                top_ref: 1,
                top_cand: 2,
                p_ref: 0.2,
                p_cand: 0.5,
                ln_p_cand: 0.5f64.ln(),
                entropy_ref: Some(1.0),
                entropy_cand: Some(1.0),
            };
            Box::new(AnswerScore::new(
                "a.gguf".into(),
                vec![token, token],
                &[1, 2],
                vec!["Hello".into(), " there".into()],
                5,
            ))
        };
        let finished_scoring = |id: RequestId| {
            let Msg::Engine(EngineEvent::AbFinished { request_id, report }) =
                ab_finished(id, "Hello there", &["Hello", " there"])
            else {
                unreachable!()
            };
            let mut report = *report;
            report.not_scored = None;
            Msg::Engine(EngineEvent::AbFinished {
                request_id,
                report: Box::new(report),
            })
        };
        let (mut app, _) = answered_app();
        let fx = run_line(&mut app, "/ab /m/b.gguf");
        let Some(Effect::Generate { id, .. }) = fx.first().cloned() else {
            panic!("{fx:?}")
        };
        update(&mut app, finished_scoring(id), now());
        let ab = app.ab.as_ref().unwrap();
        assert_eq!(ab.b.quality, Some(TurnQuality::Scoring(id)));
        assert_eq!(ab.in_flight(), Some(id), "the score is still running");
        let fx = update(
            &mut app,
            Msg::Engine(EngineEvent::AbScored {
                request_id: id,
                score: Ok(b_score()),
            }),
            now(),
        );
        assert!(fx.is_empty(), "B's score is not saved: {fx:?}");
        let ab = app.ab.as_ref().unwrap();
        assert!(
            matches!(&ab.b.quality, Some(TurnQuality::Scored(q)) if q.summary.as_ref().unwrap().kld_mean == 0.25)
        );
        assert_eq!(ab.in_flight(), None);
        assert!(app
            .notice
            .as_ref()
            .unwrap()
            .text
            .contains("KLD mean 0.25 p99 0.25 nats"));
        assert_eq!(
            app.conversation
                .exchanges
                .last()
                .unwrap()
                .assistant
                .as_ref()
                .unwrap()
                .quality,
            None,
            "the conversation's answer is untouched"
        );
        // Nothing left to stop.
        assert!(update(&mut app, Msg::Key(key(KeyCode::Esc)), now()).is_empty());

        // Closed while the score runs: the score is cancelled and its late result dropped.
        let fx = run_line(&mut app, "/ab /m/b.gguf");
        let Some(Effect::Generate { id, .. }) = fx.first().cloned() else {
            panic!("{fx:?}")
        };
        update(&mut app, finished_scoring(id), now());
        let fx = update(&mut app, Msg::Key(key(KeyCode::Esc)), now());
        assert_eq!(fx, vec![Effect::Cancel(id)]);
        update(
            &mut app,
            Msg::Engine(EngineEvent::AbScored {
                request_id: id,
                score: Ok(b_score()),
            }),
            now(),
        );
        assert!(app.ab.is_none());
        // Quitting while it runs cancels it too.
        let fx = run_line(&mut app, "/ab /m/b.gguf");
        let Some(Effect::Generate { id, .. }) = fx.first().cloned() else {
            panic!("{fx:?}")
        };
        update(&mut app, finished_scoring(id), now());
        let fx = update(
            &mut app,
            Msg::Key(with(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            now(),
        );
        assert_eq!(fx, vec![Effect::Cancel(id), Effect::Quit]);
    }

    #[test]
    fn a_b_that_cannot_be_scored_says_why() {
        let (mut app, _) = answered_app();
        let fx = run_line(&mut app, "/ab /m/b.gguf");
        let Some(Effect::Generate { id, .. }) = fx.first().cloned() else {
            panic!("{fx:?}")
        };
        update(
            &mut app,
            ab_finished(id, "Hello there", &["Hello", " there"]),
            now(),
        );
        let ab = app.ab.as_ref().unwrap();
        assert_eq!(
            ab.b.quality,
            Some(TurnQuality::NotScored("not scored: a test".into()))
        );
        assert_eq!(ab.in_flight(), None);
        // A score that fails says why, on the screen and in the notice.
        let ab = app.ab.as_mut().unwrap();
        ab.b.quality = Some(TurnQuality::Scoring(id));
        update(
            &mut app,
            Msg::Engine(EngineEvent::AbScored {
                request_id: id,
                score: Err("the context is full".into()),
            }),
            now(),
        );
        assert_eq!(
            app.ab.as_ref().unwrap().b.quality,
            Some(TurnQuality::NotScored("the context is full".into()))
        );
        let notice = app.notice.as_ref().unwrap();
        assert_eq!(notice.kind, NoticeKind::Warning);
        assert!(notice.text.contains("the context is full"), "{notice:?}");
    }

    #[test]
    fn ab_identical_answers_and_failures() {
        let (mut app, _) = answered_app();
        let fx = run_line(&mut app, "/ab ~/b.gguf");
        let Some(Effect::Generate {
            id,
            model: Some(path),
            ..
        }) = fx.first().cloned()
        else {
            panic!("{fx:?}")
        };
        assert!(!path.starts_with("~"), "the home dir is expanded");
        update(
            &mut app,
            ab_finished(id, "Hello world", &["Hello", " world"]),
            now(),
        );
        assert_eq!(app.ab.as_ref().unwrap().outcome, Some(AbOutcome::Identical));
        assert!(app.notice.as_ref().unwrap().text.contains("identical"));
        update(&mut app, Msg::Key(key(KeyCode::Esc)), now());
        // A missing file: a clear message, the screen shows it, nothing panics.
        let fx = run_line(&mut app, "/ab /nope.gguf");
        let Some(Effect::Generate {
            id, model: Some(_), ..
        }) = fx.first().cloned()
        else {
            panic!("{fx:?}")
        };
        update(
            &mut app,
            Msg::Engine(EngineEvent::Failed {
                request_id: id,
                error: crate::engine::EngineError::ModelNotFound("/nope.gguf".into()),
            }),
            now(),
        );
        let notice = app.notice.clone().unwrap();
        assert_eq!(notice.kind, NoticeKind::Error);
        assert!(notice.text.contains("/nope.gguf"), "{notice:?}");
        assert!(app.ab.as_ref().unwrap().error.is_some());
        assert_eq!(app.engine, EngineStatus::Ready, "the chat's model is fine");
    }

    #[test]
    fn esc_cancels_b_and_its_late_events_are_dropped() {
        let (mut app, _) = answered_app();
        let before = app.conversation.clone();
        let fx = run_line(&mut app, "/ab /m/b.gguf");
        let Some(Effect::Generate {
            id, model: Some(_), ..
        }) = fx.first().cloned()
        else {
            panic!("{fx:?}")
        };
        let fx = update(&mut app, Msg::Key(key(KeyCode::Esc)), now());
        assert_eq!(fx, vec![Effect::Cancel(id)]);
        assert_eq!(app.mode, Mode::Chat);
        assert!(app.ab.is_none());
        update(
            &mut app,
            Msg::Engine(EngineEvent::Token {
                request_id: id,
                index: 0,
                text: "late".into(),
                at: Duration::from_millis(1),
            }),
            now(),
        );
        update(&mut app, ab_finished(id, "late", &["late"]), now());
        assert_eq!(app.conversation, before);
        assert!(app.ab.is_none());
        // Quitting while B runs cancels it too.
        let fx = run_line(&mut app, "/ab /m/b.gguf");
        let Some(Effect::Generate {
            id, model: Some(_), ..
        }) = fx.first().cloned()
        else {
            panic!("{fx:?}")
        };
        let fx = update(
            &mut app,
            Msg::Key(with(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            now(),
        );
        assert_eq!(fx, vec![Effect::Cancel(id), Effect::Quit]);
    }
}
