"""GPU cost model of a real serving engine (``{"name": "gpu", ..., "engine": "vllm-eager"}``).

The ideal roofline (roofline.py) is a lower bound: real engines add host work, launch gaps,
collective latencies and do not reach peak on small passes.  This model keeps the roofline's
FLOP and byte counts and adds the terms that dominate real engines.  For a pass over T new
tokens of S sequences (C tokens of context) of a model with L layers on a TP group of p GPUs:

- ``C = flops / (peak * compute_eff) * (T + compute_half_tokens) / T``: achieved compute
  efficiency grows with the tokens of a pass as T / (T + compute_half_tokens);
- ``M = bytes / (memory_bw * memory_eff)``;
- ``K = (C^q + M^q)^(1/q)`` with q = ``blend``: compute and memory overlap imperfectly near
  the knee (q -> infinity is the roofline's max);
- ``N = comm_bytes / (link_bw * network_eff) + (2 L + 1) * collective_latency[link]`` at p > 1
  (two all-reduces per layer and one logits gather; the link is the hardware's interconnect,
  ``pcie`` or ``nvlink``, unless the spec sets ``link``);
- ``time = step_host + max(L * layer_host, K + N)``.

``layer_host`` is the host time per layer per pass (Python dispatch and kernel launches): in
an eager engine the GPU runs behind the launches, so the pass lasts as long as the slower of
the two; CUDA graphs replay a whole pass with one launch, so their ``layer_host`` is tiny.
``step_host`` is the engine's per-pass host work that does not overlap the GPU (input
preparation, sampling, output processing).

Presets (engines.toml, each with its sources and the public points it was fitted on, which
public_measurements.toml lists) are chosen by name; ``engine`` may also be an inline table of
preset fields for a what-if.  A cost model calibrated from the user's own traces (validation/)
is a different cost spec and replaces this one wholesale.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, fields
from typing import Any, Mapping

import numpy as np

from psdlab.analysis.checks import (check_choice, check_fields, check_int, check_nonnegative,
                                    check_range)

from .base import CostModel, prepare_inputs, register_cost_model, vmax
from .catalog import _read_toml
from .roofline import ACT_BYTES, RooflineCost, _make_roofline

ENGINES_TOML = os.path.join(os.path.dirname(os.path.abspath(__file__)), "engines.toml")
LINKS = ("pcie", "nvlink")
EXECUTIONS = ("eager", "graph")
#: the name that means "no engine terms": the ideal roofline (a lower bound)
IDEAL = "ideal"


@dataclass(frozen=True)
class EnginePreset:
    """The engine terms of one serving stack; see the module docstring for each field."""
    name: str
    execution: str                       # eager | graph
    memory_eff: float
    compute_eff: float
    compute_half_tokens: float
    blend: float
    network_eff: float
    layer_host_s: float
    step_host_s: float
    collective_latency_pcie_s: float
    collective_latency_nvlink_s: float
    description: str = ""
    sources: tuple[str, ...] = ()
    fitted_on: tuple[str, ...] = ()
    #: the engine step preset (sim/costs/engine_steps.toml) this engine runs with, for
    #: ``server.engine_step = "preset"``; "" for none
    engine_step: str = ""

    def collective_latency(self, link: str) -> float:
        return (self.collective_latency_pcie_s if link == "pcie"
                else self.collective_latency_nvlink_s)


_NUMERIC = ("memory_eff", "compute_eff", "compute_half_tokens", "blend", "network_eff",
            "layer_host_s", "step_host_s", "collective_latency_pcie_s",
            "collective_latency_nvlink_s")


def _preset_from(name: str, raw: Mapping[str, Any], where: str) -> EnginePreset:
    allowed = {f.name for f in fields(EnginePreset)} - {"name"}
    required = ("execution",) + _NUMERIC
    check_fields(raw, where, required, tuple(allowed - set(required)), named=False)
    vals: dict[str, Any] = {"execution": check_choice(f"{where}.execution", raw["execution"],
                                                      EXECUTIONS)}
    for key in ("memory_eff", "compute_eff", "network_eff"):
        vals[key] = check_range(f"{where}.{key}", raw[key], 0, 1, lo_open=True)
    vals["blend"] = check_range(f"{where}.blend", raw["blend"], 1, 100)
    for key in ("compute_half_tokens", "layer_host_s", "step_host_s",
                "collective_latency_pcie_s", "collective_latency_nvlink_s"):
        vals[key] = check_nonnegative(f"{where}.{key}", raw[key])
    for key in ("sources", "fitted_on"):
        value = raw.get(key, ())
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{where}.{key}: expected a list of strings")
        vals[key] = tuple(value)
    return EnginePreset(name=name, description=str(raw.get("description", "")),
                        engine_step=str(raw.get("engine_step", "")), **vals)


@functools.lru_cache(maxsize=None)
def engine_presets() -> dict[str, EnginePreset]:
    """The named presets of engines.toml."""
    raw = _read_toml(ENGINES_TOML)
    return {k: _preset_from(k, v, f"engines.toml[{k}]") for k, v in raw.items()}


def get_engine(value: str | Mapping[str, Any], where: str = "cost.engine") -> EnginePreset:
    """A preset by name, or an inline table: a ``base`` preset name plus fields to change, or
    every field."""
    presets = engine_presets()
    if isinstance(value, Mapping):
        body = dict(value)
        base = body.pop("base", None)
        if base is not None:
            start = get_engine(base, f"{where}.base")
            merged = {f.name: getattr(start, f.name) for f in fields(EnginePreset)
                      if f.name != "name"}
            merged.update(body)
            return _preset_from(str(body.get("name", f"{start.name}+")),
                                {k: v for k, v in merged.items() if k != "name"}, where)
        return _preset_from(str(body.pop("name", "custom")), body, where)
    key = str(value).lower()
    if key not in presets:
        raise ValueError(f"{where}: unknown engine preset {value!r}; known: "
                         f"{', '.join(sorted(presets))} (or {IDEAL!r}: the ideal roofline)")
    return presets[key]


#: no engine terms (efficiencies 1, no host, no latency; blend 100 is the max within 0.7%): the
#: ideal roofline's kernel time, for the per-layer check points
IDEAL_PRESET = EnginePreset(name=IDEAL, execution="graph", memory_eff=1.0, compute_eff=1.0,
                            compute_half_tokens=0.0, blend=100.0, network_eff=1.0,
                            layer_host_s=0.0, step_host_s=0.0, collective_latency_pcie_s=0.0,
                            collective_latency_nvlink_s=0.0,
                            description="the ideal roofline (a lower bound)")


def blend(a, b, q: float):
    """(a^q + b^q)^(1/q) for non-negative floats or arrays, scaled to avoid underflow."""
    top = vmax(a, b)
    if type(top) is float:
        if top <= 0.0:
            return 0.0
        return top * ((a / top) ** q + (b / top) ** q) ** (1.0 / q)
    safe = np.where(top > 0, top, 1.0)
    return np.where(top > 0, safe * ((a / safe) ** q + (b / safe) ** q) ** (1.0 / q), 0.0)


@dataclass(frozen=True)
class GpuCost(CostModel):
    """Roofline counts plus an engine preset's terms (module docstring)."""
    roofline: RooflineCost
    engine: EnginePreset
    link: str = "pcie"
    kind = "gpu"

    @property
    def layers(self) -> int:
        return self.roofline.model.layers

    def collectives(self) -> int:
        """Collectives per pass: two all-reduces per layer and the logits gather (0 at TP 1)."""
        return 0 if self.roofline.tp == 1 else 2 * self.layers + 1

    def _gpu(self, s, t, c):
        rf, e = self.roofline, self.engine
        k = rf._c
        per_token = k["flop_linear"] + k["flop_attn"] * (c + 0.5 * t) / vmax(s, 1.0)
        compute = per_token * (t + e.compute_half_tokens) / e.compute_eff
        _, memory, comm = rf._parts(s, t, c)
        memory = memory / e.memory_eff
        kernels = blend(compute, memory, e.blend)
        network = comm / e.network_eff + self.collectives() * e.collective_latency(self.link)
        return kernels, network

    def layer_kernel_time(self, tokens: float) -> float:
        """GPU kernel seconds of ONE decoder layer's weight-bearing ops (projections, MLP,
        norms, activations) over `tokens` tokens: no attention over a context, no LM head, no
        host work (what a per-operation profiler such as Vidur's measures)."""
        rf, e, m, p = self.roofline, self.engine, self.roofline.model, self.roofline.tp
        params = m.attn_params_per_layer + m.mlp_params_per_layer(True)
        q, kv = m.heads * m.head_dim, m.kv_heads * m.head_dim
        inter = m.active_intermediate
        act = 2 * ACT_BYTES * (((q + 2 * kv) + q + 3 * inter) / p + 4 * m.hidden)
        compute = (2.0 * params / p / rf.hardware.peak_flops(rf.dtype)
                   * (tokens + e.compute_half_tokens) / e.compute_eff)
        memory = ((params * rf.weight_bytes / p + m.norm_params_per_layer * ACT_BYTES
                   + tokens * act) / (rf.hardware.memory_bw * e.memory_eff))
        return float(blend(compute, memory, e.blend))

    def _time(self, s, t, c):
        kernels, network = self._gpu(s, t, c)
        host = self.layers * self.engine.layer_host_s
        return self.engine.step_host_s + vmax(host + 0.0 * kernels, kernels + network)

    def breakdown(self, seqs, new_tokens, context_tokens) -> dict[str, Any]:
        """Seconds per term (floats for scalar input): kernels (compute and memory blended),
        network (bandwidth + collective latencies), host_layers, step_host, total."""
        s, t, c, scalar = prepare_inputs(seqs, new_tokens, context_tokens)
        kernels, network = self._gpu(s, t, c)
        zero = 0.0 * kernels
        parts = {"kernels": kernels, "network": network,
                 "host_layers": self.layers * self.engine.layer_host_s + zero,
                 "step_host": self.engine.step_host_s + zero, "total": self._time(s, t, c)}
        parts["bound"] = None if not scalar else (
            "host" if parts["host_layers"] > kernels + network else "gpu")
        if scalar:
            return {k: (float(v) if k != "bound" else v) for k, v in parts.items()}
        return parts

    def describe(self) -> dict[str, Any]:
        out = self.roofline.describe()
        out.update(name=self.kind, engine=self.engine.name, execution=self.engine.execution,
                   link=self.link)
        del out["efficiency"], out["overhead"], out["allreduce_latency"]
        return out


