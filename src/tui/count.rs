//! The input's live token count, off the UI thread: a worker thread owns the token counter
//! (loading a vocabulary and tokenizing a large paste both take long), always counts the latest
//! text it was sent (older requests queued behind it are skipped), and sends each count back
//! to the loop, which hands it to `update` as `Msg::InputTokens`. A key is drawn at once
//! whatever the input's size; the count follows when it is ready.
//!
//! While a count is in flight a marker file lies next to the draft ([`COUNTING_MARKER`]): a
//! count that ends the process (llama.cpp crashing on the text) leaves it, and the next start
//! restores the draft without counting it until the user changes it ([`CountWorker::hold`]),
//! instead of crashing again before a key is pressed.

use std::path::{Path, PathBuf};
use std::sync::mpsc;

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::app::InputTokens;
use crate::tokcount::TokenCounter;

/// The marker's name in the data dir, beside the draft (`draft.txt`).
pub(crate) const COUNTING_MARKER: &str = "draft.counting";

/// Whether the last session ended while counting its input (its marker is there).
pub(crate) fn crashed_while_counting(data_dir: &Path) -> bool {
    data_dir.join(COUNTING_MARKER).exists()
}

enum Request {
    Count(String),
    /// Count with this model's vocabulary from now on.
    UseModel(PathBuf),
}

/// The loop's end of the counting worker.
pub struct CountWorker {
    requests: mpsc::Sender<Request>,
    /// Counts as they are ready: `None` when there is no counter for the model.
    pub counts: UnboundedReceiver<Option<InputTokens>>,
    /// The input's revision last looked at, and the text last sent, so an unchanged input is
    /// neither copied nor sent again.
    last_revision: Option<u64>,
    last_sent: Option<String>,
    /// The count last reported to `update` (`None` before the first report).
    reported: Option<Option<InputTokens>>,
    /// Text not to count until the input holds other text (a draft whose count crashed).
    held: Option<String>,
}

impl CountWorker {
    /// Starts the worker, counting with `model_path`'s vocabulary (loaded on the worker), with
    /// its marker in `data_dir` while a count is in flight.
    pub fn start(model_path: PathBuf, data_dir: &Path) -> Self {
        let marker = data_dir.join(COUNTING_MARKER);
        let (requests, inbox) = mpsc::channel();
        let (outbox, counts) = unbounded_channel();
        let spawned = std::thread::Builder::new()
            .name("token-count".into())
            // It hands the typed text to llama.cpp's tokenizer (see llama::runs).
            .stack_size(crate::llama::runs::TOKENIZER_STACK_BYTES)
            .spawn(move || work(model_path, &marker, inbox, outbox));
        if let Err(e) = spawned {
            // Without the worker the count stays unknown; the chat itself is unaffected.
            tracing::warn!(error = %e, "could not start the token counting thread");
        }
        Self {
            requests,
            counts,
            last_revision: None,
            last_sent: None,
            reported: None,
            held: None,
        }
    }

    /// Counts nothing while the input is `text` (an empty input is still counted): until the
    /// user edits it or sends it.
    pub(crate) fn hold(&mut self, text: String) {
        self.held = Some(text);
    }

    /// Asks for the count of the input at `revision` if it changed since the last request
    /// (cheap: a compare of revisions and, on a change, the text; the counting happens on the
    /// worker).
    pub(crate) fn request(&mut self, revision: u64, text: impl FnOnce() -> String) {
        if self.last_revision == Some(revision) {
            return;
        }
        self.last_revision = Some(revision);
        let input = text();
        if let Some(held) = &self.held {
            if *held == input {
                return;
            }
            if !input.is_empty() {
                self.held = None;
            }
        }
        if self.last_sent.as_deref() == Some(input.as_str()) {
            return;
        }
        self.last_sent = Some(input.clone());
        let _ = self.requests.send(Request::Count(input));
    }

