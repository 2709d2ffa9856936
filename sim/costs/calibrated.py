"""The calibrated cost model the validation replays use: ``{"name": "calibrated", ...}``.

The simulator asks every model one question, the time of a forward pass over ``new_tokens``
tokens of ``seqs`` sequences with ``context`` tokens already cached (``sim.costs``).  A model
file from ``psdlab calibrate`` holds two fits per model: the decode-time fit (``target`` /
``drafter``: verification and one-token drafting forwards) and the prefill fit
(``target:prefill`` / ``drafter:prefill``).  Their shapes differ a lot on a CPU -- a prefill of
hundreds of prompt tokens is compute-bound, a verification of k + 1 tokens per sequence is
bound by reading the weights -- so one affine model extrapolated from tens of tokens to
hundreds misses the prefill by a factor.  This model uses the prefill fit for passes with no
cached context (``context == 0``: in the simulator only prefills -- fresh or recomputed after a
preemption -- start from an empty cache) and the decode fit for the rest, plus ``overhead``
seconds per decode pass and ``prefill_overhead`` per prefill pass (the controller's time around
a step that no phase records).  Decode passes are multiplied by ``scale``, prefills by
``prefill_scale`` (the overlap slowdown and mean corrections of ``validation.replay_model``).
On a CPU the time of a small pass is a step function of its shape (kernel blocking, the
padding of ``runtime.runner``), which an affine fit through all shapes
smooths over, so a decode pass whose (sequences, tokens) shape the calibration measured often
enough takes the measured mean from the model file's ``meta.tables`` (``table``), moved by
the fit's context slope from the shape's mean calibration context to the pass's; a token
count between two measured ones at the same sequence count, the straight line between them;
a token count past the largest measured at its sequence count, or a pass larger than any
measured, the (largest) measured shape's time plus the fit's increment from there (the fit has
the right slope beyond the steps, not the right level); any other shape, the fit.  The file's
``meta.prefill_chunking`` (the engine feeds each prompt in passes of at most ``chunk`` tokens)
becomes the model's ``chunking``: a prefill pays the prefill fit's per-sequence cost per pass.

Spec::

    {"name": "calibrated", "path": "MODEL.json", "role": "target" | "drafter",
     "overhead": 0.0, "scale": 1.0, "prefill_scale": 1.0, "prefill_overhead": 0.0}

``sim.costs`` registers the name when it is imported, so any simulator config (``psdlab
simulate CONFIG.toml`` included) can name a model file from ``psdlab calibrate``.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping

import numpy as np

from psdlab.analysis.checks import check_fields, check_nonnegative, check_range
from psdlab.analysis.chunking import Chunking, chunkings_from
from psdlab.sim.costs.base import CostModel, register_cost_model
from psdlab.sim.costs.fitted import FitFile, cost_from_role, read_fit_file

NAME = "calibrated"


@dataclass(frozen=True, eq=False)
class CalibratedCost(CostModel):
    """Decode fit for passes with context, prefill fit for passes without (module docstring)."""
    decode: CostModel
    prefill: CostModel
    overhead: float = 0.0
    scale: float = 1.0
    prefill_scale: float = 1.0
    prefill_overhead: float = 0.0
    #: measured decode passes by shape: (seqs, tokens, seconds, their mean context or nan)
    table: tuple[tuple[int, int, float, float], ...] = ()
    chunking: Chunking | None = None                 # the engine's prefill rule (meta)
    kind = NAME

    @property
    def phase_overhead(self) -> float:                # type: ignore[override]
        """The decode fit's fixed cost per drafting phase, scaled like its passes."""
        return self.scale * float(getattr(self.decode, "phase_overhead", 0.0))

    @cached_property
    def _look(self) -> dict[tuple[int, int], tuple[float, float]]:
        return {(sq, tk): (v, cx) for sq, tk, v, cx in self.table}

    @cached_property
    def _rows(self) -> dict[int, tuple[tuple[int, float, float], ...]]:
        """The table's (tokens, time, context) points per sequence count, by tokens."""
        rows: dict[int, list[tuple[int, float, float]]] = {}
        for sq, tk, v, cx in self.table:
            rows.setdefault(sq, []).append((tk, v, cx))
        return {sq: tuple(sorted(pts)) for sq, pts in rows.items()}

    @cached_property
    def _edge(self) -> tuple[float, float, float, float]:
        """(sequences, tokens, time, context) of the table's largest shape (fewest sequences
        on ties)."""
        edge_t = max(row[1] for row in self.table)
        edge_s, edge_v, edge_c = min((sq, v, cx) for sq, tk, v, cx in self.table
                                     if tk == edge_t)
        return float(edge_s), float(edge_t), edge_v, edge_c

    def _at(self, v: float, cx: float, s: float, t: float, c: float) -> float:
        """A measured time ``v`` of shape (s, t) at mean context ``cx``, moved to context
        ``c`` by the fit's context increment (unmoved when the table has no context)."""
        if cx != cx or c == cx:                          # nan: an older model file
            return v
        return v + float(self.decode.forward_time(s, t, c) - self.decode.forward_time(s, t, cx))

    def _decode(self, s, t, c):
        fit = self.decode.forward_time(s, t, c)
        if not self.table:
            return fit
        if type(s) is float and type(t) is float:
            return self._shape_time(int(s), int(t), s, t, c, fit)
        sa, ta, ca, fa = np.broadcast_arrays(np.asarray(s), np.asarray(t), np.asarray(c),
                                             np.asarray(fit))
        out = np.array([self._shape_time(int(a), int(b), float(a), float(b), float(x), float(f))
                        for a, b, x, f in zip(sa.ravel(), ta.ravel(), ca.ravel(), fa.ravel())])
        return out.reshape(sa.shape)

    def _shape_time(self, si: int, ti: int, s: float, t: float, c: float, fit: float) -> float:
        """A measured shape takes its time; a token count between two measured ones at the
        same sequence count, the straight line between them (the time of a pass is a step
        function of its shape, which an affine fit through all shapes smooths over); one past
        the largest measured at its sequence count, that shape's time plus the fit's
        increment; anything else ``_beyond``."""
        hit = self._look.get((si, ti))
        if hit is not None:
            return self._at(hit[0], hit[1], s, t, c)
        pts = self._rows.get(si, ())
        lo = next((p for p in reversed(pts) if p[0] < t), None)
        hi = next((p for p in pts if p[0] > t), None)
        if lo is not None and hi is not None:
            v_lo = self._at(lo[1], lo[2], s, float(lo[0]), c)
            v_hi = self._at(hi[1], hi[2], s, float(hi[0]), c)
            return v_lo + (v_hi - v_lo) * (t - lo[0]) / (hi[0] - lo[0])
        if lo is not None:
            # past this sequence count's largest measured shape: its time plus the fit's
            # increment from there
            return (self._at(lo[1], lo[2], s, float(lo[0]), c) + fit
                    - float(self.decode.forward_time(s, float(lo[0]), c)))
        return float(self._beyond(s, t, c, fit))

    def _beyond(self, s, t, c, fit):
        """A shape the table lacks: past the table's largest token count, the time of its
        largest shape plus the fit's increment from that shape; otherwise the fit."""
        edge_s, edge_t, edge_v, edge_c = self._edge
        edge_v = self._at(edge_v, edge_c, edge_s, edge_t, float(c))
        step = fit - self.decode.forward_time(edge_s, edge_t, c)
        return np.where(np.asarray(t, dtype=float) > edge_t, edge_v + step, fit)

    def _time(self, s, t, c):
        dec = self.scale * self._decode(s, t, c) + self.overhead
        pre = self.prefill_scale * self.prefill.forward_time(s, t, c) + self.prefill_overhead
        if type(c) is float:
            return pre if c == 0.0 else dec
        return np.where(np.asarray(c) == 0.0, pre, dec)

    def describe(self) -> dict[str, Any]:
        return {"name": self.kind, "decode": self.decode.describe(),
                "prefill": self.prefill.describe(), "overhead": self.overhead,
                "scale": self.scale, "prefill_scale": self.prefill_scale,
                "prefill_overhead": self.prefill_overhead,
                **({"prefill_chunking": self.chunking.to_list()} if self.chunking else {})}


