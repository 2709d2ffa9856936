"""Choose the acceptance model that transfers to new prompts: cross-validation over the
calibration prompts (never the held-out runs): leave-one-prompt-out, or ``MAX_FOLDS`` folds of
prompts when there are more (the acceptance pool, ``validation.acceptance.pool``, brings
hundreds), each left-out prompt scored on its own.

Candidates: the logistic ``fitted`` models of ``validation.acceptance.transfer`` (``CANDIDATES``)
and, for greedy traces, the ``resampled`` model (``sim.acceptance_resampled``: a new request
draws the whole match pattern of a calibration request of its style).  Each is fitted without
a fold's prompts and scored on each of them:

- **CV CRPS** (the choice): the continuous ranked probability score of the left-out prompt's
  accepted draft tokens per verification -- the quantity TPOT and end-to-end latency follow --
  against the candidate's predictive distribution for a new prompt of its style (``_DRAWS``
  draws: each draw one request level, or one drawn pattern, shared by all the prompt's
  verifications, at their k and output positions; every candidate's draws for one fold from
  the same seed, so their difference is not the draws' own noise).  A proper score of the
  per-prompt distribution, its spread and tails included, and one that every candidate has;
- **CV NLL per token** (parametric candidates only: a drawn pattern has no likelihood): the
  negative log-likelihood per tried draft token, the request level integrated out;
- **CV rms error of accepted tokens**: of the draws' mean against the prompt's own total.

The lowest mean CRPS wins and is refitted on all prompts.
"""
from __future__ import annotations

import contextlib
import sys
from dataclasses import asdict, dataclass, replace
from functools import partial
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from psdlab.analysis.trace import Trace
from psdlab.validation.acceptance.transfer import (CANDIDATES, Candidate, Cells, FittedModel,
                                                   Trials, fit_cells, prompt_of, score_cells)

#: draws of a left-out prompt's predictive distribution
_DRAWS = 256
#: the name of the pattern-resampling candidate
RESAMPLED = "resampled patterns (by style)"


@dataclass(frozen=True)
class ResampledModel:
    """The chosen ``resampled`` model: its spec is the whole model."""
    candidate: str
    model_spec: dict[str, Any]

    def spec(self) -> dict[str, Any]:
        return self.model_spec


#: up to this many prompts, every prompt is its own fold; beyond, ``MAX_FOLDS`` folds
MAX_FOLDS = 24


def folds(prompts: Sequence[str], max_folds: int = MAX_FOLDS) -> list[list[str]]:
    """The prompts each fit leaves out: every prompt alone (leave-one-prompt-out) when there
    are at most ``max_folds``, else ``max_folds`` folds dealt round-robin over the sorted
    prompts (so a style, whose prompts sort together, spreads over every fold).  Each
    left-out prompt is scored on its own either way."""
    unique = sorted(set(prompts))
    if len(unique) <= max_folds:
        return [[p] for p in unique]
    return [unique[f::max_folds] for f in range(max_folds)]


def crps(draws: np.ndarray, observed: float) -> float:
    """CRPS of an ensemble: E|X - y| - E|X - X'| / 2 (X, X' independent draws)."""
    x = np.sort(np.asarray(draws, dtype=float))
    n = x.size
    spread = 2.0 * float(np.sum(x * (2 * np.arange(n) - n + 1))) / (n * n)
    return float(np.mean(np.abs(x - observed))) - 0.5 * spread


def prompt_draws(spec: dict[str, Any], test: Trials, rng: np.random.Generator,
                 draws: int = _DRAWS) -> np.ndarray:
    """[draws] of a model's accepted tokens per verification over one prompt's verification
    rows (their k and starting output positions), a request drawn afresh per draw."""
    from psdlab.sim.acceptance_registry import make_acceptance
    return _draws(make_acceptance(spec), test.rows, rng, draws)


