"""What a replay needs beyond the per-phase fits: overlap contention, controller overhead,
step-time spread.

Measured by ``validation.calibrate`` on its traces (``replay_params_of``), stored in the model
file's ``meta.replay`` and read back by ``load_replay_params`` (defaults: no overlap effect, no
overhead).  The cost fits themselves are already unbiased for the mean (``match_total`` of
``validation.nnls_fit``), so the serial and prefill scales below are 1 for a model written by
``psdlab calibrate`` (older model files stored the mean correction here; it is still applied).

- **Overlap contention**: when the drafter and the target run at the same time each runs
  slower than alone if they share anything -- on a CPU, two cores share the memory bandwidth
  and the last-level cache (and the controller process).  The solo time ``w`` of an
  overlapped phase is the median of the serial phases of the same shape in the serial run of
  its workload that ran nearest in time, else in all runs (``validation.solo_times``: drift
  between runs must not read as contention, nor the affine fit's own error at a shape); the
  trace's start/end times give ``o``, how long the other device was busy during it.  The
  contention model: while both run, a role progresses at rate ``1 - c`` of its solo speed, so
  a phase of solo time ``w`` that overlapped for ``o`` lasts ``w + c * o``; ``c`` per role is
  the median over the PSD runs of each run's least-squares fit of (measured - solo time) on
  ``o`` over its overlapped phases (``fit_contention``).  For a
  replay, with solo times ``a`` (draft) and ``b`` (verify) of a full step at the run's k and
  m, both start together, ``o = min(a / (1 - c_d), b / (1 - c_t))`` and the scales are
  ``1 + c * o / w`` per role (``contention_scales``): a phase overlapped for only part of its
  time is slowed only for that part, which a constant factor would not say when k makes
  drafting much longer or shorter than verification.  The constant factors (``overlap_*``:
  total measured / total solo time over the overlapped phases, ``overlap_factors``) are kept
  too; the closed form's "calibrated overlap slowdown" variant uses them.
- **Proposal cap**: ``draft_cap`` = 1 when the calibration traces show the engine drafting
  fewer than k tokens for a sequence near the end of its output; the replay then simulates
  that cap (``server.cap_proposals``).
- **Controller overhead**: a step lasts longer than its critical path (draft + verify one after
  the other, or the longer of the two when overlapped) by the controller's own work: collecting
  drafts, submitting the verification, bookkeeping.  Measured per decode step, separately for
  serial steps (AR, SD) and overlapped ones (PSD), and added to the target's decode pass;
  the same for prefill steps (``prefill_overheads``: runs with a drafter and AR runs apart),
  added to the target's prefill pass.
- **Spread**: PSD's step is the longer of two phases, and E[max(t, V)] > max(E t, E V) when
  they vary (``analysis.theory.jitter_max``); the step-to-step CV of measured / solo decode
  phase times (relative to a rolling median, so slow drift is not counted) is kept as
  ``jitter_cv`` and the replay draws gamma step-time jitter with it (mean 1, so the mean
  times stay as calibrated).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from psdlab.analysis.atomic_write import write_text
from psdlab.analysis.contention import C_RANGE, Contention
from psdlab.analysis.modes import mode_spec
from psdlab.analysis.trace import Trace
from psdlab.validation.phase_model import (calibration_view, predict_phases, serial_only,
                                           with_draft_forwards)
from psdlab.validation.solo_times import (is_decode as _is_decode, overlapped_solo,
                                            serial_reference, solo as _solo,
                                            strict as _strict)

@dataclass(frozen=True)
class ReplayParams:
    overhead_serial: float = 0.0        # s per serial decode step that drafted (SD)
    overhead_overlapped: float = 0.0    # s per overlapped decode step (PSD)
    overhead_ar: float = 0.0            # s per step without drafts (AR); 0: as serial
    serial_target: float = 1.0          # measured / fitted, serial target decode phases
    serial_drafter: float = 1.0         # the same for the drafter's draft phases
    overlap_target: float = 1.0         # measured / fitted, overlapped target phases
    overlap_drafter: float = 1.0        # measured / fitted, overlapped draft phases
    prefill_target: float = 1.0         # measured / fitted, target prefills
    prefill_drafter: float = 1.0        # measured / fitted, drafter prefills
    jitter_cv: float = 0.0              # CV of measured / fitted decode phase times
    contention_target: float = 0.0      # c: target's lost speed while the drafter runs
    contention_drafter: float = 0.0     # c: drafter's lost speed while the target runs
    draft_cap: float = 0.0              # 1: the engine caps proposals at the output budget
    overhead_prefill: float = 0.0       # s per prefill step of a run with a drafter
    overhead_prefill_ar: float = 0.0    # s per prefill step of a run without one (AR)

    def overhead(self, mode: str) -> float:
        """Controller time per decode step of a mode (its ``ModeSpec``: no drafting, serial
        drafting, or drafting overlapped with verification)."""
        spec = mode_spec(mode)
        if not spec.drafting and self.overhead_ar > 0:
            return self.overhead_ar
        return self.overhead_overlapped if spec.overlap else self.overhead_serial

    def prefill_overhead(self, mode: str) -> float:
        return self.overhead_prefill if mode_spec(mode).drafting else self.overhead_prefill_ar

    def scales(self, mode: str, draft: float | None = None,
               verify: float | None = None) -> tuple[float, float]:
        """(target, drafter) decode-cost multipliers for a replay of this mode; for PSD with
        the solo times of a full step (``draft``, ``verify``) from the contention model,
        else the constant overlap factors."""
        if not mode_spec(mode).overlap:
            return self.serial_target, self.serial_drafter
        if draft is None or verify is None or draft <= 0 or verify <= 0 or not self.contention:
            return self.overlap_target, self.overlap_drafter
        t, d = contention_scales(self.serial_drafter * draft, self.serial_target * verify,
                                 self.contention_drafter, self.contention_target)
        return self.serial_target * t, self.serial_drafter * d

    @property
    def contention(self) -> bool:
        return bool(self.contention_target or self.contention_drafter)

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


#: fewest overlapped phases of a role for a run's own contention estimate (``fit_contention``)
MIN_PHASES = 5


def contention_scales(draft: float, verify: float, c_d: float,
                      c_t: float) -> tuple[float, float]:
    """(target, drafter) time multipliers of an overlapped step whose solo times are ``draft``
    and ``verify`` (module docstring): both start together, each runs at ``1 - c`` of its solo
    speed until the first one finishes."""
    o = min(draft / (1.0 - c_d), verify / (1.0 - c_t))
    return 1.0 + c_t * o / verify, 1.0 + c_d * o / draft


def _least_squares(rows: Sequence[tuple[float, float]]) -> float | None:
    o = np.array([r[0] for r in rows])
    excess = np.array([r[1] for r in rows])
    return float(o @ excess / (o @ o)) if o.size and o @ o > 0 else None


def fit_contention(cal: Any, traces: Sequence[Trace],
                   ref: Mapping[tuple[str, int, int], float] | None = None
                   ) -> tuple[float, float]:
    """(c_target, c_drafter): per role, the median over the overlapped runs of each run's
    least squares of (measured - solo time) on the time the other device was busy, over its
    overlapped steps with one draft and one verify phase (solo times:
    ``validation.solo_times.overlapped_solo``); runs with fewer than MIN_PHASES such phases
    of a role are left out of that role's median (all phases pooled when no run has enough).
    A median over runs, not one fit over all phases: on a shared machine a run's overlapped
    phases as a whole can run 10-20% slower or faster than its back-to-back serial run's
    (``results/demo/2026-12-03-dc5cb53-overlap-by-run.txt``), and one such run among the
    three or four a demo calibrates on would move a pooled fit by a third of that."""
    return _contention(overlapped_solo(cal, traces, ref))


def _contention(solo_rows: Iterable[tuple[int, Any, float, float]]) -> tuple[float, float]:
    """``fit_contention`` on the rows of ``validation.solo_times.overlapped_solo``."""
    rows: dict[str, dict[int, list[tuple[float, float]]]] = {"verify": {}, "draft": {}}
    for i, ph, o, w in solo_rows:
        rows[ph.kind].setdefault(i, []).append((o, (ph.end - ph.start) - w))
    out = []
    for name in ("verify", "draft"):
        fitted = [_least_squares(r) for r in rows[name].values() if len(r) >= MIN_PHASES]
        per_run = [c for c in fitted if c is not None]
        pooled = _least_squares([x for r in rows[name].values() for x in r])
        c = float(np.median(per_run)) if per_run else (pooled or 0.0)
        out.append(float(np.clip(c, *C_RANGE)))
    return out[0], out[1]


def overlap_factors(cal: Any, traces: Sequence[Trace],
                    ref: Mapping[tuple[str, int, int], float] | None = None
                    ) -> dict[str, float]:
    """Total measured / total solo time of the overlapped verify and draft phases (solo
    times: ``validation.solo_times.overlapped_solo``)."""
    return _factors(overlapped_solo(cal, traces, ref))


def _factors(solo_rows: Iterable[tuple[int, Any, float, float]]) -> dict[str, float]:
    """``overlap_factors`` on the rows of ``validation.solo_times.overlapped_solo``."""
    meas = {"verify": 0.0, "draft": 0.0}
    solo = {"verify": 0.0, "draft": 0.0}
    for _, ph, _, w in solo_rows:
        meas[ph.kind] += ph.end - ph.start
        solo[ph.kind] += w
    return {k: meas[k] / solo[k] for k in meas if solo[k] > 0}


def caps_proposals(traces: Sequence[Trace]) -> bool:
    """Whether the engine drafted fewer than k tokens for some sequence (at the end of its
    output budget: ``server.cap_proposals``)."""
    return any(0 <= v.proposed < tr.run.k for tr in traces if tr.run.k > 0
               for s in tr.steps for v in s.verified)


#: a pause between steps longer than this is a wait for an arrival, not controller work
MAX_STEP_GAP = 0.05


def steps_with_pause(trace: Trace):
    """(step, the controller's pause before the next step) in time order; a pause longer
    than MAX_STEP_GAP is a wait for an arrival and counts as 0."""
    steps = sorted(trace.steps, key=lambda x: (x.start, x.index))
    for s, nxt in zip(steps, steps[1:] + [None]):
        gap = 0.0 if nxt is None else nxt.start - s.end
        yield s, (gap if 0.0 < gap <= MAX_STEP_GAP else 0.0)


def step_overheads(traces: Sequence[Trace]) -> tuple[float, float, float]:
    """Mean (serial, overlapped, no-draft) uncovered time per decode step (0 when there is
    none): the step's time beyond its critical path, plus the controller's pause before the
    next step (finishing requests, admission, the trace record; up to MAX_STEP_GAP), which
    the simulator's back-to-back steps would otherwise leave out.  Serial steps that drafted
    (SD: two hand-offs) and those that did not (AR: one) are told apart; "serial" falls back
    to all serial steps when none drafted."""
    serial: list[float] = []
    overlapped: list[float] = []
    nodraft: list[float] = []
    for tr in traces:
        for s, pause in steps_with_pause(tr):
            if not _is_decode(s):
                continue
            d = sum(p.end - p.start for p in s.phases if p.kind == "draft")
            v = sum(p.end - p.start for p in s.phases if p.kind == "verify")
            path = max(d, v) if s.overlapped else d + v
            bucket = overlapped if s.overlapped else serial if d > 0 else nodraft
            bucket.append(max(0.0, s.end - s.start - path) + pause)
    def mean(x: list[float]) -> float:
        return float(np.mean(x)) if x else 0.0
    return mean(serial or nodraft), mean(overlapped), mean(nodraft)


def prefill_overheads(traces: Sequence[Trace]) -> tuple[float, float]:
    """Mean (with a drafter, AR) uncovered time per prefill step: the step's time beyond its
    longest prefill phase plus the pause before the next step (up to MAX_STEP_GAP), as
    ``step_overheads`` for decode steps; 0 when there is none."""
    drafting: list[float] = []
    ar: list[float] = []
    for tr in traces:
        for s, pause in steps_with_pause(tr):
            pre = [p.end - p.start for p in s.phases if p.kind == "prefill"]
            if not pre:
                continue
            (drafting if mode_spec(tr.run.mode).drafting else ar).append(
                max(0.0, s.end - s.start - max(pre)) + pause)
    return (float(np.mean(drafting)) if drafting else 0.0, float(np.mean(ar)) if ar else 0.0)


def _scales(cal: Any, traces: Sequence[Trace]) -> dict[str, float]:
    """(total measured) / (total predicted) per fit name over the traces' phases."""
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


def _spread(cal: Any, traces: Sequence[Trace],
            ref: Mapping[tuple[str, int, int], float] | None = None) -> float:
    """Step-to-step CV of measured / solo verify and draft phase times of decode steps (solo
    times as in ``fit_contention``: the same-shape serial median, else the fit -- the fit's
    own error at each shape would otherwise count as jitter wherever the shape changes, as in
    a drain), pooled: each ratio is taken relative to its neighbours' (a rolling median in
    time order), so that slow drift of the machine's speed -- which moves drafting and
    verification together -- does not count as independent jitter."""
    ref = serial_reference(traces) if ref is None else ref
    phases = [ph for tr in traces for s in tr.steps if _is_decode(s) for ph in s.phases]
    strict = {k: _strict(ref, [ph for ph in phases if ph.kind == k])
              for k in ("draft", "verify")}
    ratios = []
    for tr in traces:
        per_kind: dict[str, list[float]] = {"verify": [], "draft": []}
        for s in sorted(tr.steps, key=lambda x: (x.start, x.index)):
            if not _is_decode(s):
                continue
            for ph in s.phases:
                if ph.kind in per_kind and ph.end > ph.start:
                    w = _solo(cal, ref, ph, strict[ph.kind])
                    if w is not None and w > 0:
                        per_kind[ph.kind].append((ph.end - ph.start) / w)
        for r in per_kind.values():
            if len(r) >= 3:
                arr = np.array(r)
                ratios.append(arr / _local(arr))
    allr = np.concatenate(ratios) if ratios else np.zeros(0)
    return (float(np.std(allr) / np.mean(allr)) if allr.size > 1 and np.mean(allr) > 0
            else 0.0)


def replay_params(traces: Sequence[Trace], model: Mapping[str, Any]) -> ReplayParams:
    """Replay parameters of a model file's fits (the read file's document,
    ``sim.costs.fitted.read_fit_file``) on (calibration) traces (module doc)."""
    return replay_params_of(calibration_view(model),
                            [with_draft_forwards(t) for t in traces])


def replay_params_of(cal: Any, traces: Sequence[Trace],
                     contention: Contention | None = None) -> ReplayParams:
    """Overlap contention and scales, overheads and spread of a Calibration's fits on
    (calibration) traces (module doc).  ``contention`` (``analysis.contention``: a co-run
    probe's fit or a stated default) replaces what overlapped phases would say: the
    contention, the overlap factors and PSD's controller overhead (SD-sep's less the host
    time a co-run hides); it is what a prediction of PSD from non-PSD runs rests on."""
    serial_tr = [serial_only(t) for t in traces]
    serial = _scales(cal, serial_tr)
    ref = serial_reference(traces)
    solo_rows = list(overlapped_solo(cal, traces, ref))      # each PSD run's neighbour, once
    over = _factors(solo_rows)
    ser_t, ser_d = serial.get("verify", 1.0), serial.get("draft", 1.0)
    o_serial, o_over, o_ar = step_overheads(traces)
    c_t, c_d = _contention(solo_rows)
    pre_drafting, pre_ar = prefill_overheads(traces)
    if contention is not None:
        c_t = float(np.clip(contention.target, *C_RANGE))
        c_d = float(np.clip(contention.drafter, *C_RANGE))
        over = {"verify": ser_t * contention.overlap_target,
                "draft": ser_d * contention.overlap_drafter}
        o_over = max(o_serial - contention.host_saving_s, 0.0)
    return ReplayParams(overhead_serial=o_serial, overhead_overlapped=o_over,
                        overhead_ar=o_ar,
                        serial_target=ser_t, serial_drafter=ser_d,
                        overlap_target=over.get("verify", ser_t),
                        overlap_drafter=over.get("draft", ser_d),
                        prefill_target=serial.get("prefill", 1.0),
                        prefill_drafter=serial.get("drafter_prefill", 1.0),
                        jitter_cv=_spread(cal, serial_tr, ref),
                        contention_target=c_t, contention_drafter=c_d,
                        draft_cap=1.0 if caps_proposals(traces) else 0.0,
                        overhead_prefill=pre_drafting, overhead_prefill_ar=pre_ar)


def store_replay_params(model_path: str, params: ReplayParams) -> None:
    with open(model_path, encoding="utf-8") as fh:
        doc = json.load(fh)
    doc.setdefault("meta", {})["replay"] = params.to_dict()
    write_text(model_path, json.dumps(doc, indent=1, allow_nan=False) + "\n")


def load_replay_params(model: dict[str, Any]) -> ReplayParams:
    raw = (model.get("meta") or {}).get("replay") or {}
    vals = {}
    for key, default in asdict(ReplayParams()).items():
        v = raw.get(key, default)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v)
        if ok and key.startswith("contention"):
            ok = C_RANGE[0] <= v <= C_RANGE[1]
        elif ok:
            ok = v > 0 or (v == 0 and key.startswith(("overhead", "jitter", "draft_cap")))
            # a zero scale would make passes free
        vals[key] = float(v) if ok else default
    return ReplayParams(**vals)


