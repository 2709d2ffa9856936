"""The cost-model interface and its registry (Vidur style: models chosen by name in the config).

A cost model describes ONE model on ONE device (or one tensor-parallel group) and answers one
question: how many seconds does one forward pass take that processes ``new_tokens`` new tokens
in total for ``seqs`` sequences whose KV caches hold ``context_tokens`` tokens in total (before
this pass)?  Decode, verification of k drafts and prefill are all such passes.

A prefill of prompts the engine feeds in several passes each (``chunking``,
``analysis.chunking``) is costed as a pass over as many sequences as it has passes (the
simulator asks ``prefill_passes`` and calls ``forward_time(passes, tokens, 0)``); models
without a rule see the number of sequences.

``forward_time`` is numpy-vectorised: scalars in, a float out; arrays (broadcast together) in, an
array out.  A pass over an empty batch (seqs = 0) costs the model's fixed part; the servers do
not issue such passes.
"""
from __future__ import annotations

import abc
from typing import Any, Callable, Mapping, TypeVar

import numpy as np

from psdlab.analysis.registry import Registry

_SCALARS = (int, float)


class CostModel(abc.ABC):
    """Seconds for one forward pass; see the module docstring."""

    #: registry name of the model ("constant", "affine", "roofline", ...)
    kind: str = ""
    #: seconds a drafting phase costs once, on top of its k passes (the first pass's
    #: catch-up, the proposals' hand-back); the planner adds it per drafting phase
    phase_overhead: float = 0.0
    #: how the engine feeds a prefill's prompts (`analysis.chunking.Chunking`): a model that
    #: knows it charges a prefill's per-sequence cost per pass over a prompt chunk
    #: (`prefill_passes`); None: one pass per sequence, whatever the prompt's length
    chunking: Any = None

    def prefill_passes(self, lengths) -> np.ndarray:
        """The passes the engine feeds each of these prompts in (int64, one per prompt)."""
        if self.chunking is None:
            return np.ones(np.asarray(lengths).shape, dtype=np.int64)
        return self.chunking.passes_each(lengths)

    def forward_time(self, seqs, new_tokens, context_tokens):
        """Seconds for one pass; floats for scalar input, an ndarray for array input."""
        s, t, c, scalar = prepare_inputs(seqs, new_tokens, context_tokens)
        out = self._time(s, t, c)
        if scalar:
            return float(out)
        return np.asarray(out, dtype=float)

    def time_unchecked(self, s, t, c):
        """The formula on float arrays the caller guarantees valid (non-negative, one broadcast
        shape), without forward_time's per-call validation: for hot loops such as the
        simulator's step planner, whose counts are valid by construction."""
        return self._time(s, t, c)

    @abc.abstractmethod
    def _time(self, s, t, c):
        """The formula on validated floats or float arrays of one broadcast shape."""

    def describe(self) -> dict[str, Any]:
        """A JSON-able summary for the trace's run record."""
        return {"name": self.kind}


def prepare_inputs(seqs, new_tokens, context_tokens):
    """Validate the three counts; returns (s, t, c, is_scalar) as floats or float arrays."""
    if (type(seqs) in _SCALARS and type(new_tokens) in _SCALARS
            and type(context_tokens) in _SCALARS):
        if seqs < 0 or new_tokens < 0 or context_tokens < 0:
            raise ValueError(_negative_message(seqs, new_tokens, context_tokens))
        return float(seqs), float(new_tokens), float(context_tokens), True
    s, t, c = np.broadcast_arrays(np.asarray(seqs, dtype=float),
                                  np.asarray(new_tokens, dtype=float),
                                  np.asarray(context_tokens, dtype=float))
    if s.ndim == 0:
        return prepare_inputs(float(s), float(t), float(c))
    if (s < 0).any() or (t < 0).any() or (c < 0).any() or not (
            np.isfinite(s).all() and np.isfinite(t).all() and np.isfinite(c).all()):
        raise ValueError("forward_time: seqs, new_tokens and context_tokens must be finite and "
                         ">= 0")
    return s, t, c, False


def _negative_message(seqs, new_tokens, context_tokens) -> str:
    return (f"forward_time: seqs, new_tokens and context_tokens must be >= 0, got "
            f"{seqs!r}, {new_tokens!r}, {context_tokens!r}")


def vmax(a, b):
    """max for floats, np.maximum for arrays (keeps the scalar path free of numpy overhead)."""
    if type(a) is float and type(b) is float:
        return a if a >= b else b
    return np.maximum(a, b)


# ---------------------------------------------------------------------------- registry

CostFactory = Callable[[Mapping[str, Any], str], CostModel]
#: the cost models by name (``psdlab.analysis.registry``; docs/registries.md)
COST_MODELS: Registry[CostFactory] = Registry("cost model")
_Factory = TypeVar("_Factory", bound=CostFactory)   # keeps the factory's own return type


def register_cost_model(name: str) -> Callable[[_Factory], _Factory]:
    """Decorator: make a factory ``f(spec, where) -> CostModel`` available by name."""
    return COST_MODELS.register(name)


def make_cost_model(spec: Mapping[str, Any], where: str = "cost") -> CostModel:
    """Build a cost model from its spec dict, e.g. ``{"name": "constant", "time": 0.02}``.

    Unknown names or fields raise a one-line ValueError that names the field, prefixed by
    `where` (``cost.name``, ``cost.hardware``, ...)."""
    if not isinstance(spec, Mapping):
        raise ValueError(f"{where}: expected a table/dict with a 'name', got {spec!r}")
    return COST_MODELS.get(spec.get("name"), f"{where}.name")(spec, where)
