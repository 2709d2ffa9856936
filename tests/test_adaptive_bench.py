"""bench-adaptive's pieces that need no models: the cost fit from calibration phases, the
acceptance per position, the judgement of the measured rows, and argument errors."""
from __future__ import annotations

import pytest

from psdlab.analysis.trace import Phase, RunInfo, StepRecord, Trace, Verified
from psdlab.cli import main
from psdlab.validation.adaptive.adaptive_results import BenchPlan, ConfigRun, FitPoints, LoadRun
from psdlab.validation.adaptive.bench_adaptive import (_acceptance, _fit_costs, _judge,
                                                       adaptive_sim_config)


def _trace(rows):
    steps = []
    t = 0.0
    for i, (kind, dev, n, tokens, dt, verified) in enumerate(rows):
        steps.append(StepRecord(index=i, start=t, end=t + dt, phases=(
            Phase(kind=kind, device=dev, start=t, end=t + dt, seqs=n, tokens=tokens),),
            verified=verified))
        t += dt
    return Trace(run=RunInfo(mode="sd-sep", k=3, m=4, source="runtime"), steps=steps)


def test_fit_recovers_affine_costs():
    c0, c_seq, c_tok, d0, d_seq = 0.03, 0.004, 0.002, 0.01, 0.003
    rows = []
    for n in (1, 2, 4):
        for k in (0, 3):
            rows.append(("verify", "cpu:1", n, n * (k + 1), c0 + c_seq * n + c_tok * n * (k + 1),
                         ()))
        rows.append(("draft", "cpu:0", n, 3 * n, 3 * (d0 + d_seq * n), ()))
    rows += [("prefill", "cpu:0", 1, 50, 0.05 + 0.001 * 50, ()),
             ("prefill", "cpu:0", 2, 120, 0.05 + 0.001 * 120, ()),
             ("prefill", "cpu:1", 2, 120, 9.0, ())]          # the target's: ignored
    costs, points = _fit_costs([_trace(rows)], "cpu:0")
    assert (costs.c0, costs.c_seq, costs.c_tok) == pytest.approx((c0, c_seq, c_tok), rel=1e-6)
    assert (costs.d0, costs.d_seq) == pytest.approx((d0, d_seq), rel=1e-6)
    assert (costs.p0, costs.p_tok) == pytest.approx((0.05, 0.001), rel=1e-6)
    assert points == FitPoints(verify_points=6, draft_points=3, prefill_points=2)


def test_acceptance_per_position_from_verified_rows():
    rows = [("verify", "cpu:1", 2, 8, 0.1, (Verified(0, 3, 3, 4), Verified(1, 3, 1, 2)))]
    assert _acceptance([_trace(rows)], 3) == pytest.approx((1.0, 0.5, 1.0))


def _cfg(tok_s, p99=0.1, out=(1, 2)):
    return ConfigRun(tok_s=tok_s, tpot_p50=p99 / 2, tpot_p99=p99, wall_s=1.0,
                     outputs=(tuple(out),))


def test_judgement_of_the_rows():
    pred = {"offline": "ar", "0.5": "sd3"}
    rows = [LoadRun("offline", None, {
                "ar": _cfg(10), "sd3": _cfg(8), "psd3": _cfg(5), "adaptive": _cfg(9.8)}, ()),
            LoadRun("low", 0.5, {
                "ar": _cfg(3), "sd3": _cfg(4), "psd3": _cfg(2), "adaptive": _cfg(3.9,
                                                                             out=(1, 3))}, ())]
    out = _judge(rows, pred, ["ar", "sd3", "psd3", "adaptive"])
    r0, r1 = out.rows
    assert (r0.winner_measured, r0.winner_predicted) == ("ar", "ar")
    assert (r1.winner_measured, r1.winner_predicted) == ("sd3", "sd3")
    assert r0.adaptive_vs_best == pytest.approx(0.98)
    assert out.goal_097_every_load is True
    assert out.winners_predicted_right == 2
    # adaptive 0.98 and 0.975 of the best; ar 1.0 and 0.75; sd3 0.8 and 1.0
    assert out.mean_normalised_tok_s["adaptive"] == pytest.approx((0.98 + 0.975) / 2)
    assert out.adaptive_ahead_of_every_fixed_overall is True
    assert r1.lossless["adaptive"] is False       # its outputs differ from AR's
    assert r0.lossless["sd3"] is True


def test_sim_config_of_the_pair():
    from psdlab.analysis.adaptive_policy import AffineCosts
    cfg = adaptive_sim_config(BenchPlan(), AffineCosts(c0=0.03, c_tok=0.002, d0=0.01),
                              (0.9, 0.8, 0.7), 60.0, {"k_choices": [3]})
    assert cfg.server.mode == "adaptive" and cfg.server.m == 4
    assert cfg.acceptance["rates"] == [0.9, 0.8, 0.7]


@pytest.mark.parametrize("argv, msg", [
    (["--k", "0"], "--k: must be in [1, 16]"),
    (["--m", "1"], "--m: must be in [2, 64]"),
    (["--requests", "0"], "--requests: must be in [1, 1000]"),
])
def test_bad_arguments_are_one_line_errors(tmp_path, capsys, argv, msg):
    assert main(["bench-adaptive", "-o", str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"psdlab bench-adaptive: error: {msg}, got {argv[1]}"


@pytest.mark.parametrize("argv, msg", [
    (["--mode", "sd", "--policy", "{}"], "--policy: only with --mode adaptive"),
    (["--mode", "adaptive", "--policy", '{"hold": 0}'], "adaptive.hold: must be in [1, 10000]"),
    (["--mode", "adaptive", "--policy", "[1]"], "--policy: expected a JSON object"),
    (["--mode", "adaptive", "--policy-costs", '{"c9": 1}'], "--policy-costs: unknown key 'c9'"),
])
def test_run_adaptive_settings_are_checked_before_models_load(tmp_path, capsys, argv, msg):
    assert main(["run", *argv, "--trace", str(tmp_path / "t.jsonl")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"psdlab run: error: {msg}") and "\n" not in err


def test_judgement_pools_the_two_passes():
    pred = {"offline": "ar"}
    rows = [LoadRun("offline", None, {
                "ar": _cfg(10), "sd3": _cfg(8), "adaptive": _cfg(9)}, ()),
            LoadRun("offline (repeat)", None, {
                "ar": _cfg(8), "sd3": _cfg(8), "adaptive": _cfg(9)}, ())]
    out = _judge(rows, pred, ["ar", "sd3", "adaptive"])
    pooled = out.rows[0].pooled
    assert pooled is not None and out.rows[1].pooled is None
    assert pooled.tok_s == {"ar": 9.0, "sd3": 8.0, "adaptive": 9.0}
    assert pooled.adaptive_vs_best == pytest.approx(1.0)
    assert pooled.spread["ar"] == pytest.approx(2 / 9)
    assert out.max_pass_spread == pytest.approx(2 / 9)
    assert out.loads == 1 and out.adaptive_min_vs_best == pytest.approx(0.9)
