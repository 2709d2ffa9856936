"""Figure 5 (per-step drafting vs verification time against k).

Left: simulated means for the paper's settings 1-3 under PSD (m = 16 per batch, vllm-eager
costs; the same runs as figure 2): drafting time t grows with k for each drafter while the
target's verification time V barely moves, and PSD hides drafting only while t <= V.
Right: measured, from the given traces: per step, the drafting time (sum of its draft phases)
and the verification time, mean with the 10-90% range, per mode and k."""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from psdlab.analysis.figure_style import MODE_MARKERS
from psdlab.analysis.modes import DRAFTING_MODES
from psdlab.paper_figs import simruns
from psdlab.paper_figs.common import (COLORS, NO_TRACES, FigOptions, FigureOutput, Tick,
                               label_of, load_figure_traces, new_figure, note_panel, save_png,
                               write_csv)

NAME = "step_times"
TITLE = "per-step drafting vs verification time against k"
COLUMNS = ("source", "label", "mode", "k", "m", "phase", "mean_s", "p10_s", "p50_s", "p90_s",
           "steps", "cost_model")
M = 16
DRAFTER_COLORS = ("#2ca02c", "#9467bd", "#e377c2")


def units(opts: FigOptions) -> int:
    return len(simruns.SETTINGS) * len(simruns.KS) + (1 if opts.traces else 0)


def sim_rows(opts: FigOptions, tick: Tick) -> list[dict[str, Any]]:
    rows = []
    n = simruns.requests_for(opts.quick, M)
    for st in simruns.SETTINGS:
        for k in simruns.KS:
            met = simruns.run_metrics(simruns.paper_config(st, "psd", k, M, n, opts.seed))
            for phase, key in (("draft", "mean_draft_time_s"), ("verify", "mean_verify_time_s")):
                rows.append({"source": "sim", "label": st.label, "mode": "psd", "k": k, "m": M,
                             "phase": phase, "mean_s": met[key], "p10_s": None, "p50_s": None,
                             "p90_s": None, "steps": met["decode_steps"],
                             "cost_model": simruns.ENGINE})
            tick(1)
    return rows


def step_phase_times(trace: Any) -> dict[str, np.ndarray]:
    """Per decode step: total draft-phase time and total verify-phase time (seconds)."""
    draft, verify = [], []
    for s in trace.steps:
        d = sum(p.end - p.start for p in s.phases if p.kind == "draft")
        v = sum(p.end - p.start for p in s.phases if p.kind == "verify")
        if d > 0 and v > 0:
            draft.append(d)
            verify.append(v)
    return {"draft": np.array(draft), "verify": np.array(verify)}


def measured_rows(opts: FigOptions, notes: list[str]) -> list[dict[str, Any]]:
    loaded, bad = load_figure_traces(opts.traces)
    notes.extend(bad)
    groups: dict[tuple[str, str, int, int], dict[str, list[np.ndarray]]] = {}
    for _, tr in loaded:
        if tr.run.mode not in DRAFTING_MODES:
            continue
        times = step_phase_times(tr)
        if times["draft"].size == 0:
            continue
        g = groups.setdefault((label_of(tr), tr.run.mode, tr.run.k, tr.run.m),
                              {"draft": [], "verify": []})
        for phase in g:
            g[phase].append(times[phase])
    rows = []
    for (label, mode, k, m), g in sorted(groups.items()):
        for phase, parts in g.items():
            x = np.concatenate(parts)
            p10, p50, p90 = np.percentile(x, [10, 50, 90])
            rows.append({"source": "measured", "label": label, "mode": mode, "k": k, "m": m,
                         "phase": phase, "mean_s": float(x.mean()), "p10_s": float(p10),
                         "p50_s": float(p50), "p90_s": float(p90), "steps": int(x.size),
                         "cost_model": "measured"})
    if not rows:
        notes.append("step_times: no SD/PSD trace with draft and verify phases, measured panel "
                     "skipped")
    return rows


