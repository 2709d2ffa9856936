"""The fast path's one-pass sweep (sim/step_layout.py, sim/costtable.py) against the step-by-step
SimPy path, with cost models whose step times depend on the batch's contexts (roofline,
affine), so that a wrong context sum, sequence count or segment order changes the clock."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import psdlab.sim.core as core_mod
from psdlab.sim.sim_config import config_from_dict
from psdlab.sim.simulation import simulate

ROOF_T = {"name": "roofline", "model": "qwen3-32b", "hardware": "l40", "tp": 4}
ROOF_D = {"name": "roofline", "model": "qwen3-1.7b", "hardware": "l40", "tp": 1}
MOE_T = {"name": "roofline", "model": "qwen3-235b-a22b", "hardware": "h100-sxm", "tp": 8,
         "dtype": "fp8"}
MOE_D = {"name": "roofline", "model": "qwen3-14b", "hardware": "h100-sxm", "tp": 1}
#: affine costs whose prefills are fed in chunks (analysis.chunking): prompts up to 400 tokens
#: take up to 7 passes each, so a wrong pass count changes the clock
CHUNKED_T = {"name": "affine", "base": 0.02, "per_seq": 0.01, "per_token": 1e-4,
             "per_context": 1e-6, "prefill_chunking": [64, 1]}
CHUNKED_D = {"name": "affine", "base": 0.002, "per_seq": 0.004, "per_token": 1e-5,
             "prefill_chunking": [128, 0]}
LENGTHS = {"prompt": {"name": "uniform", "low": 1, "high": 400},
           "output": {"name": "uniform", "low": 2, "high": 90}}


def _config(*, mode="psd", k=4, m=4, requests=80, rate=30.0, policy="paper", target=ROOF_T,
            drafter=ROOF_D, jitter=None, seed=0, level="step", k_choices=(),
            alpha=0.8, max_steps=512):
    raw: dict[str, Any] = {
        "seed": seed, "requests": requests,
        "server": {"mode": mode, "k": k, "m": m, "policy": policy,
                   "max_interval_steps": max_steps, "k_choices": list(k_choices)},
        "target": {"name": "t", "cost": target},
        "drafter": {"name": "d", "cost": drafter},
        "acceptance": {"name": "geometric", "alpha": alpha},
        "workload": {"name": "poisson", "rate": rate, **LENGTHS},
        "trace": {"level": level},
    }
    if jitter:
        raw["jitter"] = jitter
    return config_from_dict(raw)


def _same_trace(tmp_path, cfg) -> dict[str, int]:
    fast = simulate(cfg, path="fast", trace_path=str(tmp_path / "fast.jsonl"))
    simulate(cfg, path="simpy", trace_path=str(tmp_path / "simpy.jsonl"))
    assert (tmp_path / "fast.jsonl").read_bytes() == (tmp_path / "simpy.jsonl").read_bytes()
    return fast.counters


CASES = {
    "psd-saturated": dict(rate=400.0, requests=150),
    "psd-below-saturation": dict(rate=25.0, requests=150),
    "psd-jitter": dict(rate=60.0, jitter={"dist": "gamma", "cv": 0.3}),
    "psd-rebalance": dict(rate=80.0, policy="rebalance", requests=120),
    "psd-moe": dict(rate=60.0, target=MOE_T, drafter=MOE_D),
    "psd-short-plans": dict(rate=80.0, max_steps=7),
    "sd": dict(mode="sd", rate=80.0),
    "sd-sep-jitter": dict(mode="sd-sep", rate=80.0, jitter={"dist": "normal", "cv": 0.2}),
    "ar": dict(mode="ar", rate=200.0, requests=60),
    "psd-chunked-prefill": dict(rate=60.0, target=CHUNKED_T, drafter=CHUNKED_D),
    "psd-chunked-prefill-saturated": dict(rate=400.0, requests=150, target=CHUNKED_T,
                                          drafter=CHUNKED_D),
    "sd-chunked-prefill-jitter": dict(mode="sd", rate=80.0, target=CHUNKED_T, drafter=ROOF_D,
                                      jitter={"dist": "gamma", "cv": 0.3}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_sweep_matches_simpy_with_context_dependent_costs(tmp_path, name):
    counters = _same_trace(tmp_path, _config(**CASES[name]))
    # the stretches really spanned several events each (else this proves little)
    assert counters["intervals"] * 3 < counters["steps"]


@pytest.mark.parametrize("level", ["request", "none"])
def test_request_records_without_step_detail_match_simpy(tmp_path, level):
    """Below trace level step the sweep builds light plans (clock and prefills only)."""
    cfg = _config(rate=60.0, requests=120, jitter={"dist": "gamma", "cv": 0.2}, level=level)
    fast = simulate(cfg, path="fast", trace_path=str(tmp_path / "fast.jsonl"))
    slow = simulate(cfg, path="simpy", trace_path=str(tmp_path / "simpy.jsonl"))
    assert fast.trace.requests and fast.trace.requests == slow.trace.requests
    if level == "request":
        assert (tmp_path / "fast.jsonl").read_bytes() == (tmp_path / "simpy.jsonl").read_bytes()


def test_sweep_clock_equals_the_planners_cumulative_sum(monkeypatch):
    """The sweep's running clock (Python floats, segment by segment) and the plan's vectorised
    cumulative sum over its phase arrays must agree bit for bit, step by step."""
    seen = []
    orig = core_mod.Core.commit

    def commit(self, p):
        if p.kind == "lanes" and p.lanes.get("sweep"):
            T = p.lanes["layout"].T
            assert np.array_equal(T[1:], p.ends[:, -1]) and T[0] == p.starts[0, 0]
            seen.append(p.S)
        return orig(self, p)

    monkeypatch.setattr(core_mod.Core, "commit", commit)
    for mode in ("psd", "sd", "ar"):
        simulate(_config(mode=mode, rate=120.0, jitter={"dist": "gamma", "cv": 0.2}))
    assert len(seen) >= 3 and max(seen) > 10


def test_cost_tables_equal_the_planners_array_costs():
    """Table entries are bit-identical to the planner's vectorised costs for the same rows."""
    from psdlab.sim.costtable import CostTables
    from psdlab.sim.simulation import build
    from psdlab.sim.step_plan import cost_time

    core = build(_config(m=6, k=3, target=MOE_T, drafter=MOE_D)).core
    tabs = CostTables(core)
    rng = np.random.default_rng(1)
    n = rng.integers(1, 7, 300)
    C = rng.integers(0, 20_000, 300)
    verify = core.planner.verify_time(n, n * 4, C)
    draft = core.planner.draft_time(np.broadcast_to(n, (3, n.size)),
                                    C[None, :] + np.arange(3)[:, None] * n[None, :])
    got = np.array([tabs.work.get(int(a), int(b)) for a, b in zip(n, C)])
    assert np.array_equal(got[:, 0], verify) and np.array_equal(got[:, 1], draft)
    tok = rng.integers(1, 5000, 50)
    pre = np.array([tabs.prefill.get(int(a), int(b)) for a, b in zip(n[:50], tok)])
    assert np.array_equal(pre[:, 0], cost_time(core.target, n[:50], tok, np.zeros(50)))
    with pytest.raises(ValueError, match="n must be in"):
        tabs.work.get(7, 10)


