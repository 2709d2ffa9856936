"""The calibrated model file: what ``psdlab calibrate -o MODEL.json`` writes and the simulator
loads by name -- ``sim.costs.make_cost_model({"name": "fitted", "path": "MODEL.json", "role":
"target" | "drafter"})`` for costs and ``make_acceptance(acceptance_spec(read_fit_file(path,
"model").doc))`` for acceptance.

The file is the fit file of ``sim/costs/fitted.py`` (format ``psdlab.cost-fit``, version 1),
read with its ``read_fit_file`` and written with its ``write_fit`` (which checks every role
builds); this module makes what is specific to calibration (``model_parts``: the roles and the
meta), times in seconds::

    {"format": "psdlab.cost-fit", "version": 1,
     "roles": {
       "target":          {"kind": "affine", "coef": {"base", "per_seq", "per_token",
                                                      "per_context"},
                           "ci95": {term: [lo, hi]}, "residual_cv": cv, "n": phases},
       "drafter":         {...same: ONE one-token drafting forward; a draft phase of k
                           tokens is k of them, the j-th with context + j * seqs},
       "target:prefill":  {...fitted on the target's prefill phases alone},
       "drafter:prefill": {...only when the drafter prefilled on its own device}},
     "meta": {
       "acceptance": {"default": name, "positional": {"name": "positional", "rates": [...]},
                      "beta": {"name": "beta", "mean": m, "concentration": c},
                      "geometric": {"name": "geometric", "alpha": a}},   # those identified
       "acceptance_fit": {rates with 95% CIs, trials, Beta with CIs, VSR, notes},
       "fits": {"verify" | "draft" | "prefill" | "drafter_prefill": {coef, ci95, identified,
                n, n_heldout, heldout_error, heldout_total_error, fit_error, residual_cv}},
       "replay": {overlap contention and factors, controller overhead per step, step-time
                  spread: validation.replay_model.ReplayParams},
       "tables": {"target": [[seqs, padded tokens, mean solo seconds, phases,
                              mean context], ...],
                  "drafter": [[seqs, seqs, mean seconds of one pass, phases,
                               mean pass context], ...]},   (validation.cost_tables)
       "prefill_chunking": {"target": [chunk, leave], "drafter": [chunk, leave]},
                  (how the engine fed prompts, analysis.chunking; the prefill fits' per_seq
                   is then per pass, and sim.costs' calibrated model charges it so)
       "calibration": {"traces", "sources", "k", "m", "holdout", "seed", "notes",
                       "warnings"},
       "acceptance_transfer": {the acceptance model chosen for new prompts by
                               cross-validation,
                               validation.acceptance.cross_validation.Selection.to_dict:
                               chosen, spec, scores, prompts, criterion, method}}}

With a selection (``acceptance_transfer``), its chosen model is also ``meta.acceptance.fitted``
and the file's default acceptance.  ``write_fit(path, *model_parts(cal, ...))`` is the one
writer: ``psdlab calibrate`` and the demo (``validation.calibrate_files.calibrate_to_file``)
both write through it.

Unbounded interval ends (too few phases) are written as null.
"""
from __future__ import annotations

import math
import os
from typing import Any, Mapping, Sequence

from psdlab.sim.costs.affine import AFFINE_TERMS
from psdlab.validation.phase_model import Calibration, forward_coefficients, phase_overhead

#: role name in the file for each fit of validation.calibrate.FITS
ROLE_OF_FIT = {"verify": "target", "draft": "drafter", "prefill": "target:prefill",
               "drafter_prefill": "drafter:prefill"}
ROLES = ("target", "drafter")


def _clean(obj: Any) -> Any:
    """Replace non-finite floats (an unbounded CI) by None so the file is strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def role_docs(cal: Calibration) -> dict[str, dict[str, Any]]:
    """The fit file's ``roles``: one affine role per fitted phase kind."""
    roles = {}
    for fit_name, fit in cal.costs.items():
        doc = {
            "kind": "affine", "coef": forward_coefficients(fit),
            "ci95": {t: [lo, hi] for t, lo, hi in zip(fit.names, fit.ci_low, fit.ci_high)},
            "residual_cv": fit.residual_cv if math.isfinite(fit.residual_cv) else None,
            "n": fit.n}
        if phase_overhead(fit) > 0:
            doc["phase_overhead"] = phase_overhead(fit)
        roles[ROLE_OF_FIT[fit_name]] = _clean(doc)
    return roles


