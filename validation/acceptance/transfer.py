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
from scipy import optimize

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


@dataclass(frozen=True)
class Cells:
    """The trials pooled into cells of one (prompt, draft position capped at ``MAX_POSITION``,
    output position), sorted so: every candidate gives a cell's trials one linear predictor
    eta (and one spread weight), so their log-likelihood is exactly ``sy eta - sw
    log(1 + e^eta)`` of the cell's sums.  A fit's work is then in cells, not trials, and a
    fold of the cross-validation (``validation.acceptance.cross_validation``) leaves out its
    prompts' cells without pooling again."""
    prompts: tuple[str, ...]      # every prompt of the data, sorted (``prompt`` indexes it)
    styles: tuple[str, ...]       # their styles, sorted
    prompt_style: np.ndarray      # int [prompts]: index into ``styles``
    prompt: np.ndarray            # int [C]
    draft: np.ndarray             # int [C], min(draft position, MAX_POSITION)
    out: np.ndarray               # int [C], output position
    count: np.ndarray             # float [C], trials
    hits: np.ndarray              # float [C], accepted trials
    sw: np.ndarray                # float [C], weight
    sy: np.ndarray                # float [C], weight of the accepted trials
    swo: np.ndarray               # float [C], weight times output position

    @classmethod
    def of(cls, data: Trials) -> "Cells":
        prompts, pidx = np.unique(np.asarray(data.prompt, dtype=str), return_inverse=True)
        names = tuple(str(p) for p in prompts)
        styles = tuple(sorted({style_of(p) for p in names}))
        sidx = {s: i for i, s in enumerate(styles)}
        dpc = np.minimum(np.asarray(data.draft_pos, dtype=np.int64), MAX_POSITION)
        out = np.asarray(data.out_pos, dtype=np.int64)
        span = int(out.max()) - int(out.min()) + 1 if out.size else 1
        key = (pidx.astype(np.int64) * (MAX_POSITION + 1) + dpc) * span + (out - (
            int(out.min()) if out.size else 0))
        first, inv = np.unique(key, return_index=True, return_inverse=True)[1:]
        inv = inv.ravel()
        w, y = data.w, np.asarray(data.y, dtype=float)

        def total(v: np.ndarray) -> np.ndarray:
            return np.bincount(inv, weights=v, minlength=first.size)
        return cls(names, styles, np.array([sidx[style_of(p)] for p in names], dtype=int),
                   pidx[first].astype(int), dpc[first], out[first], total(np.ones(y.size)),
                   total(y), total(w), total(w * y), total(w * out))

    def _take(self, sel: np.ndarray | slice) -> "Cells":
        return Cells(self.prompts, self.styles, self.prompt_style, self.prompt[sel],
                     self.draft[sel], self.out[sel], self.count[sel], self.hits[sel],
                     self.sw[sel], self.sy[sel], self.swo[sel])

    def without(self, prompts: Sequence[int] | np.ndarray) -> "Cells":
        """The cells of every prompt but ``prompts`` (indices into ``prompts``)."""
        return self._take(~np.isin(self.prompt, np.asarray(prompts, dtype=int)))

    def of_prompt(self, prompt: int) -> "Cells":
        """The cells of one prompt (an index into ``prompts``)."""
        lo, hi = np.searchsorted(self.prompt, [prompt, prompt + 1])
        return self._take(slice(int(lo), int(hi)))


def design_for(cand: Candidate, cells: Cells) -> Design:
    """The columns a candidate has on ``cells``: a level per style present, an offset per
    draft position up to the largest tried (at most ``MAX_POSITION``)."""
    _, style, positional, request, output, growth = cand
    present = np.unique(cells.prompt_style[np.unique(cells.prompt)])
    styles = tuple(cells.styles[int(i)] for i in present) if style else ("*",)
    positions = min(int(cells.draft.max()), MAX_POSITION) if positional else 1
    return Design(styles, positions, output, request, growth and request)


@dataclass(frozen=True)
class Problem:
    """A design's likelihood on cells, pooled by what its linear predictor tells apart: each
    pooled cell's level column (``ns``: the mean level, for a style the design has none of),
    offset column (``npos``: none), log output position, spread index, total and accepted
    weight; with the request level, cells sorted by prompt (``starts``: each prompt's first,
    ``group``: each cell's prompt)."""
    ns: int
    npos: int
    output: bool
    level: np.ndarray
    draft: np.ndarray
    log_out: np.ndarray
    spread_at: np.ndarray
    sw: np.ndarray
    sy: np.ndarray
    starts: np.ndarray
    group: np.ndarray

    @property
    def width(self) -> int:
        return self.ns + self.npos + int(self.output)


