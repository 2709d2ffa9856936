"""Hardware and model catalogs for the roofline cost model.

The numbers live in ``hardware.toml`` and ``models.toml`` next to this file, each entry with a
``source`` naming the public datasheet or config it was read from.  This module loads them into
frozen dataclasses, checks them, and derives what the roofline needs (parameter counts, bytes
of KV cache per token).  A spec may also give a hardware or model inline as a dict with the same
fields, for what-if parts that are not in the catalog.
"""
from __future__ import annotations

import functools
import os
from dataclasses import MISSING, dataclass, fields
from typing import Any, Mapping

from psdlab.analysis.checks import (check_choice, check_fields, check_int, check_positive,
                                    field_types)

from psdlab.analysis.toml_reader import tomllib as _toml

from .hf_config import config_path, model_from_config

_HERE = os.path.dirname(os.path.abspath(__file__))
HARDWARE_TOML = os.path.join(_HERE, "hardware.toml")
MODELS_TOML = os.path.join(_HERE, "models.toml")

#: dtype name -> (TOML key of the peak, bytes per weight)
DTYPES: dict[str, tuple[str, float]] = {
    "bf16": ("peak_tflops_bf16", 2.0),
    "fp16": ("peak_tflops_fp16", 2.0),
    "fp8": ("peak_tflops_fp8", 1.0),
    "int8": ("peak_tflops_int8", 1.0),
    # weight-only 4-bit (AWQ / GPTQ): weights read at 0.5 B/param, math in fp16 tensor cores
    "w4a16": ("peak_tflops_fp16", 0.5),
    # weight-only 8-bit (GPTQ 8-bit): weights read at 1 B/param, math in fp16 tensor cores
    "w8a16": ("peak_tflops_fp16", 1.0),
}


@dataclass(frozen=True)
class HardwareSpec:
    """One accelerator: dense tensor peaks, memory and interconnect (see hardware.toml)."""
    name: str
    memory_gb: float
    memory_bw_gbs: float
    interconnect_bw_gbs: float          # bidirectional, per GPU, as on the datasheet
    peak_tflops_bf16: float
    peak_tflops_fp16: float
    peak_tflops_fp8: float | None = None
    peak_tflops_int8: float | None = None
    interconnect: str = "nvlink"
    description: str = ""
    source: str = ""
    #: other names the part is known by (``psdlab cost --hardware h100``)
    aliases: tuple[str, ...] = ()

    def peak_flops(self, dtype: str, where: str = "cost") -> float:
        """Dense peak in FLOP/s for the tensor-core mode that `dtype` uses."""
        key = DTYPES[dtype][0]
        value = getattr(self, key)
        if value is None:
            have = [d for d, (k, _) in DTYPES.items() if getattr(self, k) is not None]
            raise ValueError(f"{where}.dtype: {self.name} has no {dtype} tensor cores; "
                             f"supported: {', '.join(have)}")
        return float(value) * 1e12

    @property
    def memory_bytes(self) -> float:
        return float(self.memory_gb) * 1e9

    @property
    def memory_bw(self) -> float:
        """Bytes per second."""
        return float(self.memory_bw_gbs) * 1e9

    @property
    def link_bw(self) -> float:
        """Bytes per second per direction (half the datasheet's bidirectional figure)."""
        return float(self.interconnect_bw_gbs) * 1e9 / 2.0


