"""An acceptance model that transfers to prompts the calibration never served.

The match patterns (``validation.acceptance.match_patterns``) know each *calibration* request
position by position; a new prompt has no pattern, so its acceptance must come from a model of what
the traces show in general.  This module fits the ``fitted`` model of ``sim.acceptance_fitted``,

    P(draft token i accepted | 1 .. i-1 accepted)
        = sigmoid(b[style] + u_r exp(g (min(i, P) - 1)) + c[i] + d log n),

by maximum likelihood on every draft token a verification tried (draft position i, output
position n, accepted or not), with the request level u_r ~ N(0, sigma^2) integrated out
(Gauss-Hermite quadrature) per prompt; g (0 unless fitted) lets the spread between requests
grow or shrink along a proposal.

Each fact counts once (``trials``).  With greedy decoding a prompt's outcome at output position
n is one deterministic fact (its match pattern, ``validation.acceptance.match_patterns``): the SD
and PSD runs of one window see the same verifications, and runs at another k see the same positions
again.  Counted as independent trials, those re-observations make every prompt look measured
several times over, and the fitted spread between prompts grows by the binomial noise that is
no longer subtracted (measured: sigma 0.65 where one run per prompt gives 0.31-0.34).  So a
greedy trial seen again at the same (prompt, output position, draft position) is dropped, and
one output position seen at d different draft positions weighs 1/d in each; trials of sampled
traces are independent draws and weigh 1.  Which terms it keeps (or whether a pattern-resampling
model does better) is chosen by leave-one-prompt-out cross-validation over the calibration
prompts only (``validation.acceptance.cross_validation``).

Candidates (``CANDIDATES``): ``geometric`` (one rate), ``positional`` (one rate per draft
position: how acceptance changes with k), ``+style`` (a level per prompt style), ``+request``
(the per-request spread), ``+output`` (a trend along the output), ``+growth`` (the
per-request spread weighed by draft position: g).  A prompt's style is its id
up to the first ``-`` (``sim.acceptance_fitted.style_of``); a prompt served more than once in
a run has ids ``ID~2``, ... and shares one level.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
from scipy import optimize, sparse

from psdlab.analysis.trace import Trace
from psdlab.sim.acceptance_fitted import style_of

#: (name, style levels, per-position offsets, per-request spread, output trend, growth of
#: the spread along a proposal)
Candidate = tuple[str, bool, bool, bool, bool, bool]
CANDIDATES: tuple[Candidate, ...] = (
    ("geometric", False, False, False, False, False),
    ("positional", False, True, False, False, False),
    ("positional+style", True, True, False, False, False),
    ("positional+request", False, True, True, False, False),
    ("positional+style+request", True, True, True, False, False),
    ("positional+style+output", True, True, False, True, False),
    ("positional+style+request+output", True, True, True, True, False),
    ("positional+style+request+output+growth", True, True, True, True, True),
)
#: draft positions beyond this share one offset
MAX_POSITION = 8
_GH_X, _GH_W = np.polynomial.hermite.hermgauss(12)
_RIDGE = 1e-3


def prompt_of(req_id: Any) -> str:
    """The prompt a request serves: its id without a ``~N`` repeat suffix."""
    return str(req_id).split("~", 1)[0]


@dataclass(frozen=True)
class Trials:
    """Every draft token a verification tried."""
    prompt: np.ndarray      # str [T]
    draft_pos: np.ndarray   # int [T], 1-based position in the proposal
    out_pos: np.ndarray     # int [T], output position of the token
    y: np.ndarray           # float [T], 1 accepted
    # per verification row (every verification, re-observations included): prompt,
    # proposed, start position, accepted
    rows: tuple[np.ndarray, ...] = field(default=())
    weight: np.ndarray | None = None    # float [T], how much each trial counts (None: 1)

    @property
    def w(self) -> np.ndarray:
        return np.ones(self.y.size) if self.weight is None else self.weight

    def subset(self, keep_prompts: set[str]) -> "Trials":
        t = np.isin(self.prompt, list(keep_prompts))
        r = np.isin(self.rows[0], list(keep_prompts))
        return Trials(self.prompt[t], self.draft_pos[t], self.out_pos[t], self.y[t],
                      tuple(a[r] for a in self.rows), self.w[t])


#: one verification: (prompt, greedy, output position it drafts from, proposed, accepted)
Verification = tuple[str, bool, int, int, int]


def verifications(traces: Sequence[Trace]) -> Iterator[Verification]:
    """Every verification of the traces, in step order, with the output position it drafts
    from (as in ``validation.acceptance.match_patterns.observations``: the first draft token is
    output position 1)."""
    from psdlab.validation.acceptance.match_patterns import is_greedy
    for tr in traces:
        pos: dict[str, int] = {}
        g = is_greedy(tr)
        for step in sorted(tr.steps, key=lambda s: (s.start, s.index)):
            for v in step.verified:
                rid = str(v.req)
                n = pos.get(rid, 1)
                yield prompt_of(rid), g, n, int(v.proposed), int(v.accepted)
                pos[rid] = n + v.emitted


def trials(traces: Sequence[Trace], more: Iterable[Verification] = ()) -> Trials:
    """The tried draft tokens of every verification in the traces (and of ``more``, e.g. the
    acceptance pool's, ``validation.acceptance.pool``), each fact once (module docstring:
    greedy re-observations dropped or shared)."""
    pr, dp, op, y, greedy = [], [], [], [], []
    rp, rk, rn, ra = [], [], [], []
    for prompt, g, n, proposed, accepted in chain(verifications(traces), more):
        if proposed <= 0:
            continue
        tried = min(accepted + 1, proposed)
        for i in range(1, tried + 1):
            pr.append(prompt)
            dp.append(i)
            op.append(n + i - 1)
            y.append(1.0 if i <= accepted else 0.0)
            greedy.append(g)
        rp.append(prompt)
        rk.append(proposed)
        rn.append(n)
        ra.append(accepted)
    keep, weight = _facts(pr, op, dp, greedy)
    return Trials(np.array(pr, dtype=object)[keep], np.array(dp, dtype=int)[keep],
                  np.array(op, dtype=int)[keep], np.array(y, dtype=float)[keep],
                  (np.array(rp, dtype=object), np.array(rk, dtype=int), np.array(rn, dtype=int),
                   np.array(ra, dtype=float)), weight)


def _facts(prompt: Sequence[str], out_pos: Sequence[int], draft_pos: Sequence[int],
           greedy: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    """(indices of the trials kept, their weights): a greedy trial at a (prompt, output
    position, draft position) already seen is dropped; a greedy (prompt, output position)
    kept at d draft positions weighs 1/d in each; sampled trials are kept and weigh 1."""
    seen: set[tuple[str, int, int]] = set()
    keep: list[int] = []
    for t, (p, n, i, g) in enumerate(zip(prompt, out_pos, draft_pos, greedy)):
        if g:
            if (p, n, i) in seen:
                continue
            seen.add((p, n, i))
        keep.append(t)
    count = Counter((prompt[t], out_pos[t]) for t in keep if greedy[t])
    weight = [1.0 / count[(prompt[t], out_pos[t])] if greedy[t] else 1.0 for t in keep]
    return np.array(keep, dtype=int), np.array(weight, dtype=float)


@dataclass(frozen=True)
class Design:
    styles: tuple[str, ...]       # level columns (("*",) without style levels)
    positions: int                # offset columns for draft positions 2 .. positions
    output: bool
    request: bool
    growth: bool = False

    def spread_index(self, draft_pos: np.ndarray) -> np.ndarray:
        """min(i, P) - 1 per trial: the exponent of the spread's weight (P: the positions)."""
        return (np.minimum(draft_pos, max(self.positions, 1)) - 1).astype(float)

    @property
    def width(self) -> int:
        return len(self.styles) + max(0, self.positions - 1) + int(self.output)

    def matrix(self, prompt: np.ndarray, draft_pos: np.ndarray, out_pos: np.ndarray
               ) -> np.ndarray:
        cols = []
        if self.styles == ("*",):
            cols.append(np.ones(prompt.size))
        else:
            st = np.array([style_of(p) for p in prompt], dtype=object)
            known = np.isin(st, list(self.styles))
            for s in self.styles:       # an unseen style gets the mean level
                cols.append(np.where(st == s, 1.0, np.where(known, 0.0, 1 / len(self.styles))))
        dpc = np.minimum(draft_pos, MAX_POSITION)
        for j in range(2, self.positions + 1):
            cols.append((dpc == j).astype(float))
        if self.output:
            cols.append(np.log(np.maximum(out_pos, 1)))
        return np.column_stack(cols) if cols else np.zeros((prompt.size, 0))


