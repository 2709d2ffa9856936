"""Cost models (sim/costs): registry, catalogs, roofline sanity, fitted/tabulated, jitter."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdlab.sim.costs import (get_hardware, get_model, hardware_catalog, make_cost_model,
                              make_jitter, model_catalog, write_fit)


def roofline(model, hardware, tp=1, **kw):
    return make_cost_model({"name": "roofline", "model": model, "hardware": hardware, "tp": tp,
                            **kw})


def params_from_dims(m) -> float:
    """Independent count: q/k/v/o + SwiGLU MLP (or all experts + router) + embeddings."""
    attn = m.hidden * m.head_dim * (2 * m.heads + 2 * m.kv_heads)
    if m.experts:
        mlp = m.experts * 3 * m.hidden * m.expert_intermediate + m.hidden * m.experts
    else:
        mlp = 3 * m.hidden * m.intermediate
    emb = m.vocab * m.hidden * (1 if m.tied_embeddings else 2)
    return m.layers * (attn + mlp) + emb


# ---------------------------------------------------------------------------- registry

def test_constant_and_affine_values_and_vectorisation():
    c = make_cost_model({"name": "constant", "time": 0.02})
    assert c.forward_time(3, 10, 100) == 0.02
    assert np.allclose(c.forward_time([1, 2], 1, 0), [0.02, 0.02])
    a = make_cost_model({"name": "affine", "base": 1e-3, "per_seq": 1e-4, "per_token": 1e-5,
                         "per_context": 1e-7})
    assert a.forward_time(2, 10, 1000) == pytest.approx(1e-3 + 2e-4 + 1e-4 + 1e-4)
    s, t, c_ = np.array([1, 4, 16]), np.array([1, 20, 80]), np.array([0, 500, 9000])
    vec = a.forward_time(s, t, c_)
    assert isinstance(vec, np.ndarray) and vec.shape == (3,)
    assert np.allclose(vec, [a.forward_time(int(x), int(y), int(z)) for x, y, z in zip(s, t, c_)])
    assert isinstance(a.forward_time(np.int64(2), 3, 4), float)


@pytest.mark.parametrize("spec, field", [
    ({"name": "nope"}, "cost.name"),
    ({"name": "constant"}, "cost.time"),
    ({"name": "constant", "time": -1}, "cost.time"),
    ({"name": "affine", "base": 1, "per_tok": 1}, "cost.per_tok"),
    ({"name": "affine"}, "cost"),
    ({"name": "roofline", "model": "qwen3-32b", "hardware": "l40", "tp": 4, "foo": 1}, "cost.foo"),
    ({"name": "roofline", "model": "qwen3-33b", "hardware": "l40"}, "cost.model"),
    ({"name": "roofline", "model": "qwen3-32b", "hardware": "l40", "tp": 3}, "cost.tp"),
    ({"name": "roofline", "model": "qwen3-32b", "hardware": "l40", "tp": 1}, "cost.tp"),
    ({"name": "roofline", "model": "qwen3-8b", "hardware": "a100-80gb", "dtype": "fp8"},
     "cost.dtype"),
    ({"name": "roofline", "model": "qwen3-8b", "hardware": "h100-sxm", "dtype": "fp4"},
     "cost.dtype"),
    ({"name": "roofline", "model": "qwen3-8b", "hardware": "h100-sxm",
      "efficiency": {"memory": 1.5}}, "cost.efficiency.memory"),
    ({"name": "roofline", "model": "qwen3-8b", "hardware": "h100-sxm",
      "efficiency": {"mem": 0.5}}, "cost.efficiency"),
])
def test_bad_specs_name_the_field(spec, field):
    with pytest.raises(ValueError) as err:
        make_cost_model(spec)
    msg = str(err.value)
    assert msg.startswith(field) and "\n" not in msg


def test_unknown_hardware_message_lists_catalog():
    with pytest.raises(ValueError, match=r"^cost\.hardware: unknown 'l41'; known: a100-80gb, "
                                         r"a10g, a40, b200, h100-sxm, h20, h200, l4, l40, l40s, "
                                         r"mi300x, rtx-4090, rtx-6000-ada$"):
        roofline("qwen3-32b", "l41", 4)


def test_negative_counts_rejected():
    a = make_cost_model({"name": "affine", "base": 1e-3})
    for args in [(-1, 1, 1), (1, -1, 1), (1, 1, -5)]:
        with pytest.raises(ValueError, match="forward_time"):
            a.forward_time(*args)
    with pytest.raises(ValueError, match="forward_time"):
        a.forward_time(np.array([1, 2]), np.array([1, -2]), 0)


# ---------------------------------------------------------------------------- catalogs

@pytest.mark.parametrize("name", sorted(model_catalog()))
def test_params_from_dims_match_advertised_size(name):
    m = model_catalog()[name]
    assert m.source and m.hf_id
    assert params_from_dims(m) / 1e9 == pytest.approx(m.params_b, rel=0.10)
    assert m.total_params() == pytest.approx(params_from_dims(m), rel=1e-3)
    assert m.heads % m.kv_heads == 0


def test_moe_active_params_match_a22b():
    m = get_model("Qwen/Qwen3-235B-A22B")        # lookup by Hugging Face id
    assert m.is_moe and m.experts_active < m.experts
    assert m.active_params() / 1e9 == pytest.approx(m.active_params_b, rel=0.10)


def test_catalog_cross_checks():
    hw = hardware_catalog()
    assert set(hw) == {"a100-80gb", "a40", "h100-sxm", "h200", "l40",        # + issue 53's
                       "b200", "h20", "l40s", "l4", "a10g", "mi300x", "rtx-4090", "rtx-6000-ada"}
    assert all(h.source for h in hw.values())
    assert hw["a100-80gb"].peak_tflops_fp8 is None                # no fp8 on Ampere
    assert hw["h200"].peak_tflops_bf16 == hw["h100-sxm"].peak_tflops_bf16   # same Hopper die
    assert hw["h200"].memory_bw_gbs > hw["h100-sxm"].memory_bw_gbs > hw["a100-80gb"].memory_bw_gbs
    assert hw["h200"].memory_gb > hw["h100-sxm"].memory_gb == hw["a100-80gb"].memory_gb
    for h in hw.values():   # fp8/int8 dense peaks are twice bf16 on every part that has them
        for key in ("peak_tflops_fp8", "peak_tflops_int8"):
            if getattr(h, key) is not None:
                # (rel 0.015: the L40S datasheet prints FP8 733 beside BF16 362.05)
                assert getattr(h, key) == pytest.approx(2 * h.peak_tflops_bf16, rel=0.015)
    assert hw["l40"].interconnect == "pcie" and hw["l40"].link_bw < hw["h100-sxm"].link_bw
    qwen = [m for m in model_catalog().values() if m.name.startswith("qwen3")]
    assert {m.vocab for m in qwen} == {151936} and {m.head_dim for m in qwen} == {128}
    sizes = [model_catalog()[f"qwen3-{s}"].total_params() for s in
             ("0.6b", "1.7b", "4b", "8b", "14b", "32b")]
    assert sizes == sorted(sizes)


def test_inline_specs_work_and_are_checked():
    m = dict(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=128, vocab=100)
    h = dict(memory_gb=1, memory_bw_gbs=100, interconnect_bw_gbs=10, peak_tflops_bf16=1,
             peak_tflops_fp16=1)
    cost = make_cost_model({"name": "roofline", "model": m, "hardware": h})
    assert cost.forward_time(1, 1, 0) > 0
    with pytest.raises(ValueError, match=r"^cost\.model\.kv_heads"):
        get_model({**m, "kv_heads": 3})
    with pytest.raises(ValueError, match=r"^cost\.hardware\.memory_bw_gbs: missing"):
        get_hardware({k: v for k, v in h.items() if k != "memory_bw_gbs"})


# ---------------------------------------------------------------------------- roofline

def test_decode_qwen3_32b_on_4_l40_is_memory_bound_at_weights_over_bandwidth():
    cost = roofline("qwen3-32b", "l40", 4)
    m, hw = get_model("qwen3-32b"), get_hardware("l40")
    parts = cost.breakdown(16, 16, 16 * 512)
    assert parts["memory"] > 5 * parts["compute"]
    ideal = 2.0 * params_from_dims(m) / (4 * hw.memory_bw_gbs * 1e9)     # bf16 weights / 4 BW
    assert 1.0 <= parts["total"] / ideal < 1.15
    assert 0.015 < ideal < 0.025          # ~19 ms: 65.5 GB / (4 x 864 GB/s)


def test_large_prefill_is_compute_bound_at_two_flops_per_param():
    cost = roofline("qwen3-8b", "h100-sxm", 1)
    m, hw = get_model("qwen3-8b"), get_hardware("h100-sxm")
    parts = cost.breakdown(1, 8192, 0)
    assert parts["compute"] > 3 * parts["memory"]
    dense = 2.0 * params_from_dims(m) * 8192 / (hw.peak_tflops_bf16 * 1e12)
    assert 1.0 <= parts["total"] / dense < 1.4       # + causal attention over 8k tokens


def test_tensor_parallel_speeds_up_big_models():
    for t in (16, 4096):
        t1 = roofline("qwen3-32b", "h100-sxm", 1).forward_time(16, t, 16 * 1000)
        t4 = roofline("qwen3-32b", "h100-sxm", 4).forward_time(16, t, 16 * 1000)
        assert t4 < 0.5 * t1
    # on PCIe the all-reduces eat part of the gain, on NVLink less so
    pcie = roofline("qwen3-32b", "l40", 4).breakdown(1, 2048, 0)
    nvl = roofline("qwen3-32b", "h100-sxm", 4).breakdown(1, 2048, 0)
    assert pcie["comm"] > 5 * nvl["comm"] > 0
    assert roofline("qwen3-8b", "h100-sxm", 1).breakdown(4, 4, 0)["comm"] == 0


def test_dtype_efficiency_and_overhead_move_time_the_right_way():
    base = roofline("llama-3.3-70b", "h100-sxm", 4).breakdown(64, 64, 64 * 500)
    fp8 = roofline("llama-3.3-70b", "h100-sxm", 4, dtype="fp8").breakdown(64, 64, 64 * 500)
    w4 = roofline("llama-3.3-70b", "h100-sxm", 4, dtype="w4a16").breakdown(64, 64, 64 * 500)
    assert w4["memory"] < fp8["memory"] < base["memory"]
    slow = roofline("llama-3.3-70b", "h100-sxm", 4, efficiency={"memory": 0.5},
                    overhead=0.004).breakdown(64, 64, 64 * 500)
    assert slow["memory"] == pytest.approx(2 * base["memory"])
    assert slow["total"] == pytest.approx(max(slow["memory"], slow["compute"]) + slow["comm"]
                                          + 0.004)


def test_kv_capacity_and_replicated_kv_heads():
    cost = roofline("qwen3-32b", "l40", 4)
    per_tok = 2 * 64 * (8 / 4) * 128 * 2                  # K and V, 2 heads per GPU, bf16
    weights = 2.0 * params_from_dims(get_model("qwen3-32b")) / 4
    assert cost.kv_capacity_tokens(0.9) == pytest.approx((48e9 * 0.9 - weights) / per_tok, rel=1e-3)
    # Qwen3-235B has 4 KV heads: at tp = 8 each GPU still holds a whole head
    moe = roofline("qwen3-235b-a22b", "h200", 8, dtype="fp8")
    assert moe.kv_bytes_per_token_per_gpu() == pytest.approx(2 * 94 * 1 * 128 * 2)


def test_moe_reads_only_touched_experts():
    cost = roofline("qwen3-235b-a22b", "h200", 8, dtype="fp8")
    one, many = cost.breakdown(1, 1, 0), cost.breakdown(256, 256, 0)
    m, hw = get_model("qwen3-235b-a22b"), get_hardware("h200")
    active_read = 1.0 * m.active_params() / 8 / (hw.memory_bw_gbs * 1e9)     # fp8: 1 B/param
    all_read = 1.0 * m.total_params() / 8 / (hw.memory_bw_gbs * 1e9)
    assert one["memory"] == pytest.approx(active_read, rel=0.05)
    # 256 tokens touch ~all 128 experts (+ per-token activation and KV traffic)
    assert all_read < many["memory"] < 1.15 * all_read
    assert one["memory"] < 0.15 * all_read


@settings(deadline=None, max_examples=40)
@given(name=st.sampled_from(["qwen3-32b", "qwen3-235b-a22b", "smollm2-135m"]),
       s=st.integers(1, 128), t=st.integers(1, 4096), c=st.integers(0, 200_000),
       dt=st.integers(1, 512), dc=st.integers(1, 50_000))
def test_roofline_monotone_in_tokens_and_context(name, s, t, c, dt, dc):
    hw, tp = {"qwen3-32b": ("l40", 4), "qwen3-235b-a22b": ("h200", 8),
              "smollm2-135m": ("a100-80gb", 1)}[name]
    cost = roofline(name, hw, tp, dtype="fp8" if name.startswith("qwen3-235") else "bf16")
    base = cost.forward_time(s, t, c)
    assert base > 0
    assert cost.forward_time(s, t + dt, c) >= base
    assert cost.forward_time(s, t, c + dc) >= base
    vec = cost.forward_time(np.array([s, s]), np.array([t, t + dt]), np.array([c, c]))
    assert vec[0] == pytest.approx(base) and vec[1] == pytest.approx(
        cost.forward_time(s, t + dt, c))


# ---------------------------------------------------------------------------- fitted

def affine_fn(s, t, c):
    return 2e-3 + 3e-4 * s + 2e-5 * t + 1e-8 * c


def grid_table():
    axes = {"seqs": [1, 8, 32], "tokens": [1, 16, 128, 1024], "context": [0, 4096, 65536]}
    S, T, C = np.meshgrid(*axes.values(), indexing="ij")
    return {"kind": "table", **axes, "time": affine_fn(S, T, C).tolist()}


def test_fit_file_roundtrip_affine_and_table(tmp_path):
    path = tmp_path / "fit.json"
    write_fit(path, {"target": {"kind": "affine", "coef": {"base": 2e-3, "per_seq": 3e-4,
                                                           "per_token": 2e-5, "per_context": 1e-8},
                                "ci95": {"base": [1.9e-3, 2.1e-3]}, "residual_cv": 0.05},
                     "drafter": grid_table()}, meta={"traces": ["a.jsonl"]})
    target = make_cost_model({"name": "fitted", "path": str(path), "role": "target"})
    drafter = make_cost_model({"name": "fitted", "path": str(path), "role": "drafter"})
    rng = np.random.default_rng(3)
    s, t, c = rng.integers(1, 64, 50), rng.integers(1, 3000, 50), rng.integers(0, 100_000, 50)
    assert np.allclose(target.forward_time(s, t, c), affine_fn(s, t, c))
    # multilinear interpolation (and edge extrapolation) of an affine table is exact
    assert np.allclose(drafter.forward_time(s, t, c), affine_fn(s, t, c))
    assert drafter.forward_time(8, 16, 4096) == pytest.approx(affine_fn(8, 16, 4096))
    scalar = [drafter.forward_time(int(a), int(b), int(d)) for a, b, d in zip(s, t, c)]
    assert np.allclose(scalar, affine_fn(s, t, c))      # the scalar fast path agrees
    assert target.fit_info["residual_cv"] == 0.05
    tab = make_cost_model({"name": "tabulated", "path": str(path), "role": "drafter"})
    assert tab.forward_time(3, 5, 7) == pytest.approx(affine_fn(3, 5, 7))
    with pytest.raises(ValueError, match=r"^cost\.role: 'target' is not a table"):
        make_cost_model({"name": "tabulated", "path": str(path), "role": "target"})
    with pytest.raises(ValueError, match=r"^cost\.role: 'verifier' not in .*has: drafter, target"):
        make_cost_model({"name": "fitted", "path": str(path), "role": "verifier"})


def test_inline_table_with_single_value_axis_and_errors(tmp_path):
    spec = {"name": "tabulated", "seqs": [16], "tokens": [1, 5], "context": [0, 1000],
            "time": [[[0.01, 0.02], [0.03, 0.04]]]}
    cost = make_cost_model(spec)
    assert cost.forward_time(99, 3, 500) == pytest.approx(0.025)     # constant along seqs
    with pytest.raises(ValueError, match=r"^cost\.time: shape"):
        make_cost_model({**spec, "time": [[0.01, 0.02]]})
    with pytest.raises(ValueError, match=r"^cost\.tokens: values must be strictly increasing"):
        make_cost_model({**spec, "tokens": [5, 1]})
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "other", "version": 1, "roles": {}}))
    with pytest.raises(ValueError, match=r"^cost\.path: .*field 'format'"):
        make_cost_model({"name": "fitted", "path": str(bad)})
    bad.write_text('{"format": "psdlab.cost-fit",\n "version": }')
    with pytest.raises(ValueError, match=r"bad\.json:2: not valid JSON"):
        make_cost_model({"name": "fitted", "path": str(bad)})


# ---------------------------------------------------------------------------- jitter

def test_no_jitter_is_identity_and_draws_nothing():
    rng = np.random.default_rng(5)
    state = rng.bit_generator.state
    times = np.array([0.1, 0.2])
    assert make_jitter(None).apply(rng, times) is times
    assert make_jitter({"dist": "gamma", "cv": 0}).apply(rng, 0.3) == 0.3
    assert rng.bit_generator.state == state


@pytest.mark.parametrize("dist, cv", [("normal", 0.1), ("normal", 0.3), ("gamma", 0.2),
                                      ("gamma", 1.5)])
def test_jitter_mean_one_and_requested_cv(dist, cv):
    jit = make_jitter({"dist": dist, "cv": cv})
    x = jit.apply(np.random.default_rng(11), np.full(200_000, 0.02)) / 0.02
    se = cv / np.sqrt(x.size)
    assert abs(x.mean() - 1.0) < 5 * se
    assert x.std() / x.mean() == pytest.approx(cv, rel=0.03)
    assert (x > 0).all()
    again = jit.apply(np.random.default_rng(11), np.full(200_000, 0.02)) / 0.02
    assert np.array_equal(x, again)


@pytest.mark.parametrize("spec, field", [({"dist": "normal", "cv": 0.9}, "jitter.cv"),
                                         ({"dist": "uniform", "cv": 0.1}, "jitter.dist"),
                                         ({"dist": "gamma"}, "jitter.cv"),
                                         ({"dist": "gamma", "cv": 0.1, "seed": 1}, "jitter.seed")])
def test_jitter_bad_specs(spec, field):
    with pytest.raises(ValueError, match=f"^{field}"):
        make_jitter(spec)
