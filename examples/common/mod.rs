//! What the engine examples share: an engine on one model, driven the chat's way through
//! `EngineHandle` (answers, scores), waiting for each request's own events.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use tokscope::engine::{
    ChatMessage, EngineConfig, EngineEvent, EngineHandle, EngineSettings, EventReceiver,
    SamplingParams, TurnReport, TurnRequest,
};
use tokscope::metrics::quality::AnswerScore;

pub struct Engine {
    pub handle: EngineHandle,
    pub events: EventReceiver,
}

impl Engine {
    /// An engine on `model`, once it is ready.
    pub fn start(model: &Path, settings: EngineSettings) -> Self {
        let (handle, mut events) = EngineHandle::spawn(EngineConfig {
            model_path: model.to_path_buf(),
            settings,
        })
        .unwrap();
        loop {
            match events.blocking_recv().expect("engine gone") {
                EngineEvent::Ready(_) => return Self { handle, events },
                EngineEvent::LoadFailed(e) => panic!("load failed: {e}"),
                _ => {}
            }
        }
    }

    /// `messages` answered greedily, `tokens` tokens (end of generation ignored).
    pub fn answer(&mut self, messages: &[ChatMessage], tokens: u32) -> TurnReport {
        let turn = TurnRequest {
            messages: messages.to_vec(),
            sampling: SamplingParams {
                temperature: 0.0,
                ..SamplingParams::default()
            },
            max_tokens: tokens,
            capture_first_logits: false,
            ignore_eos: true,
            context_full: tokscope::engine::ContextFull::DropOldest,
        };
        let id = self.handle.send(self.handle.next_id(), turn, None).unwrap();
        loop {
            match self.events.blocking_recv().expect("engine gone") {
                EngineEvent::Finished { request_id, report } if request_id == id => return *report,
                EngineEvent::Failed { request_id, error } if request_id == id => {
                    panic!("generation failed: {error}")
                }
                _ => {}
            }
        }
    }

    /// The last answer scored against `reference`, to the end.
    pub fn score(&mut self, reference: &Path) -> AnswerScore {
        let id = self.handle.next_id();
        self.handle.score_last(id, reference.to_path_buf()).unwrap();
        loop {
            match self.events.blocking_recv().expect("engine gone") {
                EngineEvent::Scored { request_id, score } if request_id == id => return *score,
                EngineEvent::Failed { request_id, error } if request_id == id => {
                    panic!("scoring failed: {error}")
                }
                _ => {}
            }
        }
    }
}