@dataclass(frozen=True)
class ModelShape:
    """One decoder-only transformer (SwiGLU MLP, GQA attention); see models.toml."""
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool = False
    experts: int = 0                    # 0 = dense
    experts_active: int = 0
    expert_intermediate: int = 0
    #: MoE: the always-active shared experts' total intermediate size per MoE layer (0: none)
    shared_expert_intermediate: int = 0
    #: MoE: layers whose MLP is dense (``intermediate``) instead of experts
    dense_layers: int = 0
    #: the weight format the checkpoint stores (a DTYPES key: a quantised config.json's
    #: w4a16 / w8a16 / fp8, or fp16); "" = bf16.  The cost model's default ``dtype``.
    weight_dtype: str = ""
    params_b: float | None = None       # advertised size (billions), for cross-checks only
    active_params_b: float | None = None
    #: context length (config.json max_position_embeddings): the simulator's default refusal
    #: limit for a trace file's requests (sim.model_specs.CostSpec.max_model_len); None: unknown
    max_model_len: int | None = None
    hf_id: str = ""
    source: str = ""

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def attn_params_per_layer(self) -> int:
        q = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        return self.hidden * (2 * q + 2 * kv)          # q, k, v and o projections

    @property
    def expert_params(self) -> int:
        """Parameters of one MoE expert (gate, up, down)."""
        return 3 * self.hidden * self.expert_intermediate

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is experts (0 for a dense model)."""
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def shared_expert_params(self) -> int:
        """Parameters of a MoE layer's shared experts (read by every pass)."""
        return 3 * self.hidden * self.shared_expert_intermediate

    @property
    def dense_mlp_params(self) -> int:
        """Parameters of one dense SwiGLU MLP (gate, up, down)."""
        return 3 * self.hidden * self.intermediate

    @property
    def active_intermediate(self) -> int:
        """Intermediate width a token's MLP computes in a MoE layer (top-k experts and the
        shared ones), or the dense MLP's."""
        if not self.is_moe:
            return self.intermediate
        return self.experts_active * self.expert_intermediate + self.shared_expert_intermediate

    def mlp_params_per_layer(self, active_only: bool = False) -> int:
        """One MoE layer's MLP (routed experts, router, shared experts), or a dense layer's."""
        if not self.is_moe:
            return self.dense_mlp_params
        n = self.experts_active if active_only else self.experts
        return (n * self.expert_params + self.hidden * self.experts       # + router
                + self.shared_expert_params)

    def mlp_params(self, active_only: bool = False) -> int:
        """Every layer's MLP parameters (MoE: active_only counts the top-k experts)."""
        if not self.is_moe:
            return self.layers * self.dense_mlp_params
        return (self.moe_layers * self.mlp_params_per_layer(active_only)
                + self.dense_layers * self.dense_mlp_params)

    @property
    def norm_params_per_layer(self) -> int:
        return 2 * self.hidden + 2 * self.head_dim      # two RMSNorms (+ q/k norms in Qwen3)

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def lm_head_params(self) -> int:
        return self.vocab * self.hidden

    def layer_params(self, active_only: bool = False) -> int:
        return (self.attn_params_per_layer + self.mlp_params_per_layer(active_only)
                + self.norm_params_per_layer)

    def total_params(self) -> int:
        """All stored parameters (embedding counted once when tied)."""
        emb = self.embedding_params + (0 if self.tied_embeddings else self.lm_head_params)
        return (self.layers * (self.attn_params_per_layer + self.norm_params_per_layer)
                + self.mlp_params() + emb + self.hidden)

    def active_params(self) -> int:
        """Parameters one token touches (MoE: top-k experts only)."""
        emb = self.embedding_params + (0 if self.tied_embeddings else self.lm_head_params)
        return (self.layers * (self.attn_params_per_layer + self.norm_params_per_layer)
                + self.mlp_params(active_only=True) + emb + self.hidden)

    def kv_bytes_per_token(self, kv_bytes: float) -> float:
        """Bytes of K and V cache one token occupies over all layers (whole model, no TP)."""
        return 2.0 * self.layers * self.kv_heads * self.head_dim * kv_bytes


# ---------------------------------------------------------------------------- loading

def _read_toml(path: str) -> dict[str, Any]:
    with open(path, "rb") as fh:
        return _toml.load(fh)


def _build(cls, name: str, raw: Mapping[str, Any], where: str):
    required = tuple(f.name for f in fields(cls) if f.name != "name"
                     and f.default is MISSING and f.default_factory is MISSING)
    optional = tuple(f.name for f in fields(cls) if f.name != "name" and f.name not in required)
    check_fields(raw, where, required, optional, named=False, types=field_types(cls))
    body = dict(raw)
    if "aliases" in body:
        aliases = body["aliases"]
        if not isinstance(aliases, (list, tuple)) or not all(isinstance(a, str) for a in aliases):
            raise ValueError(f"{where}.aliases: expected a list of names, got {aliases!r}")
        body["aliases"] = tuple(a.lower() for a in aliases)
    return cls(name=name, **body)


