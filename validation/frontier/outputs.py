"""Files of `psdlab frontier`: results JSON, per-drafter CSV, the figure (PNG) and the markdown
summary, all from the result of ``validation.frontier.run_frontier.run_frontier``
(`FrontierResult`; results.json is its ``to_dict()``).

The figure has three panels: VSR against drafting time t (measured points with their noise,
the upper envelope, the fitted 1 - exp(-alpha t), V marked); the measured and the predicted
time per generated token against t for SD; the same for PSD (each mode's measured and
predicted optimum marked).
"""
from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from psdlab.analysis.figure_style import FIGURE_DPI
from psdlab.validation.frontier.frontier_results import FrontierFiles, FrontierResult, FrontierRow

if TYPE_CHECKING:
    from matplotlib.axes import Axes

CSV_FIELDS = tuple(f.name for f in fields(FrontierRow))


def finite(obj: Any) -> Any:
    """The object with every non-finite float replaced by None (valid JSON)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def _ms(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else 1e3 * float(x)


def csv_rows(result: FrontierResult) -> list[FrontierRow]:
    pred = result.prediction
    env = set(pred.envelope)
    P = pred.predictions
    rows = []
    for i, (pt, row) in enumerate(zip(result.points, result.measured)):
        rows.append(FrontierRow(
            drafter=row.drafter, layers=row.layers, depth=row.depth,
            distilled=row.distilled, on_envelope=row.drafter in env,
            t_ms=_ms(pt.t), V_ms=_ms(pt.V), overhead_ms=_ms(pt.overhead),
            t_overlap_ms=_ms(pt.t_overlapped), V_overlap_ms=_ms(pt.V_overlapped),
            slow_t=pred.contention.slow_t[i], slow_V=pred.contention.slow_V[i],
            t_cv=pt.t_cv, V_cv=pt.V_cv, vsr=pt.vsr,
            vsr_se=row.vsr_rounds.se, vsr_fit=pred.fit.vsr_fit[i],
            mean_acceptance_length=row.mean_acceptance_length.mean,
            sd_ms_per_tok=_ms(row.sd.mean), sd_se=_ms(row.sd.se),
            psd_ms_per_tok=_ms(row.psd.mean), psd_se=_ms(row.psd.se),
            psd_iso_c_ms_per_tok=_ms(row.psd_iso_c.mean),
            psd_iso_c_se=_ms(row.psd_iso_c.se),
            ar_ms_per_tok=_ms(row.ar.mean), ar_2m_ms_per_tok=_ms(row.ar_2m.mean),
            paper_sd_ms_per_tok=_ms(P["paper.points"].sd_time_per_token_s[i]),
            paper_psd_ms_per_tok=_ms(P["paper.points"].psd_time_per_token_s[i]),
            batch_sd_ms_per_tok=_ms(P["batch.points"].sd_time_per_token_s[i]),
            batch_psd_ms_per_tok=_ms(P["batch.points"].psd_time_per_token_s[i]),
            batch_fit_sd_ms_per_tok=_ms(P["batch.fit"].sd_time_per_token_s[i]),
            batch_fit_psd_ms_per_tok=_ms(P["batch.fit"].psd_time_per_token_s[i]),
        ))
    return rows


def write_rows_csv(path: Path, rows: Sequence[FrontierRow]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if v is None else f"{v:.6g}" if isinstance(v, float) else v)
                        for k, v in asdict(r).items()})


def _vsr_panel(ax: Axes, result: FrontierResult, rows: Sequence[FrontierRow],
               t: np.ndarray) -> None:
    """VSR against t: the measured points, the upper envelope, the fit, V."""
    pred = result.prediction
    vsr = np.array([r.vsr for r in rows])
    err = np.array([r.vsr_se or 0.0 for r in rows])
    ax.errorbar(t, vsr, yerr=err, fmt="o", color="#1f77b4", label="measured", zorder=3)
    for r in rows:
        ax.annotate(r.drafter, (r.t_ms, r.vsr), fontsize=7, xytext=(3, 3),
                    textcoords="offset points")
    env = sorted((i for i, r in enumerate(rows) if r.on_envelope), key=lambda i: t[i])
    xs, ys = [0.0], [0.0]
    for i in env:
        xs += [t[i], t[i]]
        ys += [ys[-1], rows[i].vsr]
    xs.append(1.15 * t.max())
    ys.append(ys[-1])
    ax.plot(xs, ys, color="#2ca02c", lw=1.2, label="upper envelope")
    grid = np.linspace(0.0, 1.15 * t.max(), 300)
    alpha = pred.fit.alpha_per_s
    ax.plot(grid, -np.expm1(-alpha * grid / 1e3), color="#d62728", ls="--",
            label=f"fit 1-exp(-alpha t), alpha V = {pred.fit.alpha_v:.3g}")
    ax.axvline(1e3 * pred.V_s, color="grey", ls=":", label="V (median)")
    ax.set_xlabel("drafting time per step t (ms)")
    ax.set_ylabel("VSR (accepted / verified draft tokens)")
    ax.set_title(f"measured frontier (k={pred.k}, m={pred.m})")
    ax.legend(fontsize=7)


def _time_panel(ax: Axes, result: FrontierResult, rows: Sequence[FrontierRow], t: np.ndarray,
                mode: str, title: str) -> None:
    """Measured and predicted time per token of ``mode`` against t, the measured and the
    predicted best marked, AR at the same concurrency."""
    import matplotlib.ticker
    order = np.argsort(t)
    times = [r.mode_times(mode) for r in rows]
    meas = np.array([x.measured for x in times], dtype=float)
    se = np.array([x.se or 0.0 for x in times], dtype=float)
    ax.errorbar(t[order], meas[order], yerr=se[order], fmt="o-", color="k", label="measured")
    batch = np.array([x.batch for x in times], dtype=float)        # None: nan
    for vals, color, label in (
            (batch, "#1f77b4", "batch-aware (points)"),
            (np.array([x.batch_fit for x in times], dtype=float), "#9467bd", "batch-aware (fit)"),
            (np.array([x.paper for x in times], dtype=float), "#d62728", "paper (points)")):
        ax.plot(t[order], vals[order], "s--", color=color, ms=4, lw=1, label=label)
    measured, predicted = result.judgement.measured, result.judgement.models["batch.points"]
    mb = measured.best_sd if mode == "sd" else measured.best_psd
    pb = predicted.best_sd if mode == "sd" else predicted.best_psd
    names = [r.drafter for r in rows]
    i, j = names.index(mb), names.index(pb)
    ax.scatter([t[i]], [meas[i]], s=180, facecolors="none", edgecolors="k", lw=1.5,
               label=f"measured best: {mb}", zorder=4)
    ax.scatter([t[j]], [batch[j]], marker="*", s=160, color="#1f77b4",
               label=f"predicted best: {pb}", zorder=4)
    ar_all = [x.ar for x in times if x.ar is not None]
    if ar_all:
        ar = float(np.mean(ar_all))
        ax.axhline(ar, color="grey", ls=":", label=f"AR ({'m' if mode == 'sd' else '2m'})")
    finite_vals = [v for x in times for v in (x.measured, x.batch) if v]
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.yaxis.set_minor_formatter(matplotlib.ticker.ScalarFormatter())
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set_ylim(0.7 * min(finite_vals + ar_all), 2.5 * max(finite_vals))
    ax.axvline(1e3 * result.prediction.V_s, color="grey", ls=":")
    ax.set_xlabel("drafting time per step t (ms)")
    ax.set_ylabel("time per generated token (ms, steady-state decode; log)")
    ax.set_title(title)
    ax.legend(fontsize=6, loc="upper left")


def write_frontier_figure(path: Path, result: FrontierResult, rows: Sequence[FrontierRow]
                          ) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    t = np.array([r.t_ms for r in rows])
    fig, axes = plt.subplots(1, 3, figsize=(15.0, 4.6))
    _vsr_panel(axes[0], result, rows, t)
    for ax, mode, title in ((axes[1], "sd", "SD-separate (batch m)"),
                            (axes[2], "psd", "PSD (2 x m, iso-batch)")):
        _time_panel(ax, result, rows, t, mode, title)
    fig.tight_layout()
    fig.savefig(path, dpi=FIGURE_DPI)
    plt.close(fig)


def write_outputs(result: FrontierResult) -> FrontierFiles:
    """results.json, frontier.csv, frontier.png, summary.md where ``result.files`` says (their
    folder made); those paths."""
    from psdlab.validation.frontier.summary import summary_markdown
    files = result.files
    Path(files.json).parent.mkdir(parents=True, exist_ok=True)
    rows = csv_rows(result)
    write_rows_csv(Path(files.csv), rows)
    write_frontier_figure(Path(files.png), result, rows)
    Path(files.markdown).write_text(summary_markdown(result, rows))
    Path(files.json).write_text(json.dumps(finite(result.to_dict()), indent=1) + "\n")
    return files
