"""The fast acceptance selection (validation/acceptance/cross_validation.py on the pooled
likelihood of validation/acceptance/transfer.py) against a straightforward one: a dense design
matrix with a column per style and per position, every trial's likelihood, each prompt's
request level integrated in a loop, each fold refitted from a cold start on the subset of its
trials, each left-out prompt scored on its own subset.  The same optimum, so the same scores
(the likelihoods to 1e-6; the CRPS, a score of discrete draws, to 2e-3) and the same choice."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import optimize
from scipy.special import expit

from psdlab.sim.acceptance_fitted import style_of
from psdlab.validation.acceptance import cross_validation as cv
from psdlab.validation.acceptance import transfer as at
from test_acceptance_transfer import TRUE, fake_trace

NODES, GH_W = np.polynomial.hermite.hermgauss(12)
#: styles and a spread the likelihood identifies well: with a spread between requests much
#: wider than one prompt's posterior (sigma > 1 with a few dozen trials a prompt), the
#: 12-node quadrature makes the likelihood multimodal and two correct optimizers may stop
#: in different local optima
SPEC = dict(TRUE, styles={"chat": 1.4, "code": 0.6, "math": 1.0}, sigma=0.4)
TIGHT = {"ftol": 1e-15, "gtol": 1e-10, "maxiter": 20000}


#: candidates whose likelihood has several local optima on such data (growth g against a
#: small sigma: found optima differ by 0.2 in log-likelihood on a fold of 12 prompts), where
#: a single-start fit and a multi-start reference need not agree; not compared here
MULTIMODAL = {"positional+style+request+output+growth"}


def dense_matrix(design: at.Design, data: at.Trials) -> np.ndarray:
    """One row per trial: a 0/1 column per style (an unseen style 1/ns in each), a 0/1 column
    per draft position 2 .. P, log output position."""
    rows = []
    for p, i, n in zip(data.prompt, data.draft_pos, data.out_pos):
        row = []
        if design.styles == ("*",):
            row.append(1.0)
        else:
            s = style_of(p)
            row += ([1.0 if s == t else 0.0 for t in design.styles] if s in design.styles
                    else [1.0 / len(design.styles)] * len(design.styles))
        row += [1.0 if min(i, at.MAX_POSITION) == j else 0.0
                for j in range(2, design.positions + 1)]
        if design.output:
            row.append(float(np.log(max(n, 1))))
        rows.append(row)
    return np.array(rows, dtype=float).reshape(len(rows), design.width)


def loop_nll(theta: np.ndarray, X: np.ndarray, data: at.Trials, request: bool,
             spread: np.ndarray | None, ridge: float = at._RIDGE) -> float:
    """The negative log-likelihood, trial by trial and prompt by prompt."""
    nb = X.shape[1]
    beta = theta[:nb]
    eta = X @ beta
    total = 0.0
    if not request:
        for e, y, w in zip(eta, data.y, data.w):
            total += w * (y * e - np.log1p(np.exp(e)))
        return -total + ridge * float(beta @ beta)
    sigma = np.exp(theta[nb])
    g = theta[nb + 1] if spread is not None else 0.0
    for p in sorted(set(data.prompt)):
        mine = np.flatnonzero(data.prompt == p)
        terms = []
        for x, wt in zip(np.sqrt(2.0) * NODES, GH_W / np.sqrt(np.pi)):
            ll = 0.0
            for t in mine:
                scale = np.exp(g * spread[t]) if spread is not None else 1.0
                z = eta[t] + sigma * scale * x
                ll += data.w[t] * (data.y[t] * z - np.logaddexp(0.0, z))
            terms.append(ll + np.log(wt))
        total += float(np.logaddexp.reduce(terms))
    return -total + ridge * float(beta @ beta)


def dense_nll(theta: np.ndarray, X: np.ndarray, data: at.Trials, request: bool,
              spread: np.ndarray | None) -> tuple[float, np.ndarray]:
    """``loop_nll`` in dense arrays, with its gradient (the formulas of the dense fit the
    pooled one replaced)."""
    nb = X.shape[1]
    beta = theta[:nb]
    eta = X @ beta
    y, wt = data.y, data.w
    ridge = at._RIDGE * float(beta @ beta)
    if not request:
        p = expit(eta)
        ll = wt * (y * eta - np.logaddexp(0.0, eta))
        return -float(ll.sum()) + ridge, -(X.T @ (wt * (y - p))) + 2 * at._RIDGE * beta
    names = sorted(set(data.prompt))
    groups = np.array([[1.0 if q == p else 0.0 for q in data.prompt] for p in names])
    sigma = float(np.exp(theta[nb]))
    weight = np.ones(y.size) if spread is None else np.exp(float(theta[nb + 1]) * spread)
    nodes = np.sqrt(2.0) * NODES
    z = eta[:, None] + sigma * weight[:, None] * nodes[None, :]
    per = groups @ (wt[:, None] * (y[:, None] * z - np.logaddexp(0.0, z)))
    per += np.log(GH_W / np.sqrt(np.pi))[None, :]
    lse = np.logaddexp.reduce(per, axis=1)
    post = np.exp(per - lse[:, None])
    w = (groups.T @ post) * wt[:, None] * (y[:, None] - expit(z))
    wn = (w * nodes[None, :]).sum(axis=1) * sigma * weight
    extra = [-float(wn.sum())] + ([] if spread is None else [-float(wn @ spread)])
    return (-float(lse.sum()) + ridge,
            np.concatenate([-(X.T @ w.sum(axis=1)) + 2 * at._RIDGE * beta, extra]))


def design_of(cand: at.Candidate, data: at.Trials) -> at.Design:
    _, style, positional, request, output, growth = cand
    styles = tuple(sorted({style_of(p) for p in data.prompt})) if style else ("*",)
    positions = min(int(data.draft_pos.max()), at.MAX_POSITION) if positional else 1
    return at.Design(styles, positions, output, request, growth and request)


def best(starts, X, data, spread, bounds) -> np.ndarray:
    """The lowest of the optima reached from each start (the request level makes the
    likelihood non-convex: at sigma's lower bound it is flat in sigma and g)."""
    runs = [optimize.minimize(dense_nll, x0, args=(X, data, True, spread), jac=True,
                              method="L-BFGS-B", bounds=bounds, options=TIGHT) for x0 in starts]
    return min(runs, key=lambda r: r.fun).x


def reference_fit(cand: at.Candidate, data: at.Trials) -> at.FittedModel:
    """Cold start, three stages (logistic terms, sigma, growth), each request stage the best
    of several starts, converged tightly."""
    d = design_of(cand, data)
    X = dense_matrix(d, data)
    spread = d.spread_index(data.draft_pos)
    nb = X.shape[1]
    p0 = np.clip(data.y.mean(), 0.02, 0.98)
    theta = np.zeros(nb)
    theta[:len(d.styles)] = np.log(p0 / (1 - p0))
    bounds = [(None, None)] * nb + [(np.log(1e-3), np.log(5)), (-2.0, 2.0)]
    theta = optimize.minimize(dense_nll, theta, args=(X, data, False, None), jac=True,
                              method="L-BFGS-B", options=TIGHT).x
    sigma = growth = 0.0
    if d.request:
        x = best([np.append(theta, np.log(s0)) for s0 in (0.5, 0.1, 0.01)], X, data, None,
                 bounds[:nb + 1])
        theta, sigma = x[:nb], float(np.exp(x[nb]))
        if d.growth:
            x = best([np.concatenate([x[:nb], [np.log(s0), g0]]) for s0 in (sigma, 0.1, 0.5)
                      for g0 in (0.0, -1.0, 1.0)], X, data, spread, bounds)
            theta, sigma, growth = x[:nb], float(np.exp(x[nb])), float(x[nb + 1])
    return at.FittedModel(cand[0], d, tuple(theta), sigma,
                          float(np.average(data.out_pos, weights=data.w)), growth)


def reference_score(model: at.FittedModel, data: at.Trials) -> float:
    X = dense_matrix(model.design, data)
    request = model.design.request and model.sigma > 0
    theta = np.concatenate([model.beta, [np.log(max(model.sigma, 1e-9)), model.growth]])
    spread = model.design.spread_index(data.draft_pos) if model.design.growth else None
    return loop_nll(theta, X, data, request, spread, ridge=0.0) / float(data.w.sum())


def reference_select(traces) -> dict[str, tuple[float, float | None, float]]:
    """Per candidate (CV CRPS, CV NLL per token, CV rms accepted-token error), and the
    chosen: leave-one-prompt-out, each fold's fit on ``Trials.subset``."""
    data = at.trials(traces)
    prompts = sorted(set(data.prompt))
    patterns = cv._patterns(traces)
    builders = [(c[0], (lambda d, c=c: reference_fit(c, d)), True) for c in at.CANDIDATES]
    if patterns:
        builders.append((cv.RESAMPLED, lambda d: cv.resampled_model(patterns, d), False))
    out = {}
    for name, build, nll in builders:
        crps, errs, nll_sum, tok = [], [], 0.0, 0.0
        for group in cv.folds(prompts):
            model = build(data.subset(set(prompts) - set(group)))
            for p in group:
                test = data.subset({p})
                draws = cv.prompt_draws(model.spec(), test,
                                        np.random.default_rng(prompts.index(p)))
                seen = float(test.rows[3].mean())
                crps.append(cv.crps(draws, seen))
                errs.append(abs((draws.mean() - seen) / seen) if seen > 0 else 0.0)
                if nll:
                    nll_sum += reference_score(model, test) * float(test.w.sum())
                    tok += float(test.w.sum())
        out[name] = (float(np.mean(crps)), nll_sum / tok if nll else None,
                     float(np.sqrt(np.mean(np.square(errs)))))
    return out


def small_traces(seed: int, per_style: int, greedy: bool, ks: tuple[int, ...]):
    keys = [f"{s}-{i}" for s in ("chat", "code", "math") for i in range(per_style)]
    return [fake_trace(SPEC, keys, k, length=30, seed=seed + k,
                       temperature=0.0 if greedy else 1.0) for k in ks]


@given(st.integers(0, 10_000), st.sampled_from([(1, 3), (2, 4), (4,)]), st.booleans(),
       st.floats(-2, 2), st.floats(-1.5, 0.5), st.floats(-0.5, 0.5))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_pooled_likelihood_is_the_trial_by_trial_one(seed, ks, greedy, level, log_sigma,
                                                     growth):
    """Value and gradient of every candidate's objective, with and without the request
    level, on random traces and parameters: the pooled cells give each trial's likelihood
    (value to 1e-9; gradient to the dense formulas' to 1e-7 and to central differences)."""
    data = at.trials(small_traces(seed, 2, greedy, ks))
    cells = at.Cells.of(data)
    rng = np.random.default_rng(seed)
    for cand in at.CANDIDATES:
        d = at.design_for(cand, cells)
        assert d == design_of(cand, data)
        X = dense_matrix(d, data)
        for request in {False, d.request}:
            growing = request and d.growth
            theta = np.concatenate([level + 0.3 * rng.standard_normal(d.width),
                                    [log_sigma, growth] if request else []])
            spread = d.spread_index(data.draft_pos) if growing else None
            pb = at.problem(d, cells, by_prompt=request)
            theta = theta if growing or not request else theta[:-1]
            f, g = at.objective(theta, pb, request, growing)
            assert f == pytest.approx(loop_nll(theta, X, data, request, spread), rel=1e-9)
            f2, g2 = dense_nll(theta, X, data, request, spread)
            assert f == pytest.approx(f2, rel=1e-9)
            assert g == pytest.approx(g2, rel=1e-7, abs=1e-7)
            h = 1e-5
            for j in range(theta.size):
                step = np.zeros(theta.size)
                step[j] = h
                fd = (loop_nll(theta + step, X, data, request, spread)
                      - loop_nll(theta - step, X, data, request, spread)) / (2 * h)
                assert g[j] == pytest.approx(fd, rel=1e-4, abs=1e-4), (cand[0], request, j)


@pytest.mark.parametrize("seed,per_style,greedy,ks", [(3, 2, False, (2, 4)),
                                                      (11, 3, True, (2, 4)),
                                                      (7, 3, False, (1, 3)),
                                                      (5, 4, True, (3,))])
def test_selection_matches_the_straightforward_one(seed, per_style, greedy, ks):
    """Every candidate's CV scores and the choice of the fast selection (pooled cells, folds
    as masks, fold fits warm-started from the all-prompt fit, optimizer in scaled
    coordinates) against the reference: cold-start dense fits on each fold's subset."""
    traces = small_traces(seed, per_style, greedy, ks)
    ref = reference_select(traces)
    sel = cv.select(traces)
    got = {r.candidate: r for r in sel.scores}
    assert list(got) == list(ref)
    for name, (c, nll, err) in ref.items():
        if name in MULTIMODAL:
            continue
        assert got[name].cv_crps == pytest.approx(c, rel=2e-3), name
        assert got[name].cv_accept_error == pytest.approx(err, rel=2e-2, abs=1e-4), name
        if nll is None:
            assert got[name].cv_nll_per_token is None
        else:
            assert got[name].cv_nll_per_token == pytest.approx(nll, rel=1e-6), name
    ranked = sorted((n for n in ref if n not in MULTIMODAL), key=lambda n: ref[n][0])
    clear = ref[ranked[1]][0] > ref[ranked[0]][0] * (1 + 5e-3)
    if clear and sel.chosen.candidate not in MULTIMODAL:      # a clear winner: the same
        assert sel.chosen.candidate == ranked[0]
    if isinstance(sel.chosen, at.FittedModel):
        full = reference_fit(next(c for c in at.CANDIDATES if c[0] == sel.chosen.candidate),
                             at.trials(traces))
        assert sel.chosen.beta == pytest.approx(full.beta, rel=1e-4, abs=1e-4)
        assert sel.chosen.sigma == pytest.approx(full.sigma, rel=1e-4, abs=1e-5)
