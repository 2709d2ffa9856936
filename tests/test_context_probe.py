"""The controlled context probe (``runtime.context_timing``): its slope arithmetic on workers
with known costs, its run on real (tiny) workers, and what it leaves behind."""
from __future__ import annotations

import pytest

from psdlab.runtime.context_timing import context_probe
from psdlab.runtime.workers import Result
from runtime_engine_util import shared_pair

models = pytest.fixture(scope="module")(shared_pair)


class KnownCosts:
    """A worker whose command times are a known function of what it is asked: a verification
    takes ``base + slope * (summed context)``, a drafting phase of k passes ``k * base +
    slope * sum_j (summed context + j * seqs)`` (pass j reads the drafts before it), a feed
    nothing.  Every probe estimator must give back ``slope`` exactly."""

    def __init__(self, base: float, slope: float, max_len: int = 1024, vocab: int = 1000):
        self.base, self.slope, self.clock = base, slope, 0.0
        self.info = {"max_len": max_len, "vocab_size": vocab}
        self.asked: list[tuple[str, list[int], list[int]]] = []
        self._last: Result | None = None

    def submit(self, method: str, *args) -> None:
        slots, keep = list(args[0]), list(args[1]) if len(args) > 1 else []
        self.asked.append((method, slots, keep))
        took = 0.0
        if method == "verify":
            took = self.base + self.slope * sum(keep)
        elif method == "draft":
            k = max(args[3])
            took = sum(self.base + self.slope * (sum(keep) + j * len(slots)) for j in range(k))
        self._last = Result(None, self.clock, self.clock + took)
        self.clock += took + 1.0

    def wait(self) -> Result:
        return self._last


def test_probe_slopes_are_exact_on_known_costs():
    """The verify slope is per summed context token, the draft slope per summed context token
    and pass; with noise-free times the standard errors are 0."""
    target, drafter = KnownCosts(0.05, 2e-5), KnownCosts(0.01, 3e-5)
    got = context_probe(target, drafter, seqs=4, k=3, contexts=(64, 384), reps=4)
    assert got["verify"]["slope"] == pytest.approx(2e-5, rel=1e-9)
    assert got["draft"]["slope"] == pytest.approx(3e-5, rel=1e-9)
    assert got["verify"]["se"] == pytest.approx(0.0, abs=1e-12)
    assert got["contexts"] == [64, 384] and got["seqs"] == 4 and got["k"] == 3
    # two slot groups filled once each, timed alternately, released at the end
    feeds = [(s, c) for m, s, c in target.asked if m == "feed"]
    assert feeds == [([0, 1, 2, 3], [0] * 4), ([4, 5, 6, 7], [0] * 4)]
    timed = [tuple(c) for m, _, c in target.asked if m == "verify"]
    assert timed[:4] == [(64,) * 4, (384,) * 4, (384,) * 4, (64,) * 4]
    assert target.asked[-1][0] == "release" and drafter.asked[-1][0] == "release"


def test_probe_without_a_drafter_and_within_small_caches():
    """No drafter: only the verification is probed.  A KV cache shorter than the high context
    lowers it to what fits (the k + 1 tokens a pass appends included); one too short for any
    probe is a one-line error naming the contexts."""
    target = KnownCosts(0.05, 1e-5, max_len=200)
    got = context_probe(target, None, seqs=2, k=3, contexts=(64, 384), reps=2, slots=4)
    assert "draft" not in got and got["contexts"] == [64, 195]
    assert got["verify"]["slope"] == pytest.approx(1e-5, rel=1e-9)
    with pytest.raises(ValueError, match="contexts"):
        context_probe(KnownCosts(0.05, 1e-5, max_len=60), None, seqs=2, contexts=(64, 384))


@pytest.mark.parametrize("kw,field", [({"seqs": 5}, "seqs"), ({"contexts": (300, 100)},
                                                                "contexts"),
                                      ({"reps": 1}, "reps"), ({"k": 0}, "k")])
def test_probe_rejects_bad_settings_by_name(kw, field):
    with pytest.raises(ValueError, match=field):
        context_probe(KnownCosts(0.05, 1e-5), None, **kw)


def test_probe_on_real_workers_leaves_the_engine_as_it_was(models):
    """On a real engine's (inline) workers the probe measures positive times at both
    contexts, empties the slots it used, and the engine's greedy output afterwards is the
    same as a fresh engine's."""
    from psdlab.runtime.controller import Engine, EngineConfig
    from psdlab.runtime.requests import Request
    from psdlab.runtime.runner import ModelSpec
    cfg = EngineConfig(mode="psd", k=2, batch=2, max_new_tokens=6, ignore_eos=True,
                       max_len=96, backend="inline")
    reqs = [Request(i, [3 + i, 5, 7, 11], 0.0, None, 6) for i in range(4)]

    def outputs(eng):
        return {o.id: o.token_ids for o in eng.run(reqs, None).outputs}
    spec_t, spec_d = ModelSpec(str(models["target"])), ModelSpec(str(models["noisy"]))
    with Engine(cfg, spec_t, spec_d) as eng:
        got = context_probe(eng.target, eng.drafter, seqs=2, k=2, contexts=(8, 200), reps=2,
                            slots=cfg.slots)
        assert got["contexts"] == [8, 96 - 2 - 2]
        for role in ("verify", "draft"):
            assert got[role]["mean_lo_s"] > 0 and got[role]["mean_hi_s"] > 0
            assert got[role]["se"] >= 0
        for w in (eng.target, eng.drafter):
            assert [w.runner.cache.host_lengths[s] for s in range(4)] == [0] * 4
        after = outputs(eng)
    with Engine(cfg, spec_t, spec_d) as fresh:
        assert after == outputs(fresh)
