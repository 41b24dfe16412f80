//! The chat templates of the main model families, rendered by tokscope (minijinja,
//! `src/engine/template.rs`, through the real binary's `doctor template`) and by the reference
//! implementation, Hugging Face transformers' `render_jinja_template` (Python jinja2,
//! `scripts/template-reference.py`): equal byte for byte, single-turn and multi-turn, with and
//! without a system prompt, with earlier thinking where the family thinks. Each template is
//! written into a synthetic GGUF with its special tokens, which must come out of the prompt as
//! one token each.
//!
//! The templates are the makers' own texts: llama.cpp keeps them verbatim in the
//! llama-cpp-python sdist from PyPI (`scripts/template-sources.sh`, run by scripts/test.sh:
//! `TOKSCOPE_TEMPLATE_SOURCES`); SmolLM2 Instruct's comes from its real GGUF (`fetch-demo`).
//! transformers comes from PyPI
//! (`TOKSCOPE_TRANSFORMERS_PYLIB`). A test without its inputs fails and says how to get them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tokscope::gguf::{read_metadata, GgufArray, GgufValue};

use crate::common::{self, gguf_edit, tokscope_cmd};

/// One family: its template, BOS/EOS texts, and the special tokens its prompts carry.
struct Family {
    name: &'static str,
    template: String,
    bos: &'static str,
    eos: &'static str,
    specials: Vec<&'static str>,
    /// It thinks before it answers (`<think>…</think>`): a conversation with earlier thinking
    /// is rendered too.
    thinks: bool,
}

/// Where scripts/template-sources.sh put llama.cpp's copies of the templates.
fn sources() -> PathBuf {
    let dir = std::env::var_os("TOKSCOPE_TEMPLATE_SOURCES")
        .map(PathBuf::from)
        .or_else(|| {
            let home = std::env::var_os("HOME")?;
            let dir = Path::new(&home).join(".cache/tokscope/template-sources/0.3.36");
            dir.is_dir().then_some(dir)
        });
    dir.filter(|d| d.join("models/templates").is_dir())
        .unwrap_or_else(|| {
            panic!(
                "no template sources: run scripts/template-sources.sh (scripts/test.sh does) and \
                 set TOKSCOPE_TEMPLATE_SOURCES to the folder it prints; this test does not pass \
                 without its input"
            )
        })
}

fn jinja_file(name: &str) -> String {
    let path = sources().join("models/templates").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A template kept as a C string literal in llama.cpp's tests/test-chat-template.cpp.
fn cpp_template(case_name: &str) -> String {
    let path = sources().join("tests/test-chat-template.cpp");
    let cpp = std::fs::read_to_string(&path).unwrap();
    let at = cpp
        .find(&format!("/* .name= */ \"{case_name}\""))
        .unwrap_or_else(|| panic!("{case_name} is not in {}", path.display()));
    let marker = "/* .template_str= */ \"";
    let start = at + cpp[at..].find(marker).unwrap() + marker.len();
    let mut out = String::new();
    let mut chars = cpp[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return out,
            '\\' => out.push(match chars.next().unwrap() {
                'n' => '\n',
                't' => '\t',
                'r' => '\r',
                other => other,
            }),
            c => out.push(c),
        }
    }
    panic!("{case_name}: unterminated string")
}

/// The chat template stored in a real GGUF.
fn gguf_template(path: &Path) -> String {
    match read_metadata(path).unwrap().get("tokenizer.chat_template") {
        Some(GgufValue::String(s)) => s.clone(),
        other => panic!("{} has no chat template: {other:?}", path.display()),
    }
}

const LLAMA3_SPECIALS: [&str; 4] = [
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
];
const CHATML: [&str; 2] = ["<|im_start|>", "<|im_end|>"];

