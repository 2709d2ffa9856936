"""Calibrate the simulator's cost and acceptance models from traces alone.

Every phase of every step is one observation of a forward-pass cost model
``forward_time(seqs, new_tokens, context) = base + per_seq*seqs + per_token*new_tokens
+ per_context*context`` (the affine/fitted CostModel of ``sim/costs``), one per role:

- ``verify`` (target): one forward over ``seqs`` sequences and ``tokens`` verified tokens, with
  ``context`` = the phase's context tokens (``Phase.context``: sum over its sequences of the
  tokens already in the KV cache; 0 in traces that do not record it, which leaves
  ``per_context`` unidentified).
- ``draft`` (drafter): ``k`` one-token forwards (the longest proposal of the phase, from the
  rows that verified its drafts: ``with_draft_forwards``; else tokens / seqs), the j-th with context
  ``context + j * seqs``, plus a fixed cost per phase (``per_phase``: the first pass also
  feeds the tokens the drafter has not seen, and the proposals and their probabilities go
  back to the controller), so the phase time is ``per_phase + k*base +
  tokens*(per_seq + per_token) + per_context*(k*context + seqs*k*(k-1)/2)``;
  ``per_seq`` and ``per_token`` cannot be told apart here and the sum is reported as
  ``per_token``; ``per_phase`` needs traces at two k or more.  This per-forward form is what
  lets a fit at some k predict other k (the model file keeps ``per_phase`` as the drafter's
  ``phase_overhead``, which the simulator adds once per drafting phase).
- ``prefill`` (target, or drafter when the phase ran on the drafter's own device): the passes
  over the prompts; ``per_seq`` is charged per pass (``Phase.chunks``, when the trace records
  it: the engine feeds a long prompt in chunks, ``analysis.chunking``) and the engine's rule
  (``run.extra["prefill_chunking"]``) goes to the model file, so a prompt longer than any
  calibration prompt is costed as the engine runs it.

**Context.**  With a controlled context probe (``runtime.context_timing``: the same pass timed
at two contexts far apart, on the machine's own workers before the runs) a decode fit's
``per_context`` is fixed at the probe's slope and the other terms are fitted to the rest.
Without one, it is read off the variation of context inside its
repeated shapes (``context_slope``: same sequences, tokens and forwards; only the context
varies there) and fixed in the fit of the other terms.  Across shapes the context grows with
the sequences, so a joint fit trades the context term against the per-sequence and per-token
ones, and a run with longer prompts than the calibration's (a new prompt set) would then be
predicted with the wrong slope.  The tables of measured shapes (``validation.cost_tables``) record
each shape's mean context, and the replay moves a shape's measured time by the fit's context
slope to the context it asks for.

Each is fitted by :func:`validation.nnls_fit.fit_nonneg` (relative-error NNLS for the shape, then
rescaled so the predicted total time equals the measured total: ``match_total``, so a model
file is unbiased for the mean on its own; 95% CIs, held-out error); a warning is raised when a
held-out error exceeds 10%.  The acceptance models come from :mod:`validation.acceptance.fit`.

**Serial and overlapped phases.**  A phase that ran while the other device was busy (a PSD
step that drafted one batch while verifying the other) runs slower than alone when the two
devices share anything (two cores of one CPU share memory bandwidth and cache).  The cost
models are therefore fitted on the *serial* steps (AR, SD, PSD start-up and tail; all steps of
a fit that has no serial phases), and the overlapped phases calibrate the contention model of
:mod:`validation.replay_model` (with the controller overhead per step and the step-time
spread), stored as ``Calibration.replay`` and in the model file's ``meta.replay``.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping, Sequence

import numpy as np

from psdlab.analysis.chunking import chunkings_from
from psdlab.analysis.contention import (Contention, CorunProbe, default_contention, fit_corun,
                                        layout_of)
from psdlab.analysis.trace import Phase, Trace
from psdlab.validation.acceptance.fit import fit_acceptance
from psdlab.validation.cost_tables import (MIN_TABLE, draft_table, phase_context,  # noqa: F401
                                           verify_table)
from psdlab.validation.context_slopes import probe_slopes
from psdlab.validation.nnls_fit import LinearFit, fit_nonneg, within_group_slope
from psdlab.validation.phase_model import (FITS, WARN_HELDOUT, Calibration, collect_phases, design,
                                           phase_overhead, serial_only, with_draft_forwards)
from psdlab.validation.replay_model import replay_params_of

WITHIN_SHAPE = ("verify", "draft")
#: fewest phases in repeated shapes for that slope; with fewer, the joint fit gives it
MIN_WITHIN = 20


def shape_of(phase: Phase) -> tuple[int, int, int]:
    """A decode phase's shape apart from its context: (sequences, tokens, forwards)."""
    return int(phase.seqs), int(phase.tokens), int(getattr(phase, "forwards", 0) or 0)


