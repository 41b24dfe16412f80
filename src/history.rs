//! Saved conversations: the on-disk format (one pretty-printed JSON file per conversation in
//! `<data dir>/history`, named `<id>.json`), saving, loading, listing, finding by id prefix,
//! and exporting to Markdown or JSON. It also owns `write_private`, the one atomic,
//! user-only file write that every user file (history and exports) goes through.
//!
//! A chat people keep open all day must never lose a finished turn, so a write goes to a
//! uniquely named temp file that is fsynced and then renamed over the target: a crash or a
//! full disk leaves either the old file or the new one, never half of one. A file that cannot
//! be read is never overwritten; `list` moves it aside under a new name and says so.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};

use crate::engine::{SamplingParams, StopReason};
use crate::fsx::{read_regular, write_private, ReadError, WriteError};
use crate::ids::{unix_s, utc_minute, utc_parts};
use crate::metrics::TurnSummary;

/// The version of the on-disk format this build writes. Version 2 added, per turn, the model's
/// path and fingerprint and the settings and system prompt it was generated with, and keeps
/// each turn's own finish time (version 1 overwrote them all with the time of the last save).
pub(crate) const FORMAT_VERSION: u32 = 2;
/// The oldest format this build still reads: a version 1 file loads with the fields it lacks
/// unknown (`None`), and is saved back in the current format.
pub(crate) const OLDEST_FORMAT_VERSION: u32 = 1;

/// The longest title `list` shows, in characters, including the ellipsis.
const TITLE_MAX_CHARS: usize = 60;
/// The longest model name `format_list` shows, in characters, including the ellipsis.
const MODEL_MAX_CHARS: usize = 32;
/// How many ids an error message lists before it says "and N more".
const CANDIDATES_SHOWN: usize = 10;
/// The largest file read as a saved conversation: larger is refused, never read into memory.
pub const FILE_MAX_BYTES: u64 = 256 * 1024 * 1024;
const WHAT: &str = "a saved conversation";
/// The longest id `save` accepts; ids become file names, which most file systems cap at 255.
const ID_MAX_BYTES: usize = 128;

/// One conversation as saved on disk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedConversation {
    pub version: u32,
    /// `YYYYMMDD-HHMMSS-xxxx` (UTC, then 4 hex digits): sorts by creation time.
    pub id: String,
    pub created_unix_s: u64,
    pub updated_unix_s: u64,
    /// File name of the model used last.
    pub model_file: Option<String>,
    /// The model used last, what `--resume` reloads (`None` in version 1 files).
    #[serde(default, deserialize_with = "lenient")]
    pub model: Option<SavedModel>,
    /// The system prompt in force when the conversation was saved (the next turn's); each
    /// turn keeps the one it was generated with in its `settings`.
    pub system_prompt: Option<String>,
    pub turns: Vec<SavedTurn>,
}

/// The model file a turn ran on: where it was and what it held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedModel {
    /// As loaded; the chat saves it absolute. For a server's model, the server's URL.
    pub path: PathBuf,
    /// `engine::fingerprint` of the file when it was loaded (`None` when it could not be
    /// read, or for a server's model).
    #[serde(default)]
    pub fingerprint: Option<String>,
}

impl SavedModel {
    /// Whether this is the model `info` describes: by fingerprint when both are known, else
    /// by path.
    pub fn is(&self, info: &crate::engine::ModelInfo) -> bool {
        match (self.fingerprint.as_deref(), fingerprint_of(info)) {
            (Some(saved), Some(loaded)) => saved == loaded,
            _ => self.path == info.path,
        }
    }

    /// The identity of the model `info` describes.
    pub fn of(info: &crate::engine::ModelInfo) -> Self {
        Self {
            path: info.path.clone(),
            fingerprint: fingerprint_of(info).map(str::to_string),
        }
    }
}

fn fingerprint_of(info: &crate::engine::ModelInfo) -> Option<&str> {
    Some(info.fingerprint.as_str()).filter(|f| !f.is_empty())
}

/// What a turn was generated with, so that it can be repeated (A/B) and exported as it ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnSettings {
    pub sampling: SamplingParams,
    pub max_tokens: u32,
    #[serde(default)]
    pub ignore_eos: bool,
    /// The system prompt in force for this turn (`None`: none).
    #[serde(default)]
    pub system_prompt: Option<String>,
}

impl SavedConversation {
    /// An empty conversation in the current format.
    pub fn new(id: String, now_unix_s: u64) -> Self {
        Self {
            version: FORMAT_VERSION,
            id,
            created_unix_s: now_unix_s,
            updated_unix_s: now_unix_s,
            model_file: None,
            model: None,
            system_prompt: None,
            turns: Vec::new(),
        }
    }
}

/// One finished (or cancelled) exchange.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedTurn {
    pub user: String,
    /// The answer (without the thinking of a model that thought first).
    pub assistant: String,
    /// The thinking's text of a model that thought before it answered (its figures are in
    /// `metrics.thinking`); absent for a turn without thinking and in older files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    pub stop_reason: StopReason,
    /// Read leniently: `TurnSummary` belongs to `metrics` and will grow fields, and a non-finite
    /// figure is written as `null`. Either would otherwise make a whole conversation unreadable
    /// for the sake of its statistics, so metrics that no longer parse load as `None`.
    #[serde(default, deserialize_with = "lenient")]
    pub metrics: Option<TurnSummary>,
    pub model_file: Option<String>,
    /// The model it ran on (`None` in version 1 files, which kept only the file name).
    #[serde(default, deserialize_with = "lenient")]
    pub model: Option<SavedModel>,
    /// When this turn finished (in version 1 files, the time of the conversation's last save).
    pub finished_unix_s: u64,
    /// The sampling settings and system prompt it was generated with (`None` in version 1
    /// files). Read leniently, as `metrics`: the settings grow fields.
    #[serde(default, deserialize_with = "lenient")]
    pub settings: Option<TurnSettings>,
    /// The answer scored against the reference model (`--ref`, `/ref`): per token and per
    /// answer (absent when none was set). Read leniently, as `metrics`.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub quality: Option<crate::metrics::quality::AnswerScore>,
    /// The answer's own confidence token by token (asked for by the chat's `Alt+K` without a
    /// reference; absent when not). Read leniently, as `metrics`.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub confidence: Option<Vec<crate::metrics::quality::TokenConfidence>>,
}

/// A field that no longer parses loads as `None`, never making the whole file unreadable.
fn lenient<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    let value = Option::<serde_json::Value>::deserialize(deserializer)?;
    Ok(value.and_then(|v| serde_json::from_value(v).ok()))
}

/// One line of `tokscope history`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationEntry {
    pub id: String,
    pub path: PathBuf,
    pub updated_unix_s: u64,
    pub turns: usize,
    /// The first user message on one line, at most 60 characters (ending in `…` when cut).
    pub title: String,
    pub model_file: Option<String>,
}

/// What `list` found.
#[derive(Debug, Default)]
pub struct ListOutcome {
    /// Readable conversations, newest first.
    pub entries: Vec<ConversationEntry>,
    /// Unreadable files moved aside this time: (original path, new path). The UI should tell
    /// the user; the files are kept, not deleted.
    pub set_aside: Vec<(PathBuf, PathBuf)>,
    /// Files left in place and not listed, with why: saved by a newer tokscope (moving them
    /// would hide them from that version too), unreadable for an I/O reason, or unreadable
    /// and impossible to move aside.
    pub skipped: Vec<(PathBuf, String)>,
    /// Temp files left by a save that was killed, removed this time.
    pub removed_temps: Vec<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// A save that failed: fsx's error, as it says it.
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("could not read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("could not list saved conversations in {dir}")]
    ListDir {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The file is kept as it is; `list` moves such files aside.
    #[error("{path} is not a readable saved conversation: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error(
        "{id:?} is not a valid conversation id: use letters, digits, '-' and '_' (at most {} \
         bytes)",
        ID_MAX_BYTES
    )]
    InvalidId { id: String },
    #[error("no saved conversation matches {query:?} in {dir}{}", known_ids(.known))]
    NotFound {
        query: String,
        dir: PathBuf,
        /// The ids that do exist, newest first.
        known: Vec<String>,
    },
    #[error(
        "{query:?} matches {} saved conversations: {}; type more of the id",
        .candidates.len(),
        id_list(.candidates)
    )]
    Ambiguous {
        query: String,
        candidates: Vec<String>,
    },
    #[error("could not encode the conversation as JSON")]
    Encode(#[source] serde_json::Error),
    /// Not a regular file, or too large to be one.
    #[error(transparent)]
    Refused(ReadError),
}

impl From<ReadError> for HistoryError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Io { path, source } => HistoryError::Read { path, source },
            refused => HistoryError::Refused(refused),
        }
    }
}

fn known_ids(known: &[String]) -> String {
    if known.is_empty() {
        " (there are none yet)".to_string()
    } else {
        format!("; saved ids: {} (see `tokscope history`)", id_list(known))
    }
}

fn id_list(ids: &[String]) -> String {
    let mut text = ids[..ids.len().min(CANDIDATES_SHOWN)].join(", ");
    if ids.len() > CANDIDATES_SHOWN {
        text.push_str(&format!(" and {} more", ids.len() - CANDIDATES_SHOWN));
    }
    text
}

/// Where conversations are kept inside the data dir.
pub(crate) fn history_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("history")
}

fn iso_date(unix_s: u64) -> String {
    let ((y, m, d), _) = utc_parts(unix_s);
    format!("{y:04}-{m:02}-{d:02}")
}

/// "1 turn", "3 turns".
fn turns(n: usize) -> String {
    if n == 1 {
        "1 turn".to_string()
    } else {
        format!("{n} turns")
    }
}

/// Ids become file names: nothing that could leave the directory or hide the file.
fn is_valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= ID_MAX_BYTES
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Saves `conv` as `dir/<id>.json` (atomically, readable by the user only) and returns the path.
pub fn save(dir: &Path, conv: &SavedConversation) -> Result<PathBuf, HistoryError> {
    if !is_valid_id(&conv.id) {
        return Err(HistoryError::InvalidId {
            id: conv.id.clone(),
        });
    }
    let path = dir.join(format!("{}.json", conv.id));
    write_private(&path, &file_bytes(conv, &conv.id)?)?;
    Ok(path)
}

