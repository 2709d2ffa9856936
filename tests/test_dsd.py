"""Decoupled drafting (mode dsd, docs/dsd.md): the closed form (analysis.theory.decoupled)
against the simulator, its limits (h = 1: the overlapped step; h = 0: SD-sep's steps), the
trace it writes, determinism and its config errors."""
from __future__ import annotations

import filecmp
import math
from math import comb
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from psdlab.analysis.modes import RUNTIME_MODES, SERVER_MODES, mode_spec
from psdlab.analysis.theory.decoupled import dsd_step, geometric_hit_rate, trace_hits
from psdlab.sim.sim_config import SimConfig, config_from_dict
from psdlab.sim.simulation import simulate

K = 4
V = 0.03                   # the target's pass (constant cost)
D0, D1 = 0.002, 0.0006     # a drafter pass over n sequences: D0 + D1 n (affine in sequences)
POISSON = {"name": "poisson", "rate": 30.0, "prompt": {"name": "fixed", "value": 32},
           "output": {"name": "uniform", "low": 10, "high": 120}}


def _config(*, mode: str = "dsd", m: int = 4, h: float = 0.5, fanout: int = 2,
            requests: int | None = None, output: int = 1000, seed: int = 0,
            workload: dict[str, Any] | None = None, acceptance: dict[str, Any] | None = None,
            jitter: dict[str, Any] | None = None, hits: str = "rate") -> SimConfig:
    raw: dict[str, Any] = {
        "seed": seed, "requests": m if requests is None else requests,
        "server": {"mode": mode, "k": K, "m": m, "dsd_hit_rate": h, "dsd_fanout": fanout,
                   "dsd_hits": hits},
        "target": {"name": "t", "cost": {"name": "constant", "time": V}},
        "drafter": {"name": "d", "cost": {"name": "affine", "base": D0, "per_seq": D1}},
        # every draft token accepted: the same number of steps whatever the hits
        "acceptance": acceptance or {"name": "positional", "rates": [1.0]},
        "workload": workload or {"name": "offline", "prompt": {"name": "fixed", "value": 32},
                                 "output": {"name": "fixed", "value": output}},
        "trace": {"level": "step"},
    }
    if jitter:
        raw["jitter"] = jitter
    return config_from_dict(raw)


def _t(n: int) -> float:
    """The drafting of n rows: K passes of D0 + D1 n (0 for none)."""
    return K * (D0 + D1 * n) if n else 0.0


def _decode_steps(trace) -> list:
    return [s for s in trace.steps if s.verified]


def test_dsd_is_a_simulator_mode_of_the_registry():
    spec = mode_spec("dsd")
    assert "dsd" in SERVER_MODES and "dsd" not in RUNTIME_MODES
    assert spec.batches == 1 and spec.drafter == "own" and spec.overlap
    assert spec.step.at("predraft") == spec.step.at("verify") > spec.step.at("draft")


@settings(max_examples=25, deadline=None)
@given(h=st.floats(0.0, 1.0), m=st.integers(1, 8), fanout=st.integers(1, 4),
       seed=st.integers(0, 2 ** 16), path=st.sampled_from(["fast", "simpy"]))
def test_closed_form_matches_the_simulated_mean_step(h, m, fanout, seed, path):
    """Steady steps (the first, a catch-up of every row, and the last, with nothing to
    pre-draft, left out): the simulated mean within 5 standard errors of E[step], the error
    from the binomial variance of the catch-up (exact where h is 0 or 1).  Both paths: the
    fast one plans many steps at once, the SimPy one carries each hit across boundaries."""
    res = simulate(_config(m=m, h=h, fanout=fanout, seed=seed), path=path, trace_path=None)
    steps = _decode_steps(res.trace)[1:-1]
    assert len(steps) > 150
    mean = sum(s.end - s.start for s in steps) / len(steps)
    t_pre = _t(fanout * m)
    form = dsd_step(V, t_pre, _t, m, h)
    p = [comb(m, n) * (1 - h) ** n * h ** (m - n) for n in range(m + 1)]
    var = sum(pn * (_t(n) - form.catch_up) ** 2 for n, pn in enumerate(p))
    tol = 5 * math.sqrt(var / len(steps)) + 1e-9
    assert abs(mean - form.step) <= tol
    assert form.step == pytest.approx(max(V, t_pre) + form.catch_up)


