"""Cost models fitted from traces: ``fitted`` (read from a fit file) and ``tabulated``.

Specs::

    {"name": "fitted", "path": "model.json", "role": "target"}      # or "drafter"
    {"name": "tabulated", "path": "model.json", "role": "drafter"}  # the role must be a table
    {"name": "tabulated", "seqs": [1, 16], "tokens": [1, 80], "context": [0, 8192],
     "time": [[[t, t], [t, t]], [[t, t], [t, t]]]}                  # inline table

The fit file (JSON; written by validation's calibration, see ``write_fit``)::

    {
      "format": "psdlab.cost-fit", "version": 1,
      "meta": {...free-form: traces used, devices, software, date...},
      "roles": {
        "target": {
          "kind": "affine",
          "coef": {"base": s, "per_seq": s, "per_token": s, "per_context": s},
          "ci95": {"base": [lo, hi], ...},       # optional: 95% confidence intervals
          "residual_cv": 0.04,                     # optional: CV of time / fitted time
          "n": 812,                                 # optional: passes the fit used
          "phase_overhead": s                       # optional: seconds per drafting phase
        },
        "drafter": {
          "kind": "table",
          "seqs": [...], "tokens": [...], "context": [...],   # strictly increasing axes
          "time": [[[...]]],          # seconds, shape (len(seqs), len(tokens), len(context))
          "residual_cv": 0.06         # optional
        }
      }
    }

Roles are free names ("target", "drafter", or e.g. "drafter:qwen3-1.7b"); "affine" roles become
an AffineCost, "table" roles a TableCost.  TableCost interpolates multilinearly inside the grid and
extrapolates linearly from the edge cells outside it (pass times are close to affine in each
count), floored at 1e-9 s; an axis with a single value is constant along that axis.
``residual_cv`` is kept on the model as ``fit_info`` so a config can use it for jitter.
"""
from __future__ import annotations

import bisect
import json
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from psdlab.analysis.atomic_write import write_text
from psdlab.analysis.checks import check_fields, check_nonnegative

from .affine import AFFINE_TERMS, AffineCost
from .base import CostModel, register_cost_model

FIT_FORMAT = "psdlab.cost-fit"
FIT_VERSION = 1
AXES = ("seqs", "tokens", "context")
_FLOOR = 1e-9


@dataclass(frozen=True, eq=False)
class TableCost(CostModel):
    """Multilinear interpolation over a (seqs, tokens, context) grid of measured times."""
    axes: tuple[np.ndarray, np.ndarray, np.ndarray]
    time: np.ndarray
    fit_info: dict[str, Any] = field(default_factory=dict)
    kind = "tabulated"

    def __post_init__(self) -> None:
        object.__setattr__(self, "_lists", tuple(a.tolist() for a in self.axes))

    def _time_scalar(self, x: tuple[float, float, float]) -> float:
        cells = []
        for axis, v in zip(self._lists, x):                 # type: ignore[attr-defined]
            if len(axis) == 1:
                cells.append((0, 0.0))
                continue
            i = min(max(bisect.bisect_right(axis, v) - 1, 0), len(axis) - 2)
            cells.append((i, (v - axis[i]) / (axis[i + 1] - axis[i])))
        (i, wi), (j, wj), (k, wk) = cells
        out = 0.0
        for di, a in ((0, 1.0 - wi), (1, wi)):
            if a == 0.0:
                continue
            for dj, b in ((0, 1.0 - wj), (1, wj)):
                if b == 0.0:
                    continue
                for dk, g in ((0, 1.0 - wk), (1, wk)):
                    if g != 0.0:
                        out += a * b * g * float(self.time[i + di, j + dj, k + dk])
        return max(out, _FLOOR)

    def _time(self, s, t, c):
        if type(s) is float:
            return self._time_scalar((s, t, c))
        xs = [np.asarray(v, dtype=float) for v in (s, t, c)]
        shape = xs[0].shape
        xs = [x.ravel() for x in xs]
        # per axis: lower cell index and weight of the upper node (unclipped -> extrapolation)
        idx, wts = [], []
        for axis, x in zip(self.axes, xs):
            if axis.size == 1:
                idx.append(np.zeros(x.size, dtype=int))
                wts.append(np.zeros(x.size))
                continue
            i = np.clip(np.searchsorted(axis, x, side="right") - 1, 0, axis.size - 2)
            idx.append(i)
            wts.append((x - axis[i]) / (axis[i + 1] - axis[i]))
        out = np.zeros(xs[0].size)
        for corner in range(8):
            bits = [(corner >> d) & 1 for d in range(3)]
            if any(b and self.axes[d].size == 1 for d, b in enumerate(bits)):
                continue
            w = np.ones(xs[0].size)
            for d, b in enumerate(bits):
                w = w * (wts[d] if b else 1.0 - wts[d])
            out += w * self.time[idx[0] + bits[0], idx[1] + bits[1], idx[2] + bits[2]]
        return np.maximum(out, _FLOOR).reshape(shape)

    def describe(self) -> dict[str, Any]:
        return {"name": self.kind, **{a: v.tolist() for a, v in zip(AXES, self.axes)},
                "time": self.time.tolist()}


