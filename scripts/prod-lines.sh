#!/usr/bin/env bash
# Production lines of src/: every line of every `src/**/*.rs` outside the items marked
# `#[cfg(test)]` (a test module, a test-only helper: from the attribute to the `;` or the brace
# that closes the item, the rule tests/layout.rs uses). Usage: scripts/prod-lines.sh [REV...]
# (default: the work tree). Prints "REV LINES" per revision; with two, their difference.
set -euo pipefail
cd "$(dirname "$0")/.."
count() {
  python3 - "$1" <<'PY'
import subprocess, sys
rev = sys.argv[1]
def files():
    if rev == "worktree":
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "src"],
                             capture_output=True, text=True, check=True).stdout.split()
        for path in out:
            if path.endswith(".rs"):
                try:
                    yield open(path, encoding="utf-8").read()
                except FileNotFoundError:
                    pass
    else:
        out = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "src"],
                             capture_output=True, text=True, check=True).stdout.split()
        for path in out:
            if path.endswith(".rs"):
                yield subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True,
                                     text=True, check=True).stdout
def without_tests(src):
    out, rest, mark = [], src, "#[cfg(test)]"
    while (at := rest.find(mark)) >= 0:
        out.append(rest[:at])
        item = rest[at + len(mark):]
        depth, end = 0, len(item)
        for i, ch in enumerate(item):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth = max(depth - 1, 0)
                if depth == 0:
                    end = i + 1
                    break
            elif ch == ";" and depth == 0:
                end = i + 1
                break
        rest = item[end:]
    out.append(rest)
    return "".join(out)
print(sum(len(without_tests(s).splitlines()) for s in files()))
PY
}
[ "$#" = 0 ] && set -- worktree
declare -a totals=()
for rev in "$@"; do
  n=$(count "$rev")
  totals+=("$n")
  echo "$rev $n"
done
if [ "${#totals[@]}" = 2 ]; then
  echo "difference $((totals[1] - totals[0]))"
fi
