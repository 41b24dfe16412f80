//! The CUDA folder's launcher (scripts/cuda-launcher.sh, copied to `bin/tokscope` by
//! scripts/build-cuda.sh): where it finds libcudart.so.13 / libcublas.so.13, in which order, and
//! what it passes on. Fake folder trees with empty files; no CUDA needed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

const LIBS: [&str; 3] = ["libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13"];

fn launcher_source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/cuda-launcher.sh")
}

/// Held while this binary writes a script and while it runs one. Another test thread forking
/// while a script is still open for writing leaves the write descriptor in its child until that
/// child's exec; exec of the script then fails with ETXTBSY ("Text file busy"), here or inside
/// the launcher. That is the test harness's race, not the launcher's, and retrying the outer
/// exec does not cover the inner one: so no fork happens while a script is being written.
static FORK_LOCK: Mutex<()> = Mutex::new(());

fn locked() -> std::sync::MutexGuard<'static, ()> {
    FORK_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `cmd` to completion with no script being written meanwhile.
fn run(cmd: &mut Command) -> Output {
    let _guard = locked();
    cmd.output().unwrap()
}

/// A relocatable folder as build-cuda.sh writes it: bin/tokscope (the launcher) and
/// libexec/tokscope (here a script that prints what it was given), lib/ empty.
fn folder(root: &Path) -> PathBuf {
    let _guard = locked();
    let dir = root.join("tokscope-cuda");
    fs::create_dir_all(dir.join("bin")).unwrap();
    fs::create_dir_all(dir.join("libexec")).unwrap();
    fs::create_dir_all(dir.join("lib")).unwrap();
    let launcher = dir.join("bin/tokscope");
    fs::copy(launcher_source(), &launcher).unwrap();
    fs::set_permissions(&launcher, fs::Permissions::from_mode(0o755)).unwrap();
    let inner = dir.join("libexec/tokscope");
    fs::write(
        &inner,
        "#!/bin/sh\necho \"libs=$TOKSCOPE_CUDA_LIBS\"\necho \"ldpath=$LD_LIBRARY_PATH\"\necho \"args=$*\"\n",
    )
    .unwrap();
    fs::set_permissions(&inner, fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

fn put_libs(dir: &Path, libs: &[&str]) {
    fs::create_dir_all(dir).unwrap();
    for lib in libs {
        fs::write(dir.join(lib), b"").unwrap();
    }
}

fn lookup(folder: &Path, site: &[&Path], system: &[&Path]) -> String {
    let out = launch(folder, site, system, true, &[]);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn launch(
    folder: &Path,
    site: &[&Path],
    system: &[&Path],
    lookup_only: bool,
    args: &[&str],
) -> std::process::Output {
    let join = |dirs: &[&Path]| {
        dirs.iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(":")
    };
    let mut cmd = Command::new(folder.join("bin/tokscope"));
    cmd.args(args)
        .env("TOKSCOPE_CUDA_SITE_DIRS", join(site))
        .env("TOKSCOPE_CUDA_SYSTEM_DIRS", join(system))
        .env_remove("TOKSCOPE_CUDA_LIB_DIR")
        .env_remove("LD_LIBRARY_PATH");
    if lookup_only {
        cmd.env("TOKSCOPE_CUDA_LOOKUP_ONLY", "1");
    }
    run(&mut cmd)
}

#[test]
fn order_is_folder_then_pip_then_system() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = folder(tmp.path());
    let site_a = tmp.path().join("site-a");
    let site_b = tmp.path().join("site-b");
    let system = tmp.path().join("usr-local-cuda/lib64");
    put_libs(&site_b.join("nvidia/cu13/lib"), &LIBS);
    put_libs(&system, &LIBS);
    fs::create_dir_all(&site_a).unwrap();

    // Nothing in the folder: the first site-packages that has nvidia/cu13/lib wins.
    let pip = site_b.join("nvidia/cu13/lib");
    assert_eq!(
        lookup(&dir, &[&site_a, &site_b], &[&system]),
        format!("pip:{}", pip.display())
    );
    // In the folder: the folder wins over both.
    put_libs(&dir.join("lib"), &LIBS);
    assert_eq!(
        lookup(&dir, &[&site_b], &[&system]),
        format!("bundle:{}", dir.join("lib").display())
    );
    // Neither folder nor pip: the system CUDA.
    for lib in LIBS {
        fs::remove_file(dir.join("lib").join(lib)).unwrap();
    }
    assert_eq!(
        lookup(&dir, &[&site_a], &[&tmp.path().join("absent"), &system]),
        format!("system:{}", system.display())
    );
    // Nowhere.
    assert_eq!(lookup(&dir, &[&site_a], &[]), "none:");
}

#[test]
fn a_folder_missing_one_library_is_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = folder(tmp.path());
    // cuBLAS without cuBLASLt in the folder and in the first site-packages: not usable.
    put_libs(&dir.join("lib"), &LIBS[..2]);
    let site_a = tmp.path().join("site-a");
    put_libs(&site_a.join("nvidia/cu13/lib"), &LIBS[1..]);
    let site_b = tmp.path().join("site-b");
    put_libs(&site_b.join("nvidia/cu13/lib"), &LIBS);
    assert_eq!(
        lookup(&dir, &[&site_a, &site_b], &[]),
        format!("pip:{}", site_b.join("nvidia/cu13/lib").display())
    );
}

#[test]
fn the_choice_is_passed_on_to_the_binary() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = folder(tmp.path());
    let site = tmp.path().join("site");
    let lib = site.join("nvidia/cu13/lib");
    put_libs(&lib, &LIBS);
    let out = launch(&dir, &[&site], &[], false, &["doctor", "gpu"]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains(&format!("libs=pip:{}", lib.display())),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("ldpath={}", lib.display())),
        "{stdout}"
    );
    assert!(stdout.contains("args=doctor gpu"), "{stdout}");
}

#[test]
fn nothing_found_is_said_and_the_binary_still_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = folder(tmp.path());
    let out = launch(&dir, &[], &[], false, &["--version"]);
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("libcudart.so.13"), "{stderr}");
    assert!(stderr.contains("TOKSCOPE_CUDA_LIB_DIR"), "{stderr}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("libs=none:"), "{stdout}");
}

#[test]
fn an_explicit_folder_overrides_the_search() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = folder(tmp.path());
    put_libs(&dir.join("lib"), &LIBS);
    let out = run(Command::new(dir.join("bin/tokscope"))
        .env("TOKSCOPE_CUDA_LOOKUP_ONLY", "1")
        .env("TOKSCOPE_CUDA_LIB_DIR", "/opt/my-cuda/lib"));
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        "env:/opt/my-cuda/lib"
    );
}

#[test]
fn a_symlink_to_the_launcher_finds_its_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = folder(tmp.path());
    put_libs(&dir.join("lib"), &LIBS);
    let link = tmp.path().join("tokscope");
    std::os::unix::fs::symlink(dir.join("bin/tokscope"), &link).unwrap();
    let out = run(Command::new(&link)
        .env("TOKSCOPE_CUDA_LOOKUP_ONLY", "1")
        .env("TOKSCOPE_CUDA_SITE_DIRS", "")
        .env("TOKSCOPE_CUDA_SYSTEM_DIRS", "")
        .env_remove("TOKSCOPE_CUDA_LIB_DIR"));
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        format!("bundle:{}", dir.join("lib").display())
    );
}
