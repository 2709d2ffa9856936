"""psdlab.validation.noise: how much of a prediction's error the measurement's own noise explains."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from psdlab.validation.compare import Row
from psdlab.validation.noise import (break_chance, median_se, metric_cvs, pooled_cv, ratio_cvs,
                              row_noise)


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