def context_slope(name: str, rows: Sequence[tuple[Phase, float]], X: np.ndarray,
                  y: np.ndarray) -> tuple[float, float, float, int] | None:
    """``per_context`` of a decode fit from the context variation inside its shapes
    (``fit.within_group_slope``): (value, 95% low, 95% high, phases used), or None when the
    shapes repeat too little (fewer than MIN_WITHIN phases) or the fit is not a decode fit.
    Across shapes the context grows with the sequences, so a joint fit is free to trade the
    per-context term against the per-sequence and per-token ones; the calibration runs
    then predict runs whose prompts are longer (a new prompt set) with the wrong slope."""
    if name not in WITHIN_SHAPE:
        return None
    col = X[:, FITS[name][1].index("per_context")]
    slope, se, used = within_group_slope(col, y, [shape_of(ph) for ph, _ in rows])
    if used < MIN_WITHIN or not np.isfinite(slope) or not np.isfinite(se):
        return None
    value = max(slope, 0.0)
    return value, max(slope - 1.96 * se, 0.0), max(slope + 1.96 * se, 0.0), used


def fit_costs(groups: dict[str, list[tuple[Phase, float]]], *, holdout: float,
              seed: int, match_total: bool = True,
              probe: Mapping[str, Any] | None = None
              ) -> tuple[dict[str, LinearFit], dict[str, int | str | None]]:
    """The fits by name, and per decode fit with context where its context slope came from:
    ``"probe"`` (``probe``, a ``runtime.context_timing`` result), the number of phases of its
    within-shape slope, or None (too few: the joint fit's slope)."""
    probed = probe_slopes(probe)
    fits: dict[str, LinearFit] = {}
    within_rows: dict[str, int | str | None] = {}
    for name, rows in groups.items():
        if not rows:
            continue
        X = design(name, [ph for ph, _ in rows])
        y = np.array([d for _, d in rows])
        fixed = None
        if not any(phase_context(ph) for ph, _ in rows):
            # no context recorded: the draft column's k(k-1)/2 growth term alone would give
            # per_context a value that really belongs to the per-token terms; fix it at 0
            X[:, FITS[name][1].index("per_context")] = 0.0
        elif name in probed:
            fixed = {"per_context": probed[name]}
            within_rows[name] = "probe"
        else:
            within = context_slope(name, rows, X, y)
            if within is not None:
                fixed = {"per_context": within[:3]}
            if name in WITHIN_SHAPE:
                within_rows[name] = None if within is None else within[3]
        fits[name] = fit_nonneg(X, y, FITS[name][1], holdout=holdout, seed=seed,
                                match_total=match_total, fixed=fixed)
    return fits, within_rows


