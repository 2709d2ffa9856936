"""The validation report's figures (PNG through matplotlib's Agg backend), each written with the
CSV of the numbers it plots.

- ``predicted_vs_measured``: throughput, mean TPOT and p99 end-to-end latency of every replayed
  run, predicted against measured, with the identity line and the +-5% / +-10% bands;
- ``gains``: the PSD/SD gain per SD/PSD pair, measured, simulated and closed form;
- ``throughput_vs_k``: measured and predicted throughput against k for SD and PSD (one batch
  size and arrival pattern);
- ``phase_fit``: calibrated phase times against measured ones, per phase kind, on the traces.
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from psdlab.analysis.figure_style import FIGURE_DPI  # noqa: E402
from psdlab.analysis.modes import DRAFTING_MODES  # noqa: E402
from psdlab.validation.tables import write_table_csv  # noqa: E402

SCATTER = (("throughput_tok_s", "throughput (tok/s)", 0.05),
           ("tpot.mean", "mean TPOT (s)", 0.05),
           ("e2e.p99", "p99 end-to-end latency (s)", 0.10))


def _save(fig: Any, out_dir: str, name: str) -> str:
    path = os.path.join(out_dir, f"{name}.png")
    fig.tight_layout()
    fig.savefig(path, dpi=FIGURE_DPI)
    plt.close(fig)
    return path


def predicted_vs_measured(out_dir: str, validation: Any, roles: Mapping[str, str]) -> str:
    fig, axes = plt.subplots(1, len(SCATTER), figsize=(5.0 * len(SCATTER), 4.4), squeeze=False)
    rows = []
    for ax, (metric, label, band) in zip(axes[0], SCATTER):
        pts = [(c.name, c.measured.get(metric), c.predicted.get(metric))
               for c in validation.comparisons]
        pts = [(n, m, p) for n, m, p in pts if m is not None and p is not None]
        for n, m, p in pts:
            role = roles.get(n, "validate")
            ax.scatter([m], [p], marker="o" if role == "validate" else "s",
                       color="#d62728" if role == "validate" else "#1f77b4", s=28, zorder=3)
            ax.annotate(n, (m, p), fontsize=6, xytext=(3, 3), textcoords="offset points")
            rows.append({"metric": metric, "run": n, "role": role, "measured": m,
                         "predicted": p})
        if pts:
            lo = min(min(m, p) for _, m, p in pts) * 0.9
            hi = max(max(m, p) for _, m, p in pts) * 1.1
            xs = [lo, hi]
            ax.plot(xs, xs, color="k", lw=1)
            for b, ls in ((band, "--"), (2 * band, ":")):
                ax.plot(xs, [x * (1 + b) for x in xs], color="grey", lw=0.8, ls=ls)
                ax.plot(xs, [x * (1 - b) for x in xs], color="grey", lw=0.8, ls=ls)
            ax.set_xlim(lo, hi)
            ax.set_ylim(lo, hi)
        ax.set_xlabel(f"measured {label}")
        ax.set_ylabel(f"predicted {label}")
        ax.set_title(f"{label}: +-{100 * band:g}% (dashed)", fontsize=9)
        ax.grid(True, alpha=0.3)
    fig.suptitle("simulator vs measured (red circles: held out; blue squares: calibration)",
                 fontsize=10)
    write_table_csv(os.path.join(out_dir, "predicted_vs_measured.csv"),
              ("metric", "run", "role", "measured", "predicted"), rows)
    return _save(fig, out_dir, "predicted_vs_measured")


def gains_figure(out_dir: str, validation: Any) -> str | None:
    rows = []
    for g in validation.gains:
        vals = {r.metric + "|" + r.source: r for r in g.rows}
        thr = vals.get("gain.throughput_tok_s|sim")
        dec = vals.get("gain.decode_throughput_tok_s|sim")
        cf = vals.get("speedup.steady|closed form")
        rows.append({"pair": g.name,
                     "measured_gain": thr.measured if thr else None,
                     "sim_gain": thr.predicted if thr else None,
                     "measured_decode_gain": dec.measured if dec else None,
                     "sim_decode_gain": dec.predicted if dec else None,
                     "measured_steady_decode_gain": (cf.measured - 1.0)
                     if cf and cf.measured is not None else None,
                     "closed_form_gain": (cf.predicted - 1.0) if cf else None})
    if not rows:
        return None
    keys = (("measured_gain", "measured", "#333333"), ("sim_gain", "simulator", "#d62728"),
            ("measured_decode_gain", "measured (decode)", "#999999"),
            ("sim_decode_gain", "simulator (decode)", "#ff9896"),
            ("measured_steady_decode_gain", "measured (steady-state decode)", "#9ecae1"),
            ("closed_form_gain", "closed form (steady state)", "#1f77b4"))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(rows) + 2), 4.4))
    width = 0.8 / len(keys)
    for j, (key, label, color) in enumerate(keys):
        xs = [i + (j - len(keys) / 2 + 0.5) * width for i in range(len(rows))]
        ys = [100 * r[key] if r[key] is not None else 0.0 for r in rows]
        ax.bar(xs, ys, width, label=label, color=color)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r["pair"].replace(" vs ", "\nvs ") for r in rows], fontsize=7)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_ylabel("PSD/SD gain (%)")
    ax.set_title("PSD over SD: measured, simulated, closed form", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(True, axis="y", alpha=0.3)
    write_table_csv(os.path.join(out_dir, "gains.csv"), tuple(rows[0]), rows)
    return _save(fig, out_dir, "gains")


def throughput_vs_k(out_dir: str, validation: Any, m: int, offline: bool = True,
                    roles: Mapping[str, str] | None = None) -> str | None:
    rows = []
    for c in validation.comparisons:
        if (roles or {}).get(c.name) == "repeat":
            continue
        run = c.trace.run
        is_off = all(r.arrival == 0 for r in c.trace.requests)
        if run.mode in DRAFTING_MODES and run.m == m and is_off == offline:
            rows.append({"run": c.name, "mode": "psd" if run.mode == "psd" else "sd",
                         "k": run.k, "measured": c.measured.get("throughput_tok_s"),
                         "predicted": c.predicted.get("throughput_tok_s")})
    if len({r["k"] for r in rows}) < 2:
        return None
    fig, ax = plt.subplots(figsize=(6.0, 4.4))
    for mode, color in (("sd", "#1f77b4"), ("psd", "#d62728")):
        pts = sorted((r["k"], r["measured"], r["predicted"]) for r in rows if r["mode"] == mode)
        if not pts:
            continue
        ks = [p[0] for p in pts]
        ax.plot(ks, [p[1] for p in pts], "o-", color=color, label=f"{mode.upper()} measured")
        ax.plot(ks, [p[2] for p in pts], "x--", color=color, label=f"{mode.upper()} simulator")
    ax.set_xlabel("k (draft tokens per step)")
    ax.set_ylabel("throughput (tok/s)")
    ax.set_title(f"throughput vs k, m = {m}, {'offline' if offline else 'timed'} arrivals",
                 fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    write_table_csv(os.path.join(out_dir, "throughput_vs_k.csv"),
              ("run", "mode", "k", "measured", "predicted"), rows)
    return _save(fig, out_dir, "throughput_vs_k")


def phase_fit(out_dir: str, model: Mapping[str, Any], named: Sequence[tuple[str, Any]],
              roles: Mapping[str, str]) -> str | None:
    """Calibrated vs measured phase times on every trace (held-out ones in red); ``model``:
    the model file's document."""
    from psdlab.validation.phase_model import predict_phases
    from psdlab.validation.phase_model import calibration_view
    roles_of_fit = {"verify": "target", "draft": "drafter", "prefill": "target:prefill",
                    "drafter_prefill": "drafter:prefill"}
    rows: list[dict[str, Any]] = []
    cal = calibration_view(model)
    for name, tr in named:
        for fit, (pred, meas) in predict_phases(cal, [tr]).items():
            if roles_of_fit[fit] not in model["roles"]:
                continue
            for p, m in zip(pred, meas):
                rows.append({"run": name, "role": roles.get(name, "validate"), "fit": fit,
                             "measured_s": float(m), "predicted_s": float(p)})
    if not rows:
        return None
    fits = sorted({r["fit"] for r in rows})
    fig, axes = plt.subplots(1, len(fits), figsize=(4.2 * len(fits), 4.0), squeeze=False)
    for ax, fit in zip(axes[0], fits):
        mine = [r for r in rows if r["fit"] == fit]
        for role, color in (("calibrate", "#1f77b4"), ("validate", "#d62728")):
            pts = [r for r in mine if r["role"] == role]
            ax.scatter([r["measured_s"] for r in pts], [r["predicted_s"] for r in pts], s=6,
                       color=color, alpha=0.5, label=role)
        hi = max(max(r["measured_s"], r["predicted_s"]) for r in mine) * 1.05
        ax.plot([0, hi], [0, hi], color="k", lw=1)
        ax.set_xlim(0, hi)
        ax.set_ylim(0, hi)
        ax.set_title(fit, fontsize=10)
        ax.set_xlabel("measured phase time (s)")
        ax.set_ylabel("calibrated prediction (s)")
        ax.legend(fontsize=7)
        ax.grid(True, alpha=0.3)
    write_table_csv(os.path.join(out_dir, "phase_fit.csv"),
              ("run", "role", "fit", "measured_s", "predicted_s"), rows)
    return _save(fig, out_dir, "phase_fit")


def all_figures(out_dir: str, validation: Any,
                named: Sequence[tuple[str, Any]], roles: Mapping[str, str]) -> dict[str, str]:
    out = {"predicted_vs_measured": predicted_vs_measured(out_dir, validation, roles)}
    g = gains_figure(out_dir, validation)
    if g:
        out["gains"] = g
    ms = sorted({c.trace.run.m for c in validation.comparisons})
    for m in ms[::-1]:
        t = throughput_vs_k(out_dir, validation, m, roles=roles)
        if t:
            out["throughput_vs_k"] = t
            break
    p = phase_fit(out_dir, validation.model.doc, named, roles)
    if p:
        out["phase_fit"] = p
    return out