def design_for(cand: Candidate, data: Trials) -> Design:
    _, style, positional, request, output, growth = cand
    styles = tuple(sorted({style_of(p) for p in data.prompt})) if style else ("*",)
    positions = min(int(data.draft_pos.max()), MAX_POSITION) if positional else 1
    return Design(styles, positions, output, request, growth and request)


def _nll(theta: np.ndarray, X: np.ndarray, y: np.ndarray, groups: Any, request: bool,
         spread_at: np.ndarray | None = None, weight: np.ndarray | None = None
         ) -> tuple[float, np.ndarray]:
    """Negative log-likelihood and its gradient (request level integrated out per group),
    each trial's log-likelihood times its ``weight`` (default 1).
    theta: beta, then with ``request`` log sigma, then with ``spread_at`` (each trial's
    ``Design.spread_index``) the growth g."""
    nb = X.shape[1]
    beta = theta[:nb]
    eta = X @ beta
    ridge = _RIDGE * float(beta @ beta)
    wt = np.ones(y.size) if weight is None else weight
    if not request:
        ll = wt * (y * eta - np.logaddexp(0.0, eta))
        g = X.T @ (wt * (y - 0.5 * (1 + np.tanh(0.5 * eta))))
        return -float(ll.sum()) + ridge, -g + 2 * _RIDGE * beta
    sigma = float(np.exp(theta[nb]))
    weight = (np.ones(y.size) if spread_at is None
              else np.exp(float(theta[nb + 1]) * spread_at))
    nodes = np.sqrt(2.0) * _GH_X
    z = eta[:, None] + sigma * weight[:, None] * nodes[None, :]
    ll = wt[:, None] * (y[:, None] * z - np.logaddexp(0.0, z))
    per = groups @ ll + np.log(_GH_W / np.sqrt(np.pi))[None, :]        # [R, G]
    top = per.max(axis=1, keepdims=True)
    lse = top[:, 0] + np.log(np.exp(per - top).sum(axis=1))
    post = np.exp(per - lse[:, None])                                   # [R, G]
    w = (groups.T @ post) * wt[:, None] * (y[:, None] - 0.5 * (1 + np.tanh(0.5 * z)))
    g_beta = X.T @ w.sum(axis=1)
    wn = (w * nodes[None, :]).sum(axis=1) * sigma * weight            # [T]
    extra = [-float(wn.sum())]
    if spread_at is not None:
        extra.append(-float(wn @ spread_at))
    grad = np.concatenate([-g_beta + 2 * _RIDGE * beta, extra])
    return -float(lse.sum()) + ridge, grad


