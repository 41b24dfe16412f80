//! Shared helpers of the integration tests: synthetic models written on the spot, engines
//! started with one thread (the test machines have two cores, and OpenMP runs that share cores
//! slow each other down badly), and a lock so model-running tests in one binary take turns.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokscope::engine::{
    ChatMessage, EngineConfig, EngineError, EngineEvent, EngineHandle, EventReceiver, ModelInfo,
    Role, SamplingParams, TemplateChoice, TurnReport, TurnRequest,
};
use tokscope::llama::settings::EngineSettings;
use tokscope::synth::{write_model, SynthSpec, TensorType};

/// Decodes `prompt` into sequence 0 from position 0 and returns the batch index of its last
/// token (the one with an output).
pub fn prefill(
    ctx: &mut llama_cpp_2::context::LlamaContext<'_>,
    prompt: &[llama_cpp_2::token::LlamaToken],
) -> i32 {
    let mut batch = llama_cpp_2::llama_batch::LlamaBatch::new(prompt.len().max(1), 1);
    for (i, t) in prompt.iter().enumerate() {
        batch
            .add(*t, i as i32, &[0], i + 1 == prompt.len())
            .unwrap();
    }
    ctx.decode(&mut batch).unwrap();
    batch.n_tokens() - 1
}

pub mod gguf_edit;
pub mod llama_server;
pub mod tmux;

static MODEL_LOCK: Mutex<()> = Mutex::new(());

/// The real binary, its data and config dirs under `home`, and nothing from the environment
/// that would change what it measures (a configured model, a planted error, backtraces).
pub fn tokscope_cmd(home: &Path) -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::cargo_bin("tokscope").unwrap();
    cmd.env("TOKSCOPE_DATA_DIR", home.join("data"))
        .env("TOKSCOPE_CONFIG_DIR", home.join("config"))
        .env_remove("TOKSCOPE_MODEL")
        .env_remove("TOKSCOPE_PLANT_SCALE")
        .env_remove("TOKSCOPE_PLANT_SLOW")
        // Set in this test process by an in-process engine test that turned ggml's tiled
        // matmul off (`llama::invariant`): a child picks its own kernels.
        .env_remove("GGML_CPU_TILED_MM")
        .env_remove("RUST_BACKTRACE");
    cmd
}

/// The cells of one Markdown table line, trimmed (`| a | b |` → `["a", "b"]`); a line that is
/// not a table row gives none.
pub fn md_cells(line: &str) -> Vec<String> {
    match line
        .trim()
        .strip_prefix('|')
        .and_then(|l| l.strip_suffix('|'))
    {
        Some(inner) => inner.split('|').map(|c| c.trim().to_string()).collect(),
        None => Vec::new(),
    }
}

/// The row of a Markdown table in `text` whose first cell is `first`, as its cells.
pub fn md_row(text: &str, first: &str) -> Option<Vec<String>> {
    text.lines()
        .map(md_cells)
        .find(|c| c.first().map(String::as_str) == Some(first))
}

/// What a failing command must not print: a Rust panic or a backtrace offer.
pub fn no_panic() -> impl predicates::Predicate<str> {
    use predicates::prelude::*;
    predicate::str::contains("panicked")
        .or(predicate::str::contains("backtrace"))
        .or(predicate::str::contains("RUST_BACKTRACE"))
        .not()
}

/// A synthetic model written by the real binary (`tokscope synth --preset P --seed S`), as
/// `home/P-S.gguf`.
pub fn synth_cli(home: &Path, preset: &str, seed: u32) -> PathBuf {
    synth_cli_typed(home, preset, None, seed)
}

/// [`synth_cli`] with `--type TY` when given, as `home/P-TY-S.gguf`.
pub fn synth_cli_typed(home: &Path, preset: &str, ty: Option<&str>, seed: u32) -> PathBuf {
    let path = home.join(match ty {
        Some(ty) => format!("{preset}-{ty}-{seed}.gguf"),
        None => format!("{preset}-{seed}.gguf"),
    });
    let mut cmd = tokscope_cmd(home);
    cmd.args(["synth", "--preset", preset, "--seed", &seed.to_string()]);
    if let Some(ty) = ty {
        cmd.args(["--type", ty]);
    }
    cmd.arg("-o").arg(&path).assert().success();
    path
}

