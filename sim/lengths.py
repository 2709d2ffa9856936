"""Length distributions for prompts and outputs (token counts >= 1), chosen by name.

Specs (``make_length(spec)``):

- ``{"name": "fixed", "value": 256}``
- ``{"name": "lognormal", "mean": 300, "median": 200, "max": 2048, "min": 1}``:
  mu = ln(median), sigma = sqrt(2 ln(mean / median)) (from mean = exp(mu + sigma^2 / 2)), so
  mean >= median is required (equal: a point mass).  Samples are rounded to integers and
  clipped to [min, max] (default min 1, no max); clipping puts the tail mass at max, which
  lowers the mean below the requested one by E[(X - max)+] -- ``mean_clipped`` reports it.
- ``{"name": "uniform", "low": 1, "high": 512}``: integers in [low, high].
- ``{"name": "empirical", "values": [...]}``: resampled uniformly with replacement.

``sharegpt_like_lengths()`` is the ShareGPT-like preset (see its docstring for the parameters).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
from scipy import stats

from psdlab.analysis.checks import check_fields, check_int, check_positive

MAX_LEN = 10_000_000


class LengthDist:
    """Base class: ``sample(rng, n)`` -> int64 array of n lengths >= 1."""
    kind = ""

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"name": self.kind}


@dataclass(frozen=True)
class FixedLength(LengthDist):
    value: int
    kind = "fixed"

    def sample(self, rng, n):
        return np.full(n, self.value, dtype=np.int64)

    def describe(self):
        return {"name": self.kind, "value": self.value}


@dataclass(frozen=True)
class LognormalLength(LengthDist):
    mean: float
    median: float
    max: int = MAX_LEN
    min: int = 1
    kind = "lognormal"

    @property
    def mu(self) -> float:
        return math.log(self.median)

    @property
    def sigma(self) -> float:
        return math.sqrt(2.0 * math.log(self.mean / self.median))

    def sample(self, rng, n):
        x = rng.lognormal(self.mu, self.sigma, n) if self.sigma > 0 else np.full(n, self.median)
        return np.clip(np.rint(x), self.min, self.max).astype(np.int64)

    @property
    def mean_clipped(self) -> float:
        """Mean of the clipped (not rounded) distribution: mean - E[(X - max)+] + E[(min - X)+]."""
        if self.sigma == 0:
            return float(min(max(self.median, self.min), self.max))
        s, mu = self.sigma, self.mu

        def upper_excess(c: float) -> float:       # E[(X - c)+]
            d = (math.log(c) - mu) / s
            return self.mean * stats.norm.sf(d - s) - c * stats.norm.sf(d)

        lower_short = self.min - self.mean + upper_excess(self.min)   # E[(min - X)+]
        return self.mean - upper_excess(self.max) + lower_short

    def describe(self):
        return {"name": self.kind, "mean": self.mean, "median": self.median, "max": self.max,
                "min": self.min, "mu": self.mu, "sigma": self.sigma}


@dataclass(frozen=True)
class UniformLength(LengthDist):
    low: int
    high: int
    kind = "uniform"

    def sample(self, rng, n):
        return rng.integers(self.low, self.high + 1, n, dtype=np.int64)

    def describe(self):
        return {"name": self.kind, "low": self.low, "high": self.high}


@dataclass(frozen=True, eq=False)
class EmpiricalLength(LengthDist):
    values: np.ndarray
    kind = "empirical"

    def sample(self, rng, n):
        return self.values[rng.integers(0, self.values.size, n)]

    def describe(self):
        return {"name": self.kind, "n": int(self.values.size),
                "mean": float(self.values.mean())}


def make_length(spec: Mapping[str, Any], where: str = "length") -> LengthDist:
    """Build a length distribution from its spec (see the module docstring)."""
    if not isinstance(spec, Mapping):
        raise ValueError(f"{where}: expected a table with a 'name', got {spec!r}")
    name = spec.get("name")
    if name == "fixed":
        check_fields(spec, where, ("value",))
        return FixedLength(check_int(f"{where}.value", spec["value"], 1, MAX_LEN))
    if name == "lognormal":
        check_fields(spec, where, ("mean", "median"), ("max", "min"))
        median = check_positive(f"{where}.median", spec["median"])
        mean = check_positive(f"{where}.mean", spec["mean"])
        if mean < median:
            raise ValueError(f"{where}.mean: must be >= median ({median:g}) for a lognormal, "
                             f"got {mean:g}")
        lo = check_int(f"{where}.min", spec.get("min", 1), 1, MAX_LEN)
        hi = check_int(f"{where}.max", spec.get("max", MAX_LEN), lo, MAX_LEN)
        return LognormalLength(mean=mean, median=median, max=hi, min=lo)
    if name == "uniform":
        check_fields(spec, where, ("low", "high"))
        low = check_int(f"{where}.low", spec["low"], 1, MAX_LEN)
        return UniformLength(low, check_int(f"{where}.high", spec["high"], low, MAX_LEN))
    if name == "empirical":
        check_fields(spec, where, ("values",))
        raw = spec["values"]
        if not isinstance(raw, (list, tuple, np.ndarray)) or len(raw) == 0:
            raise ValueError(f"{where}.values: expected a non-empty list of integers >= 1")
        values = np.asarray([check_int(f"{where}.values[{i}]", v, 1, MAX_LEN)
                             for i, v in enumerate(raw)], dtype=np.int64)
        return EmpiricalLength(values)
    raise ValueError(f"{where}.name: unknown length distribution {name!r}; known: "
                     f"fixed, lognormal, uniform, empirical")


def sharegpt_like_lengths(max_len: int = 2048) -> tuple[dict[str, Any], dict[str, Any]]:
    """(prompt spec, output spec) of psdlab's ShareGPT-like preset.

    Prompt: lognormal mean 300, median 200; output: lognormal mean 250, median 180; both clipped
    to [1, max_len / 2] (default 1024 each, so prompt + output <= 2048, the paper's max model
    length).  These are *assumed* round numbers giving a chat-like long right tail (sigma 0.90
    and 0.81); they are not fitted to the ShareGPT data, whose token statistics depend on the
    tokenizer and the cleaning.  For a real workload, replay its lengths (``empirical`` or
    the ``replay`` workload)."""
    half = check_int("max_len", max_len, 2, MAX_LEN) // 2
    return ({"name": "lognormal", "mean": 300, "median": 200, "max": half},
            {"name": "lognormal", "mean": 250, "median": 180, "max": half})
