"""What a replay needs beyond the per-phase fits: mean corrections, overlap slowdown and
controller overhead.

Four effects in measured traces that the per-phase cost fits alone do not carry:

- **Mean correction**: the fits minimise the *relative* squared error (``validation.fit``),
  which is right for the shape across phase sizes but biased low for the mean when phase times
  are noisy (a machine shared with other jobs gives long right tails): the minimiser of
  sum((c - y)/y)^2 is sum(1/y) / sum(1/y^2) < mean(y).  Throughput and latency depend on the
  total time, so each fit is rescaled by (total measured) / (total predicted) over the serial
  calibration phases it was fitted on (and prefills alike).
- **Overlap slowdown**: when the drafter and the target run at the same time each runs slower
  than alone if they share anything -- on a CPU, two cores share the memory bandwidth and the
  last-level cache, and both compete with the controller process (and anything else on the
  machine).  So the cost models are fitted on *serial* phases only (steps that did not
  overlap) and the overlapped phases get their own scale, (total measured) / (total
  predicted) over the overlapped phases of the calibration traces, per role; a PSD replay uses
  it.  ``slowdown`` = overlapped scale / serial scale says how much slower overlapping made
  each model.
- **Controller overhead**: a step lasts longer than its critical path (draft + verify one after
  the other, or the longer of the two when overlapped) by the controller's own work: collecting
  drafts, submitting the verification, bookkeeping.  Measured per decode step, separately for
  serial steps (AR, SD) and overlapped ones (PSD), and added to the target's decode pass.

- **Spread**: PSD's step is the longer of two phases, and E[max(t, V)] > max(E t, E V) when
  they vary (``analysis.theory.jitter``); the step-to-step CV of measured / fitted decode
  phase times (relative to a rolling median, so slow drift is not counted) is kept as
  ``jitter_cv`` and the replay draws gamma step-time jitter with it (mean 1, so the mean
  times stay as calibrated).

``replay_params(traces, model_path)`` measures all of them on calibration traces; the result
is stored in the model file's ``meta.replay`` (``store_replay_params``) and read back by
``load_replay_params`` (defaults: no correction, no overhead).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, replace
from typing import Any, Mapping, Sequence

import numpy as np

from analysis.trace import Trace

@dataclass(frozen=True)
class ReplayParams:
    overhead_serial: float = 0.0        # s per serial decode step (AR, SD)
    overhead_overlapped: float = 0.0    # s per overlapped decode step (PSD)
    serial_target: float = 1.0          # measured / fitted, serial target decode phases
    serial_drafter: float = 1.0         # the same for the drafter's draft phases
    overlap_target: float = 1.0         # measured / fitted, overlapped target phases
    overlap_drafter: float = 1.0        # measured / fitted, overlapped draft phases
    prefill_target: float = 1.0         # measured / fitted, target prefills
    prefill_drafter: float = 1.0        # measured / fitted, drafter prefills
    jitter_cv: float = 0.0              # CV of measured / fitted decode phase times

    def overhead(self, mode: str) -> float:
        return self.overhead_overlapped if mode == "psd" else self.overhead_serial

    def scales(self, mode: str) -> tuple[float, float]:
        """(target, drafter) decode-cost multipliers for a replay of this mode."""
        if mode == "psd":
            return self.overlap_target, self.overlap_drafter
        return self.serial_target, self.serial_drafter

    @property
    def slowdown(self) -> tuple[float, float]:
        """How much slower (target, drafter) ran when overlapped than alone."""
        return (self.overlap_target / self.serial_target,
                self.overlap_drafter / self.serial_drafter)

    def jitter(self) -> dict[str, Any] | None:
        """The simulator's jitter spec (gamma, mean 1) for this spread, None when none."""
        if self.jitter_cv <= 0:
            return None
        return {"dist": "gamma", "cv": min(self.jitter_cv, 3.0)}

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def _is_decode(step) -> bool:
    kinds = {p.kind for p in step.phases}
    return "prefill" not in kinds and "verify" in kinds


def step_overheads(traces: Sequence[Trace]) -> tuple[float, float]:
    """Mean (serial, overlapped) uncovered time per decode step (0 when there is none)."""
    serial, overlapped = [], []
    for tr in traces:
        for s in tr.steps:
            if not _is_decode(s):
                continue
            d = sum(p.end - p.start for p in s.phases if p.kind == "draft")
            v = sum(p.end - p.start for p in s.phases if p.kind == "verify")
            path = max(d, v) if s.overlapped else d + v
            (overlapped if s.overlapped else serial).append(max(0.0, s.end - s.start - path))
    return (float(np.mean(serial)) if serial else 0.0,
            float(np.mean(overlapped)) if overlapped else 0.0)


