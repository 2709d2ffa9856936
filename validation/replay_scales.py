"""The decode-cost multipliers of one replay: overlap contention, mean level.

``validation.compare.trace_sim_config`` replays a measured run with the calibrated cost models times
two multipliers, (target, drafter), for decode passes (a proposal cap at the output budget
is simulated, not scaled: ``server.cap_proposals``):

- for PSD, the overlap contention (``validation.replay_model``) at the solo times of a full
  step of the run (``solo_step_times``: m sequences, k tokens, the workload's mean context).
  The simulator's cost models do not know whether a pass overlapped, so the contention factor
  is applied to the share of decode time that runs in overlapped steps (``overlap_share`` of a
  first replay; a PSD run that often falls back to SD -- one batch empty under light load --
  overlaps little): ``scale = serial + share * (overlapped - serial)``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from psdlab.analysis.trace import Trace
from psdlab.sim.costs.fitted import FitFile


def solo_step_times(trace: Trace, model: str | FitFile) -> tuple[float | None, float | None]:
    """(draft, verify) solo times of one full step of the run (m sequences, k tokens each, the
    workload's mean context) under the model file's decode fits; (None, None) when absent."""
    import psdlab.sim.costs.calibrated as sc
    run = trace.run
    reqs = trace.requests
    if not reqs or run.k < 1:
        return None, None
    try:
        drafter = sc.calibrated_cost(model, "drafter")
        target = sc.calibrated_cost(model, "target")
    except ValueError:
        return None, None
    m, k = float(run.m), int(run.k)
    ctx = m * max(1.0, float(np.mean([r.prompt_len + r.output_len / 2 for r in reqs])))
    draft = (sum(float(drafter.forward_time(m, m, ctx + j * m)) for j in range(k))
             + drafter.phase_overhead)
    verify = float(target.forward_time(m, m * (k + 1), ctx))
    return draft, verify


def overlap_share(sim_trace: Trace) -> tuple[float, float]:
    """(verify, draft) share of decode phase time that ran in overlapped steps."""
    tot = {"verify": 0.0, "draft": 0.0}
    over = {"verify": 0.0, "draft": 0.0}
    for s in sim_trace.steps:
        for p in s.phases:
            if p.kind in tot:
                tot[p.kind] += p.end - p.start
                if s.overlapped:
                    over[p.kind] += p.end - p.start
    return tuple(over[k] / tot[k] if tot[k] > 0 else 1.0  # type: ignore[return-value]
                 for k in ("verify", "draft"))


def decode_scales(trace: Trace, model: str | FitFile, params: Any,
                  share: tuple[float, float] | None = None) -> tuple[float, float]:
    """(target, drafter) decode multipliers of a replay of ``trace`` (module docstring)."""
    mode = trace.run.mode
    draft, verify = solo_step_times(trace, model) if mode == "psd" else (None, None)
    t_scale, d_scale = params.scales(mode, draft, verify)
    if mode == "psd" and share is not None:
        t_scale = params.serial_target + share[0] * (t_scale - params.serial_target)
        d_scale = params.serial_drafter + share[1] * (d_scale - params.serial_drafter)
    return t_scale, d_scale
