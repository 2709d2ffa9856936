"""The phase-time model's data: phases taken from traces, their features and design matrices,
the ``Calibration`` that holds the fitted per-phase models, and its predictions.

``validation.calibrate`` fits these models; the replay parameters (``validation.replay_model``),
the solo times (``validation.solo_times``) and the model file (``validation.model_file``) read
them.  Kept apart from the fitting so that every one of those imports downwards.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping, Sequence

import numpy as np

from psdlab.analysis.contention import Contention
from psdlab.analysis.trace import Phase, Trace
from psdlab.sim.costs.affine import AFFINE_TERMS
from psdlab.validation.acceptance.fit import AcceptanceFit
from psdlab.validation.cost_tables import phase_context
from psdlab.validation.nnls_fit import LinearFit

#: fits, the role whose forward they describe, and the column order tried for identifiability
FITS = {
    "verify": ("target", ("base", "per_token", "per_seq", "per_context")),
    "draft": ("drafter", ("base", "per_token", "per_context", "per_seq", "per_phase")),
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
    replay: Any = None      # validation.replay_model.ReplayParams (None: not measured)
    #: (seqs, tokens, mean s, phases, mean context): ``validation.cost_tables``
    verify_table: tuple[tuple[int, int, float, int, float], ...] = ()
    draft_table: tuple[tuple[int, int, float, int, float], ...] = ()   # one drafting pass
    prefill_chunking: dict[str, list[int]] = field(default_factory=dict)   # role: [chunk, leave]
    context_probe: dict[str, Any] | None = None     # runtime.context_timing's result, if used
    #: what PSD's overlapped steps rest on when no calibration trace overlapped
    #: (``analysis.contention``: a co-run probe's fit or a stated default); None: fitted on
    #: the traces' own overlapped phases
    contention: Contention | None = None


@dataclass(frozen=True)
class DraftPhase(Phase):
    """A draft phase with its number of one-token drafting passes (the longest proposal among
    its sequences, read from the verification of its drafts)."""
    forwards: int = 0


def _proposals(step: Any) -> list[int]:
    return [v.proposed for v in step.verified if v.proposed > 0]


def with_draft_forwards(trace: Trace) -> Trace:
    """The trace with each draft phase's pass count attached (``DraftPhase``) where the rows
    that verified its drafts are found -- the same step for a serial SD step, else the next
    step that verifies -- and agree with it (as many sequences, as many tokens).  A sequence
    near the end of its output drafts fewer than k tokens, so tokens / sequences undercounts
    the passes of such a phase."""
    steps, out = trace.steps, []
    for i, s in enumerate(steps):
        if not any(p.kind in ("draft", "verify") and not isinstance(p, DraftPhase)
                   for p in s.phases):
            out.append(s)
            continue
        serial_sd = not s.overlapped and any(p.kind == "verify" for p in s.phases)
        src = s if serial_sd else next((x for x in steps[i + 1:] if x.verified), None)
        props = _proposals(src) if src is not None else []
        phases = []
        for p in s.phases:
            if (p.kind == "draft" and not isinstance(p, DraftPhase) and props
                    and len(props) == p.seqs and sum(props) == p.tokens):
                p = DraftPhase(**{f.name: getattr(p, f.name) for f in fields(Phase)},
                               forwards=max(props))
            phases.append(p)
        out.append(replace(s, phases=tuple(padded_verify(s, phases))))
    return replace(trace, steps=out)


def padded_verify(step: Any, phases: list[Phase]) -> list[Phase]:
    """Verify phases with ``tokens`` = the padded batch the target computes, sequences x
    (1 + longest proposal), when every row had one pending token (tokens = sequences + sum of
    proposals): the runtime pads ragged rows, so a capped row costs as much as a full one."""
    rows = [v.proposed for v in step.verified]
    out = []
    for p in phases:
        if (p.kind == "verify" and rows and len(rows) == p.seqs
                and p.tokens == p.seqs + sum(rows)):
            p = replace(p, tokens=p.seqs * (1 + max(rows)))
        out.append(p)
    return out


def phase_features(kind: str, phase: Phase) -> dict[str, float]:
    """The cost-model terms (by name) whose coefficients sum to this phase's time."""
    seqs, tokens, ctx = float(phase.seqs), float(phase.tokens), phase_context(phase)
    if kind == "draft":
        k = float(getattr(phase, "forwards", 0) or tokens / seqs)
        return {"base": k, "per_seq": tokens, "per_token": tokens,
                "per_context": k * ctx + seqs * k * (k - 1) / 2, "per_phase": 1.0}
    if phase.kind == "prefill" and phase.chunks:
        seqs = float(phase.chunks)     # each pass over a prompt chunk pays a slot's fixed cost
    return {"base": 1.0, "per_seq": seqs, "per_token": tokens, "per_context": ctx,
            "per_phase": 0.0}


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


#: decode fits whose context slope is read off the variation within shapes
def predict_phases(cal: Calibration, traces: Sequence[Trace]) -> dict[str, tuple[np.ndarray,
                                                                               np.ndarray]]:
    """Predicted and measured phase times, by fit, for traces not necessarily fitted on."""
    groups, _ = collect_phases([with_draft_forwards(t) for t in traces])
    out = {}
    for name, rows in groups.items():
        if rows and name in cal.costs:
            X = design(name, [ph for ph, _ in rows])
            out[name] = (cal.costs[name].predict(X), np.array([d for _, d in rows]))
    return out


def forward_coefficients(fit: LinearFit) -> dict[str, float]:
    """The fit as per-forward CostModel coefficients (all four terms, 0 where unidentified)."""
    c = fit.coefficients()
    return {t: float(c.get(t, 0.0)) for t in AFFINE_TERMS}


def phase_overhead(fit: LinearFit) -> float:
    """The draft fit's fixed cost per drafting phase (seconds; 0 for other fits)."""
    return float(fit.coefficients().get("per_phase", 0.0))


def serial_only(trace: Trace) -> Trace:
    """The trace without its overlapped steps (for fitting the cost models)."""
    return replace(trace, steps=[s for s in trace.steps if not s.overlapped])


def calibration_view(model: Mapping[str, Any]) -> Any:
    """A Calibration holding the model file's fits (for predict_phases)."""
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
