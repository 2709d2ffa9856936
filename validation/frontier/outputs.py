"""Files of `psdlab frontier`: results JSON, per-drafter CSV, the figure (PNG) and the markdown
summary, all from the result dict of ``validation.frontier.run_frontier.run_frontier``.

The figure has three panels: VSR against drafting time t (measured points with their noise,
the upper envelope, the fitted 1 - exp(-alpha t), V marked); the measured and the predicted
time per generated token against t for SD; the same for PSD (each mode's measured and
predicted optimum marked).
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from psdlab.analysis.figure_style import FIGURE_DPI

CSV_FIELDS = ("drafter", "layers", "depth", "distilled", "on_envelope", "t_ms", "V_ms",
              "overhead_ms", "t_overlap_ms", "V_overlap_ms", "slow_t", "slow_V", "t_cv", "V_cv",
              "vsr", "vsr_se", "vsr_fit",
              "mean_acceptance_length", "sd_ms_per_tok", "sd_se", "psd_ms_per_tok", "psd_se",
              "psd_iso_c_ms_per_tok", "psd_iso_c_se", "ar_ms_per_tok", "ar_2m_ms_per_tok",
              "paper_sd_ms_per_tok", "paper_psd_ms_per_tok", "batch_sd_ms_per_tok",
              "batch_psd_ms_per_tok", "batch_fit_sd_ms_per_tok", "batch_fit_psd_ms_per_tok")


def finite(obj: Any) -> Any:
    """The object with every non-finite float replaced by None (valid JSON)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def _ms(x: Any) -> float | None:
    return None if x is None or not math.isfinite(x) else 1e3 * float(x)


def csv_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    pred = result["prediction"]
    env = set(pred["envelope"])
    P = pred["predictions"]
    rows = []
    for i, (pt, row) in enumerate(zip(result["points"], result["measured"])):
        rows.append({
            "drafter": row["drafter"], "layers": row["layers"], "depth": row["depth"],
            "distilled": row["distilled"], "on_envelope": row["drafter"] in env,
            "t_ms": _ms(pt["t"]), "V_ms": _ms(pt["V"]), "overhead_ms": _ms(pt["overhead"]),
            "t_overlap_ms": _ms(pt["t_overlapped"]), "V_overlap_ms": _ms(pt["V_overlapped"]),
            "slow_t": pred["contention"]["slow_t"][i], "slow_V": pred["contention"]["slow_V"][i],
            "t_cv": pt["t_cv"], "V_cv": pt["V_cv"], "vsr": pt["vsr"],
            "vsr_se": row["vsr_rounds"]["se"], "vsr_fit": pred["fit"]["vsr_fit"][i],
            "mean_acceptance_length": row["mean_acceptance_length"]["mean"],
            "sd_ms_per_tok": _ms(row["sd"]["mean"]), "sd_se": _ms(row["sd"]["se"]),
            "psd_ms_per_tok": _ms(row["psd"]["mean"]), "psd_se": _ms(row["psd"]["se"]),
            "psd_iso_c_ms_per_tok": _ms(row["psd_iso_c"]["mean"]),
            "psd_iso_c_se": _ms(row["psd_iso_c"]["se"]),
            "ar_ms_per_tok": _ms(row["ar"]["mean"]), "ar_2m_ms_per_tok": _ms(row["ar_2m"]["mean"]),
            "paper_sd_ms_per_tok": _ms(P["paper.points"]["sd_time_per_token_s"][i]),
            "paper_psd_ms_per_tok": _ms(P["paper.points"]["psd_time_per_token_s"][i]),
            "batch_sd_ms_per_tok": _ms(P["batch.points"]["sd_time_per_token_s"][i]),
            "batch_psd_ms_per_tok": _ms(P["batch.points"]["psd_time_per_token_s"][i]),
            "batch_fit_sd_ms_per_tok": _ms(P["batch.fit"]["sd_time_per_token_s"][i]),
            "batch_fit_psd_ms_per_tok": _ms(P["batch.fit"]["psd_time_per_token_s"][i]),
        })
    return rows


def write_rows_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else
                            f"{r[k]:.6g}" if isinstance(r[k], float) else r[k])
                        for k in CSV_FIELDS})


