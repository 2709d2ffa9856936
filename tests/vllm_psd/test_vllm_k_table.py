"""`psdlab plan --vllm-k-table`'s file is what vLLM accepts: its own parser of
``num_speculative_tokens_per_batch_size`` (vllm/v1/spec_decode/dynamic/utils.py, Dynamic SD,
vLLM PR #32374) takes it, and the dense batch-size -> k lookup it builds gives each swept batch
size the k the plan chose (skipped when vLLM is not installed)."""
from __future__ import annotations

import contextlib
import io
import json
import os
import sys

import pytest

pytest.importorskip("vllm")
dyn = pytest.importorskip("vllm.v1.spec_decode.dynamic.utils")

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from plan_util import small_plan  # noqa: E402

from psdlab.cli import main  # noqa: E402


def test_plan_k_table_is_read_by_vllm(tmp_path):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["plan", str(small_plan(tmp_path)), "--csv", str(tmp_path / "p.csv"),
                     "--no-png", "--json", "--vllm-k-table", str(tmp_path / "k.json")]) == 0
    doc = json.loads(out.getvalue())
    section = next(s["data"] for s in doc["sections"] if s["name"] == "vllm_k_table")
    conf = json.loads((tmp_path / "k.json").read_text())
    sched = conf["num_speculative_tokens_per_batch_size"]
    assert dyn.validate_and_normalize_dynamic_sd_schedule(sched) == [tuple(e) for e in sched]
    lookup = dyn.build_dynamic_sd_schedule_lookup(sched, 64, conf["num_speculative_tokens"])
    for choice in section["choices"]:
        assert lookup[choice["m"]] == choice["k"]
    assert lookup[64] == section["choices"][-1]["k"]       # past the last m: its k