def _draws(acc: Any, rows: tuple[np.ndarray, ...], rng: np.random.Generator,
           draws: int = _DRAWS) -> np.ndarray:
    """``prompt_draws`` of a made model (a fitted or resampled one) on a prompt's rows."""
    from psdlab.sim.acceptance import KeyedAcceptanceModel
    assert isinstance(acc, KeyedAcceptanceModel)      # a fitted or resampled spec
    rp, rk, rn, _ = rows
    prompt = str(rp[0])
    params = np.asarray(acc.request_params(rng, draws, keys=[prompt] * draws), dtype=float)
    total = np.zeros(draws)
    for k in np.unique(rk):
        sel = np.flatnonzero(rk == k)
        got = acc.sample_at(rng, np.repeat(params, sel.size, axis=0), int(k),
                            np.tile(rn[sel], draws))
        total += np.asarray(got, dtype=float).reshape(draws, sel.size).sum(axis=1)
    return total / max(1, rk.size)


@dataclass(frozen=True)
class CandidateScore:
    """One candidate's cross-validation scores (None: nothing to score it on)."""
    candidate: str
    cv_crps: float | None
    cv_nll_per_token: float | None     # None for a candidate without a likelihood
    cv_accept_error: float | None      # rms relative error of the accepted tokens
    chosen: bool = False


@dataclass(frozen=True)
class Selection:
    chosen: FittedModel | ResampledModel
    scores: tuple[CandidateScore, ...]     # per candidate, in the candidates' order
    prompts: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"chosen": self.chosen.candidate, "spec": self.chosen.spec(),
                "scores": [asdict(r) for r in self.scores], "prompts": list(self.prompts),
                "criterion": "cv_crps",
                "method": ("leave-one-prompt-out" if len(self.prompts) <= MAX_FOLDS else
                           f"{MAX_FOLDS}-fold") + " cross-validation over the calibration "
                          "prompts (timed runs and acceptance pool)"}


def _patterns(traces: Sequence[Trace], pool: dict[str, str] | None = None
              ) -> dict[str, str] | None:
    """The runs' greedy match patterns plus the acceptance pool's (``validation.
    acceptance.pool``); None unless every trace is greedy."""
    from psdlab.validation.acceptance.fit import all_greedy
    from psdlab.validation.acceptance.match_patterns import match_patterns
    from psdlab.validation.acceptance.pool import merged_patterns
    if not all_greedy(traces):
        return None
    found = match_patterns(traces)
    return merged_patterns(None if found is None else found.patterns, pool, traces)


def _fallback(data: Trials) -> dict[str, Any]:
    """Per-position rates of ``data``'s verifications (the fallback of drawn patterns'
    unknown positions), kept off 0 and 1."""
    from psdlab.validation.acceptance.fit import positional_rates
    _, rk, _, ra = data.rows
    rates, _, _ = positional_rates(rk, ra.astype(int))
    return {"name": "positional",
            "rates": [float(np.clip(r, 1e-3, 1 - 1e-3)) for r in rates] or [0.5]}


def resampled_model(patterns: dict[str, str], data: Trials) -> ResampledModel:
    from psdlab.sim.acceptance_resampled import resampled_spec
    keep = set(data.prompt)
    mine = {rid: p for rid, p in patterns.items() if prompt_of(rid) in keep}
    return ResampledModel(RESAMPLED, resampled_spec(mine, _fallback(data)))


def _row(name: str, crps_sum: float, nll_sum: float, tok: float, errs: list[float],
         n: int, nll: bool) -> CandidateScore:
    return CandidateScore(
        candidate=name, cv_crps=crps_sum / n if n else None,
        cv_nll_per_token=nll_sum / tok if tok and nll else None,
        cv_accept_error=float(np.sqrt(np.mean(np.square(errs)))) if errs else None)


def _scored(acc: Any, rows: tuple[np.ndarray, ...], rng: np.random.Generator
            ) -> tuple[float, float]:
    d = _draws(acc, rows, rng)
    observed = float(rows[3].mean())
    err = (float(d.mean()) - observed) / observed if observed > 0 else 0.0
    return crps(d, observed), err


