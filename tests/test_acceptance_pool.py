"""The acceptance pool: greedy match patterns measured untimed (runtime/acceptance_probe.py)
and how they enter the acceptance fit (validation/acceptance/pool.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from greedy_util import greedy_trace
from psdlab.sim.acceptance_registry import make_acceptance
from psdlab.validation.acceptance import pool as ap
from psdlab.validation.acceptance.transfer import trials, verifications


def _patterns(n: int, length: int, seed: int, rate: float = 0.6) -> dict[str, str]:
    rng = np.random.default_rng(seed)
    styles = ("chat", "code", "math")
    return {f"{styles[i % 3]}-{i}": "." + "".join("1" if rng.random() < rate else "0"
                                                   for _ in range(length - 1))
            for i in range(n)}


@settings(max_examples=60, deadline=None)
@given(st.text("01", min_size=1, max_size=30), st.integers(1, 8))
def test_walk_is_what_a_greedy_run_and_the_simulator_do(bits, k):
    """Walking a pattern at k gives the verifications a greedy run makes (the runtime's
    proposal cap min(k, L - n - 1) included), and each accepted count is the simulator's
    for that pattern, k and position; the walk emits every output token after the first."""
    pattern = "." + bits
    steps = ap.walk(pattern, k)
    run = [(n, p, a) for _, _, n, p, a in verifications([greedy_trace({"chat-0": pattern}, k)])]
    assert steps == run
    assert sum(a + 1 for _, _, a in steps) == len(pattern) - 1
    acc = make_acceptance({"name": "matches", "requests": {"chat-0": pattern},
                           "fallback": {"name": "geometric", "alpha": 0.5}})
    params = acc.request_params(np.random.default_rng(0), 1, keys=["chat-0"])
    for n, p, a in steps:
        if p == k:        # the simulator caps by k; the run's end-of-output cap is its own
            got = acc.sample_at(np.random.default_rng(0), params, k, np.array([n]))
            assert int(got[0]) == a
        assert 0 <= a <= p <= k


def test_the_pool_enters_the_fit_but_never_overrides_a_served_prompt():
    """Pool prompts no run served add their walked verifications at the runs' k; a pool
    entry for a prompt a run served is ignored (the traced verifications stand)."""
    served = _patterns(6, 14, seed=1)
    traces = [greedy_trace(served, k, mode=m) for k in (2, 4) for m in ("sd-sep", "psd")]
    base = trials(traces)
    fresh = _patterns(9, 14, seed=2)
    fresh = {k.replace("-", "-p"): v for k, v in fresh.items()}
    conflicting = {key: "." + "1" * 13 for key in served}       # would accept everything
    data = ap.acceptance_data(traces, {**fresh, **conflicting})
    assert set(data.prompt) == set(served) | set(fresh)
    mine = data.subset(set(served))
    assert np.array_equal(mine.y, base.y) and np.array_equal(mine.w, base.w)
    # the pool's prompts are walked at the runs' k (2 and 4), each fact once
    alone = ap.acceptance_data([], None)
    assert alone.y.size == 0
    walked = data.subset(set(fresh))
    want = sum(min(a + 1, p) for pat in fresh.values() for k in (2, 4)
               for _, p, a in ap.walk(pat, k))
    assert 0 < walked.y.size <= want
    assert walked.w.sum() == pytest.approx(sum(
        len({n + i for n, p, a in ap.walk(pat, 2) + ap.walk(pat, 4)
             for i in range(min(a + 1, p))}) for pat in fresh.values()))
    merged = ap.merged_patterns({"chat-0": "..1"}, {**fresh, **conflicting}, traces)
    assert merged["chat-0"] == "..1" and set(fresh) <= set(merged)
    assert not set(conflicting) - {"chat-0"} & set(merged)


def test_the_cv_scores_pool_prompts_in_folds_and_picks_up_their_level():
    """With the pool the CV scores every pool prompt (in ``MAX_FOLDS`` folds once there are
    more prompts than that) and the refitted model learns the pool's level: a pool whose
    prompts match less predicts less acceptance than the runs alone."""
    from psdlab.validation.acceptance.cross_validation import MAX_FOLDS, folds, select
    served = _patterns(6, 14, seed=3, rate=0.7)
    traces = [greedy_trace(served, k) for k in (2, 4)]
    low = {k.replace("-", "-p"): v for k, v in _patterns(60, 14, seed=4, rate=0.2).items()}
    alone, pooled = select(traces), select(traces, pool=low)
    assert set(pooled.prompts) == set(served) | set(low)
    assert len(folds(list(pooled.prompts))) == MAX_FOLDS
    assert sorted(p for f in folds(list(pooled.prompts)) for p in f) == sorted(pooled.prompts)
    assert pooled.to_dict()["method"].startswith(f"{MAX_FOLDS}-fold")
    assert alone.to_dict()["method"].startswith("leave-one-prompt-out")

    def mean_accepted(sel) -> float:
        acc = make_acceptance(sel.chosen.spec())
        rng = np.random.default_rng(0)
        keys = ["chat-new"] * 400
        params = acc.request_params(rng, 400, keys=keys)
        return float(np.mean(acc.sample_at(rng, params, 4, np.full(400, 3))))
    assert mean_accepted(pooled) < mean_accepted(alone) - 0.3


def test_pool_file_round_trip_and_bad_input(tmp_path):
    path = str(tmp_path / ap.POOL_FILE)
    assert ap.read_pool(path) is None
    ap.write_pool(path, {"chat-1": ".101"}, max_new_tokens=4)
    assert ap.read_pool(path) == {"chat-1": ".101"}
    assert json.loads(open(path).read())["max_new_tokens"] == 4
    (tmp_path / ap.POOL_FILE).write_text(json.dumps({"prompts": {"chat-1": "1x"}}))
    with pytest.raises(ValueError, match="field 'prompts'"):
        ap.read_pool(path)
    with pytest.raises(ValueError, match="k"):
        ap.walk(".11", 0)


@pytest.mark.e2e
def test_probe_patterns_are_the_runs_match_patterns(tmp_path_factory):
    """The untimed probe (the target's AR output, one teacher-forced drafter pass) gives the
    match pattern that real greedy SD runs of the same prompts show, position by position,
    and walking it reproduces those runs' verifications."""
    from runtime_engine_util import prompts, shared_pair
    from psdlab.runtime.acceptance_probe import probe_patterns
    from psdlab.runtime.controller import Engine, EngineConfig
    from psdlab.runtime.requests import Request
    from psdlab.runtime.runner import ModelSpec
    from psdlab.validation.acceptance.match_patterns import match_patterns
    pair = shared_pair(tmp_path_factory)
    items = [(f"chat-{i}", tuple(p)) for i, p in enumerate(prompts(6, seed=5, lo=3, hi=20))]
    new = 12
    cfg = EngineConfig(mode="sd-sep", k=4, batch=3, max_new_tokens=new, ignore_eos=True,
                       max_len=128, backend="inline", seed=0)
    runs = []
    with Engine(cfg, ModelSpec(str(pair["target"])), ModelSpec(str(pair["noisy"]))) as eng:
        for k in (1, 2, 4):
            res = eng.run([Request(rid, ids, 0.0, None, new) for rid, ids in items],
                          config=EngineConfig(**{**cfg.__dict__, "k": k}))
            assert not res.error
            runs.append(res.trace)
    probe = probe_patterns(str(pair["target"]), str(pair["noisy"]), items, new, workers=1)
    assert set(probe) == {rid for rid, _ in items}
    assert all(len(p) == new and p[0] == "." for p in probe.values())
    seen = match_patterns(runs).patterns
    agree = total = 0
    for rid, pat in seen.items():
        for j, c in enumerate(pat):
            if c in "01":
                total += 1
                agree += c == probe[rid][j]
    assert total > 30 and agree == total
    ones = sum(c == "1" for p in probe.values() for c in p)
    assert 0 < ones < sum(len(p) - 1 for p in probe.values())     # a mix, not trivial
    for tr in runs:
        by = {}
        for prompt, _, n, p, a in verifications([tr]):
            by.setdefault(prompt, []).append((n, p, a))
        for rid in by:
            assert by[rid] == ap.walk(probe[rid], tr.run.k), (rid, tr.run.k)


def test_prompt_agreement_is_one_for_the_target_itself_and_less_for_another(tmp_path_factory):
    """The drafter-target agreement on a prompt's own tokens: a drafter that is the target
    agrees everywhere (overlap 1), one with other weights does not; padding in a batch never
    changes a prompt's figures; ``skip`` leaves out the first positions."""
    from runtime_engine_util import prompts, shared_pair
    from psdlab.runtime.acceptance_probe import prompt_agreement
    pair = shared_pair(tmp_path_factory)
    items = [(f"chat-{i}", tuple(p)) for i, p in enumerate(prompts(5, seed=7, lo=4, hi=20))]
    same = prompt_agreement(str(pair["target"]), str(pair["target"]), items)
    assert set(same) == {rid for rid, _ in items}
    assert all(f["agree"] == 1.0 and f["overlap"] == pytest.approx(1.0, abs=1e-5)
               for f in same.values())
    other = prompt_agreement(str(pair["target"]), str(pair["other"]), items)
    assert all(0.0 <= f["agree"] <= 1.0 and 0.0 < f["overlap"] < 0.99 for f in other.values())
    assert min(f["agree"] for f in other.values()) < 1.0
    alone = prompt_agreement(str(pair["target"]), str(pair["other"]), items[2:3])
    assert alone["chat-2"] == pytest.approx(other["chat-2"], abs=1e-5)
    skipped = prompt_agreement(str(pair["target"]), str(pair["other"]), items, skip=2)
    assert any(skipped[r] != other[r] for r in other)