@dataclass(frozen=True)
class FittedAffineCost(AffineCost):
    fit_info: dict[str, Any] = field(default_factory=dict, compare=False)
    phase_overhead: float = 0.0
    kind = "fitted"


def _axis(values: Any, where: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float) if isinstance(values, (list, tuple)) else None
    if arr is None or arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{where}: expected a non-empty list of numbers, got {values!r}")
    if not np.isfinite(arr).all() or (arr < 0).any():
        raise ValueError(f"{where}: values must be finite and >= 0")
    if (np.diff(arr) <= 0).any():
        raise ValueError(f"{where}: values must be strictly increasing")
    return arr


def table_from_dict(raw: Mapping[str, Any], where: str, info: dict | None = None) -> TableCost:
    axes = tuple(_axis(raw.get(a), f"{where}.{a}") for a in AXES)
    try:
        time = np.asarray(raw.get("time"), dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{where}.time: expected a nested list of seconds") from None
    want = tuple(a.size for a in axes)
    if time.shape != want:
        raise ValueError(f"{where}.time: shape {time.shape} does not match the axes "
                         f"(seqs, tokens, context) = {want}")
    if not np.isfinite(time).all() or (time <= 0).any():
        raise ValueError(f"{where}.time: every entry must be a finite number > 0")
    return TableCost(axes=axes, time=time, fit_info=dict(info or {}))  # type: ignore[arg-type]


@dataclass(frozen=True)
class FitFile:
    """A fit file read and checked once (``read_fit_file``): its path and parsed document.  A
    cost spec's ``path`` may hold one instead of a path, so a caller that builds many cost
    models from one file (a validation's replays) parses it once."""
    path: str
    doc: dict[str, Any]


def read_fit_file(source: str | os.PathLike | FitFile, where: str = "cost.path") -> FitFile:
    """``source`` as a `FitFile` (read, and its envelope checked, now unless it already is
    one): the one reader of a fit file (a calibrated model file is one), with `write_fit` its
    writer; errors are one line naming ``where``, the file and the field."""
    if isinstance(source, FitFile):
        return source
    path = os.fspath(source)
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: {path}:{exc.lineno}: not valid JSON "
                         f"({exc.msg})") from None
    if not isinstance(doc, dict) or doc.get("format") != FIT_FORMAT:
        raise ValueError(f"{where}: {path}: field 'format' must be {FIT_FORMAT!r}")
    if doc.get("version") != FIT_VERSION:
        raise ValueError(f"{where}: {path}: field 'version': {doc.get('version')!r} "
                         f"is not supported (reads {FIT_VERSION})")
    if not isinstance(doc.get("roles"), dict) or not doc["roles"]:
        raise ValueError(f"{where}: {path}: field 'roles' must be a non-empty object")
    return FitFile(path, doc)


