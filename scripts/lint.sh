#!/usr/bin/env bash
# Lint and type-check: ruff over the repository; mypy and basedpyright over the package
# (`psdlab.*`, reached by path: psdlab/<layer> links to the layer's folder) and the scripts
# beside it. CI runs this after the set-up and before the tests; developers run it as is.
# Exits non-zero when any tool finds something; prints each tool's summary line last.
set -uo pipefail
cd "$(dirname "$0")/.."
venv="${PSDLAB_VENV:-.venv}"

status=0
echo "== ruff check ."
ruff_out=$("$venv/bin/ruff" check . 2>&1) || status=1
printf '%s\n' "$ruff_out"
echo "== mypy: the package (psdlab.*), benchmarks/*.py, scripts/*.py"
# benchmarks/ and scripts/ are not packages: each file is checked as a module of its own name.
mypy_out=$("$venv/bin/mypy" psdlab benchmarks/*.py scripts/*.py 2>&1) || status=1
printf '%s\n' "$mypy_out"
echo "== basedpyright: imports resolved by path (every psdlab.* name is a file)"
pyright_out=$("$venv/bin/basedpyright" --pythonpath "$venv/bin/python" 2>&1) || status=1
printf '%s\n' "$pyright_out" | tail -n 40
echo "== lint summary"
echo "ruff: $(printf '%s\n' "$ruff_out" | grep -E '^(All checks passed|Found [0-9]+ error)' | tail -n 1)"
echo "mypy: $(printf '%s\n' "$mypy_out" | tail -n 1)"
echo "basedpyright: $(printf '%s\n' "$pyright_out" | tail -n 1)"
exit $status