def _group_matrix(prompts: np.ndarray) -> tuple[Any, list[str]]:
    names = sorted(set(prompts))
    idx = {p: i for i, p in enumerate(names)}
    rows = np.array([idx[p] for p in prompts], dtype=int)
    m = sparse.csr_matrix((np.ones(rows.size), (rows, np.arange(rows.size))),
                          shape=(len(names), rows.size))
    return m, names


@dataclass(frozen=True)
class FittedModel:
    candidate: str
    design: Design
    beta: tuple[float, ...]
    sigma: float
    ref_position: float
    growth: float = 0.0

    def spec(self) -> dict[str, Any]:
        """The ``sim.acceptance_fitted`` spec."""
        b = np.asarray(self.beta)
        ns = len(self.design.styles)
        levels, rest = b[:ns], b[ns:]
        npos = max(0, self.design.positions - 1)
        draft = [0.0] + [float(x) for x in rest[:npos]]
        out = float(rest[npos]) if self.design.output else 0.0
        styles = {} if self.design.styles == ("*",) else {
            s: float(v) for s, v in zip(self.design.styles, levels)}
        return {"name": "fitted", "styles": styles, "default": float(levels.mean()),
                "draft": draft, "output": out, "sigma": float(self.sigma),
                "spread_growth": float(self.growth), "ref_position": float(self.ref_position)}


def fit(cand: Candidate, data: Trials) -> FittedModel:
    """Maximum-likelihood fit of one candidate."""
    if data.y.size == 0:
        raise ValueError("traces: no verified draft tokens to fit an acceptance model to")
    design = design_for(cand, data)
    X = design.matrix(data.prompt, data.draft_pos, data.out_pos)
    groups, _ = _group_matrix(data.prompt)
    p0 = np.clip(data.y.mean(), 0.02, 0.98)
    theta = np.zeros(X.shape[1])
    theta[:len(design.styles)] = np.log(p0 / (1 - p0))
    res = optimize.minimize(_nll, theta, args=(X, data.y, groups, False, None, data.w), jac=True,
                            method="L-BFGS-B")
    theta = res.x
    sigma = growth = 0.0
    if design.request:
        nb = X.shape[1]
        res = optimize.minimize(_nll, np.concatenate([theta, [np.log(0.5)]]),
                                args=(X, data.y, groups, True, None, data.w), jac=True,
                                method="L-BFGS-B",
                                bounds=[(None, None)] * nb + [(np.log(1e-3), np.log(5))])
        theta, sigma = res.x[:nb], float(np.exp(res.x[nb]))
        if design.growth:
            res = optimize.minimize(
                _nll, np.concatenate([theta, [np.log(sigma), 0.0]]),
                args=(X, data.y, groups, True, design.spread_index(data.draft_pos), data.w),
                jac=True, method="L-BFGS-B",
                bounds=[(None, None)] * nb + [(np.log(1e-3), np.log(5)), (-2.0, 2.0)])
            theta, sigma, growth = res.x[:nb], float(np.exp(res.x[nb])), float(res.x[nb + 1])
    return FittedModel(cand[0], design, tuple(float(x) for x in theta), sigma,
                       float(np.average(data.out_pos, weights=data.w)), growth)


def score(model: FittedModel, data: Trials) -> float:
    """Negative log-likelihood per tried token (per unit of weight) of a fitted model on
    ``data``, the request level integrated out."""
    X = model.design.matrix(data.prompt, data.draft_pos, data.out_pos)
    groups, _ = _group_matrix(data.prompt)
    beta = np.asarray(model.beta)
    theta = np.concatenate([beta, [np.log(max(model.sigma, 1e-9)), model.growth]])
    spread_at = model.design.spread_index(data.draft_pos) if model.design.growth else None
    nll, _ = _nll(theta, X, data.y, groups, model.design.request and model.sigma > 0,
                  spread_at, data.w)
    nll -= _RIDGE * float(beta @ beta)
    return nll / max(1e-12, float(data.w.sum()))
