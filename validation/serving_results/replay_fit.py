"""The replay fit behind ``calibration``: step-cost coefficients that make the simulator
reproduce a benchmark's per-request TTFT and TPOT when it replays its requests.

Residuals: ``log(mean simulated / mean measured)`` over groups of GROUP requests, of their
TTFT (grouped by prompt length) and of their TPOT ((e2el - TTFT) / (output - 1), the mean of a
request's inter-token latencies; grouped by send time), over every run given
(``ReplayProblem``).  The coefficients are fitted in units of an initial guess (from the
medians of the data), bounded to [0, 50] such units: Nelder-Mead with two restarts, then a
few bounded Gauss-Newton steps with a wide-difference Jacobian (``_solve``).  A replay's
times move in small jumps when a request's admission crosses a step boundary; the groups'
means and the derivative-free search keep those jumps from stalling the fit (a trust-region
least squares stalls on them).  The replays share the fit's seed (common random numbers).

Intervals: a bootstrap over requests -- each replicate draws the requests of every run with
replacement (the groups' means weighted by the draw), re-seeds the replays' own randomness
(acceptance draws), takes an earlier stage's replicate for the coefficients it holds fixed,
and moves from the estimate by the bounded Gauss-Newton step of its residuals with the
Jacobian at the estimate (central differences a tenth of a unit wide: ``fd_jacobian``) --
percentile 95%.  One replay per run and replicate, so it is cheap; being linearised, it
describes the requests' scatter, not the optimiser's own error nor the model's form.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
from scipy.optimize import lsq_linear, minimize

from psdlab.sim.sim_config import ServerConfig
from psdlab.validation.serving_results.replay import (BenchRun, replay_config, replay_times,
                                                      server_for, write_replay_csv)

UPPER = 50.0          # upper bound of a coefficient, in units of its initial guess
LOWER_BASE = 1e-3     # the fixed step cost stays > 0 (a cost model needs one positive term)
GROUP = 8             # requests per residual (a group's mean TTFT or TPOT)
FD_STEP = 0.1         # width of the Jacobian's differences, in units of the initial guess


@dataclass(frozen=True)
class Param:
    role: str            # "target" or "drafter"
    term: str            # affine term
    guess: float         # initial value (s); the unit of the fit
    #: other roles that take this coefficient times a factor (a structural prior's tie:
    #: ``(("drafter", 0.6),)`` sets drafter.<term> = 0.6 x this value)
    tied: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class FitOutcome:
    values: dict[str, float]               # "role.term" -> seconds
    intervals: dict[str, tuple[float, float]]
    correlations: dict[str, float]         # "a~b" -> correlation of the linearised fit
    residual_rms: float
    n_residuals: int
    evaluations: int
    draws: tuple[dict[str, dict[str, float]], ...] = ()   # the bootstrap replicates by role


def groups_of(keys: np.ndarray, size: int) -> list[np.ndarray]:
    """Requests in ``keys`` order cut into consecutive groups of about ``size`` (the last
    group takes the remainder)."""
    order = np.argsort(keys, kind="stable")
    n_groups = max(1, order.size // size)
    return [g for g in np.array_split(order, n_groups) if g.size]


class ReplayProblem:
    """The residuals of one stage's runs as a function of its free coefficients.

    A residual is ``log(mean simulated / mean measured)`` over a group of GROUP requests:
    TTFT grouped by prompt length, TPOT by send time.  One request's TTFT jumps by a whole
    step when its arrival crosses a step boundary; a group's mean moves by a fraction of that,
    which keeps the cost smooth enough for the optimiser at the scale of the coefficients."""

    def __init__(self, runs: Sequence[BenchRun], params: Sequence[Param],
                 fixed: Mapping[str, Mapping[str, float]], acceptance: Mapping[str, Any] | None,
                 base_server: ServerConfig | None, seed: int, folder: str,
                 jitter_cv: float = 0.0) -> None:
        self.runs, self.params, self.fixed = list(runs), list(params), fixed
        self.jitter_cv = jitter_cv
        self.acceptance, self.seed = acceptance, seed
        self.scale = np.array([p.guess for p in params], dtype=float)
        self.csvs = [write_replay_csv(r, folder) for r in self.runs]
        self.servers = [server_for(r.mode, r.k, base_server) for r in self.runs]
        self.evaluations = 0
        self.ttft_groups = [groups_of(r.prompt.astype(float), GROUP) for r in self.runs]
        self.tpot_groups = []
        for r in self.runs:
            ok = np.flatnonzero(np.isfinite(r.tpot_s) & (r.tpot_s > 0))
            self.tpot_groups.append([ok[g] for g in groups_of(r.send_s[ok], GROUP)])
        self.weights = [np.ones(len(r)) for r in self.runs]

    def costs(self, x: np.ndarray) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {role: {"name": "affine", **dict(coef)}
                                          for role, coef in self.fixed.items()}
        for p, v in zip(self.params, x * self.scale):
            out.setdefault(p.role, {"name": "affine"})[p.term] = float(v)
            for role, factor in p.tied:
                out.setdefault(role, {"name": "affine"})[p.term] = float(factor * v)
        return out

    def simulate_runs(self, x: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Simulated (TTFT, TPOT) per request of each run."""
        self.evaluations += 1
        costs = self.costs(x)
        return [replay_times(replay_config({"name": "replay", "path": path}, len(run), server,
                                           costs["target"], costs.get("drafter"),
                                           self.acceptance, seed=self.seed,
                                           jitter_cv=self.jitter_cv))
                for run, path, server in zip(self.runs, self.csvs, self.servers)]

    def residuals(self, x: np.ndarray) -> np.ndarray:
        parts = []
        for j, (run, (ttft, tpot)) in enumerate(zip(self.runs, self.simulate_runs(x))):
            w = self.weights[j]
            for groups, sim, meas in ((self.ttft_groups[j], ttft, run.ttft_s),
                                      (self.tpot_groups[j], np.nan_to_num(tpot), run.tpot_s)):
                for g in groups:
                    wg = w[g]
                    if wg.sum() <= 0:
                        parts.append(0.0)
                        continue
                    num = max(float(wg @ sim[g]), 1e-12)
                    parts.append(np.sqrt(wg.sum() / g.size) * np.log(num / float(wg @ meas[g])))
        return np.asarray(parts, dtype=float)

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        lo = np.array([LOWER_BASE if p.term == "base" else 0.0 for p in self.params])
        return lo, np.full(len(self.params), UPPER)