fn families() -> Vec<Family> {
    let llama3 = |name, file| Family {
        name,
        template: jinja_file(file),
        bos: "<|begin_of_text|>",
        eos: "<|eot_id|>",
        specials: LLAMA3_SPECIALS.to_vec(),
        thinks: false,
    };
    vec![
        llama3(
            "Llama 3.1 Instruct",
            "meta-llama-Llama-3.1-8B-Instruct.jinja",
        ),
        llama3(
            "Llama 3.2 Instruct",
            "meta-llama-Llama-3.2-3B-Instruct.jinja",
        ),
        llama3(
            "Llama 3.3 Instruct",
            "meta-llama-Llama-3.3-70B-Instruct.jinja",
        ),
        Family {
            name: "Qwen2.5 Instruct",
            template: jinja_file("Qwen-Qwen2.5-7B-Instruct.jinja"),
            bos: "<|endoftext|>",
            eos: "<|im_end|>",
            specials: [&CHATML[..], &["<|endoftext|>"]].concat(),
            thinks: false,
        },
        Family {
            name: "Qwen3",
            template: jinja_file("Qwen-Qwen3-0.6B.jinja"),
            bos: "<|endoftext|>",
            eos: "<|im_end|>",
            specials: [&CHATML[..], &["<|endoftext|>", "<think>", "</think>"]].concat(),
            thinks: true,
        },
        Family {
            name: "DeepSeek-R1-Distill-Llama-8B",
            template: jinja_file("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja"),
            bos: "<｜begin▁of▁sentence｜>",
            eos: "<｜end▁of▁sentence｜>",
            specials: vec![
                "<｜begin▁of▁sentence｜>",
                "<｜end▁of▁sentence｜>",
                "<｜User｜>",
                "<｜Assistant｜>",
                "<think>",
                "</think>",
            ],
            thinks: true,
        },
        // Gemma 3 it's own text is in no package this machine reaches (the demo model is the
        // base model, with no template): Gemma 2 it (the same turn markers; it refuses a system
        // role) and Gemma 4 it (macros, dictsort, channels) stand for the family.
        Family {
            name: "Gemma 2 it",
            template: jinja_file("google-gemma-2-2b-it.jinja"),
            bos: "<bos>",
            eos: "<eos>",
            specials: vec!["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"],
            thinks: false,
        },
        Family {
            name: "Gemma 4 it",
            template: jinja_file("google-gemma-4-31B-it.jinja"),
            bos: "<bos>",
            eos: "<eos>",
            specials: vec!["<bos>", "<eos>", "<|turn>", "<turn|>"],
            thinks: false,
        },
        Family {
            name: "Mistral Instruct v3",
            template: cpp_template(
                "Mistral-Large-Instruct-2407 (mistralai 'v3' template; modified to have system prompt at start)",
            ),
            bos: "<s>",
            eos: "</s>",
            specials: vec!["<s>", "</s>", "[INST]", "[/INST]"],
            thinks: false,
        },
        Family {
            name: "Mistral Nemo Instruct",
            template: jinja_file("mistralai-Mistral-Nemo-Instruct-2407.jinja"),
            bos: "<s>",
            eos: "</s>",
            specials: vec!["<s>", "</s>", "[INST]", "[/INST]"],
            thinks: false,
        },
        Family {
            name: "Phi-4",
            template: cpp_template("phi-4"),
            bos: "<|endoftext|>",
            eos: "<|im_end|>",
            specials: [&CHATML[..], &["<|im_sep|>", "<|endoftext|>"]].concat(),
            thinks: false,
        },
        Family {
            name: "SmolLM2 Instruct (its real GGUF)",
            template: gguf_template(&common::instruct_model()),
            bos: "<|im_start|>",
            eos: "<|im_end|>",
            specials: CHATML.to_vec(),
            thinks: false,
        },
    ]
}

/// The conversations every family renders: (name, messages).
fn conversations(thinks: bool) -> Vec<(&'static str, Value)> {
    let mut cases = vec![
        (
            "single turn",
            json!([{"role": "user", "content": "What is the capital of France?"}]),
        ),
        (
            "system",
            json!([
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Hi"}
            ]),
        ),
        (
            "three turns",
            json!([
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello! How can I help?"},
                {"role": "user", "content": "  Grüße, 日本語 🙂 \"quoted\"\nand a second line  "}
            ]),
        ),
        (
            "three turns with a system prompt",
            json!([
                {"role": "system", "content": "Answer in French."},
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Bonjour !"},
                {"role": "user", "content": "Count to three."}
            ]),
        ),
    ];
    if thinks {
        cases.push((
            "earlier thinking",
            json!([
                {"role": "user", "content": "What is 2+2?"},
                {"role": "assistant", "content": "<think>\nTwo plus two.\n</think>\n\n4"},
                {"role": "user", "content": "And 3+3?"}
            ]),
        ));
        // As the chat keeps an earlier answer (and llama-server, vLLM): its thinking apart,
        // given to the template as `reasoning_content`; the last turn's kept, as Qwen3 keeps it.
        cases.push((
            "thinking as reasoning_content",
            json!([
                {"role": "user", "content": "What is 2+2?"},
                {"role": "assistant", "content": "4", "reasoning_content": "Two plus two."},
                {"role": "user", "content": "And 3+3?"},
                {"role": "assistant", "content": "6", "reasoning_content": "Three and three."}
            ]),
        ));
    }
    cases
}

