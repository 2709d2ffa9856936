"""How much a new prompt set's acceptance level differs from the sets written before it.

The shipped prompts (``runtime/data/prompts.jsonl``) come in splits, each written at its own
time by writers of its own (``WRITING_ORDER``).  The acceptance model learns a population of
prompts; a planner's next traffic is a new set.  This module measures, from greedy match
patterns of every prompt (``runtime.acceptance_probe``, untimed, so independent of the
machine's speed), how far each set's acceptance level lies from the others beyond what prompt
sampling alone explains, and how well simple rules fitted on the earlier sets predict the next
one (forward chaining: each set is predicted only from the sets written before it).

A set's level at draft length k is its acceptance rate -- accepted / proposed draft tokens over
every verification of every prompt, each pattern walked greedily at k once per output length
of ``lengths`` (``validation.acceptance_pool.walk``) -- as the timed runs measure it.  Its
sampling SE is a bootstrap over its prompts, resampled within each style.  The between-set SD
is the method-of-moments estimate sqrt(max(0, var(levels) - mean(SE^2))).

Pure numpy: no torch, no models; ``scripts/acceptance_by_set.py`` probes and prints.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from psdlab.validation.acceptance_pool import walk

#: the splits in the order they were written; ``train`` and ``heldout`` were written together
#: (the drafter was distilled on ``train``)
WRITING_ORDER = ("train", "heldout", "fresh", "fresh2", "fresh3", "fresh4", "fresh5", "fresh6",
                 "fresh7", "fresh8", "fresh9", "fresh10", "fresh11")
#: the sets written after ``train`` and ``heldout`` (the demo's pool draws on these only)
LATER = WRITING_ORDER[2:]


@dataclass(frozen=True)
class SetLevel:
    """One prompt set's acceptance level at one k."""
    split: str
    prompts: int
    rate: float
    se: float


def walk_lengths(plan: Any, n: int = 240) -> Counter:
    """How often each output length occurs among ``n`` requests drawn as ``plan`` (a
    ``validation.runs.Plan``) draws them: the weights patterns are walked with."""
    return Counter(plan.output_lengths(n))


def prompt_counts(pattern: str, k: int, lengths: Mapping[int, int]) -> tuple[float, float]:
    """(accepted, proposed) draft tokens of one pattern walked at k, once per output length
    (weighted by how often that length occurs)."""
    acc = prop = 0.0
    for length, n in lengths.items():
        for _, proposed, accepted in walk(pattern[:length], k):
            acc += n * accepted
            prop += n * proposed
    return acc, prop


def walked_counts(patterns: Sequence[str], k: int, lengths: Mapping[int, int]) -> np.ndarray:
    """[n, 2]: `prompt_counts` of each pattern."""
    return np.array([prompt_counts(p, k, lengths) for p in patterns], float).reshape(-1, 2)


def level(patterns: Sequence[str], styles: Sequence[str], k: int, lengths: Mapping[int, int],
          draws: int = 400, seed: int = 0) -> tuple[float, float]:
    """(rate, bootstrap SE) of a set of prompts: rate = sum accepted / sum proposed; the SE
    resamples prompts with replacement within each style (``draws`` times, ``seed``)."""
    return counts_level(walked_counts(patterns, k, lengths), styles, k, draws, seed)


def counts_level(counts: np.ndarray, styles: Sequence[str], k: int, draws: int = 400,
                 seed: int = 0) -> tuple[float, float]:
    """`level` of prompts whose `walked_counts` at k are already known."""
    if not len(counts):
        raise ValueError("patterns: a set needs at least one prompt")
    if counts[:, 1].sum() <= 0:
        raise ValueError(f"patterns: no draft token proposed at k={k} (patterns too short)")
    rate = float(counts[:, 0].sum() / counts[:, 1].sum())
    rng = np.random.default_rng(seed)
    groups = [np.flatnonzero(np.asarray(styles) == s) for s in sorted(set(styles))]
    boots = np.empty(draws)
    for d in range(draws):
        pick = np.concatenate([rng.choice(g, g.size) for g in groups])
        c = counts[pick].sum(axis=0)
        boots[d] = c[0] / c[1] if c[1] > 0 else rate
    return rate, float(boots.std(ddof=1)) if draws > 1 else 0.0


def between_set_sd(levels: Sequence[SetLevel]) -> float:
    """Method-of-moments SD of the set levels beyond their sampling SEs (0 when sampling
    explains all of the spread)."""
    if len(levels) < 2:
        return 0.0
    rates = np.array([lv.rate for lv in levels])
    ses = np.array([lv.se for lv in levels])
    return float(np.sqrt(max(0.0, rates.var(ddof=1) - np.mean(ses ** 2))))


def _pooled(earlier: Sequence[SetLevel]) -> float:
    """Every earlier prompt counted once: the levels weighted by their prompts."""
    w = np.array([lv.prompts for lv in earlier], float)
    return float(np.dot(w, [lv.rate for lv in earlier]) / w.sum())


def _previous(earlier: Sequence[SetLevel]) -> float:
    return earlier[-1].rate


def _trend(earlier: Sequence[SetLevel]) -> float:
    """A straight line through the earlier levels against their writing index, extended one
    set on (the previous level when there is only one)."""
    if len(earlier) < 2:
        return earlier[-1].rate
    x = np.arange(len(earlier), dtype=float)
    slope, icpt = np.polyfit(x, [lv.rate for lv in earlier], 1)
    return float(icpt + slope * len(earlier))


#: forward-chaining predictors of the next set's level from the earlier sets
PREDICTORS: dict[str, Callable[[Sequence[SetLevel]], float]] = {
    "pooled": _pooled, "previous set": _previous, "linear trend": _trend}


def forward_chain(levels: Sequence[SetLevel], first: int = 2
                  ) -> list[tuple[str, dict[str, float]]]:
    """For each set from index ``first`` on (in writing order): each predictor's relative
    error (predicted / measured - 1) using only the sets before it."""
    out = []
    for i in range(max(1, first), len(levels)):
        earlier = levels[:i]
        out.append((levels[i].split,
                    {name: f(earlier) / levels[i].rate - 1.0 for name, f in PREDICTORS.items()}))
    return out


def simulated_rate(model: Any, keys: Sequence[str], lengths: Mapping[int, int], k: int,
                   reps: int = 8, seed: int = 0) -> float:
    """The acceptance rate a simulated acceptance model (``sim.acceptance_fitted`` interface:
    ``request_params``, ``sample_at``) gives requests of ``keys`` walked greedily at k as
    ``validation.acceptance_pool.walk`` walks a pattern (proposals shortened near the end of
    the output), once per output length of ``lengths``, ``reps`` times (new request levels
    each time), seeded."""
    if not keys:
        raise ValueError("keys: need at least one request")
    rng = np.random.default_rng(seed)
    acc_sum = prop_sum = 0.0
    n = len(keys)
    for _ in range(reps):
        params = model.request_params(rng, n, list(keys))
        for length, weight in sorted(lengths.items()):
            pos = np.ones(n, dtype=int)
            while True:
                live = pos < length
                if not live.any():
                    break
                prop = np.where(live, np.minimum(k, length - pos - 1), 0)
                acc = np.zeros(n, dtype=int)
                draft = prop > 0
                if draft.any():
                    got = np.asarray(model.sample_at(rng, params[draft], k, pos[draft]))
                    acc[draft] = np.minimum(got, prop[draft])
                acc_sum += weight * float(acc.sum())
                prop_sum += weight * float(prop.sum())
                pos = np.where(live, pos + acc + 1, pos)
    return acc_sum / prop_sum if prop_sum > 0 else float("nan")