/// `conv` as its file holds it under `id`: pretty JSON and a newline. The struct's shape is this
/// build's format, whatever number the caller left in it.
fn file_bytes(conv: &SavedConversation, id: &str) -> Result<Vec<u8>, HistoryError> {
    let on_disk = SavedConversation {
        version: FORMAT_VERSION,
        id: id.to_string(),
        ..conv.clone()
    };
    let mut json = serde_json::to_vec_pretty(&on_disk).map_err(HistoryError::Encode)?;
    json.push(b'\n');
    Ok(json)
}

/// Where the chat keeps the conversation with its answer in flight, one file per chat
/// process (`<pid>-<id>.json`), written as the answer streams and removed when it ends.
pub(crate) fn in_flight_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("in-flight")
}

/// The in-flight file of this process for conversation `id`.
pub(crate) fn in_flight_path(data_dir: &Path, id: &str) -> PathBuf {
    in_flight_dir(data_dir).join(format!("{}-{id}.json", std::process::id()))
}

/// Answers that were streaming when their chat process ended without finishing them (a crash
/// llama.cpp brought, SIGBUS from a truncated model, a kill): each in-flight file of a process
/// that no longer runs is saved into the history dir as its conversation, the answer so far as
/// a stopped turn, and removed. Returns a notice per recovered conversation. A file that does
/// not read as a conversation is left where it is and named.
pub fn recover_in_flight(data_dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(in_flight_dir(data_dir)) else {
        return Vec::new();
    };
    let mut notices = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(pid) = name.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        if pid <= 0 || process_runs(pid) || !name.ends_with(".json") {
            continue;
        }
        let recovered = load(&path).and_then(|conv| {
            let turn = conv.turns.last().map_or(0, |t| t.assistant.chars().count());
            save(&history_dir(data_dir), &conv).map(|_| (conv.id, turn))
        });
        match recovered {
            Ok((id, chars)) => {
                let _ = std::fs::remove_file(&path);
                notices.push(format!(
                    "the answer in flight when the last chat ended ({chars} characters) is saved \
                     as a stopped turn of conversation {id}: tokscope chat --resume {id}"
                ));
            }
            Err(e) => notices.push(format!(
                "an answer in flight from an earlier chat could not be recovered from {}: {e}",
                path.display()
            )),
        }
    }
    notices
}

/// Whether a process with this id runs (Linux's `/proc`; elsewhere only this process counts).
fn process_runs(pid: i32) -> bool {
    let proc = Path::new("/proc");
    if proc.join("self").exists() {
        proc.join(pid.to_string()).exists()
    } else {
        u32::try_from(pid).is_ok_and(|p| p == std::process::id())
    }
}

/// Removes the temp files a killed save left in the history dir (older than a minute, of
/// `fsx`'s naming pattern only), logging each; returns them.
pub fn remove_stale_temps(dir: &Path) -> Vec<PathBuf> {
    let removed = crate::fsx::remove_stale_temps(dir, crate::fsx::STALE_TEMP_AGE);
    for path in &removed {
        tracing::warn!(path = %path.display(), "removed a temp file left by an interrupted save");
    }
    removed
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}

/// A conversation read back to be continued: what `--resume` loads.
#[derive(Debug, Clone)]
pub struct Resumed {
    /// The conversation, its id set to the file it will be saved to.
    pub conversation: SavedConversation,
    /// The file it was read from.
    pub path: PathBuf,
    /// The id inside the file, when the file's name says otherwise (a copy or a renamed file):
    /// the conversation continues under the file's name (or a new id), never the inner one.
    pub inner_id: Option<String>,
    /// The digest of the file as read, when saves go back to that same file.
    seen: Option<[u8; 32]>,
}

impl Resumed {
    /// "resumed ID (N turns)".
    pub fn resumed_notice(&self) -> String {
        let conv = &self.conversation;
        format!("resumed {} ({})", conv.id, turns(conv.turns.len()))
    }

    /// What a file saved by an older tokscope lacks, if it is one.
    pub fn format_notice(&self) -> Option<String> {
        let conv = &self.conversation;
        (conv.version < FORMAT_VERSION && !conv.turns.is_empty()).then(|| {
            format!(
                "its file is of format {} (an older tokscope), which kept no turn's own finish \
                 time, settings or system prompt; it is saved as format {FORMAT_VERSION} from \
                 the next turn",
                conv.version
            )
        })
    }

    /// What to tell the user on resuming, if anything (a copy becomes its own conversation).
    pub fn notice(&self) -> Option<String> {
        let inner = self.inner_id.as_ref()?;
        let file = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Some(if self.seen.is_some() {
            format!(
                "{file} holds a copy of conversation {inner}: it continues as {}, saved to \
                 {file}; the original is untouched",
                self.conversation.id
            )
        } else {
            format!(
                "{file} holds a copy of conversation {inner} under a name that cannot be an id: \
                 it continues as a new conversation {}; {file} and the original are untouched",
                self.conversation.id
            )
        })
    }
}

/// Loads `path` to be continued. The file a conversation is loaded from is the one it saves to:
/// when the id inside differs from the file's name (a copy), the conversation takes the file's
/// name as its id (or a new id when the name cannot be one), so the original is never
/// overwritten.
pub fn resume(path: &Path, now: SystemTime) -> Result<Resumed, HistoryError> {
    let (bytes, mut conversation) = read(path)?;
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_string();
    let mut seen = Some(digest(&bytes));
    let mut inner_id = None;
    if conversation.id != stem {
        inner_id = Some(conversation.id.clone());
        if is_valid_id(&stem) && path.extension().is_some_and(|e| e == "json") {
            conversation.id = stem;
        } else {
            conversation.id = crate::ids::new_id(now);
            seen = None;
        }
    }
    Ok(Resumed {
        conversation,
        path: path.to_path_buf(),
        inner_id,
        seen,
    })
}

/// What a resumed conversation continues on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResumeModel {
    /// The model file it last ran on: still there, and unchanged.
    Saved(PathBuf),
    /// The default model; `why` says why not the one it ran on (`None`: none was saved, as
    /// in a conversation without turns).
    Default { why: Option<String> },
}

/// Which model a resumed conversation continues on: the file it last ran on, when that file
/// is still there and its fingerprint is the one saved; otherwise the default, saying why.
pub fn resume_model(conv: &SavedConversation) -> ResumeModel {
    let default = |why: String| ResumeModel::Default { why: Some(why) };
    let Some(saved) = &conv.model else {
        return ResumeModel::Default {
            why: conv.model_file.as_ref().map(|file| {
                format!("it ran on {file}, but an older tokscope saved only the file's name")
            }),
        };
    };
    let shown = saved.path.display();
    if saved
        .path
        .to_str()
        .is_some_and(|s| s.starts_with("http://") || s.starts_with("https://"))
    {
        return default(format!("it ran on the server {shown}"));
    }
    let problem = match fs::metadata(&saved.path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => "is gone".to_string(),
        Err(e) => format!("cannot be read ({e})"),
        Ok(meta) if !meta.is_file() => "is not a file".to_string(),
        Ok(_) => match (&saved.fingerprint, crate::engine::fingerprint(&saved.path)) {
            (_, Err(e)) => format!("cannot be read ({e})"),
            (Some(was), Ok(now)) if *was != now => {
                format!("has changed since (fingerprint {was}, now {now})")
            }
            _ => return ResumeModel::Saved(saved.path.clone()),
        },
    };
    default(format!("the model it ran on, {shown}, {problem}"))
}

/// Where one chat's saves go and what it last saw there, so that two chats on one conversation
/// never drop each other's turns. Each save, under a lock on the history dir, compares the
/// file with what this chat last read or wrote; when another writer changed it meanwhile, this
/// chat's conversation is saved as a fork (a new id) and continues there.
#[derive(Debug)]
pub struct SaveSlot {
    dir: PathBuf,
    /// The id the chat gives the conversation (what it asks to save).
    chat_id: Option<String>,
    /// The id, and file name, saves go to.
    file_id: String,
    /// The digest of the file as this chat last read or wrote it.
    seen: Option<[u8; 32]>,
}

/// What a save did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaveOutcome {
    pub path: PathBuf,
    /// Saved as a fork: the id of the conversation another writer changed, and the new id.
    pub forked: Option<(String, String)>,
}

impl SaveOutcome {
    /// The notice for a fork, if this save was one.
    pub fn notice(&self) -> Option<String> {
        let (from, to) = self.forked.as_ref()?;
        Some(format!(
            "conversation {from} was changed by another tokscope since this chat read it: this \
             chat's turns are saved as a new conversation {to} (both are kept; see `tokscope \
             history`)"
        ))
    }
}

impl SaveSlot {
    /// Saves into `dir` under each conversation's own id.
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
            chat_id: None,
            file_id: String::new(),
            seen: None,
        }
    }

    /// Saves a resumed conversation back to the file it came from (see `resume`).
    pub fn resumed(dir: &Path, resumed: &Resumed) -> Self {
        Self {
            dir: dir.to_path_buf(),
            chat_id: Some(resumed.conversation.id.clone()),
            file_id: resumed.conversation.id.clone(),
            seen: resumed.seen,
        }
    }

    /// Saves `conv` (atomically, user-only), as a fork when another writer changed its file
    /// since this chat last read or wrote it.
    pub fn save(
        &mut self,
        conv: &SavedConversation,
        now: SystemTime,
    ) -> Result<SaveOutcome, HistoryError> {
        if self.chat_id.as_deref() != Some(conv.id.as_str()) {
            // A new conversation in this chat (Ctrl+N): its own file from now on.
            self.chat_id = Some(conv.id.clone());
            self.file_id = conv.id.clone();
            self.seen = None;
        }
        if !is_valid_id(&self.file_id) {
            return Err(HistoryError::InvalidId {
                id: self.file_id.clone(),
            });
        }
        let write_error = |e| HistoryError::Write(WriteError::at(&self.dir, e));
        crate::fsx::ensure_private_dir(&self.dir).map_err(write_error)?;
        // One save at a time in this dir, across processes: check and write are one step.
        let _lock = fs::File::open(&self.dir)
            .and_then(crate::fsx::lock_exclusive)
            .map_err(write_error)?;
        let mut forked = None;
        if self.changed_by_another()? {
            let from = self.file_id.clone();
            self.file_id = self.unused_id(now);
            self.seen = None;
            forked = Some((from, self.file_id.clone()));
        }
        let json = file_bytes(conv, &self.file_id)?;
        let path = self.path();
        write_private(&path, &json)?;
        self.seen = Some(digest(&json));
        Ok(SaveOutcome { path, forked })
    }

    fn path(&self) -> PathBuf {
        self.dir.join(format!("{}.json", self.file_id))
    }

    /// Whether the file holds something this chat did not read or write. A file that is gone
    /// is not a conflict (saving recreates it); one that exists when this chat has never seen
    /// it is (another conversation with the same id).
    fn changed_by_another(&self) -> Result<bool, HistoryError> {
        let path = self.path();
        match read_regular(&path, FILE_MAX_BYTES, WHAT) {
            Ok(bytes) => Ok(self.seen != Some(digest(&bytes))),
            Err(e) if e.is_not_found() => Ok(false),
            // Something unreadable is there (a FIFO, a huge file): never replace it.
            Err(ReadError::NotRegular { .. } | ReadError::TooLarge { .. }) => Ok(true),
            Err(e) => Err(e.into()),
        }
    }

    fn unused_id(&self, now: SystemTime) -> String {
        loop {
            let id = crate::ids::new_id(now);
            if fs::symlink_metadata(self.dir.join(format!("{id}.json"))).is_err() {
                return id;
            }
        }
    }
}

