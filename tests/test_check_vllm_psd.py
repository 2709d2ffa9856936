"""PSD inside vLLM as a held-out judge of `psdlab check-vllm` (validation.vllm_check.psd_check),
without vLLM: the committed run (no PSD runs) re-judged says PSD was not measured and keeps
every existing figure; the default PSD ks; the options' one-line errors; the prediction's
contention (none: the simulator's own run of the workload; more: slower)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from psdlab.cli import main
from psdlab.validation.vllm_check import harness as vr
from psdlab.validation.vllm_check.psd_check import psd_ks

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "results" / "vllm" / "check_vllm"


def _table(md: str) -> list[str]:
    return [line for line in md.splitlines() if line.startswith("| ")]


def test_committed_run_without_psd_rejudged(tmp_path, capsys):
    """--reuse of the committed run (its runs.json has no PSD runs): the report says PSD was
    not measured; every figure of its table is the measured report's, byte for byte."""
    out = tmp_path / "run"
    out.mkdir()
    for name in ("check_vllm.json", "runs.json"):
        shutil.copyfile(COMMITTED / name, out / name)
    assert main(["check-vllm", "-o", str(out), "--reuse", "--json"]) == 0
    capsys.readouterr()
    doc = json.loads((out / "check_vllm-sd-k4.json").read_text())
    assert doc["psd"]["measured"] is False and doc["psd"]["rows"] == []
    assert "not measured" in doc["psd"]["why"]
    md = (out / "check_vllm-sd-k4.md").read_text()
    assert "PSD inside vLLM: not measured in this run" in md
    assert _table(md) == _table((COMMITTED / "check_vllm.md").read_text())
    committed = json.loads((COMMITTED / "check_vllm.json").read_text())
    assert doc["held_out"] == committed["held_out"] and doc["summary"] == committed["summary"]
    assert "psd_runs" not in doc                 # the measured run's keys as they were


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 16), st.lists(st.integers(1, 16), max_size=4))
def test_default_psd_ks_are_the_calibrated_k_and_one_other(k, ks):
    got = psd_ks(k, ks)
    assert got[0] == k and got[1] != k and 1 <= got[1] <= 18
    if any(x != k for x in ks):
        assert got[1] == next(x for x in ks if x != k)


def test_planned_psd_ks_follow_the_calibration():
    s = vr.CheckSettings(target_core=-1, client_core=-1)
    assert vr.plan(s).psd_ks == (4, 2)                       # default calibration sd-k4
    assert vr.plan(vr.CheckSettings(target_core=-1, client_core=-1,
                                    calibration="sd-k2")).psd_ks == (2, 4)
    assert vr.plan(vr.settings_from_options("0.5,1", "4,2", psd_ks="none", target_core=-1,
                                            client_core=-1)).psd_ks == ()
    assert vr.plan(vr.settings_from_options("0.5,1", "4,2", psd_ks="3,3", target_core=-1,
                                            client_core=-1)).psd_ks == (3,)


@pytest.mark.parametrize("extra, field", [(["--psd-ks", "0"], "--psd-ks"),
                                          (["--psd-ks", "x"], "--psd-ks"),
                                          (["--psd-batch", "0"], "--psd-batch"),
                                          (["--probe-reps", "1"], "--probe-reps")])
def test_bad_psd_options_name_the_field(tmp_path, capsys, extra, field):
    assert main(["check-vllm", "-o", str(tmp_path / "o"), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and field in err


def _fit():
    from psdlab.validation.serving_results.calibration import BenchFit
    return BenchFit(
        target_cost={"name": "affine", "base": 0.02, "per_seq": 0.002, "per_token": 0.001,
                     "per_context": 0.0},
        drafter_cost={"name": "affine", "base": 0.004, "per_seq": 0.0005, "per_token": 0.0002,
                      "per_context": 0.0},
        acceptance={"name": "positional", "rates": [0.7, 0.5]},
        acceptance_per_position=(0.7, 0.35), intervals={}, interval_method="", notes=(),
        inputs=("bench/sd-k2@1-r1.json",), server={"m": 64}, k=2)


def _contention(c: float):
    from psdlab.analysis.contention import Contention
    return Contention(target=c, drafter=c, overlap_target=1.0, overlap_drafter=1.0,
                      host_saving_s=0.0, source="probe", why="test")


def test_prediction_without_contention_is_the_simulators_run_and_contention_slows_it():
    from psdlab.analysis.formats.vllm_bench_write import bench_result_from_trace
    from psdlab.sim.simulation import simulate
    from psdlab.validation.vllm_check.check_results import PSD_FIGURES
    from psdlab.validation.vllm_check.psd_check import predict_psd, psd_sim_config
    fit = _fit()
    rows = [(0.0, 20 + 3 * i, 16, str(i)) for i in range(8)]
    trace = simulate(psd_sim_config(fit, rows, 2, 2, (1.0, 1.0))).trace
    doc = bench_result_from_trace(trace, detailed=False)
    alone = predict_psd(fit, trace, _contention(0.0))
    assert alone == {f: doc[f] for f in PSD_FIGURES}
    shared = predict_psd(fit, trace, _contention(0.3))
    slow_drafter = predict_psd(fit, trace, _contention(0.0), draft_scale=3.0)
    for other in (shared, slow_drafter):
        assert other["output_throughput"] is not None and alone["output_throughput"] is not None
        assert other["mean_tpot_ms"] is not None and alone["mean_tpot_ms"] is not None
        assert other["output_throughput"] < alone["output_throughput"]
        assert other["mean_tpot_ms"] > alone["mean_tpot_ms"]


def test_drafter_scale_is_the_probes_solo_drafting_over_the_fits():
    from psdlab.analysis.contention import CorunProbe, CorunShape
    from psdlab.validation.vllm_check.psd_check import drafter_scale
    fit = _fit()
    d = fit.drafter_cost or {}
    fitted = sum(d["base"] + d["per_seq"] * 4 + d["per_token"] * 4 for _ in range(2))
    shape = CorunShape(4, 2, 64, (0.1,) * 3, (2 * fitted, 2.5 * fitted, 1.5 * fitted),
                       (0.1,) * 3, (0.1,) * 3, (0.05,) * 3, (0.0,) * 3, (0.0,) * 3)
    probe = CorunProbe("cpu-cores", ("cpu:1", "cpu:0"), (shape,))
    assert drafter_scale(fit, probe) == pytest.approx(2.0)
