"""E[max(t, V)] under jitter: Monte Carlo checks, limits, validation."""
from __future__ import annotations

import numpy as np
import pytest

from psdlab.analysis.theory import expected_max, jitter_gain


def _mc(dist, mt, mv, ct, cv, n=400_000, seed=7):
    rng = np.random.default_rng(seed)
    if dist == "normal":
        t, v = rng.normal(mt, ct * mt, n), rng.normal(mv, cv * mv, n)
    else:
        t = rng.gamma(1 / ct ** 2, mt * ct ** 2, n)
        v = rng.gamma(1 / cv ** 2, mv * cv ** 2, n)
    m = np.maximum(t, v)
    return m.mean(), m.std() / np.sqrt(n)


@pytest.mark.parametrize("dist", ["normal", "gamma"])
@pytest.mark.parametrize("mt, mv, ct, cv", [(1.0, 1.0, 0.2, 0.2), (0.5, 1.0, 0.3, 0.1),
                                            (2.0, 1.5, 0.5, 0.4)])
def test_matches_monte_carlo(dist, mt, mv, ct, cv):
    mean, se = _mc(dist, mt, mv, ct, cv)
    assert abs(expected_max(mt, mv, ct, cv, dist) - mean) < 5 * se


@pytest.mark.parametrize("dist", ["normal", "gamma"])
def test_deterministic_limit_and_monotonicity(dist):
    assert expected_max(0.7, 1.3, 0.0, 0.0, dist) == pytest.approx(1.3)
    assert expected_max(3.0, 1.0, 0.0, 0.2, dist) == pytest.approx(3.0, rel=1e-6)
    r = jitter_gain(1.0, 1.0, 0.0, 0.0, dist)
    assert r.gain_lost == pytest.approx(0.0, abs=1e-9) and r.speedup_det == pytest.approx(2.0)
    lost = [jitter_gain(1.0, 1.0, c, c, dist).gain_lost for c in (0.05, 0.1, 0.2, 0.3)]
    assert all(0 < a < b < 1 for a, b in zip(lost, lost[1:]))
    assert expected_max(0.5, 1.0, 0.3, 0.1, dist) == pytest.approx(
        expected_max(1.0, 0.5, 0.1, 0.3, dist), rel=1e-9)


def test_gain_accounting():
    r = jitter_gain(0.8, 1.0, 0.25, 0.15, "gamma")
    assert r.e_max > r.det_max == 1.0 and r.sd_step == pytest.approx(1.8)
    assert r.speedup_jitter == pytest.approx(1.8 / r.e_max)
    assert r.gain_lost == pytest.approx((1.8 - 1.8 / r.e_max) / 0.8)


@pytest.mark.parametrize("args, name", [((0.0, 1.0, 0.1, 0.1), "t_mean"),
                                        ((1.0, -1.0, 0.1, 0.1), "V_mean"),
                                        ((1.0, 1.0, -0.1, 0.1), "t_cv"),
                                        ((1.0, 1.0, 0.1, float("nan")), "V_cv")])
def test_bad_input(args, name):
    with pytest.raises(ValueError, match=rf"^{name}:"):
        expected_max(*args)
    with pytest.raises(ValueError, match=r"^dist:"):
        expected_max(1.0, 1.0, 0.1, 0.1, "lognormal")