def _plot_sim(ax: Any, rows: list[dict[str, Any]]) -> None:
    for st, color in zip(simruns.SETTINGS, DRAFTER_COLORS):
        pts = sorted((r["k"], 1e3 * r["mean_s"]) for r in rows
                     if r["label"] == st.label and r["phase"] == "draft")
        ax.plot(*zip(*pts), "-", color=color, marker="o",
                label=f"drafting t ({simruns.pretty(st.drafter)}, 1 L40)")
    # the target and its batch are the same in the three settings: V is drawn once
    st = simruns.SETTINGS[1]
    pts = sorted((r["k"], 1e3 * r["mean_s"]) for r in rows
                 if r["label"] == st.label and r["phase"] == "verify")
    ax.plot(*zip(*pts), "--", color="k", marker="s", label="verification V (Qwen3-32B, 4x L40)")
    ax.set_xlabel("k (draft tokens per sequence per step)")
    ax.set_ylabel("mean time per step (ms)")
    ax.set_xticks(list(simruns.KS))
    ax.set_ylim(bottom=0)
    ax.set_title(f"Simulated, settings 1-3 under PSD, m = {M} per batch\n(4x L40 TP4 target, "
                 f"drafter on 1 L40; {simruns.COST_LABEL}; per device)", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")


def _plot_measured(ax: Any, rows: list[dict[str, Any]]) -> None:
    keys = sorted({(r["label"], r["mode"], r["m"]) for r in rows})
    for j, (label, mode, m) in enumerate(keys):
        shift = 0.08 * (j - (len(keys) - 1) / 2)   # side by side, so error bars do not hide
        for phase, ls in (("draft", "-"), ("verify", "--")):
            pts = sorted((r["k"], r["mean_s"], r["p10_s"], r["p90_s"]) for r in rows
                         if (r["label"], r["mode"], r["m"], r["phase"]) == (label, mode, m, phase))
            k, mean, lo, hi = (np.array(v, dtype=float) for v in zip(*pts))
            ax.errorbar(k + shift, 1e3 * mean, yerr=[1e3 * (mean - lo), 1e3 * (hi - mean)], ls=ls,
                        color=COLORS[phase], marker=MODE_MARKERS.get(mode, "o"), capsize=3,
                        alpha=0.9, label=f"{phase}, {mode.upper()} m={m}")
    ax.set_xlabel("k (draft tokens per sequence per step)")
    ax.set_ylabel("time per step (ms): mean, bars 10-90%")
    ks = sorted({r["k"] for r in rows})
    ax.set_xticks(ks)
    ax.set_xlim(ks[0] - 0.6, ks[-1] + 0.6)
    ax.set_ylim(bottom=0)
    labels = sorted({r["label"] for r in rows})
    ax.set_title(f"Measured (from traces): {', '.join(labels)}\n(drafter and target on their "
                 "own devices; per device)", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")


def make(opts: FigOptions, tick: Tick) -> FigureOutput:
    out = FigureOutput(NAME)
    rows = sim_rows(opts, tick)
    measured = measured_rows(opts, out.notes) if opts.traces else []
    if opts.traces:
        tick(1)
    else:
        out.notes.append("step_times: measured panel skipped: no --traces given")
    fig, (ax, ax2) = new_figure(2, 1, width=6.4, height=4.8)
    _plot_sim(ax, rows)
    if measured:
        _plot_measured(ax2, measured)
    else:
        note_panel(ax2, "Measured step times", NO_TRACES if not opts.traces else
                   "no SD/PSD trace with draft and verify phases")
    fig.suptitle("Per-step drafting time t vs verification time V against k "
                 "(PSD hides drafting while t <= V)", fontsize=10)
    out.csvs.append(write_csv(os.path.join(opts.outdir, "fig5_step_times.csv"), COLUMNS,
                              rows + measured))
    out.pngs.append(save_png(fig, opts.outdir, "fig5_step_times"))
    return out