def serial_only(trace: Trace) -> Trace:
    """The trace without its overlapped steps (for fitting the cost models)."""
    return replace(trace, steps=[s for s in trace.steps if not s.overlapped])


def overlapped_only(trace: Trace) -> Trace:
    return replace(trace, steps=[s for s in trace.steps if s.overlapped])


def _scales(cal: Any, traces: Sequence[Trace]) -> dict[str, float]:
    """(total measured) / (total predicted) per fit name over the traces' phases."""
    from validation.calibrate import predict_phases
    out = {}
    for fit, (pred, meas) in predict_phases(cal, traces).items():
        total = float(np.sum(pred))
        if pred.size and total > 0:
            out[fit] = float(np.sum(meas)) / total
    return out


def _local(r: np.ndarray, window: int = 9) -> np.ndarray:
    """Centred rolling median of a sequence (the slow drift of a shared machine's speed)."""
    half = window // 2
    padded = np.pad(r, half, mode="edge")
    return np.array([np.median(padded[i:i + window]) for i in range(r.size)])


def _spread(cal: Any, traces: Sequence[Trace]) -> float:
    """Step-to-step CV of measured / fitted verify and draft phase times, pooled: each ratio
    is taken relative to its neighbours' (a rolling median in time order), so that slow drift
    of the machine's speed -- which moves drafting and verification together -- does not
    count as independent jitter."""
    from validation.calibrate import predict_phases
    ratios = []
    for tr in traces:
        for fit, (pred, meas) in predict_phases(cal, [tr]).items():
            ok = pred > 0
            if fit not in ("verify", "draft") or ok.sum() < 3:
                continue
            r = meas[ok] / pred[ok]
            ratios.append(r / _local(r))
    r = np.concatenate(ratios) if ratios else np.zeros(0)
    return float(np.std(r) / np.mean(r)) if r.size > 1 and np.mean(r) > 0 else 0.0


def replay_params(traces: Sequence[Trace], model_path: str) -> ReplayParams:
    """Mean corrections, overlap scales and overheads from calibration traces (module doc)."""
    from validation.model_file import read_model
    cal = calibration_view(read_model(model_path))
    serial_tr = [serial_only(t) for t in traces]
    serial = _scales(cal, serial_tr)
    over = _scales(cal, [overlapped_only(t) for t in traces])
    ser_t, ser_d = serial.get("verify", 1.0), serial.get("draft", 1.0)
    o_serial, o_over = step_overheads(traces)
    return ReplayParams(overhead_serial=o_serial, overhead_overlapped=o_over,
                        serial_target=ser_t, serial_drafter=ser_d,
                        overlap_target=over.get("verify", ser_t),
                        overlap_drafter=over.get("draft", ser_d),
                        prefill_target=serial.get("prefill", 1.0),
                        prefill_drafter=serial.get("drafter_prefill", 1.0),
                        jitter_cv=_spread(cal, serial_tr))


def store_replay_params(model_path: str, params: ReplayParams) -> None:
    with open(model_path, encoding="utf-8") as fh:
        doc = json.load(fh)
    doc.setdefault("meta", {})["replay"] = params.to_dict()
    tmp = f"{model_path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, allow_nan=False)
        fh.write("\n")
    os.replace(tmp, model_path)


def load_replay_params(model: dict[str, Any]) -> ReplayParams:
    raw = (model.get("meta") or {}).get("replay") or {}
    vals = {}
    for key, default in asdict(ReplayParams()).items():
        v = raw.get(key, default)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v) and v >= 0
        if ok and not key.startswith("overhead") and v == 0:
            ok = False                    # a zero scale would make passes free
        vals[key] = float(v) if ok else default
    return ReplayParams(**vals)


def calibration_view(model: Mapping[str, Any]) -> Any:
    """A Calibration holding the model file's fits (for predict_phases)."""
    from validation.calibrate import FITS, Calibration
    from validation.fit import LinearFit
    costs = {}
    for name, fit in ((model.get("meta") or {}).get("fits") or {}).items():
        if name not in FITS:
            continue
        order = FITS[name][1]
        coef = fit.get("coef") or {}
        costs[name] = LinearFit(names=tuple(order), coef=tuple(float(coef.get(t) or 0.0)
                                                               for t in order),
                                ci_low=(0.0,) * len(order), ci_high=(0.0,) * len(order),
                                identified=(True,) * len(order), n=0,
                                heldout_error=float("nan"), heldout_total_error=float("nan"),
                                n_heldout=0, fit_error=float("nan"),
                                residual_cv=float("nan"))
    return Calibration(costs=costs, acceptance=None, sources=(), ks=(), ms=())