/// Loads one conversation. A file that is not a valid conversation of this format version is
/// `Corrupt` and is left untouched.
pub fn load(path: &Path) -> Result<SavedConversation, HistoryError> {
    read(path).map(|(_, conv)| conv)
}

/// `path`'s bytes as read, and the conversation they hold (`Corrupt` when they hold none).
fn read(path: &Path) -> Result<(Vec<u8>, SavedConversation), HistoryError> {
    let bytes = read_regular(path, FILE_MAX_BYTES, WHAT)?;
    let conv = parse(&bytes).map_err(|failure| HistoryError::Corrupt {
        path: path.to_path_buf(),
        reason: failure.reason,
    })?;
    Ok((bytes, conv))
}

struct ParseFailure {
    reason: String,
    /// Written by a newer tokscope: readable there, so never moved aside.
    newer_version: bool,
}

impl ParseFailure {
    fn corrupt(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            newer_version: false,
        }
    }
}

fn parse(bytes: &[u8]) -> Result<SavedConversation, ParseFailure> {
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| {
        ParseFailure::corrupt(if e.is_eof() {
            format!("the file is truncated ({e})")
        } else {
            format!("invalid JSON ({e})")
        })
    })?;
    let corrupt = |reason: &str| Err(ParseFailure::corrupt(reason));
    let Some(object) = value.as_object() else {
        return corrupt("expected a JSON object with a conversation");
    };
    match object.get("version").map(serde_json::Value::as_u64) {
        None => return corrupt("no format version (\"version\" is missing)"),
        Some(None) => return corrupt("the format version is not a whole number"),
        Some(Some(found))
            if !(u64::from(OLDEST_FORMAT_VERSION)..=u64::from(FORMAT_VERSION)).contains(&found) =>
        {
            let newer_version = found > u64::from(FORMAT_VERSION);
            let advice = if newer_version {
                "; it was saved by a newer tokscope, upgrade to open it"
            } else {
                ""
            };
            return Err(ParseFailure {
                reason: format!(
                    "it has format version {found}, this build of tokscope reads versions \
                     {OLDEST_FORMAT_VERSION} to {FORMAT_VERSION}{advice}"
                ),
                newer_version,
            });
        }
        Some(Some(_)) => {}
    }
    let conv: SavedConversation = serde_json::from_value(value)
        .map_err(|e| ParseFailure::corrupt(format!("missing or invalid field ({e})")))?;
    if !is_valid_id(&conv.id) {
        // Saving it again would fail on every turn; better to say so now.
        return corrupt(&format!(
            "its id {:?} is not a valid conversation id",
            conv.id
        ));
    }
    Ok(conv)
}

/// `*.json` files in `dir` that are not hidden (temp files are hidden). A missing dir is empty.
fn conversation_files(dir: &Path) -> Result<Vec<PathBuf>, HistoryError> {
    let list_error = |source| HistoryError::ListDir {
        dir: dir.to_path_buf(),
        source,
    };
    let read_dir = match fs::read_dir(dir) {
        Ok(read_dir) => read_dir,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(list_error(source)),
    };
    let mut files = Vec::new();
    for entry in read_dir {
        let path = entry.map_err(list_error)?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if !name.starts_with('.') && name.ends_with(".json") && name.len() > ".json".len() {
            files.push(path);
        }
    }
    Ok(files)
}

/// Lists saved conversations, newest first. Files that are not readable conversations are
/// moved aside (`<name>.corrupt-<unix time>`) and reported; the rest still list.
pub fn list(dir: &Path) -> Result<ListOutcome, HistoryError> {
    let mut outcome = ListOutcome {
        removed_temps: remove_stale_temps(dir),
        ..ListOutcome::default()
    };
    let now_unix_s = unix_s(SystemTime::now());
    for path in conversation_files(dir)? {
        let bytes = match read_regular(&path, FILE_MAX_BYTES, WHAT) {
            Ok(bytes) => bytes,
            // Another tokscope moved it aside or replaced it between listing and reading.
            Err(e) if e.is_not_found() => continue,
            Err(ReadError::Io { source, .. }) => {
                outcome
                    .skipped
                    .push((path, format!("could not be read ({source})")));
                continue;
            }
            // A FIFO, a device node or a huge file: left alone, never read.
            Err(e) => {
                outcome.skipped.push((path, e.to_string()));
                continue;
            }
        };
        match parse(&bytes) {
            Ok(conv) => outcome.entries.push(entry_for(path, &conv)),
            Err(failure) if failure.newer_version => outcome.skipped.push((path, failure.reason)),
            Err(failure) => match set_aside(&path, &bytes, now_unix_s) {
                Ok(Some(new_path)) => {
                    tracing::warn!(
                        original = %path.display(),
                        moved_to = %new_path.display(),
                        reason = %failure.reason,
                        "set aside an unreadable saved conversation"
                    );
                    outcome.set_aside.push((path, new_path));
                }
                Ok(None) => {}
                Err(e) => outcome.skipped.push((
                    path,
                    format!("{}; it could not be moved aside ({e})", failure.reason),
                )),
            },
        }
    }
    outcome.entries.sort_by(|a, b| {
        b.updated_unix_s
            .cmp(&a.updated_unix_s)
            .then_with(|| b.id.cmp(&a.id))
    });
    Ok(outcome)
}

/// Renames an unreadable file to `<name>.corrupt-<unix time>[-n]`, never over an existing file.
/// `Ok(None)` when the file is gone or has meanwhile been replaced by something else (another
/// tokscope saved or moved it), in which case nothing is touched.
fn set_aside(path: &Path, bytes_read: &[u8], now_unix_s: u64) -> io::Result<Option<PathBuf>> {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the file name is not UTF-8",
        ));
    };
    for target in crate::fsx::aside_names(path, name, "corrupt", now_unix_s) {
        // A hard link fails instead of replacing an existing target, which a rename would not.
        match fs::hard_link(path, &target) {
            Ok(()) => {
                // The link holds whatever was at `path` at that moment; if a concurrent save
                // replaced the corrupt file, keep the good one where it is.
                if fs::read(&target).ok().as_deref() != Some(bytes_read) {
                    let _ = fs::remove_file(&target);
                    return Ok(None);
                }
                return match fs::remove_file(path) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => {
                        let _ = fs::remove_file(&target);
                        Err(e)
                    }
                    _ => Ok(Some(target)),
                };
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            // File systems without hard links: check, then rename (a small race, no loss).
            Err(_) => {
                if fs::symlink_metadata(&target).is_ok() {
                    continue;
                }
                return match fs::rename(path, &target) {
                    Ok(()) => Ok(Some(target)),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(e),
                };
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "too many files set aside with this name already",
    ))
}

fn entry_for(path: PathBuf, conv: &SavedConversation) -> ConversationEntry {
    let title = match conv.turns.first() {
        Some(turn) => {
            let line = crate::text::collapse_spaces(&turn.user);
            if line.is_empty() {
                "(empty message)".to_string()
            } else {
                crate::text::ellipsis(&line, TITLE_MAX_CHARS)
            }
        }
        None => "(no turns yet)".to_string(),
    };
    // The file's name is what `--resume` finds it by, and the id it saves under (a copy's inner
    // id is its original's).
    let id = path
        .file_stem()
        .and_then(|s| s.to_str())
        .map_or_else(|| conv.id.clone(), str::to_string);
    ConversationEntry {
        id,
        path,
        updated_unix_s: conv.updated_unix_s,
        turns: conv.turns.len(),
        title,
        model_file: conv.model_file.clone(),
    }
}

/// The path of the conversation whose id is `id_or_prefix` or starts with it (an exact id wins
/// over longer ids it is a prefix of).
pub(crate) fn find(dir: &Path, id_or_prefix: &str) -> Result<PathBuf, HistoryError> {
    let query = id_or_prefix.trim();
    let mut ids: Vec<(String, PathBuf)> = conversation_files(dir)?
        .into_iter()
        .filter_map(|path| {
            let stem = path.file_stem()?.to_str()?.to_string();
            Some((stem, path))
        })
        .collect();
    // Ids start with their creation time, so descending order is newest first.
    ids.sort_by(|a, b| b.0.cmp(&a.0));
    if !query.is_empty() {
        if let Some((_, path)) = ids.iter().find(|(id, _)| id == query) {
            return Ok(path.clone());
        }
        let matches: Vec<_> = ids.iter().filter(|(id, _)| id.starts_with(query)).collect();
        match matches.as_slice() {
            [] => {}
            [(_, path)] => return Ok(path.clone()),
            several => {
                return Err(HistoryError::Ambiguous {
                    query: query.to_string(),
                    candidates: several.iter().map(|(id, _)| id.clone()).collect(),
                })
            }
        }
    }
    Err(HistoryError::NotFound {
        query: query.to_string(),
        dir: dir.to_path_buf(),
        known: ids.into_iter().map(|(id, _)| id).collect(),
    })
}

/// The most recently updated readable conversation, if any. Unlike `list` it moves nothing.
pub(crate) fn latest(dir: &Path) -> Result<Option<PathBuf>, HistoryError> {
    let newest = conversation_files(dir)?
        .into_iter()
        .filter_map(|path| {
            let conv = parse(&read_regular(&path, FILE_MAX_BYTES, WHAT).ok()?).ok()?;
            Some(((conv.updated_unix_s, conv.id), path))
        })
        // The greatest (updated, id), the first found among equals.
        .min_by(|a, b| b.0.cmp(&a.0));
    Ok(newest.map(|(_, path)| path))
}

