//! The model picker on real parts: discovery over a fake home holding a Hugging Face cache
//! (snapshot links into blobs), an ollama store (manifest + blob), an LM Studio folder, a
//! `model_dirs` folder, tokscope's data dir, a symlink loop and files that must be skipped, all
//! with real GGUF headers written by the synthetic model writer; then the real binary in tmux:
//! Ctrl+O, filter, Enter switches, a turn on the new model, and Tab completing a path.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::tmux::{bin, send, status_line, wait_idle_after_answers, Tmux, READY};
use tokscope::discover::{discover, Discovery, Limits, Origin, Roots};
use tokscope::synth::TensorType;

/// The fake home's places, filled with models; returns the roots to search.
struct FakeHome {
    home: PathBuf,
    roots: Roots,
    unreadable: PathBuf,
}

fn hf_model(hub: &Path, repo: &str, file: &str, ty: TensorType, seed: u64) -> PathBuf {
    let repo_dir = hub.join(format!("models--{}", repo.replace('/', "--")));
    let blobs = repo_dir.join("blobs");
    std::fs::create_dir_all(&blobs).unwrap();
    let blob_name = format!("{seed:0>40}");
    let written = common::synth(&blobs, "tmp.gguf", "tiny", ty, seed);
    std::fs::rename(&written, blobs.join(&blob_name)).unwrap();
    let snap = repo_dir.join("snapshots/0123abcd");
    std::fs::create_dir_all(&snap).unwrap();
    symlink(format!("../../blobs/{blob_name}"), snap.join(file)).unwrap();
    std::fs::create_dir_all(repo_dir.join("refs")).unwrap();
    std::fs::write(repo_dir.join("refs/main"), "0123abcd").unwrap();
    snap.join(file)
}

