"""An acceptance model that transfers to prompts the calibration never served.

The match patterns (``validation.match_patterns``) know each *calibration* request position by
position; a new prompt has no pattern, so its acceptance must come from a model of what the
traces show in general.  This module fits the ``fitted`` model of ``sim.acceptance_fitted``,

    P(draft token i accepted | 1 .. i-1 accepted) = sigmoid(b[style] + u_r + c[i] + d log n),

by maximum likelihood on every draft token a verification tried (draft position i, output
position n, accepted or not), with the request level u_r ~ N(0, sigma^2) integrated out
(Gauss-Hermite quadrature) per prompt.  Which terms it keeps is chosen by **leave-one-prompt-
out cross-validation over the calibration prompts only** (never the held-out runs): each
candidate is fitted without one prompt and scored on that prompt's tokens (negative
log-likelihood per tried token, the request level integrated out as it must be for a new
prompt, and the relative error of the accepted tokens it predicts for that prompt's
verifications); the candidate with the lowest mean score wins and is refitted on all prompts.

Candidates (``CANDIDATES``): ``geometric`` (one rate), ``positional`` (one rate per draft
position: how acceptance changes with k), ``+style`` (a level per prompt style), ``+request``
(the per-request spread), ``+output`` (a trend along the output).  A prompt's style is its id
up to the first ``-`` (``sim.acceptance_fitted.style_of``); a prompt served more than once in
a run has ids ``ID~2``, ... and shares one level.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from scipy import optimize, sparse

from psdlab.analysis.trace import Trace
from psdlab.sim.acceptance_fitted import style_of

#: (name, style levels, per-position offsets, per-request spread, output trend)
CANDIDATES: tuple[tuple[str, bool, bool, bool, bool], ...] = (
    ("geometric", False, False, False, False),
    ("positional", False, True, False, False),
    ("positional+style", True, True, False, False),
    ("positional+request", False, True, True, False),
    ("positional+style+request", True, True, True, False),
    ("positional+style+output", True, True, False, True),
    ("positional+style+request+output", True, True, True, True),
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
    # per verification row (for the accepted-token error): prompt, proposed, start position
    rows: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] = field(default=())

    def subset(self, keep_prompts: set[str]) -> "Trials":
        t = np.isin(self.prompt, list(keep_prompts))
        r = np.isin(self.rows[0], list(keep_prompts))
        return Trials(self.prompt[t], self.draft_pos[t], self.out_pos[t], self.y[t],
                      tuple(a[r] for a in self.rows))


def trials(traces: Sequence[Trace]) -> Trials:
    """The tried draft tokens of every verification in the traces (positions as in
    ``validation.match_patterns.observations``: the first draft token is output position 1)."""
    pr, dp, op, y = [], [], [], []
    rp, rk, rn, ra = [], [], [], []
    for tr in traces:
        pos: dict[str, int] = {}
        for step in sorted(tr.steps, key=lambda s: (s.start, s.index)):
            for v in step.verified:
                rid = str(v.req)
                n = pos.get(rid, 1)
                if v.proposed > 0:
                    tried = min(v.accepted + 1, v.proposed)
                    for i in range(1, tried + 1):
                        pr.append(prompt_of(rid))
                        dp.append(i)
                        op.append(n + i - 1)
                        y.append(1.0 if i <= v.accepted else 0.0)
                    rp.append(prompt_of(rid))
                    rk.append(v.proposed)
                    rn.append(n)
                    ra.append(v.accepted)
                pos[rid] = n + v.emitted
    return Trials(np.array(pr, dtype=object), np.array(dp, dtype=int), np.array(op, dtype=int),
                  np.array(y, dtype=float),
                  (np.array(rp, dtype=object), np.array(rk, dtype=int), np.array(rn, dtype=int),
                   np.array(ra, dtype=float)))


@dataclass(frozen=True)
class Design:
    styles: tuple[str, ...]       # level columns (("*",) without style levels)
    positions: int                # offset columns for draft positions 2 .. positions
    output: bool
    request: bool

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


def design_for(cand: tuple[str, bool, bool, bool, bool], data: Trials) -> Design:
    _, style, positional, request, output = cand
    styles = tuple(sorted({style_of(p) for p in data.prompt})) if style else ("*",)
    positions = min(int(data.draft_pos.max()), MAX_POSITION) if positional else 1
    return Design(styles, positions, output, request)


def _nll(theta: np.ndarray, X: np.ndarray, y: np.ndarray, groups: Any, request: bool
         ) -> tuple[float, np.ndarray]:
    """Negative log-likelihood and its gradient (request level integrated out per group)."""
    beta = theta[:X.shape[1]]
    eta = X @ beta
    ridge = _RIDGE * float(beta @ beta)
    if not request:
        ll = y * eta - np.logaddexp(0.0, eta)
        g = X.T @ (y - 0.5 * (1 + np.tanh(0.5 * eta)))
        return -float(ll.sum()) + ridge, -g + 2 * _RIDGE * beta
    sigma = float(np.exp(theta[-1]))
    nodes = np.sqrt(2.0) * _GH_X
    z = eta[:, None] + sigma * nodes[None, :]
    ll = y[:, None] * z - np.logaddexp(0.0, z)
    per = groups @ ll + np.log(_GH_W / np.sqrt(np.pi))[None, :]        # [R, G]
    top = per.max(axis=1, keepdims=True)
    lse = top[:, 0] + np.log(np.exp(per - top).sum(axis=1))
    post = np.exp(per - lse[:, None])                                   # [R, G]
    w = (groups.T @ post) * (y[:, None] - 0.5 * (1 + np.tanh(0.5 * z)))  # [T, G]
    g_beta = X.T @ w.sum(axis=1)
    g_s = float((w * nodes[None, :]).sum()) * sigma
    grad = np.concatenate([-g_beta + 2 * _RIDGE * beta, [-g_s]])
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
                "ref_position": float(self.ref_position)}


def fit(cand: tuple[str, bool, bool, bool, bool], data: Trials) -> FittedModel:
    """Maximum-likelihood fit of one candidate."""
    if data.y.size == 0:
        raise ValueError("traces: no verified draft tokens to fit an acceptance model to")
    design = design_for(cand, data)
    X = design.matrix(data.prompt, data.draft_pos, data.out_pos)
    groups, _ = _group_matrix(data.prompt)
    p0 = np.clip(data.y.mean(), 0.02, 0.98)
    theta = np.zeros(X.shape[1])
    theta[:len(design.styles)] = np.log(p0 / (1 - p0))
    res = optimize.minimize(_nll, theta, args=(X, data.y, groups, False), jac=True,
                            method="L-BFGS-B")
    theta = res.x
    sigma = 0.0
    if design.request:
        res = optimize.minimize(_nll, np.concatenate([theta, [np.log(0.5)]]),
                                args=(X, data.y, groups, True), jac=True, method="L-BFGS-B",
                                bounds=[(None, None)] * X.shape[1] + [(np.log(1e-3), np.log(5))])
        theta, sigma = res.x[:-1], float(np.exp(res.x[-1]))
    return FittedModel(cand[0], design, tuple(float(x) for x in theta), sigma,
                       float(np.mean(data.out_pos)))


def score(model: FittedModel, data: Trials) -> tuple[float, float]:
    """(negative log-likelihood per tried token with the request level integrated out,
    relative error of the predicted accepted tokens) of a fitted model on ``data``."""
    from psdlab.sim.acceptance import make_acceptance
    X = model.design.matrix(data.prompt, data.draft_pos, data.out_pos)
    groups, _ = _group_matrix(data.prompt)
    beta = np.asarray(model.beta)
    theta = np.concatenate([beta, [np.log(max(model.sigma, 1e-9))]])
    nll, _ = _nll(theta, X, data.y, groups, model.design.request and model.sigma > 0)
    nll -= _RIDGE * float(beta @ beta)
    acc = make_acceptance(model.spec())
    rp, rk, rn, ra = data.rows
    pred = sum(_expected(acc, p, int(k), int(n)) for p, k, n in zip(rp, rk, rn))
    err = (pred - float(ra.sum())) / float(ra.sum()) if ra.sum() > 0 else 0.0
    return nll / max(1, data.y.size), float(err)


def _expected(acc: Any, prompt: str, k: int, n: int) -> float:
    return acc.expected_accepted(k, base=acc.base(prompt), position=float(n))


def folds(prompts: Sequence[str]) -> list[str]:
    """Leave-one-prompt-out: every calibration prompt is a fold."""
    return sorted(set(prompts))


@dataclass(frozen=True)
class Selection:
    chosen: FittedModel
    scores: tuple[dict[str, Any], ...]     # per candidate: name, cv_nll, cv_accept_error
    prompts: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"chosen": self.chosen.candidate, "spec": self.chosen.spec(),
                "scores": list(self.scores), "prompts": list(self.prompts),
                "method": "leave-one-prompt-out cross-validation over the calibration prompts"}


def select(traces: Sequence[Trace],
           candidates: Sequence[tuple[str, bool, bool, bool, bool]] = CANDIDATES
           ) -> Selection:
    """Fit every candidate, score it by leave-one-prompt-out CV over the traces' prompts,
    and refit the best on all of them (module docstring)."""
    data = trials(traces)
    if data.y.size == 0:
        raise ValueError("traces: no verified draft tokens to fit an acceptance model to")
    prompts = folds(list(data.prompt))
    table = []
    for cand in candidates:
        nll_sum, tok, errs = 0.0, 0, []
        for p in prompts if len(prompts) > 1 else []:
            train = data.subset(set(prompts) - {p})
            test = data.subset({p})
            model = fit(cand, train)
            nll, err = score(model, test)
            nll_sum += nll * test.y.size
            tok += test.y.size
            errs.append(abs(err))
        table.append({"candidate": cand[0],
                      "cv_nll_per_token": nll_sum / tok if tok else None,
                      "cv_accept_error": float(np.sqrt(np.mean(np.square(errs))))
                      if errs else None})
    scored = [r for r in table if r["cv_nll_per_token"] is not None]
    best = (min(scored, key=lambda r: r["cv_nll_per_token"])["candidate"] if scored
            else candidates[0][0])
    chosen = fit(next(c for c in candidates if c[0] == best), data)
    for r in table:
        r["chosen"] = r["candidate"] == best
    return Selection(chosen, tuple(table), tuple(prompts))


def add_to_model(path: str, selection: Selection, make_default: bool = True) -> None:
    """Store the chosen model in a model file as acceptance ``fitted`` (the default when
    ``make_default``) and the candidates' scores under ``meta.acceptance_transfer``."""
    import json
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    meta = doc.setdefault("meta", {})
    acc = meta.setdefault("acceptance", {})
    acc["fitted"] = selection.chosen.spec()
    if make_default:
        acc["default"] = "fitted"
    meta["acceptance_transfer"] = selection.to_dict()
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1)
