"""Predicted vs published: every public measurement psdlab knows (public_measurements.toml),
priced with the engine preset that matches the measured engine, with the error and whether
that preset was fitted on the point; plus the MineDraft per-step PSD/SD gains.

``check_rows()`` and ``minedraft_gains()`` return frozen rows (``CostCheckRow``,
``MinedraftGain``) for ``psdlab cost --check`` (sim.costs.check_report) and the tests;
``dataclasses.asdict`` of a row is its JSON object.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any

from .catalog import _read_toml
from .gpu import IDEAL_PRESET, EnginePreset, GpuCost, engine_presets, gpu_cost

POINTS_TOML = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "public_measurements.toml")
QUANTITIES = ("pass", "layer_kernels")


@dataclass(frozen=True)
class PublicPoint:
    """One published figure and the pass (or passes) it measured."""
    id: str
    figure: str
    source: str
    engine_used: str
    preset: str
    model: str
    hardware: str
    tp: int
    seqs: int
    tokens: int
    context: int
    published_ms: float
    passes: int = 1
    quantity: str = "pass"
    dtype: str = "bf16"
    derived: str = ""


@functools.lru_cache(maxsize=None)
def public_points() -> tuple[PublicPoint, ...]:
    raw = _read_toml(POINTS_TOML).get("point", [])
    out = []
    for i, row in enumerate(raw):
        point = PublicPoint(**row)
        if point.quantity not in QUANTITIES:
            raise ValueError(f"public_measurements.toml point[{i}].quantity: must be one of "
                             f"{', '.join(QUANTITIES)}, got {point.quantity!r}")
        out.append(point)
    ids = [p.id for p in out]
    if len(set(ids)) != len(ids):
        raise ValueError("public_measurements.toml: duplicate point ids")
    return tuple(out)


def point_by_id(point_id: str) -> PublicPoint:
    for p in public_points():
        if p.id == point_id:
            return p
    raise KeyError(point_id)


def predict_seconds(point: PublicPoint, engine: Any = None) -> float:
    """Seconds the model predicts for a point, with its own preset (or `engine`: a preset
    name, an EnginePreset-like inline table, or "ideal")."""
    cost = gpu_cost(point.model, point.hardware, engine or point.preset, tp=point.tp,
                    dtype=point.dtype)
    if point.quantity == "layer_kernels":
        if not isinstance(cost, GpuCost):          # "ideal": the roofline's own counts
            cost = GpuCost(roofline=cost, engine=IDEAL_PRESET)
        return cost.layer_kernel_time(point.tokens)
    return sum(cost.forward_time(point.seqs, point.tokens, point.context + j * point.seqs)
               for j in range(point.passes))


def fitted_presets(point_id: str) -> list[str]:
    return sorted(name for name, pr in engine_presets().items() if point_id in pr.fitted_on)


def fit_hardware(fitted_on: tuple[str, ...]) -> tuple[str, ...]:
    """The catalog hardware of the public points a preset was fitted on (sorted, unique)."""
    by_id = {p.id: p for p in public_points()}
    return tuple(sorted({by_id[i].hardware for i in fitted_on if i in by_id}))


def borrowed_efficiencies(engine: EnginePreset, hardware: str) -> str:
    """"" when ``engine`` was fitted on points of ``hardware`` (a catalog name); otherwise what
    a pass on that part borrows: the preset's efficiencies as fitted on other parts."""
    fitted = fit_hardware(engine.fitted_on)
    if hardware in fitted:
        return ""
    if not fitted:
        return f"{engine.name} was fitted on no public point: its efficiencies are assumed"
    return (f"no {engine.name} fit on {hardware}: its efficiencies are borrowed from its fit "
            f"on {', '.join(fitted)}")


@dataclass(frozen=True)
class CostCheckRow:
    """One public point: published vs predicted with its engine's preset and with the ideal
    roofline, and whether that preset was fitted on it."""
    id: str
    figure: str
    source: str
    engine_used: str
    preset: str
    fitted: bool
    quantity: str
    published_ms: float
    predicted_ms: float
    error: float
    ideal_ms: float
    ideal_error: float


