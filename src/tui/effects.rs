//! The effect runner: where the loop does I/O (the engine, the history dir, the comparisons
//! log). It never writes into `App`: what it learns goes back as `Msg`s.

use std::path::PathBuf;
use std::time::SystemTime;

use crate::app::{Effect, Msg};
use crate::engine::{EngineConfig, EngineEvent, EngineHandle, EventSender, RequestId, TurnRequest};

/// What the chat's backends share: the one event channel every backend sends into, whether
/// the chat's own backend is a server, and the wait for another server's answers.
pub struct Backends {
    pub events: EventSender,
    pub remote_chat: bool,
    pub timeout: std::time::Duration,
}

/// Where the effects go: the engine, the history dir; and the live token counter of the input.
pub struct Effects<'a> {
    pub engine: &'a mut EngineHandle,
    pub engine_config: EngineConfig,
    pub backends: Backends,
    /// An A/B answer from a server while the chat is local (`/ab URL`), started on first use.
    pub(crate) ab_remote: Option<EngineHandle>,
    /// An A/B answer from a local GGUF while the chat talks to a server (`/ab PATH`).
    pub(crate) ab_local: Option<super::side::LocalAb>,
    /// Where the conversation is saved, and what this chat last saw there.
    pub save_slot: crate::history::SaveSlot,
    /// Where the comparisons log is (the compare screen reads it).
    pub data_dir: PathBuf,
    /// The input's live token count, counted on its own thread.
    pub counter: super::count::CountWorker,
    /// Work done on threads of its own (the model search, Tab's folder listing), whose
    /// outcomes the loop takes from `jobs.results` as messages.
    pub(crate) jobs: Jobs,
}

/// Effects run on threads of their own, so that a slow disk never delays a frame.
pub(crate) struct Jobs {
    sender: tokio::sync::mpsc::UnboundedSender<Msg>,
    pub(crate) results: tokio::sync::mpsc::UnboundedReceiver<Msg>,
}

impl Jobs {
    pub(crate) fn new() -> Self {
        let (sender, results) = tokio::sync::mpsc::unbounded_channel();
        Self { sender, results }
    }

    /// Run `job` on a thread and send its message to the loop.
    fn spawn(&self, name: &str, job: impl FnOnce() -> Msg + Send + 'static) -> Result<(), String> {
        let sender = self.sender.clone();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let _ = sender.send(job());
            })
            .map(|_| ())
            .map_err(|e| format!("could not start a thread: {e}"))
    }
}

/// A batch sweep of the bench screen, appended to the results log as one run.
fn save_sweep(
    log_path: &std::path::Path,
    sweep: &crate::app::SweepToSave,
) -> Result<(String, Option<String>), String> {
    let now = SystemTime::now();
    let id = crate::ids::new_id(now);
    let rows = crate::bench::chat_sweep::rows(
        &id,
        (&sweep.points, &sweep.depths),
        (sweep.n_prompt, sweep.n_gen),
        sweep.stopped,
        &sweep.model,
        &sweep.sampling,
    );
    let command = if sweep.depths.is_empty() {
        "tokscope chat (F2 batch sweep)"
    } else {
        "tokscope chat (F2 depth sweep)"
    };
    crate::bench::append_run(log_path, &id, crate::ids::unix_s(now), command, &rows)
        .map(|warning| (id, warning))
}

/// Tab's completion of `line`: the typed folder listed (`~` is `$HOME`), folders and `.gguf`
/// files kept.
fn complete_line(line: &str) -> Option<crate::app::Completion> {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    let (dir, head, prefix) = crate::app::completion_target(line, home.as_deref())?;
    let entries: Vec<crate::app::Candidate> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| crate::app::Candidate {
                    name: e.file_name().to_string_lossy().into_owned(),
                    // A link to a folder is a folder.
                    is_dir: std::fs::metadata(e.path()).is_ok_and(|m| m.is_dir()),
                })
                .collect()
        })
        .unwrap_or_default();
    Some(crate::app::complete_path(&head, &prefix, &entries))
}