fn fake_home(root: &Path) -> FakeHome {
    let home = root.join("home");
    let hub = home.join(".cache/huggingface/hub");
    hf_model(&hub, "tok/picker-test", "b-picked.gguf", TensorType::F32, 2);

    // ollama: a GGUF blob named by its manifest, a GGUF blob without one, and a non-GGUF blob.
    let ollama = home.join(".ollama/models");
    let blobs = ollama.join("blobs");
    std::fs::create_dir_all(&blobs).unwrap();
    let digest = "ab".repeat(32);
    let m = common::synth(&blobs, "tmp.gguf", "tiny", TensorType::Q8_0, 3);
    std::fs::rename(&m, blobs.join(format!("sha256-{digest}"))).unwrap();
    let orphan = "cd".repeat(32);
    let m = common::synth(&blobs, "tmp.gguf", "tiny", TensorType::F16, 4);
    std::fs::rename(&m, blobs.join(format!("sha256-{orphan}"))).unwrap();
    std::fs::write(
        blobs.join(format!("sha256-{}", "ef".repeat(32))),
        "{{ .Prompt }}",
    )
    .unwrap();
    let manifest_dir = ollama.join("manifests/registry.ollama.ai/library/tinyllama");
    std::fs::create_dir_all(&manifest_dir).unwrap();
    std::fs::write(
        manifest_dir.join("latest"),
        format!(
            r#"{{"schemaVersion":2,"config":{{"digest":"sha256:{}"}},"layers":[
              {{"mediaType":"application/vnd.ollama.image.template","digest":"sha256:{}"}},
              {{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:{digest}"}}]}}"#,
            "00".repeat(32),
            "ef".repeat(32)
        ),
    )
    .unwrap();

    // LM Studio: publisher/repo/file.
    let lms = home.join(".lmstudio/models");
    let pub_dir = lms.join("pub");
    std::fs::create_dir_all(&pub_dir).unwrap();
    common::synth(&pub_dir, "c-lm.gguf", "tiny", TensorType::Q8_0, 5);

    // model_dirs: a model, a loop back to the folder, a link to its parent, a link into the
    // HF tree (the same file twice is listed once), a non-GGUF `.gguf`, a truncated GGUF, an
    // unreadable GGUF, a dangling link and a FIFO named `.gguf` (opening it would block).
    let mine = root.join("mine");
    let sub = mine.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    let a = common::synth(&mine, "d-mine.gguf", "tiny", TensorType::F32, 6);
    symlink(&mine, sub.join("loop")).unwrap();
    symlink("..", sub.join("up")).unwrap();
    symlink(&hub, mine.join("hub-link")).unwrap();
    std::fs::write(mine.join("notes.gguf"), "these are not weights\n").unwrap();
    let bytes = std::fs::read(&a).unwrap();
    std::fs::write(sub.join("truncated.gguf"), &bytes[..bytes.len() / 3]).unwrap();
    let unreadable = common::synth(&sub, "locked.gguf", "tiny", TensorType::F32, 7);
    std::fs::set_permissions(&unreadable, std::fs::Permissions::from_mode(0o000)).unwrap();
    symlink(root.join("gone.gguf"), mine.join("dangling.gguf")).unwrap();
    let fifo = std::process::Command::new("mkfifo")
        .arg(mine.join("pipe.gguf"))
        .status()
        .unwrap();
    assert!(fifo.success());

    let data = root.join("data");
    std::fs::create_dir_all(data.join("models")).unwrap();
    common::synth(
        &data.join("models"),
        "e-data.gguf",
        "tiny",
        TensorType::F32,
        8,
    );

    let roots = Roots {
        tokscope: vec![data],
        config_dirs: vec![mine],
        hugging_face: vec![hub],
        lm_studio: vec![lms, home.join(".cache/lm-studio/models")],
        ollama: vec![ollama],
        in_use: None,
    };
    FakeHome {
        home,
        roots,
        unreadable,
    }
}

/// Folders under `root` (itself included), links not followed.
fn real_folders(root: &Path) -> usize {
    match std::fs::symlink_metadata(root) {
        Ok(m) if m.is_dir() => {
            1 + std::fs::read_dir(root)
                .unwrap()
                .map(|e| real_folders(&e.unwrap().path()))
                .sum::<usize>()
        }
        _ => 0,
    }
}

fn names(d: &Discovery) -> Vec<(Origin, String)> {
    d.models
        .iter()
        .map(|m| (m.origin, m.name.clone()))
        .collect()
}

#[test]
fn discovery_finds_every_place_from_headers_and_skips_loops_and_bad_files() {
    let dir = tempfile::tempdir().unwrap();
    let fake = fake_home(dir.path());
    let found = discover(&fake.roots, Limits::default());
    // Root reads a mode-000 file anyway: then it is a model like the others.
    let locked_readable = std::fs::File::open(&fake.unreadable).is_ok();
    let mut expected = vec![
        (Origin::Tokscope, "e-data.gguf".to_string()),
        (Origin::ConfigDir, "d-mine.gguf".to_string()),
        // Reached first through the `hub-link` in model_dirs: listed once, there.
        (Origin::ConfigDir, "b-picked.gguf".to_string()),
        (Origin::LmStudio, "pub/c-lm.gguf".to_string()),
        (
            Origin::Ollama,
            format!("sha256-{} (no manifest)", &"cd".repeat(6)),
        ),
        (Origin::Ollama, "tinyllama:latest".to_string()),
    ];
    if locked_readable {
        expected.push((Origin::ConfigDir, "locked.gguf".to_string()));
    }
    let mut want = expected.clone();
    want.sort();
    let mut got = names(&found);
    got.sort();
    assert_eq!(got, want, "{found:#?}");
    assert_eq!(found.cut_short, None);
    // The loop (`sub/loop`, `sub/up`) and the second way into the HF cache (`hub-link`) cost
    // nothing: every real folder is read once.
    let real_dirs = [
        &fake.roots.tokscope,
        &fake.roots.config_dirs,
        &fake.roots.hugging_face,
        &fake.roots.lm_studio,
    ]
    .into_iter()
    .flatten()
    .map(|r| real_folders(r))
    .sum::<usize>();
    assert_eq!(found.folders_read, real_dirs, "{found:#?}");
    // notes.gguf and truncated.gguf (and locked.gguf when it cannot be read).
    assert_eq!(
        found.skipped,
        if locked_readable { 2 } else { 3 },
        "{found:#?}"
    );

    // Every row comes from the header.
    let tiny = found
        .models
        .iter()
        .find(|m| m.name == "tinyllama:latest")
        .unwrap();
    assert_eq!(tiny.architecture, "llama");
    assert_eq!(tiny.quantization, "Q8_0");
    assert!(tiny.synthetic);
    assert_eq!(
        tiny.size_bytes,
        std::fs::metadata(&tiny.path).unwrap().len()
    );
    let header = tokscope::gguf::read_metadata(&tiny.path).unwrap();
    let n: u64 = header
        .tensors
        .iter()
        .map(|t| t.dims.iter().product::<u64>())
        .sum();
    assert_eq!(tiny.n_params, n);
    assert!(n > 0);
    let f16 = found
        .models
        .iter()
        .find(|m| m.name.contains("no manifest"))
        .unwrap();
    assert_eq!(f16.quantization, "F16");

    // Without model_dirs the HF file is found in the HF cache, named from its repo folder, and
    // its path is the snapshot link (what the user would type).
    let hf_only = Roots {
        config_dirs: Vec::new(),
        ..fake.roots.clone()
    };
    let found = discover(&hf_only, Limits::default());
    let hf = found
        .models
        .iter()
        .find(|m| m.origin == Origin::HuggingFace)
        .unwrap();
    assert_eq!(hf.name, "tok/picker-test/b-picked.gguf");
    assert!(
        hf.path.ends_with("snapshots/0123abcd/b-picked.gguf"),
        "{hf:?}"
    );
    assert_eq!(hf.quantization, "F32");

    // A model_dirs folder holding the ollama store hides none of ollama's named models.
    let over_ollama = Roots {
        config_dirs: vec![fake.home.join(".ollama")],
        ..fake.roots.clone()
    };
    let found = discover(&over_ollama, Limits::default());
    assert!(
        found
            .models
            .iter()
            .any(|m| m.origin == Origin::Ollama && m.name == "tinyllama:latest"),
        "{found:#?}"
    );
}

#[test]
fn the_model_in_use_is_listed_first_and_marked_and_its_folder_is_searched() {
    // The issue's case: Ctrl+O listed "4 of 4" without the file loaded with -m, which sat in
    // a folder no search root covers.
    let dir = tempfile::tempdir().unwrap();
    let fake = fake_home(dir.path());
    let elsewhere = dir.path().join("elsewhere/models");
    std::fs::create_dir_all(elsewhere.join("deeper")).unwrap();
    let loaded = common::synth(&elsewhere, "z-loaded.gguf", "tiny", TensorType::F32, 21);
    common::synth(&elsewhere, "a-sibling.gguf", "tiny", TensorType::F32, 22);
    common::synth(
        &elsewhere.join("deeper"),
        "c-deep.gguf",
        "tiny",
        TensorType::F32,
        23,
    );
    let without = discover(&fake.roots, Limits::default());
    assert!(
        !without
            .models
            .iter()
            .any(|m| m.path.starts_with(&elsewhere)),
        "{without:#?}"
    );
    let roots = Roots {
        in_use: Some(loaded.clone()),
        ..fake.roots.clone()
    };
    let found = discover(&roots, Limits::default());
    let first = &found.models[0];
    assert_eq!(first.path, loaded, "{found:#?}");
    assert!(first.in_use);
    assert_eq!(found.models.iter().filter(|m| m.in_use).count(), 1);
    // Its folder's other files are listed, its subfolders are not entered.
    assert!(
        found
            .models
            .iter()
            .any(|m| m.name == "a-sibling.gguf" && m.origin == Origin::ModelDir),
        "{found:#?}"
    );
    assert!(!found.models.iter().any(|m| m.name == "c-deep.gguf"));
    // The other places are still searched.
    assert!(found.models.len() > without.models.len(), "{found:#?}");
}

#[test]
fn discovery_stops_at_its_deadline_and_its_cap_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let fake = fake_home(dir.path());
    let late = discover(
        &fake.roots,
        Limits {
            deadline: Duration::ZERO,
            max_models: 100,
        },
    );
    assert!(late.models.is_empty());
    let why = late.cut_short.unwrap();
    assert!(why.contains("stopped after 0.0 s"), "{why}");
    let capped = discover(
        &fake.roots,
        Limits {
            deadline: Duration::from_secs(60),
            max_models: 2,
        },
    );
    assert_eq!(capped.models.len(), 2);
    let why = capped.cut_short.unwrap();
    assert!(why.contains("stopped at 2 models"), "{why}");
}

/// The real binary in tmux, in the fake home: Ctrl+O lists the models, typing filters, Enter
/// switches (the chat says so and the next message is answered), Ctrl+A on another row runs
/// A/B, Esc closes the list, and Tab completes a path after `/model ` down to an LM Studio file.
#[test]
fn the_picker_switches_the_model_in_the_real_terminal_and_tab_completes_paths() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let fake = fake_home(dir.path());
    let a = common::synth(dir.path(), "a-start.gguf", "tiny", TensorType::F32, 1);
    let config = dir.path().join("config");
    std::fs::create_dir_all(&config).unwrap();
    let mine = dir.path().join("mine");
    std::fs::write(
        config.join("config.toml"),
        format!("model_dirs = [\"{}\"]\n", mine.display()),
    )
    .unwrap();
    let data = dir.path().join("data");
    let hf_home = fake.home.join(".cache/huggingface");
    let ollama = fake.home.join(".ollama/models");
    let env: &[(&str, &Path)] = &[
        ("HOME", &fake.home),
        ("HF_HOME", &hf_home),
        ("OLLAMA_MODELS", &ollama),
        ("TOKSCOPE_DATA_DIR", &data),
        ("TOKSCOPE_CONFIG_DIR", &config),
    ];
    let tmux = Tmux::start("picker", 160, 40, env);
    tmux.wait_for("the shell prompt", Duration::from_secs(10), |s| {
        s.contains("e2e$")
    });
    tmux.type_text(&format!(
        "{} chat -m {} -t 1 --temp 0 -n 8; echo exit=$?",
        bin(),
        a.display()
    ));
    tmux.keys(&["Enter"]);
    tmux.wait_for("the model to be ready", READY, |s| {
        status_line(s).contains("ready")
    });

    tmux.keys(&["C-o"]);
    let screen = tmux.wait_for("the list", Duration::from_secs(20), |s| {
        s.contains("Models: Enter switches") && s.contains(" found in ")
    });
    for row in [
        "d-mine.gguf",
        "b-picked.gguf",
        "pub/c-lm.gguf",
        "tinyllama:latest",
    ] {
        assert!(screen.contains(row), "{row}: {screen}");
    }
    assert!(screen.contains("synth"), "{screen}");
    assert!(
        screen.contains("Ctrl+A/Alt+A"),
        "the footer names the A/B key: {screen}"
    );
    // `a` is typed into the filter, it runs nothing.
    tmux.type_text("picked");
    tmux.wait_for("the filter", Duration::from_secs(10), |s| {
        s.contains("filter: picked") && s.contains("1 of ")
    });
    tmux.keys(&["Enter"]);
    tmux.wait_for("the switch", Duration::from_secs(30), |s| {
        s.contains("switched to b-picked.gguf") && status_line(s).contains("ready")
    });
    send(&tmux, "hello on b");
    let screen = wait_idle_after_answers(&tmux, 1);
    assert!(!screen.contains("Models:"), "the overlay is gone: {screen}");

    // Ctrl+A runs A/B with the chosen file (the answer to "hello on b" again, from d-mine).
    tmux.keys(&["C-o"]);
    tmux.wait_for("the list again", Duration::from_secs(20), |s| {
        s.contains(" found in ")
    });
    tmux.type_text("d-mine");
    tmux.wait_for("the filter", Duration::from_secs(10), |s| {
        s.contains("filter: d-mine") && s.contains("1 of ")
    });
    tmux.keys(&["C-a"]);
    let screen = tmux.wait_for("the A/B screen", Duration::from_secs(60), |s| {
        s.contains("A/B: the last prompt") && s.contains("B · d-mine.gguf")
    });
    assert!(!screen.contains("Models:"), "{screen}");
    tmux.keys(&["Escape"]);
    tmux.wait_for("the chat", Duration::from_secs(20), |s| {
        !s.contains("A/B: the last prompt") && status_line(s).contains("ready")
    });

    // Esc closes a third opening without switching.
    tmux.keys(&["C-o"]);
    tmux.wait_for("the list again", Duration::from_secs(20), |s| {
        s.contains(" found in ")
    });
    tmux.keys(&["Escape"]);
    tmux.wait_for("the chat", Duration::from_secs(10), |s| {
        !s.contains("Models:") && status_line(s).contains("ready")
    });

    // Tab: `~/.lm` → `~/.lmstudio/`, then `m` → `models/`, → `pub/`, → `c-lm.gguf`.
    tmux.type_text("/model ~/.lm");
    for expect in [
        "/model ~/.lmstudio/",
        "/model ~/.lmstudio/models/",
        "/model ~/.lmstudio/models/pub/",
        "/model ~/.lmstudio/models/pub/c-lm.gguf",
    ] {
        if expect.ends_with("models/") {
            tmux.type_text("m");
        }
        tmux.keys(&["Tab"]);
        tmux.wait_for(expect, Duration::from_secs(10), |s| s.contains(expect));
    }
    tmux.keys(&["Enter"]);
    tmux.wait_for("the second switch", Duration::from_secs(30), |s| {
        s.contains("switched to c-lm.gguf") && status_line(s).contains("ready")
    });
    send(&tmux, "and on c?");
    wait_idle_after_answers(&tmux, 2);
    tmux.keys(&["C-q"]);
    let screen = tmux.wait_for("the exit", Duration::from_secs(20), |s| {
        common::tmux::exit_line(s).is_some()
    });
    assert_eq!(common::tmux::exit_line(&screen), Some("exit=0"), "{screen}");
}