@dataclass(frozen=True)
class Fold:
    """One fit of the cross-validation: the trials without the fold's prompts (as ``Trials``
    and pooled, ``transfer.Cells``) and each left-out prompt's index and verification rows."""
    train: Trials
    cells: Cells
    tests: tuple[tuple[int, tuple[np.ndarray, ...]], ...] = ()


Model = FittedModel | ResampledModel
#: (name, how to fit it to a fold's trials -- from its fit to all of them, when given --,
#: whether it has a likelihood)
Builder = tuple[str, Callable[[Fold, Any], Model], bool]


def _fitted(cand: Candidate, fold: Fold, start: FittedModel | None = None) -> FittedModel:
    return fit_cells(cand, fold.cells, start)


def _resampled(patterns: dict[str, str], fold: Fold, start: Any = None) -> ResampledModel:
    return resampled_model(patterns, fold.train)


def _builders(candidates: Sequence[Candidate], patterns: dict[str, str] | None
              ) -> list[Builder]:
    """Every candidate with its fit: the logistic ones, then (greedy traces) resampling."""
    out: list[Builder] = [(c[0], partial(_fitted, c), True) for c in candidates]
    if patterns:
        out.append((RESAMPLED, partial(_resampled, patterns), False))
    return out


def _one_style(spec: dict[str, Any], prompt: str) -> dict[str, Any]:
    """A ``fitted`` spec with only ``prompt``'s style level (or none, when it has no level
    of its own): the same requests for that prompt, without looking its level up among
    every style's once per draw."""
    from psdlab.sim.acceptance_fitted import style_of
    style = style_of(prompt)
    return dict(spec, styles={s: v for s, v in spec["styles"].items() if s == style})


def _cv_row(name: str, build: Callable[[Fold, Any], Model], nll: bool, whole: Fold,
            folds: Sequence[Fold], tick: Callable[[], Any]) -> tuple[CandidateScore, Model]:
    """One candidate's CV scores and its fit to all the prompts (``whole``): fitted without
    each fold's prompts (starting from that fit's optimum), scored on each of them (draws
    seeded by the prompt, the same for every candidate); ``tick`` after each fold."""
    from psdlab.sim.acceptance_registry import make_acceptance
    c_sum = nll_sum = tok = 0.0
    errs = []
    cells = whole.cells
    everything = build(whole, None)
    for fold in folds:
        model = build(fold, everything)
        spec = model.spec()
        acc = make_acceptance(spec)
        for pi, rows in fold.tests:
            mine = make_acceptance(_one_style(spec, cells.prompts[pi])) if isinstance(
                model, FittedModel) else acc
            c, err = _scored(mine, rows, np.random.default_rng(pi))
            c_sum += c
            errs.append(abs(err))
            if nll and isinstance(model, FittedModel):
                test = cells.of_prompt(pi)
                weight = float(test.sw.sum())
                tok += weight
                nll_sum += score_cells(model, test) * weight
        tick()
    return _row(name, c_sum, nll_sum, tok, errs, len(errs), nll), everything


def _prompt_index(prompts: np.ndarray, index: dict[str, int]) -> np.ndarray:
    return np.array([index[str(p)] for p in prompts], dtype=int)


def _folds(data: Trials, cells: Cells) -> list[Fold]:
    """The folds (``folds``) of ``data``'s prompts, each with its trials and cells (masks and
    slices of the whole data's, so the folds cost linear time in the trials)."""
    prompts = list(cells.prompts)
    groups = folds(prompts) if len(prompts) > 1 else []
    index = {p: i for i, p in enumerate(prompts)}
    trial_p = _prompt_index(data.prompt, index)
    row_p = _prompt_index(data.rows[0], index)
    order = np.argsort(row_p, kind="stable")      # each prompt's rows, in their order
    bounds = np.searchsorted(row_p[order], np.arange(len(prompts) + 1))
    out = []
    for group in groups:
        left = np.array([index[p] for p in group], dtype=int)
        t, r = ~np.isin(trial_p, left), ~np.isin(row_p, left)
        train = Trials(data.prompt[t], data.draft_pos[t], data.out_pos[t], data.y[t],
                       tuple(a[r] for a in data.rows), data.w[t])
        tests = tuple((int(i), tuple(a[order[bounds[i]:bounds[i + 1]]] for a in data.rows))
                      for i in left)
        out.append(Fold(train, cells.without(left), tests))
    return out