/// A copy of the tiny synthetic model carrying `family`'s template, with its special tokens
/// (control; `<think>`/`</think>` user-defined, as the real vocabularies mark them) written
/// over the last word pieces of the vocabulary, and its BOS/EOS. Returns the file and each
/// special token's id.
fn family_gguf(dir: &Path, base: &Path, family: &Family) -> (PathBuf, Vec<(String, u32)>) {
    let header = read_metadata(base).unwrap();
    let Some(GgufValue::Array(GgufArray::String(tokens))) = header.get("tokenizer.ggml.tokens")
    else {
        panic!("no tokens")
    };
    let n = tokens.len();
    let mut ids = Vec::new();
    let mut next = n;
    for s in &family.specials {
        let id = match tokens.iter().position(|t| t == s) {
            Some(i) => i,
            None => {
                next -= 1;
                next
            }
        };
        ids.push((s.to_string(), id as u32));
    }
    let id_of = |s: &str| ids.iter().find(|(t, _)| t == s).map(|(_, id)| *id);
    let (bos, eos) = (id_of(family.bos).unwrap(), id_of(family.eos).unwrap());
    let path = dir.join(format!(
        "{}.gguf",
        family
            .name
            .replace(|c: char| !c.is_ascii_alphanumeric(), "-")
    ));
    let template = family.template.clone();
    let specials = ids.clone();
    gguf_edit::rewrite(base, &path, move |key, value| match (key, value) {
        ("tokenizer.chat_template", _) => Some(GgufValue::String(template.clone())),
        ("tokenizer.ggml.bos_token_id", _) => Some(GgufValue::U32(bos)),
        ("tokenizer.ggml.eos_token_id", _) => Some(GgufValue::U32(eos)),
        ("tokenizer.ggml.tokens", GgufValue::Array(GgufArray::String(t))) => {
            let mut t = t.clone();
            for (s, id) in &specials {
                t[*id as usize] = s.clone();
            }
            Some(GgufValue::Array(GgufArray::String(t)))
        }
        ("tokenizer.ggml.token_type", GgufValue::Array(GgufArray::I32(t))) => {
            let mut t = t.clone();
            for (s, id) in &specials {
                // 3: control; 4: user-defined (the think markers are added tokens, not control).
                t[*id as usize] = if s.contains("think") { 4 } else { 3 };
            }
            Some(GgufValue::Array(GgufArray::I32(t)))
        }
        _ => None,
    });
    (path, ids)
}

