"""The demo's diagnostic replays beside the prediction: the same runs under acceptance models
that are not predictions (``DIAGNOSTICS`` from the model file: the id-keyed replay of the
calibration match patterns, per-position rates only; and `own_outcomes`: every run's own match
patterns, which leaves only the timing model's error; `replay_demo_folder`: a demo folder's
runs replayed that way, what the diagnostic scripts of ``scripts/`` read).
"""
from __future__ import annotations

from typing import Any, Sequence


#: the diagnostic acceptance models replayed beside the prediction (name in the model file)
DIAGNOSTICS = (("matches", "with the id-keyed replay of the calibration runs' match patterns "
                           "(diagnostic: exact where it knows the request id)"),
               ("positional", "with per-position rates only (no style, spread or trend)"))


def diagnostic_acceptance(model_path: str, named: Sequence[tuple[str, Any]],
                          seeds: Sequence[int], measured: Sequence[Any]
                          ) -> list[tuple[str, Any]]:
    """The same replays under each model of ``DIAGNOSTICS`` the model file has (other than
    its default, the prediction)."""
    from psdlab.validation.model_file import read_model
    from psdlab.validation.validate import validate
    acc = (read_model(model_path).get("meta") or {}).get("acceptance") or {}
    groups = {m.spec.name: m.spec.config for m in measured}
    out = []
    for name, label in DIAGNOSTICS:
        if name in acc and name != acc.get("default"):
            out.append((label, validate(model_path, named, seeds=seeds,
                                        acceptance=dict(acc[name]), groups=groups)))
    own = own_outcomes(named, acc.get("positional"))
    if own is not None:
        out.append((OWN_LABEL, validate(model_path, named, seeds=seeds, acceptance=own,
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
    from psdlab.validation.match_patterns import match_patterns
    if not fallback:
        return None
    patterns = match_patterns([t for _, t in named])
    return None if patterns is None else patterns.spec(fallback)


def replay_demo_folder(demo: str, configs: Sequence[str] = (), model: str | None = None
                       ) -> tuple[Any, str | None]:
    """A demo folder's runs of ``configs`` (default: every one) replayed with every run's own
    match patterns (first simulator seed), with ``model`` (default: the folder's model.json):
    (the ``validate`` result, None), or (None, a one-line error naming what is missing)."""
    import glob
    import os
    from psdlab.analysis.trace import read_trace
    from psdlab.validation.model_file import read_model
    from psdlab.validation.validate import validate
    own_model = os.path.join(demo, "model.json")
    if not os.path.isfile(own_model):
        return None, f"demo: no model.json in {demo}"
    named = []
    for path in sorted(glob.glob(os.path.join(demo, "traces", "*.jsonl"))):
        tr = read_trace(path)
        named.append((str((tr.run.extra or {}).get("demo_run", path)), tr))
    groups = {n: str((t.run.extra or {}).get("demo_config", n)) for n, t in named}
    wanted = set(configs) or set(groups.values())
    missing = sorted(wanted - set(groups.values()))
    if missing:
        return None, f"configs: no traces of {', '.join(missing)} in {demo}"
    acc = (read_model(own_model).get("meta") or {}).get("acceptance") or {}
    own = own_outcomes(named, acc.get("positional"))
    if own is None:
        return None, "demo: the runs are not greedy, so they have no match patterns"
    chosen = [(n, t) for n, t in named if groups[n] in wanted]
    return validate(model or own_model, chosen, seeds=(0,), acceptance=own, groups=groups), None
