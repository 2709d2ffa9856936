"""`psdlab check-vllm` small: vLLM's own server (AR, and draft-model SD with k = 2) on the tiny
random model, driven by vLLM's own ``vllm bench serve``; the files it writes, the spec-decode
counters of the SD run, and that the calibration on SD (the default: every rate of the SD server
with the largest k) predicted the AR configuration; PSD inside vLLM (offline, at the calibrated
k = 2 and k = 4, twice each) predicted from that calibration and the co-run probe, its rows in
the report, no PSD trace among the fit's inputs, and ``--reuse`` judging it again from
``runs.json`` alone."""
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
           "--ks", "2", "--rates", "4", "--repeats", "2", "--num-prompts", "6",
           "--output-len", "8", "--bootstrap", "2", "--startup-timeout", "400",
           "--psd-batch", "2", "--probe-reps", "2"]
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
    assert all("sd-k2@4-r" in path for path in doc["fit"]["inputs"])
    ar = rows["ar@4"]
    for key in ("mean_ttft_ms", "mean_tpot_ms", "output_throughput"):
        assert ar["predicted"][key] > 0 and ar["measured"][key] > 0
        assert ar["error"][key] == pytest.approx(ar["predicted"][key] / ar["measured"][key] - 1)
    assert ar["predicted"]["spec_decode_acceptance_length"] is None
    assert [s["name"] for s in doc["servers"]] == ["sd-k2", "ar"]
    assert all(r["load_before"] for r in doc["runs"])
    assert "| ar@4 | held-out" in (run_dir / "check_vllm.md").read_text()


PSD_CONFIGS = ("psd-k2-m2", "psd-k4-m2")


def test_psd_rows_held_out_and_never_calibration_input(run_dir):
    from psdlab.validation.vllm_check.check_results import PSD_FIGURES
    doc = json.loads((run_dir / "check_vllm.json").read_text())
    psd = doc["psd"]
    assert psd["measured"] is True and psd["probe"] == "psd/corun_probe.json"
    assert [r["config"] for r in psd["rows"]] == list(PSD_CONFIGS)   # calibrated k, one other
    traces = [t for r in psd["rows"] for t in r["traces"]]
    assert len(traces) == 4 and all((run_dir / t).is_file() for t in traces)
    # no PSD trace (nor the probe) went into the fit: its inputs are the calibration's files
    assert not any("psd" in path for path in doc["fit"]["inputs"])
    assert not set(traces) & set(doc["fit"]["inputs"])
    for r in psd["rows"]:
        assert r["not_predicted"] is None and r["repeats"] == 2
        for key in PSD_FIGURES:
            meas, pred = r["measured"][key], r["predicted"][key]
            assert meas > 0 and pred > 0
            assert r["error"][key] == pytest.approx(pred / meas - 1)
            reps = [x[key] for x in r["measured_repeats"]]
            assert r["noise"][key] == pytest.approx((max(reps) - min(reps)) / (sum(reps) / 2))
    assert psd["held_out"]["judged"] == 2 * len(PSD_FIGURES)
    assert psd["contention"]["source"] == "probe"
    md = (run_dir / "check_vllm.md").read_text()
    for config in PSD_CONFIGS:
        assert f"| {config} (PSD in vLLM, offline) | held-out (x2) | mean e2e latency" in md
    assert "PSD inside vLLM (offline, held out: predicted before it ran" in md


def test_psd_prediction_does_not_read_the_runs_timings(run_dir, tmp_path):
    """The PSD prediction is the same whatever the PSD run's timings were: only its workload
    (prompt and output lengths) is read."""
    from dataclasses import replace

    from psdlab.analysis.contention import fit_corun
    from psdlab.analysis.trace_read import read_trace
    from psdlab.validation.corun_file import read_corun_file
    from psdlab.validation.serving_results.calibration import fit_from_bench
    from psdlab.validation.vllm_check.psd_check import predict_psd
    doc = json.loads((run_dir / "check_vllm.json").read_text())
    fit = fit_from_bench([str(run_dir / "bench" / "sd-k2@4-r1.json")],
                         metrics_before=str(run_dir / "metrics" / "sd-k2@4-r1-before.txt"),
                         metrics_after=str(run_dir / "metrics" / "sd-k2@4-r1-after.txt"),
                         bootstrap=2, drafter_to_target_ratio=doc["drafter_to_target_ratio"])
    contention = fit_corun(read_corun_file(run_dir / "psd" / "corun_probe.json"))
    trace = read_trace(run_dir / doc["psd"]["rows"][0]["traces"][0])
    slow = replace(trace, requests=[replace(r, finish=10 * r.finish + 5, admitted=-r.admitted,
                                            first_token=10 * r.first_token + 5)
                                    for r in reversed(trace.requests)], steps=[])
    assert predict_psd(fit, trace, contention) == predict_psd(fit, slow, contention)


def test_reuse_judges_psd_again_from_the_bundle(run_dir, tmp_path):
    import shutil
    out = tmp_path / "again"
    out.mkdir()
    for name in ("check_vllm.json", "runs.json"):
        shutil.copyfile(run_dir / name, out / name)
    proc = subprocess.run([sys.executable, "-m", "psdlab", "check-vllm", "-o", str(out),
                           "--reuse", "--bootstrap", "2", "--json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    again = json.loads((out / "check_vllm-sd-k2.json").read_text())
    first = json.loads((run_dir / "check_vllm.json").read_text())
    assert again["psd"]["rows"] == first["psd"]["rows"]
    assert again["rows"] == first["rows"]