    /// Counts with `path`'s vocabulary from now on (the current input is counted again).
    pub fn use_model(&mut self, path: PathBuf) {
        let _ = self.requests.send(Request::UseModel(path));
    }

    /// `Some(count)` when it differs from the count last reported.
    pub fn report(&mut self, tokens: Option<InputTokens>) -> Option<Option<InputTokens>> {
        if self.reported == Some(tokens) {
            return None;
        }
        self.reported = Some(tokens);
        Some(tokens)
    }
}

fn work(
    model_path: PathBuf,
    marker: &Path,
    inbox: mpsc::Receiver<Request>,
    outbox: UnboundedSender<Option<InputTokens>>,
) {
    let mut counter = TokenCounter::for_model(&model_path, None).ok();
    let mut latest: Option<String> = None;
    let mut counted: Option<(String, Option<usize>)> = None;
    while let Ok(first) = inbox.recv() {
        // Take everything queued: only the newest text matters.
        for request in std::iter::once(first).chain(inbox.try_iter()) {
            match request {
                Request::Count(text) => latest = Some(text),
                Request::UseModel(path) => {
                    counter = TokenCounter::for_model(&path, None).ok();
                    counted = None;
                }
            }
        }
        let Some(text) = latest.as_deref() else {
            continue;
        };
        let tokens = counter.as_ref().and_then(|counter| {
            let count = match &counted {
                Some((done, count)) if done == text => *count,
                _ => {
                    // The template trims the message, so the count does too.
                    let message = text.trim();
                    let marked = !message.is_empty()
                        && std::fs::write(marker, b"")
                            .inspect_err(|e| tracing::debug!(error = %e, "no counting marker"))
                            .is_ok();
                    let count = counter.count(message);
                    if marked {
                        let _ = std::fs::remove_file(marker);
                    }
                    counted = Some((text.to_string(), count));
                    count
                }
            };
            Some((count?, counter.source()))
        });
        if outbox.send(tokens).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_arrive_for_the_latest_text_and_repeats_are_not_reported() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("tiny.gguf");
        let spec = crate::synth::SynthSpec::preset("tiny").unwrap();
        crate::synth::write_model(&model, &spec).unwrap();
        let mut worker = CountWorker::start(model, dir.path());
        for (revision, text) in [(1, "h"), (2, "he"), (3, "hel"), (4, "hello world")] {
            worker.request(revision, || text.to_string());
        }
        worker.request(4, || unreachable!("an unchanged revision is not read"));
        worker.request(5, || "hello world".to_string());
        let mut last = None;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            match worker.counts.try_recv() {
                Ok(tokens) => {
                    last = Some(tokens);
                    if worker.counts.is_empty() && last.flatten().is_some_and(|(n, _)| n > 1) {
                        break;
                    }
                }
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
            }
        }
        let (count, source) = last.flatten().expect("a count for the latest text");
        assert!(count >= 2, "{count}");
        assert_eq!(source, "model vocabulary");
        assert_eq!(
            worker.report(Some((count, source))),
            Some(Some((count, source)))
        );
        assert_eq!(worker.report(Some((count, source))), None);
        assert!(
            !crashed_while_counting(dir.path()),
            "the marker goes with the count"
        );
    }

    #[test]
    fn a_held_draft_is_not_counted_until_the_input_changes() {
        let dir = tempfile::tempdir().unwrap();
        let mut worker = CountWorker::start(dir.path().join("none.gguf"), dir.path());
        worker.hold("crashed".into());
        // The empty input before the draft is pasted back is counted; the draft is not.
        worker.request(1, String::new);
        worker.request(2, || "crashed".into());
        assert_eq!(worker.last_sent.as_deref(), Some(""));
        // An edit ends the hold: the edited text, and the draft again after an undo, count.
        worker.request(3, || "crashed!".into());
        assert_eq!(worker.last_sent.as_deref(), Some("crashed!"));
        worker.request(4, || "crashed".into());
        assert_eq!(worker.last_sent.as_deref(), Some("crashed"));
    }
}