def cost_from_role(role_doc: Any, where: str) -> CostModel:
    if not isinstance(role_doc, dict):
        raise ValueError(f"{where}: expected an object, got {role_doc!r}")
    info = {k: v for k, v in role_doc.items() if k in ("ci95", "residual_cv", "n")}
    kind = role_doc.get("kind")
    if kind == "affine":
        coef = role_doc.get("coef")
        if not isinstance(coef, dict):
            raise ValueError(f"{where}.coef: expected an object with {', '.join(AFFINE_TERMS)}")
        for key in coef:
            if key not in AFFINE_TERMS:
                raise ValueError(f"{where}.coef.{key}: unknown; allowed: {', '.join(AFFINE_TERMS)}")
        phase = check_nonnegative(f"{where}.phase_overhead",
                                  role_doc.get("phase_overhead", 0.0))
        values = {k: check_nonnegative(f"{where}.coef.{k}", coef.get(k, 0.0))
                  for k in AFFINE_TERMS}
        # a fit may put a role's whole time on the per-phase overhead (a drafting phase of
        # tiny, noisy passes): valid as long as something costs time
        if not any(values.values()) and phase <= 0:
            raise ValueError(f"{where}.coef: at least one of {', '.join(AFFINE_TERMS)} or "
                             f"{where}.phase_overhead must be > 0")
        return FittedAffineCost(base=values["base"], per_seq=values["per_seq"],
                                per_token=values["per_token"],
                                per_context=values["per_context"], fit_info=info,
                                phase_overhead=float(phase))
    if kind == "table":
        return table_from_dict(role_doc, where, info)
    raise ValueError(f"{where}.kind: must be 'affine' or 'table', got {kind!r}")


def _role_from_file(spec: Mapping[str, Any], where: str) -> CostModel:
    doc = read_fit_file(spec["path"], f"{where}.path").doc
    role = spec.get("role", "target")
    if role not in doc["roles"]:
        raise ValueError(f"{where}.role: {role!r} not in {os.fspath(spec['path'])}; has: "
                         f"{', '.join(sorted(doc['roles']))}")
    return cost_from_role(doc["roles"][role], f"{where}[{os.fspath(spec['path'])}:{role}]")


@register_cost_model("fitted")
def _make_fitted(spec: Mapping[str, Any], where: str) -> CostModel:
    check_fields(spec, where, required=("path",), optional=("role",))
    return _role_from_file(spec, where)


@register_cost_model("tabulated")
def _make_tabulated(spec: Mapping[str, Any], where: str) -> CostModel:
    if "path" in spec:
        check_fields(spec, where, required=("path",), optional=("role",))
        cost = _role_from_file(spec, where)
        if not isinstance(cost, TableCost):
            raise ValueError(f"{where}.role: {spec.get('role', 'target')!r} is not a table "
                             f"(use name = 'fitted' for affine fits)")
        return cost
    check_fields(spec, where, required=AXES + ("time",))
    return table_from_dict(spec, where)


def write_fit(path: str | os.PathLike, roles: Mapping[str, Mapping[str, Any]],
              meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Write a fit file after checking every role builds (for validation's calibration),
    whole or not at all (``analysis.atomic_write``); returns the document as a reader of the
    file gets it (JSON's types: lists, not tuples), so the caller need not read it back."""
    for name, role in roles.items():
        cost_from_role(dict(role), f"roles.{name}")
        if role.get("residual_cv") is not None:
            check_nonnegative(f"roles.{name}.residual_cv", role["residual_cv"])
    doc = {"format": FIT_FORMAT, "version": FIT_VERSION, "meta": dict(meta or {}),
           "roles": {k: dict(v) for k, v in roles.items()}}
    text = json.dumps(doc, indent=1, allow_nan=False)
    write_text(os.fspath(path), text + "\n", make_folders=False)
    return json.loads(text)
