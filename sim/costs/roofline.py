"""Roofline cost model: one model on a tensor-parallel group of identical GPUs.

Spec::

    {"name": "roofline", "model": "qwen3-32b", "hardware": "l40", "tp": 4, "dtype": "bf16",
     "kv_dtype": "bf16", "efficiency": {"compute": 1.0, "memory": 1.0, "network": 1.0},
     "overhead": 0.0, "allreduce_latency": 0.0, "check_memory": true}

``model`` and ``hardware`` name catalog entries (catalog.py), a model's config.json
(hf_config.py) or are inline dicts with the same fields.  ``dtype`` is the weight/compute
format: bf16, fp16, fp8, int8 (W8A8), w4a16 or w8a16 (4- or 8-bit weight-only, fp16 math);
without one, the model's own (a quantised config.json's ``weight_dtype``), else bf16.
Activations are 2 bytes; the KV cache is ``kv_dtype`` (bf16 by default, as vLLM's "auto" keeps
it for fp8 weights; fp8 gives 1 byte).

For a pass over T new tokens of S sequences whose caches hold C tokens, per GPU of a TP group p:

- compute  = [2 T N_active + 2 T V H + 4 L n_h d_h T (C + T/2) / S] / p / (peak * eff.compute),
  N_active = matmul parameters a token touches in the layers, V H the LM head (logits for every
  new token -- verification needs them all; for a prefill, which needs only the last token's
  logits, this and the logits all-gather below overstate the time by a few percent), the last
  term QK^T and AV with the new tokens spread evenly over the
  sequences and causal among themselves.
- memory   = [weights read once + KV read (C tokens) + KV written (T tokens) + activations]
  / (mem BW * eff.memory).  Weights are split p ways; KV heads are split p ways but never below
  one head per GPU (replicated when kv_heads < p).  Activations: each layer's input/output
  vectors written once and read once (hidden-sized ones replicated, projections split).
- comm     = 2 L ring all-reduces of T H activation bytes, each 2 (p-1)/p * size / (link BW per
  direction * eff.network) + allreduce_latency, plus one all-gather of the T V logits; 0 at p=1.
- time     = max(compute, memory) + comm + overhead.  Compute and memory overlap (roofline);
  communication does not.

MoE (e.g. Qwen3-235B-A22B): FLOPs count the active experts only (top-k per token, plus any
shared experts); the weights read per pass are the attention, router, shared experts, dense
layers' MLPs and LM head plus, per MoE layer, the *distinct experts touched*, with routing
taken as uniform and independent: E[touched per layer] = E (1 - (1 - k/E)^T)
(``expected_experts_touched``).  Real
routing is skewed, so this overstates the experts read at small T a little and is exact at
T = 1 and for large T (all E).

Defaults are the ideal roofline (efficiencies 1, no fixed overhead, no collective latency):
a lower bound on the time.  Calibrate ``efficiency``/``overhead``/``allreduce_latency`` from
traces (validation/) for predictions.  With ``check_memory`` (default) a spec whose weights do not
fit in the GPUs' memory is rejected.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from psdlab.analysis.checks import (check_choice, check_fields, check_int, check_nonnegative,
                                    check_range)

from .base import CostModel, prepare_inputs, register_cost_model, vmax
from .catalog import DTYPES, HardwareSpec, ModelShape, get_hardware, get_model

ACT_BYTES = 2.0
KV_DTYPES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
EFFICIENCY_KEYS = ("compute", "memory", "network")


def expected_experts_touched(experts: int, per_token: int, tokens):
    """Expected distinct experts among ``experts`` that ``tokens`` tokens touch when each picks
    ``per_token`` of them uniformly and independently: E (1 - (1 - K/E)^T) per layer (K at
    T = 1, E as T grows; 0 at T = 0).  ``tokens`` is a float or a numpy array."""
    keep = 1.0 - per_token / experts
    if type(tokens) is float or type(tokens) is int:
        return experts * (1.0 - keep ** tokens) if tokens > 0 else 0.0
    return experts * (1.0 - np.power(keep, tokens))


@dataclass(frozen=True)
class RooflineCost(CostModel):
    model: ModelShape
    hardware: HardwareSpec
    tp: int = 1
    dtype: str = "bf16"
    kv_dtype: str = "bf16"
    eff_compute: float = 1.0
    eff_memory: float = 1.0
    eff_network: float = 1.0
    overhead: float = 0.0
    allreduce_latency: float = 0.0
    #: the formula's coefficients, derived from the fields by __post_init__
    _c: dict[str, float] = field(init=False, repr=False, compare=False)
    kind = "roofline"

    # ------------------------------------------------------------------ derived constants
    @property
    def weight_bytes(self) -> float:
        return DTYPES[self.dtype][1]

    @property
    def kv_bytes(self) -> float:
        return KV_DTYPES[self.kv_dtype]

    def weight_bytes_per_gpu(self) -> float:
        """Bytes of weights each GPU stores (MoE: all experts)."""
        return self.model.total_params() * self.weight_bytes / self.tp

    def kv_bytes_per_token_per_gpu(self) -> float:
        m = self.model
        heads_per_gpu = max(m.kv_heads / self.tp, 1.0)
        return 2.0 * m.layers * heads_per_gpu * m.head_dim * self.kv_bytes

    def kv_capacity_tokens(self, gpu_memory_utilization: float = 0.9) -> int:
        """Tokens of KV cache that fit per GPU group after the weights (activations ignored)."""
        check_range("gpu_memory_utilization", gpu_memory_utilization, 0, 1, lo_open=True)
        free = self.hardware.memory_bytes * gpu_memory_utilization - self.weight_bytes_per_gpu()
        return max(int(free // self.kv_bytes_per_token_per_gpu()), 0)

    def _coefficients(self) -> dict[str, float]:
        m, p = self.model, self.tp
        n_layers_active = m.layers * m.attn_params_per_layer + m.mlp_params(True)
        peak = self.hardware.peak_flops(self.dtype) * self.eff_compute
        bw = self.hardware.memory_bw * self.eff_memory
        q, kv = m.heads * m.head_dim, m.kv_heads * m.head_dim
        replicated = 4 * m.hidden                        # hidden-sized vectors (replicated)
        # (layers, intermediate width a token computes): MoE layers and dense layers apart
        groups = [(m.layers, m.active_intermediate)] if not m.dense_layers else [
            (m.moe_layers, m.active_intermediate), (m.dense_layers, m.intermediate)]
        act_per_token = sum(2 * ACT_BYTES * n * (((q + 2 * kv) + q + 3 * inter) / p
                                                 + replicated)      # projections split p ways
                            for n, inter in groups)
        act_per_token += ACT_BYTES * m.vocab / p         # logits written
        lm_head = m.lm_head_params
        if m.is_moe:
            fixed_params = (m.layers * (m.attn_params_per_layer + m.norm_params_per_layer)
                            + m.moe_layers * (m.hidden * m.experts + m.shared_expert_params)
                            + m.dense_layers * m.dense_mlp_params + lm_head)
        else:
            fixed_params = m.layers * m.layer_params() + lm_head
        link = self.hardware.link_bw * self.eff_network
        ring = 2.0 * (p - 1) / p
        return {
            "flop_linear": 2.0 * (n_layers_active + lm_head) / p / peak,     # s per token
            "flop_attn": 4.0 * m.layers * q / p / peak,                       # s per token pair
            "mem_fixed": fixed_params * self.weight_bytes / p / bw,           # s per pass
            "mem_expert": m.moe_layers * m.expert_params * self.weight_bytes / p / bw,
            "mem_ctx": self.kv_bytes_per_token_per_gpu() / bw,                # s per ctx token
            "mem_tok": (self.kv_bytes_per_token_per_gpu() + act_per_token) / bw,
            "comm_tok": 0.0 if p == 1 else (2 * m.layers * ring * m.hidden * ACT_BYTES
                                            + (p - 1) / p * m.vocab * ACT_BYTES) / link,
            "comm_fixed": 0.0 if p == 1 else (2 * m.layers + 1) * self.allreduce_latency,
        }

    def __post_init__(self) -> None:
        object.__setattr__(self, "_c", self._coefficients())

    # ------------------------------------------------------------------ the formula
    def _experts_touched(self, t):
        m = self.model
        return expected_experts_touched(m.experts, m.experts_active, t)

    def _parts(self, s, t, c):
        k = self._c
        compute = k["flop_linear"] * t + k["flop_attn"] * t * (c + 0.5 * t) / vmax(s, 1.0)
        memory = k["mem_fixed"] + k["mem_ctx"] * c + k["mem_tok"] * t
        if self.model.is_moe:
            memory = memory + k["mem_expert"] * self._experts_touched(t)
        return compute, memory, k["comm_tok"] * t + k["comm_fixed"]

    def _time(self, s, t, c):
        compute, memory, comm = self._parts(s, t, c)
        return vmax(compute, memory) + comm + self.overhead

    def breakdown(self, seqs, new_tokens, context_tokens) -> dict[str, Any]:
        """Seconds per part: compute, memory, comm, overhead and the total (same broadcasting
        as forward_time)."""
        s, t, c, scalar = prepare_inputs(seqs, new_tokens, context_tokens)
        compute, memory, comm = self._parts(s, t, c)
        zero = 0.0 * t
        parts = {"compute": compute + zero, "memory": memory + zero, "comm": comm + zero,
                 "overhead": self.overhead + zero}
        parts["total"] = self._time(s, t, c) + zero
        if scalar:
            return {key: float(v) for key, v in parts.items()}
        return {key: np.asarray(v, dtype=float) for key, v in parts.items()}

    def describe(self) -> dict[str, Any]:
        return {"name": self.kind, "model": self.model.name, "hardware": self.hardware.name,
                "tp": self.tp, "dtype": self.dtype, "kv_dtype": self.kv_dtype,
                "efficiency": {"compute": self.eff_compute, "memory": self.eff_memory,
                               "network": self.eff_network},
                "overhead": self.overhead, "allreduce_latency": self.allreduce_latency}


@register_cost_model("roofline")
def _make_roofline(spec: Mapping[str, Any], where: str) -> RooflineCost:
    check_fields(spec, where, required=("model", "hardware"),
                 optional=("tp", "dtype", "kv_dtype", "efficiency", "overhead",
                           "allreduce_latency", "check_memory"))
    model = get_model(spec["model"], f"{where}.model")
    hardware = get_hardware(spec["hardware"], f"{where}.hardware")
    tp = check_int(f"{where}.tp", spec.get("tp", 1), 1, 64)
    if model.heads % tp:
        raise ValueError(f"{where}.tp: must divide {model.name}'s {model.heads} attention "
                         f"heads, got {tp}")
    dtype = check_choice(f"{where}.dtype", spec.get("dtype", model.weight_dtype or "bf16"),
                         tuple(DTYPES))
    hardware.peak_flops(dtype, where)
    kv_dtype = check_choice(f"{where}.kv_dtype", spec.get("kv_dtype", "bf16"), tuple(KV_DTYPES))
    eff = spec.get("efficiency", {}) or {}
    if not isinstance(eff, Mapping):
        raise ValueError(f"{where}.efficiency: expected a table of {', '.join(EFFICIENCY_KEYS)}")
    for key in eff:
        check_choice(f"{where}.efficiency", key, EFFICIENCY_KEYS)
    effs = {k: check_range(f"{where}.efficiency.{k}", eff.get(k, 1.0), 0, 1, lo_open=True)
            for k in EFFICIENCY_KEYS}
    cost = RooflineCost(model=model, hardware=hardware, tp=tp, dtype=dtype, kv_dtype=kv_dtype,
                        eff_compute=effs["compute"], eff_memory=effs["memory"],
                        eff_network=effs["network"],
                        overhead=check_nonnegative(f"{where}.overhead", spec.get("overhead", 0.0)),
                        allreduce_latency=check_nonnegative(f"{where}.allreduce_latency",
                                                            spec.get("allreduce_latency", 0.0)))
    check = spec.get("check_memory", True)
    if not isinstance(check, bool):
        raise ValueError(f"{where}.check_memory: expected true/false, got {check!r}")
    need, have = cost.weight_bytes_per_gpu(), hardware.memory_bytes
    if check and need > have:
        raise ValueError(f"{where}.tp: {model.name} {dtype} weights need {need / 1e9:.1f} GB per "
                         f"GPU at tp={tp}, {hardware.name} has {have / 1e9:.0f} GB; raise tp or "
                         f"set check_memory = false")
    return cost