@contextlib.contextmanager
def _one_blas_thread() -> Iterator[None]:
    """Run the block with the bundled OpenBLAS libraries (numpy's and scipy's wheels) on one
    thread, then restore their counts.  L-BFGS-B calls BLAS on tiny matrices thousands of
    times; with a thread per core, each call woke threads that then spun on the cores the
    fit needs: on 2 shared cores the selection ran 2-3x slower (measured).  Where the
    libraries are not found (another BLAS), nothing changes."""
    import ctypes
    import glob
    import os

    import numpy
    import scipy
    found = []
    for pkg in (numpy, scipy):
        libs = os.path.join(os.path.dirname(os.path.dirname(str(pkg.__file__))),
                            f"{pkg.__name__}.libs", "libscipy_openblas*.so")
        for path in glob.glob(libs):
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            for suffix in ("64_", ""):
                get = getattr(lib, f"scipy_openblas_get_num_threads{suffix}", None)
                put = getattr(lib, f"scipy_openblas_set_num_threads{suffix}", None)
                if get is not None and put is not None:
                    found.append((put, int(get())))
                    put(1)
                    break
    try:
        yield
    finally:
        for put, n in found:
            put(n)


def _progress(total: int) -> Any:
    """A progress bar on stderr, only when it is a terminal and the work has run 2 s."""
    from tqdm import tqdm
    return tqdm(total=total, desc="acceptance selection", unit="fit", file=sys.stderr,
                disable=not sys.stderr.isatty(), delay=2.0, leave=False)


def _inputs(traces: Sequence[Trace], candidates: Sequence[Candidate], resample: bool,
            pool: dict[str, str] | None) -> tuple[Trials, list[Builder]]:
    """The trials of the traces and the pool (``validation.acceptance.pool``) and every
    candidate's fit."""
    from psdlab.validation.acceptance.pool import acceptance_data
    return (acceptance_data(traces, pool),
            _builders(candidates, _patterns(traces, pool) if resample else None))


def select(traces: Sequence[Trace], candidates: Sequence[Candidate] = CANDIDATES,
           resample: bool = True, pool: dict[str, str] | None = None) -> Selection:
    """Score every candidate by cross-validation over the traces' prompts (and the
    acceptance pool's, ``validation.acceptance.pool``) and refit the lowest mean CRPS on all
    of them (module docstring)."""
    data, builders = _inputs(traces, candidates, resample, pool)
    if data.y.size == 0:
        raise ValueError("traces: no verified draft tokens to fit an acceptance model to")
    cells = Cells.of(data)
    whole, splits = Fold(data, cells), _folds(data, cells)
    with _one_blas_thread(), _progress(len(builders) * len(splits)) as bar:
        rows = [_cv_row(name, build, nll, whole, splits, bar.update)
                for name, build, nll in builders]
    table = [r for r, _ in rows]
    scored = [(r.cv_crps, r.candidate) for r in table if r.cv_crps is not None]
    best = min(scored, key=lambda s: s[0])[1] if scored else candidates[0][0]
    chosen = next(model for r, model in rows if r.candidate == best)
    return Selection(chosen, tuple(replace(r, chosen=r.candidate == best) for r in table),
                     cells.prompts)


def candidate_specs(traces: Sequence[Trace], candidates: Sequence[Candidate] = CANDIDATES,
                    resample: bool = True, pool: dict[str, str] | None = None
                    ) -> list[tuple[str, dict[str, Any]]]:
    """Every candidate refitted on all the traces' (and pool's) prompts, as ``select``
    refits the chosen one: what each would have predicted had the cross-validation chosen
    it."""
    data, builders = _inputs(traces, candidates, resample, pool)
    whole = Fold(data, Cells.of(data))
    return [(name, build(whole, None).spec()) for name, build, _ in builders]
