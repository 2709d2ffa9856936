"""Numeric optimiser and frontiers: invariants, conventions and fits."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from psdlab.analysis.theory import (EmpiricalFrontier, ExponentialFrontier, LeviathanFrontier,
                             MixtureFrontier, exact_ratio, optimal_k, optimal_times,
                             psd_objective, sd_objective)

pos = st.floats(min_value=1e-2, max_value=1e2)


@st.composite
def mixtures(draw):
    n_exp = draw(st.integers(0, 3))
    n_lin = draw(st.integers(0 if n_exp else 1, 3))
    return MixtureFrontier(
        exp_weights=tuple(draw(st.lists(pos, min_size=n_exp, max_size=n_exp))),
        exp_rates=tuple(draw(st.lists(pos, min_size=n_exp, max_size=n_exp))),
        lin_weights=tuple(draw(st.lists(pos, min_size=n_lin, max_size=n_lin))),
        lin_rates=tuple(draw(st.lists(pos, min_size=n_lin, max_size=n_lin))))


@settings(deadline=None, max_examples=40)
@given(f=mixtures(), V=st.floats(min_value=1e-3, max_value=1e3),
       probe=st.floats(min_value=1e-4, max_value=1e4))
def test_ratio_between_one_and_two_for_concave_frontiers(f, V, probe):
    opt = optimal_times(f, V)
    assert 1.0 - 1e-12 <= opt.ratio <= 2.0 + 1e-12
    # concave with f(0) = 0: PSD's optimum is t = V
    assert opt.T_psd == pytest.approx(float(psd_objective(f, V, V)), rel=1e-12)
    # they are minima: no probe point beats them
    assert opt.T_sd <= float(sd_objective(f, probe * V, V)) * (1 + 1e-12)
    assert opt.T_psd <= float(psd_objective(f, probe * V, V)) * (1 + 1e-12)


@settings(deadline=None, max_examples=20)
@given(w=st.lists(pos, min_size=1, max_size=3), V=st.floats(min_value=1e-2, max_value=1e2))
def test_ratio_bounds_hold_for_non_concave_frontier(w, V):
    """Sigmoid-shaped (convex then concave) frontier: the bounds need no concavity."""
    def f(t):
        t = np.asarray(t, dtype=float)[..., None]
        return (np.asarray(w) / (1 + np.exp(-(t - np.arange(1, len(w) + 1)) * 3))).sum(-1)
    opt = optimal_times(f, V)
    assert 1.0 - 1e-12 <= opt.ratio <= 2.0 + 1e-12


def test_leviathan_conventions():
    a, c = 0.7, 0.01
    lev = LeviathanFrontier(a, c)
    for k in range(0, 8):
        emitted = sum(a ** i for i in range(k + 1))           # accepted prefix + bonus token
        assert lev.expected_emitted(k) == pytest.approx(emitted, rel=1e-12)
        assert lev.expected_accepted(k) == pytest.approx(emitted - 1, abs=1e-12)
    assert lev.vsr(1) == pytest.approx(a)
    assert np.all(np.diff(lev.vsr(np.arange(1, 10))) < 0)     # VSR falls with k
    emitted_f = LeviathanFrontier(a, c, count="emitted")
    assert emitted_f(0.0) == pytest.approx(1.0) and lev(0.0) == 0.0
    assert emitted_f(3 * c) == pytest.approx(lev(3 * c) + 1)


def test_leviathan_monte_carlo():
    a, k = 0.8, 5
    rng = np.random.default_rng(1)
    ok = rng.random((200_000, k)) < a
    accepted = np.where(ok.all(1), k, np.argmin(ok, axis=1))  # length of the accepted prefix
    lev = LeviathanFrontier(a, 1.0)
    se = accepted.std() / np.sqrt(accepted.size)
    assert abs(accepted.mean() - float(lev.expected_accepted(k))) < 5 * se


def test_leviathan_continuous_is_scaled_exponential():
    lev = LeviathanFrontier(0.6, 0.02)
    for V in [0.001, 0.05, 0.3, 2.0]:
        opt = optimal_times(lev, V)
        assert opt.ratio == pytest.approx(float(exact_ratio(lev.alpha_equivalent * V)), rel=1e-6)


@pytest.mark.parametrize("count", ["accepted", "emitted"])
def test_optimal_k_matches_enumeration(count):
    a, c, V = 0.85, 0.004, 0.03
    lev = LeviathanFrontier(a, c, count=count)
    res = optimal_k(lev, V, k_max=40)
    ks = np.arange(1, 41)
    tok = np.array([float(lev(c * k)) for k in ks])
    assert res.k_sd == ks[np.argmin((c * ks + V) / tok)]
    assert res.k_psd == ks[np.argmin(np.maximum(c * ks, V) / tok)]
    cont = optimal_times(lev, V)
    assert res.optimum.T_sd >= cont.T_sd * (1 - 1e-12)
    assert res.optimum.T_psd >= cont.T_psd * (1 - 1e-12)


def test_exponential_fit_recovers_parameters():
    t = np.linspace(0.05, 3, 12)
    fit = ExponentialFrontier.fit(t, 0.9 * -np.expm1(-1.7 * t))
    assert fit.alpha == pytest.approx(1.7, rel=1e-6) and fit.scale == pytest.approx(0.9, rel=1e-6)


def test_empirical_fit_exact_on_concave_data():
    t = np.array([0.1, 0.3, 0.4, 1.0, 2.5])
    y = -np.expm1(-t)
    fit = EmpiricalFrontier.fit(t, y)
    np.testing.assert_allclose(fit(t), y, atol=1e-9)
    assert fit(0.0) == 0.0 and fit(10.0) == pytest.approx(y[-1])


@settings(deadline=None, max_examples=25)
@example(data=[(1.0, 1.0), (0.010000000000000002, 0.0), (0.01, 1.0)], origin=False)
@example(data=[(0.01, 0.0), (0.010000000000000002, 0.0), (0.01, 0.0)], origin=False)
@given(data=st.lists(st.tuples(st.floats(0.01, 5.0), st.floats(0.0, 1.0)), min_size=3,
                     max_size=15),
       origin=st.booleans())
def test_empirical_fit_is_monotone_concave_and_least_squares(data, origin):
    t, y = map(np.asarray, zip(*data))
    if not origin and np.ptp(t) <= 1e-9 * max(1.0, float(np.max(t))):
        with pytest.raises(ValueError, match="two distinct drafting times"):
            EmpiricalFrontier.fit(t, y, origin=origin)      # times equal up to float noise
        return
    fit = EmpiricalFrontier.fit(t, y, origin=origin)
    knots, vals = np.asarray(fit.knots), np.asarray(fit.values)
    slopes = np.diff(vals) / np.diff(knots)
    assert np.all(slopes >= -1e-9) and np.all(np.diff(slopes) <= 1e-7)
    if origin:              # the zero function is feasible
        assert np.sum((fit(t) - y) ** 2) <= np.sum(y ** 2) + 1e-9
    else:                   # the best constant is feasible
        assert np.sum((fit(t) - y) ** 2) <= np.sum((y - y.mean()) ** 2) + 1e-9
    opt = optimal_times(fit, 1.0)
    if np.isfinite(opt.T_sd):
        assert 1.0 - 1e-12 <= opt.ratio <= 2.0 + 1e-12


@pytest.mark.parametrize("call, name", [
    (lambda: LeviathanFrontier(1.2, 0.1), "a"),
    (lambda: LeviathanFrontier(0.5, 0.0), "c"),
    (lambda: LeviathanFrontier(0.5, 0.1, count="vsr"), "count"),
    (lambda: LeviathanFrontier(0.5, 0.1).vsr(0), "k"),
    (lambda: ExponentialFrontier(0.0), "alpha"),
    (lambda: ExponentialFrontier(float("nan")), "alpha"),
    (lambda: optimal_times(ExponentialFrontier(1.0), 0.0), "V"),
    (lambda: optimal_times(ExponentialFrontier(1.0), float("nan")), "V"),
    (lambda: optimal_times(ExponentialFrontier(1.0), 1.0, candidates=[0.1, -1.0]), "candidates"),
    (lambda: optimal_k(LeviathanFrontier(0.5, 0.1), 1.0, k_max=0), "k_max"),
    (lambda: EmpiricalFrontier.fit([0.1, 0.2], [0.5, -0.1]), "y"),
    (lambda: MixtureFrontier(exp_weights=(1.0,), exp_rates=(-2.0,)), "exp_rates"),
])
def test_bad_input_names_parameter(call, name):
    with pytest.raises(ValueError) as err:
        call()
    assert str(err.value).startswith(name) and "\n" not in str(err.value)


def test_empirical_fit_beats_any_feasible_exponential():
    """Interpolating a fitted 1-exp curve at the knots is feasible (concave, nondecreasing,
    through the origin), so the least-squares fit can't be worse on the data."""
    rng = np.random.default_rng(3)
    t = np.sort(rng.uniform(0.05, 3.0, 30))
    y = np.clip(0.8 * -np.expm1(-1.3 * t) + rng.normal(0, 0.03, t.size), 0, None)
    emp, expo = EmpiricalFrontier.fit(t, y), ExponentialFrontier.fit(t, y)
    assert np.sum((emp(t) - y) ** 2) <= np.sum((expo(t) - y) ** 2) + 1e-12
