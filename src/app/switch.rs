//! Switching the chat's model (`/model PATH`): the engine loads the new model beside the old
//! one and switches only when it is ready. Until then the old model, its KV cache and the
//! conversation stay as they are; a failed or cancelled load (Esc) leaves them so.

use std::path::PathBuf;

use super::{App, Effect, NoticeKind};
use crate::engine::{EngineError, ModelInfo, RequestId};

/// A model switch in progress.
#[derive(Debug, Clone, PartialEq)]
pub struct Switch {
    pub request_id: RequestId,
    pub path: PathBuf,
    /// Loading progress, 0.0..=1.0.
    pub progress: f32,
    /// Esc was pressed: the load is being aborted.
    pub cancelling: bool,
}

impl App {
    /// `/model PATH`: stop the answer being written, then load `path` beside the current model.
    pub(super) fn start_switch(&mut self, arg: &str) -> Vec<Effect> {
        if let Some(s) = &self.switching {
            let text = format!(
                "{} is still loading: wait for it, or Esc to cancel",
                s.path.display()
            );
            return self.notice_only(NoticeKind::Warning, text);
        }
        let mut effects = self.cancel_active();
        effects.extend(self.stop_scoring("stopped: another model was loaded"));
        let path = crate::config::expand_home(std::path::Path::new(arg));
        let id = self.request_ids.next();
        self.switching = Some(Switch {
            request_id: id,
            path: path.clone(),
            progress: 0.0,
            cancelling: false,
        });
        self.notice(
            NoticeKind::Info,
            format!(
                "loading {} beside the current model (Esc cancels; the conversation is kept)",
                path.display()
            ),
        );
        effects.push(Effect::SwitchModel { id, path });
        effects
    }

    /// Esc while a switch loads: abort it (the engine answers `SwitchFailed`).
    pub(super) fn cancel_switch(&mut self) -> Vec<Effect> {
        let Some(s) = self.switching.as_mut() else {
            return Vec::new();
        };
        s.cancelling = true;
        let id = s.request_id;
        self.notice(NoticeKind::Info, "cancelling the model load…");
        vec![Effect::Cancel(id)]
    }

    pub(super) fn on_switch_progress(&mut self, request_id: RequestId, progress: f32) {
        if let Some(s) = self
            .switching
            .as_mut()
            .filter(|s| s.request_id == request_id)
        {
            s.progress = progress;
        }
    }

    /// The new model is ready: it replaces the old one.
    pub(super) fn on_switched(&mut self, info: &ModelInfo) -> Vec<Effect> {
        let Some(s) = self.switching.take() else {
            return Vec::new();
        };
        self.model_path = s.path.clone();
        self.notice(
            NoticeKind::Info,
            format!("switched to {} (the conversation is kept)", info.file_name),
        );
        vec![Effect::CountWith(s.path)]
    }

    pub(super) fn on_switch_failed(&mut self, request_id: RequestId, error: &EngineError) {
        let Some(s) = self.switching.take_if(|s| s.request_id == request_id) else {
            return;
        };
        let kept = if self.engine == super::EngineStatus::Ready {
            let name = self.model_file().unwrap_or_else(|| {
                self.model_path
                    .file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
            });
            format!("still on {name}")
        } else {
            "no model is loaded".to_string()
        };
        let text = if *error == EngineError::Cancelled {
            format!("loading {} cancelled; {kept}", s.path.display())
        } else {
            // The first line names the problem; the rest (what to do) follows it.
            let error = error.to_string().replace("\n  ", "; ");
            format!("could not switch model ({kept}): {error}")
        };
        let kept_unsent = if std::mem::take(&mut self.send_when_ready) {
            "; your message is kept unsent"
        } else {
            ""
        };
        self.notice(NoticeKind::Error, format!("{text}{kept_unsent}"));
    }
}

#[cfg(test)]
mod tests {
    use crate::app::tests::*;
    use crate::app::{update, Effect, EngineStatus, Msg, NoticeKind};
    use crate::engine::{EngineError, EngineEvent};
    use crossterm::event::KeyCode;

    #[test]
    fn a_failed_switch_keeps_the_model_and_a_good_one_replaces_it() {
        let mut app = ready_app();
        let before = app.model_path.clone();
        type_text(&mut app, "/model /m/missing.gguf");
        let fx = update(&mut app, Msg::Key(key(KeyCode::Enter)), now());
        let Some(Effect::SwitchModel { id, path }) = fx.last().cloned() else {
            panic!("{fx:?}")
        };
        assert_eq!(path, std::path::PathBuf::from("/m/missing.gguf"));
        assert_eq!(
            app.engine,
            EngineStatus::Ready,
            "the old model still serves"
        );
        // No message goes to the engine while it loads the new model.
        type_text(&mut app, "hello");
        assert!(update(&mut app, Msg::Key(key(KeyCode::Enter)), now()).is_empty());
        update(
            &mut app,
            Msg::Engine(EngineEvent::SwitchProgress {
                request_id: id,
                progress: 0.5,
            }),
            now(),
        );
        assert_eq!(app.switching.as_ref().map(|s| s.progress), Some(0.5));
        update(
            &mut app,
            Msg::Engine(EngineEvent::SwitchFailed {
                request_id: id,
                error: EngineError::ModelNotFound(path.clone()),
            }),
            now(),
        );
        assert!(app.switching.is_none());
        assert_eq!(app.engine, EngineStatus::Ready);
        assert_eq!(app.model_path, before);
        let notice = app.notice.clone().unwrap();
        assert_eq!(notice.kind, NoticeKind::Error);
        assert!(notice.text.contains("not found"), "{}", notice.text);
        assert!(notice.text.contains("still on"), "{}", notice.text);
        // The typed message was kept and can be sent now.
        let fx = update(&mut app, Msg::Key(key(KeyCode::Enter)), now());
        assert!(matches!(fx.as_slice(), [Effect::Generate { .. }]), "{fx:?}");
    }

    #[test]
    fn esc_cancels_a_switch_and_ready_completes_one() {
        let mut app = ready_app();
        type_text(&mut app, "/model /m/big.gguf");
        let fx = update(&mut app, Msg::Key(key(KeyCode::Enter)), now());
        let Some(Effect::SwitchModel { id, .. }) = fx.last().cloned() else {
            panic!("{fx:?}")
        };
        let fx = update(&mut app, Msg::Key(key(KeyCode::Esc)), now());
        assert_eq!(fx, vec![Effect::Cancel(id)]);
        update(
            &mut app,
            Msg::Engine(EngineEvent::SwitchFailed {
                request_id: id,
                error: EngineError::Cancelled,
            }),
            now(),
        );
        assert!(app.notice.clone().unwrap().text.contains("cancelled"));
        assert!(app.switching.is_none());

        type_text(&mut app, "/model /m/other.gguf");
        update(&mut app, Msg::Key(key(KeyCode::Enter)), now());
        let info = crate::engine::ModelInfo {
            file_name: "other.gguf".into(),
            path: "/m/other.gguf".into(),
            ..crate::engine::ModelInfo::default()
        };
        let fx = update(
            &mut app,
            Msg::Engine(EngineEvent::Ready(Box::new(info))),
            now(),
        );
        assert_eq!(fx, vec![Effect::CountWith("/m/other.gguf".into())]);
        assert_eq!(app.model_path, std::path::PathBuf::from("/m/other.gguf"));
        assert!(app.switching.is_none());
    }
}