/// Serialise tests that run models, so timings are not disturbed by another test.
/// llama.cpp's logs are routed into tokscope's logging first (as `main` does), so its lines
/// stay off the test output and its complaints reach error messages.
pub fn model_lock() -> MutexGuard<'static, ()> {
    tokscope::logging::init(None);
    MODEL_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Write a synthetic model from a preset, with optional overrides of its shape.
pub fn synth(dir: &Path, name: &str, preset: &str, ty: TensorType, seed: u64) -> PathBuf {
    let mut spec = SynthSpec::preset(preset).unwrap();
    spec.tensor_type = ty;
    spec.seed = seed;
    let path = dir.join(name);
    write_model(&path, &spec).unwrap();
    path
}

/// The tiny test model in F32, seed 1, as `dir/tiny.gguf`.
pub fn tiny(dir: &Path) -> PathBuf {
    synth(dir, "tiny.gguf", "tiny", TensorType::F32, 1)
}

/// A model slow enough (a few ms per token on one core) for cancellation and timing tests.
pub fn synth_medium(dir: &Path) -> PathBuf {
    let mut spec = SynthSpec::preset("small").unwrap();
    spec.shape.n_layer = 6;
    spec.shape.n_embd = 512;
    spec.shape.n_head = 8;
    spec.shape.n_head_kv = 4;
    spec.shape.n_ff = 1536;
    spec.tensor_type = TensorType::F32;
    let path = dir.join("medium.gguf");
    write_model(&path, &spec).unwrap();
    path
}

pub fn settings(n_ctx: u32) -> EngineSettings {
    EngineSettings {
        n_ctx,
        threads: 1,
        n_batch: 512,
        n_gpu_layers: None,
        template: TemplateChoice::Auto,
        ..EngineSettings::default()
    }
}

pub fn greedy() -> SamplingParams {
    SamplingParams {
        temperature: 0.0,
        ..SamplingParams::default()
    }
}

pub struct TestEngine {
    pub handle: EngineHandle,
    pub events: EventReceiver,
    pub info: ModelInfo,
}

pub fn start(model: &Path, settings: EngineSettings) -> TestEngine {
    let (handle, mut events) = EngineHandle::spawn(EngineConfig {
        model_path: model.to_path_buf(),
        settings,
    })
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "model did not load in time");
        match events.blocking_recv().expect("engine gone") {
            EngineEvent::Ready(info) => {
                return TestEngine {
                    handle,
                    events,
                    info: *info,
                }
            }
            EngineEvent::LoadFailed(e) => panic!("load failed: {e}"),
            _ => {}
        }
    }
}

/// Run an A/B generation with model `path` on engine `e`; `on_token(engine, index)` runs for
/// each of B's token events. Returns B's report (or the error), and B's streamed text.
pub fn ab_turn(
    e: &mut TestEngine,
    path: &std::path::Path,
    messages: Vec<ChatMessage>,
    sampling: SamplingParams,
    max_tokens: u32,
    on_token: impl FnMut(&EngineHandle, usize),
) -> Result<(tokscope::engine::AbReport, String), EngineError> {
    ab_turn_against(e, (path, None), messages, sampling, max_tokens, on_token)
}

/// `ab_turn` with the chat's reference (`--ref`) set: B is scored against it.
pub fn ab_turn_against(
    e: &mut TestEngine,
    (path, reference): (&std::path::Path, Option<&std::path::Path>),
    messages: Vec<ChatMessage>,
    sampling: SamplingParams,
    max_tokens: u32,
    mut on_token: impl FnMut(&EngineHandle, usize),
) -> Result<(tokscope::engine::AbReport, String), EngineError> {
    let id = e.handle.next_id();
    let turn = tokscope::engine::TurnRequest {
        messages,
        sampling,
        max_tokens,
        capture_first_logits: false,
        ignore_eos: false,
        context_full: tokscope::engine::ContextFull::DropOldest,
    };
    e.handle
        .send_ab(
            id,
            turn,
            path.to_path_buf(),
            reference.map(std::path::Path::to_path_buf),
        )
        .unwrap();
    let mut streamed = String::new();
    loop {
        match e.events.blocking_recv().expect("engine gone") {
            EngineEvent::Token {
                request_id,
                text,
                index,
                ..
            } if request_id == id => {
                streamed.push_str(&text);
                on_token(&e.handle, index);
            }
            EngineEvent::AbFinished { request_id, report } if request_id == id => {
                return Ok((*report, streamed))
            }
            EngineEvent::Failed { request_id, error } if request_id == id => return Err(error),
            EngineEvent::Finished { request_id, .. } if request_id == id => {
                panic!("an A/B request must end with AbFinished")
            }
            _ => {}
        }
    }
}