@pytest.mark.parametrize("path", ["fast", "simpy"])
@pytest.mark.parametrize("fanout", [1, 3, 8])
def test_hit_rate_one_gives_the_overlapped_step(fanout, path):
    res = simulate(_config(m=6, h=1.0, fanout=fanout), path=path, trace_path=None)
    steps = _decode_steps(res.trace)
    t_pre = _t(fanout * 6)
    for s in steps[1:-1]:
        assert s.end - s.start == pytest.approx(max(V, t_pre), rel=1e-9)
        assert s.overlapped
        drafts = [p for p in s.phases if p.kind == "draft"]
        assert len(drafts) == 1 and drafts[0].seqs == fanout * 6     # the pre-draft only
    hits, rows = trace_hits(res.trace.steps)
    assert rows > 0 and hits == rows


def _without_predraft(trace) -> list:
    """Each step's (start, end, phases but the pre-draft, verified rows)."""
    out = []
    for s in trace.steps:
        vstart = [p.start for p in s.phases if p.kind == "verify"]
        kept = tuple(p for p in s.phases
                     if not (p.kind == "draft" and vstart and p.start == vstart[0]))
        out.append((s.index, s.start, s.end, kept, s.verified))
    return out


@pytest.mark.parametrize("path", ["fast", "simpy"])
def test_hit_rate_zero_gives_sd_sep_steps_exactly(path):
    """Arrivals, admissions and completions included: with no hit every row is drafted before
    its verification, as SD on a separate device drafts it, and (pre-drafting shorter than the
    verification here) the steps' clocks are SD-sep's, float for float."""
    kw: dict[str, Any] = dict(m=4, h=0.0, fanout=2, requests=30, workload=POISSON,
                              acceptance={"name": "geometric", "alpha": 0.7})
    dsd = simulate(_config(**kw), path=path, trace_path=None).trace
    sep = simulate(_config(mode="sd-sep", **kw), path=path, trace_path=None).trace
    assert _t(2 * 4) <= V
    assert _without_predraft(dsd) == _without_predraft(sep)
    assert dsd.requests == sep.requests
    assert any(p.kind == "draft" and p.seqs == 8 for s in dsd.steps for p in s.phases)
    assert trace_hits(dsd.steps)[0] == 0


@settings(max_examples=15, deadline=None)
@given(h=st.floats(0.0, 1.0), fanout=st.integers(1, 4), m=st.integers(1, 6),
       seed=st.integers(0, 2 ** 16))
def test_every_request_finishes_and_tokens_add_up(h, fanout, m, seed):
    cfg = _config(m=m, h=h, fanout=fanout, requests=20, workload=POISSON, seed=seed,
                  acceptance={"name": "geometric", "alpha": 0.7})
    tr = simulate(cfg, trace_path=None).trace
    assert len(tr.requests) == 20 and all(math.isfinite(r.finish) for r in tr.requests)
    emitted: dict[Any, int] = {}
    for s in tr.steps:
        for v in s.verified:
            emitted[v.req] = emitted.get(v.req, 0) + v.emitted
    for r in tr.requests:
        assert emitted.get(r.id, 0) + 1 == r.output_len       # + the prefill's first token
    # the catch-up never drafts more rows than the step verifies
    for s in _decode_steps(tr):
        vstart = min(p.start for p in s.phases if p.kind == "verify")
        assert sum(p.seqs for p in s.phases if p.kind == "draft" and p.end <= vstart) \
            <= len(s.verified)


def test_paths_and_seeds(tmp_path):
    """Fast and SimPy paths write the same bytes (the fast path plans many steps at once);
    the same seed the same trace, another seed other hits."""
    kw: dict[str, Any] = dict(m=4, h=0.6, fanout=2, requests=30, workload=POISSON,
                              acceptance={"name": "geometric", "alpha": 0.7},
                              jitter={"dist": "normal", "cv": 0.1})
    a, b, c, d = (str(tmp_path / f"{x}.jsonl") for x in "abcd")
    fast = simulate(_config(**kw), path="fast", trace_path=a)
    slow = simulate(_config(**kw), path="simpy", trace_path=b)
    assert filecmp.cmp(a, b, shallow=False)
    assert fast.counters["intervals"] < slow.counters["intervals"]
    simulate(_config(**kw), path="fast", trace_path=c)
    assert filecmp.cmp(a, c, shallow=False)
    other = simulate(_config(**kw, seed=1), path="fast", trace_path=d).trace
    assert trace_hits(other.steps) != trace_hits(fast.trace.steps)
    assert fast.trace.run.extra["dsd"] == {"hit_rate": 0.6, "fanout": 2, "hits": "rate"}


