"""validation.set_level: the pool splits' spread, the level shift it implies, the chance that
a new set's shift (with or without noise) breaks a bound, and the demo's step end to end."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy.stats import norm

from psdlab.sim.acceptance import make_acceptance
from psdlab.validation import set_level
from psdlab.validation.set_shift import simulated_rate

LENGTHS = {16: 1}
FITTED = {"name": "fitted", "styles": {"chat": -0.5, "code": 0.8}, "default": 0.2,
          "draft": [0.0, 0.1, -0.2, -0.1], "output": -0.1, "sigma": 0.5}


def _pool(levels: dict[str, float], n: int = 40, seed: int = 0):
    """Patterns of n prompts a split, each position matched with the split's probability;
    (pool, id -> (split, style))."""
    rng = np.random.default_rng(seed)
    pool, split_style = {}, {}
    for split, p in levels.items():
        for i in range(n):
            pid = f"{'chat' if i % 2 else 'code'}-{split}{i}"
            pool[pid] = "." + "".join("1" if x else "0" for x in rng.random(15) < p)
            split_style[pid] = (split, pid.split("-")[0])
    return pool, split_style


def test_pool_spread_is_zero_for_copies_of_one_split_and_large_for_distinct_ones():
    pool, ss = _pool({"fresh": 0.5})
    copies = {f"{pid}#{j}": pat for pid, pat in pool.items() for j in range(3)}
    ss3 = {f"{pid}#{j}": (f"{ss[pid][0]}{j}", ss[pid][1]) for pid in pool for j in range(3)}
    same = set_level.pool_spread(copies, ss3, LENGTHS)
    assert same is not None and same.sd == 0.0 and len(same.levels) == 3
    assert len({lv.rate for lv in same.levels}) == 1
    pool, ss = _pool({"fresh": 0.3, "fresh2": 0.5, "fresh3": 0.7}, n=80)
    far = set_level.pool_spread(pool, ss, LENGTHS)
    rates = [lv.rate for lv in far.levels]
    assert [lv.split for lv in far.levels] == ["fresh", "fresh2", "fresh3"]   # writing order
    assert rates == sorted(rates) and far.sd > 0.5 * np.std(rates, ddof=1)
    assert far.relative == pytest.approx(far.sd / np.mean(rates))
    two = {pid: pat for pid, pat in pool.items() if ss[pid][0] != "fresh3"}
    assert set_level.pool_spread(two, ss, LENGTHS) is None      # fewer than three splits


def test_shifted_moves_every_level_and_leaves_the_spec_alone():
    out = set_level.shifted(FITTED, 0.25)
    assert out["styles"] == {"chat": -0.25, "code": 1.05} and out["default"] == 0.45
    assert out["draft"] == FITTED["draft"] and FITTED["styles"]["chat"] == -0.5
    assert set_level.shifted({"name": "geometric", "alpha": 0.5}, 0.1) is None


@pytest.mark.parametrize("relative", [-0.08, 0.05])
def test_logit_step_moves_the_acceptance_by_the_relative_sd(relative):
    """Exactly in the expected accepted tokens; the simulated rate follows (over many
    repetitions, to its noise)."""
    keys = [f"{s}-{i}" for i in range(60) for s in ("chat", "code", "math")]
    delta = set_level.logit_step(FITTED, keys, relative)
    assert np.sign(delta) == np.sign(relative)
    moved = set_level.shifted(FITTED, delta)
    assert set_level.mean_accepted(moved, keys) / set_level.mean_accepted(FITTED, keys) == (
        pytest.approx(1 + relative, abs=1e-6))
    base, got = (simulated_rate(make_acceptance(s), keys, LENGTHS, 4, reps=64)
                 for s in (FITTED, moved))
    assert got / base - 1 == pytest.approx(relative, abs=0.02)
    assert set_level.logit_step({"name": "geometric", "alpha": 0.5}, keys, 0.1) is None
    assert set_level.logit_step(FITTED, keys, 50.0) is None        # out of reach


@given(st.lists(st.floats(0.001, 0.2), min_size=1, max_size=6), st.floats(0.01, 0.2))
@settings(max_examples=40, deadline=None)
def test_either_chance_without_set_shift_is_the_noise_alone(ses, bound):
    inside = np.prod([1 - 2 * norm.sf(bound / se) for se in ses])
    got = set_level.either_chance([0.0] * len(ses), ses, bound)
    assert got == pytest.approx(1 - inside, abs=1e-9)


@given(st.floats(0.005, 0.3), st.floats(0.01, 0.2))
@settings(max_examples=40, deadline=None)
def test_either_chance_without_noise_is_the_set_shift_alone(s, bound):
    """One row, no noise: the row breaks exactly when |z| > bound / s (to the grid's step)."""
    got = set_level.either_chance([s], [0.0], bound)
    assert got == pytest.approx(2 * norm.sf(bound / s), abs=0.02)


@given(st.lists(st.floats(-0.2, 0.2), min_size=1, max_size=5), st.floats(0.001, 0.1),
       st.floats(1.0, 3.0))
@settings(max_examples=40, deadline=None)
def test_either_chance_grows_with_the_set_shift(s, se, scale):
    ses = [se] * len(s)
    low = set_level.either_chance(s, ses, 0.05)
    high = set_level.either_chance([scale * x for x in s], ses, 0.05)
    assert 0.0 <= low <= high + 1e-9 <= 1.0 + 1e-9


def test_new_set_uncertainty_replays_the_held_out_runs_worse_and_better(quick_demo):
    """On the quick demo's runs: a pool of three splits that differ, the fitted spec moved one
    SD each way; a better-drafting set predicts more throughput on every held-out run, and
    every judged simulator target gets its chances."""
    from psdlab.analysis.trace import read_trace
    result, out = quick_demo
    named = [(m.spec.name, read_trace(m.path)) for m in result.measured]
    pool, ss = _pool({"fresh": 0.38, "fresh2": 0.45, "fresh3": 0.52})
    info = set_level.new_set_uncertainty(result.model_path, named, result.measured,
                                         result.validation, FITTED, pool, LENGTHS, (0,), ss)
    assert info["pool"]["relative"] > 0.05, info
    assert info["deltas"][0] > 0 > info["deltas"][1]
    by = {t["metric"]: t for t in info["targets"]}
    assert {"throughput_tok_s", "tpot.mean", "e2e.p99"} <= set(by)
    for t in by.values():
        assert t["set_sd"] > 0 and t["n"] >= 1
        for key in ("set_break_chance", "either_break_chance"):
            assert 0.0 <= t[key] <= 1.0
    md = "\n".join(set_level.set_md(info))
    assert "P(either breaks)" in md and "fresh2" in md
    # the direction: the +SD replay emits more per verification, so it runs faster
    from psdlab.validation.validate import validate
    held = [(n, t) for (n, t), m in zip(named, result.measured) if m.spec.role == "validate"]
    groups = {m.spec.name: m.spec.config for m in result.measured}
    up, down = (validate(result.model_path, held, seeds=(0,), groups=groups,
                         acceptance=set_level.shifted(FITTED, d))
                for d in info["deltas"])
    thr = {(r.run, sign): r.predicted for sign, v in (("+", up), ("-", down))
           for r in v.rows if r.metric == "throughput_tok_s" and r.source == "sim"}
    runs = {run for run, _ in thr}
    assert runs and all(thr[(r, "+")] > thr[(r, "-")] for r in runs)
    # per SD of set shift: the replays' difference over 2 * SHIFT_SDS, the largest reported
    err = {(r.run, sign): r.error for sign, v in (("+", up), ("-", down))
           for r in v.rows if r.metric == "tpot.mean" and r.source == "sim"}
    per_sd = [abs(err[(r, "+")] - err[(r, "-")]) / (2 * set_level.SHIFT_SDS) for r in runs]
    assert by["tpot.mean"]["set_sd"] == pytest.approx(max(per_sd), rel=1e-9)


def test_new_set_uncertainty_says_why_when_it_cannot_measure(quick_demo):
    result, _ = quick_demo
    pool, ss = _pool({"fresh": 0.3, "fresh2": 0.6})
    info = set_level.new_set_uncertainty(result.model_path, [], result.measured,
                                         result.validation, FITTED, pool, LENGTHS, (0,), ss)
    assert "targets" not in info and "fewer than three" in info["reason"]
    assert "Not carried into the prediction" in "\n".join(set_level.set_md(info))
    pool, ss = _pool({"fresh": 0.3, "fresh2": 0.5, "fresh3": 0.6})
    info = set_level.new_set_uncertainty(result.model_path, [], result.measured,
                                         result.validation, {"name": "geometric",
                                                             "alpha": 0.5}, pool, LENGTHS,
                                         (0,), ss)
    assert "pool" in info and "has no level" in info["reason"]
    pool, ss = _pool({"fresh": 0.05, "fresh2": 0.5, "fresh3": 0.95})     # beyond any shift
    info = set_level.new_set_uncertainty(result.model_path, [], result.measured,
                                         result.validation, FITTED, pool, LENGTHS, (0,), ss)
    assert "targets" not in info and "cannot move" in info["reason"], info
