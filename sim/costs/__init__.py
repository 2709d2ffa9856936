"""Pluggable cost models for the simulator, chosen by name (``make_cost_model(spec)``).

A CostModel describes one model on one device (or tensor-parallel group):
``forward_time(seqs, new_tokens, context_tokens)`` = seconds for one forward pass over
``new_tokens`` new tokens of ``seqs`` sequences whose KV caches hold ``context_tokens`` tokens,
numpy-vectorised.  Registered names: constant, affine (affine.py), roofline (roofline.py, with
the hardware/model catalogs of catalog.py), fitted and tabulated (fitted.py), calibrated
(calibrated.py: a ``psdlab calibrate`` model file).  ``make_jitter`` (jitter.py) adds seeded
multiplicative step-time noise.  Add a model with ``@register_cost_model("name")`` on a factory
``f(spec, where) -> CostModel``.
"""
from __future__ import annotations

from . import affine as _affine  # noqa: F401  (registers constant, affine)
from . import calibrated as _calibrated  # noqa: F401  (registers calibrated)
from . import fitted as _fitted  # noqa: F401  (registers fitted, tabulated)
from . import roofline as _roofline  # noqa: F401  (registers roofline)
from . import gpu as _gpu  # noqa: F401  (registers gpu: roofline + engine presets)
from .gpu import EnginePreset, GpuCost, engine_presets, get_engine, gpu_cost  # noqa: F401
from .affine import AffineCost, ConstantCost
from .base import COST_MODELS, CostModel, make_cost_model, register_cost_model
from .catalog import (HardwareSpec, ModelShape, get_hardware, get_model, hardware_catalog,
                      model_catalog)
from .fitted import FitFile, TableCost, read_fit_file, write_fit
from .step_jitter import NO_JITTER, Jitter, make_jitter
from .roofline import RooflineCost

__all__ = [
    "COST_MODELS", "CostModel", "make_cost_model", "register_cost_model", "ConstantCost",
    "AffineCost", "RooflineCost", "TableCost", "FitFile", "read_fit_file", "write_fit", "Jitter",
    "NO_JITTER", "make_jitter", "HardwareSpec", "ModelShape", "get_hardware", "get_model",
    "hardware_catalog", "model_catalog",
]