def acceptance_doc(cal: Calibration, transfer: Mapping[str, Any] | None = None
                   ) -> dict[str, Any]:
    """``meta.acceptance``: the calibration's acceptance specs and default; with a selection
    (``transfer``: ``Selection.to_dict()``), its chosen spec as ``fitted``, the default."""
    acceptance: dict[str, Any] = {}
    if cal.acceptance is not None:
        acceptance = dict(cal.acceptance.specs())
        if acceptance:
            acceptance["default"] = cal.acceptance.default
    if transfer is not None:
        acceptance["fitted"] = dict(transfer["spec"])
        acceptance["default"] = "fitted"
    return acceptance


def meta_doc(cal: Calibration, *, traces: Sequence[str] = (), holdout: float = 0.2,
             seed: int = 0, transfer: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The file's ``meta`` (module docstring); ``transfer``: the acceptance selection's
    ``Selection.to_dict()``, or None."""
    acceptance = acceptance_doc(cal, transfer)
    return _clean({
        "acceptance": acceptance,
        "acceptance_fit": None if cal.acceptance is None else cal.acceptance.to_dict(),
        "fits": {name: fit.to_dict() for name, fit in cal.costs.items()},
        **({"replay": cal.replay.to_dict()} if cal.replay is not None else {}),
        **({"tables": {role: [list(r) for r in rows] for role, rows in
                       (("target", cal.verify_table), ("drafter", cal.draft_table)) if rows}}
           if cal.verify_table or cal.draft_table else {}),
        **({"prefill_chunking": dict(cal.prefill_chunking)} if cal.prefill_chunking else {}),
        **({"context_probe": dict(cal.context_probe)} if cal.context_probe else {}),
        **({"contention": cal.contention.to_dict()} if cal.contention is not None else {}),
        "calibration": {"traces": list(traces), "sources": list(cal.sources),
                        "k": list(cal.ks), "m": list(cal.ms), "holdout": holdout, "seed": seed,
                        "notes": list(cal.notes), "warnings": list(cal.warnings)},
        **({"acceptance_transfer": dict(transfer)} if transfer is not None else {}),
    })


def model_parts(cal: Calibration, *, traces: Sequence[str] = (), holdout: float = 0.2,
                seed: int = 0, transfer: Mapping[str, Any] | None = None
                ) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """The model file's ``roles`` and ``meta`` (module docstring) for
    ``sim.costs.fitted.write_fit``: the calibration, the traces it was fitted on (as named by
    the caller), its held-out fraction and seed, and the acceptance selection (``transfer``:
    ``validation.acceptance.cross_validation.Selection.to_dict()``) when one was made."""
    if not cal.costs:
        raise ValueError("calibration: no cost model was fitted; nothing to write")
    return role_docs(cal), meta_doc(cal, traces=traces, holdout=holdout, seed=seed,
                                    transfer=transfer)


def role_coefficients(model: dict[str, Any], role: str, *, prefill: bool = False
                      ) -> dict[str, float]:
    """The four per-forward coefficients of a role (``prefill``: of its prefill fit, falling
    back to the role's own fit when there is none)."""
    roles = model["roles"]
    if role not in roles:
        raise ValueError(f"role: the model has no {role!r} fit (has: {', '.join(roles)})")
    doc = roles.get(f"{role}:prefill", roles[role]) if prefill else roles[role]
    return {t: float(doc["coef"].get(t, 0.0)) for t in AFFINE_TERMS}


def role_cost_spec(path: str | os.PathLike, role: str) -> dict[str, Any]:
    """The ``sim.costs.make_cost_model`` spec that loads this file for a role."""
    if role not in ROLES and role not in ROLE_OF_FIT.values():
        raise ValueError(f"role: must be one of {', '.join(ROLE_OF_FIT.values())}, got {role!r}")
    return {"name": "fitted", "path": os.fspath(path), "role": role}


def acceptance_spec(model: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    """The ``sim.acceptance_registry.make_acceptance`` spec stored in a model (default: the
    file's)."""
    acc = (model.get("meta") or {}).get("acceptance") or {}
    name = name or acc.get("default")
    if not name or name == "default" or name not in acc:
        have = [k for k in acc if k != "default"]
        raise ValueError(f"acceptance: the model has no {name!r} acceptance model "
                         f"(has: {', '.join(have) or 'none'})")
    return dict(acc[name])
