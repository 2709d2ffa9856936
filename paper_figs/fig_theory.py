"""Figure 1 (theory): the exact PSD saving 1 - T_PSD/T_SD against x = alpha*V for the
frontier f(t) = 1 - exp(-alpha t), next to the saving the paper's Lemma 1 + Lemma 2 bound
guarantees, the 37% and 50% lines, the Theorem-1 threshold, and the region of x where the
exact saving is at least 37% (shaded).  Pure closed form (analysis.theory), no simulation."""
from __future__ import annotations

import os

import numpy as np

from psdlab.paper_figs.common import FigOptions, FigureOutput, Tick, new_figure, save_png, write_csv

NAME = "theory"
TITLE = "exact PSD saving vs alpha*V with the paper's Theorem-1 bound"
COLUMNS = ("alpha_v", "exact_saving", "exact_ratio", "paper_saving_bound", "paper_ratio_bound",
           "in_region_37", "theorem1_applies", "theorem1_claim_true")


def units(opts: FigOptions) -> int:
    return 1


def rows(points: int) -> list[dict]:
    from psdlab.analysis.theory import (THEOREM1_RATIO, THEOREM1_SAVING, exact_ratio,
                                 paper_ratio_bound, theorem1_threshold)

    x = np.unique(np.concatenate([np.logspace(-2, 3, points), [1.2564312086261695,
                                                                theorem1_threshold()]]))
    ratio, bound = exact_ratio(x), paper_ratio_bound(x)
    x0 = theorem1_threshold()
    return [{"alpha_v": float(xi), "exact_saving": float(1 - 1 / r), "exact_ratio": float(r),
             "paper_saving_bound": float(1 - 1 / b), "paper_ratio_bound": float(b),
             "in_region_37": bool(1 - 1 / r >= THEOREM1_SAVING),
             "theorem1_applies": bool(xi >= x0),
             "theorem1_claim_true": bool(r > THEOREM1_RATIO) if xi >= x0 else None}
            for xi, r, b in zip(x, ratio, bound)]


def _plot(data: list[dict], outdir: str) -> str:
    from psdlab.analysis.theory import (THEOREM1_SAVING, peak, region, theorem1_check,
                                        theorem1_threshold)

    x = np.array([r["alpha_v"] for r in data])
    exact = np.array([r["exact_saving"] for r in data])
    bound = np.array([r["paper_saving_bound"] for r in data])
    fig, (ax,) = new_figure(width=8.5, height=6.4)
    for lo, hi in region(THEOREM1_SAVING, "exact"):
        ax.axvspan(lo, hi, color="#1f77b4", alpha=0.10,
                   label=f"exact saving >= 37%: {lo:.3g} <= alpha*V <= {hi:.3g}")
    ax.plot(x, exact, color="#1f77b4", lw=2.2, label="exact saving 1 - T_PSD/T_SD")
    shown = bound >= -0.05
    ax.plot(x[shown], bound[shown], color="#d62728", lw=1.8, ls="--",
            label="paper's bound (Lemma 1 + Lemma 2), saving")
    ax.axhline(0.5, color="k", lw=1, ls=":", label="50% (naive upper bound)")
    ax.axhline(THEOREM1_SAVING, color="#555", lw=1, ls="-.", label="37% (Theorem 1 claim)")
    x0 = theorem1_threshold()
    chk = theorem1_check()
    ax.axvline(x0, color="#2ca02c", lw=1.2,
               label=f"Theorem 1 threshold alpha*V = {x0:.3f} (claim false above "
                     f"{chk.fails_above:.2f})")
    pk = peak()
    ax.plot([pk.alpha_v], [pk.saving], "k*", ms=11,
            label=f"peak: {pk.saving:.1%} at alpha*V = {pk.alpha_v:.4f}")
    ax.set_xscale("log")
    ax.set_ylim(-0.05, 0.56)
    ax.set_xlabel("alpha * V (dimensionless: frontier curvature x verification time per step)")
    ax.set_ylabel("time saved by PSD, 1 - T_PSD / T_SD (fraction)")
    ax.set_title("Theory, f(t) = 1 - exp(-alpha t): PSD vs SD at the same verified tokens per "
                 "step (iso-batch),\nexact optimum vs the paper's bound; whole system, "
                 "not per device", fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2,
              frameon=False)
    return save_png(fig, outdir, "fig1_theory")


def make(opts: FigOptions, tick: Tick) -> FigureOutput:
    data = rows(120 if opts.quick else 400)
    out = FigureOutput(NAME)
    out.csvs.append(write_csv(os.path.join(opts.outdir, "fig1_theory.csv"), COLUMNS, data))
    out.pngs.append(_plot(data, opts.outdir))
    tick(1)
    return out