def problem(design: Design, cells: Cells, by_prompt: bool) -> Problem:
    """``cells`` pooled for ``design``: by prompt (``by_prompt``: the request level needs
    each prompt's own sums) or by level, then by offset column, spread index and (with the
    output trend) output position."""
    ns, npos = len(design.styles), max(0, design.positions - 1)
    col = np.full(len(cells.styles), ns, dtype=np.int64)      # a style without a level
    if design.styles == ("*",):
        col[:] = 0
    else:
        where = {s: i for i, s in enumerate(cells.styles)}
        for j, s in enumerate(design.styles):
            col[where[s]] = j
    level = col[cells.prompt_style[cells.prompt]]
    d = cells.draft.astype(np.int64)
    draft = np.where((d >= 2) & (d <= design.positions), d - 2, npos)
    spread = np.minimum(d, max(design.positions, 1)) - 1
    out = cells.out.astype(np.int64) if design.output else np.zeros(d.size, dtype=np.int64)
    major = cells.prompt.astype(np.int64) if by_prompt else level
    span = int(out.max()) + 1 if out.size else 1
    if by_prompt and design.output:     # the cells' own key, sorted: nothing to pool
        first = inv = np.arange(d.size)
    else:
        key = ((major * (MAX_POSITION + 2) + draft) * (MAX_POSITION + 1) + spread) * span + out
        first, inv = np.unique(key, return_index=True, return_inverse=True)[1:]
        inv = inv.ravel()
    starts = np.zeros(0, dtype=np.int64)
    group = np.zeros(first.size, dtype=np.int64)
    if by_prompt:
        p = major[first]
        starts = np.flatnonzero(np.concatenate([[True], p[1:] != p[:-1]])) if p.size else starts
        group = np.cumsum(np.concatenate([[0], (p[1:] != p[:-1]).astype(np.int64)]))[:p.size]
    return Problem(ns, npos, design.output, level[first], draft[first],
                   np.log(np.maximum(out[first], 1)).astype(float), spread[first].astype(float),
                   np.bincount(inv, weights=cells.sw, minlength=first.size),
                   np.bincount(inv, weights=cells.sy, minlength=first.size), starts, group)


_NODES = np.sqrt(2.0) * _GH_X
_LOG_W = np.log(_GH_W / np.sqrt(np.pi))
#: exp(z) is taken of min(z, _CAP) (above, log1p(exp(z)) = z to double precision)
_CAP = 600.0


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """a . b without BLAS: a threaded BLAS call leaves its threads spinning on the cores the
    rest of the fit (and other jobs) need, which made a fit several times slower on 2 shared
    cores (measured); these products are memory-bound anyway."""
    return float(np.einsum("i,i->", a, b))


def _eta(beta: np.ndarray, pb: Problem) -> np.ndarray:
    b = beta[:pb.ns]
    eta = (np.append(b, b.mean())[pb.level]
           + np.append(beta[pb.ns:pb.ns + pb.npos], 0.0)[pb.draft])
    return eta + beta[pb.ns + pb.npos] * pb.log_out if pb.output else eta


def _scatter(r: np.ndarray, pb: Problem) -> np.ndarray:
    """The gradient over beta of sum(r * eta)."""
    by_level = np.bincount(pb.level, weights=r, minlength=pb.ns + 1)
    parts = [by_level[:pb.ns] + by_level[pb.ns] / pb.ns,
             np.bincount(pb.draft, weights=r, minlength=pb.npos + 1)[:pb.npos]]
    if pb.output:
        parts.append(np.array([_dot(r, pb.log_out)]))
    return np.concatenate(parts)


