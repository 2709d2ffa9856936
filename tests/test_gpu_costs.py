"""GPU cost presets (sim/costs/gpu.py): fitted points within 10%, the MineDraft per-step gain,
the terms moving predictions the way the physics says, the public-measurement table, and the
`psdlab cost` command (one pass, --check, one-line errors)."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdlab.cli import main
from psdlab.sim.costs import make_cost_model
from psdlab.sim.costs.gpu import GpuCost, engine_presets, get_engine, gpu_cost, with_engine
from psdlab.sim.costs.public_check import (check_rows, minedraft_gains, point_by_id,
                                           public_points)
from psdlab.sim.costs.roofline import RooflineCost

PRESETS = sorted(engine_presets())
SMALL = dict(layers=28, hidden=1024, heads=16, kv_heads=8, head_dim=128, intermediate=3072,
             vocab=151936, tied_embeddings=True)


def cost(model="qwen3-0.6b", hardware="l40", engine="vllm-eager", tp=1, **kw):
    return gpu_cost(model, hardware, engine, tp=tp, **kw)


# ---------------------------------------------------------------------------- public points

def test_every_fitted_point_within_10_percent_and_every_point_listed():
    rows = {r.id: r for r in check_rows()}
    assert set(rows) == {p.id for p in public_points()}
    fitted = [r for r in rows.values() if r.fitted]
    assert {r.preset for r in fitted} == set(PRESETS)             # every preset is fitted
    for r in fitted:
        assert abs(r.error) <= 0.10, r
    for r in rows.values():
        assert np.isfinite(r.error) and r.predicted_ms > 0
        assert r.ideal_ms <= r.predicted_ms                         # the roofline bounds below
    assert any(not r.fitted for r in rows.values())                 # held-out points exist


def test_fitted_on_names_points_of_the_same_preset_with_sources():
    for name, preset in engine_presets().items():
        assert preset.fitted_on and preset.sources
        for pid in preset.fitted_on:
            assert point_by_id(pid).preset == name
    for p in public_points():
        assert p.source and p.figure and p.engine_used and p.published_ms > 0
        assert p.preset in engine_presets()


def test_minedraft_gain_within_10_percent_and_ideal_roofline_misses_it():
    rows = minedraft_gains()
    assert {(r.drafter, r.k) for r in rows} == {(d, k) for d in ("qwen3-0.6b", "qwen3-1.7b")
                                                for k in (3, 4)}
    for r in rows:
        assert abs(r.error) <= 0.10, r
    # the ideal roofline predicts a small gain for the 0.6B drafter (drafting << verification)
    ideal = {(r.drafter, r.k): r for r in minedraft_gains("ideal")}
    r = ideal[("qwen3-0.6b", 3)]
    assert r.predicted_gain < 0.75 * r.published_gain


def test_refit_reproduces_the_shipped_numbers():
    from psdlab.sim.costs.preset_fit import FREE, fit_preset
    for name in ("vllm-eager", "torch-compile"):
        best = fit_preset(name)
        assert set(best) == set(FREE[name])
        for key, value in best.items():
            assert getattr(engine_presets()[name], key) == pytest.approx(value, rel=0.03, abs=2e-6)


# ---------------------------------------------------------------------------- physics

def test_more_layers_cost_more_and_eager_pays_per_layer():
    short = cost(dict(SMALL, name="short"))
    deep = cost(dict(SMALL, name="deep", layers=56))
    args = (16, 16, 4000)
    assert deep.forward_time(*args) > short.forward_time(*args)
    gap = lambda a, b: a.forward_time(*args) - b.forward_time(*args)  # noqa: E731
    g_short = gap(short, cost(dict(SMALL, name="short"), engine="vllm-cudagraph"))
    g_deep = gap(deep, cost(dict(SMALL, name="deep", layers=56), engine="vllm-cudagraph"))
    assert g_short > 0 and g_deep > 1.5 * g_short          # the eager penalty grows with layers


def test_eager_small_model_is_host_bound_graphs_are_not():
    eager = cost().breakdown(16, 16, 4000)
    graph = cost(engine="vllm-cudagraph").breakdown(16, 16, 4000)
    assert eager["bound"] == "host" and graph["bound"] == "gpu"
    assert eager["total"] > 3 * graph["total"]
    # host-bound: a wider model with the same layers costs about the same per pass
    wide = cost("qwen3-1.7b").forward_time(16, 16, 4000)
    assert wide == pytest.approx(eager["total"], rel=0.05)
    assert cost("qwen3-1.7b", engine="vllm-cudagraph").forward_time(16, 16, 4000) > 1.3 * graph[
        "total"]


def test_pcie_collectives_cost_more_than_nvlink_and_tp1_has_none():
    args = (16, 64, 6880)
    pcie = cost("qwen3-32b", tp=4, link="pcie")
    nvl = cost("qwen3-32b", tp=4, link="nvlink")
    assert pcie.link == "pcie" and cost("qwen3-32b", tp=4).link == "pcie"   # L40 default
    assert pcie.forward_time(*args) > nvl.forward_time(*args)
    assert pcie.breakdown(*args)["network"] > nvl.breakdown(*args)["network"] > 0
    solo = cost("qwen3-8b", "h100-sxm", "vllm-cudagraph")
    assert solo.collectives() == 0 and solo.breakdown(*args)["network"] == 0.0
    assert solo.forward_time(*args) == cost("qwen3-8b", "h100-sxm", "vllm-cudagraph",
                                            link="pcie").forward_time(*args)


def test_tensor_parallel_adds_collectives_but_splits_the_weights():
    args = (16, 64, 6880)
    tp2 = cost("qwen3-32b", "h100-sxm", "vllm-cudagraph", tp=2)
    tp4 = cost("qwen3-32b", "h100-sxm", "vllm-cudagraph", tp=4)
    assert tp4.breakdown(*args)["kernels"] < tp2.breakdown(*args)["kernels"]
    assert tp4.breakdown(*args)["network"] > tp2.breakdown(*args)["network"]
    assert tp4.forward_time(*args) < tp2.forward_time(*args)        # big model: TP still pays
    slow = with_engine(tp4.engine, collective_latency_nvlink_s=1e-3)
    assert GpuCost(tp4.roofline, slow, "nvlink").forward_time(*args) > tp4.forward_time(*args)


def test_efficiency_grows_with_the_tokens_of_a_pass():
    c = cost("qwen3-8b", "h100-sxm", "vllm-cudagraph")
    tokens = np.array([1, 4, 16, 64, 256, 1024, 4096], dtype=float)
    kernels = c.breakdown(tokens, tokens, 0.0)["kernels"]
    rate = tokens / kernels                                 # tokens per second of GPU work
    assert np.all(np.diff(rate) > 0)
    ideal = make_cost_model({"name": "roofline", "model": "qwen3-8b", "hardware": "h100-sxm"})
    frac = ideal.forward_time(tokens, tokens, 0.0) / kernels  # achieved fraction of roofline
    assert np.all(frac < 1)
    flops = ideal.breakdown(tokens, tokens, 0.0)["compute"] / kernels   # fraction of peak FLOPs
    assert np.all(np.diff(flops) > 0) and flops[-1] < c.engine.compute_eff


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(PRESETS), s=st.integers(1, 64), per=st.integers(1, 8),
       c=st.integers(0, 50_000), dt=st.integers(1, 64), dc=st.integers(1, 5000))
def test_monotone_and_above_the_roofline(name, s, per, c, dt, dc):
    gc = cost("qwen3-32b", "h100-sxm", name, tp=4)
    t = s * per
    base = gc.forward_time(s, t, c)
    assert gc.forward_time(s, t + dt, c) >= base
    assert gc.forward_time(s, t, c + dc) >= base
    assert base >= gc.roofline.forward_time(s, t, c)


def test_vectorised_equals_scalar_and_ideal_is_the_roofline():
    c = cost("qwen3-32b", tp=4)
    s, t, x = np.array([1, 4, 16]), np.array([1, 20, 80]), np.array([0, 500, 9000])
    vec = c.forward_time(s, t, x)
    assert np.allclose(vec, [c.forward_time(int(a), int(b), int(d)) for a, b, d in zip(s, t, x)])
    assert isinstance(cost(engine="ideal"), RooflineCost)


@pytest.mark.parametrize("spec, field", [
    ({"engine": "vllm"}, "cost.engine"),
    ({"engine": {"base": "vllm-eager", "memory_eff": 1.5}}, "cost.engine.memory_eff"),
    ({"engine": {"base": "vllm-eager", "warp": 1}}, "cost.engine.warp"),
    ({"engine": {"execution": "eager"}}, "cost.engine.memory_eff"),
    ({"engine": "vllm-eager", "link": "infiniband"}, "cost.link"),
    ({"engine": "vllm-eager", "tp": 3}, "cost.tp"),
    ({}, "cost.engine"),
])
def test_bad_gpu_specs_name_the_field(spec, field):
    full = {"name": "gpu", "model": "qwen3-32b", "hardware": "l40", "tp": 4, **spec}
    with pytest.raises(ValueError, match="^" + re.escape(field)):
        make_cost_model(full)


def test_inline_engine_from_a_base_changes_only_what_it_names():
    base = get_engine("vllm-eager")
    faster = get_engine({"base": "vllm-eager", "layer_host_s": 1e-4})
    assert faster.layer_host_s == 1e-4 and faster.memory_eff == base.memory_eff
    spec = {"name": "gpu", "model": "qwen3-0.6b", "hardware": "l40"}
    slow = make_cost_model({**spec, "engine": "vllm-eager"}).forward_time(16, 16, 1000)
    fast = make_cost_model({**spec, "engine": {"base": "vllm-eager", "layer_host_s": 1e-4}})
    assert fast.forward_time(16, 16, 1000) < slow


# ---------------------------------------------------------------------------- the command

PASS = ["cost", "--model", "qwen3-32b", "--hardware", "l40", "--tp", "4", "--dtype", "bf16",
        "--engine", "vllm-eager", "--seqs", "16", "--tokens", "64", "--context", "6880"]


def test_cost_json_seconds_match_the_model(capsys):
    assert main(PASS + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    want = cost("qwen3-32b", tp=4).forward_time(16, 64, 6880)
    assert out["seconds"] == pytest.approx(want) and out["engine"] == "vllm-eager"
    assert main(PASS) == 0 and "ms" in capsys.readouterr().out


def _replace(flag, value):
    args = list(PASS)
    i = args.index(flag)
    if value is None:
        del args[i:i + 2]
    else:
        args[i + 1] = value
    return args


@pytest.mark.parametrize("flag, value", [
    ("--model", "qwen9"), ("--hardware", "l3"), ("--tp", "3"), ("--tp", "0"), ("--dtype", "fp4"),
    ("--engine", "fast"), ("--seqs", "0"), ("--tokens", "8"), ("--context", "-1"),
    ("--seqs", None),
])
def test_cost_bad_input_one_line_naming_the_flag(flag, value, capsys):
    assert main(_replace(flag, value)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"error: {flag}" in err


def test_cost_tp_too_small_for_the_weights(capsys):
    assert main(_replace("--tp", "1")) == 2
    err = capsys.readouterr().err.strip()
    assert "--tp" in err and "GB" in err and len(err.splitlines()) == 1


def test_cost_check_json_and_results_file(capsys, tmp_path):
    path = tmp_path / "check.md"
    assert main(["cost", "--check", "--json", "--out", str(path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["points"]) == len(public_points())
    assert report["worst_fitted_error"] <= 0.10
    # a settings row: one entry per engine preset beside the paper's step
    assert list(report["settings"][0]) == ["drafter", "ideal", "k", "paper", "setting",
                                           "vllm-eager"]     # (sorted: --json sorts keys)
    text = path.read_text()
    assert all(p.id in text for p in public_points()) and "commit" in text
    assert main(["cost", "--check"]) == 0
    assert "MineDraft" in capsys.readouterr().out


@pytest.mark.parametrize("mode", ["psd", "sd"])
def test_fast_path_and_simpy_path_agree_with_gpu_costs(tmp_path, mode):
    from psdlab.sim.sim_config import config_from_dict
    from psdlab.sim.simulation import simulate

    gpu = {"name": "gpu", "hardware": "l40", "engine": "vllm-eager"}
    cfg = config_from_dict({
        "seed": 0, "requests": 60, "server": {"mode": mode, "k": 3, "m": 4},
        "target": {"name": "t", "cost": {**gpu, "model": "qwen3-32b", "tp": 4}},
        "drafter": {"name": "d", "cost": {**gpu, "model": "qwen3-0.6b"}},
        "acceptance": {"name": "geometric", "alpha": 0.7},
        "workload": {"name": "poisson", "rate": 20.0,
                     "prompt": {"name": "uniform", "low": 1, "high": 300},
                     "output": {"name": "uniform", "low": 2, "high": 60}},
        "trace": {"level": "step"}})
    simulate(cfg, path="fast", trace_path=str(tmp_path / "fast.jsonl"))
    simulate(cfg, path="simpy", trace_path=str(tmp_path / "simpy.jsonl"))
    assert (tmp_path / "fast.jsonl").read_bytes() == (tmp_path / "simpy.jsonl").read_bytes()
