"""Acceptance models (sim/acceptance.py): statistics, bounds, replay order, errors."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdlab.analysis.trace import RunInfo, StepRecord, Trace, Verified, write_trace
from psdlab.sim.acceptance_registry import make_acceptance

N = 200_000


def draw(model, k, n=N, seed=0):
    rng = np.random.default_rng(seed)
    return model.sample(rng, model.request_params(rng, n), k)


def assert_mean(samples, expected):
    se = samples.std() / np.sqrt(samples.size) + 1e-12
    assert abs(samples.mean() - expected) < 5 * se, (samples.mean(), expected)


@pytest.mark.parametrize("alpha, k", [(0.8, 4), (0.5, 1), (0.95, 5), (0.3, 8), (0.9, 0)])
def test_geometric_mean_and_distribution(alpha, k):
    model = make_acceptance({"name": "geometric", "alpha": alpha})
    closed = sum(alpha ** i for i in range(1, k + 1))
    assert model.expected_accepted(k) == pytest.approx(closed)
    x = draw(model, k)
    assert x.dtype.kind == "i" and x.min() >= 0 and x.max() <= k
    assert_mean(x, closed)
    for j in range(k):                      # P(X = j) = alpha^j (1 - alpha) below k
        p = alpha ** j * (1 - alpha)
        assert abs((x == j).mean() - p) < 5 * np.sqrt(p * (1 - p) / N) + 1e-9
    assert abs((x == k).mean() - alpha ** k) < 5 * np.sqrt(alpha ** k * (1 - alpha ** k) / N) + 1e-9


def test_geometric_edges_and_per_sequence_k():
    rng = np.random.default_rng(1)
    ones = make_acceptance({"name": "geometric", "alpha": 1.0})
    assert np.array_equal(ones.sample(rng, ones.request_params(rng, 4), [0, 1, 3, 7]), [0, 1, 3, 7])
    zeros = make_acceptance({"name": "geometric", "alpha": 0.0})
    assert zeros.sample(rng, zeros.request_params(rng, 5), 4).tolist() == [0] * 5
    model = make_acceptance({"name": "geometric", "alpha": 0.9})
    k = np.tile([1, 2, 5], 20_000)
    x = model.sample(rng, model.request_params(rng, k.size), k)
    assert (x <= k).all() and (x[k == 1] <= 1).all()
    assert_mean(x[k == 5], model.expected_accepted(5))
    assert model.sample(rng, np.zeros(0), 3).shape == (0,)


def test_beta_per_request_alpha_and_mean():
    model = make_acceptance({"name": "beta", "mean": 0.7, "concentration": 8})
    rng = np.random.default_rng(2)
    alpha = model.request_params(rng, N)
    assert_mean(alpha, 0.7)
    assert alpha.var() == pytest.approx(0.7 * 0.3 / 9, rel=0.03)
    assert_mean(model.sample(rng, alpha, 5), model.expected_accepted(5))
    # Jensen: E[alpha^i] >= mean^i, with equality in the limit of infinite concentration
    geo = make_acceptance({"name": "geometric", "alpha": 0.7}).expected_accepted(5)
    assert model.expected_accepted(5) > geo
    tight = make_acceptance({"name": "beta", "mean": 0.7, "concentration": 1e6})
    assert tight.expected_accepted(5) == pytest.approx(geo, rel=1e-4)


def test_positional_conditional_rates():
    rates = [0.9, 0.6, 0.8]
    model = make_acceptance({"name": "positional", "rates": rates})
    x = draw(model, 5)
    for i, r in enumerate(rates + [0.8, 0.8]):      # beyond the list: the last rate
        reached = x >= i
        frac = (x[reached] >= i + 1).mean()
        assert abs(frac - r) < 5 * np.sqrt(r * (1 - r) / reached.sum())
    assert_mean(x, model.expected_accepted(5))
    assert model.expected_accepted(2) == pytest.approx(0.9 + 0.9 * 0.6)
    flat = make_acceptance({"name": "positional", "rates": [0.75]})
    geo = make_acceptance({"name": "geometric", "alpha": 0.75})
    assert flat.expected_accepted(6) == pytest.approx(geo.expected_accepted(6))


def write_steps(path, rows_per_step):
    steps = [StepRecord(index=i, start=float(i), end=i + 0.5,
                        verified=tuple(Verified(req=j, proposed=p, accepted=a, emitted=a + 1)
                                       for j, (p, a) in enumerate(rows)))
             for i, rows in enumerate(rows_per_step)]
    write_trace(path, Trace(run=RunInfo(mode="sd", k=4, m=2, source="sim"), steps=steps))


def test_replay_in_order_cycling_and_clipped(tmp_path):
    path = tmp_path / "t.jsonl"
    write_steps(path, [[(4, 0), (4, 4)], [(4, 2)], [(4, 3), (4, 1)]])
    model = make_acceptance({"name": "replay", "trace": str(path)})
    rng = np.random.default_rng(0)
    p = model.request_params(rng, 3)
    assert model.sample(rng, p, 4).tolist() == [0, 4, 2]
    assert model.sample(rng, p[:2], 4).tolist() == [3, 1]
    assert model.sample(rng, p, 2).tolist() == [0, 2, 2]      # cycled, clipped to k = 2
    model.reset()
    assert model.sample(rng, p, 4).tolist() == [0, 4, 2]
    assert model.expected_accepted(4) == pytest.approx(10 / 5)
    assert model.expected_accepted(1) == pytest.approx(4 / 5)


def test_replay_beyond_measured_proposal(tmp_path):
    counts = {"name": "replay", "counts": [2, 0, 1, 2], "proposed": 2}
    clip = make_acceptance(counts)
    assert clip.sample(np.random.default_rng(0), np.zeros(4), 6).tolist() == [2, 0, 1, 2]
    ext = make_acceptance({**counts, "beyond": "geometric"})
    x = np.concatenate([ext.sample(np.random.default_rng(s), np.zeros(4), 6) for s in range(3000)])
    assert (x[1::4] == 0).all() and (x[2::4] == 1).all()          # uncensored: unchanged
    full = x[0::4]
    assert full.min() >= 2 and full.max() <= 6 and full.max() > 2
    assert_mean(np.concatenate([x]), ext.expected_accepted(6))


def test_same_seed_same_samples():
    for spec in ({"name": "geometric", "alpha": 0.6}, {"name": "beta", "mean": 0.5,
                 "concentration": 3}, {"name": "positional", "rates": [0.9, 0.5]}):
        a = draw(make_acceptance(spec), 4, n=1000, seed=9)
        b = draw(make_acceptance(spec), 4, n=1000, seed=9)
        c = draw(make_acceptance(spec), 4, n=1000, seed=10)
        assert np.array_equal(a, b) and not np.array_equal(a, c)


@pytest.mark.parametrize("spec, field", [
    ({"name": "geometric", "alpha": 1.2}, "acceptance.alpha"),
    ({"name": "geometric"}, "acceptance.alpha"),
    ({"name": "geometric", "alpha": 0.5, "k": 3}, "acceptance.k"),
    ({"name": "positional", "rates": []}, "acceptance.rates"),
    ({"name": "positional", "rates": [0.5, -0.1]}, r"acceptance.rates\[1\]"),
    ({"name": "beta", "mean": 1.0, "concentration": 5}, "acceptance.mean"),
    ({"name": "beta", "mean": 0.5, "concentration": 0}, "acceptance.concentration"),
    ({"name": "replay", "counts": [1, 5], "proposed": 4}, r"acceptance.counts\[1\]"),
    ({"name": "replay", "counts": [1], "proposed": 4, "beyond": "x"}, "acceptance.beyond"),
    ({"name": "replay"}, "acceptance.trace"),
    ({"name": "magic"}, "acceptance.name"),
])
def test_bad_specs_name_the_field(spec, field):
    with pytest.raises(ValueError, match=f"^{field}"):
        make_acceptance(spec)


def test_replay_trace_without_steps_and_bad_k(tmp_path):
    path = tmp_path / "empty.jsonl"
    write_steps(path, [])
    with pytest.raises(ValueError, match="^acceptance.trace: .* has no verified rows"):
        make_acceptance({"name": "replay", "trace": str(path)})
    model = make_acceptance({"name": "geometric", "alpha": 0.5})
    with pytest.raises(ValueError, match="^k:"):
        model.sample(np.random.default_rng(0), np.full(2, 0.5), -1)


@settings(deadline=None, max_examples=60)
@given(name=st.sampled_from(["geometric", "beta", "positional"]),
       p=st.floats(0.01, 0.99), ks=st.lists(st.integers(0, 12), min_size=1, max_size=30),
       seed=st.integers(0, 2 ** 32 - 1))
def test_samples_always_within_zero_and_k(name, p, ks, seed):
    spec = {"geometric": {"name": "geometric", "alpha": p},
            "beta": {"name": "beta", "mean": p, "concentration": 4},
            "positional": {"name": "positional", "rates": [p, 1 - p]}}[name]
    model = make_acceptance(spec)
    rng = np.random.default_rng(seed)
    k = np.asarray(ks)
    x = model.sample(rng, model.request_params(rng, k.size), k)
    assert x.shape == k.shape and (x >= 0).all() and (x <= k).all()
    assert 0 <= model.expected_accepted(int(k.max())) <= k.max()