def test_step_records_refuse_a_plan_without_detail():
    from psdlab.sim.simulation import build
    from psdlab.sim.trace_records import step_records

    core = build(_config(rate=400.0, requests=40)).core
    core.step_detail = False
    while core.prepare() != "run":
        core.after_idle(core.now + core.idle_delay())
    plan = core.plan(512)
    for _ in range(10):                       # until a multi-event (lanes) plan comes up
        if plan.kind == "lanes":
            break
        core.commit(plan)
        core.prepare()
        plan = core.plan(512)
    assert plan.kind == "lanes" and not plan.detail
    with pytest.raises(ValueError, match="step detail"):
        step_records(core, plan)


@st.composite
def affine_configs(draw):
    """Random affine costs (every term on), modes, policies and loads."""
    def affine():
        chunking = draw(st.sampled_from([None, [16, 1], [64, 0], [128, 1]]))
        return {"name": "affine", "base": draw(st.floats(1e-3, 2e-2)),
                "per_seq": draw(st.floats(0.0, 1e-3)), "per_token": draw(st.floats(0.0, 1e-4)),
                "per_context": draw(st.floats(0.0, 1e-5)),
                **({"prefill_chunking": chunking} if chunking else {})}
    mode = draw(st.sampled_from(["psd", "psd", "sd", "sd-sep", "ar"]))
    return _config(mode=mode, k=draw(st.integers(1, 5)), m=draw(st.integers(1, 6)),
                   requests=draw(st.integers(20, 80)), rate=draw(st.floats(5.0, 400.0)),
                   policy=draw(st.sampled_from(["paper", "rebalance"])), target=affine(),
                   drafter=affine(), seed=draw(st.integers(0, 10_000)),
                   alpha=draw(st.floats(0.0, 0.95)),
                   level=draw(st.sampled_from(["step", "request"])),
                   jitter=draw(st.sampled_from([None, {"dist": "gamma", "cv": 0.3}])))


@settings(deadline=None, max_examples=int(__import__("os").environ.get("SIM_EXAMPLES", 10)),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cfg=affine_configs())
def test_fast_path_equals_simpy_path_with_affine_costs(tmp_path, cfg):
    _same_trace(tmp_path, cfg)
