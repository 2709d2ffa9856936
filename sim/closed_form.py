"""Exact expected makespan of a *finite* offline run with constant step times (the check that
the simulator is right, ``tests/test_sim_closed_form.py``).

Setting: every forward pass of the target costs ``c_t`` seconds and of the drafter ``c_d``
(constant cost models), so drafting k tokens takes t = k c_d and a verification V = c_t;
per-token geometric acceptance alpha; an offline batch of identical requests with output
length L; no KV limit.  The prefill produces the first token, so each request needs L' = L - 1
more tokens from verifications; a verification emits min(G + 1, remaining) tokens where G, the
accepted drafts, is geometric truncated at k: P(G = j) = alpha^j (1 - alpha) for j < k,
P(G = k) = alpha^k, hence E[G + 1] = (1 - alpha^(k+1)) / (1 - alpha).

Per request, the number of verifications N is a random variable; its distribution comes from a
dynamic program over tokens emitted after s steps (mass reaching L' is absorbed), so
P(N <= s) = P(emitted after s steps >= L').  A batch of m requests is verified until its last
request finishes: N_b = max of m independent N (P(N_b <= s) = P(N <= s)^m).  The analysis
layer's steady-state T_SD = R (t + V) / f ignores exactly this max (the drain tail) and the
start-up; here both are explicit:

- **SD** (one batch of m, ``mode = "sd"``, drafter co-located): prefill (target, then drafter on
  the same device) then N_b steps of draft + verify:
  ``T = c_t + c_d + N_b (t + V)``.
- **PSD** (two batches of m, the paper's manager, drafter on its own device): one prefill of
  all 2m (target and drafter in parallel), the **start-up**: batch 0 drafted alone (t), then
  overlapped steps of max(t, V) while both batches have requests; when one batch runs out, the
  other is verified alone (V) -- it was drafted during the last overlapped step -- and the
  **drain tail** runs as standard SD (t + V per step, drafter on its own device):
  ``T = max(c_t, c_d) + t + 2 N0 - 1 overlapped + V + (N1 - N0)(t + V)``  if N0 <= N1,
  ``T = max(c_t, c_d) + t + 2 N1 overlapped + V + (N0 - N1 - 1)(t + V)``  if N0 > N1
  (batch 0 is verified at odd steps, batch 1 at even ones).

The expectation is summed exactly over the joint distribution of (N0, N1).
"""
from __future__ import annotations

import numpy as np

from psdlab.analysis.checks import check_int, check_positive, check_range


def emitted_pmf(alpha: float, k: int) -> np.ndarray:
    """P(tokens emitted by one verification = e) for e = 0..k+1 (index e; e = 0 impossible)."""
    j = np.arange(k + 1)
    p = alpha ** j * (1.0 - alpha)
    p[k] = alpha ** k
    return np.concatenate([[0.0], p])


def steps_cdf(alpha: float, k: int, tokens: int, tol: float = 1e-14) -> np.ndarray:
    """cdf[s] = P(N <= s): a request needing ``tokens`` tokens is done within s verifications."""
    tokens = check_int("tokens", tokens, 0)
    if tokens == 0:
        return np.ones(1)
    pe = emitted_pmf(alpha, k)
    dist = np.zeros(tokens + 1)
    dist[0] = 1.0
    cdf = [0.0]
    while cdf[-1] < 1.0 - tol and len(cdf) <= tokens + 1:
        done = dist[tokens]
        live = dist.copy()
        live[tokens] = 0.0
        conv = np.convolve(live, pe)
        new = conv[:tokens + 1].copy()
        new[tokens] += conv[tokens + 1:].sum() + done
        dist = new
        cdf.append(float(dist[tokens]))
    return np.minimum(np.asarray(cdf), 1.0)


def max_steps_pmf(alpha: float, k: int, tokens: int, m: int) -> np.ndarray:
    """pmf of the max of m independent step counts (index = steps)."""
    cdf = steps_cdf(alpha, k, tokens) ** check_int("m", m, 1)
    return np.diff(np.concatenate([[0.0], cdf]))


def _check(alpha: float, k: int, L: int) -> None:
    check_range("alpha", alpha, 0.0, 1.0, hi_open=True)
    check_int("k", k, 1)
    check_int("output_len", L, 1)


def sd_makespan(alpha: float, k: int, m: int, L: int, c_t: float, c_d: float) -> float:
    """E[makespan] of co-located SD on m requests (see the module docstring)."""
    _check(alpha, k, L)
    c_t, c_d = check_positive("c_t", c_t), check_positive("c_d", c_d)
    pmf = max_steps_pmf(alpha, k, L - 1, m)
    steps = float((np.arange(pmf.size) * pmf).sum())
    return c_t + c_d + steps * (k * c_d + c_t)


def psd_makespan(alpha: float, k: int, m: int, L: int, c_t: float, c_d: float) -> float:
    """E[makespan] of PSD on 2m requests in two batches of m (see the module docstring)."""
    _check(alpha, k, L)
    c_t, c_d = check_positive("c_t", c_t), check_positive("c_d", c_d)
    if L == 1:
        return max(c_t, c_d)
    t, V = k * c_d, c_t
    pmf = max_steps_pmf(alpha, k, L - 1, m)
    n = np.arange(pmf.size, dtype=float)
    n0, n1 = np.meshgrid(n, n, indexing="ij")
    over = np.where(n0 <= n1, 2 * n0 - 1, 2 * n1)
    tail = np.where(n0 <= n1, n1 - n0, n0 - n1 - 1)
    total = max(c_t, c_d) + t + over * max(t, V) + V + tail * (t + V)
    return float((np.outer(pmf, pmf) * total).sum())
