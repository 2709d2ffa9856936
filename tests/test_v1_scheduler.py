"""The vLLM-V1-style scheduler (``server.scheduler = "v1"``, sim.token_budget, docs/scheduler.md):
a token budget per step, decode tokens first, prefill chunks FCFS in the same target pass."""
from __future__ import annotations

import filecmp
from collections import defaultdict
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from psdlab.sim.sim_config import config_from_dict
from psdlab.sim.simulation import simulate

POISSON = {"name": "poisson", "rate": 40.0,
           "prompt": {"name": "uniform", "low": 8, "high": 300},
           "output": {"name": "lognormal", "mean": 40, "median": 30, "max": 120}}


def v1_config(*, mode: str = "psd", k: int = 4, m: int = 4, requests: int = 20,
              scheduler: str = "v1", budget: Any = 64, kv_blocks: int = 0,
              block_size: int = 8, workload: dict[str, Any] | None = None,
              policy: str = "paper", seed: int = 0, jitter: dict[str, Any] | None = None,
              k_choices: tuple[int, ...] = (), first_token: str = "prefill",
              affine: bool = True, **server: Any):
    """A small config with affine costs (a pass's time grows with its tokens, so a chunk's
    size matters) or constant ones."""
    t_cost = ({"name": "affine", "base": 0.02, "per_token": 1e-4, "per_context": 1e-7}
              if affine else {"name": "constant", "time": 0.03})
    d_cost = ({"name": "affine", "base": 0.002, "per_token": 1e-5, "per_context": 1e-8}
              if affine else {"name": "constant", "time": 0.004})
    raw: dict[str, Any] = {
        "seed": seed, "requests": requests,
        "server": {"mode": mode, "k": k, "m": m, "policy": policy, "kv_blocks": kv_blocks,
                   "block_size": block_size, "k_choices": list(k_choices),
                   "first_token": first_token, "scheduler": scheduler,
                   "max_num_batched_tokens": budget, **server},
        "target": {"name": "t", "cost": t_cost},
        "drafter": {"name": "d", "cost": d_cost},
        "acceptance": {"name": "geometric", "alpha": 0.7},
        "workload": workload or POISSON,
        "trace": {"level": "step"},
    }
    if jitter:
        raw["jitter"] = jitter
    return config_from_dict(raw)


def _run(cfg, path: str = "fast"):
    """(result, core, KV blocks seen at the boundaries) of one run."""
    seen: dict[str, Any] = {"kv": []}

    def observe(core):
        seen["core"] = core
        if core.v1 is not None and core.cap > 0:
            seen["kv"].append(core.v1.kv_used())

    res = simulate(cfg, path=path, observer=observe)
    return res, seen["core"], seen["kv"]


def _budget_per_step(trace) -> dict[int, int]:
    """Tokens each step's target pass computed (verify + the target's prefill chunks), for a
    mode whose drafter has a device of its own (the target's phases are then its own)."""
    tokens: dict[int, int] = defaultdict(int)
    for step in trace.steps:
        for ph in step.phases:
            if ph.device == "sim:target" and ph.kind in ("verify", "prefill"):
                tokens[step.index] += ph.tokens
    return tokens


# ---------------------------------------------------------------------------- (a) properties

@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mode=st.sampled_from(["ar", "sd", "sd-sep", "psd", "dsd"]),
       k=st.integers(1, 4), m=st.integers(1, 4), extra=st.integers(0, 120),
       requests=st.integers(3, 16), high=st.integers(10, 260),
       kv=st.sampled_from([0, 1, 1, 2]), policy=st.sampled_from(["paper", "rebalance"]),
       rate=st.sampled_from([5.0, 50.0, 1000.0]), seed=st.integers(0, 3))
