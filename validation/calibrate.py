"""Calibrate the simulator's cost and acceptance models from traces alone.

Every phase of every step is one observation of a forward-pass cost model
``forward_time(seqs, new_tokens, context) = base + per_seq*seqs + per_token*new_tokens
+ per_context*context`` (the affine/fitted CostModel of ``sim/costs``), one per role:

- ``verify`` (target): one forward over ``seqs`` sequences and ``tokens`` verified tokens, with
  ``context`` = the phase's context tokens (``Phase.context``: sum over its sequences of the
  tokens already in the KV cache; 0 in traces that do not record it, which leaves
  ``per_context`` unidentified).
- ``draft`` (drafter): ``k = tokens / seqs`` one-token forwards, the j-th with context
  ``context + j * seqs``, so the phase time is
  ``k*base + tokens*(per_seq + per_token) + per_context*(k*context + seqs*k*(k-1)/2)``;
  ``per_seq`` and ``per_token`` cannot be told apart here and the sum is reported as
  ``per_token``.  This per-forward form is what lets a fit at some k predict other k.
- ``prefill`` (target, or drafter when the phase ran on the drafter's own device): one forward
  over the prompts.

Each is fitted by :func:`validation.fit.fit_nonneg` (relative-error NNLS, 95% CIs, held-out
error); a warning is raised when a held-out error exceeds 10%.  The acceptance models come from
:mod:`validation.acceptance_fit`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from analysis.trace import Phase, Trace
from validation.acceptance_fit import AcceptanceFit, fit_acceptance
from validation.fit import LinearFit, fit_nonneg

TERMS = ("base", "per_seq", "per_token", "per_context")
#: fits, the role whose forward they describe, and the column order tried for identifiability
FITS = {
    "verify": ("target", ("base", "per_token", "per_seq", "per_context")),
    "draft": ("drafter", ("base", "per_token", "per_context", "per_seq")),
    "prefill": ("target", ("base", "per_token", "per_seq", "per_context")),
    "drafter_prefill": ("drafter", ("base", "per_token", "per_seq", "per_context")),
}
WARN_HELDOUT = 0.10


@dataclass(frozen=True)
class Calibration:
    """Fitted cost models by fit name (see FITS), the acceptance fit, and what to know."""
    costs: dict[str, LinearFit]
    acceptance: AcceptanceFit | None
    sources: tuple[str, ...]
    ks: tuple[int, ...]
    ms: tuple[int, ...]
    skipped_phases: int = 0
    notes: tuple[str, ...] = field(default=())
    warnings: tuple[str, ...] = field(default=())


def phase_context(phase: Phase) -> float:
    return float(getattr(phase, "context", 0) or 0)


def phase_features(kind: str, phase: Phase) -> dict[str, float]:
    """The cost-model terms (by name) whose coefficients sum to this phase's time."""
    seqs, tokens, ctx = float(phase.seqs), float(phase.tokens), phase_context(phase)
    if kind == "draft":
        k = tokens / seqs
        return {"base": k, "per_seq": tokens, "per_token": tokens,
                "per_context": k * ctx + seqs * k * (k - 1) / 2}
    return {"base": 1.0, "per_seq": seqs, "per_token": tokens, "per_context": ctx}


def step_fit_names(phases: Sequence[Phase], drafter_device: str | None,
                   target_device: str | None) -> list[str]:
    """The fit each phase of one step belongs to.  A prefill phase is the drafter's when it ran
    on the drafter's own device; when both models share a device, a prefill phase that repeats
    an earlier prefill of the same step (same sequences and tokens) is the drafter's (the
    runtime and the simulator write the target's prefill first)."""
    names, seen = [], set()
    shared = drafter_device is not None and drafter_device == target_device
    for ph in phases:
        name = ph.kind
        if ph.kind == "prefill":
            key = (ph.device, ph.seqs, ph.tokens)
            if drafter_device and ph.device == drafter_device and not shared:
                name = "drafter_prefill"
            elif shared and key in seen:
                name = "drafter_prefill"
            seen.add(key)
        names.append(name)
    return names


