#!/usr/bin/env bash
# Lint and type-check: ruff over the repository, mypy over the package (as `psdlab.*`) and the
# scripts beside it. CI runs this after the set-up and before the tests; developers run it as is.
# Exits non-zero when either tool finds something; prints each tool's summary line last.
#
# Why a link tree: pyproject's package-dir makes ./sim the package `psdlab.sim` (and so on), and
# the editable install reaches it through an import hook that static tools cannot follow. So
# this script keeps build/typecheck/psdlab: a link to each entry of ./psdlab plus one folder link
# per package-dir entry (psdlab/sim -> ../../../sim, ...), read from pyproject.toml each run.
# [tool.mypy] mypy_path points there, so a plain `mypy -p psdlab` works once this has run, and
# new modules in the layout folders are seen without rebuilding anything.  mypy names files by
# the tree's paths; they are written back as the real ones (build/typecheck/psdlab/sim/x.py ->
# sim/x.py) so that the output points at the files to edit.
set -uo pipefail
cd "$(dirname "$0")/.."
venv="${PSDLAB_VENV:-.venv}"
py="$venv/bin/python"

# Build (or refresh) the tree; print the sed script that maps its paths back.
rewrite=$("$py" - <<'EOF'
import os
import tomllib
from pathlib import Path

root = Path.cwd()
dirs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
tree = root / "build" / "typecheck"
links: dict[Path, Path] = {}
for pkg, folder in dirs.items():
    dest = tree.joinpath(*pkg.split("."))
    if pkg == "psdlab":           # the top package holds the others: link its entries one by one
        for entry in (root / folder).iterdir():
            if entry.name != "__pycache__":
                links[dest / entry.name] = entry
    else:
        links[dest] = root / folder
for dest, src in links.items():
    dest.parent.mkdir(parents=True, exist_ok=True)
    rel = os.path.relpath(src, dest.parent)
    if os.path.islink(dest) and os.readlink(dest) == rel:
        continue
    if os.path.islink(dest):
        dest.unlink()
    dest.symlink_to(rel, target_is_directory=src.is_dir())
for link in (tree / "psdlab").iterdir():      # entries removed from ./psdlab since the last run
    if link.is_symlink() and link not in links:
        link.unlink()
# Longest first, so psdlab/sim/ is rewritten before psdlab/.
for pkg, folder in sorted(dirs.items(), key=lambda kv: -len(kv[0])):
    print(f"s#^build/typecheck/{pkg.replace('.', '/')}/#{folder}/#")
EOF
) || { echo "lint: could not build build/typecheck" >&2; exit 2; }

status=0
echo "== ruff check ."
ruff_out=$("$venv/bin/ruff" check . 2>&1) || status=1
printf '%s\n' "$ruff_out"
echo "== mypy: the package (psdlab.*), benchmarks/*.py, scripts/*.py"
# benchmarks/ and scripts/ are not packages: each file is checked as a module of its own name.
mypy_out=$("$venv/bin/mypy" build/typecheck/psdlab benchmarks/*.py scripts/*.py 2>&1) || status=1
printf '%s\n' "$mypy_out" | sed -e "$rewrite"
echo "== lint summary"
echo "ruff: $(printf '%s\n' "$ruff_out" | grep -E '^(All checks passed|Found [0-9]+ error)' | tail -n 1)"
echo "mypy: $(printf '%s\n' "$mypy_out" | tail -n 1)"
exit $status