def write_frontier_figure(path: Path, result: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    pred, jd = result["prediction"], result["judgement"]
    t = np.array([r["t_ms"] for r in rows])
    order = np.argsort(t)
    fig, axes = plt.subplots(1, 3, figsize=(15.0, 4.6))
    ax = axes[0]
    vsr = np.array([r["vsr"] for r in rows])
    err = np.array([r["vsr_se"] or 0.0 for r in rows])
    ax.errorbar(t, vsr, yerr=err, fmt="o", color="#1f77b4", label="measured", zorder=3)
    for r in rows:
        ax.annotate(r["drafter"], (r["t_ms"], r["vsr"]), fontsize=7, xytext=(3, 3),
                    textcoords="offset points")
    env = [r for r in sorted(rows, key=lambda r: r["t_ms"]) if r["on_envelope"]]
    xs, ys = [0.0], [0.0]
    for r in env:
        xs += [r["t_ms"], r["t_ms"]]
        ys += [ys[-1], r["vsr"]]
    xs.append(1.15 * t.max())
    ys.append(ys[-1])
    ax.plot(xs, ys, color="#2ca02c", lw=1.2, label="upper envelope")
    grid = np.linspace(0.0, 1.15 * t.max(), 300)
    alpha = pred["fit"]["alpha_per_s"]
    ax.plot(grid, -np.expm1(-alpha * grid / 1e3), color="#d62728", ls="--",
            label=f"fit 1-exp(-alpha t), alpha V = {pred['fit']['alpha_v']:.3g}")
    ax.axvline(1e3 * pred["V_s"], color="grey", ls=":", label="V (median)")
    ax.set_xlabel("drafting time per step t (ms)")
    ax.set_ylabel("VSR (accepted / verified draft tokens)")
    ax.set_title(f"measured frontier (k={pred['k']}, m={pred['m']})")
    ax.legend(fontsize=7)
    for ax, mode, title in ((axes[1], "sd", "SD-separate (batch m)"),
                            (axes[2], "psd", "PSD (2 x m, iso-batch)")):
        meas = np.array([r[f"{mode}_ms_per_tok"] for r in rows], dtype=float)
        se = np.array([r[f"{mode}_se"] or 0.0 for r in rows], dtype=float)
        ax.errorbar(t[order], meas[order], yerr=se[order], fmt="o-", color="k",
                    label="measured")
        for key, color, label in ((f"batch_{mode}_ms_per_tok", "#1f77b4", "batch-aware (points)"),
                                  (f"batch_fit_{mode}_ms_per_tok", "#9467bd", "batch-aware (fit)"),
                                  (f"paper_{mode}_ms_per_tok", "#d62728", "paper (points)")):
            vals = np.array([np.nan if r[key] is None else r[key] for r in rows], dtype=float)
            ax.plot(t[order], vals[order], "s--", color=color, ms=4, lw=1, label=label)
        mb = jd["measured"][f"best_{mode}"]
        pb = jd["models"]["batch.points"][f"best_{mode}"]
        by_name = {r["drafter"]: r for r in rows}
        ax.scatter([by_name[mb]["t_ms"]], [by_name[mb][f"{mode}_ms_per_tok"]], s=180,
                   facecolors="none", edgecolors="k", lw=1.5, label=f"measured best: {mb}",
                   zorder=4)
        ax.scatter([by_name[pb]["t_ms"]], [by_name[pb][f"batch_{mode}_ms_per_tok"]],
                   marker="*", s=160, color="#1f77b4", label=f"predicted best: {pb}", zorder=4)
        ar_all = [r["ar_ms_per_tok" if mode == "sd" else "ar_2m_ms_per_tok"] for r in rows]
        ar_all = [a for a in ar_all if a is not None]
        if ar_all:
            ar = float(np.mean(ar_all))
            ax.axhline(ar, color="grey", ls=":", label=f"AR ({'m' if mode == 'sd' else '2m'})")
        finite_vals = [v for r in rows for v in (r[f"{mode}_ms_per_tok"],
                                                 r[f"batch_{mode}_ms_per_tok"]) if v]
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.yaxis.set_minor_formatter(matplotlib.ticker.ScalarFormatter())
        ax.tick_params(axis="y", which="minor", labelsize=7)
        ax.set_ylim(0.7 * min(finite_vals + ar_all), 2.5 * max(finite_vals))
        ax.axvline(1e3 * pred["V_s"], color="grey", ls=":")
        ax.set_xlabel("drafting time per step t (ms)")
        ax.set_ylabel("time per generated token (ms, steady-state decode; log)")
        ax.set_title(title)
        ax.legend(fontsize=6, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=FIGURE_DPI)
    plt.close(fig)


def write_outputs(out: Path, result: dict[str, Any]) -> dict[str, str]:
    """results.json, frontier.csv, frontier.png, summary.md in ``out``; their paths."""
    from psdlab.validation.frontier.summary import summary_markdown
    out.mkdir(parents=True, exist_ok=True)
    rows = csv_rows(result)
    files = {"json": str(out / "results.json"), "csv": str(out / "frontier.csv"),
             "png": str(out / "frontier.png"), "markdown": str(out / "summary.md")}
    write_rows_csv(Path(files["csv"]), rows)
    write_frontier_figure(Path(files["png"]), result, rows)
    Path(files["markdown"]).write_text(summary_markdown(result, rows))
    Path(files["json"]).write_text(json.dumps(finite({**result, "files": files}), indent=1)
                                   + "\n")
    return files
