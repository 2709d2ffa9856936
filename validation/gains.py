"""The PSD/SD gain: measured, predicted by the simulator, and by the closed form.

An SD trace and a PSD trace *pair up* when they served the same workload (same k, m, and the
same requests: arrival times, prompt and output lengths).  For a pair:

- measured gain = throughput(PSD) / throughput(SD) - 1, both for the end-to-end throughput
  (output tokens / makespan) and for the paper's decode throughput;
- simulator gain: the same ratio of the replayed runs' predicted throughputs; its error is in
  percentage points;
- closed form as a *consistency check*, from the SD trace's measured drafting time t,
  verification time V (per decode step, with their coefficients of variation) and controller
  overhead o = (mean SD step) - t - V: speedup = (t + V + o) / (E[max(t, V)] + o) times the
  ratio of tokens emitted per verification (PSD / SD), with E[max] for independent
  gamma-distributed t and V (``analysis.theory.jitter_max``; deterministic: max(t, V)); a third
  variant multiplies t and V by the overlap slowdown calibrated for the replay
  (``validation.replay_model``: from the contention model at these t and V when the model file
  has one, else the constant factors), the contention a shared machine adds when both run at
  once.  It assumes full batches of m and an endless queue, so t and V come from the SD trace's
  steady state (its decode steps while requests still wait: ``full_batch_steps``), and it is
  compared, as a relative error of the speedup, with the measured *steady-state* decode speedup
  (``speedup.steady``: the same window in both runs) -- the regime it describes.  Over the whole
  run (``speedup.decode``) the drain tail, where ever fewer sequences share a step and PSD falls
  back to SD for the last one, makes it read high; that tail is what the simulator replays.
  ``validation.validate`` applies it to offline pairs only.
- closed form as a *prediction* (``predicted_closed_form``): the same formula with t, V,
  overhead and jitter from the calibrated models at the pair's k and m, and tokens per
  verification from the fitted acceptance model -- nothing measured in the pair itself.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from psdlab.analysis.metrics import decode_steps, steady_steps
from psdlab.analysis.modes import MODES, SERVER_MODES, mode_spec
from psdlab.analysis.theory import expected_max
from psdlab.analysis.trace import Trace
from psdlab.sim.costs.fitted import FitFile
from psdlab.validation.compare import Row

#: the mode whose gain the closed form predicts (the registry's mode with a ``gain_over``:
#: psd); its serial twin on the same devices is ``gain_over[0]`` (sd-sep)
GAIN_SPEC = next(s for s in MODES if s.gain_over)


def _gain_over(mode: str) -> tuple[str, ...]:
    """The modes a gain of ``mode`` pairs with (``ModeSpec.gain_over``; none for a name the
    registry lacks, as an imported trace may carry)."""
    return mode_spec(mode).gain_over if mode in SERVER_MODES else ()


def workload_key(trace: Trace) -> tuple:
    """What identifies a workload: k, m and the requests (arrival, prompt, output lengths)."""
    reqs = sorted((round(r.arrival, 2), r.prompt_len, r.output_len) for r in trace.requests)
    return (trace.run.k, trace.run.m, tuple(reqs))


def pair_traces(named: Sequence[tuple[str, Trace]]) -> list[tuple[str, str]]:
    """(SD name, PSD name) for every SD and PSD trace of the same workload (first match): a
    trace of a mode with a ``gain_over`` and one of a mode it lists."""
    pairs, used = [], set()
    for name, tr in named:
        over = _gain_over(tr.run.mode)
        if not over:
            continue
        key = workload_key(tr)
        for sd_name, sd in ((n, t) for n, t in named if t.run.mode in over):
            if sd_name not in used and workload_key(sd) == key:
                pairs.append((sd_name, name))
                used.add(sd_name)
                break
    return pairs


#: fewest steady-state SD steps with both phases for the closed form to use them alone
MIN_STEADY = 5


def full_batch_steps(trace: Trace) -> list:
    """The SD decode steps the closed form reads t and V from: the steady state (steps while
    requests still wait, ``analysis.metrics.steady_steps``: full batches) when it has at least
    MIN_STEADY steps that drafted and verified, else every decode step."""
    steady = steady_steps(trace)
    both = [s for s in steady if {"draft", "verify"} <= {p.kind for p in s.phases}]
    return steady if len(both) >= MIN_STEADY else decode_steps(trace)


def _phase_times(steps: list, kind: str) -> np.ndarray:
    return np.array([sum(p.end - p.start for p in s.phases if p.kind == kind)
                     for s in steps if any(p.kind == kind for p in s.phases)])


def _emitted_per_verification(trace: Trace) -> float:
    rows = [v.emitted for s in trace.steps for v in s.verified if v.proposed > 0]
    return float(np.mean(rows)) if rows else 1.0


@dataclass(frozen=True)
class ClosedForm:
    t: float
    V: float
    t_cv: float
    V_cv: float
    overhead: float
    emitted_ratio: float
    speedup: float               # with jitter (gamma E[max])
    speedup_deterministic: float
    speedup_slowdown: float | None = None   # with jitter and the calibrated overlap slowdown
    emitted_per_verification: float | None = None   # predicted (true prediction only)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def closed_form(sd: Trace, psd: Trace,
                slowdown: tuple[float, float] | None = None,
                contention: tuple[float, float] | None = None) -> ClosedForm:
    """Closed-form PSD/SD decode speedup from the SD trace's measured t and V (module doc);
    with ``slowdown`` = (target, drafter) factors (``validation.replay_model``), also the
    speedup when overlapped phases run that much slower than alone; with ``contention`` =
    (c_target, c_drafter) the factors come from the contention model at these t and V
    instead (``validation.replay_model.contention_scales``)."""
    steps = full_batch_steps(sd)
    t, V = _phase_times(steps, "draft"), _phase_times(steps, "verify")
    if t.size == 0 or V.size == 0:
        raise ValueError("trace: the SD trace has no decode steps with draft and verify phases")
    step = float(np.mean([s.end - s.start for s in steps if s.verified]))
    tm, vm = float(t.mean()), float(V.mean())
    o = max(0.0, step - tm - vm)
    tcv = float(t.std() / tm) if tm > 0 else 0.0
    vcv = float(V.std() / vm) if vm > 0 else 0.0
    e_max = expected_max(tm, vm, tcv, vcv, "gamma")
    ratio = _emitted_per_verification(psd) / _emitted_per_verification(sd)
    slow = None
    if contention is not None and any(contention):
        from psdlab.validation.replay_model import contention_scales
        slowdown = contention_scales(tm, vm, contention[1], contention[0])
    if slowdown is not None:
        st, sdr = slowdown
        e_slow = expected_max(sdr * tm, st * vm, tcv, vcv, "gamma")
        slow = ratio * (tm + vm + o) / (e_slow + o)
    return ClosedForm(t=tm, V=vm, t_cv=tcv, V_cv=vcv, overhead=o, emitted_ratio=ratio,
                      speedup=ratio * (tm + vm + o) / (e_max + o),
                      speedup_deterministic=ratio * (tm + vm + o) / (max(tm, vm) + o),
                      speedup_slowdown=slow)


def _gain(psd: float | None, sd: float | None) -> float | None:
    return None if psd is None or sd is None or sd <= 0 else psd / sd - 1.0


def _pp(pred: float | None, meas: float | None) -> float | None:
    return None if pred is None or meas is None else 100.0 * (pred - meas)


@dataclass
class GainResult:
    name: str
    sd: str
    psd: str
    rows: list[Row]
    closed_form: ClosedForm | None
    predicted_cf: ClosedForm | None = None      # the true prediction (calibrated models)


def gain_rows(name: str, sd_meas: dict, psd_meas: dict, sd_pred: dict | None,
              psd_pred: dict | None, cf: ClosedForm | None) -> list[Row]:
    rows = []
    for key, label in (("throughput_tok_s", "PSD/SD gain (throughput)"),
                       ("decode_throughput_tok_s", "PSD/SD gain (decode throughput)")):
        meas = _gain(psd_meas.get(key), sd_meas.get(key))
        if sd_pred is not None and psd_pred is not None:
            pred = _gain(psd_pred.get(key), sd_pred.get(key))
            rows.append(Row(name, f"gain.{key}", label, "", meas, pred, _pp(pred, meas), "pp"))
    if cf is None:
        return rows
    variants = [(cf.speedup, "", ""), (cf.speedup_deterministic, ".det", ", no jitter")]
    if cf.speedup_slowdown is not None:
        variants.append((cf.speedup_slowdown, ".slowdown", ", calibrated overlap slowdown"))
    for key, metric, what in (("steady_decode_throughput_tok_s", "speedup.steady",
                               "steady-state decode speedup"),
                              ("decode_throughput_tok_s", "speedup.decode",
                               "decode speedup, whole run")):
        meas_gain = _gain(psd_meas.get(key), sd_meas.get(key))
        meas = None if meas_gain is None else 1.0 + meas_gain
        for pred, suffix, tag in variants:
            err = None if meas is None else (pred - meas) / meas
            rows.append(Row(name, metric + suffix, f"PSD/SD {what}{tag}", "x", meas, pred,
                            err, "rel", "closed form"))
    return rows


def predicted_closed_form(sd: Trace, model: str | FitFile, params: Any,
                          acceptance: dict[str, Any] | None = None) -> ClosedForm | None:
    """The closed form as a *prediction*: t and V of a full step at the pair's k and m from
    the calibrated cost models (``validation.replay_scales.solo_step_times``: the workload's
    mean context) times the calibrated serial factors; for PSD the overlap contention at
    those times (``ReplayParams.scales``); the calibrated controller overhead per step of
    each mode and the calibrated jitter CV for both phases.  Nothing is read from the
    measured runs but the workload (k, m, prompt and output lengths).  Tokens emitted per
    verification come from the acceptance model (``acceptance``, e.g. the fitted one):
    E[accepted] + 1 at the pair's k, the same for SD and PSD (both verify the same drafts),
    so their ratio is 1 and acceptance cancels from the speedup.  None without cost fits."""
    from psdlab.validation.replay_scales import solo_step_times
    draft, verify = solo_step_times(sd, model)
    if draft is None or verify is None:
        return None
    ts, vs = params.serial_drafter * draft, params.serial_target * verify
    st, sdr = params.scales(GAIN_SPEC.name, draft, verify)
    tp, vp = sdr * draft, st * verify
    o_s, o_p = params.overhead(GAIN_SPEC.gain_over[0]), params.overhead(GAIN_SPEC.name)
    cv = float(params.jitter_cv)
    emitted = 1.0
    if acceptance is not None:
        from psdlab.sim.acceptance_registry import make_acceptance
        emitted = 1.0 + float(make_acceptance(acceptance).expected_accepted(int(sd.run.k)))
    e_max = expected_max(tp, vp, cv, cv, "gamma")
    return ClosedForm(t=ts, V=vs, t_cv=cv, V_cv=cv, overhead=o_s, emitted_ratio=1.0,
                      speedup=(ts + vs + o_s) / (e_max + o_p),
                      speedup_deterministic=(ts + vs + o_s) / (max(tp, vp) + o_p),
                      speedup_slowdown=None, emitted_per_verification=emitted)


def predicted_rows(name: str, sd_meas: dict, psd_meas: dict, cf: ClosedForm) -> list[Row]:
    """The true closed-form prediction against the measured steady-state decode speedup."""
    meas_gain = _gain(psd_meas.get("steady_decode_throughput_tok_s"),
                      sd_meas.get("steady_decode_throughput_tok_s"))
    meas = None if meas_gain is None else 1.0 + meas_gain
    err = None if meas is None else (cf.speedup - meas) / meas
    return [Row(name, "speedup.steady.predicted",
                "PSD/SD steady-state decode speedup, predicted (calibrated t, V, overhead; "
                "fitted acceptance)", "x", meas, cf.speedup, err, "rel", "closed form")]