def test_v1_properties(mode, k, m, extra, requests, high, kv, policy, rate, seed):
    """No token lost (every request emits exactly its output length: the first token from its
    last chunk, the rest from its verifications), no step's target pass over the budget, the
    KV cache never over capacity, every request finishes."""
    per_seq = k + 1 if mode != "ar" else 1
    budget = m * per_seq + extra
    workload = {"name": "poisson", "rate": rate,
                "prompt": {"name": "uniform", "low": 1, "high": high},
                "output": {"name": "uniform", "low": 1, "high": 40}}
    # kv: unlimited, tight (one longest request plus a little) or roomier
    cap = {0: 0, 1: (high + 40 + k + 1) // 8 + 2, 2: 4 * ((high + 40 + k + 1) // 8 + 2)}[kv]
    cfg = v1_config(mode=mode, k=k, m=m, requests=requests, budget=budget, kv_blocks=cap,
                    workload=workload, policy=policy, seed=seed)
    res, core, kv_seen = _run(cfg)
    event(f"preempted: {res.counters['preemptions'] > 0}")
    event(f"chunked: {core.v1.peak_tokens == budget}")
    reqs = {r.id: r for r in res.trace.requests}
    assert sorted(reqs) == list(range(requests))                       # every one finishes
    emitted: dict[Any, int] = defaultdict(int)
    for step in res.trace.steps:
        for v in step.verified:
            emitted[v.req] += v.emitted
    for r in reqs.values():
        assert np.isfinite(r.finish) and r.admitted <= r.first_token <= r.finish
        assert 1 + emitted[r.id] == r.output_len                       # no token lost
    assert core.v1.peak_tokens <= budget
    if core.spec.drafter != "shared":                 # the target's phases are its own
        assert max(_budget_per_step(res.trace).values()) <= budget
    if cap:
        assert max(kv_seen, default=0) <= cap and core.v1.peak_blocks <= cap


# ---------------------------------------------------------------------------- (b) paths

PATH_CASES = {
    "psd-kv-jitter": dict(mode="psd", kv_blocks=90, jitter={"dist": "gamma", "cv": 0.2}),
    "psd-rebalance": dict(mode="psd", policy="rebalance", budget=40),
    "sd-colocated": dict(mode="sd", budget=30),
    "sd-sep-k-choices-kv": dict(mode="sd-sep", k_choices=(1, 3), kv_blocks=70),
    "ar-first-token-step": dict(mode="ar", first_token="step", budget=8),
    "dsd": dict(mode="dsd", budget=100),
    "psd-offline-constant": dict(mode="psd", affine=False, requests=8, budget=48,
                                 workload={"name": "offline",
                                           "prompt": {"name": "fixed", "value": 100},
                                           "output": {"name": "fixed", "value": 60}}),
}


@pytest.mark.parametrize("name", sorted(PATH_CASES))
def test_v1_fast_and_simpy_paths_write_identical_traces(tmp_path, name):
    cfg = v1_config(**PATH_CASES[name])
    fast = simulate(cfg, path="fast", trace_path=str(tmp_path / "fast.jsonl"))
    slow = simulate(cfg, path="simpy", trace_path=str(tmp_path / "simpy.jsonl"))
    assert filecmp.cmp(tmp_path / "fast.jsonl", tmp_path / "simpy.jsonl", shallow=False)
    assert fast.counters == {**slow.counters, "intervals": fast.counters["intervals"]}
    if name == "psd-offline-constant":     # decode-only stretches are planned many steps at once
        assert fast.counters["intervals"] < slow.counters["intervals"] / 2


# ---------------------------------------------------------------------------- (c) vs v0

OFFLINE = {"name": "offline", "prompt": {"name": "uniform", "low": 20, "high": 200},
           "output": {"name": "uniform", "low": 20, "high": 120}}


@pytest.mark.parametrize("mode", ["ar", "sd-sep", "psd"])
def test_huge_budget_matches_v0_throughput(mode):
    """With a budget no step reaches, v1 prefills every prompt whole, as v0 does; throughput
    agrees within 5%.  They still differ because (1) v1 runs a prefill inside the target's
    verify pass (one pass over all the tokens: the per-pass base cost is paid once) where v0
    runs it as a segment of its own before the decode step, and (2) a request v1 prefilled
    joins its batch at the next boundary, where v0 verifies it in the same step."""
    kw = dict(mode=mode, requests=24, workload=OFFLINE)
    v0 = simulate(v1_config(scheduler="v0", **kw)).metrics
    v1 = simulate(v1_config(budget=1 << 20, **kw)).metrics
    assert v1["throughput_tok_s"] == pytest.approx(v0["throughput_tok_s"], rel=0.05)


def test_small_budget_chunks_long_prompts_and_raises_ttft():
    """A budget of 64 tokens and prompts of 300: every prompt takes several chunks, some steps
    mix a chunk into the verify pass, and TTFT is larger than v0's."""
    work = {"name": "poisson", "rate": 4.0, "prompt": {"name": "fixed", "value": 300},
            "output": {"name": "fixed", "value": 30}}
    kw = dict(mode="psd", requests=12, workload=work)
    v0 = simulate(v1_config(scheduler="v0", **kw))
    v1 = simulate(v1_config(budget=64, **kw))
    pre = [ph for s in v1.trace.steps for ph in s.phases
           if ph.kind == "prefill" and ph.device == "sim:target"]
    assert max(ph.tokens for ph in pre) <= 64 and sum(ph.tokens for ph in pre) == 12 * 300
    mixed = [s for s in v1.trace.steps
             if {ph.kind for ph in s.phases if ph.device == "sim:target"} == {"verify",
                                                                               "prefill"}]
    assert mixed
    for s in mixed:        # the chunk rides the verify pass: the same interval on the target
        ver = next(ph for ph in s.phases if ph.kind == "verify")
        chunk = next(ph for ph in s.phases if ph.kind == "prefill" and ph.device == ver.device)
        assert (chunk.start, chunk.end) == (ver.start, ver.end)
    assert v1.metrics["ttft"]["mean"] > v0.metrics["ttft"]["mean"]
    assert v1.trace.run.extra["scheduler"] == {"name": "v1", "max_num_batched_tokens": 64}
    assert "scheduler" not in v0.trace.run.extra          # a v0 run record is as it was


# ---------------------------------------------------------------------------- (d) bad input

@pytest.mark.parametrize("changes, message", [
    (dict(budget=0), r"server\.max_num_batched_tokens: must be in \[1, 16777216\], got 0"),
    (dict(budget=-5), r"server\.max_num_batched_tokens: must be in \[1, 16777216\], got -5"),
    (dict(budget=2.5), r"server\.max_num_batched_tokens: expected an integer, got 2\.5"),
    (dict(budget="256"), r"server\.max_num_batched_tokens: expected an integer"),
    (dict(budget=True), r"server\.max_num_batched_tokens: expected an integer"),
    (dict(scheduler="v2"), r"server\.scheduler: must be one of v0, v1, got 'v2'"),
    (dict(budget=19), r"server\.max_num_batched_tokens: must be >= server\.m \* \(k \+ 1\) = "
                      r"20 \(one step's decode tokens\)"),
    (dict(budget=20, k_choices=(2, 6)), r"server\.max_num_batched_tokens: must be >= "
                                        r"server\.m \* \(k \+ 1\) = 28"),
    (dict(mode="ar", budget=3), r"server\.max_num_batched_tokens: must be >= server\.m \* "
                                r"\(k \+ 1\) = 4"),
    (dict(mode="adaptive"), r"server\.scheduler: \"v1\" is not supported with server\.mode = "
                            r"'adaptive'"),
])
def test_bad_input_is_one_line_naming_the_field(changes, message):
    with pytest.raises(ValueError, match="^" + message) as err:
        v1_config(**changes)
    assert "\n" not in str(err.value)


def test_v0_ignores_the_budget():
    """Under v0 the budget is checked as a number but not against m (k + 1)."""
    cfg = v1_config(scheduler="v0", budget=1)
    assert cfg.server.max_num_batched_tokens == 1
    assert simulate(cfg).counters["completions"] == 20
