"""The demo's diagnostic replays (``psdlab demo --diagnostics``): the same runs under
acceptance models that are not predictions (``DIAGNOSTICS`` from the model file: the id-keyed
replay of the calibration match patterns, per-position rates only; and `own_outcomes`: every
run's own match patterns, which leaves only the timing model's error).
"""
from __future__ import annotations

from typing import Any, Sequence

from psdlab.sim.costs.fitted import FitFile
from psdlab.validation.acceptance.match_patterns import match_patterns
from psdlab.validation.validate import validate


#: the diagnostic acceptance models replayed beside the prediction (name in the model file)
DIAGNOSTICS = (("matches", "with the id-keyed replay of the calibration runs' match patterns "
                           "(diagnostic: exact where it knows the request id)"),
               ("positional", "with per-position rates only (no style, spread or trend)"))


def diagnostic_acceptance(model: FitFile, named: Sequence[tuple[str, Any]],
                          seeds: Sequence[int], measured: Sequence[Any]
                          ) -> list[tuple[str, Any]]:
    """The same replays under each model of ``DIAGNOSTICS`` the model file has (other than
    its default, the prediction)."""
    acc = (model.doc.get("meta") or {}).get("acceptance") or {}
    groups = {m.spec.name: m.spec.config for m in measured}
    out = []
    for name, label in DIAGNOSTICS:
        if name in acc and name != acc.get("default"):
            out.append((label, validate(model, named, seeds=seeds,
                                        acceptance=dict(acc[name]), groups=groups)))
    own = own_outcomes(named, acc.get("positional"))
    if own is not None:
        out.append((OWN_LABEL, validate(model, named, seeds=seeds, acceptance=own,
                                        groups=groups)))
    return out


#: the label of the replay that knows every run's own acceptance (``own_outcomes``)
OWN_LABEL = ("with every run's own match patterns, held-out runs included (diagnostic, not a "
             "prediction: acceptance known exactly, so what is left is the timing model)")


def own_outcomes(named: Sequence[tuple[str, Any]], fallback: dict[str, Any] | None
                 ) -> dict[str, Any] | None:
    """The ``matches`` acceptance of all the runs' greedy match patterns, the held-out runs'
    own included: with acceptance known request by request, the replay's remaining error is
    the cost and scheduling model's, which separates it from the acceptance model's.  None
    when the runs are not greedy or there are no per-position rates to fall back on."""
    if not fallback:
        return None
    patterns = match_patterns([t for _, t in named])
    return None if patterns is None else patterns.spec(fallback)
