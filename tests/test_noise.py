"""psdlab.validation.noise: how much of a prediction's error the measurement's own noise
explains."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from psdlab.validation.compare import Row
from psdlab.validation.noise import (NoiseModel, calibration_se, class_cvs, median_correlation,
                                    median_se, metric_cvs, pair_correlations, pooled_cv,
                                    ratio_cvs, row_noise)
from psdlab.validation.noise_chance import break_chance, inside_both


def test_median_se_of_small_samples():
    assert median_se(0.1, 1) == pytest.approx(0.1)
    assert median_se(0.1, 2) == pytest.approx(0.1 / math.sqrt(2))
    assert median_se(0.1, 3) == pytest.approx(0.1 * math.sqrt(0.4487))
    with pytest.raises(ValueError, match="n:"):
        median_se(0.1, 0)


def test_median_se_matches_simulated_medians():
    """The standard error of a median of 3 (and 9) normal runs, against a simulation."""
    rng = np.random.default_rng(3)
    for n in (3, 9):
        meds = np.median(1.0 + 0.05 * rng.standard_normal((40000, n)), axis=1)
        assert meds.std() == pytest.approx(median_se(0.05, n), rel=0.05)


@settings(deadline=None, max_examples=40)
@given(st.floats(0.001, 0.5), st.integers(1, 30))
def test_median_se_shrinks_with_more_runs(cv, n):
    assert 0 < median_se(cv, n + 1) <= median_se(cv, n) <= cv


def test_pooled_cv_known_values_and_scale_free():
    assert pooled_cv([[1.1, 0.9]]) == pytest.approx(math.sqrt(0.02))
    # a configuration 100 x faster with the same relative noise pools the same
    assert pooled_cv([[1.1, 0.9], [110.0, 90.0]]) == pytest.approx(math.sqrt(0.02))
    assert pooled_cv([[5.0, 5.0, 5.0]]) == 0.0
    assert pooled_cv([[1.0], [2.0, None]]) is None              # nothing usable


def test_pooled_cv_recovers_a_known_cv():
    rng = np.random.default_rng(1)
    groups = [list(m * (1.0 + 0.04 * rng.standard_normal(3))) for m in rng.uniform(5, 50, 400)]
    assert pooled_cv(groups) == pytest.approx(0.04, rel=0.08)


def test_break_chance():
    se = 0.05 / 1.959964
    assert break_chance([se], 0.05) == pytest.approx(0.05, abs=1e-4)
    assert break_chance([se] * 8, 0.05) == pytest.approx(1 - 0.95 ** 8, abs=1e-3)
    assert break_chance([0.0, 0.0], 0.05) == 0.0
    assert break_chance([], 0.05) is None


@settings(deadline=None, max_examples=20)
@given(st.lists(st.floats(0.005, 0.08), min_size=1, max_size=8), st.floats(0.01, 0.1))
def test_break_chance_is_the_simulated_frequency(ses, bound):
    """1 - prod(2 Phi(b / se) - 1) is how often max |N(0, se_i)| > b."""
    rng = np.random.default_rng(0)
    draws = np.abs(rng.standard_normal((20000, len(ses))) * np.array(ses))
    freq = float((draws.max(axis=1) > bound).mean())
    assert break_chance(ses, bound) == pytest.approx(freq, abs=0.015)
    assert break_chance(ses + [ses[0]], bound) >= break_chance(ses, bound)


def _vals(tps):
    return [{"throughput_tok_s": x} for x in tps]


def test_gain_noise_from_paired_rounds():
    """When the PSD run of each round is a constant multiple of that round's SD run, the
    machine's drift cancels in the ratio: no gain noise, although each configuration's own
    throughput varies; without paired rounds the two medians' noise adds up."""
    sd = [10.0, 12.0, 8.0]
    values = {"sd": _vals(sd), "psd": _vals([1.5 * x for x in sd])}
    pairs = {"psd vs sd": ("sd", "psd")}
    cvs = metric_cvs(values)
    assert cvs["throughput_tok_s"] > 0.1
    rcv = ratio_cvs(values, pairs)
    assert rcv["throughput_tok_s"] == pytest.approx(0.0, abs=1e-12)
    row = Row("psd vs sd", "gain.throughput_tok_s", "gain", "", 0.5, 0.45, -5.0, "pp")
    assert row_noise(row, values, cvs, pairs, rcv) == pytest.approx(0.0, abs=1e-9)
    unpaired = row_noise(row, values, cvs, pairs, None)
    want = 100 * 1.5 * math.hypot(median_se(cvs["throughput_tok_s"], 3),
                                  median_se(cvs["throughput_tok_s"], 3))
    assert unpaired == pytest.approx(want)
    # a metric row of one configuration: the median's standard error
    one = Row("sd", "throughput_tok_s", "throughput", "tok/s", 10.0, 10.2, 0.02)
    assert row_noise(one, values, cvs, pairs, rcv) == pytest.approx(
        median_se(cvs["throughput_tok_s"], 3))
    assert row_noise(Row("nope", "throughput_tok_s", "t", "", 1.0, 1.0, 0.0), values, cvs,
                     pairs, rcv) is None


