"""The paper's Lemma 1, Lemma 2 and Theorem 1 checked against exact and brute-force values."""
from __future__ import annotations

import math

import numpy as np
import pytest

from psdlab.analysis.theory import (THEOREM1_RATIO, ExponentialFrontier, exact_ratio, exact_saving,
                             lemma1_sd_lower_bound, lemma1_t_star, lemma1_t_star_bounds,
                             lemma2_t_psd, optimal_times, paper_ratio_bound, peak, region,
                             sd_draft_time_exponential, t_psd_exponential, t_sd_exponential,
                             theorem1_check, theorem1_threshold)

X = np.geomspace(1e-3, 1e3, 3001)


def _brute_ratio(x: float) -> float:
    return optimal_times(ExponentialFrontier(1.0), x).ratio


def test_lemma1_formula_and_bounds_hold():
    mid = X[(X > 1e-2) & (X < 1e2)]
    np.testing.assert_allclose(lemma1_t_star(1.0, mid), sd_draft_time_exponential(1.0, mid),
                               rtol=1e-7)
    lo, hi = lemma1_t_star_bounds(2.0, X / 2.0)
    t = sd_draft_time_exponential(2.0, X / 2.0)
    assert np.all((lo < t) & (t < hi))
    assert np.all(lemma1_sd_lower_bound(2.0, X / 2.0) < t_sd_exponential(2.0, X / 2.0))


def test_lemma2_is_exact():
    np.testing.assert_allclose(lemma2_t_psd(3.0, X / 3.0), t_psd_exponential(3.0, X / 3.0))
    for x in [0.01, 1.0, 30.0]:
        num = optimal_times(ExponentialFrontier(1.0), x)
        assert num.T_psd == pytest.approx(float(lemma2_t_psd(1.0, x)), rel=1e-9)


def test_paper_bound_is_a_lower_bound_that_tends_to_one():
    assert np.all(paper_ratio_bound(X) <= exact_ratio(X))
    assert paper_ratio_bound(1e3) < THEOREM1_RATIO and paper_ratio_bound(1e6) < 1.001


def test_theorem1_threshold_value():
    x0 = theorem1_threshold()
    assert abs(math.exp(x0) - 2 * (x0 + 1)) < 1e-10 and 1.67 < x0 < 1.69


def test_theorem1_is_false_as_stated_with_brute_force_counterexample():
    check = theorem1_check()
    assert not check.holds_as_stated
    x0 = theorem1_threshold()
    assert 10.0 >= x0 and _brute_ratio(10.0) < THEOREM1_RATIO     # independent of closed forms
    assert _brute_ratio(x0) > THEOREM1_RATIO                         # but true at the threshold
    lo, hi = check.holds_on[0]
    assert lo == x0 and check.fails_above == hi
    assert _brute_ratio(hi * 0.999) > THEOREM1_RATIO > _brute_ratio(hi * 1.001)


def test_exact_region_endpoints_by_brute_force():
    (lo, hi), = region(0.37)
    target = 1 / 0.63
    for edge in (lo, hi):
        assert exact_saving(edge) == pytest.approx(0.37, abs=1e-10)
    assert _brute_ratio(lo * 0.999) < target < _brute_ratio(lo * 1.001)
    assert _brute_ratio(hi * 0.999) > target > _brute_ratio(hi * 1.001)
    inside = np.geomspace(lo, hi, 200)[1:-1]
    assert np.all(exact_saving(inside) > 0.37)


def test_regions_nest_and_paper_region_inside_exact():
    (a, b), = region(0.37)
    (c, d), = region(0.45)
    assert a < c < d < b
    (p, q), = region(0.37, kind="paper")
    assert a < p < q < b
    assert np.all(paper_ratio_bound(np.linspace(p, q, 50)[1:-1]) > 1 / 0.63)
    assert region(0.38, kind="paper") == []


def test_peak_and_threshold_half():
    pk = peak()
    assert pk.ratio == pytest.approx(2.0, abs=1e-12)
    assert region(0.5) == [[pk.alpha_v, pk.alpha_v]]
    (lo, hi), = region(0.49)
    assert lo < pk.alpha_v < hi


def test_region_clips_at_scan_range():
    assert exact_saving(1e-3) > 0.01 and region(0.01)[0][0] == 1e-3
    assert region(0.1, x_min=1.0, x_max=2.0) == [[1.0, 2.0]]


@pytest.mark.parametrize("threshold", [0.0, -0.1, 0.51, float("nan"), 1.0])
def test_bad_threshold(threshold):
    with pytest.raises(ValueError, match=r"^threshold:"):
        region(threshold)


def test_bad_kind_and_range():
    with pytest.raises(ValueError, match=r"^kind:"):
        region(0.37, kind="bound")
    with pytest.raises(ValueError, match=r"^x_max:"):
        region(0.37, x_min=5.0, x_max=1.0)
