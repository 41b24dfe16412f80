#!/usr/bin/env python3
"""The whole `cargo test --release --locked` as scripts/test.sh runs it, with its cost shown:
each test binary's wall time, then the ten slowest tests.

The same tests as `cargo test`, in the same order, stopping at the first failing binary: the
test binaries `cargo test --no-run` builds (the library's unit tests, the binary's, each
`[[test]]`), each run from the package root as cargo runs it, then the doc tests
(`cargo test --doc`). Each binary's wall time is this script's clock around it. A test's own
time is libtest's `--report-time` (`test NAME ... ok <1.234s>`): an unstable libtest option on
a stable toolchain, unlocked for the test binaries only (`RUSTC_BOOTSTRAP=1` in their
environment, never in rustc's, so nothing is rebuilt). A libtest that refuses it is run
without it, and then only the binaries' times are shown.
"""
import json
import os
import re
import subprocess
import sys
import time

CARGO = ["cargo", "test", "--release", "--locked"]
TIMED = re.compile(r"^test (\S+) \.\.\. (ok|FAILED|ignored)\S* <([0-9.]+)s>")
REFUSED = "only accepted on the nightly compiler"


def test_binaries():
    """(name, path) of every test binary `cargo test` would run, in cargo's order."""
    out = subprocess.run(
        CARGO + ["--no-run", "--message-format=json-render-diagnostics"],
        stdout=subprocess.PIPE,
        check=True,
        text=True,
    ).stdout
    found = []
    for line in out.splitlines():
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg.get("profile", {}).get("test"):
            continue
        target = msg["target"]
        kind = "lib" if "lib" in target["kind"] else target["kind"][0]
        order = {"lib": 0, "bin": 1}.get(kind, 2)
        found.append((order, f"{target['name']} ({kind})", msg["executable"]))
    # cargo's order: the library's unit tests, the binary's, then the test targets by name.
    return [(name, path) for _, name, path in sorted(found)]


def run(name, argv, env, tests):
    """Runs one binary with its output passed through; returns (exit code, seconds)."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    refused = False
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        refused |= REFUSED in line
        m = TIMED.match(line)
        if m:
            tests.append((float(m.group(3)), f"{name}: {m.group(1)}"))
    return proc.wait(), time.monotonic() - start, refused


def main():
    binaries = test_binaries()
    env = dict(os.environ, CARGO_MANIFEST_DIR=os.getcwd())
    timed_env = dict(env, RUSTC_BOOTSTRAP="1")
    per_binary, tests, code = [], [], 0
    for name, path in binaries:
        print(f"     Running {name} ({os.path.relpath(path)})", flush=True)
        argv = [path, "-Z", "unstable-options", "--report-time"]
        code, took, refused = run(name, argv, timed_env, tests)
        if refused:
            code, took, _ = run(name, [path], env, tests)
        per_binary.append((took, name))
        if code != 0:
            break
    if code == 0:
        print("   Doc-tests", flush=True)
        code, took, _ = run("doc tests", CARGO + ["--doc"], env, tests)
        per_binary.append((took, "doc tests (cargo test --doc, its build included)"))
    print("\n==> wall time of each test binary (s)")
    for took, name in per_binary:
        print(f"{took:9.2f}  {name}")
    print(f"{sum(t for t, _ in per_binary):9.2f}  in all")
    if tests:
        print("\n==> the ten slowest tests (s, libtest's --report-time)")
        for took, name in sorted(tests, reverse=True)[:10]:
            print(f"{took:9.3f}  {name}")
    else:
        print("\n(no per-test times: this libtest refused --report-time)")
    return code


if __name__ == "__main__":
    sys.exit(main())
