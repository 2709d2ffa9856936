"""Refit an engine preset's free parameters to the public points it names in ``fitted_on``
(least squares on the log of predicted / published), so that engines.toml's numbers can be
reproduced: ``fit_preset("vllm-eager", ("layer_host_s", "collective_latency_pcie_s",
"memory_eff"))``.  Used by hand when a point is added, and by a test that checks the shipped
numbers are (close to) the optimum of their own fit."""
from __future__ import annotations

from dataclasses import fields
from typing import Sequence

import numpy as np

from .gpu import EnginePreset, engine_presets, with_engine
from .public_check import point_by_id, predict_seconds

#: search bounds of each fittable parameter
BOUNDS = {"memory_eff": (0.3, 0.9), "compute_eff": (0.2, 1.0), "network_eff": (0.1, 1.0),
          "layer_host_s": (0.0, 5e-3), "step_host_s": (0.0, 20e-3),
          "collective_latency_pcie_s": (0.0, 1e-3), "collective_latency_nvlink_s": (0.0, 1e-3),
          "compute_half_tokens": (0.0, 500.0)}

#: the free parameters each shipped preset was fitted with (the rest are fixed, see
#: engines.toml's header)
FREE = {"vllm-cudagraph": ("memory_eff", "compute_half_tokens"),
        "vllm-eager": ("layer_host_s", "collective_latency_pcie_s"),
        "torch-compile": ("memory_eff",),
        "torch-eager": ("layer_host_s",)}


def log_errors(preset: EnginePreset, ids: Sequence[str]) -> np.ndarray:
    """log(predicted / published) of each point under `preset`."""
    out = []
    for pid in ids:
        p = point_by_id(pid)
        raw = {f.name: getattr(preset, f.name) for f in fields(EnginePreset)
               if f.name not in ("name", "sources", "fitted_on", "description")}
        out.append(np.log(predict_seconds(p, raw) * 1e3 / p.published_ms))
    return np.asarray(out)


def fit_preset(name: str, free: Sequence[str] | None = None) -> dict[str, float]:
    """Best values of `free` (default FREE[name]) on the preset's fitted_on points."""
    from scipy.optimize import least_squares

    base = engine_presets()[name]
    free = tuple(free or FREE[name])
    for key in free:
        if key not in BOUNDS:
            raise ValueError(f"free: {key!r} is not fittable; allowed: {', '.join(BOUNDS)}")
    lo = np.array([BOUNDS[k][0] for k in free])
    hi = np.array([BOUNDS[k][1] for k in free])
    scale = hi - lo
    x0 = np.clip([getattr(base, k) for k in free], lo, hi)

    def resid(z: np.ndarray) -> np.ndarray:
        values = lo + z * scale
        return log_errors(with_engine(base, **dict(zip(free, values))), base.fitted_on)

    res = least_squares(resid, (x0 - lo) / scale, bounds=(0.0, 1.0))
    return {k: float(v) for k, v in zip(free, lo + res.x * scale)}
