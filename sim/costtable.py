"""Memoised step costs for the fast path's one-pass sweep (``sim.step_layout``).

A phase's cost depends on a few integers (sequences n, context tokens C or prefill tokens), so
the sweep looks costs up in tables instead of calling the cost model once per step.  A table is
filled lazily, one chunk of ``WIDTH`` consecutive x values for one n at a time, by one
vectorised call of the *same* functions the planner uses on its arrays (element by element, so
a value is the same float wherever it sits in an array): a table entry is bit-identical to what
the step-by-step path computes for that step.
"""
from __future__ import annotations

from array import array
from typing import Callable

import numpy as np

from psdlab.sim.step_plan import prefill_time

SHIFT = 10
WIDTH = 1 << SHIFT
MASK = WIDTH - 1
NBITS = 40          # chunk key: (n << NBITS) | (x >> SHIFT)


class PairTable:
    """f_i(n, x) for integers 0 <= n <= n_max and 0 <= x < 2**(NBITS + SHIFT), for a few
    functions f_i of int64 arrays (e.g. a step's verify and draft costs, which share their key
    in the sweep).  A chunk holds WIDTH consecutive x for one n, as arrays of doubles (8 bytes
    an entry; only the chunks a run touches are filled).

    Look-up (inlined in hot loops): ``key = (n << NBITS) | (x >> SHIFT)``, ``chunk =
    t.chunks.get(key) or t.fill(key)`` (a tuple, one array per function), then
    ``chunk[i][x & MASK]``."""

    def __init__(self, fns: list[Callable[[np.ndarray, np.ndarray], np.ndarray]], n_max: int):
        self.fns, self.n_max = list(fns), int(n_max)
        self.chunks: dict[int, tuple[array, ...]] = {}
        self._x = np.arange(WIDTH, dtype=np.int64)

    def fill(self, key: int) -> tuple[array, ...]:
        n = key >> NBITS
        if not 0 <= n <= self.n_max:
            raise ValueError(f"cost table: n must be in [0, {self.n_max}], got {n}")
        x = self._x + (key & ((1 << NBITS) - 1)) * WIDTH
        nn = np.full(WIDTH, n, np.int64)
        vals = tuple(array("d", np.ascontiguousarray(fn(nn, x), dtype=np.float64).tobytes())
                     for fn in self.fns)
        self.chunks[key] = vals
        return vals

    def get(self, n: int, x: int) -> tuple[float, ...]:
        if x < 0:
            raise ValueError(f"cost table: x must be >= 0, got {x}")
        key = (n << NBITS) | (x >> SHIFT)
        ch = self.chunks.get(key) or self.fill(key)
        return tuple(col[x & MASK] for col in ch)


def _verify_fn(planner, k: int):
    def fn(n: np.ndarray, c: np.ndarray) -> np.ndarray:
        return planner.verify_time(n, n * (k + 1), c)
    return fn


def _draft_fn(planner, k: int):
    def fn(n: np.ndarray, c: np.ndarray) -> np.ndarray:
        j = np.arange(k, dtype=np.int64)[:, None]
        npass = np.broadcast_to(n[None, :], (k, n.size))
        return planner.draft_time(npass, c[None, :] + j * n[None, :])
    return fn


def _prefill_fn(model):
    def fn(n: np.ndarray, tok: np.ndarray) -> np.ndarray:
        return prefill_time(model, n, tok)
    return fn


class CostTables:
    """The tables of one core (uniform k only).  ``work``: (verify, draft) seconds keyed by
    the row's (sequences, summed context), just (verify,) without a drafter (AR);
    ``prefill``: (target, drafter) seconds keyed by (sequences, prompt tokens)."""

    def __init__(self, core, share: "CostTables | None" = None):
        """``share``: the tables of an earlier core of the same models, k and m (a plan's
        trials of one configuration, `TableShare`): their entries are reused, not refilled."""
        pl, k, m = core.planner, core.k, core.m
        self.has_draft = core.drafter is not None and k > 0
        self.work: PairTable
        self.prefill: PairTable
        if share is not None:
            self.work, self.prefill = share.work, share.prefill
        else:
            fns = [_verify_fn(pl, k)] + ([_draft_fn(pl, k)] if self.has_draft else [])
            self.work = PairTable(fns, m)
            pf = [_prefill_fn(core.target)]
            if core.drafter is not None:
                pf.append(_prefill_fn(core.drafter))
            self.prefill = PairTable(pf, 2 * m + 1)
        self.models = (core.target, core.drafter)
        #: per request, the prefill passes beyond one per prompt of (target, drafter) (a
        #: chunked prefill, sim.costs); None for a model without a chunking rule, or none
        self.extra_passes = tuple(None if mdl is None or mdl.chunking is None
                                  else (mdl.prefill_passes(core.prompt) - 1).tolist()
                                  for mdl in self.models)

    def extra(self, lengths: np.ndarray) -> tuple[int, int]:
        """(target, drafter) prefill passes beyond one per prompt of these prompts."""
        xt, xd = (0 if mdl is None else int((mdl.prefill_passes(lengths) - 1).sum())
                  for mdl in self.models)
        return xt, xd

    def chunked_prefill(self, n: int, tokens: int, xt: int, xd: int) -> tuple[float, float]:
        """(target, drafter) seconds of a prefill of ``n`` prompts that take ``xt`` / ``xd``
        passes more than one a prompt: the planner's `prefill_time`, outside the table (rare:
        long prompts); 0.0 for a missing drafter."""
        pt, pd = (0.0 if mdl is None else
                  float(prefill_time(mdl, np.array([n + x]), np.array([tokens]))[0])
                  for mdl, x in zip(self.models, (xt, xd)))
        return pt, pd


class TableShare:
    """The cost tables of the first fast-path run among runs whose configurations differ only
    in their workload, requests and trace (a plan's bisection trials of one configuration,
    ``sim.capacity.evaluate_combo``), handed to the next ones: a table entry is a function of the
    models, k and m alone, so every run reads the same numbers it would have computed.  A run
    of another configuration (``key``) neither takes nor gives tables."""

    def __init__(self) -> None:
        self.key: str | None = None
        self.costs: CostTables | None = None

    @staticmethod
    def key_of(config) -> str:
        return repr((config.server, config.target, config.drafter, config.jitter))

    def offer(self, config) -> "CostTables | None":
        """The tables a run of ``config`` may reuse (None: build its own)."""
        return self.costs if self.key == self.key_of(config) else None

    def keep(self, config, costs: "CostTables | None") -> None:
        if costs is not None and self.costs is None:
            self.key, self.costs = self.key_of(config), costs