def _messages(fits: dict[str, LinearFit], groups, within_rows: dict[str, int | str | None]
              ) -> tuple[list[str], list[str]]:
    notes, warnings = [], []
    for name, fit in fits.items():
        err = fit.heldout_error
        if np.isfinite(err) and err > WARN_HELDOUT:
            warnings.append(f"{name}: held-out error {100 * err:.1f}% is above "
                            f"{100 * WARN_HELDOUT:.0f}%: the affine model does not describe "
                            f"these phases well")
        if not np.isfinite(err):
            notes.append(f"{name}: too few phases ({fit.n}) for a held-out error")
        no_context = not any(phase_context(ph) for ph, _ in groups[name])
        lost = [t for t, ok in zip(fit.names, fit.identified) if not ok
                and not (name == "draft" and t == "per_seq")
                and not (no_context and t == "per_context")]
        if name == "draft" and "per_phase" in lost:
            lost.remove("per_phase")
            warnings.append("draft: the traces draft one k only, so a fixed cost per drafting "
                            "phase cannot be told from the per-pass base (per_phase fixed at "
                            "0): predictions at another k need traces at two k or more")
        if lost:
            notes.append(f"{name}: {', '.join(lost)} not identifiable from these traces "
                         f"(fixed at 0)")
        if no_context:
            notes.append(f"{name}: the traces record no phase context (per_context fixed at 0)")
        elif within_rows.get(name) == "probe":
            notes.append(f"{name}: per_context fixed at the controlled context probe's slope, "
                         f"{1e6 * fit.coefficients()['per_context']:.1f} us per context token "
                         f"(runtime.context_timing)")
        elif name in within_rows:
            used = within_rows[name]
            notes.append(f"{name}: per_context from the context variation inside repeated "
                         f"shapes ({used} phases)" if used is not None else
                         f"{name}: too few phases in repeated shapes for a within-shape "
                         f"context slope; per_context from the joint fit")
    if "draft" in fits:
        notes.append("draft: per_seq and per_token are one term in one-token drafting "
                     "forwards; their sum is reported as per_token")
    for name in ("verify", "draft"):
        if name not in fits:
            notes.append(f"{name}: no {name} phases in the traces")
    return notes, warnings


#: fewest serial phases a fit needs before the overlapped ones are left out of it
MIN_SERIAL = 8


def serial_groups(traces: Sequence[Trace]) -> tuple[dict[str, list[tuple[Phase, float]]], int,
                                                    list[str]]:
    """Phases to fit on, by fit: the serial steps' phases, or every step's for a fit with fewer
    than MIN_SERIAL serial phases (with a note)."""
    every, skipped = collect_phases(traces)
    serial, _ = collect_phases([serial_only(t) for t in traces])
    notes = []
    for name, rows in serial.items():
        if len(rows) < MIN_SERIAL and len(every[name]) > len(rows):
            serial[name] = every[name]
            notes.append(f"{name}: too few serial phases ({len(rows)}); fitted on overlapped "
                         f"phases too")
    return serial, skipped, notes


def overlaps(trace: Trace) -> bool:
    """Whether a trace has overlapped steps (PSD, or an adaptive run that chose PSD)."""
    return any(s.overlapped for s in trace.steps)


def non_psd(traces: Sequence[Trace], names: Sequence[str] | None = None
            ) -> tuple[list[Trace], list[str], list[str]]:
    """(traces, names, names left out): the traces without overlapped steps, what a
    prediction of PSD before it runs may read (``names``: the traces' names, or their
    indices)."""
    keep = [i for i, t in enumerate(traces) if not overlaps(t)]
    left = [f"trace {i}" for i in range(len(traces)) if i not in keep]
    if names is None or len(names) != len(traces):     # names of files, not of traces
        return [traces[i] for i in keep], list(names or []), left
    return ([traces[i] for i in keep], [names[i] for i in keep],
            [n for i, n in enumerate(names) if i not in keep])


def psd_inputs(traces: Sequence[Trace], corun: CorunProbe | None) -> Contention | None:
    """What PSD's overlapped steps rest on when no calibration trace overlapped: the co-run
    probe's fit (``corun``), else the stated default of the traces' device layout
    (``analysis.contention.DEFAULTS``); None when the traces' own PSD steps calibrate it."""
    if corun is not None:
        return fit_corun(corun)
    if any(overlaps(t) for t in traces):
        return None
    drafting = [t for t in traces if t.run.devices.get("drafter")] or list(traces)
    return default_contention(layout_of(drafting[0].run.devices))