def check_rows() -> tuple[CostCheckRow, ...]:
    """One row per public point: predicted (own preset and ideal roofline) vs published."""
    rows = []
    for p in public_points():
        pred = predict_seconds(p) * 1e3
        ideal = predict_seconds(p, "ideal") * 1e3
        rows.append(CostCheckRow(id=p.id, figure=p.figure, source=p.source,
                                 engine_used=p.engine_used, preset=p.preset,
                                 fitted=p.preset in fitted_presets(p.id), quantity=p.quantity,
                                 published_ms=p.published_ms, predicted_ms=pred,
                                 error=pred / p.published_ms - 1.0, ideal_ms=ideal,
                                 ideal_error=ideal / p.published_ms - 1.0))
    return tuple(rows)


# ---------------------------------------------------------------------------- MineDraft gain

#: (drafter, k of the Fig. 25 point that measured it, its point id)
MINEDRAFT_DRAFTS = (("qwen3-0.6b", 3, "minedraft-s1-draft"),
                    ("qwen3-1.7b", 4, "minedraft-s2-draft"))
#: k -> the verification point of that k
MINEDRAFT_VERIFY = {3: "minedraft-s1-verify", 4: "minedraft-s2-verify"}
MINEDRAFT_M = 16


def minedraft_step(drafter: str, k: int, engine: str = "vllm-eager",
                   context: int | None = None) -> tuple[float, float]:
    """Predicted (drafting t, verification V) seconds of one MineDraft step (m = 16)."""
    ver = point_by_id(MINEDRAFT_VERIFY[3])
    ctx = ver.context if context is None else context
    d = gpu_cost(drafter, ver.hardware, engine, tp=1)
    t = sum(d.forward_time(MINEDRAFT_M, MINEDRAFT_M, ctx + j * MINEDRAFT_M) for j in range(k))
    v = gpu_cost(ver.model, ver.hardware, engine, tp=ver.tp)
    return t, v.forward_time(MINEDRAFT_M, MINEDRAFT_M * (k + 1), ctx)


def per_step_gain(t: float, v: float) -> float:
    """PSD/SD per-step gain: SD pays t + V per step, PSD max(t, V)."""
    return (t + v) / max(t, v)


@dataclass(frozen=True)
class MinedraftGain:
    """The per-step PSD/SD gain of one MineDraft drafter at one k: published-derived vs
    predicted (``derived``: measured at this k, or scaled from the measured k)."""
    drafter: str
    k: int
    published_draft_ms: float
    published_verify_ms: float
    published_gain: float
    predicted_draft_ms: float
    predicted_verify_ms: float
    predicted_gain: float
    error: float
    derived: str


def minedraft_gains(engine: str = "vllm-eager") -> tuple[MinedraftGain, ...]:
    """Predicted vs published-derived per-step gain at k = 3 and 4 for both drafters.

    Published-derived: drafting = the drafter's measured per-pass time x k (its Fig. 25 point
    divided by that point's k), verification = the measured verification of that k."""
    rows = []
    for drafter, k_meas, pid in MINEDRAFT_DRAFTS:
        per_pass = point_by_id(pid).published_ms / k_meas
        for k in sorted(MINEDRAFT_VERIFY):
            t_pub, v_pub = per_pass * k, point_by_id(MINEDRAFT_VERIFY[k]).published_ms
            t, v = minedraft_step(drafter, k, engine)
            g_pub, g = per_step_gain(t_pub, v_pub), per_step_gain(t, v)
            rows.append(MinedraftGain(
                drafter=drafter, k=k, published_draft_ms=t_pub, published_verify_ms=v_pub,
                published_gain=g_pub, predicted_draft_ms=t * 1e3, predicted_verify_ms=v * 1e3,
                predicted_gain=g, error=g / g_pub - 1.0,
                derived="measured" if k == k_meas else f"scaled from k = {k_meas}"))
    return tuple(rows)
