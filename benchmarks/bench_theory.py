"""Benchmark: closed-form T_SD, T_PSD and their ratio at 1e6 random (alpha, V) points.

Goal: <= 1 s on one core.  Run: `python benchmarks/bench_theory.py [N]` (prints the times;
pin one core with `taskset -c 0` for a one-core figure)."""
from __future__ import annotations

import sys
import time

import numpy as np

from psdlab.analysis.theory import exact_ratio, exponential_optimum, sd_opt_draft


def main(n: int = 1_000_000, repeats: int = 3) -> None:
    rng = np.random.default_rng(0)
    alpha = 10 ** rng.uniform(-2, 2, n)
    v = 10 ** rng.uniform(-3, 1, n)
    exponential_optimum(alpha[:1000], v[:1000])          # warm-up (imports, caches)
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        opt = exponential_optimum(alpha, v)
        ratio = opt.ratio
        best = min(best, time.perf_counter() - t0)
    t0 = time.perf_counter()
    exact_ratio(alpha * v)
    t_ratio = time.perf_counter() - t0
    t0 = time.perf_counter()
    sd_opt_draft(alpha * v, method="lambertw")
    t_lw = time.perf_counter() - t0
    print(f"exponential_optimum (t_sd, T_sd, t_psd, T_psd, ratio) at {n:,} (alpha, V) points: "
          f"best of {repeats} {best:.3f} s  (goal <= 1 s)")
    print(f"exact_ratio(alpha*V) at {n:,} points: {t_ratio:.3f} s")
    print(f"sd_opt_draft(method='lambertw', scipy's W_-1 + Newton polish) at {n:,} points: "
          f"{t_lw:.3f} s")
    print(f"ratio range [{ratio.min():.6f}, {ratio.max():.6f}] (must lie in [1, 2])")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)
