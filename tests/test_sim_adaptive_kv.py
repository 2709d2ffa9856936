"""The adaptive server's KV-cache limit (sim.adaptive_kv): no limit and a limit never reached give
the same trace; a small limit preempts, every request still gets its output, both paths agree
and the running requests' blocks (the lookahead of the largest k the policy may pick) never
exceed the capacity; a request that can never fit is the fixed modes' one-line error."""
from __future__ import annotations

import json

import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psdlab.analysis.trace import read_trace
from psdlab.sim.adaptive_kv import adaptive_lookahead
from psdlab.sim.build import build
from psdlab.sim.sim_config import config_from_dict, load_config
from psdlab.sim.simulation import simulate

CONFIGS = Path(__file__).resolve().parents[1] / "sim" / "configs"


def _raw(*, kv: int, block: int = 8, modes=("ar", "sd", "psd"), k_choices=(1, 2, 4),
         m: int = 6, n: int = 30, seed: int = 1, rate: float | None = 6.0,
         prompt: int = 48, out_max: int = 60):
    workload: dict = ({"name": "poisson", "rate": rate} if rate is not None
                      else {"name": "offline"})
    workload.update(prompt={"name": "uniform", "low": 1, "high": prompt},
                    output={"name": "uniform", "low": 1, "high": out_max})
    return {"seed": seed, "requests": n,
            "server": {"mode": "adaptive", "m": m, "kv_blocks": kv, "block_size": block},
            "adaptive": {"modes": list(modes), "k_choices": list(k_choices), "hold": 2},
            "target": {"name": "t", "cost": {"name": "affine", "base": 0.01,
                                             "per_token": 0.0006}},
            "drafter": {"name": "d", "cost": {"name": "affine", "base": 0.003,
                                              "per_token": 0.0002}},
            "acceptance": {"name": "geometric", "alpha": 0.7}, "workload": workload,
            "trace": {"level": "step"}}