impl Effects<'_> {
    /// A new conversation id for the next Ctrl+N or `/new`, minted now (`update` never reads
    /// the clock or the RNG).
    pub(crate) fn fresh_conversation_id(&self) -> Msg {
        Msg::FreshConversationId(crate::ids::new_id(SystemTime::now()))
    }

    /// Hand a turn to the backend that answers it: the chat's own, or for an A/B answer of
    /// the other kind (a URL from a local chat, a file from a remote one) a side backend
    /// sending into the same event channel.
    fn generate(
        &mut self,
        id: RequestId,
        turn: TurnRequest,
        model: Option<PathBuf>,
        ab_reference: Option<PathBuf>,
    ) -> Result<RequestId, crate::engine::EngineError> {
        let Some(path) = model else {
            return self.engine.send(id, turn, None);
        };
        match (crate::remote::is_url(&path), self.backends.remote_chat) {
            (true, false) => {
                let side = match self.ab_remote.take() {
                    Some(side) => side,
                    None => crate::remote::spawn(
                        None,
                        self.backends.timeout,
                        self.backends.events.clone(),
                    )?,
                };
                let side = self.ab_remote.insert(side);
                side.send(id, turn, Some(path))
            }
            (false, true) => {
                let mut config = self.engine_config.clone();
                config.model_path = path;
                let side =
                    super::side::LocalAb::start(config, id, turn, self.backends.events.clone())?;
                self.ab_local = Some(side);
                Ok(id)
            }
            _ => self.engine.send_ab(id, turn, path, ab_reference),
        }
    }

    /// Run effects; returns messages reporting their outcomes, and whether to quit.
    pub(crate) fn run(&mut self, effects: Vec<Effect>) -> (Vec<Msg>, bool) {
        let mut msgs = Vec::new();
        let mut quit = false;
        for effect in effects {
            match effect {
                Effect::Generate {
                    id,
                    turn,
                    model,
                    ab_reference,
                } => {
                    if let Err(e) = self.generate(id, turn, model, ab_reference) {
                        msgs.push(Msg::Engine(EngineEvent::Failed {
                            request_id: id,
                            error: e,
                        }));
                    }
                }
                Effect::Score { id, reference } => {
                    if let Err(error) = self.engine.score_last(id, reference) {
                        msgs.push(Msg::Engine(EngineEvent::Failed {
                            request_id: id,
                            error,
                        }));
                    }
                }
                Effect::Cancel(id) => {
                    self.engine.cancel(id);
                    if let Some(side) = &self.ab_remote {
                        side.cancel(id);
                    }
                    if self.ab_local.as_ref().is_some_and(|s| s.id <= id) {
                        self.ab_local = None;
                    }
                }
                Effect::Sweep { id, plan } => {
                    if let Err(e) = self.engine.sweep(id, plan) {
                        msgs.push(Msg::Engine(EngineEvent::SweepDone {
                            request_id: id,
                            error: Some(e),
                        }));
                    }
                }
                Effect::SaveSweep(sweep) => {
                    let log_path = crate::bench::results_path(&self.data_dir);
                    let job = move || Msg::SweepSaved(save_sweep(&log_path, &sweep));
                    if let Err(e) = self.jobs.spawn("save-sweep", job) {
                        msgs.push(Msg::SweepSaved(Err(e)));
                    }
                }
                Effect::LoadComparison { back } => {
                    msgs.push(Msg::ComparisonLoaded(comparison_at(&self.data_dir, back)));
                }
                Effect::SwitchModel { id, path } => {
                    let mut config = self.engine_config.clone();
                    config.model_path = path;
                    if let Err(error) = self.engine.switch_model(id, config) {
                        msgs.push(Msg::Engine(EngineEvent::SwitchFailed {
                            request_id: id,
                            error,
                        }));
                    }
                }
                // Count with the new model's vocabulary from now on.
                Effect::CountWith(path) => self.counter.use_model(path),
                Effect::SetConfidence(on) => self.engine.set_confidence(on),
                Effect::Save(mut conversation) => {
                    absolute_model_paths(&mut conversation);
                    match self
                        .save_slot
                        .save(&conversation, std::time::SystemTime::now())
                    {
                        Ok(outcome) => {
                            if let Some(text) = outcome.notice() {
                                msgs.push(Msg::Notice(crate::app::NoticeKind::Warning, text));
                            }
                            msgs.push(Msg::Saved(Ok(outcome.path)));
                        }
                        Err(e) => msgs.push(Msg::Saved(Err(e.to_string()))),
                    }
                }
                Effect::Export {
                    format,
                    path,
                    conversation,
                    settings,
                } => {
                    let result = crate::app::export::check_export_dir(&path)
                        .and_then(|()| {
                            crate::app::export::export_text(format, &conversation, &settings)
                        })
                        .and_then(|c| {
                            crate::fsx::write_private(&path, c.as_bytes())
                                .map_err(|e| e.to_string())
                        })
                        .map(|()| path.clone());
                    msgs.push(Msg::Exported(result));
                }
                Effect::DiscoverModels { model_dirs, in_use } => {
                    let job = move || {
                        let roots = crate::discover::Roots {
                            in_use,
                            ..crate::discover::Roots::for_user(&model_dirs)
                        };
                        Msg::ModelsFound(crate::discover::discover(&roots, Default::default()))
                    };
                    if let Err(e) = self.jobs.spawn("model-search", job) {
                        msgs.push(Msg::Notice(crate::app::NoticeKind::Error, e));
                    }
                }
                Effect::CompletePath(line) => {
                    let job = move || Msg::Completed {
                        completion: complete_line(&line),
                        asked: line,
                    };
                    if let Err(e) = self.jobs.spawn("complete-path", job) {
                        msgs.push(Msg::Notice(crate::app::NoticeKind::Error, e));
                    }
                }
                // Done by the loop (`settle`), which owns the terminal and the frame log.
                Effect::Copy(_) | Effect::WriteTrace { .. } => {}
                Effect::Quit => quit = true,
            }
        }
        (msgs, quit)
    }
}

/// Model paths as saved are absolute, so that `--resume` from another folder finds the
/// model again (a server's URL is left as it is).
fn absolute_model_paths(conversation: &mut crate::history::SavedConversation) {
    let models = conversation.model.iter_mut().chain(
        conversation
            .turns
            .iter_mut()
            .filter_map(|t| t.model.as_mut()),
    );
    for model in models {
        if model.path.is_relative() && !crate::remote::is_url(&model.path) {
            if let Ok(absolute) = std::path::absolute(&model.path) {
                model.path = absolute;
            }
        }
    }
}

/// The comparison `back` steps before the newest in the comparisons log of `data_dir`, and
/// where it sits (for the compare screen).
pub fn comparison_at(
    data_dir: &std::path::Path,
    back: usize,
) -> Result<Option<(crate::compare::Comparison, crate::compare::log::Place)>, String> {
    let path = crate::compare::log::comparisons_path(data_dir);
    crate::compare::log::at(&path, back).map_err(|e| format!("cannot read {}: {e}", path.display()))
}
