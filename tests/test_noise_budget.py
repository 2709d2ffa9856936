"""The repeats the judged bounds would need (validation/demo/noise_budget.py,
NoiseModel.at_repeats)."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from hypothesis import given, settings, strategies as st
from scipy.special import ndtr

from psdlab.validation.compare import Row
from psdlab.validation.noise import (NoiseModel, calibration_se, class_cvs, median_correlation,
                                     median_se, metric_cvs, pair_correlations, ratio_cvs)
from psdlab.validation.demo.noise_budget import (MOST, budget, chance_at, repeats_needed,
                                            round_seconds)
from psdlab.validation.demo.report_sections import budget_section


def _model(values, pairs=None, cal=("cal",)):
    pairs = pairs or {}
    classes = {n: "offline" for n in values}
    rho = pair_correlations(values, pairs) if pairs else {}
    return NoiseModel(values, metric_cvs(values), class_cvs(values, classes), pairs,
                      {"offline": ratio_cvs(values, pairs)}, {"offline": rho}, classes,
                      calibration_se(values, cal), sum(len(values[c]) for c in cal), len(cal))


def _runs(throughputs, makespans):
    return [{"throughput_tok_s": t, "makespan_s": m} for t, m in zip(throughputs, makespans)]


VALUES = {"cal": _runs([1.0, 1.2, 0.9], [10.0, 14.0, 12.0]),
          "sd": _runs([2.0, 2.3, 1.9], [20.0] * 3),
          "psd": _runs([1.5, 1.8, 1.3], [15.0] * 3)}
ROWS = [Row(n, "throughput_tok_s", "t", "", 1.0, 1.0, 0.0) for n in ("sd", "psd")]


def test_at_repeats_with_the_runs_own_count_changes_nothing():
    model = _model(VALUES, {"psd vs sd": ("sd", "psd")})
    same = model.at_repeats(3)
    assert [same.se(r) for r in ROWS] == [model.se(r) for r in ROWS]
    assert same.common == pytest.approx(model.common)
    assert same.links(ROWS) == model.links(ROWS)


def test_at_repeats_scales_every_se_the_common_shift_and_the_links():
    model = _model(VALUES, {"psd vs sd": ("sd", "psd")})
    more = model.at_repeats(12)
    cv = model.config_cvs["sd"]["throughput_tok_s"]
    assert more.se(ROWS[0]) == pytest.approx(median_se(cv, 12))
    tp = "throughput_tok_s"
    assert more.common[tp] == pytest.approx(model.common[tp] * math.sqrt(3 / 12))
    rho = model.correlations["offline"]["throughput_tok_s"]
    assert more.links(ROWS)[0][2] == pytest.approx(median_correlation(rho, 12))
    gain = Row("psd vs sd", "gain.throughput_tok_s", "", "", 0.5, 0.5, 0.0, "pp")
    assert more.se(gain) < model.se(gain)
    with pytest.raises(ValueError, match="repeats"):
        model.at_repeats(0)


@settings(deadline=None, max_examples=25)
@given(st.floats(0.03, 0.3), st.floats(0.02, 0.1))
def test_repeats_needed_is_the_first_n_under_the_chance(spread, bound):
    """One row, no calibration shift: the chance at n is 1 - (2 Phi(b / se_n) - 1) with se_n
    the median's SE of n runs, and the answer is the first n where it is at most 10%."""
    values = {"x": [{"throughput_tok_s": 1.0 + d} for d in (-spread, 0.0, spread)]}
    model = _model(values, cal=())
    row = [Row("x", "throughput_tok_s", "t", "", 1.0, 1.0, 0.0)]
    cv = model.cvs["throughput_tok_s"]
    for n in (1, 2, 5):
        want = 1.0 - (2.0 * ndtr(bound / median_se(cv, n)) - 1.0)
        assert chance_at(model, row, bound, n) == pytest.approx(want, abs=1e-9)
    n = repeats_needed(model, row, bound)
    if n is None:
        assert chance_at(model, row, bound, MOST) > 0.10
    else:
        assert chance_at(model, row, bound, n) <= 0.10
        assert n == 1 or chance_at(model, row, bound, n - 1) > 0.10


def test_repeats_needed_refuses_a_chance_outside_zero_one_and_says_when_out_of_reach():
    model = _model(VALUES)
    with pytest.raises(ValueError, match="chance"):
        repeats_needed(model, ROWS, 0.05, chance=0.0)
    with pytest.raises(ValueError, match="most"):
        repeats_needed(model, ROWS, 0.05, most=0)
    assert repeats_needed(model, ROWS, 1e-4, most=4) is None
    unknown = Row("nope", "throughput_tok_s", "t", "", 1.0, 1.0, 0.0)
    assert repeats_needed(model, [unknown], 0.05) is None


def _validation(model):
    gain = Row("psd vs sd", "gain.throughput_tok_s", "", "", 0.5, 0.5, 0.0, "pp")

    def target_rows(only=None):
        yield "TPOT", "throughput_tok_s", "sim", 0.05, "rel", ROWS
        yield "gain", "gain.throughput_tok_s", "sim", 5.0, "pp", [gain]
        yield "listed", "throughput_tok_s", "closed form", None, "rel", ROWS
    return SimpleNamespace(noise_model=model, target_rows=target_rows)


def test_budget_per_target_with_the_run_time_of_its_rounds():
    model = _model(VALUES, {"psd vs sd": ("sd", "psd")})
    v = _validation(model)
    assert round_seconds(model) == pytest.approx(12.0 + 20.0 + 15.0)   # mean makespans
    out = budget(v)
    assert [r["target"] for r in out] == ["TPOT", "gain"]       # unjudged rows left out
    for r in out:
        assert r["repeats_now"] == 3          # the gain row counts its SD configuration's
        assert r["round_s"] == pytest.approx(47.0)
        assert r["run_s_now"] == pytest.approx(36.0 + 60.0 + 45.0)
        need = r["repeats_needed"]
        assert need is None or r["run_s_needed"] == pytest.approx(need * 47.0)
    tpot = out[0]
    assert tpot["repeats_needed"] == repeats_needed(model, ROWS, 0.05)
    assert tpot["chance_now"] == pytest.approx(chance_at(model, ROWS, 0.05, 3))
    md = "\n".join(budget_section(out))
    assert "What P(noise breaks) <= 10% would take" in md and "| TPOT | 5% | 3 |" in md