def _blocks(tokens, lookahead: int, block: int) -> np.ndarray:
    return -(-(np.asarray(tokens, np.int64) + lookahead) // block)


class KVWatch:
    """An observer: at every boundary (after preemption and admission) the running requests'
    blocks, computed here from the server's state, fit in the capacity; it also records the
    re-admissions' tokens (prompt + output so far) and checks that a preempted request holds
    no state (no drafts, no batch)."""

    def __init__(self, cfg):
        pcfg = cfg.policy
        self.cap, self.block = cfg.server.kv_blocks, cfg.server.block_size
        self.look = 1 if set(pcfg.modes) == {"ar"} else max(pcfg.k_choices) + 1
        self.readmitted: list[int] = []
        self.boundaries = 0

    def __call__(self, server) -> None:
        self.boundaries += 1
        ids = np.asarray(server.running, np.int64)
        if ids.size:
            ctx = server.prompt[ids] + np.maximum(server.produced[ids], 1)
            need = np.where(server.output[ids] <= 1, 0, _blocks(ctx, self.look, self.block))
            assert int(need.sum()) <= self.cap
        for r in server.pending:
            if server.produced[r] > 0:
                self.readmitted.append(int(server.prompt[r] + server.produced[r]))
        for r in server.waiting:
            assert server.held[r] == 0 and server.batch[r] == -1


def _check_trace(path: Path, n: int, counters: dict) -> None:
    """Every request once, with its full output; preemptions as counted."""
    trace = read_trace(path)
    assert sorted(r.id for r in trace.requests) == list(range(n))
    emitted: Counter = Counter()
    for step in trace.steps:
        seen = [v.req for v in step.verified]
        assert len(seen) == len(set(seen))
        for v in step.verified:
            emitted[v.req] += v.emitted
    for r in trace.requests:
        assert emitted[r.id] + 1 == r.output_len            # + the prefill's first token
        assert r.arrival <= r.admitted <= r.first_token <= r.finish
    assert sum(r.preemptions for r in trace.requests) == counters["preemptions"]
    by_steps = Counter(r for step in trace.steps for r in step.preempted)
    assert by_steps == Counter({r.id: r.preemptions for r in trace.requests if r.preemptions})
    assert counters["completions"] == n


def _run(cfg, tmp_path: Path, name: str, path: str, observer=None):
    out = tmp_path / f"{name}.{path}.jsonl"
    res = simulate(cfg, path=path, trace_path=str(out), observer=observer)
    return res, out


# ---------------------------------------------------------------------------- (1) unchanged

@pytest.mark.parametrize("name", ["adaptive_setting2", "adaptive_h100_8b"])
def test_no_limit_and_a_limit_never_reached_give_the_same_trace(tmp_path, name):
    cfg = load_config(CONFIGS / f"{name}.toml").replace(requests=40, seed=3,
                                                        trace_level="step")
    b = build(cfg).core
    look = adaptive_lookahead(cfg.policy.modes, cfg.policy.k_choices)
    roomy = int(_blocks(b.prompt + b.output, look, cfg.server.block_size).sum())
    for path in ("fast", "simpy"):
        _, free = _run(cfg, tmp_path, "free", path)
        res, big = _run(cfg.replace(server_kv_blocks=roomy), tmp_path, "big", path)
        head, rest = big.read_bytes().split(b"\n", 1)
        free_head, free_rest = free.read_bytes().split(b"\n", 1)
        assert rest == free_rest                  # every step and request record
        run = json.loads(head)
        assert {k: run["extra"].pop(k) for k in ("kv_blocks", "block_size", "kv_lookahead")} \
            == {"kv_blocks": roomy, "block_size": cfg.server.block_size, "kv_lookahead": look}
        assert run == json.loads(free_head)       # the header says the limit, and only that
        assert res.counters["preemptions"] == 0


# ---------------------------------------------------------------------------- (2) a small limit

#: switches between AR and SD (as in tests/test_sim_adaptive.py): a full batch runs AR, the tail SD
AR_SD = {"m": 16, "n": 40, "adaptive": {"hold": 1, "margin": 0.0},
         "target": {"name": "t", "cost": {"name": "affine", "base": 0.02, "per_token": 0.003}}}


@pytest.mark.parametrize("modes, kv, change", [(("ar", "sd", "psd"), 40, {}),
                                               (("psd",), 40, {}), (("ar", "sd"), 60, AR_SD)])
def test_a_small_limit_preempts_and_every_request_completes(tmp_path, modes, kv, change):
    raw = _raw(kv=kv, modes=modes, rate=None, m=change.get("m", 6), n=change.get("n", 30))
    raw["adaptive"].update(change.get("adaptive", {}))
    raw["target"] = change.get("target", raw["target"])
    cfg = config_from_dict(raw)
    watch = KVWatch(cfg)
    slow, slow_path = _run(cfg, tmp_path, "small", "simpy", watch)
    fast, fast_path = _run(cfg, tmp_path, "small", "fast")
    assert fast_path.read_bytes() == slow_path.read_bytes()
    assert fast.counters == slow.counters
    assert slow.counters["preemptions"] > 0 and watch.readmitted
    _check_trace(slow_path, cfg.requests, slow.counters)
    trace = read_trace(slow_path)
    # re-admissions recompute prompt + output so far on the target
    target = [p for s in trace.steps for p in s.phases
              if p.kind == "prefill" and p.device == "sim:target"]
    assert sum(p.tokens for p in target) == sum(r.prompt_len for r in trace.requests) \
        + sum(watch.readmitted)
    if modes == ("psd",):          # never leaves PSD: every dropped draft is a preemption's
        assert slow.trace.run.extra["adaptive"]["drafts_dropped"] > 0
    if modes == ("ar", "sd"):      # re-admissions in AR steps leave the drafter behind
        steps = slow.trace.run.extra["adaptive"]["steps"]
        assert steps["ar"] > 0 and steps["sd"] > 0 and slow.counters["catch_up_tokens"] > 0


def test_a_readmission_prefills_the_drafter_too(tmp_path):
    """SD only: every step speculates, so every prefill (re-admissions included) runs on both
    devices over the same tokens and the drafter never has to catch up."""
    cfg = config_from_dict(_raw(kv=40, modes=("sd",), rate=None))
    res, path = _run(cfg, tmp_path, "sd", "fast")
    assert res.counters["preemptions"] > 0
    for s in read_trace(path).steps:
        pre = [p for p in s.phases if p.kind == "prefill"]
        if pre:
            assert len(pre) == 2 and pre[0].tokens == pre[1].tokens
    assert res.counters["catch_up_tokens"] == 0


def test_the_lookahead_is_the_largest_k_the_policy_may_pick():
    assert adaptive_lookahead(("ar", "sd", "psd"), (1, 2, 6)) == 7
    assert adaptive_lookahead(("psd",), (3,)) == 4
    assert adaptive_lookahead(("ar",), ()) == 1
    assert adaptive_lookahead(("ar",), (1, 4)) == 1


# ---------------------------------------------------------------------------- (3) properties

@st.composite
def small_runs(draw):
    block = draw(st.sampled_from([4, 8, 16]))
    modes = draw(st.sampled_from([("ar", "sd", "psd"), ("sd", "psd"), ("psd",), ("ar", "sd"),
                                  ("ar",), ("ar", "psd")]))
    k_choices = draw(st.sampled_from([(1,), (1, 2, 4), (2, 5)]))
    prompt, out_max = draw(st.integers(1, 60)), draw(st.integers(1, 60))
    look = adaptive_lookahead(modes, k_choices)
    alone = int(_blocks(prompt + out_max, look, block))    # the largest request fits alone
    kv = alone * draw(st.sampled_from([1, 1, 2, 3]))
    rate = draw(st.sampled_from([None, None, 200.0, 20.0]))
    raw = _raw(kv=kv, block=block, modes=modes, k_choices=k_choices, m=draw(st.integers(1, 8)),
               n=draw(st.integers(1, 40)), seed=draw(st.integers(0, 1000)), rate=rate,
               prompt=prompt, out_max=out_max)
    raw["server"]["cap_proposals"] = draw(st.booleans())
    return raw


@settings(deadline=None, max_examples=int(os.environ.get("SIM_EXAMPLES", 30)),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(raw=small_runs())
def test_invariants_under_a_kv_limit(tmp_path, raw):
    cfg = config_from_dict(raw)
    watch = KVWatch(cfg)
    slow, slow_path = _run(cfg, tmp_path, "p", "simpy", watch)
    assert watch.boundaries > 0
    _check_trace(slow_path, cfg.requests, slow.counters)
    fast, fast_path = _run(cfg, tmp_path, "p", "fast", KVWatch(cfg))
    assert fast_path.read_bytes() == slow_path.read_bytes()
    _, again = _run(cfg, tmp_path, "again", "fast")
    assert again.read_bytes() == fast_path.read_bytes()


# ---------------------------------------------------------------------------- (4) never fits

def test_a_request_that_can_never_fit_is_the_fixed_modes_error():
    raw = _raw(kv=3, block=8, k_choices=(1, 4), rate=None)
    with pytest.raises(ValueError) as adaptive:
        simulate(config_from_dict(raw))
    fixed = {**raw, "server": {**raw["server"], "mode": "sd", "k": 4}}
    fixed.pop("adaptive")
    with pytest.raises(ValueError) as sd:
        simulate(config_from_dict(fixed))
    msg = str(adaptive.value)
    assert msg == str(sd.value)
    assert msg.startswith("server.kv_blocks: request ") and "\n" not in msg
