"""Choosing the acceptance model that transfers (validation/acceptance/cross_validation.py): the
CRPS, the per-prompt predictive draws, the pattern-resampling model (sim/acceptance_resampled.py),
the growth of the per-request spread along a proposal, and the cross-validated choice."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdlab.sim.acceptance_registry import make_acceptance
from psdlab.validation.acceptance import cross_validation as cv
from psdlab.validation.acceptance import transfer as at
from test_acceptance_transfer import KEYS, TRUE, fake_trace

FALLBACK = {"name": "positional", "rates": [0.5, 0.5, 0.5, 0.5]}


@pytest.fixture(scope="module")
def data():
    # marked greedy so that their match patterns are a candidate
    return [fake_trace(TRUE, KEYS, k, seed=k, temperature=0.0) for k in (2, 4)]


@given(st.lists(st.floats(-5, 5), min_size=1, max_size=30), st.floats(-5, 5))
@settings(max_examples=60, deadline=None)
def test_crps_is_the_ensemble_energy_form(xs, y):
    x = np.array(xs)
    brute = (np.mean(np.abs(x - y))
             - 0.5 * np.mean(np.abs(x[:, None] - x[None, :])))
    assert cv.crps(x, y) == pytest.approx(brute, abs=1e-9)
    assert cv.crps(x, y) >= -1e-12
    assert cv.crps(np.full(5, y), y) == pytest.approx(0.0, abs=1e-12)     # perfect and sharp


def test_resampled_draws_patterns_of_the_request_style_and_walks_them():
    spec = {"name": "resampled", "fallback": FALLBACK,
            "styles": {"chat": ["01111111"], "code": ["00000000", "0000000"]}}
    acc = make_acceptance(spec)
    rng = np.random.default_rng(0)
    rows = acc.request_params(rng, 200, keys=["chat-1"] * 100 + ["code-7"] * 100)
    assert set(rows[:100]) == {0} and set(rows[100:]) == {1, 2}
    anyone = acc.request_params(rng, 300, keys=["poem-1"] * 300)       # unknown style: all
    assert set(anyone) == {0, 1, 2}
    # greedy walk: from position 1 the chat pattern accepts all k, code none
    assert acc.sample_at(rng, rows[:1], 3, np.array([1])).tolist() == [3]
    assert acc.sample_at(rng, rows[100:101], 3, np.array([1])).tolist() == [0]
    assert acc.expected_accepted(2) > 0
    with pytest.raises(ValueError, match="styles.code"):
        make_acceptance(dict(spec, styles={"code": []}))
    with pytest.raises(ValueError, match="colour"):
        make_acceptance(dict(spec, colour=1))


def test_prompt_draws_share_one_request_per_draw():
    """Every verification of one draw comes from one drawn pattern: with a pool of an
    all-match and a no-match pattern, each draw's mean is k or 0, never between."""
    spec = {"name": "resampled", "fallback": FALLBACK,
            "styles": {"chat": ["1" * 40, "0" * 40]}}
    rows = (np.array(["chat-3"] * 6, dtype=object), np.full(6, 3), np.arange(1, 25, 4),
            np.zeros(6))
    test = at.Trials(np.array([], dtype=object), np.array([], int), np.array([], int),
                     np.array([]), rows)
    d = cv.prompt_draws(spec, test, np.random.default_rng(1), draws=400)
    assert set(np.round(d, 9)) == {0.0, 3.0} and 0.35 < d.mean() / 3 < 0.65


def test_growth_is_recovered_and_the_spread_grows_along_the_proposal():
    grown = dict(TRUE, sigma=0.4, spread_growth=0.6)
    traces = [fake_trace(grown, KEYS * 3, k, seed=20 + k) for k in (2, 4)]
    cand = next(c for c in at.CANDIDATES if c[0] == "positional+style+request+output+growth")
    m = at.fit(cand, at.trials(traces))
    assert m.growth == pytest.approx(0.6, abs=0.35) and m.spec()["spread_growth"] == m.growth
    acc = make_acceptance(m.spec())
    assert acc.spread_weights(4)[3] > 1.5 * acc.spread_weights(4)[0]
    flat = at.fit(cand, at.trials(traces[:1] + [fake_trace(dict(TRUE, sigma=0.4), KEYS * 3, 4,
                                                           seed=31)]))
    assert abs(flat.growth) < abs(m.growth)


def test_selection_by_cross_validation_picks_the_lowest_crps(data):
    sel = cv.select(data)
    crps = {r.candidate: r.cv_crps for r in sel.scores}
    assert sel.chosen.candidate == min(crps, key=crps.get)
    assert cv.RESAMPLED in crps                       # greedy traces: patterns are a candidate
    nll = {r.candidate: r.cv_nll_per_token for r in sel.scores}
    assert nll[cv.RESAMPLED] is None and nll["positional"] is not None
    assert crps["positional+style"] < crps["positional"]        # styles differ: style helps
    assert nll["positional+style"] < nll["positional"]
    assert set(sel.prompts) == set(KEYS)                        # one fold per prompt
    assert cv.select(data).chosen.spec() == sel.chosen.spec()    # deterministic
    assert sel.to_dict()["criterion"] == "cv_crps"


def test_patterns_that_are_the_truth_win_the_selection():
    """When every prompt of a style has the same greedy pattern, a drawn pattern of its style
    is exactly right and no logistic model is as sharp: CV picks the resampled model."""
    from greedy_util import greedy_trace
    pats = {"chat": "1110" * 10, "code": "10" * 20, "math": "0" * 40}
    keys = [f"{s}-{i}" for s in pats for i in range(5)]
    traces = [greedy_trace({key: pats[key.split("-")[0]] for key in keys}, k, 30,
                           cap_at_end=False) for k in (2, 4)]
    sel = cv.select(traces)
    assert sel.chosen.candidate == cv.RESAMPLED
    assert sel.chosen.spec()["name"] == "resampled"
    assert make_acceptance(sel.chosen.spec()).kind == "resampled"