def contention_note(contention: Contention) -> str:
    """The calibration's note on what PSD's overlapped steps rest on."""
    return (f"psd: contention target {contention.target:.3f}, drafter {contention.drafter:.3f}, "
            f"controller overhead SD-sep's less {1e3 * contention.host_saving_s:.3f} ms "
            f"({contention.source}: {contention.why}); no PSD run was read")


def calibrate(traces: Sequence[Trace], *, holdout: float = 0.2, seed: int = 0,
              context_probe: Mapping[str, Any] | None = None,
              corun: CorunProbe | None = None) -> Calibration:
    """Fit cost and acceptance models to traces (module docstring); ``context_probe``: a
    ``runtime.context_timing`` result, which fixes the decode fits' context slopes;
    ``corun``: a co-run probe's record (``analysis.contention``), which predicts PSD's
    overlapped steps without a PSD run: traces with overlapped steps are then left out
    (a note names how many), so the calibration is the same whether or not they are given."""
    if not traces:
        raise ValueError("traces: need at least one trace")
    left_out: list[str] = []
    if corun is not None:
        traces, _, left_out = non_psd(traces)
        if not traces:
            raise ValueError("traces: every trace has overlapped (PSD) steps; with a co-run "
                             "probe the calibration reads AR and SD runs only")
    contention = psd_inputs(traces, corun)
    traces = [with_draft_forwards(t) for t in traces]
    groups, skipped, group_notes = serial_groups(traces)
    if not any(groups.values()):
        raise ValueError("traces: no timed phases with sequences and tokens to fit")
    fits, within_rows = fit_costs(groups, holdout=holdout, seed=seed, probe=context_probe)
    notes, warnings = _messages(fits, groups, within_rows)
    notes = group_notes + notes
    if skipped:
        notes.append(f"{skipped} phases with no sequences, tokens or duration were skipped")
    try:
        acceptance = fit_acceptance(traces, seed=seed)
        notes.extend(f"acceptance: {n}" for n in acceptance.notes)
    except ValueError as exc:
        acceptance = None
        notes.append(str(exc))
    cal = Calibration(costs=fits, acceptance=acceptance,
                      sources=tuple(sorted({t.run.source for t in traces})),
                      ks=tuple(sorted({t.run.k for t in traces})),
                      ms=tuple(sorted({t.run.m for t in traces})), skipped_phases=skipped,
                      notes=tuple(notes), warnings=tuple(warnings))
    replay = replay_params_of(cal, traces, contention)
    if contention is not None:
        chunk_notes_psd: tuple[str, ...] = (contention_note(contention),)
        if left_out:
            chunk_notes_psd += (f"psd: {len(left_out)} trace(s) with overlapped steps left out "
                                f"(the co-run probe stands for them)",)
    else:
        chunk_notes_psd = ()
    chunking, chunk_notes = prefill_chunking(traces)
    chunk_notes = chunk_notes_psd + chunk_notes
    return replace(cal, replay=replay, verify_table=verify_table(traces, replay.overlap_target),
                   draft_table=draft_table(traces, phase_overhead(fits["draft"])
                                           if "draft" in fits else 0.0),
                   prefill_chunking=chunking, notes=cal.notes + chunk_notes,
                   context_probe=dict(context_probe) if context_probe else None,
                   contention=contention)


def prefill_chunking(traces: Sequence[Trace]) -> tuple[dict[str, list[int]], tuple[str, ...]]:
    """The engine's prefill rule by role (``run.extra["prefill_chunking"]``, the runtime's
    ``analysis.chunking`` rule), when every trace that records one records the same."""
    found = [chunkings_from(t.run.extra["prefill_chunking"], "run.extra.prefill_chunking")
             for t in traces if (t.run.extra or {}).get("prefill_chunking") is not None]
    if not found:
        return {}, ()
    if any(rules != found[0] for rules in found):
        return {}, ("prefill: the traces record different prefill chunkings; none is used "
                    "(a prefill is costed as one pass per sequence)",)
    return {role: rule.to_list() for role, rule in found[0].items()}, ()
