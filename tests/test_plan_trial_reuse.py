"""What a plan's bisection trials of one configuration reuse: the per-process trajectory cache
(`sim.trajectories.cached_trajectories`: a repeat of the same seed and inputs gets the same
read-only arrays without drawing, any other input draws anew) and the cost tables
(`sim.costtable.TableShare`: handed on only between runs that differ in their workload); a
simulation gives the same trace either way."""
from __future__ import annotations

import numpy as np
import pytest

import psdlab.sim.trajectories as T
from psdlab.sim.acceptance_registry import make_acceptance


@pytest.fixture
def cache(monkeypatch):
    monkeypatch.setattr(T, "CACHE_SIZE", 32)
    T._CACHE.clear()
    yield
    T._CACHE.clear()


def _args(seed=1, k=3, alpha=0.7, n=6):
    spec = {"name": "geometric", "alpha": alpha}
    ss = np.random.SeedSequence(seed).spawn(3)[2]
    return (ss, spec, make_acceptance(spec), np.full(n, alpha), np.full(n, k, np.int64),
            np.arange(10, 10 + n, dtype=np.int64), np.arange(5, 5 + n, dtype=np.int64))


def test_a_repeat_is_the_same_read_only_draw(cache):
    a = T.cached_trajectories(*_args())
    b = T.cached_trajectories(*_args())
    assert a is b and not a.acc.flags.writeable and not a.ctx.flags.writeable
    with pytest.raises(ValueError):
        a.acc[0] = 1
    fresh = T.sample_trajectories(np.random.default_rng(_args()[0]), *_args()[2:])
    assert np.array_equal(a.acc, fresh.acc) and np.array_equal(a.ctx, fresh.ctx)


@pytest.mark.parametrize("change", [dict(seed=2), dict(k=2), dict(alpha=0.5), dict(n=7)])
def test_other_inputs_draw_anew(cache, change):
    a = T.cached_trajectories(*_args())
    b = T.cached_trajectories(*_args(**change))
    assert a is not b and len(T._CACHE) == 2


def test_the_cache_is_bounded(cache, monkeypatch):
    monkeypatch.setattr(T, "CACHE_SIZE", 2)
    for seed in range(5):
        T.cached_trajectories(*_args(seed=seed))
    assert len(T._CACHE) == 2
    monkeypatch.setattr(T, "CACHE_MAX_ENTRIES", 10)       # a large draw is not kept
    big = T.cached_trajectories(*_args(seed=9))
    assert big.ctx.size > 10 and big is not T.cached_trajectories(*_args(seed=9))
    monkeypatch.setattr(T, "CACHE_SIZE", 0)               # off
    assert T.cached_trajectories(*_args(seed=3)) is not T.cached_trajectories(*_args(seed=3))


def test_a_simulation_gives_the_same_trace_with_and_without_the_cache(monkeypatch, tmp_path):
    from pathlib import Path

    from psdlab.sim.sim_config import load_config
    from psdlab.sim.simulation import simulate
    cfg = load_config(str(Path(__file__).resolve().parents[1] / "sim" / "configs" /
                          "psd_offline.toml")).replace(requests=40)
    texts = []
    for size in (0, 32, 32):                 # off, then a miss and a hit
        monkeypatch.setattr(T, "CACHE_SIZE", size)
        if size == 0:
            T._CACHE.clear()
        out = tmp_path / f"t{len(texts)}.jsonl"
        simulate(cfg, trace_path=str(out))
        lines = out.read_text().splitlines()
        texts.append([line for line in lines if '"type": "run"' not in line])
    assert texts[0] == texts[1] == texts[2] and len(texts[0]) > 40
    T._CACHE.clear()


def test_shared_cost_tables_give_the_same_trace_and_only_within_a_configuration(tmp_path):
    from pathlib import Path

    from psdlab.sim.costtable import TableShare
    from psdlab.sim.sim_config import load_config
    from psdlab.sim.simulation import simulate
    base = load_config(str(Path(__file__).resolve().parents[1] / "sim" / "configs" /
                           "psd_offline.toml")).replace(requests=30)
    poisson = base.replace(workload={**base.workload, "name": "poisson", "rate": 2.0})

    def steps(cfg, tables=None):
        out = tmp_path / "t.jsonl"
        simulate(cfg, trace_path=str(out), tables=tables)
        return [x for x in out.read_text().splitlines() if '"type": "run"' not in x]

    share = TableShare()
    first = steps(base, share)
    assert share.costs is not None and share.offer(poisson) is share.costs
    assert steps(poisson, share) == steps(poisson) and first == steps(base)
    other = base.replace(server_k=base.server.k + 1)
    assert share.offer(other) is None                  # another configuration: its own tables
    kept = share.costs
    steps(other, share)
    assert share.costs is kept                         # the first configuration's stay
