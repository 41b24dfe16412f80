//! The other side of an A/B comparison when it is of another kind than the chat's backend:
//! a local GGUF answering a remote chat's `/ab PATH`. (A server answering a local chat's
//! `/ab URL` is the remote worker without a server of its own: `remote::spawn(None, …)`.)
//!
//! A local engine of its own loads model B; once it is ready the turn is handed to it (so
//! B's TTFT does not include loading, as with the engine's own A/B), its prefill and token
//! events are passed on under the turn's id, and its report comes back as `AbFinished`, as
//! the chat's A/B screen expects. The engine is dropped when the turn ends.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::engine::{
    AbReport, EngineConfig, EngineError, EngineEvent, EngineHandle, EventSender, RequestId,
    TurnRequest,
};

/// Why B is not scored against A here: A is a server.
const NOT_SCORED: &str = "not scored: model A is a server, which sends no full distributions";

/// How often the relay looks for the local engine's events and for a cancel.
const RELAY_POLL: Duration = Duration::from_millis(5);

/// A local model B answering one A/B turn.
pub(crate) struct LocalAb {
    pub id: RequestId,
    cancelled: Arc<AtomicBool>,
}

impl LocalAb {
    /// Loads `config`'s model in an engine of its own and answers `turn` under `id`, every
    /// event going to `events`.
    pub(crate) fn start(
        config: EngineConfig,
        id: RequestId,
        turn: TurnRequest,
        events: EventSender,
    ) -> Result<Self, EngineError> {
        let cancelled = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&cancelled);
        // Not joined: a model still loading would hold the UI; the thread ends by itself once
        // it sees the cancel (after the load, at the latest).
        std::thread::Builder::new()
            .name("ab-local".into())
            .spawn(move || relay(config, id, turn, &events, &flag))
            .map_err(|e| EngineError::Thread(e.to_string()))?;
        Ok(Self { id, cancelled })
    }

    /// Stop B's turn (within one token, as any turn) and drop its engine.
    pub(crate) fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
    }
}

impl Drop for LocalAb {
    fn drop(&mut self) {
        self.cancel();
    }
}

fn relay(
    config: EngineConfig,
    id: RequestId,
    turn: TurnRequest,
    events: &EventSender,
    cancelled: &AtomicBool,
) {
    let fail = |error| {
        let _ = events.send(EngineEvent::Failed {
            request_id: id,
            error,
        });
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut engine = match EngineHandle::spawn_with_events(config, tx) {
        Ok(e) => e,
        Err(error) => return fail(error),
    };
    let mut model = None;
    let mut pieces = Vec::new();
    let mut cancel_sent = false;
    loop {
        if cancelled.load(Ordering::SeqCst) && !cancel_sent {
            if model.is_none() {
                // Still loading: nothing was asked of B; dropping the engine ends it.
                return;
            }
            engine.cancel(id);
            cancel_sent = true;
        }
        let event = match rx.try_recv() {
            Ok(e) => e,
            Err(tokio::sync::mpsc::error::TryRecvError::Empty) => {
                std::thread::sleep(RELAY_POLL);
                continue;
            }
            Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => {
                return fail(EngineError::EngineGone)
            }
        };
        match event {
            EngineEvent::Ready(info) => {
                model = Some(*info);
                if let Err(error) = engine.send(id, turn.clone(), None) {
                    return fail(error);
                }
            }
            EngineEvent::LoadFailed(error) => return fail(error),
            EngineEvent::Token { ref text, .. } => {
                pieces.push(text.clone());
                let _ = events.send(event);
            }
            EngineEvent::Finished { report, .. } => {
                let _ = events.send(EngineEvent::AbFinished {
                    request_id: id,
                    report: Box::new(AbReport {
                        model: model.take().unwrap_or_default(),
                        turn: *report,
                        a_fresh: None,
                        pieces,
                        not_scored: Some(NOT_SCORED.to_string()),
                    }),
                });
                return;
            }
            EngineEvent::Failed { .. } => {
                let _ = events.send(event);
                return;
            }
            e @ (EngineEvent::PrefillStarted { .. }
            | EngineEvent::PrefillProgress { .. }
            | EngineEvent::PrefillDone { .. }) => {
                let _ = events.send(e);
            }
            _ => {}
        }
    }
}