def objective(theta: np.ndarray, pb: Problem, request: bool, growth: bool = False,
              ridge: float = _RIDGE) -> tuple[float, np.ndarray]:
    """Negative log-likelihood (plus ``ridge`` |beta|^2) and its gradient, the request level
    integrated out per prompt (Gauss-Hermite), each trial's log-likelihood times its weight.
    theta: beta, then with ``request`` log sigma, then with ``growth`` g."""
    nb = pb.width
    beta = theta[:nb]
    eta = _eta(beta, pb)
    pen = ridge * _dot(beta, beta)
    if eta.size == 0:
        return pen, np.concatenate([2 * ridge * beta, np.zeros(theta.size - nb)])
    if not request:
        soft = np.logaddexp(0.0, eta)
        r = pb.sy - pb.sw * np.exp(eta - soft)
        return (-(_dot(pb.sy, eta) - _dot(pb.sw, soft)) + pen,
                -_scatter(r, pb) + 2 * ridge * beta)
    sigma = float(np.exp(theta[nb]))
    at = pb.spread_at.astype(np.int64)
    steps = np.arange(int(at.max()) + 1)
    weights = sigma * (np.exp(float(theta[nb + 1]) * steps) if growth else np.ones(steps.size))
    scale = weights[at]
    # z[j, c] = eta[c] + scale[c] nodes[j]; the sums of sy z are linear in z, only the
    # softplus and sigmoid terms need [nodes, cells] arrays (two, reused in place)
    e = np.multiply.outer(_NODES, scale)
    e += eta[None, :]
    capped = eta.max() + weights.max() * _NODES[-1] > _CAP
    excess = np.maximum(e - _CAP, 0.0) if capped else None
    np.exp(np.minimum(e, _CAP, out=e) if capped else e, out=e)            # e = exp(z)
    work = np.log1p(e)                                                     # softplus(z)
    if excess is not None:
        work += excess
    work *= pb.sw[None, :]
    per = np.add.reduceat(work, pb.starts, axis=1)                         # [G, R]
    np.subtract((np.add.reduceat(pb.sy * eta, pb.starts)[None, :]
                 + _NODES[:, None] * np.add.reduceat(pb.sy * scale, pb.starts)[None, :]
                 + _LOG_W[:, None]), per, out=per)
    top = per.max(axis=0, keepdims=True)
    lse = top[0] + np.log(np.exp(per - top).sum(axis=0))
    post = np.exp(per - lse[None, :])                                      # [G, R]
    np.add(e, 1.0, out=work)
    np.divide(e, work, out=e)                                              # sigmoid(z)
    e *= np.take(post, pb.group, axis=1, out=work)
    q0, q1 = e.sum(axis=0), np.einsum("j,jc->c", _NODES, e)   # posterior-weighted sums
    r = pb.sy - pb.sw * q0              # d log-likelihood / d eta per cell
    wn = (pb.sy * np.einsum("j,jr->r", _NODES, post)[pb.group] - pb.sw * q1) * scale
    extra = [-float(wn.sum())]
    if growth:
        extra.append(-_dot(wn, pb.spread_at))
    grad = np.concatenate([-_scatter(r, pb) + 2 * ridge * beta, extra])
    return -float(lse.sum()) + pen, grad


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
    return fit_cells(cand, Cells.of(data))


def _start(design: Design, model: FittedModel) -> np.ndarray:
    """``model``'s optimum in ``design``'s columns (``design`` fitted to a subset of the
    prompts ``model`` was: a level per style it has, the offsets of its positions), then log
    sigma and g: where a fit to those prompts starts."""
    b = np.asarray(model.beta, dtype=float)
    ns = len(model.design.styles)
    level = dict(zip(model.design.styles, b[:ns]))
    npos = max(0, design.positions - 1)
    parts: list[float] = [float(level[s]) for s in design.styles]
    parts += [float(x) for x in b[ns:ns + npos]]
    if design.output:
        parts.append(float(b[-1]))
    if design.request:
        parts.append(float(np.log(max(model.sigma, _SIGMA_START))))
    if design.growth:
        parts.append(float(model.growth))
    return np.array(parts, dtype=float)


@dataclass(frozen=True)
class Coordinates:
    """Where the optimizer works: theta = (b, c, d, log sigma, g) as phi = (b + d m, c, d,
    log sigma, g) * scale, m the weighted mean log output position (so the levels and the
    output trend are not confounded) and ``scale`` each coefficient's Fisher information at
    a flat rate (so every coordinate has about unit curvature).  A linear change of
    variables: the optimum is the same; L-BFGS finds it in far fewer, better steps."""
    ns: int
    nb: int
    output: bool
    m: float
    scale: np.ndarray

    @classmethod
    def of(cls, flat: Problem, size: int, p0: float) -> "Coordinates":
        """The coordinates of ``flat`` (pooled either way: only its sums count)."""
        nb = flat.width
        m = float(_dot(flat.sw, flat.log_out) / max(flat.sw.sum(), 1e-300)) if flat.output else 0.0
        info = np.concatenate([
            np.bincount(flat.level, weights=flat.sw, minlength=flat.ns + 1)[:flat.ns],
            np.bincount(flat.draft, weights=flat.sw, minlength=flat.npos + 1)[:flat.npos],
            [_dot(flat.sw, (flat.log_out - m) ** 2)] if flat.output else []])
        scale = np.ones(size)
        scale[:nb] = np.sqrt(info * p0 * (1 - p0) + 2 * _RIDGE)
        return cls(flat.ns, nb, flat.output, m, scale)

    def theta(self, phi: np.ndarray) -> np.ndarray:
        u = phi / self.scale[:phi.size]
        if self.output:
            u[:self.ns] -= u[self.nb - 1] * self.m
        return u

    def phi(self, theta: np.ndarray) -> np.ndarray:
        u = np.array(theta, dtype=float)
        if self.output:
            u[:self.ns] += u[self.nb - 1] * self.m
        return u * self.scale[:u.size]

    def gradient(self, grad: np.ndarray) -> np.ndarray:
        """d/dphi from d/dtheta."""
        g = np.array(grad, dtype=float)
        if self.output:
            g[self.nb - 1] -= self.m * g[:self.ns].sum()
        return g / self.scale[:g.size]