def test_class_cvs_pool_within_a_class_and_fall_back_to_all():
    """Configurations of one class share their class's CV; a metric the class has no repeats
    of takes the pool of all configurations, and so does a configuration without a class."""
    values = {"a": [{"x": 1.1, "y": 1.0}, {"x": 0.9, "y": 1.2}],
              "b": [{"x": 2.0, "y": None}, {"x": 2.0, "y": 1.0}],
              "c": [{"x": 1.5, "y": 3.0}, {"x": 0.5, "y": 1.0}],
              "d": [{"x": 1.2, "y": 1.0}, {"x": 0.8, "y": 1.0}]}
    got = class_cvs(values, {"a": "off", "b": "off", "c": "timed"})
    overall = metric_cvs(values)
    off = pooled_cv([[1.1, 0.9], [2.0, 2.0]])
    assert got["a"]["x"] == pytest.approx(off) and got["b"]["x"] == pytest.approx(off)
    assert got["c"]["x"] == pytest.approx(0.5 * math.sqrt(2))
    assert got["d"]["x"] == pytest.approx(overall["x"])          # no class: all
    assert got["a"]["y"] == pytest.approx(pooled_cv([[1.0, 1.2]]))
    one = Row("c", "x", "x", "", 1.0, 1.0, 0.0)
    assert row_noise(one, values, overall, {}, None, got) == pytest.approx(
        median_se(got["c"]["x"], 2))
    assert row_noise(one, values, overall, {}, None, None) == pytest.approx(
        median_se(overall["x"], 2))


def test_pair_correlations_recover_a_known_correlation():
    """Per-round deviations of an SD and a PSD configuration drawn with correlation rho."""
    rng = np.random.default_rng(5)
    for rho in (0.0, 0.6, 0.95):
        values, pairs = {}, {}
        for p in range(300):
            z = rng.multivariate_normal([0, 0], [[1, rho], [rho, 1]], size=7) * 0.05
            values[f"sd{p}"] = [{"t": 10 * (1 + a)} for a in z[:, 0]]
            values[f"psd{p}"] = [{"t": 7 * (1 + b)} for b in z[:, 1]]
            pairs[f"g{p}"] = (f"sd{p}", f"psd{p}")
        assert pair_correlations(values, pairs)["t"] == pytest.approx(rho, abs=0.05)
    flat = {"sd": [{"t": 1.0}, {"t": 1.0}], "psd": [{"t": 2.0}, {"t": 3.0}]}
    assert pair_correlations(flat, {"g": ("sd", "psd")})["t"] is None     # no spread
    assert pair_correlations({"sd": [{"t": 1.0}], "psd": [{"t": 2.0}]},
                             {"g": ("sd", "psd")}) == {}                 # no repeats