/// "3 min ago" for the last week, then the UTC date.
fn relative_time(then_unix_s: u64, now_unix_s: u64) -> String {
    // A little clock skew between machines or processes still reads as "just now".
    if then_unix_s > now_unix_s.saturating_add(60) {
        return iso_date(then_unix_s);
    }
    let ago_s = now_unix_s.saturating_sub(then_unix_s);
    match ago_s {
        0..60 => "just now".to_string(),
        60..3600 => format!("{} min ago", ago_s / 60),
        3600..86_400 => format!("{} h ago", ago_s / 3600),
        86_400..172_800 => "1 day ago".to_string(),
        172_800..604_800 => format!("{} days ago", ago_s / 86_400),
        _ => iso_date(then_unix_s),
    }
}

/// The table `tokscope history` prints.
pub(crate) fn format_list(entries: &[ConversationEntry], now_unix_s: u64) -> String {
    if entries.is_empty() {
        return "No saved conversations yet: each finished turn of a chat is saved here.\n"
            .to_string();
    }
    let rows: Vec<[String; 5]> = entries
        .iter()
        .map(|e| {
            [
                e.id.clone(),
                relative_time(e.updated_unix_s, now_unix_s),
                e.turns.to_string(),
                e.model_file
                    .as_deref()
                    .map(|m| {
                        crate::text::ellipsis(&crate::text::collapse_spaces(m), MODEL_MAX_CHARS)
                    })
                    .unwrap_or_else(|| "—".to_string()),
                e.title.clone(),
            ]
        })
        .collect();
    let header = ["ID", "UPDATED", "TURNS", "MODEL", "TITLE"];
    let width = |column: usize| {
        rows.iter()
            .map(|row| row[column].chars().count())
            .chain(std::iter::once(header[column].chars().count()))
            .max()
            .unwrap_or(0)
    };
    let (w_id, w_updated, w_turns, w_model) = (width(0), width(1), width(2), width(3));
    let mut out = String::new();
    for row in std::iter::once(header.map(str::to_string)).chain(rows) {
        let [id, updated, turns, model, title] = row;
        let line = format!(
            "{id:<w_id$}  {updated:<w_updated$}  {turns:>w_turns$}  {model:<w_model$}  {title}"
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// An `f32` setting as the user typed it (0.8, not 0.800000011920929).
pub(crate) fn round_setting(v: f32) -> f64 {
    v.to_string().parse().unwrap_or(f64::from(v))
}

/// The sampling settings on one line, as exports write them.
fn sampling_line(s: &TurnSettings) -> String {
    let p = &s.sampling;
    format!(
        "temperature {} · top_k {} · top_p {} · min_p {} · repeat_penalty {} (last {}) · seed {} \
         · max {} tokens{}",
        round_setting(p.temperature),
        p.top_k,
        round_setting(p.top_p),
        round_setting(p.min_p),
        round_setting(p.repeat_penalty),
        p.repeat_last_n,
        p.seed,
        s.max_tokens,
        if s.ignore_eos { " · ignore EOS" } else { "" }
    )
}

fn same_sampling(a: &TurnSettings, b: &TurnSettings) -> bool {
    a.sampling == b.sampling && a.max_tokens == b.max_tokens && a.ignore_eos == b.ignore_eos
}

fn system_prompt_section(out: &mut String, system_prompt: Option<&str>, from_turn: Option<usize>) {
    let from = from_turn
        .map(|n| format!(" (from turn {n})"))
        .unwrap_or_default();
    match system_prompt.filter(|s| !s.is_empty()) {
        Some(text) => out.push_str(&format!(
            "## System prompt{from}\n\n{}\n\n",
            text.trim_end()
        )),
        None if from_turn.is_some() => out.push_str(&format!("*no system prompt{from}*\n\n")),
        None => {}
    }
}

/// A readable Markdown transcript with a one-line metrics summary after each answer. Each turn
/// is shown with the settings and system prompt it was generated with: the first turn's in the
/// header, and a line (or a section) before each turn where they changed. `current` holds the
/// settings in force now, shown for a conversation without turns, or one whose turns were saved
/// by an older tokscope that did not keep theirs.
pub(crate) fn export_markdown(conv: &SavedConversation, current: &TurnSettings) -> String {
    let mut out = format!("# Conversation {}\n\n", conv.id);
    let mut details = vec![format!("started {}", utc_minute(conv.created_unix_s))];
    if let Some(model) = &conv.model_file {
        details.push(format!("model {model}"));
    }
    details.push(turns(conv.turns.len()));
    out.push_str(&format!("*{}*\n\n", details.join(" · ")));
    // What the header says is in force; each turn that ran otherwise says so.
    let (line, mut in_force) = match conv.turns.first() {
        Some(SavedTurn {
            settings: Some(first),
            ..
        }) => (format!("sampling: {}", sampling_line(first)), first.clone()),
        Some(_) => (
            format!(
                "sampling now: {} (this file did not keep the settings of its older turns)",
                sampling_line(current)
            ),
            TurnSettings {
                system_prompt: conv.system_prompt.clone(),
                ..current.clone()
            },
        ),
        None => (
            format!("sampling: {}", sampling_line(current)),
            current.clone(),
        ),
    };
    out.push_str(&format!("*{line}*\n\n"));
    system_prompt_section(&mut out, in_force.system_prompt.as_deref(), None);
    let mut previous_model = conv.turns.first().and_then(|t| t.model_file.as_deref());
    for (i, turn) in conv.turns.iter().enumerate() {
        if let Some(settings) = turn.settings.as_ref().filter(|_| i > 0) {
            if !same_sampling(settings, &in_force) {
                out.push_str(&format!(
                    "*from turn {}: sampling: {}*\n\n",
                    i + 1,
                    sampling_line(settings)
                ));
            }
            if settings.system_prompt != in_force.system_prompt {
                system_prompt_section(&mut out, settings.system_prompt.as_deref(), Some(i + 1));
            }
            in_force = settings.clone();
        }
        let answer = Some(turn.assistant.trim_end()).filter(|a| !a.is_empty());
        out.push_str(&format!(
            "## You\n\n{}\n\n## Assistant\n\n{}{}\n\n",
            turn.user.trim_end(),
            thinking_quote(turn),
            answer.unwrap_or("*(no answer)*")
        ));
        let m = turn.metrics.as_ref();
        let mut summary = vec![
            format!("TTFT {} ms", crate::fmt::opt(m.and_then(|m| m.ttft_ms), 1)),
            format!(
                "decode {} tok/s",
                crate::fmt::opt(m.and_then(|m| m.decode_tok_per_s), 1)
            ),
            format!(
                "{} tokens",
                m.map_or_else(|| "—".to_string(), |m| m.tokens_generated.to_string())
            ),
            turn.stop_reason.as_str().to_string(),
        ];
        // Comparing models in one conversation is common; say where the model changed.
        if let Some(model) = turn.model_file.as_deref() {
            if Some(model) != previous_model {
                summary.push(format!("model {model}"));
            }
            previous_model = Some(model);
        }
        if let Some(th) = m.and_then(|m| m.thinking.as_ref()) {
            summary.push(thinking_line(th));
        }
        out.push_str(&format!("*{}*\n\n", summary.join(" · ")));
        if let Some(q) = &turn.quality {
            out.push_str(&format!(
                "*{}*\n\n",
                crate::metrics::quality::summary_line(q)
            ));
        }
        if let Some(c) = turn
            .confidence
            .as_deref()
            .and_then(crate::metrics::quality::AnswerConfidence::of)
        {
            out.push_str(&format!("*own confidence: {}*\n\n", c.line()));
        }
    }
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    out.push('\n');
    out
}

/// A turn's thinking as a quote before its answer (empty for a turn without thinking).
fn thinking_quote(turn: &SavedTurn) -> String {
    let Some(text) = turn.thinking.as_deref() else {
        return String::new();
    };
    let quoted: Vec<String> = text
        .trim()
        .lines()
        .map(|l| format!("> {l}").trim_end().to_string())
        .collect();
    format!("*thinking:*\n\n{}\n\n", quoted.join("\n"))
}

/// The thinking part of a turn's summary line (docs/metrics.md, "Thinking").
fn thinking_line(th: &crate::metrics::ThinkingSummary) -> String {
    if th.ended_while_thinking {
        return format!("ended while thinking ({} tokens)", th.thinking_tokens);
    }
    format!(
        "thinking {} tokens, {} ms · first answer token {} ms · answer {} tok/s",
        th.thinking_tokens,
        crate::fmt::opt(th.thinking_ms, 1),
        crate::fmt::opt(th.time_to_first_answer_ms, 1),
        crate::fmt::opt(th.answer_tok_per_s, 1),
    )
}

/// The conversation in its on-disk JSON form (pretty-printed).
#[cfg(test)]
pub(crate) fn export_json(conv: &SavedConversation) -> Result<String, HistoryError> {
    serde_json::to_string_pretty(conv).map_err(HistoryError::Encode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fsx::WriteProblem;
    use crate::metrics::LatencyStats;

    const NOW_UNIX_S: u64 = 1_796_028_312; // 2026-11-30 08:45:12 UTC

    fn summary() -> TurnSummary {
        TurnSummary {
            tokens_generated: 42,
            prompt_tokens: 10,
            cached_tokens: 0,
            prefilled_tokens: 10,
            queue_ms: 0.1,
            template_tokenize_ms: 0.5,
            prefill_ms: 12.0,
            prefill_tok_per_s: Some(833.3),
            first_sample_ms: Some(1.0),
            ttft_ms: Some(123.45),
            e2e_ms: 900.0,
            tpot_ms: Some(18.9),
            decode_tok_per_s: Some(52.76),
            itl: Some(LatencyStats {
                count: 41,
                mean_ms: 18.9,
                p50_ms: 18.0,
                p90_ms: 22.0,
                p99_ms: 30.0,
                max_ms: 31.0,
            }),
            decode_compute_ms: 700.0,
            decode_calls: 42,
            pass_gap: None,
            tokens_per_pass: None,
            thinking: None,
        }
    }

    fn conversation(id: &str, updated_unix_s: u64, first_user: &str) -> SavedConversation {
        let mut conv = SavedConversation::new(id.to_string(), updated_unix_s - 100);
        conv.updated_unix_s = updated_unix_s;
        conv.model_file = Some("tiny-q8_0.gguf".to_string());
        conv.system_prompt = Some("Be brief.".to_string());
        conv.turns.push(SavedTurn {
            user: first_user.to_string(),
            assistant: "Hello! How can I help?".to_string(),
            thinking: None,
            stop_reason: StopReason::EndOfGeneration,
            metrics: Some(summary()),
            model_file: Some("tiny-q8_0.gguf".to_string()),
            model: Some(tiny_model()),
            finished_unix_s: updated_unix_s - 50,
            settings: Some(settings(42, Some("Be brief."))),
            quality: None,
            confidence: None,
        });
        conv.turns.push(SavedTurn {
            user: "and again".to_string(),
            assistant: "Partial ans".to_string(),
            thinking: None,
            stop_reason: StopReason::Cancelled,
            metrics: None,
            model_file: Some("tiny-q8_0.gguf".to_string()),
            model: Some(tiny_model()),
            finished_unix_s: updated_unix_s,
            settings: Some(settings(42, Some("Be brief."))),
            quality: None,
            confidence: None,
        });
        conv.model = Some(tiny_model());
        conv
    }

    fn tiny_model() -> SavedModel {
        SavedModel {
            path: PathBuf::from("/models/tiny-q8_0.gguf"),
            fingerprint: Some("0123456789abcdef".to_string()),
        }
    }

    fn settings(seed: u32, system_prompt: Option<&str>) -> TurnSettings {
        TurnSettings {
            sampling: SamplingParams {
                seed,
                ..SamplingParams::default()
            },
            max_tokens: 128,
            ignore_eos: false,
            system_prompt: system_prompt.map(str::to_string),
        }
    }

    /// A conversation as tokscope 0.x saved it (format 1): one model file name, one system
    /// prompt, and every turn's `finished_unix_s` the time of the last save.
    const FORMAT_1_FILE: &str = include_str!("../tests/fixtures/history-format-1.json");

    #[test]
    fn a_format_1_file_opens_lists_resumes_and_is_saved_in_the_current_format() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("20261101-101500-ab12.json");
        fs::write(&path, FORMAT_1_FILE).unwrap();
        let conv = load(&path).unwrap();
        assert_eq!(conv.version, 1);
        assert_eq!(conv.turns.len(), 2);
        assert_eq!(conv.model, None);
        assert!(conv
            .turns
            .iter()
            .all(|t| t.model.is_none() && t.settings.is_none()));
        assert_eq!(conv.system_prompt.as_deref(), Some("Answer in French."));
        let outcome = list(tmp.path()).unwrap();
        assert_eq!(outcome.entries.len(), 1, "{outcome:?}");
        assert!(outcome.set_aside.is_empty() && outcome.skipped.is_empty());
        assert_eq!(latest(tmp.path()).unwrap(), Some(path.clone()));

        let resumed = resume(&path, SystemTime::now()).unwrap();
        assert_eq!(
            resumed.resumed_notice(),
            "resumed 20261101-101500-ab12 (2 turns)"
        );
        let format = resumed.format_notice().unwrap();
        assert!(format.contains("format 1"), "{format}");
        // It names the model it ran on and says why it cannot be reloaded.
        let ResumeModel::Default { why: Some(why) } = resume_model(&resumed.conversation) else {
            panic!("{:?}", resume_model(&resumed.conversation))
        };
        assert!(why.contains("llama3-8b-q4_k_m.gguf"), "{why}");
        assert!(why.contains("older tokscope"), "{why}");

        // Saved again, it is of the current format and has lost nothing.
        let mut slot = SaveSlot::resumed(tmp.path(), &resumed);
        slot.save(&resumed.conversation, SystemTime::now()).unwrap();
        let again = load(&path).unwrap();
        assert_eq!(again.version, FORMAT_VERSION);
        assert_eq!(again.turns, conv.turns);
        assert_eq!(again.system_prompt, conv.system_prompt);

        // The Markdown export of an old file says its settings are today's, not the turns'.
        let md = export_markdown(&conv, &settings(43, None));
        assert!(md.contains("*sampling now: "), "{md}");
        assert!(md.contains("did not keep the settings"), "{md}");
        assert!(md.contains("## System prompt\n\nAnswer in French."), "{md}");
    }

    #[test]
    fn each_turn_keeps_its_own_finish_time_model_settings_and_system_prompt() {
        let tmp = tempfile::tempdir().unwrap();
        let mut conv = conversation("kept", NOW_UNIX_S, "first");
        conv.turns[0].finished_unix_s = NOW_UNIX_S - 300;
        conv.turns[1].finished_unix_s = NOW_UNIX_S - 200;
        conv.turns[1].settings = Some(settings(43, Some("Now in French.")));
        conv.turns[1].model = Some(SavedModel {
            path: PathBuf::from("/models/other.gguf"),
            fingerprint: None,
        });
        let path = save(tmp.path(), &conv).unwrap();
        let back = load(&path).unwrap();
        assert_eq!(back, conv);
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"finished_unix_s\": 1796028012"), "{text}");
        assert!(text.contains("\"finished_unix_s\": 1796028112"), "{text}");
        assert!(text.contains("\"seed\": 43"), "{text}");
        assert!(text.contains("\"/models/other.gguf\""), "{text}");
    }

    #[test]
    fn the_markdown_export_shows_each_turn_s_settings_and_system_prompt_where_they_change() {
        let mut conv = conversation("md", NOW_UNIX_S, "first");
        let mut third = conv.turns[1].clone();
        third.user = "third".to_string();
        third.settings = Some(settings(43, Some("Now in French.")));
        conv.turns.push(third);
        let mut fourth = conv.turns[2].clone();
        fourth.user = "fourth".to_string();
        fourth.settings = Some(settings(43, None));
        conv.turns.push(fourth);
        conv.system_prompt = None;
        // What is in force now (seed 44) is not what the turns ran with.
        let md = export_markdown(&conv, &settings(44, None));
        assert!(md.contains("*sampling: temperature 0.8 · top_k 40 · top_p 0.95 · min_p 0.05 · repeat_penalty 1 (last 64) · seed 42 · max 128 tokens*"), "{md}");
        assert!(!md.contains("seed 44"), "{md}");
        let header_prompt = md.find("## System prompt\n\nBe brief.").unwrap();
        let turn_1 = md.find("## You\n\nfirst").unwrap();
        assert!(header_prompt < turn_1, "{md}");
        let changed = md.find("*from turn 3: sampling: ").unwrap();
        let french = md
            .find("## System prompt (from turn 3)\n\nNow in French.")
            .unwrap();
        let turn_2 = md.find("## You\n\nand again").unwrap();
        let turn_3 = md.find("## You\n\nthird").unwrap();
        assert!(
            turn_2 < changed && changed < french && french < turn_3,
            "{md}"
        );
        assert!(
            md[changed..].starts_with("*from turn 3: sampling: temperature 0.8"),
            "{md}"
        );
        assert_eq!(
            md.matches("seed 43").count(),
            1,
            "only where it changed: {md}"
        );
        let cleared = md.find("*no system prompt (from turn 4)*").unwrap();
        assert!(cleared < md.find("## You\n\nfourth").unwrap(), "{md}");
    }

    #[test]
    fn resume_reloads_the_saved_model_unless_it_is_gone_or_changed() {
        let tmp = tempfile::tempdir().unwrap();
        let model = tmp.path().join("tiny.gguf");
        let mut spec = crate::synth::SynthSpec::preset("tiny").unwrap();
        crate::synth::write_model(&model, &spec).unwrap();
        let mut conv = conversation("r", NOW_UNIX_S, "x");
        conv.model = Some(SavedModel {
            path: model.clone(),
            fingerprint: Some(crate::engine::fingerprint(&model).unwrap()),
        });
        assert_eq!(resume_model(&conv), ResumeModel::Saved(model.clone()));

        // Another model written over it: same path, another fingerprint.
        spec.seed += 1;
        crate::synth::write_model(&model, &spec).unwrap();
        let ResumeModel::Default { why: Some(why) } = resume_model(&conv) else {
            panic!("{:?}", resume_model(&conv))
        };
        assert!(why.contains("has changed since"), "{why}");
        assert!(why.contains(&model.display().to_string()), "{why}");

        fs::remove_file(&model).unwrap();
        let ResumeModel::Default { why: Some(why) } = resume_model(&conv) else {
            panic!("{:?}", resume_model(&conv))
        };
        assert!(why.ends_with("is gone"), "{why}");

        // A folder where the file was, and a server's model, are said too.
        fs::create_dir(&model).unwrap();
        assert!(
            matches!(resume_model(&conv), ResumeModel::Default { why: Some(w) } if w.contains("not a file"))
        );
        conv.model = Some(SavedModel {
            path: PathBuf::from("http://127.0.0.1:8080/v1"),
            fingerprint: None,
        });
        assert!(
            matches!(resume_model(&conv), ResumeModel::Default { why: Some(w) } if w.contains("server"))
        );
        // No turn, no model: nothing to say.
        let empty = SavedConversation::new("e".to_string(), NOW_UNIX_S);
        assert_eq!(resume_model(&empty), ResumeModel::Default { why: None });
    }

    fn file_names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    #[test]
    fn answers_in_flight_of_ended_processes_are_recovered_into_history() {
        let tmp = tempfile::tempdir().unwrap();
        let flight = in_flight_dir(tmp.path());
        fs::create_dir_all(&flight).unwrap();
        let json = |c: &SavedConversation| serde_json::to_vec(c).unwrap();
        // A process that has ended (pid 2^22 + 1 is above Linux's pid limit), this process (a
        // chat still running), a file that is not a conversation, and one of no pid.
        let ended = conversation("c-ended", NOW_UNIX_S, "Hello");
        fs::write(flight.join("4194305-c-ended.json"), json(&ended)).unwrap();
        let live = conversation("c-live", NOW_UNIX_S, "Hi");
        fs::write(in_flight_path(tmp.path(), "c-live"), json(&live)).unwrap();
        fs::write(flight.join("4194306-c-bad.json"), b"{").unwrap();
        fs::write(flight.join("notes.txt"), b"x").unwrap();
        let notices = recover_in_flight(tmp.path());
        assert_eq!(notices.len(), 2, "{notices:?}");
        assert!(
            notices[0].contains("conversation c-ended")
                || notices[1].contains("conversation c-ended"),
            "{notices:?}"
        );
        assert!(
            notices
                .iter()
                .any(|n| n.contains("could not be recovered") && n.contains("c-bad")),
            "{notices:?}"
        );
        let dir = history_dir(tmp.path());
        assert_eq!(load(&dir.join("c-ended.json")).unwrap(), ended);
        assert!(!flight.join("4194305-c-ended.json").exists());
        assert!(
            !dir.join("c-live.json").exists(),
            "a running chat's file is left alone"
        );
        assert!(in_flight_path(tmp.path(), "c-live").exists());
        assert!(
            flight.join("4194306-c-bad.json").exists(),
            "kept to look at"
        );
    }

    #[test]
    fn save_then_load_round_trips() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = history_dir(tmp.path());
        assert_eq!(dir, tmp.path().join("history"));
        let conv = conversation("20261130-084512-3f2a", NOW_UNIX_S, "Hi there");
        let path = save(&dir, &conv).unwrap();
        assert_eq!(path, dir.join("20261130-084512-3f2a.json"));
        assert_eq!(load(&path).unwrap(), conv);

        let text = fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("\n  \"id\": \"20261130-084512-3f2a\""),
            "pretty: {text}"
        );
        assert!(text.contains("\"stop_reason\": \"end_of_generation\""));
        assert_eq!(file_names(&dir), vec!["20261130-084512-3f2a.json"]);

        // Saving again replaces the file in place.
        let mut more = conv.clone();
        more.turns.truncate(1);
        save(&dir, &more).unwrap();
        assert_eq!(load(&path).unwrap(), more);
        assert_eq!(file_names(&dir), vec!["20261130-084512-3f2a.json"]);
    }

    #[test]
    fn a_thinking_turn_keeps_its_split_through_save_load_and_export() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = history_dir(tmp.path());
        let mut conv = conversation("20261130-084512-7b7b", NOW_UNIX_S, "2+2?");
        let thinking = crate::metrics::ThinkingSummary {
            thinking_tokens: 143,
            thinking_ms: Some(3_201.5),
            time_to_first_answer_ms: Some(3_456.0),
            answer_tokens: 12,
            answer_tok_per_s: Some(25.3),
            ended_while_thinking: false,
        };
        let turn = &mut conv.turns[0];
        turn.thinking = Some("Two and two.\nThat is four.".to_string());
        turn.assistant = "4".to_string();
        turn.metrics.as_mut().unwrap().thinking = Some(thinking);
        let path = save(&dir, &conv).unwrap();
        let back = load(&path).unwrap();
        assert_eq!(back, conv);
        assert_eq!(
            back.turns[0].metrics.as_ref().unwrap().thinking,
            Some(thinking)
        );
        assert_eq!(
            back.turns[1].thinking, None,
            "a turn without thinking has none"
        );
        let text = fs::read_to_string(&path).unwrap();
        assert_eq!(
            text.matches("\"thinking\"").count(),
            2,
            "text and figures: {text}"
        );

        let md = export_markdown(&back, back.turns[0].settings.as_ref().unwrap());
        assert!(
            md.contains("## Assistant\n\n*thinking:*\n\n> Two and two.\n> That is four.\n\n4\n\n"),
            "{md}"
        );
        assert!(
            md.contains(
                "thinking 143 tokens, 3201.5 ms · first answer token 3456.0 ms · answer 25.3 tok/s"
            ),
            "{md}"
        );
        // The answer without thinking reads as before.
        assert!(md.contains("## Assistant\n\nPartial ans\n\n"), "{md}");
    }

    #[test]
    fn save_writes_the_current_version_whatever_the_struct_says() {
        let tmp = tempfile::tempdir().unwrap();
        let mut conv = conversation("a1", NOW_UNIX_S, "x");
        conv.version = 0;
        let path = save(tmp.path(), &conv).unwrap();
        assert_eq!(load(&path).unwrap().version, FORMAT_VERSION);
    }

    #[cfg(unix)]
    #[test]
    fn files_are_0600_and_a_new_dir_is_0700() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = history_dir(&tmp.path().join("data"));
        let path = save(&dir, &conversation("a1", NOW_UNIX_S, "x")).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&dir), 0o700);

        // An existing, wider file is replaced by a private one.
        let export = tmp.path().join("export.md");
        fs::write(&export, "old").unwrap();
        fs::set_permissions(&export, fs::Permissions::from_mode(0o644)).unwrap();
        write_private(&export, b"new").unwrap();
        assert_eq!(fs::read_to_string(&export).unwrap(), "new");
        assert_eq!(mode(&export), 0o600);
        // An existing directory keeps the mode the user gave it.
        assert_eq!(mode(tmp.path()) & 0o700, 0o700);
    }

    #[test]
    fn list_is_newest_first_with_one_line_truncated_titles() {
        let tmp = tempfile::tempdir().unwrap();
        let long = format!("Tell me\nabout   {}", "rust ".repeat(30));
        save(tmp.path(), &conversation("old", NOW_UNIX_S - 7200, "first")).unwrap();
        save(tmp.path(), &conversation("new", NOW_UNIX_S, &long)).unwrap();
        save(tmp.path(), &conversation("mid", NOW_UNIX_S - 60, "mid")).unwrap();
        let mut empty = SavedConversation::new("none".to_string(), NOW_UNIX_S - 9000);
        empty.updated_unix_s = NOW_UNIX_S - 9000;
        save(tmp.path(), &empty).unwrap();

        let outcome = list(tmp.path()).unwrap();
        assert!(outcome.set_aside.is_empty() && outcome.skipped.is_empty());
        let ids: Vec<&str> = outcome.entries.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["new", "mid", "old", "none"]);
        let title = &outcome.entries[0].title;
        assert_eq!(title.chars().count(), 60);
        assert!(title.starts_with("Tell me about rust rust"), "{title}");
        assert!(title.ends_with('…'));
        assert!(!title.contains('\n'));
        assert_eq!(outcome.entries[1].title, "mid");
        assert_eq!(outcome.entries[1].turns, 2);
        assert_eq!(outcome.entries[1].path, tmp.path().join("mid.json"));
        assert_eq!(outcome.entries[3].title, "(no turns yet)");
        assert_eq!(outcome.entries[3].turns, 0);

        assert_eq!(
            latest(tmp.path()).unwrap(),
            Some(tmp.path().join("new.json"))
        );
    }

    #[test]
    fn a_missing_dir_lists_empty_and_has_no_latest() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("nope");
        let outcome = list(&dir).unwrap();
        assert!(outcome.entries.is_empty() && outcome.set_aside.is_empty());
        assert_eq!(latest(&dir).unwrap(), None);
        assert!(!dir.exists(), "listing must not create the dir");
    }

    #[test]
    fn list_ignores_temp_and_other_files() {
        let tmp = tempfile::tempdir().unwrap();
        save(tmp.path(), &conversation("good", NOW_UNIX_S, "x")).unwrap();
        fs::write(tmp.path().join(".good.json.tmp-1-2-3"), "{trunc").unwrap();
        fs::write(tmp.path().join(".hidden.json"), "{trunc").unwrap();
        fs::write(tmp.path().join("notes.txt"), "hello").unwrap();
        fs::write(tmp.path().join("x.json.corrupt-5"), "junk").unwrap();
        fs::create_dir(tmp.path().join("subdir")).unwrap();
        let outcome = list(tmp.path()).unwrap();
        assert_eq!(outcome.entries.len(), 1);
        assert!(outcome.set_aside.is_empty());
        assert_eq!(file_names(tmp.path()).len(), 6, "nothing was moved");
    }

    #[test]
    fn find_by_exact_id_and_unique_prefix() {
        let tmp = tempfile::tempdir().unwrap();
        for id in [
            "20261130-084512-3f2a",
            "20261130-084512-3f2a7",
            "20261201-101010-0001",
        ] {
            save(tmp.path(), &conversation(id, NOW_UNIX_S, "x")).unwrap();
        }
        assert_eq!(
            find(tmp.path(), "20261201").unwrap(),
            tmp.path().join("20261201-101010-0001.json")
        );
        // An exact id wins over a longer id it is a prefix of.
        assert_eq!(
            find(tmp.path(), "20261130-084512-3f2a").unwrap(),
            tmp.path().join("20261130-084512-3f2a.json")
        );
        assert_eq!(
            find(tmp.path(), " 20261130-084512-3f2a7 ").unwrap(),
            tmp.path().join("20261130-084512-3f2a7.json")
        );
    }

    #[test]
    fn find_ambiguous_prefix_lists_candidates() {
        let tmp = tempfile::tempdir().unwrap();
        for id in [
            "20261130-084512-3f2a",
            "20261130-090000-0b1c",
            "20261201-101010-0001",
        ] {
            save(tmp.path(), &conversation(id, NOW_UNIX_S, "x")).unwrap();
        }
        let err = find(tmp.path(), "20261130").unwrap_err();
        assert!(
            matches!(&err, HistoryError::Ambiguous { candidates, .. } if candidates.len() == 2)
        );
        let message = err.to_string();
        assert!(
            message.contains("matches 2 saved conversations"),
            "{message}"
        );
        assert!(
            message.contains("20261130-090000-0b1c, 20261130-084512-3f2a"),
            "{message}"
        );
        assert!(!message.contains("20261201"), "{message}");
        assert!(message.contains("type more of the id"), "{message}");
    }

    #[test]
    fn find_unknown_id_names_the_known_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let err = find(tmp.path(), "abc").unwrap_err();
        assert!(err.to_string().contains("there are none yet"), "{err}");

        save(
            tmp.path(),
            &conversation("20261130-084512-3f2a", NOW_UNIX_S, "x"),
        )
        .unwrap();
        let err = find(tmp.path(), "2025").unwrap_err();
        assert!(matches!(err, HistoryError::NotFound { .. }));
        let message = err.to_string();
        assert!(
            message.contains("no saved conversation matches \"2025\""),
            "{message}"
        );
        assert!(message.contains("20261130-084512-3f2a"), "{message}");
        assert!(find(tmp.path(), "").is_err());
        assert!(find(tmp.path(), "../x").is_err());
    }

    #[test]
    fn corrupt_and_truncated_files_are_set_aside_and_good_ones_still_list() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        save(dir, &conversation("good", NOW_UNIX_S, "x")).unwrap();
        let full = serde_json::to_string_pretty(&conversation("trunc", NOW_UNIX_S, "x")).unwrap();
        let truncated = &full[..full.len() / 2];
        fs::write(dir.join("trunc.json"), truncated).unwrap();
        fs::write(dir.join("garbage.json"), b"\x00\xffnot json at all").unwrap();
        fs::write(dir.join("fields.json"), r#"{"version": 1, "id": "fields"}"#).unwrap();

        // load reports them and leaves them untouched.
        for name in ["trunc.json", "garbage.json", "fields.json"] {
            let err = load(&dir.join(name)).unwrap_err();
            assert!(matches!(err, HistoryError::Corrupt { .. }), "{name}: {err}");
        }
        assert!(load(&dir.join("trunc.json"))
            .unwrap_err()
            .to_string()
            .contains("truncated"));
        assert!(load(&dir.join("fields.json"))
            .unwrap_err()
            .to_string()
            .contains("missing field"));
        assert_eq!(
            fs::read_to_string(dir.join("trunc.json")).unwrap(),
            truncated
        );

        let outcome = list(dir).unwrap();
        assert_eq!(outcome.entries.len(), 1);
        assert_eq!(outcome.entries[0].id, "good");
        assert_eq!(outcome.set_aside.len(), 3, "{:?}", outcome.set_aside);
        for (original, moved) in &outcome.set_aside {
            assert!(!original.exists());
            let moved_name = moved.file_name().unwrap().to_string_lossy().into_owned();
            let original_name = original.file_name().unwrap().to_string_lossy().into_owned();
            assert!(
                moved_name.starts_with(&format!("{original_name}.corrupt-")),
                "{moved_name}"
            );
        }
        let (_, moved_trunc) = outcome
            .set_aside
            .iter()
            .find(|(o, _)| o.ends_with("trunc.json"))
            .unwrap();
        assert_eq!(fs::read_to_string(moved_trunc).unwrap(), truncated);

        // Nothing left to set aside the second time.
        let again = list(dir).unwrap();
        assert_eq!(again.entries.len(), 1);
        assert!(again.set_aside.is_empty());
    }

    #[test]
    fn setting_aside_never_overwrites_an_existing_file() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("bad.json");
        fs::write(&path, "{").unwrap();
        let taken = tmp.path().join("bad.json.corrupt-77");
        fs::write(&taken, "earlier").unwrap();
        let moved = set_aside(&path, b"{", 77).unwrap().unwrap();
        assert_eq!(moved, tmp.path().join("bad.json.corrupt-77-1"));
        assert_eq!(fs::read_to_string(&taken).unwrap(), "earlier");
        assert_eq!(fs::read_to_string(&moved).unwrap(), "{");
        assert!(!path.exists());

        // Replaced by a good file since it was read: left alone.
        fs::write(&path, "good now").unwrap();
        assert_eq!(set_aside(&path, b"{", 78).unwrap(), None);
        assert_eq!(fs::read_to_string(&path).unwrap(), "good now");
        assert!(!tmp.path().join("bad.json.corrupt-78").exists());
    }

    #[test]
    fn wrong_version_names_both_versions() {
        let tmp = tempfile::tempdir().unwrap();
        let mut value = serde_json::to_value(conversation("v7", NOW_UNIX_S, "x")).unwrap();
        value["version"] = serde_json::json!(7);
        let path = tmp.path().join("v7.json");
        fs::write(&path, serde_json::to_vec(&value).unwrap()).unwrap();
        let err = load(&path).unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, HistoryError::Corrupt { .. }));
        assert!(message.contains("format version 7"), "{message}");
        assert!(message.contains("reads versions 1 to 2"), "{message}");
        assert!(message.contains("newer tokscope"), "{message}");

        // A newer file is readable by that newer tokscope: list leaves it where it is.
        let outcome = list(tmp.path()).unwrap();
        assert!(outcome.entries.is_empty() && outcome.set_aside.is_empty());
        assert_eq!(outcome.skipped.len(), 1);
        assert!(path.exists());

        value["version"] = serde_json::json!(0);
        fs::write(&path, serde_json::to_vec(&value).unwrap()).unwrap();
        assert!(load(&path)
            .unwrap_err()
            .to_string()
            .contains("format version 0"));
        value["version"] = serde_json::json!("one");
        fs::write(&path, serde_json::to_vec(&value).unwrap()).unwrap();
        assert!(load(&path)
            .unwrap_err()
            .to_string()
            .contains("not a whole number"));
    }

    #[test]
    fn odd_inputs_never_panic_and_are_corrupt() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x.json");
        let inputs: [&[u8]; 10] = [
            b"",
            b"null",
            b"[]",
            b"\"str\"",
            b"{}",
            b"{\"version\": 1e400}",
            b"{\"version\": -1}",
            b"{\"version\": 1, \"id\": \"../../etc\", \"created_unix_s\": 0, \"updated_unix_s\": 0, \"turns\": []}",
            b"{\"version\": 1, \"id\": \"a\", \"created_unix_s\": -5, \"updated_unix_s\": 0, \"turns\": []}",
            b"\xef\xbb\xbf{}",
        ];
        for input in inputs {
            fs::write(&path, input).unwrap();
            let err = load(&path).unwrap_err();
            assert!(
                matches!(err, HistoryError::Corrupt { .. }),
                "{:?}: {err}",
                String::from_utf8_lossy(input)
            );
        }
        assert!(matches!(
            load(&tmp.path().join("missing.json")),
            Err(HistoryError::Read { .. })
        ));
    }

    #[test]
    fn metrics_that_no_longer_parse_load_as_none() {
        let tmp = tempfile::tempdir().unwrap();
        let mut value = serde_json::to_value(conversation("m", NOW_UNIX_S, "x")).unwrap();
        // What a NaN is written as, and what an older TurnSummary lacks.
        value["turns"][0]["metrics"]["prefill_ms"] = serde_json::Value::Null;
        if let Some(turn) = value["turns"][1].as_object_mut() {
            turn.remove("metrics");
        }
        let path = tmp.path().join("m.json");
        fs::write(&path, serde_json::to_vec(&value).unwrap()).unwrap();
        let conv = load(&path).unwrap();
        assert_eq!(conv.turns.len(), 2);
        assert_eq!(conv.turns[0].metrics, None);
        assert_eq!(conv.turns[0].assistant, "Hello! How can I help?");
        assert_eq!(conv.turns[1].metrics, None);
    }

    #[test]
    fn save_rejects_ids_that_are_not_plain_file_names() {
        let tmp = tempfile::tempdir().unwrap();
        for id in ["", "../escape", "a/b", ".hidden", "a b", &"x".repeat(200)] {
            let err = save(tmp.path(), &conversation(id, NOW_UNIX_S, "x")).unwrap_err();
            assert!(matches!(err, HistoryError::InvalidId { .. }), "{id}");
        }
        assert!(file_names(tmp.path()).is_empty());
    }

    #[test]
    fn saving_where_a_file_blocks_the_dir_is_a_clear_error_and_leaves_no_temp() {
        let tmp = tempfile::tempdir().unwrap();
        let blocker = tmp.path().join("data");
        fs::write(&blocker, "a regular file").unwrap();
        let err = save(&history_dir(&blocker), &conversation("a1", NOW_UNIX_S, "x")).unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, HistoryError::Write(_)), "{message}");
        assert!(message.contains("could not write"), "{message}");
        assert!(message.contains("a1.json"), "{message}");
        assert!(
            std::error::Error::source(&err).is_some(),
            "keeps the io error"
        );
        assert_eq!(file_names(tmp.path()), vec!["data"]);
    }

    #[cfg(unix)]
    #[test]
    fn saving_into_a_read_only_dir_is_a_clear_error_and_leaves_no_temp() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("history");
        fs::create_dir(&dir).unwrap();
        let original = conversation("a1", NOW_UNIX_S, "x");
        save(&dir, &original).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o500)).unwrap();

        let probe = dir.join("probe");
        if fs::write(&probe, "").is_ok() {
            // Root (as in CI containers) ignores permission bits; the regular-file test above
            // covers the error path there.
            let _ = fs::remove_file(&probe);
            fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
            eprintln!("note: skipped the read-only assertion: this user can write a 0500 dir");
            return;
        }
        let mut changed = original.clone();
        changed.turns.clear();
        let err = save(&dir, &changed).unwrap_err();
        let names = file_names(&dir);
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
        assert!(
            matches!(
                err,
                HistoryError::Write(WriteError::Write {
                    problem: WriteProblem::PermissionDenied,
                    ..
                })
            ),
            "{err}"
        );
        assert!(err.to_string().contains("permission denied"), "{err}");
        assert_eq!(names, vec!["a1.json"]);
        assert_eq!(load(&dir.join("a1.json")).unwrap(), original);
    }

    fn user_turns(conv: &SavedConversation) -> Vec<String> {
        conv.turns.iter().map(|t| t.user.clone()).collect()
    }

    fn add_turn(conv: &mut SavedConversation, user: &str) {
        let mut turn = conv.turns[0].clone();
        turn.user = user.to_string();
        conv.turns.push(turn);
    }

    #[test]
    fn a_resumed_copy_saves_to_the_copy_and_never_the_original() {
        let dir = tempfile::tempdir().unwrap();
        let original = save(
            dir.path(),
            &conversation("20250101-000000-aaaa", 1000, "hi"),
        )
        .unwrap();
        let before = fs::read(&original).unwrap();
        let copy = dir.path().join("mycopy.json");
        fs::copy(&original, &copy).unwrap();
        let resumed = resume(&copy, SystemTime::now()).unwrap();
        assert_eq!(resumed.conversation.id, "mycopy");
        assert_eq!(resumed.inner_id.as_deref(), Some("20250101-000000-aaaa"));
        assert!(resumed
            .notice()
            .unwrap()
            .contains("the original is untouched"));
        let mut slot = SaveSlot::resumed(dir.path(), &resumed);
        let mut conv = resumed.conversation.clone();
        add_turn(&mut conv, "more");
        let outcome = slot.save(&conv, SystemTime::now()).unwrap();
        assert_eq!(outcome.path, copy);
        assert_eq!(outcome.forked, None);
        assert_eq!(
            fs::read(&original).unwrap(),
            before,
            "the original is untouched"
        );
        let saved = load(&copy).unwrap();
        assert_eq!(saved.id, "mycopy");
        assert_eq!(saved.turns.len(), 3);
        // The listing shows each under the name `--resume` finds it by.
        let ids: Vec<String> = list(dir.path())
            .unwrap()
            .entries
            .into_iter()
            .map(|e| e.id)
            .collect();
        assert!(
            ids.contains(&"mycopy".to_string())
                && ids.contains(&"20250101-000000-aaaa".to_string()),
            "{ids:?}"
        );

        // A copy whose name cannot be an id becomes a new conversation in a new file.
        let odd = dir.path().join("copy of it.json");
        fs::copy(&original, &odd).unwrap();
        let resumed = resume(&odd, SystemTime::now()).unwrap();
        assert!(is_valid_id(&resumed.conversation.id));
        assert_ne!(resumed.conversation.id, "20250101-000000-aaaa");
        assert!(resumed.notice().unwrap().contains("new conversation"));
        let mut slot = SaveSlot::resumed(dir.path(), &resumed);
        let outcome = slot.save(&resumed.conversation, SystemTime::now()).unwrap();
        assert_eq!(
            outcome.path,
            dir.path().join(format!("{}.json", resumed.conversation.id))
        );
        assert_eq!(fs::read(&original).unwrap(), before);
        assert_eq!(fs::read(&odd).unwrap(), before);
    }

    #[test]
    fn two_chats_on_one_conversation_fork_instead_of_dropping_turns() {
        let dir = tempfile::tempdir().unwrap();
        let path = save(
            dir.path(),
            &conversation("20250101-000000-aaaa", 1000, "hi"),
        )
        .unwrap();
        let a = resume(&path, SystemTime::now()).unwrap();
        let b = resume(&path, SystemTime::now()).unwrap();
        assert_eq!(a.inner_id, None);
        let (mut slot_a, mut slot_b) = (
            SaveSlot::resumed(dir.path(), &a),
            SaveSlot::resumed(dir.path(), &b),
        );
        let (mut conv_a, mut conv_b) = (a.conversation.clone(), b.conversation.clone());
        add_turn(&mut conv_a, "from a");
        assert_eq!(
            slot_a.save(&conv_a, SystemTime::now()).unwrap().forked,
            None
        );
        add_turn(&mut conv_b, "from b");
        let outcome = slot_b.save(&conv_b, SystemTime::now()).unwrap();
        let (from, to) = outcome.forked.clone().unwrap();
        assert_eq!(from, "20250101-000000-aaaa");
        assert_ne!(to, from);
        assert!(outcome.notice().unwrap().contains(&to));
        // Each chat goes on saving to its own file, without further forks.
        add_turn(&mut conv_a, "a again");
        add_turn(&mut conv_b, "b again");
        assert_eq!(
            slot_a.save(&conv_a, SystemTime::now()).unwrap().forked,
            None
        );
        assert_eq!(
            slot_b.save(&conv_b, SystemTime::now()).unwrap().forked,
            None
        );
        assert_eq!(
            user_turns(&load(&path).unwrap()),
            ["hi", "and again", "from a", "a again"]
        );
        let fork = load(&dir.path().join(format!("{to}.json"))).unwrap();
        assert_eq!(fork.id, to);
        assert_eq!(user_turns(&fork), ["hi", "and again", "from b", "b again"]);
    }

    #[test]
    fn a_new_conversation_never_replaces_a_file_it_did_not_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = save(
            dir.path(),
            &conversation("20250101-000000-aaaa", 1000, "theirs"),
        )
        .unwrap();
        let before = fs::read(&path).unwrap();
        let mut slot = SaveSlot::new(dir.path());
        let mine = conversation("20250101-000000-aaaa", 2000, "mine");
        let outcome = slot.save(&mine, SystemTime::now()).unwrap();
        assert!(outcome.forked.is_some());
        assert_eq!(fs::read(&path).unwrap(), before);
        // Ctrl+N: a new conversation in the same chat saves under its own id.
        let other = conversation("20250102-000000-bbbb", 3000, "next");
        let outcome = slot.save(&other, SystemTime::now()).unwrap();
        assert_eq!(
            outcome,
            SaveOutcome {
                path: dir.path().join("20250102-000000-bbbb.json"),
                forked: None
            }
        );
    }

    #[cfg(unix)]
    #[test]
    fn fifos_and_devices_in_the_history_dir_are_skipped_not_read() {
        let dir = tempfile::tempdir().unwrap();
        save(
            dir.path(),
            &conversation("20250101-000000-aaaa", 1000, "hi"),
        )
        .unwrap();
        let fifo = dir.path().join("20250102-000000-ffff.json");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("20250103-000000-0000.json"))
            .unwrap();
        let outcome = list(dir.path()).unwrap();
        assert_eq!(outcome.entries.len(), 1);
        assert_eq!(outcome.skipped.len(), 2, "{:?}", outcome.skipped);
        assert!(outcome
            .skipped
            .iter()
            .all(|(_, why)| why.contains("not a regular file")));
        assert!(latest(dir.path())
            .unwrap()
            .unwrap()
            .ends_with("20250101-000000-aaaa.json"));
        let err = load(&fifo).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
    }

    #[test]
    fn two_threads_saving_at_once_all_succeed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = history_dir(tmp.path());
        std::thread::scope(|scope| {
            for thread in 0..2 {
                let dir = &dir;
                scope.spawn(move || {
                    let mut conv = conversation(&format!("thread{thread}"), NOW_UNIX_S, "x");
                    for round in 0..50 {
                        conv.updated_unix_s = NOW_UNIX_S + round;
                        conv.turns[1].assistant = format!("round {round}");
                        let path = save(dir, &conv).unwrap();
                        assert_eq!(load(&path).unwrap(), conv);
                        // A second file per round as well: many distinct targets at once.
                        let mut other = conv.clone();
                        other.id = format!("t{thread}-r{round}");
                        save(dir, &other).unwrap();
                    }
                });
            }
        });
        let outcome = list(&dir).unwrap();
        assert_eq!(outcome.entries.len(), 102);
        assert!(outcome.set_aside.is_empty() && outcome.skipped.is_empty());
        for entry in &outcome.entries {
            load(&entry.path).unwrap();
        }
        assert!(
            file_names(&dir)
                .iter()
                .all(|n| n.ends_with(".json") && !n.starts_with('.')),
            "no temp files left"
        );
        let last = load(&dir.join("thread1.json")).unwrap();
        assert_eq!(last.turns[1].assistant, "round 49");
    }

    #[test]
    fn markdown_export_has_both_sides_and_metrics_lines() {
        let conv = conversation("20261130-084512-3f2a", NOW_UNIX_S, "What is a KV cache?");
        let md = export_markdown(&conv, &settings(42, None));
        assert!(
            md.starts_with("# Conversation 20261130-084512-3f2a\n"),
            "{md}"
        );
        assert!(md.contains("model tiny-q8_0.gguf"), "{md}");
        assert!(md.contains("## System prompt\n\nBe brief.\n"), "{md}");
        assert!(md.contains("## You\n\nWhat is a KV cache?\n"), "{md}");
        assert!(
            md.contains("## Assistant\n\nHello! How can I help?\n"),
            "{md}"
        );
        assert!(
            md.contains("*TTFT 123.5 ms · decode 52.8 tok/s · 42 tokens · end of generation*"),
            "{md}"
        );
        assert!(
            md.contains("*TTFT — ms · decode — tok/s · — tokens · cancelled*"),
            "{md}"
        );
        assert_eq!(md.matches("## You").count(), 2);
        assert!(md.ends_with("cancelled*\n"), "{md:?}");

        // A model switch mid-conversation is noted; an empty answer still has a section.
        let mut switched = conv.clone();
        switched.turns[1].model_file = Some("other.gguf".to_string());
        switched.turns[1].assistant.clear();
        let md = export_markdown(&switched, &settings(42, None));
        assert!(md.contains("cancelled · model other.gguf*"), "{md}");
        assert!(md.contains("## Assistant\n\n*(no answer)*"), "{md}");

        let empty = SavedConversation::new("e".to_string(), NOW_UNIX_S);
        let md = export_markdown(&empty, &settings(42, None));
        assert!(md.contains("0 turns") && !md.contains("## You"), "{md}");
    }

    #[test]
    fn json_export_is_the_saved_form() {
        let conv = conversation("j", NOW_UNIX_S, "x");
        let json = export_json(&conv).unwrap();
        assert!(json.contains("\n  \"version\": 2"));
        let back: SavedConversation = serde_json::from_str(&json).unwrap();
        assert_eq!(back, conv);
    }

    #[test]
    fn format_list_empty_and_filled() {
        let empty = format_list(&[], NOW_UNIX_S);
        assert!(empty.starts_with("No saved conversations yet"), "{empty}");

        let entry = |id: &str, ago_s: u64, model: Option<&str>, title: &str| ConversationEntry {
            id: id.to_string(),
            path: PathBuf::from(format!("{id}.json")),
            updated_unix_s: NOW_UNIX_S - ago_s,
            turns: 3,
            title: title.to_string(),
            model_file: model.map(str::to_string),
        };
        let table = format_list(
            &[
                entry(
                    "20261130-084512-3f2a",
                    180,
                    Some("tiny-q8_0.gguf"),
                    "What is a KV cache?",
                ),
                entry("20261101-000000-0001", 40 * 86_400, None, "Old one"),
                entry(
                    "20261130-080000-0002",
                    5,
                    Some("m\x1b[31m.gguf"),
                    "Just now",
                ),
            ],
            NOW_UNIX_S,
        );
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4, "{table}");
        assert!(lines[0].starts_with("ID "), "{table}");
        for column in ["UPDATED", "TURNS", "MODEL", "TITLE"] {
            assert!(lines[0].contains(column), "{table}");
        }
        assert!(lines[1].contains("3 min ago") && lines[1].contains("What is a KV cache?"));
        assert!(lines[1].contains("tiny-q8_0.gguf"));
        assert!(
            lines[2].contains("2026-10-21") && lines[2].contains("—"),
            "{table}"
        );
        assert!(lines[3].contains("just now"), "{table}");
        assert!(!table.contains('\x1b'), "control characters are dropped");
        // Columns line up: every title starts at the same character offset.
        let title_at = lines[0].find("TITLE").unwrap();
        assert_eq!(
            lines[1].chars().count() - "What is a KV cache?".chars().count(),
            title_at
        );
    }

    #[test]
    fn relative_times() {
        let now = NOW_UNIX_S;
        assert_eq!(relative_time(now, now), "just now");
        assert_eq!(relative_time(now + 30, now), "just now");
        assert_eq!(relative_time(now - 59, now), "just now");
        assert_eq!(relative_time(now - 60, now), "1 min ago");
        assert_eq!(relative_time(now - 3 * 3600 - 5, now), "3 h ago");
        assert_eq!(relative_time(now - 86_400, now), "1 day ago");
        assert_eq!(relative_time(now - 6 * 86_400, now), "6 days ago");
        assert_eq!(relative_time(now - 7 * 86_400, now), "2026-11-23");
        assert_eq!(relative_time(now + 86_400, now), "2026-12-01");
        assert_eq!(relative_time(0, u64::MAX), "1970-01-01");
    }
}