#: the least sigma a stage starts from: at sigma's lower bound the likelihood is flat in sigma
#: and g (a saddle an optimizer started there does not leave), so a fold started from an
#: all-prompt fit at the bound, or the growth stage from a request stage there, starts
#: here and goes back down when the bound is the optimum
_SIGMA_START = 0.1
#: L-BFGS-B's stopping rules: relative change of the objective, largest projected gradient
#: (in ``Coordinates``)
_OPTIONS = {"ftol": 1e-12, "gtol": 1e-8, "maxiter": 5000}


def _minimize(theta: np.ndarray, coords: Coordinates, pb: Problem, request: bool,
              growth: bool, bounds: Sequence[tuple[float | None, float | None]]
              ) -> np.ndarray:
    """The optimum of ``objective`` from ``theta``, found in ``coords``."""
    def fun(phi: np.ndarray) -> tuple[float, np.ndarray]:
        f, g = objective(coords.theta(phi), pb, request, growth)
        return f, coords.gradient(g)
    res = optimize.minimize(fun, coords.phi(theta), jac=True, method="L-BFGS-B",
                            bounds=list(bounds)[:theta.size], options=_OPTIONS)
    return coords.theta(res.x)


def fit_cells(cand: Candidate, cells: Cells, start: FittedModel | None = None
              ) -> FittedModel:
    """Maximum-likelihood fit of one candidate to pooled trials (``Cells``): the logistic
    terms first, then with the request level sigma, then with growth g, each stage from the
    last one's optimum; or, from ``start`` (the candidate fitted to a superset of these
    prompts: the cross-validation's fit to all of them), the last stage alone from its
    optimum."""
    if cells.prompt.size == 0:
        raise ValueError("traces: no verified draft tokens to fit an acceptance model to")
    design = design_for(cand, cells)
    per = problem(design, cells, by_prompt=design.request)
    nb = per.width
    ref = float(cells.swo.sum() / cells.sw.sum())
    p0 = float(np.clip(cells.hits.sum() / cells.count.sum(), 0.02, 0.98))
    coords = Coordinates.of(per, nb + 2, p0)
    bounds = [(None, None)] * nb + [(np.log(1e-3), np.log(5)), (-2.0, 2.0)]
    if start is not None:
        theta = _minimize(_start(design, start), coords, per, design.request, design.growth,
                          bounds)
    else:
        flat = problem(design, cells, by_prompt=False) if design.request else per
        theta = np.zeros(nb)
        theta[:len(design.styles)] = np.log(p0 / (1 - p0))
        theta = _minimize(theta, coords, flat, False, False, bounds)
        if design.request:
            theta = _minimize(np.concatenate([theta, [np.log(0.5)]]), coords, per, True,
                              False, bounds)
            if design.growth:
                theta[nb] = max(theta[nb], np.log(_SIGMA_START))
                theta = _minimize(np.concatenate([theta, [0.0]]), coords, per, True, True,
                                  bounds)
    sigma = float(np.exp(theta[nb])) if design.request else 0.0
    growth = float(theta[nb + 1]) if design.growth else 0.0
    return FittedModel(cand[0], design, tuple(float(x) for x in theta[:nb]), sigma, ref,
                       growth)


def score(model: FittedModel, data: Trials) -> float:
    """Negative log-likelihood per tried token (per unit of weight) of a fitted model on
    ``data``, the request level integrated out."""
    return score_cells(model, Cells.of(data))


def score_cells(model: FittedModel, cells: Cells) -> float:
    """``score`` on pooled trials (``Cells``)."""
    request = model.design.request and model.sigma > 0
    pb = problem(model.design, cells, by_prompt=request)
    theta = np.concatenate([np.asarray(model.beta),
                            [np.log(max(model.sigma, 1e-9)), model.growth]])
    nll, _ = objective(theta, pb, request, model.design.growth, ridge=0.0)
    return nll / max(1e-12, float(cells.sw.sum()))
