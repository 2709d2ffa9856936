"""Hypothesis property tests over random workloads and configs: no request lost or duplicated,
every request gets exactly its output length, the KV cache is never over capacity, the
rebalance policy keeps the batches within one request of each other, and the fast path agrees
with the step-by-step SimPy path."""
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psdlab.analysis.trace import read_trace
from psdlab.sim.simulation import simulate
from sim_helpers import make_config


@st.composite
def configs(draw):
    mode = draw(st.sampled_from(["ar", "sd", "sd-sep", "psd", "psd"]))
    k = draw(st.integers(1, 5))
    m = draw(st.integers(1, 6))
    n = draw(st.integers(1, 30))
    out_max = draw(st.integers(1, 80))
    lengths = {"prompt": {"name": "uniform", "low": 1, "high": 100},
               "output": {"name": "uniform", "low": 1, "high": out_max}}
    arrivals = draw(st.sampled_from(["offline", "poisson", "gamma"]))
    wl = {"name": arrivals, **lengths}
    if arrivals == "poisson":
        wl["rate"] = draw(st.floats(1.0, 200.0))
    elif arrivals == "gamma":
        wl.update(rate=draw(st.floats(1.0, 200.0)), cv=draw(st.floats(0.5, 4.0)))
    block = draw(st.sampled_from([4, 16]))
    need = -(-(100 + out_max + 6 + 1) // block)   # the largest request fits alone (k <= 5)
    kv = draw(st.sampled_from([0, need, 2 * need, 4 * need]))
    k_choices = () if mode == "ar" else draw(st.sampled_from([(), (1, 4), (2, 3, 5)]))
    return make_config(mode=mode, k=k, m=m, requests=n, workload=wl, kv_blocks=kv,
                       k_choices=k_choices,
                       block_size=block, policy=draw(st.sampled_from(["paper", "rebalance"])),
                       alpha=draw(st.floats(0.0, 0.95)), c_t=draw(st.floats(0.01, 0.05)),
                       c_d=draw(st.floats(0.001, 0.02)), seed=draw(st.integers(0, 1000)),
                       jitter=draw(st.sampled_from([None, {"dist": "gamma", "cv": 0.5}])))


@settings(deadline=None, max_examples=int(__import__("os").environ.get("SIM_EXAMPLES", 40)),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cfg=configs())
def test_invariants(tmp_path, cfg):
    cap = cfg.server.kv_blocks
    worst_gap = []

    def observe(core):
        if cap:
            assert core.kv_used() <= cap
        sizes = core.bm.sizes()
        assert max(sizes) <= cfg.server.m
        if cfg.server.mode == "psd" and cfg.server.policy == "rebalance":
            worst_gap.append(abs(sizes[0] - sizes[1]))

    path = tmp_path / "slow.jsonl"
    slow = simulate(cfg, path="simpy", trace_path=str(path), observer=observe)
    trace = read_trace(path)            # the file passes the reader's validation
    n = cfg.requests
    ids = [r.id for r in trace.requests]
    assert sorted(ids) == list(range(n))                     # none lost, none duplicated
    emitted = Counter()
    for step in trace.steps:
        seen = [v.req for v in step.verified]
        assert len(seen) == len(set(seen))
        for v in step.verified:
            emitted[v.req] += v.emitted
            assert v.emitted <= v.accepted + 1
    for r in trace.requests:
        assert emitted[r.id] + 1 == r.output_len            # prefill gives the first token
        assert r.arrival <= r.admitted <= r.first_token <= r.finish
    if worst_gap:
        assert max(worst_gap) <= 1
    # the fast path agrees exactly
    fast_path = tmp_path / "fast.jsonl"
    simulate(cfg, path="fast", trace_path=str(fast_path))
    assert fast_path.read_bytes() == path.read_bytes()
    assert slow.counters["completions"] == n


@st.composite
def busy_configs(draw):
    """Larger runs around saturation, where the fast path lays out many events at once."""
    mode = draw(st.sampled_from(["psd", "psd", "sd", "sd-sep", "ar"]))
    wl = {"name": "poisson", "rate": draw(st.floats(2.0, 400.0)),
          "prompt": {"name": "uniform", "low": 1, "high": 300},
          "output": {"name": "uniform", "low": 1, "high": draw(st.integers(2, 120))}}
    k_choices = () if mode == "ar" else draw(st.sampled_from([(), (1, 4), (2, 3, 5)]))
    return make_config(mode=mode, k=draw(st.integers(1, 5)), m=draw(st.integers(1, 8)),
                       k_choices=k_choices,
                       requests=draw(st.integers(20, 120)), workload=wl,
                       policy=draw(st.sampled_from(["paper", "rebalance"])),
                       alpha=draw(st.floats(0.0, 0.95)), seed=draw(st.integers(0, 10_000)),
                       c_t=0.03, c_d=draw(st.floats(0.001, 0.02)),
                       jitter=draw(st.sampled_from([None, {"dist": "gamma", "cv": 0.3}])))


@settings(deadline=None, max_examples=int(__import__("os").environ.get("SIM_EXAMPLES", 12)),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cfg=busy_configs())
def test_fast_path_equals_simpy_path_on_busy_runs(tmp_path, cfg):
    simulate(cfg, path="simpy", trace_path=str(tmp_path / "slow.jsonl"))
    simulate(cfg, path="fast", trace_path=str(tmp_path / "fast.jsonl"))
    assert (tmp_path / "fast.jsonl").read_bytes() == (tmp_path / "slow.jsonl").read_bytes()


@settings(deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs())
def test_capped_proposals_never_draft_past_the_budget(cfg):
    """``server.cap_proposals``: every row proposes min(k_i, remaining - 1) and accepts at
    most that, every request still gets exactly its tokens, a drafting phase runs only the
    passes its longest proposal needs (never more time than uncapped), and the verification
    computes every row at the longest row's width."""
    import dataclasses
    if cfg.server.mode == "ar":
        return
    capped_cfg = dataclasses.replace(cfg, server=dataclasses.replace(cfg.server,
                                                                     cap_proposals=True))
    plain, capped = simulate(cfg).trace, simulate(capped_cfg).trace
    slow = simulate(capped_cfg, path="simpy").trace          # the two paths agree here too
    assert [(s.start, s.end, s.verified) for s in slow.steps] == \
        [(s.start, s.end, s.verified) for s in capped.steps]
    out_len = {r.id: r.output_len for r in capped.requests}
    assert sorted(out_len) == sorted(r.id for r in plain.requests)
    made = Counter()
    for s in capped.steps:
        rows = {v.req: v for v in s.verified}
        for v in s.verified:
            remaining = out_len[v.req] - 1 - made[v.req]    # the prefill made one
            assert 0 <= v.proposed <= max(0, remaining - 1)
            assert v.accepted <= v.proposed and 1 <= v.emitted <= remaining
            made[v.req] += v.emitted
        ver = [p for p in s.phases if p.kind == "verify"]
        if rows and ver and ver[0].seqs == len(rows):
            assert ver[0].tokens == len(rows) * (1 + max(v.proposed for v in rows.values()))
    assert all(made[r.id] == r.output_len - 1 for r in capped.requests)
    k = cfg.server.k
    if not cfg.server.k_choices and cfg.jitter is None:
        for s in capped.steps:                          # a drafting phase never exceeds k passes
            assert all(p.tokens <= k * p.seqs for p in s.phases if p.kind == "draft")