@register_cost_model("gpu")
def _make_gpu(spec: Mapping[str, Any], where: str) -> GpuCost | RooflineCost:
    check_fields(spec, where, required=("model", "hardware", "engine"),
                 optional=("tp", "dtype", "kv_dtype", "check_memory", "link"))
    rf_spec = {k: v for k, v in spec.items() if k not in ("engine", "link")}
    roofline = _make_roofline({**rf_spec, "name": "roofline"}, where)
    if isinstance(spec["engine"], str) and spec["engine"].lower() == IDEAL:
        return roofline
    engine = get_engine(spec["engine"], f"{where}.engine")
    link = check_choice(f"{where}.link", spec.get("link", roofline.hardware.interconnect), LINKS)
    return GpuCost(roofline=roofline, engine=engine, link=link)


def gpu_cost(model: Any, hardware: Any, engine: Any, tp: int = 1, dtype: str = "bf16",
             **extra: Any) -> GpuCost | RooflineCost:
    """Convenience: the cost model of one model on a TP group under an engine preset."""
    check_int("tp", tp, 1, 64)
    return _make_gpu({"name": "gpu", "model": model, "hardware": hardware, "engine": engine,
                      "tp": tp, "dtype": dtype, **extra}, "cost")


def with_engine(preset: EnginePreset, **changes: Any) -> EnginePreset:
    """A copy of a preset with some fields changed (what-if; values are re-checked)."""
    raw = {f.name: getattr(preset, f.name) for f in fields(EnginePreset) if f.name != "name"}
    raw.update(changes)
    return _preset_from(preset.name, raw, "engine")


__all__ = ["EnginePreset", "GpuCost", "IDEAL_PRESET", "blend", "engine_presets", "get_engine",
           "gpu_cost", "with_engine", "IDEAL", "LINKS"]