def _nelder_mead(problem: ReplayProblem, x: np.ndarray, max_nfev: int,
                 spread: float) -> np.ndarray:
    lo, hi = problem.bounds()

    def cost(z: np.ndarray) -> float:
        r = problem.residuals(np.clip(z, lo, hi))
        return 0.5 * float(r @ r)
    simplex = np.vstack([x] + [x + np.eye(x.size)[j] * spread * max(x[j], 0.2)
                               for j in range(x.size)])
    sol = minimize(cost, x, method="Nelder-Mead", bounds=list(zip(lo, hi)),
                   options={"maxfev": max_nfev, "xatol": 1e-3, "fatol": 1e-5,
                            "initial_simplex": np.clip(simplex, lo, hi)})
    return np.clip(np.asarray(sol.x, dtype=float), lo, hi)


def _solve(problem: ReplayProblem, max_nfev: int) -> np.ndarray:
    """Nelder-Mead from the initial guess, restarted twice from its end with a fresh simplex
    (half a unit wide, then a quarter): derivative-free, so the replays' small jumps do not
    stall it as they stall a trust-region Gauss-Newton."""
    lo, hi = problem.bounds()
    x = np.clip(np.ones(len(problem.params)), lo, hi)
    for spread in (0.5, 0.5, 0.25):
        x = _nelder_mead(problem, x, max_nfev // 3, spread)
    return _gauss_newton(problem, x)


def _gauss_newton(problem: ReplayProblem, x: np.ndarray, rounds: int = 4) -> np.ndarray:
    """Polish: bounded Gauss-Newton steps with the wide-difference Jacobian, halved until the
    cost falls (Nelder-Mead ends where the replays' jumps stop it, short of the smooth
    minimum); the same linearisation the bootstrap steps with."""
    lo, hi = problem.bounds()
    r = problem.residuals(x)
    cost = float(r @ r)
    for _ in range(rounds):
        J = fd_jacobian(problem, x)
        step = lsq_linear(J, -r, bounds=(lo - x, hi - x)).x
        for frac in (1.0, 0.5, 0.25):
            trial = np.clip(x + frac * step, lo, hi)
            rt = problem.residuals(trial)
            if float(rt @ rt) < cost:
                x, r, cost = trial, rt, float(rt @ rt)
                break
        else:
            break
    return x


def fd_jacobian(problem: ReplayProblem, x: np.ndarray, step: float = FD_STEP) -> np.ndarray:
    """Central differences ``step`` units wide (one-sided at a bound): wide enough to take in
    the replay's feedback (faster steps, smaller batches) and smooth over its small jumps."""
    lo, hi = problem.bounds()
    cols = []
    for j in range(x.size):
        up, down = x.copy(), x.copy()
        up[j] = min(x[j] + step, hi[j])
        down[j] = max(x[j] - step, lo[j])
        cols.append((problem.residuals(up) - problem.residuals(down)) / (up[j] - down[j]))
    return np.column_stack(cols)


def _bootstrap(problem: ReplayProblem, x: np.ndarray, J: np.ndarray, n_boot: int,
               rng: np.random.Generator,
               fixed_draws: Sequence[Mapping[str, Mapping[str, float]]] = ()) -> np.ndarray:
    """Replicates on requests drawn with replacement (per run: the weights of the groups'
    means), each the bounded Gauss-Newton step from the estimate (the Jacobian ``J`` at the
    estimate, its residuals re-evaluated under the replicate's weights, fixed coefficients
    and re-seeded replays): one replay per run and replicate."""
    lo, hi = problem.bounds()
    seed0, fixed0 = problem.seed, problem.fixed
    samples = []
    for b in range(n_boot):
        if fixed_draws:
            problem.fixed = fixed_draws[b % len(fixed_draws)]
        problem.weights = [rng.multinomial(len(r), np.full(len(r), 1.0 / len(r))).astype(float)
                           for r in problem.runs]
        problem.seed = seed0 + 1 + b
        r = problem.residuals(x)
        step = lsq_linear(J, -r, bounds=(lo - x, hi - x)).x
        samples.append(np.clip(x + step, lo, hi))
    problem.seed, problem.fixed = seed0, fixed0
    problem.weights = [np.ones(len(r)) for r in problem.runs]
    return np.array(samples)


def fit_stage(runs: Sequence[BenchRun], params: Sequence[Param],
              fixed: Mapping[str, Mapping[str, float]], acceptance: Mapping[str, Any] | None,
              base_server: ServerConfig | None, *, seed: int, bootstrap: int,
              max_nfev: int = 300, jitter_cv: float = 0.0,
              fixed_draws: Sequence[Mapping[str, Mapping[str, float]]] = ()) -> FitOutcome:
    """Fit ``params`` (the others ``fixed``) to ``runs`` (module docstring); ``fixed_draws``:
    per bootstrap replicate, the fixed coefficients to use instead (``FitOutcome.draws`` of
    an earlier stage)."""
    with tempfile.TemporaryDirectory(prefix="psdlab-bench-fit-") as folder:
        problem = ReplayProblem(runs, params, fixed, acceptance, base_server, seed, folder,
                                jitter_cv)
        x = _solve(problem, max_nfev)
        r = problem.residuals(x)
        J = fd_jacobian(problem, x)
        samples = _bootstrap(problem, x, J, bootstrap, np.random.default_rng(seed),
                             fixed_draws)
    names = [f"{p.role}.{p.term}" for p in params]
    values = {n: float(v) for n, v in zip(names, x * problem.scale)}
    scaled = samples * problem.scale
    intervals = {n: (float(np.percentile(scaled[:, j], 2.5)),
                     float(np.percentile(scaled[:, j], 97.5))) for j, n in enumerate(names)}
    intervals = {n: (min(lo, values[n]), max(hi, values[n])) for n, (lo, hi) in intervals.items()}
    corr: dict[str, float] = {}
    jtj = J.T @ J
    if np.linalg.matrix_rank(jtj) == jtj.shape[0]:
        cov = np.linalg.inv(jtj)
        sd = np.sqrt(np.diag(cov))
        for a in range(len(names)):
            for b in range(a + 1, len(names)):
                corr[f"{names[a]}~{names[b]}"] = float(cov[a, b] / (sd[a] * sd[b]))
    else:
        for a in range(len(names)):
            for b in range(a + 1, len(names)):
                corr[f"{names[a]}~{names[b]}"] = float("nan")
    draws = []
    for row in scaled:
        d: dict[str, dict[str, float]] = {}
        for p, v in zip(params, row):
            d.setdefault(p.role, {})[p.term] = float(v)
        draws.append(d)
    return FitOutcome(values, intervals, corr, float(np.sqrt(np.mean(r ** 2))), int(r.size),
                      problem.evaluations, tuple(draws))
