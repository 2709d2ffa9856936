"""Seeded multiplicative step-time jitter: time * X with E[X] = 1 and CV(X) = cv.

Specs: ``None`` (no jitter), ``{"dist": "normal", "cv": 0.1}`` or ``{"dist": "gamma", "cv": 0.1}``.

- normal: X = max(1 + cv Z, floor) with Z standard normal and floor = 0.01 (a pass never takes
  no time).  The truncation raises the mean by less than 1e-4 for cv <= 0.3; it grows with cv
  (about +0.8% at cv = 0.5), so cv is limited to [0, 0.5] -- use gamma for larger spreads.
- gamma: X ~ Gamma(shape = 1/cv^2, scale = cv^2): exactly mean 1, CV cv, always > 0, right-skewed
  like measured step times; cv in [0, 3].

The paper notes E[max(t, V)] > max(E t, E V) when t and V vary; jitter is how the simulator shows
it.  ``apply`` draws one factor per element from the generator it is given (so the same seed
gives the same times); cv = 0 and no jitter draw nothing and return the times unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from psdlab.analysis.checks import check_choice, check_fields, check_range

NORMAL_FLOOR = 0.01
MAX_CV = {"normal": 0.5, "gamma": 3.0}


@dataclass(frozen=True)
class Jitter:
    """Multiplicative noise with mean 1; ``dist`` None means none."""
    dist: str | None = None
    cv: float = 0.0

    @property
    def active(self) -> bool:
        return self.dist is not None and self.cv > 0

    def factors(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """n multiplicative factors (ones when inactive, drawing nothing)."""
        if not self.active:
            return np.ones(n)
        if self.dist == "normal":
            return np.maximum(1.0 + self.cv * rng.standard_normal(n), NORMAL_FLOOR)
        k = 1.0 / (self.cv * self.cv)
        return rng.gamma(k, 1.0 / k, n)

    def apply(self, rng: np.random.Generator, times):
        """times * factors, same shape; a float for a scalar input."""
        if not self.active:
            return times
        arr = np.asarray(times, dtype=float)
        out = arr * self.factors(rng, arr.size).reshape(arr.shape)
        return float(out) if out.ndim == 0 else out

    def describe(self) -> dict[str, Any] | None:
        return None if self.dist is None else {"dist": self.dist, "cv": self.cv}


NO_JITTER = Jitter()


def make_jitter(spec: Mapping[str, Any] | None, where: str = "jitter") -> Jitter:
    """Build a Jitter from ``None`` or ``{"dist": "normal"|"gamma", "cv": c}``."""
    if spec is None:
        return NO_JITTER
    if not isinstance(spec, Mapping):
        raise ValueError(f"{where}: expected a table with 'dist' and 'cv', got {spec!r}")
    check_fields(spec, where, optional=("dist", "cv"), named=False)
    if "dist" not in spec:
        raise ValueError(f"{where}.dist: missing (normal or gamma)")
    dist = check_choice(f"{where}.dist", spec["dist"], tuple(MAX_CV))
    if "cv" not in spec:
        raise ValueError(f"{where}.cv: missing")
    cv = check_range(f"{where}.cv", spec["cv"], 0.0, MAX_CV[dist])
    return Jitter(dist=dist, cv=cv)
