"""Calibration from traces: recovery of known coefficients, CIs that cover, extrapolation in k
and batch size, acceptance fits, the model file, and the `psdlab calibrate` CLI (including
truncated, malformed and wrong-schema traces)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from psdlab.analysis.trace import (Phase, RequestRecord, RunInfo, StepRecord, Trace, Verified,
                            write_trace)
from psdlab.cli import main
from psdlab.validation.acceptance.fit import beta_moments, fit_acceptance, positional_rates
from psdlab.validation.phase_model import design, predict_phases
from psdlab.validation.calibrate import calibrate
from psdlab.validation.nnls_fit import fit_nonneg, identifiable_columns
from psdlab.sim.costs.fitted import read_fit_file, write_fit
from psdlab.validation.model_file import (acceptance_spec, model_parts, role_coefficients,
                                          role_cost_spec)

# the "true" machine the synthetic traces come from (seconds)
VERIFY = {"base": 4e-3, "per_seq": 3e-4, "per_token": 5e-4, "per_context": 2e-6}
DRAFT = {"base": 1e-3, "per_token": 1.5e-4, "per_context": 5e-7}   # per one-token forward
PREFILL = {"base": 5e-3, "per_seq": 1e-4, "per_token": 3e-4, "per_context": 0.0}
POSITIONAL = (0.85, 0.7, 0.6, 0.5, 0.45)


def _verify_time(seqs, tokens, ctx):
    v = VERIFY
    return v["base"] + v["per_seq"] * seqs + v["per_token"] * tokens + v["per_context"] * ctx


def _draft_time(seqs, k, ctx, phase=0.0):
    d = DRAFT
    return phase + sum(d["base"] + d["per_token"] * seqs + d["per_context"] * (ctx + j * seqs)
                       for j in range(k))


def _accepted(rng, k, alpha=None):
    """Accepted count of a k-token draft: per-position rates, or a geometric alpha."""
    a = 0
    while a < k and rng.random() < (POSITIONAL[a] if alpha is None else alpha):
        a += 1
    return a


def make_trace(k: int, m: int = 8, n_steps: int = 300, seed: int = 0, noise: float = 0.03,
               beta: tuple[float, float] | None = None, prefill_every: int = 10,
               draft_phase: float = 0.0) -> Trace:
    """A hand-built SD trace with known costs (multiplicative Gaussian noise) and acceptance
    (positional rates, or per-request alpha ~ Beta(mean, concentration))."""
    rng = np.random.default_rng(seed)
    n_req = 4 * m
    alphas = (rng.beta(beta[0] * beta[1], (1 - beta[0]) * beta[1], n_req)
              if beta else [None] * n_req)
    def jit():
        return 1 + noise * rng.standard_normal()

    steps, t = [], 0.0
    for i in range(n_steps):
        phases = []
        start = t
        if prefill_every and i % prefill_every == 0:
            ps, pt = int(rng.integers(1, 5)), int(rng.integers(50, 1500))
            d = (PREFILL["base"] + PREFILL["per_seq"] * ps + PREFILL["per_token"] * pt) * jit()
            phases.append(Phase("prefill", "cpu:0", t, t + d, ps, pt))
            t += d
        seqs = int(rng.integers(1, m + 1))
        ctx = int(rng.integers(40, 900)) * seqs
        d = _draft_time(seqs, k, ctx, draft_phase) * jit()
        phases.append(Phase("draft", "cpu:1", t, t + d, seqs, seqs * k, ctx))
        t += d
        d = _verify_time(seqs, seqs * (k + 1), ctx) * jit()
        phases.append(Phase("verify", "cpu:0", t, t + d, seqs, seqs * (k + 1), ctx))
        t += d
        reqs = rng.choice(n_req, size=seqs, replace=False)
        rows = []
        for r in reqs:
            a = _accepted(rng, k, alphas[r])
            rows.append(Verified(int(r), k, a, a + 1))
        steps.append(StepRecord(i, start, t, tuple(phases), tuple(rows)))
    requests = [RequestRecord(r, 0.0, 0.0, 0.01, t, 100, 50) for r in range(n_req)]
    run = RunInfo(mode="sd", k=k, m=m, source="test",
                  devices={"target": "cpu:0", "drafter": "cpu:1"})
    return Trace(run=run, steps=steps, requests=requests)


def _covers(fit, true: dict, slack: float = 1.7):
    """True within the CI widened by `slack` (1.7 x the 95% half-width ~ a 99.9% interval, so
    a correct fit fails this with probability ~0.1% per coefficient, whatever the seed)."""
    c = fit.coefficients()
    for i, name in enumerate(fit.names):
        if name not in true:
            continue
        half = max(fit.ci_high[i] - c[name], c[name] - fit.ci_low[i])
        assert abs(c[name] - true[name]) <= slack * half + 1e-12, (name, c[name], true[name],
                                                                    half)


# ---------------------------------------------------------------------------- regression core

def test_recovers_known_coefficients_within_ci():
    traces = [make_trace(2, seed=1), make_trace(4, seed=2)]
    cal = calibrate(traces, seed=0)
    verify, draft, prefill = cal.costs["verify"], cal.costs["draft"], cal.costs["prefill"]
    assert all(verify.identified) and all(prefill.identified[:3])
    _covers(verify, VERIFY)
    _covers(draft, DRAFT)
    _covers(prefill, {k: v for k, v in PREFILL.items() if k != "per_context"})
    # the intervals are informative, not vacuous: base and per-token within +-25%
    for fit, true in ((verify, VERIFY), (draft, DRAFT)):
        for term in ("base", "per_token"):
            i = fit.names.index(term)
            assert fit.ci_high[i] - fit.ci_low[i] < 0.5 * true[term]
    assert verify.heldout_error < 0.05 and draft.heldout_error < 0.05
    assert not cal.warnings


def test_fixed_cost_per_drafting_phase_is_told_from_the_per_pass_base(tmp_path):
    """Drafting = per_phase + k passes.  Two k identify both; the model file keeps per_phase
    as the drafter's phase_overhead and the simulator adds it once per drafting phase, so a
    fit at k = 2 and 4 predicts k = 5; one k leaves it at 0, with a warning."""
    phase = 4e-3
    traces = [make_trace(2, seed=1, draft_phase=phase), make_trace(4, seed=2, draft_phase=phase)]
    cal = calibrate(traces, seed=0)
    draft = cal.costs["draft"]
    _covers(draft, {**DRAFT, "per_phase": phase})
    path = str(tmp_path / "m.json")
    write_fit(path, *model_parts(cal))
    from psdlab.sim.costs import make_cost_model
    from psdlab.sim.costs.calibrated import calibrated_cost
    fitted = make_cost_model(role_cost_spec(path, "drafter"))
    assert fitted.phase_overhead == pytest.approx(draft.coefficients()["per_phase"])
    assert calibrated_cost(path, "drafter", scale=2.0).phase_overhead == pytest.approx(
        2 * fitted.phase_overhead)
    six = make_trace(5, seed=3, draft_phase=phase, noise=0.0)
    pred = predict_phases(cal, [six])["draft"]
    assert np.allclose(pred[0], pred[1], rtol=0.03)
    one = calibrate([make_trace(3, seed=4, draft_phase=phase)])
    assert one.costs["draft"].coefficients().get("per_phase", 0.0) == 0.0
    assert any("one k only" in w for w in one.warnings)
    write_fit(str(tmp_path / "one.json"), *model_parts(one))
    roles = read_fit_file(str(tmp_path / "one.json"), "model").doc["roles"]
    assert "phase_overhead" not in roles["drafter"]


def test_planner_adds_the_phase_overhead_once_per_drafting_phase(tmp_path):
    from psdlab.sim.sim_config import config_from_dict
    from psdlab.sim.simulation import simulate
    doc = {"format": "psdlab.cost-fit", "version": 1, "meta": {}, "roles": {
        "t": {"kind": "affine", "coef": {"base": 0.01, "per_seq": 0.0, "per_token": 0.0,
                                         "per_context": 0.0}},
        "d": {"kind": "affine", "coef": {"base": 0.002, "per_seq": 0.0, "per_token": 0.0,
                                         "per_context": 0.0}, "phase_overhead": 0.005}}}
    (tmp_path / "f.json").write_text(json.dumps(doc))
    raw = {"seed": 0, "requests": 3, "server": {"mode": "sd-sep", "k": 3, "m": 3},
           "target": {"name": "t", "cost": {"name": "fitted", "path": str(tmp_path / "f.json"),
                                            "role": "t"}},
           "drafter": {"name": "d", "cost": {"name": "fitted", "path": str(tmp_path / "f.json"),
                                             "role": "d"}},
           "acceptance": {"name": "geometric", "alpha": 0.5},
           "workload": {"name": "offline", "prompt": {"name": "fixed", "value": 5},
                        "output": {"name": "fixed", "value": 12}}}
    drafts = [p.end - p.start for s in simulate(config_from_dict(raw)).trace.steps
              for p in s.phases if p.kind == "draft"]
    assert drafts and np.allclose(drafts, 0.005 + 3 * 0.002)
    bad = dict(doc)
    bad["roles"] = dict(doc["roles"], d=dict(doc["roles"]["d"], phase_overhead=-1))
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    raw["drafter"]["cost"]["path"] = str(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="phase_overhead"):
        simulate(config_from_dict(raw))


def test_confidence_intervals_cover_at_about_95_percent():
    rng = np.random.default_rng(7)
    true = np.array([2.0, 0.5, 0.1])
    hits, reps = 0, 200
    for _ in range(reps):
        X = np.column_stack([np.ones(40), rng.integers(1, 16, 40), rng.uniform(0, 50, 40)])
        y = X @ true * (1 + 0.05 * rng.standard_normal(40))
        fit = fit_nonneg(X, y, ("a", "b", "c"), holdout=0)
        hits += fit.ci_low[1] <= true[1] <= fit.ci_high[1]
    assert 0.89 <= hits / reps <= 0.99


@settings(deadline=None, max_examples=30)
@given(st.lists(st.floats(0.0, 5.0), min_size=3, max_size=3), st.integers(0, 10_000))
def test_noise_free_data_is_fitted_exactly_and_never_negative(coef, seed):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(30), rng.integers(1, 20, 30), rng.uniform(0, 100, 30)])
    true = np.array(coef)
    true[0] += 0.1                       # keep every y > 0
    fit = fit_nonneg(X, X @ true, ("a", "b", "c"), holdout=0.2, seed=seed)
    assert np.allclose(fit.coef, true, rtol=1e-6, atol=1e-8)
    assert min(fit.coef) >= 0 and all(lo <= c <= hi for lo, c, hi in
                                      zip(fit.ci_low, fit.coef, fit.ci_high))


def test_negative_truth_is_clamped_at_zero():
    rng = np.random.default_rng(3)
    X = np.column_stack([np.ones(50), rng.uniform(0, 10, 50)])
    y = 10 - 0.3 * X[:, 1]               # decreasing: the slope wants to be negative
    fit = fit_nonneg(X, y, ("a", "b"))
    assert fit.coef[1] == 0 and fit.coef[0] > 0 and fit.ci_low[1] == 0


def test_collinear_column_is_reported_not_identifiable():
    seqs = np.arange(1, 21, dtype=float)
    X = np.column_stack([np.ones(20), 3 * seqs, seqs])       # tokens = 3 * seqs (one k)
    assert identifiable_columns(X).tolist() == [True, True, False]
    cal = calibrate([make_trace(3, seed=4)])
    verify = cal.costs["verify"]
    assert dict(zip(verify.names, verify.identified))["per_seq"] is False
    assert any("per_seq not identifiable" in n for n in cal.notes)


def test_bad_fit_inputs_are_one_line_errors():
    with pytest.raises(ValueError, match="holdout"):
        fit_nonneg(np.ones((5, 1)), np.ones(5), ("a",), holdout=1.5)
    with pytest.raises(ValueError, match="> 0"):
        fit_nonneg(np.ones((3, 1)), np.array([1.0, 0.0, 1.0]), ("a",))
    with pytest.raises(ValueError, match="at least one trace"):
        calibrate([])


def test_heldout_error_above_ten_percent_warns(tmp_path, capsys):
    trace = make_trace(2, seed=5, noise=0.25)
    cal = calibrate([trace])
    assert cal.costs["verify"].heldout_error > 0.10
    assert any(w.startswith("verify: held-out error") for w in cal.warnings)
    path = tmp_path / "noisy.jsonl"
    write_trace(path, trace)
    assert main(["calibrate", str(path), "-o", str(tmp_path / "m.json"),
                 "--no-acceptance-selection"]) == 0
    assert "warning: verify: held-out error" in capsys.readouterr().err


# ---------------------------------------------------------------------------- extrapolation

def _rel_errors(cal, traces):
    out = {}
    for name, (pred, meas) in predict_phases(cal, traces).items():
        out[name] = (float(np.mean(np.abs(pred - meas) / meas)),
                     float(abs(pred.sum() - meas.sum()) / meas.sum()))
    return out


def test_fit_at_k_2_and_4_predicts_k_3_and_5():
    cal = calibrate([make_trace(2, seed=10), make_trace(4, seed=11)])
    for k in (3, 5):
        err = _rel_errors(cal, [make_trace(k, seed=20 + k)])
        for name in ("verify", "draft"):
            mean_abs, total = err[name]
            assert mean_abs < 0.04, (k, name, mean_abs)     # noise alone gives ~2.4%
            assert total < 0.02, (k, name, total)


def test_fit_at_one_batch_size_predicts_another():
    cal = calibrate([make_trace(2, m=4, seed=12), make_trace(4, m=4, seed=13)])
    err = _rel_errors(cal, [make_trace(3, m=16, seed=14)])
    assert err["verify"][1] < 0.03 and err["draft"][1] < 0.03


def _sim_trace(mode: str, k: int, m: int, seed: int) -> Trace:
    """A simulator trace of the synthetic machine (affine costs, Beta acceptance, 3% jitter)."""
    from psdlab.sim.sim_config import config_from_dict
    from psdlab.sim.simulation import simulate

    def length(lo, hi):
        return {"name": "uniform", "low": lo, "high": hi}

    raw = {"seed": seed, "requests": 60, "server": {"mode": mode, "k": k, "m": m},
           "target": {"name": "t", "device": "sim:target", "cost": {"name": "affine", **VERIFY}},
           "drafter": {"name": "d", "device": "sim:drafter",
                       "cost": {"name": "affine", "per_seq": 0.0, **DRAFT}},
           "acceptance": {"name": "beta", "mean": 0.7, "concentration": 8.0},
           "workload": {"name": "poisson", "rate": 20.0, "prompt": length(50, 400),
                        "output": length(20, 120)},
           "jitter": {"dist": "normal", "cv": 0.03}}
    return simulate(config_from_dict(raw)).trace


@pytest.mark.parametrize("mode", ["sd", "psd"])
def test_simulator_traces_calibrate_back_to_the_simulated_machine(mode):
    cal = calibrate([_sim_trace(mode, 2, 8, seed=1), _sim_trace(mode, 4, 8, seed=2)])
    _covers(cal.costs["verify"], VERIFY)
    _covers(cal.costs["draft"], DRAFT)
    _covers(cal.costs["prefill"], {k: v for k, v in VERIFY.items() if k != "per_context"})
    _covers(cal.costs["drafter_prefill"], {"base": DRAFT["base"],
                                           "per_token": DRAFT["per_token"]})
    assert not cal.warnings
    acc = cal.acceptance
    assert acc.mean_ci[0] - 0.02 <= 0.7 <= acc.mean_ci[1] + 0.02
    err = _rel_errors(cal, [_sim_trace(mode, 5, 8, seed=3)])
    assert err["verify"][1] < 0.02 and err["draft"][1] < 0.02


# ---------------------------------------------------------------------------- acceptance

def test_positional_rates_recovered_within_ci():
    acc = fit_acceptance([make_trace(5, seed=30, n_steps=400)])
    assert acc.method == "per-row" and len(acc.rates) == 5
    for true, (lo, hi) in zip(POSITIONAL, acc.rates_ci):
        assert lo - 0.02 <= true <= hi + 0.02
    p = np.array([3, 3, 3, 1])
    a = np.array([0, 1, 3, 1])
    rates, _, trials = positional_rates(p, a)
    assert trials == (4, 2, 1) and rates == (3 / 4, 1 / 2, 1.0)


def test_beta_spread_recovered():
    traces = [make_trace(4, m=16, seed=31 + i, n_steps=500, beta=(0.7, 8.0)) for i in range(2)]
    acc = fit_acceptance(traces)
    assert acc.mean_ci[0] <= 0.7 <= acc.mean_ci[1]
    assert 3.0 < acc.concentration < 25.0          # truth 8, 128 requests
    assert acc.concentration_ci[0] <= 8.0 <= acc.concentration_ci[1]


def test_no_spread_gives_capped_concentration():
    rng = np.random.default_rng(0)
    n = np.full(200, 50.0)
    s = rng.binomial(50, 0.6, 200).astype(float)
    mu, conc = beta_moments(s, n)
    assert abs(mu - 0.6) < 0.02 and conc > 200


# ---------------------------------------------------------------------------- model file

def test_model_file_round_trip(tmp_path):
    cal = calibrate([make_trace(2, seed=40), make_trace(4, seed=41)])
    path = tmp_path / "model.json"
    write_fit(path, *model_parts(cal, traces=["a", "b"]))
    model = read_fit_file(path, "model").doc
    target = role_coefficients(model, "target")
    assert target == pytest.approx(cal.costs["verify"].coefficients())
    assert role_coefficients(model, "drafter")["per_seq"] == 0.0
    assert role_coefficients(model, "target", prefill=True)["per_token"] == pytest.approx(
        cal.costs["prefill"].coefficients()["per_token"])
    spec = acceptance_spec(model)
    assert spec["name"] == "positional" and len(spec["rates"]) == 4
    assert acceptance_spec(model, "beta")["name"] == "beta"
    with pytest.raises(ValueError, match="no 'geometric' acceptance model"):
        acceptance_spec(model, "geometric")
    assert role_cost_spec(path, "drafter") == {"name": "fitted", "path": str(path),
                                          "role": "drafter"}
    doc = json.loads(path.read_text())
    doc["version"] = 99
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="'version': 99 is not supported"):
        read_fit_file(path, "model")


def test_model_file_loads_in_the_simulator_and_reproduces_the_fit(tmp_path):
    from psdlab.sim.acceptance_registry import make_acceptance
    from psdlab.sim.costs import make_cost_model

    traces = [make_trace(2, seed=42), make_trace(4, seed=43)]
    cal = calibrate(traces)
    path = tmp_path / "model.json"
    write_fit(path, *model_parts(cal))
    target = make_cost_model(role_cost_spec(path, "target"))
    drafter = make_cost_model(role_cost_spec(path, "drafter"))
    prefill = make_cost_model(role_cost_spec(path, "target:prefill"))
    for step in traces[1].steps[:20]:
        for ph in step.phases:
            if ph.kind == "verify":
                sim = target.forward_time(ph.seqs, ph.tokens, ph.context)
            elif ph.kind == "prefill":
                sim = prefill.forward_time(ph.seqs, ph.tokens, 0)
            else:                       # k one-token forwards, context growing by seqs
                k = ph.tokens // ph.seqs
                sim = sum(drafter.forward_time(ph.seqs, ph.seqs, ph.context + j * ph.seqs)
                          for j in range(k))
            fitted = cal.costs[ph.kind].predict(design(ph.kind, [ph]))[0]
            assert sim == pytest.approx(fitted, rel=1e-9)
    acc = make_acceptance(acceptance_spec(read_fit_file(path, "model").doc))
    assert acc.expected_accepted(1) == pytest.approx(cal.acceptance.rates[0])
    beta = make_acceptance(acceptance_spec(read_fit_file(path, "model").doc, "beta"))
    assert beta.expected_accepted(1) == pytest.approx(cal.acceptance.mean)


# ---------------------------------------------------------------------------- CLI

def _write(tmp_path, name, trace):
    path = tmp_path / name
    write_trace(path, trace)
    return str(path)


def _one_line_error(capsys, argv, *needles):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


def test_cli_calibrates_and_writes_a_loadable_model(tmp_path, capsys):
    a, b = _write(tmp_path, "a.jsonl", make_trace(2, seed=50)), _write(
        tmp_path, "b.jsonl", make_trace(4, seed=51))
    out = tmp_path / "m.json"
    assert main(["calibrate", a, b, "-o", str(out), "--no-acceptance-selection"]) == 0
    text = capsys.readouterr().out
    assert "verify" in text and "held-out error" in text and "position 1" in text
    assert read_fit_file(out, "model").doc["meta"]["calibration"]["k"] == [2, 4]
    assert main(["calibrate", a, b, "-o", str(out), "--json", "--holdout", "0.3",
                 "--no-acceptance-selection"]) == 0
    obj = json.loads(capsys.readouterr().out)
    fit = obj["meta"]["fits"]["verify"]
    assert fit["n_heldout"] == round(0.3 * fit["n"])
    replay = read_fit_file(out, "model").doc["meta"]["replay"]   # written by calibrate itself
    assert replay["serial_target"] == pytest.approx(1.0)
    assert {"contention_target", "overhead_serial", "jitter_cv"} <= set(replay)


def test_cli_truncated_trace_reads_up_to_the_cut_line_with_one_warning(tmp_path, capsys):
    path = _write(tmp_path, "t.jsonl", make_trace(2, seed=52, n_steps=20))
    lines = open(path).read().splitlines()
    n = len(lines)
    with open(path, "w") as fh:          # cut the last line in half, as a crash would
        fh.write("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2])
    assert main(["calibrate", path, "-o", str(tmp_path / "m.json"),
                 "--no-acceptance-selection"]) == 0
    err = capsys.readouterr().err
    warns = [line for line in err.splitlines() if "warning:" in line and "cut at byte" in line]
    assert len(warns) == 1 and f"{path}:" in warns[0] and f"(line {n})" in warns[0]
    assert "Traceback" not in err
    assert (tmp_path / "m.json").exists()


def test_cli_invalid_line_before_the_last_is_still_an_error(tmp_path, capsys):
    path = _write(tmp_path, "t.jsonl", make_trace(2, seed=52, n_steps=20))
    lines = open(path).read().splitlines()
    with open(path, "w") as fh:          # a line cut in half with records after it
        fh.write("\n".join(lines[:5]) + "\n" + lines[5][: len(lines[5]) // 2] + "\n"
                 + "\n".join(lines[6:]) + "\n")
    _one_line_error(capsys, ["calibrate", path, "-o", str(tmp_path / "m.json")],
                    f"{path}:6:", "truncated")
    assert not (tmp_path / "m.json").exists()


def test_cli_malformed_field_names_line_and_field(tmp_path, capsys):
    path = _write(tmp_path, "t.jsonl", make_trace(2, seed=53, n_steps=10))
    lines = open(path).read().splitlines()
    step = json.loads(lines[3])
    step["phases"][0]["seqs"] = "many"
    lines[3] = json.dumps(step)
    open(path, "w").write("\n".join(lines) + "\n")
    _one_line_error(capsys, ["calibrate", path, "-o", str(tmp_path / "m.json")],
                    f"{path}:4:", "seqs")


@pytest.mark.parametrize("schema", [0, 2])
def test_cli_refuses_other_schema_versions_clearly(tmp_path, capsys, schema):
    path = _write(tmp_path, "t.jsonl", make_trace(2, seed=54, n_steps=10))
    lines = open(path).read().splitlines()
    run = json.loads(lines[0])
    run["schema"] = schema
    lines[0] = json.dumps(run)
    open(path, "w").write("\n".join(lines) + "\n")
    _one_line_error(capsys, ["calibrate", path, "-o", str(tmp_path / "m.json")],
                    f"{path}:1:", f"schema version {schema} is not supported")


def test_cli_bad_arguments_and_unknown_files(tmp_path, capsys):
    path = _write(tmp_path, "t.jsonl", make_trace(2, seed=55, n_steps=10))
    _one_line_error(capsys, ["calibrate", path, "-o", str(tmp_path / "m.json"),
                             "--holdout", "1.5"], "--holdout", "[0, 0.9]")
    other = tmp_path / "x.jsonl"
    other.write_text('{"hello": 1}\n')
    _one_line_error(capsys, ["calibrate", str(other), "-o", str(tmp_path / "m.json")],
                    f"{other}:1:", "neither a psdlab trace")
    binary = tmp_path / "b.bin"
    binary.write_bytes(bytes(range(128, 256)))
    _one_line_error(capsys, ["calibrate", str(binary), "-o", str(tmp_path / "m.json")],
                    "not a text file")
    _one_line_error(capsys, ["calibrate", str(tmp_path / "missing.jsonl"), "-o",
                             str(tmp_path / "m.json")], "missing.jsonl")


def test_a_role_priced_by_its_phase_overhead_alone_loads(tmp_path):
    """A drafting phase of tiny, noisy passes can fit to zero per-pass terms with all its time
    on the per-phase overhead: the model file still loads (it failed with 'at least one of base,
    ... must be > 0'); with nothing that costs time it is a one-line error."""
    from psdlab.sim.costs.fitted import cost_from_role
    zero = {"base": 0.0, "per_seq": 0.0, "per_token": 0.0, "per_context": 0.0}
    cost = cost_from_role({"kind": "affine", "coef": zero, "phase_overhead": 0.004}, "roles.d")
    assert cost.phase_overhead == 0.004
    with pytest.raises(ValueError, match=r"^roles\.d\.coef: at least one of .* must be > 0$"):
        cost_from_role({"kind": "affine", "coef": zero}, "roles.d")


def test_cli_warns_when_every_trace_drafts_one_k(tmp_path, capsys):
    """The README says a fit needs two k to separate a drafting phase's fixed cost: traces at
    one k give a warning on stderr (and in the model file), at two k none."""
    one = _write(tmp_path, "a.jsonl", make_trace(2, seed=61, n_steps=20))
    assert main(["calibrate", one, "-o", str(tmp_path / "m.json"),
                 "--no-acceptance-selection"]) == 0
    err = capsys.readouterr().err
    assert "warning: draft: the traces draft one k only" in err
    assert any("one k only" in w for w in json.loads(
        (tmp_path / "m.json").read_text())["meta"]["calibration"]["warnings"])
    two = _write(tmp_path, "b.jsonl", make_trace(4, seed=62, n_steps=20))
    assert main(["calibrate", one, two, "-o", str(tmp_path / "m2.json"),
                 "--no-acceptance-selection"]) == 0
    assert "one k only" not in capsys.readouterr().err