@pytest.mark.parametrize("value", [-0.1, 1.5, "0.5", float("nan"), None])
def test_bad_hit_rate_is_a_one_line_error(value):
    with pytest.raises(ValueError) as e:
        _config(h=value)
    msg = str(e.value)
    assert msg.startswith("server.dsd_hit_rate: ") and "\n" not in msg


@pytest.mark.parametrize("bonus", [1.0, 0.7])
def test_accepted_length_hits_follow_the_fanout(bonus):
    """``server.dsd_hits = "accepted-length"``: a hit iff the accepted count is among the F
    likeliest (geometric 0.8, k 4: k itself, then 0, 1, ...) and the bonus guess (rate
    ``bonus``) came up: the measured hit rate within 5 standard errors of
    ``geometric_hit_rate``, growing with F to ``bonus``."""
    measured = []
    for fanout in range(1, K + 2):
        cfg = _config(m=8, h=bonus, fanout=fanout, requests=64, output=200, hits="accepted-length",
                      acceptance={"name": "geometric", "alpha": 0.8})
        hits, rows = trace_hits(simulate(cfg, trace_path=None).trace.steps)
        want = geometric_hit_rate(0.8, K, fanout, bonus)
        assert abs(hits / rows - want) <= 5 * math.sqrt(want * (1 - want) / rows) + 1e-12
        measured.append(hits / rows)
    assert measured == sorted(measured) and measured[-1] == pytest.approx(bonus, abs=0.03)


@pytest.mark.parametrize("value", [0, 65, 1.5, "2"])
def test_bad_fanout_is_a_one_line_error(value):
    with pytest.raises(ValueError, match=r"^server\.dsd_fanout: "):
        _config(fanout=value)


def test_bad_hits_rule_is_a_one_line_error():
    with pytest.raises(ValueError, match=r"^server\.dsd_hits: "):
        _config(hits="bonus")


def test_closed_form_rules_and_limits():
    m = 8
    # h = 0: SD-sep's t + V when pre-drafting fits in V; beyond V it shows
    assert dsd_step(V, 0.01, _t, m, 0.0).step == pytest.approx(V + _t(m))
    assert dsd_step(V, 0.05, _t, m, 0.0).step == pytest.approx(0.05 + _t(m))
    # h = 1: the overlapped step alone
    assert dsd_step(V, 0.01, _t, m, 1.0).step == V
    # the per-batch rule re-drafts the batch on any miss: never cheaper than per-request
    for h in (0.2, 0.5, 0.9):
        per_req, per_batch = (dsd_step(V, 0.01, _t, m, h, rule) for rule in
                              ("per-request", "per-batch"))
        assert per_batch.step >= per_req.step
        assert per_batch.catch_up == pytest.approx((1 - h ** m) * _t(m))
    with pytest.raises(ValueError, match="^h: "):
        dsd_step(V, 0.01, _t, m, 1.2)
    # the accepted-length part of the hit rate grows with the fan-out to 1
    rates = [geometric_hit_rate(0.8, 4, f) for f in range(1, 6)]
    assert rates == sorted(rates) and rates[-1] == pytest.approx(1.0)


@pytest.mark.parametrize("h", [0.0, 1.0])
def test_plan_takes_dsd_from_the_registry(tmp_path, h):
    """`psdlab plan` names dsd beside SD-sep: at h = 0 (pre-drafting within V) its rows are
    SD-sep's, rate for rate; at h = 1 its step is max(t_pre, V) < t + V, so it sustains more."""
    import csv

    from psdlab.cli import main
    cfg = tmp_path / "plan.toml"
    cfg.write_text(f"""
[server]
mode = "dsd"
dsd_hit_rate = {h}
dsd_fanout = 1
[target]
cost = {{name = "constant", time = 0.02}}
[drafter]
cost = {{name = "constant", time = 0.003}}
[acceptance]
name = "geometric"
alpha = 0.8
[workload]
name = "poisson"
rate = 1.0
output = {{name = "fixed", value = 40}}
[plan]
modes = ["sd-sep", "dsd"]
k = [4]
m = [4]
slo = {{ttft_p99 = 1.0}}
requests = 60
iterations = 4
seeds = 1
""")
    out = tmp_path / "plan.csv"
    assert main(["plan", str(cfg), "--csv", str(out), "--no-png"]) == 0
    rows = {r["mode"]: r for r in csv.DictReader(out.open())}
    sep, dsd = (float(rows[m]["capacity_req_s"]) for m in ("sd-sep", "dsd"))
    if h == 0.0:
        assert dsd == sep and rows["dsd"]["max_rate_req_s"] == rows["sd-sep"]["max_rate_req_s"]
    else:
        assert dsd > sep