/// The handle's conveniences for tests: a turn under the next id, with or without the logits
/// its first token is sampled from. (The product builds its `TurnRequest`s itself and sends
/// them through `EngineHandle::send`, the one door; so do these.)
pub trait Submit {
    fn generate(
        &mut self,
        messages: Vec<ChatMessage>,
        sampling: SamplingParams,
        max_tokens: u32,
    ) -> Result<u64, EngineError> {
        self.submit(messages, sampling, max_tokens, false)
    }

    fn submit(
        &mut self,
        messages: Vec<ChatMessage>,
        sampling: SamplingParams,
        max_tokens: u32,
        capture_first_logits: bool,
    ) -> Result<u64, EngineError>;
}

impl Submit for EngineHandle {
    fn submit(
        &mut self,
        messages: Vec<ChatMessage>,
        sampling: SamplingParams,
        max_tokens: u32,
        capture_first_logits: bool,
    ) -> Result<u64, EngineError> {
        let turn = TurnRequest {
            messages,
            sampling,
            max_tokens,
            capture_first_logits,
            ignore_eos: false,
            context_full: tokscope::engine::ContextFull::DropOldest,
        };
        self.send(self.next_id(), turn, None)
    }
}

/// What a turn produced, as the events showed it.
pub struct Turn {
    pub report: TurnReport,
    pub streamed: String,
    pub token_events: usize,
    pub prefill_started: Option<(usize, usize)>,
}

impl TestEngine {
    pub fn turn(&mut self, messages: Vec<ChatMessage>, sampling: SamplingParams, max: u32) -> Turn {
        let id = self.handle.generate(messages, sampling, max).unwrap();
        self.collect(id, |_, _| {})
    }

    /// Wait for request `id` to finish; `on_token(engine, index)` runs for each token event.
    pub fn collect(&mut self, id: u64, mut on_token: impl FnMut(&EngineHandle, usize)) -> Turn {
        let mut streamed = String::new();
        let mut token_events = 0;
        let mut prefill_started = None;
        loop {
            match self.events.blocking_recv().expect("engine gone") {
                EngineEvent::Token {
                    request_id,
                    text,
                    index,
                    ..
                } if request_id == id => {
                    assert_eq!(index, token_events, "token indices are consecutive");
                    token_events += 1;
                    streamed.push_str(&text);
                    on_token(&self.handle, index);
                }
                EngineEvent::PrefillStarted {
                    request_id,
                    prompt_tokens,
                    cached_tokens,
                    ..
                } if request_id == id => {
                    prefill_started = Some((prompt_tokens, cached_tokens));
                }
                EngineEvent::Finished { request_id, report } if request_id == id => {
                    return Turn {
                        report: *report,
                        streamed,
                        token_events,
                        prefill_started,
                    };
                }
                EngineEvent::Failed { request_id, error } if request_id == id => {
                    panic!("generation failed: {error}")
                }
                _ => {}
            }
        }
    }
}

pub fn user(text: &str) -> ChatMessage {
    ChatMessage::new(Role::User, text)
}

pub fn assistant(text: &str) -> ChatMessage {
    ChatMessage::new(Role::Assistant, text)
}

/// A minimal CSV reader (quoted fields with doubled quotes), enough to check the writer.
pub fn csv_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                fields.last_mut().unwrap().push('"');
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(String::new()),
            (c, _) => fields.last_mut().unwrap().push(c),
        }
    }
    fields
}

/// Llama 3's tokenizer.json: `$TOKSCOPE_LLAMA3_TOKENIZER`, else fetched once per test run
/// with pip into cargo's target dir.
pub fn llama3_tokenizer() -> &'static Path {
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(path) = std::env::var_os("TOKSCOPE_LLAMA3_TOKENIZER") {
            return PathBuf::from(path);
        }
        let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("llama3-tokenizer");
        tokscope::synth::llama3::fetch_tokenizer(&cache, &mut |line| eprintln!("{line}"))
            .unwrap_or_else(|e| {
                panic!(
                "{e}\n(set TOKSCOPE_LLAMA3_TOKENIZER to a Llama 3 tokenizer.json to run offline)"
            )
            })
    })
}