/// transformers' rendering of every case, in order: `Ok(prompt)` or `Err(its exception)`.
fn reference(cases: &[Value]) -> Vec<Result<String, String>> {
    let lib = std::env::var_os("TOKSCOPE_TRANSFORMERS_PYLIB").or_else(|| {
        let dir = Path::new(&std::env::var_os("HOME")?).join(".cache/tokscope/pylib-transformers");
        dir.is_dir().then(|| dir.into_os_string())
    });
    let Some(lib) = lib else {
        panic!(
            "transformers is not installed for the reference renderer: scripts/test.sh installs it \
             (TOKSCOPE_TRANSFORMERS_PYLIB); this test does not pass without it"
        )
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/template-reference.py");
    let mut child = std::process::Command::new("python3")
        .arg(script)
        .env("PYTHONPATH", lib)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let input = serde_json::to_vec(cases).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        stdin.write_all(&input).unwrap();
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(
        out.status.success(),
        "template-reference.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    results
        .into_iter()
        .map(|r| match r.get("prompt") {
            Some(p) => Ok(p.as_str().unwrap().to_string()),
            None => Err(r["error"].as_str().unwrap_or_default().to_string()),
        })
        .collect()
}

/// tokscope's rendering: `doctor template --json` on the family's GGUF.
fn tokscope_render(home: &Path, model: &Path, messages: &Value) -> Result<Value, String> {
    let file = home.join("messages.json");
    std::fs::write(&file, messages.to_string()).unwrap();
    let out = tokscope_cmd(home)
        .args(["doctor", "template", "--json", "-m"])
        .arg(model)
        .arg("--messages")
        .arg(&file)
        .output()
        .unwrap();
    if out.status.success() {
        Ok(serde_json::from_slice(&out.stdout).unwrap())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn every_family_renders_as_transformers_renders_it() {
    let dir = tempfile::tempdir().unwrap();
    let base = common::tiny(dir.path());
    let families = families();
    let mut cases = Vec::new();
    for family in &families {
        for (name, messages) in conversations(family.thinks) {
            cases.push(json!({
                "name": format!("{} · {name}", family.name),
                "template": family.template,
                "bos_token": family.bos,
                "eos_token": family.eos,
                "messages": messages,
                "add_generation_prompt": true,
            }));
        }
    }
    let expected = reference(&cases);
    let mut k = 0;
    let mut compared = 0;
    for family in &families {
        let (model, specials) = family_gguf(dir.path(), &base, family);
        for (name, messages) in conversations(family.thinks) {
            let label = format!("{} · {name}", family.name);
            let ours = tokscope_render(dir.path(), &model, &messages);
            match (&expected[k], ours) {
                (Ok(want), Ok(got)) => {
                    let prompt = got["prompt"].as_str().unwrap();
                    assert_eq!(prompt, want, "{label}: tokscope's prompt differs");
                    assert_eq!(got["template"], "model", "{label}: {got}");
                    // Each special token's text in the prompt is one token of it.
                    let tokens: Vec<u64> = got["tokens"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|t| t.as_u64().unwrap())
                        .collect();
                    for (text, id) in &specials {
                        let in_text = prompt.matches(text.as_str()).count();
                        let as_tokens = tokens.iter().filter(|&&t| t == u64::from(*id)).count();
                        // A leading BOS the template did not write is added by the tokenizer.
                        let added = usize::from(text == family.bos && !prompt.starts_with(text));
                        assert_eq!(
                            as_tokens,
                            in_text + added,
                            "{label}: {text} appears {in_text}× in the prompt, {as_tokens}× as token {id}"
                        );
                    }
                    compared += 1;
                }
                (Err(raised), Err(stderr)) => {
                    // The template refuses this conversation in both (Gemma's alternation rule):
                    // tokscope says so, naming the template's own words.
                    assert!(
                        stderr.contains("the template raised an exception"),
                        "{label}: transformers raised ({raised}); tokscope said: {stderr}"
                    );
                }
                (want, got) => panic!("{label}: transformers gave {want:?}, tokscope {got:?}"),
            }
            k += 1;
        }
    }
    // Most cases render (a family may refuse a system prompt, never everything).
    assert!(
        compared * 10 >= cases.len() * 8,
        "{compared} of {}",
        cases.len()
    );
}

#[test]
fn llama_cpp_heuristics_would_have_dropped_smollm2s_default_system_prompt() {
    // The reason for rendering the model's own template: llama.cpp's built-in ChatML match
    // leaves out SmolLM2's default system turn, which transformers and llama-server --jinja keep.
    let home = tempfile::tempdir().unwrap();
    let model = common::instruct_model();
    let messages = json!([{"role": "user", "content": "What is the capital of France?"}]);
    let own = tokscope_render(home.path(), &model, &messages).unwrap();
    assert!(
        own["prompt"]
            .as_str()
            .unwrap()
            .starts_with("<|im_start|>system\nYou are a helpful AI assistant named SmolLM"),
        "{own}"
    );
    let file = home.path().join("m.json");
    std::fs::write(&file, messages.to_string()).unwrap();
    let out = tokscope_cmd(home.path())
        .args(["doctor", "template", "--json", "--template", "chatml", "-m"])
        .arg(&model)
        .arg("--messages")
        .arg(&file)
        .output()
        .unwrap();
    let builtin: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        !builtin["prompt"].as_str().unwrap().contains("SmolLM"),
        "{builtin}"
    );
    assert!(
        own["prompt_tokens"].as_u64().unwrap() > builtin["prompt_tokens"].as_u64().unwrap() + 15
    );
}

#[test]
fn a_template_that_raises_loops_or_floods_is_named_and_refused() {
    let dir = tempfile::tempdir().unwrap();
    let base = common::tiny(dir.path());
    for (template, says) in [
        (
            "{{ raise_exception('Only user and assistant roles are supported') }}",
            "the template raised an exception: Only user and assistant roles are supported",
        ),
        (
            "{% for i in range(90000) %}{% for j in range(90000) %}{{ j }}{% endfor %}{% endfor %}",
            "the template ran too long",
        ),
        ("{% for %}", "syntax error"),
    ] {
        let family = Family {
            name: "hostile",
            template: template.into(),
            bos: "<|begin_of_text|>",
            eos: "<|eot_id|>",
            specials: LLAMA3_SPECIALS.to_vec(),
            thinks: false,
        };
        let (model, _) = family_gguf(dir.path(), &base, &family);
        // `--template model` asks for the model's own: the error, named, and a non-zero exit.
        let out = tokscope_cmd(dir.path())
            .args(["doctor", "template", "--template", "model", "-m"])
            .arg(&model)
            .timeout(std::time::Duration::from_secs(60))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{template}: {stderr}");
        assert!(stderr.contains(says), "{template}: {stderr}");
        // `auto` falls back (llama.cpp's match, else completion) and says why.
        let out = tokscope_cmd(dir.path())
            .args(["doctor", "template", "-m"])
            .arg(&model)
            .timeout(std::time::Duration::from_secs(60))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{template}: {stderr}");
        assert!(
            stderr.contains("cannot be rendered") && stderr.contains(says),
            "{template}: {stderr}"
        );
    }
}
