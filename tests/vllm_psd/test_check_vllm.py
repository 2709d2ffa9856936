"""`psdlab check-vllm` small: vLLM's own server (AR, and draft-model SD with k = 2) on the tiny
random model, driven by vLLM's own ``vllm bench serve``; the files it writes, the spec-decode
counters of the SD run, and that the calibration on SD (the default: every rate of the SD server
with the largest k) predicted the AR configuration."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm")

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not {0, 1} <= set(os.sched_getaffinity(0)),
                                 reason="needs CPU cores 0 (client) and 1 (target)")]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("check_vllm")
    cmd = [sys.executable, "-m", "psdlab", "check-vllm", "-o", str(out), "--tiny", "--json",
           "--ks", "2", "--rates", "4", "--repeats", "1", "--num-prompts", "6",
           "--output-len", "8", "--bootstrap", "2", "--startup-timeout", "400"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    json.loads(proc.stdout.strip().splitlines()[-1])        # --json: one object
    return out


def test_files_written(run_dir):
    for name in ("check_vllm.json", "check_vllm.md", "prompts.json", "bench/sd-k2@4-r1.json",
                 "bench/ar@4-r1.json", "metrics/sd-k2@4-r1-before.txt",
                 "metrics/sd-k2@4-r1-after.txt", "logs/server-sd-k2.log", "logs/server-ar.log"):
        assert (run_dir / name).is_file(), name
    assert not list(run_dir.glob("*.tmp"))


def test_bench_results_are_vllms_and_counters_moved(run_dir):
    from psdlab.analysis.formats import vllm_bench, vllm_metrics
    sd = vllm_bench.read(run_dir / "bench" / "sd-k2@4-r1.json")
    ar = vllm_bench.read(run_dir / "bench" / "ar@4-r1.json")
    assert sd.completed == ar.completed == 6 and sd.failed == ar.failed == 0
    assert sd.output_lens == ar.output_lens == (8,) * 6          # EOS ignored, same requests
    assert sd.input_lens == ar.input_lens
    delta = vllm_metrics.read_delta(run_dir / "metrics" / "sd-k2@4-r1-before.txt",
                                    run_dir / "metrics" / "sd-k2@4-r1-after.txt")
    assert delta.num_drafts > 0 and delta.num_draft_tokens == 2 * delta.num_drafts
    assert len(delta.accepted_per_pos) == 2
    assert sd.acceptance_length == pytest.approx(
        1 + delta.num_accepted_tokens / delta.num_drafts)


def test_calibrated_on_sd_and_predicted_ar(run_dir):
    doc = json.loads((run_dir / "check_vllm.json").read_text())
    assert doc["calibration"] == "sd-k2"            # the default: every rate of the largest k
    assert doc["calibration_configs"] == ["sd-k2@4"]
    rows = {r["config"]: r for r in doc["rows"]}
    assert rows["sd-k2@4"]["role"] == "calibration" and rows["ar@4"]["role"] == "held-out"
    # only the calibration run's files went into the fit
    assert "bench/sd-k2@4-r1.json" in doc["fit"]["inputs"]
    assert all("sd-k2@4-r1" in path for path in doc["fit"]["inputs"])
    ar = rows["ar@4"]
    for key in ("mean_ttft_ms", "mean_tpot_ms", "output_throughput"):
        assert ar["predicted"][key] > 0 and ar["measured"][key] > 0
        assert ar["error"][key] == pytest.approx(ar["predicted"][key] / ar["measured"][key] - 1)
    assert ar["predicted"]["spec_decode_acceptance_length"] is None
    assert [s["name"] for s in doc["servers"]] == ["sd-k2", "ar"]
    assert all(r["load_before"] for r in doc["runs"])
    assert "| ar@4 | held-out" in (run_dir / "check_vllm.md").read_text()
