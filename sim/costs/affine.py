"""Constant and affine cost models.

- ``{"name": "constant", "time": 0.02}``: every pass takes the same time (the closed form's V
  and t; used to check the simulator against analysis/).
- ``{"name": "affine", "base": s, "per_seq": s, "per_token": s, "per_context": s}``:
  time = base + per_seq * seqs + per_token * new_tokens + per_context * context_tokens.
  Omitted coefficients are 0; all must be >= 0 and at least one > 0.  Optional
  ``"prefill_chunking": [chunk, leave]``: the engine feeds each prompt in passes of at most
  ``chunk`` tokens (``analysis.chunking``), and a prefill pays ``per_seq`` per pass.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from psdlab.analysis.checks import check_fields, check_nonnegative, check_positive
from psdlab.analysis.chunking import Chunking, chunking_from

from .base import CostModel, register_cost_model

AFFINE_TERMS = ("base", "per_seq", "per_token", "per_context")


@dataclass(frozen=True)
class ConstantCost(CostModel):
    time: float
    kind = "constant"

    def _time(self, s, t, c):
        return self.time + 0.0 * s

    def describe(self) -> dict[str, Any]:
        return {"name": self.kind, "time": self.time}


@dataclass(frozen=True)
class AffineCost(CostModel):
    base: float = 0.0
    per_seq: float = 0.0
    per_token: float = 0.0
    per_context: float = 0.0
    chunking: Chunking | None = None
    kind = "affine"

    def _time(self, s, t, c):
        return self.base + self.per_seq * s + self.per_token * t + self.per_context * c

    def describe(self) -> dict[str, Any]:
        out = {"name": self.kind, **{k: getattr(self, k) for k in AFFINE_TERMS}}
        if self.chunking is not None:
            out["prefill_chunking"] = self.chunking.to_list()
        return out


@register_cost_model("constant")
def _make_constant(spec: Mapping[str, Any], where: str) -> ConstantCost:
    check_fields(spec, where, required=("time",))
    return ConstantCost(time=check_positive(f"{where}.time", spec["time"]))


def affine_from_coefficients(coef: Mapping[str, Any], where: str) -> AffineCost:
    """Validate {base, per_seq, per_token, per_context} (missing = 0) into an AffineCost."""
    values = {k: check_nonnegative(f"{where}.{k}", coef.get(k, 0.0)) for k in AFFINE_TERMS}
    if not any(values.values()):
        raise ValueError(f"{where}: at least one of {', '.join(AFFINE_TERMS)} must be > 0")
    return AffineCost(base=values["base"], per_seq=values["per_seq"],
                      per_token=values["per_token"], per_context=values["per_context"])


@register_cost_model("affine")
def _make_affine(spec: Mapping[str, Any], where: str) -> AffineCost:
    check_fields(spec, where, optional=AFFINE_TERMS + ("prefill_chunking",))
    cost = affine_from_coefficients({k: v for k, v in spec.items() if k in AFFINE_TERMS}, where)
    chunking = chunking_from(spec.get("prefill_chunking"), f"{where}.prefill_chunking")
    return replace(cost, chunking=chunking)
