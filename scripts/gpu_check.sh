#!/usr/bin/env bash
# The device check for a GPU machine with torch but no installs or network (../shared/GPU.md's
# recipe): the CUDA tests (graphs == eager == dynamic passes, fused graphs too, the k-pass graph
# == k single passes; the engine on graphs, fused-k and graphs-k equals AR),
# then `psdlab bench-gpu`. What comes back goes to $RESULTS: env.txt, cuda_tests.log,
# bench.log, summary.json, summary.md, traces.tgz.
#   RESULTS=$OUT bash scripts/gpu_check.sh                   # on the GPU machine
#   DEVICE=cpu PY=.venv/bin/python bash scripts/gpu_check.sh  # its dry run here
# PASSES (default auto: fused-k on a GPU, dynamic on CPU) is bench-gpu's --passes: its pass table
# has, per pass kind (AR decode, verify, one drafting pass, the drafter's k passes), psdlab's
# default against the floor, Hugging Face eager, psdlab eager and (on a GPU) graphs uncompiled.
# A dry run of the fused passes with a small size:
#   DEVICE=cpu PASSES=fused-k TESTS=tests/test_fused_passes.py \
#     BENCH_ARGS="--sections passes --repeats 2 --batches 2" PY=.venv/bin/python bash scripts/gpu_check.sh
# Needs .gpu-run/whl/ (simpy and gguf wheels, downloaded as ../shared/GPU.md says).
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 RESULTS=${RESULTS:-/tmp/gpu-results}
PY=${PY:-python3}
DEVICE=${DEVICE:-cuda:0}
mkdir -p "$RESULTS"
if [ "$DEVICE" != cpu ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu-run/whl/*.whl \
    || exit 3
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$RESULTS/env.txt"
fi
# psdlab/<layer> are committed links: the checkout's root is enough on the path
export PYTHONPATH=/tmp/site:$PWD
"$PY" -c "import torch, psdlab.runtime.pass_graphs as g; print('torch', torch.__version__, \
torch.version.cuda, g.__file__)" | tee -a "$RESULTS/env.txt"
timeout "${TEST_TIMEOUT:-150}" "$PY" -m pytest -q -p no:cacheprovider ${TESTS:-tests/test_cuda_graphs.py \
  tests/test_static_pass.py} 2>&1 | tail -n 30 | tee "$RESULTS/cuda_tests.log"
timeout "${BENCH_TIMEOUT:-420}" "$PY" -m psdlab bench-gpu --device "$DEVICE" -o /tmp/bench-gpu \
  --passes "${PASSES:-auto}" --budget-s "${BUDGET:-330}" ${BENCH_ARGS:-} 2>&1 | tee "$RESULTS/bench.log"
cp /tmp/bench-gpu/summary.json /tmp/bench-gpu/summary.md "$RESULTS/" 2>/dev/null
tar -czf "$RESULTS/traces.tgz" -C /tmp bench-gpu
ls -la "$RESULTS"