def _check_hardware(hw: HardwareSpec, where: str) -> HardwareSpec:
    for key in ("memory_gb", "memory_bw_gbs", "interconnect_bw_gbs", "peak_tflops_bf16",
                "peak_tflops_fp16"):
        check_positive(f"{where}.{key}", getattr(hw, key))
    for key in ("peak_tflops_fp8", "peak_tflops_int8"):
        if getattr(hw, key) is not None:
            check_positive(f"{where}.{key}", getattr(hw, key))
    return hw


def _check_model(m: ModelShape, where: str) -> ModelShape:
    for key in ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab"):
        check_int(f"{where}.{key}", getattr(m, key), minimum=1)
    if m.heads % m.kv_heads:
        raise ValueError(f"{where}.kv_heads: must divide heads={m.heads}, got {m.kv_heads}")
    if m.experts:
        check_int(f"{where}.experts_active", m.experts_active, 1, m.experts)
        check_int(f"{where}.expert_intermediate", m.expert_intermediate, minimum=1)
    check_int(f"{where}.shared_expert_intermediate", m.shared_expert_intermediate, minimum=0)
    check_int(f"{where}.dense_layers", m.dense_layers, 0, m.layers - 1 if m.experts else 0)
    if m.weight_dtype:
        check_choice(f"{where}.weight_dtype", m.weight_dtype, tuple(DTYPES))
    return m


@functools.lru_cache(maxsize=None)
def hardware_catalog() -> dict[str, HardwareSpec]:
    raw = _read_toml(HARDWARE_TOML)
    return {k: _check_hardware(_build(HardwareSpec, k, v, f"hardware.toml[{k}]"),
                               f"hardware.toml[{k}]") for k, v in raw.items()}


@functools.lru_cache(maxsize=None)
def model_catalog() -> dict[str, ModelShape]:
    raw = _read_toml(MODELS_TOML)
    return {k: _check_model(_build(ModelShape, k, v, f"models.toml[{k}]"), f"models.toml[{k}]")
            for k, v in raw.items()}


def get_hardware(value: str | Mapping[str, Any], where: str = "cost.hardware") -> HardwareSpec:
    """A catalog entry by name (case-insensitive), or an inline dict with the TOML fields."""
    if isinstance(value, Mapping):
        name = str(value.get("name", "custom"))
        body = {k: v for k, v in value.items() if k != "name"}
        return _check_hardware(_build(HardwareSpec, name, body, where), where)
    cat = hardware_catalog()
    key = str(value).lower()
    if key in cat:
        return cat[key]
    for spec in cat.values():
        if key in spec.aliases:
            return spec
    raise ValueError(f"{where}: unknown {value!r}; known: {', '.join(sorted(cat))}")


def get_model(value: str | Mapping[str, Any], where: str = "cost.model") -> ModelShape:
    """A catalog entry by name or Hugging Face id (case-insensitive), a model's config.json
    (a ``.json`` path or a folder holding ``config.json``: sim/costs/hf_config.py), or an
    inline dict."""
    if isinstance(value, Mapping):
        name = str(value.get("name", "custom"))
        body = {k: v for k, v in value.items() if k != "name"}
        return _check_model(_build(ModelShape, name, body, where), where)
    cat = model_catalog()
    key = str(value).lower()
    if key in cat:
        return cat[key]
    for spec in cat.values():
        if spec.hf_id.lower() == key:
            return spec
    path = config_path(str(value))
    if path is not None:
        return _check_model(model_from_config(path, where, ModelShape), where)
    raise ValueError(f"{where}: unknown {value!r}; known: {', '.join(sorted(cat))} "
                     f"(or a config.json path)")
