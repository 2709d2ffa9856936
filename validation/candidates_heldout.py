"""After the fact: every acceptance candidate on the held-out runs.

The acceptance model is chosen by cross-validation over the calibration prompts
(``validation.acceptance_cv``), before any held-out run is replayed.  Once the prediction is
made, a user still wants to know how the candidates that lost would have done on the prompts
the calibration never saw: ``candidates_held_out`` refits each on the calibration runs
(``acceptance_cv.candidate_specs``) and replays the held-out runs with it, and
``candidates_md`` is its report table.  It is never used to choose.  The losing candidates
are replayed with the first simulator seed only (the table ranks them; five seeds would make it
half of the demo's analysis time, which the 15-minute budget cannot spare on a slow machine);
the chosen one's row is the prediction itself, every seed.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from psdlab.validation.report import fmt_err, fmt_num, md_table
from psdlab.validation.runs import Measured

#: the judged targets the after-the-fact table of candidates lists (summary labels)
CANDIDATE_TARGETS = ("throughput", "TPOT mean", "e2e p99", "PSD/SD gain (throughput)")


def candidates_held_out(model_path: str, named: Sequence[tuple[str, Any]],
                        measured: Sequence[Measured], seeds: Sequence[int],
                        selection: dict[str, Any] | None,
                        pool: dict[str, str] | None = None,
                        prediction: Any = None) -> list[dict[str, Any]]:
    """After the fact, never used to choose: every acceptance candidate of the
    cross-validation (``validation.acceptance_cv.candidate_specs``, refitted on the
    calibration runs and the acceptance ``pool``) replayed on the held-out runs (first seed),
    with its worst error per judged target; the chosen one's row is the prediction's own
    (``prediction``, the demo's validation, when given; else replayed with every seed)."""
    from psdlab.validation.acceptance_cv import candidate_specs
    from psdlab.validation.validate import validate
    cal = [t for (_, t), m in zip(named, measured) if m.spec.role == "calibrate"]
    held = [(n, t) for (n, t), m in zip(named, measured) if m.spec.role == "validate"]
    if not cal or not held or not selection:
        return []
    groups = {m.spec.name: m.spec.config for m in measured}
    configs = {m.spec.config for m in measured if m.spec.role == "validate"}
    scores = {r["candidate"]: r for r in selection.get("scores", [])}
    rows = []
    for name, spec in candidate_specs(cal, pool=pool):
        chosen = bool((scores.get(name) or {}).get("chosen"))
        v = (prediction if chosen and prediction is not None else
             validate(model_path, held, seeds=seeds if chosen else seeds[:1], acceptance=spec,
                      groups=groups))
        worst = {s["target"]: s["max_abs_error"] for s in v.summary(configs)
                 if s["target"] in CANDIDATE_TARGETS}
        rows.append({"candidate": name, "cv_crps": (scores.get(name) or {}).get("cv_crps"),
                     "chosen": chosen, "seeds": len(seeds) if chosen else 1,
                     "heldout_max_abs_error": worst})
    return rows


def candidates_md(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The after-the-fact table: every acceptance candidate's worst held-out error."""
    if not rows:
        return []
    from psdlab.validation.validate import TARGETS
    kind = {label: k for label, _, _, _, k in TARGETS}

    def cell(r: Mapping[str, Any], t: str) -> str:
        v = r["heldout_max_abs_error"].get(t)
        return "n/a" if v is None else fmt_err(kind[t], v)

    return ["### After the fact: every candidate on the held-out runs", "",
            "Not used to choose (the choice above was made on the calibration prompts "
            "before any held-out run was replayed): each candidate refitted on the "
            "calibration runs and replayed on the held-out runs (first simulator seed; the "
            "chosen one: the prediction, every seed); worst |error| per judged target.", "",
            md_table(["candidate", "CV CRPS", *CANDIDATE_TARGETS, "chosen"],
                     [[r["candidate"], fmt_num(r.get("cv_crps"), ".4f"),
                       *[cell(r, t) for t in CANDIDATE_TARGETS],
                       "yes" if r.get("chosen") else ""] for r in rows]), ""]
