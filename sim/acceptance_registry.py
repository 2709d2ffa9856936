"""The acceptance models by name: ``make_acceptance(spec)`` builds any of them.

The per-token and per-position models live in ``sim.acceptance``; the pattern-based ones
(``matches``, ``fitted``, ``resampled``) in their own modules, which import only
``sim.acceptance``: this registry is the one module that knows them all.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from psdlab.analysis.registry import Registry
from psdlab.sim.acceptance import BASIC_MODELS, AcceptanceModel, make_basic_acceptance
from psdlab.sim.acceptance_fitted import make_fitted
from psdlab.sim.acceptance_matches import make_matches
from psdlab.sim.acceptance_resampled import make_resampled

AcceptanceFactory = Callable[[Mapping[str, Any], str], AcceptanceModel]
#: the acceptance models by name (``psdlab.analysis.registry``; docs/registries.md)
ACCEPTANCE_REGISTRY: Registry[AcceptanceFactory] = Registry("acceptance model")
for _name in BASIC_MODELS:
    ACCEPTANCE_REGISTRY.add(_name, make_basic_acceptance)
ACCEPTANCE_REGISTRY.add("matches", make_matches)
ACCEPTANCE_REGISTRY.add("fitted", make_fitted)
ACCEPTANCE_REGISTRY.add("resampled", make_resampled)
ACCEPTANCE_MODELS = ACCEPTANCE_REGISTRY.names()


def make_acceptance(spec: Mapping[str, Any], where: str = "acceptance") -> AcceptanceModel:
    """Build an acceptance model from its spec (``{"name": ..., ...}``; ``sim.acceptance``)."""
    if not isinstance(spec, Mapping):
        raise ValueError(f"{where}: expected a table with a 'name', got {spec!r}")
    return ACCEPTANCE_REGISTRY.get(spec.get("name"), f"{where}.name")(spec, where)