def calibrated_cost(source: str | FitFile, role: str, overhead: float = 0.0, scale: float = 1.0,
                    prefill_scale: float = 1.0, where: str = "cost",
                    table: bool = True, prefill_overhead: float = 0.0) -> CalibratedCost:
    """The cost model of ``role`` in a calibrated model file (a path, or the `FitFile` read
    once by the caller)."""
    fit = read_fit_file(source, f"{where}.path")
    doc, path = fit.doc, fit.path
    roles = doc["roles"]
    if role not in roles:
        raise ValueError(f"{where}.role: {role!r} not in {path}; has: {', '.join(sorted(roles))}")
    decode = cost_from_role(roles[role], f"{where}[{path}:{role}]")
    pre_name = f"{role}:prefill"
    prefill = (cost_from_role(roles[pre_name], f"{where}[{path}:{pre_name}]")
               if pre_name in roles else decode)
    rows = ((doc.get("meta") or {}).get("tables") or {}).get(role) or [] if table else []
    shapes = tuple((int(r[0]), int(r[1]), float(r[2]),
                    float(r[4]) if len(r) >= 5 and r[4] is not None else float("nan"))
                   for r in rows if isinstance(r, list) and len(r) >= 3 and float(r[2]) > 0)
    rules = chunkings_from((doc.get("meta") or {}).get("prefill_chunking"),
                           f"{where}[{path}].meta.prefill_chunking")
    return CalibratedCost(decode=decode, prefill=prefill, table=shapes, chunking=rules.get(role),
                          overhead=check_nonnegative(f"{where}.overhead", overhead),
                          prefill_overhead=check_nonnegative(f"{where}.prefill_overhead",
                                                             prefill_overhead),
                          scale=check_range(f"{where}.scale", scale, 0.0, 100.0, lo_open=True),
                          prefill_scale=check_range(f"{where}.prefill_scale", prefill_scale,
                                                    0.0, 100.0, lo_open=True))


def _make(spec: Mapping[str, Any], where: str) -> CostModel:
    check_fields(spec, where, required=("path", "role"),
                 optional=("overhead", "scale", "prefill_scale", "table", "prefill_overhead"))
    source = spec["path"] if isinstance(spec["path"], FitFile) else str(spec["path"])
    return calibrated_cost(source, str(spec["role"]), spec.get("overhead", 0.0),
                           spec.get("scale", 1.0), spec.get("prefill_scale", 1.0), where,
                           bool(spec.get("table", True)), spec.get("prefill_overhead", 0.0))


def calibrated_cost_spec(path: str | FitFile, role: str, overhead: float = 0.0, scale: float = 1.0,
              prefill_scale: float = 1.0, prefill_overhead: float = 0.0) -> dict[str, Any]:
    """The ``sim.costs.make_cost_model`` spec of this model (``path``: a path or a `FitFile`)."""
    return {"name": NAME, "path": path if isinstance(path, FitFile) else str(path), "role": role,
            "overhead": float(overhead), "scale": float(scale),
            "prefill_scale": float(prefill_scale), "prefill_overhead": float(prefill_overhead)}


register_cost_model(NAME)(_make)