def test_median_correlation_matches_simulated_medians():
    rng = np.random.default_rng(2)
    for rho, n in ((0.9, 7), (0.5, 9), (0.8, 2), (0.9, 101)):
        z = rng.multivariate_normal([0, 0], [[1, rho], [rho, 1]], size=(20000, n))
        m = np.median(z, axis=1)
        assert np.corrcoef(m[:, 0], m[:, 1])[0, 1] == pytest.approx(
            median_correlation(rho, n), abs=0.02)
    assert median_correlation(1.0, 7) == pytest.approx(1.0)
    assert median_correlation(0.9, 2) == 0.9                      # two runs: the mean
    # many runs approach the asymptotic (2 / pi) asin(rho), below rho
    assert median_correlation(0.9, 101) == pytest.approx(2 / math.pi * math.asin(0.9),
                                                         abs=0.02)


@settings(deadline=None, max_examples=25)
@given(st.floats(0.005, 0.08), st.floats(0.005, 0.08), st.floats(-0.99, 0.99),
       st.floats(0.01, 0.1))
def test_inside_both_is_the_simulated_frequency(se1, se2, rho, bound):
    rng = np.random.default_rng(0)
    z = rng.multivariate_normal([0, 0], [[se1 ** 2, rho * se1 * se2],
                                         [rho * se1 * se2, se2 ** 2]], size=40000)
    freq = float((np.abs(z).max(axis=1) <= bound).mean())
    assert inside_both(se1, se2, rho, bound) == pytest.approx(freq, abs=0.01)


def test_inside_both_limits():
    se, b = 0.03, 0.05
    one = math.erf(b / (se * math.sqrt(2)))
    assert inside_both(se, se, 0.0, b) == pytest.approx(one * one, abs=1e-5)
    assert inside_both(se, se, 1.0, b) == pytest.approx(one, abs=1e-3)     # one chance, not two
    assert inside_both(0.0, se, 0.5, b) == pytest.approx(one)


def test_break_chance_with_links():
    """Two perfectly correlated rows break the bound as often as one; a linked pair and an
    independent row, as the simulation of correlated draws; a row linked twice is an error."""
    se, b = 0.03, 0.05
    assert break_chance([se, se], b, [(0, 1, 1.0)]) == pytest.approx(
        break_chance([se], b), abs=1e-3)
    assert break_chance([se, se], b, [(0, 1, 0.0)]) == pytest.approx(break_chance([se, se], b))
    rng = np.random.default_rng(1)
    z = rng.multivariate_normal([0, 0], [[1, 0.7], [0.7, 1]], size=60000) * se
    third = rng.standard_normal(60000) * 0.02
    freq = float((np.maximum(np.abs(z).max(axis=1), np.abs(third)) > b).mean())
    assert break_chance([se, se, 0.02], b, [(0, 1, 0.7)]) == pytest.approx(freq, abs=0.01)
    with pytest.raises(ValueError, match="links"):
        break_chance([se, se, se], b, [(0, 1, 0.5), (1, 2, 0.5)])


def test_noise_model_links_the_sd_and_psd_rows_of_a_pair():
    """The TPOT rows of a pair's SD and PSD runs are linked with their medians' correlation;
    a row of another workload is not; a gain row (one per pair) never is."""
    values = {"sd": [{"t": 1.0}, {"t": 1.2}, {"t": 0.9}],
              "psd": [{"t": 2.0}, {"t": 2.5}, {"t": 1.7}],
              "ar": [{"t": 3.0}, {"t": 3.1}, {"t": 2.9}]}
    pairs = {"psd vs sd": ("sd", "psd")}
    classes = {"sd": "offline", "psd": "offline", "ar": "offline"}
    rho = pair_correlations(values, pairs)["t"]
    model = NoiseModel(values, metric_cvs(values), class_cvs(values, classes), pairs,
                       {"offline": ratio_cvs(values, pairs)}, {"offline": {"t": rho}},
                       classes)
    rows = [Row(n, "t", "t", "", 1.0, 1.0, 0.0) for n in ("ar", "psd", "sd")]
    assert model.links(rows) == [(2, 1, pytest.approx(median_correlation(rho, 3)))]
    assert rho > 0.9
    gain = Row("psd vs sd", "gain.throughput_tok_s", "gain", "", 0.5, 0.5, 0.0, "pp")
    assert model.links([gain]) == []


