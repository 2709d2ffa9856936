"""The acceptance models by name: ``make_acceptance(spec)`` builds any of them.

The per-token and per-position models live in ``sim.acceptance``; the pattern-based ones
(``matches``, ``fitted``, ``resampled``) in their own modules, which import only
``sim.acceptance``: this registry is the one module that knows them all.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from psdlab.sim.acceptance import BASIC_MODELS, AcceptanceModel, make_basic_acceptance
from psdlab.sim.acceptance_fitted import make_fitted
from psdlab.sim.acceptance_matches import make_matches
from psdlab.sim.acceptance_resampled import make_resampled

_BUILDERS: dict[str, Callable[[Mapping[str, Any], str], AcceptanceModel]] = {
    **{name: make_basic_acceptance for name in BASIC_MODELS},
    "matches": make_matches,
    "fitted": make_fitted,
    "resampled": make_resampled,
}
ACCEPTANCE_MODELS = tuple(_BUILDERS)


def make_acceptance(spec: Mapping[str, Any], where: str = "acceptance") -> AcceptanceModel:
    """Build an acceptance model from its spec (``{"name": ..., ...}``; ``sim.acceptance``)."""
    if not isinstance(spec, Mapping):
        raise ValueError(f"{where}: expected a table with a 'name', got {spec!r}")
    name = spec.get("name")
    if name not in _BUILDERS:
        raise ValueError(f"{where}.name: unknown acceptance model {name!r}; known: "
                         f"{', '.join(ACCEPTANCE_MODELS)}")
    return _BUILDERS[str(name)](spec, where)
