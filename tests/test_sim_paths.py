"""The fast path and the step-by-step SimPy path give byte-identical traces; same seed, same
trace file."""
import filecmp

import pytest

from psdlab.sim.simulation import simulate
from sim_helpers import make_config

POISSON = {"name": "poisson", "rate": 40.0,
           "prompt": {"name": "uniform", "low": 8, "high": 200},
           "output": {"name": "lognormal", "mean": 60, "median": 40, "max": 300}}

def _poisson(rate):
    return dict(POISSON, rate=rate)


CASES = {
    # saturated / near-saturated runs exercise the multi-event lanes plans (sim/lanes.py)
    "psd-saturated": dict(mode="psd", requests=150, workload=_poisson(300.0)),
    "psd-near-saturation-jitter": dict(mode="psd", requests=150, workload=_poisson(10.0),
                                       jitter={"dist": "gamma", "cv": 0.2}),
    "psd-light-rebalance": dict(mode="psd", requests=100, workload=_poisson(5.0),
                                policy="rebalance", jitter={"dist": "gamma", "cv": 0.2}),
    "psd-rebalance-saturated": dict(mode="psd", requests=150, workload=_poisson(120.0),
                                    policy="rebalance"),
    "sd-saturated": dict(mode="sd", requests=120, workload=_poisson(200.0)),
    "ar-saturated": dict(mode="ar", requests=60, workload=_poisson(200.0)),
    "psd-k-per-request": dict(mode="psd", requests=120, workload=_poisson(30.0),
                              k_choices=(1, 3, 6)),
    "sd-k-per-request-kv": dict(mode="sd-sep", requests=40, workload=POISSON, kv_blocks=70,
                                block_size=8, k_choices=(2, 5)),
    "psd-offline": dict(mode="psd", requests=24),
    "psd-online-jitter": dict(mode="psd", requests=40, workload=POISSON,
                              jitter={"dist": "gamma", "cv": 0.3}),
    "psd-rebalance-kv": dict(mode="psd", requests=40, workload=POISSON, policy="rebalance",
                             kv_blocks=120, block_size=8),
    "sd-online": dict(mode="sd", requests=30, workload=POISSON),
    "sd-sep-kv": dict(mode="sd-sep", requests=30, workload=POISSON, kv_blocks=70, block_size=8),
    "ar": dict(mode="ar", requests=20, workload=POISSON),
    "beta": dict(mode="psd", requests=30, workload=POISSON,
                 acceptance={"name": "beta", "mean": 0.7, "concentration": 5}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fast_and_simpy_paths_write_identical_traces(tmp_path, name):
    cfg = make_config(**CASES[name])
    fast = simulate(cfg, path="fast", trace_path=str(tmp_path / "fast.jsonl"))
    slow = simulate(cfg, path="simpy", trace_path=str(tmp_path / "simpy.jsonl"))
    assert filecmp.cmp(tmp_path / "fast.jsonl", tmp_path / "simpy.jsonl", shallow=False)
    assert fast.counters["steps"] == slow.counters["steps"]
    # the fast path really grouped steps (otherwise this test proves nothing)
    if name in ("psd-offline", "ar", "psd-saturated", "sd-saturated"):
        assert fast.counters["intervals"] < slow.counters["intervals"] / 2


def test_same_seed_same_bytes_and_other_seed_differs(tmp_path):
    cfg = make_config(mode="psd", requests=30, workload=POISSON,
                      jitter={"dist": "normal", "cv": 0.1})
    simulate(cfg, trace_path=str(tmp_path / "a.jsonl"))
    simulate(cfg, trace_path=str(tmp_path / "b.jsonl"))
    simulate(cfg.replace(seed=1), trace_path=str(tmp_path / "c.jsonl"))
    assert filecmp.cmp(tmp_path / "a.jsonl", tmp_path / "b.jsonl", shallow=False)
    assert not filecmp.cmp(tmp_path / "a.jsonl", tmp_path / "c.jsonl", shallow=False)


def test_trace_levels(tmp_path):
    cfg = make_config(mode="psd", requests=10)
    full = simulate(cfg, trace_path=str(tmp_path / "s.jsonl"))
    req = simulate(cfg.replace(trace_level="request"), trace_path=str(tmp_path / "r.jsonl"))
    none = simulate(cfg.replace(trace_level="none"), trace_path=str(tmp_path / "n.jsonl"))
    assert full.trace.steps and not req.trace.steps and not none.trace.steps
    assert not (tmp_path / "n.jsonl").exists()
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert len(lines) == 1 + 10 and '"type":"step"' not in "".join(lines)
    assert req.makespan_s == full.makespan_s
    assert req.metrics["ttft"] == full.metrics["ttft"]