@settings(deadline=None, max_examples=15)
@given(st.lists(st.floats(0.005, 0.06), min_size=1, max_size=6), st.floats(0.002, 0.05),
       st.floats(0.01, 0.1))
def test_break_chance_with_a_common_shift_is_the_simulated_frequency(ses, common, bound):
    """With one shift N(0, common^2) added to every row the chance is how often
    max |N(0, se_i) + s| > b, and never below the chance without the shift."""
    rng = np.random.default_rng(2)
    shift = rng.standard_normal((30000, 1)) * common
    draws = np.abs(rng.standard_normal((30000, len(ses))) * np.array(ses) + shift)
    freq = float((draws.max(axis=1) > bound).mean())
    assert break_chance(ses, bound, common=common) == pytest.approx(freq, abs=0.015)
    assert break_chance(ses, bound, common=common) >= break_chance(ses, bound) - 1e-9


def test_break_chance_with_a_common_shift_and_links():
    """A linked pair under a common shift, against correlated draws plus the shift; a common
    shift of 0 is the unshifted chance; a negative one is refused by name."""
    se, b, c = 0.03, 0.05, 0.02
    rng = np.random.default_rng(4)
    z = rng.multivariate_normal([0, 0], [[1, 0.6], [0.6, 1]], size=60000) * se
    z = z + rng.standard_normal((60000, 1)) * c
    freq = float((np.abs(z).max(axis=1) > b).mean())
    assert break_chance([se, se], b, [(0, 1, 0.6)], common=c) == pytest.approx(freq, abs=0.01)
    assert break_chance([se, se], b, [(0, 1, 0.6)], common=0.0) == pytest.approx(
        break_chance([se, se], b, [(0, 1, 0.6)]))
    with pytest.raises(ValueError, match="common"):
        break_chance([se], b, common=-0.01)


def test_calibration_se_is_the_calibration_cv_over_the_root_of_its_runs():
    """Only the named calibration configurations count; a ratio metric gets no shift; the
    noise model hands a row its metric's shift (0 for a gain row)."""
    values = {"cal_a": [{"tpot.mean": 1.1, "throughput_tok_s": 10.0},
                        {"tpot.mean": 0.9, "throughput_tok_s": 10.0}],
              "cal_b": [{"tpot.mean": 2.2}, {"tpot.mean": 1.8}],
              "held": [{"tpot.mean": 1.5}, {"tpot.mean": 0.5}]}
    common = calibration_se(values, ["cal_a", "cal_b"])
    assert common["tpot.mean"] == pytest.approx(math.sqrt(0.02) / 2.0)
    assert common["throughput_tok_s"] == pytest.approx(0.0)
    assert calibration_se(values, []) == {}
    assert calibration_se(values, ["missing"]) == {}
    classes = {n: "offline" for n in values}
    model = NoiseModel(values, metric_cvs(values), class_cvs(values, classes), {}, {}, {},
                       classes, common)
    assert model.common_se(Row("held", "tpot.mean.det", "", "", 1.0, 1.0, 0.0)) == \
        pytest.approx(common["tpot.mean"])
    assert model.common_se(Row("x", "gain.throughput_tok_s", "", "", 1.0, 1.0, 0.0)) == 0.0