/// The real demo model (gemma-3-270m Q4_K_M): `TOKSCOPE_DEMO_MODEL`, else where
/// `tokscope fetch-demo` put it (scripts/test.sh does). A test that needs it fails without it.
pub fn demo_model() -> PathBuf {
    if let Some(p) = std::env::var_os("TOKSCOPE_DEMO_MODEL") {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "TOKSCOPE_DEMO_MODEL={} is not a file",
            p.display()
        );
        return p;
    }
    let data_dir = tokscope::paths::data_dir();
    tokscope::demo::find_demo_model(&data_dir).unwrap_or_else(|| {
        panic!(
            "the demo model is not in {} : run `tokscope fetch-demo` (scripts/test.sh does) or \
             set TOKSCOPE_DEMO_MODEL; this test does not pass without its input",
            data_dir.display()
        )
    })
}

/// The real instruct model (SmolLM2-135M-Instruct Q4_1, `tokscope fetch-demo`):
/// `TOKSCOPE_INSTRUCT_MODEL`, else where fetch-demo put it. A test that needs it fails without.
pub fn instruct_model() -> PathBuf {
    if let Some(p) = std::env::var_os("TOKSCOPE_INSTRUCT_MODEL") {
        return PathBuf::from(p);
    }
    tokscope::demo::find_instruct_model(&tokscope::paths::data_dir()).unwrap_or_else(|| {
        panic!(
            "the instruct model (SmolLM2-135M-Instruct) is not in the data dir: run `tokscope \
             fetch-demo` (scripts/test.sh does) or set TOKSCOPE_INSTRUCT_MODEL; this test does \
             not pass without its input"
        )
    })
}

/// `scripts/trace-check.py TRACE [REPORT]`, the independent reader of traces: `Ok(what it
/// said)` when every check held, `Err(why)` when one failed.
pub fn trace_check(trace: &Path, report: Option<&Path>) -> Result<String, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/trace-check.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .arg(trace)
        .args(report)
        .output()
        .expect("python3 runs scripts/trace-check.py");
    let said = |b: &[u8]| String::from_utf8_lossy(b).trim().to_owned();
    match out.status.code() {
        Some(0) => Ok(said(&out.stdout)),
        Some(1) => Err(said(&out.stderr)),
        other => panic!("trace-check.py exited {other:?}: {}", said(&out.stderr)),
    }
}

/// A command that must succeed without a panic: its stdout.
pub fn ok_stdout(cmd: &mut assert_cmd::Command) -> Vec<u8> {
    cmd.assert()
        .success()
        .stderr(no_panic())
        .get_output()
        .stdout
        .clone()
}

/// `tokscope run -m DEMO ARGS --json -t 1 -c 1024 --temp 0` on the real demo model, with its
/// own data, config and cache dirs: the JSON object it prints.
pub fn demo_run_json(args: &[&str]) -> serde_json::Value {
    let home = tempfile::tempdir().unwrap();
    let out = ok_stdout(
        tokscope_cmd(home.path())
            .env("TOKSCOPE_CACHE_DIR", home.path().join("cache"))
            .arg("run")
            .arg("-m")
            .arg(demo_model())
            .args(args)
            .args(["--json", "-t", "1", "-c", "1024", "--temp", "0"]),
    );
    serde_json::from_slice(&out).expect("run --json prints one JSON object")
}

/// `python3 scripts/<script> ARGS` with the Python packages the independent readers need
/// (prometheus_client, opentelemetry-proto) on its path: `TOKSCOPE_PYLIB`, set by
/// scripts/test.sh, or the folder it installs them in; its stdout, or a panic with its stderr.
pub fn python_reader(script: &str, args: &[&Path]) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut cmd = std::process::Command::new("python3");
    cmd.arg(root.join("scripts").join(script)).args(args);
    let lib = std::env::var_os("TOKSCOPE_PYLIB").or_else(|| {
        let dir = Path::new(&std::env::var_os("HOME")?).join(".cache/tokscope/pylib");
        dir.is_dir().then(|| dir.into_os_string())
    });
    if let Some(lib) = lib {
        cmd.env("PYTHONPATH", lib);
    }
    let out = cmd.output().expect("python3 runs");
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