def collect_phases(traces: Sequence[Trace]) -> tuple[dict[str, list[tuple[Phase, float]]], int]:
    """Group usable phases by fit name; returns ({fit: [(phase, duration)]}, skipped count)."""
    groups: dict[str, list[tuple[Phase, float]]] = {name: [] for name in FITS}
    skipped = 0
    for tr in traces:
        drafter, target = tr.run.devices.get("drafter"), tr.run.devices.get("target")
        for step in tr.steps:
            for ph, name in zip(step.phases, step_fit_names(step.phases, drafter, target)):
                duration = ph.end - ph.start
                if ph.seqs <= 0 or ph.tokens <= 0 or duration <= 0:
                    skipped += 1
                    continue
                groups[name].append((ph, duration))
    return groups, skipped


def design(fit: str, phases: Sequence[Phase]) -> np.ndarray:
    """Design matrix of a fit, columns in FITS[fit] order."""
    kind = "draft" if fit == "draft" else "verify"
    order = FITS[fit][1]
    rows = [phase_features(kind, ph) for ph in phases]
    return np.array([[r[t] for t in order] for r in rows], dtype=float).reshape(len(rows),
                                                                                len(order))


def fit_costs(groups: dict[str, list[tuple[Phase, float]]], *, holdout: float,
              seed: int) -> dict[str, LinearFit]:
    fits = {}
    for name, rows in groups.items():
        if not rows:
            continue
        X = design(name, [ph for ph, _ in rows])
        y = np.array([d for _, d in rows])
        if not any(phase_context(ph) for ph, _ in rows):
            # no context recorded: the draft column's k(k-1)/2 growth term alone would give
            # per_context a value that really belongs to the per-token terms; fix it at 0
            X[:, FITS[name][1].index("per_context")] = 0.0
        fits[name] = fit_nonneg(X, y, FITS[name][1], holdout=holdout, seed=seed)
    return fits


def _messages(fits: dict[str, LinearFit], groups) -> tuple[list[str], list[str]]:
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
        if lost:
            notes.append(f"{name}: {', '.join(lost)} not identifiable from these traces "
                         f"(fixed at 0)")
        if no_context:
            notes.append(f"{name}: the traces record no phase context (per_context fixed at 0)")
    if "draft" in fits:
        notes.append("draft: per_seq and per_token are one term in one-token drafting "
                     "forwards; their sum is reported as per_token")
    for name in ("verify", "draft"):
        if name not in fits:
            notes.append(f"{name}: no {name} phases in the traces")
    return notes, warnings


def calibrate(traces: Sequence[Trace], *, holdout: float = 0.2, seed: int = 0) -> Calibration:
    """Fit cost and acceptance models to traces (module docstring)."""
    if not traces:
        raise ValueError("traces: need at least one trace")
    groups, skipped = collect_phases(traces)
    if not any(groups.values()):
        raise ValueError("traces: no timed phases with sequences and tokens to fit")
    fits = fit_costs(groups, holdout=holdout, seed=seed)
    notes, warnings = _messages(fits, groups)
    if skipped:
        notes.append(f"{skipped} phases with no sequences, tokens or duration were skipped")
    try:
        acceptance = fit_acceptance(traces, seed=seed)
        notes.extend(f"acceptance: {n}" for n in acceptance.notes)
    except ValueError as exc:
        acceptance = None
        notes.append(str(exc))
    return Calibration(costs=fits, acceptance=acceptance,
                       sources=tuple(sorted({t.run.source for t in traces})),
                       ks=tuple(sorted({t.run.k for t in traces})),
                       ms=tuple(sorted({t.run.m for t in traces})), skipped_phases=skipped,
                       notes=tuple(notes), warnings=tuple(warnings))


def predict_phases(cal: Calibration, traces: Sequence[Trace]) -> dict[str, tuple[np.ndarray,
                                                                               np.ndarray]]:
    """Predicted and measured phase times, by fit, for traces not necessarily fitted on."""
    groups, _ = collect_phases(traces)
    out = {}
    for name, rows in groups.items():
        if rows and name in cal.costs:
            X = design(name, [ph for ph, _ in rows])
            out[name] = (cal.costs[name].predict(X), np.array([d for _, d in rows]))
    return out


def forward_coefficients(fit: LinearFit) -> dict[str, float]:
    """The fit as per-forward CostModel coefficients (all four terms, 0 where unidentified)."""
    c = fit.coefficients()
    return {t: float(c.get(t, 0.0)) for t in TERMS}
