"""Figure 2 (throughput vs k): simulated SD and PSD decode throughput for k = 1..5 in the paper's
settings 1-3 (Qwen3-32B on 4x L40 TP 4, Qwen3-0.6B/1.7B/4B drafters on a fifth L40, m = 16,
costs of the vllm-eager preset, which matches the paper's engine, and its engine step model
``vllm-v0`` (host work around the passes, sim/costs/engine_steps.toml), ShareGPT-like prompts,
256 output tokens, offline), with *assumed* per-drafter acceptance rates (paper_figs.simruns); and
for the local real pair the simulator calibrated on the given traces (affine costs) with the
measured throughput of each trace as points.

Comparisons: PSD (m verified per step, 2m held, 5 devices) against SD at the same m
(iso-batch, the paper's comparison, 4 devices) and SD at 2m (iso-concurrency).  Throughput is
the paper's metric: decode tokens / decode time (prefill excluded), whole system, not per device
(the CSV also has it per device)."""
from __future__ import annotations

import os
from typing import Any

from psdlab.analysis.figure_style import MODE_MARKERS
from psdlab.analysis.modes import DRAFTING_MODES
from psdlab.paper_figs import simruns
from psdlab.paper_figs.common import (COLORS, NO_TRACES, FigOptions, FigureOutput, Tick,
                               load_figure_traces, new_figure, note_panel, save_png, write_csv)

NAME = "throughput_k"
TITLE = "decode throughput vs k, SD vs PSD (paper settings 1-3 and the local pair)"
COLUMNS = ("panel", "source", "target", "drafter", "alpha", "alpha_source", "mode",
           "comparison", "k", "m", "concurrent", "devices", "requests", "decode_throughput_tok_s",
           "throughput_tok_s", "decode_throughput_per_device", "acceptance_rate",
           "mean_draft_time_s", "mean_verify_time_s", "cost_model", "engine_step")
M = 16
#: (label, sim mode, m used by the server, comparison, devices)
VARIANTS = (("PSD", "psd", M, "iso-batch", 5), ("SD", "sd", M, "iso-batch", 4),
            ("SD (2m)", "sd", 2 * M, "iso-concurrency", 4))


def units(opts: FigOptions) -> int:
    return len(simruns.SETTINGS) * len(simruns.KS) * len(VARIANTS) + (
        2 * len(simruns.KS) + 1 if opts.traces else 0)


def _row(panel: str, source: str, target: str, drafter: str, alpha: Any, alpha_source: str,
         mode: str, comparison: str, k: int, m: int, devices: int, requests: int,
         met: dict[str, Any]) -> dict[str, Any]:
    dec = met.get("decode_throughput_tok_s")
    return {"panel": panel, "source": source, "target": target, "drafter": drafter,
            "alpha": alpha, "alpha_source": alpha_source, "mode": mode, "comparison": comparison,
            "k": k, "m": m, "concurrent": 2 * m if mode == "psd" else m, "devices": devices,
            "requests": requests, "decode_throughput_tok_s": dec,
            "throughput_tok_s": met.get("throughput_tok_s"),
            "decode_throughput_per_device": dec / devices if dec else None,
            "acceptance_rate": met.get("acceptance_rate"),
            "mean_draft_time_s": met.get("mean_draft_time_s"),
            "mean_verify_time_s": met.get("mean_verify_time_s"),
            "cost_model": simruns.ENGINE if source == "sim" else source,
            "engine_step": simruns.ENGINE_STEP if source == "sim" else ""}


def setting_rows(opts: FigOptions, tick: Tick) -> list[dict[str, Any]]:
    rows = []
    for st in simruns.SETTINGS:
        for _label, mode, m, comparison, devices in VARIANTS:
            n = simruns.requests_for(opts.quick, m)
            for k in simruns.KS:
                met = simruns.run_metrics(simruns.paper_config(st, mode, k, m, n, opts.seed,
                                                               simruns.ENGINE_STEP))
                rows.append(_row(f"setting {st.number}", "sim", simruns.TARGET, st.drafter,
                                 st.alpha, "assumed", mode, comparison, k, m, devices, n, met))
                tick(1)
    return rows


def local_rows(opts: FigOptions, tick: Tick, notes: list[str]) -> list[dict[str, Any]]:
    """Calibrated simulation (lines) and measured traces (points) for the local pair."""
    from psdlab.analysis.metrics import summarize

    loaded, bad = load_figure_traces(opts.traces)
    notes.extend(bad)
    traces = [t for _, t in loaded if t.run.mode in DRAFTING_MODES]
    if not traces:
        notes.append("local pair: no SD/PSD traces among the given files, panel skipped")
        return []
    try:
        cal = simruns.calibrate_from(traces)
    except ValueError as exc:
        notes.append(f"local pair: calibration failed ({exc}), simulated lines skipped")
        cal = None
    tick(1)
    rows = []
    if cal is not None:
        notes.extend(f"local pair calibration: {w}" for w in cal.notes)
        alpha = cal.acceptance.get("alpha")
        n = cal.requests
        for mode in ("sd", "psd"):
            for k in simruns.KS:
                met = simruns.run_metrics(simruns.calibrated_config(cal, mode, k, n, opts.seed))
                rows.append(_row("local pair", "sim (calibrated)", cal.label, "", alpha,
                                 "fitted", mode, "iso-batch", k, cal.m, 2, n, met))
                tick(1)
    for tr in traces:
        met = summarize(tr)
        models = tr.run.models or {}
        rows.append(_row("local pair", "measured", models.get("target", ""),
                         models.get("drafter", ""), None, "measured", tr.run.mode, "iso-batch",
                         tr.run.k, tr.run.m, 2, len(tr.requests), met))
    return rows


def _headroom(ax: Any, rows: list[dict[str, Any]]) -> None:
    top = max((r["decode_throughput_tok_s"] or 0.0) for r in rows) if rows else 0.0
    ax.set_ylim(0, 1.12 * top if top > 0 else None)


def _plot_panel(ax: Any, rows: list[dict[str, Any]], title: str) -> None:
    styles = {("psd", "iso-batch"): ("PSD, m per batch, 2m held (5 GPUs)", "psd", "-"),
              ("sd", "iso-batch"): ("SD, m (4 GPUs; iso-batch)", "sd", "-"),
              ("sd", "iso-concurrency"): ("SD, 2m (4 GPUs; iso-concurrency)", "sd-iso", "--")}
    for (mode, comp), (label, color, ls) in styles.items():
        pts = sorted((r["k"], r["decode_throughput_tok_s"]) for r in rows
                     if r["mode"] == mode and r["comparison"] == comp and r["source"] == "sim"
                     and r["decode_throughput_tok_s"])
        if pts:
            ax.plot(*zip(*pts), ls, color=COLORS[color], marker=MODE_MARKERS[mode], label=label)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("k (draft tokens per sequence per step)")
    ax.set_ylabel("decode throughput (tokens/s, whole system)")
    ax.set_xticks(list(simruns.KS))
    _headroom(ax, rows)
    ax.legend(fontsize=7.5, loc="lower right")


def _plot_local(ax: Any, rows: list[dict[str, Any]]) -> None:
    for mode in ("sd", "psd"):
        pts = sorted((r["k"], r["decode_throughput_tok_s"]) for r in rows
                     if r["mode"] == mode and r["source"] == "sim (calibrated)")
        if pts:
            ax.plot(*zip(*pts), "-", color=COLORS[mode], marker=MODE_MARKERS[mode],
                    label=f"{mode.upper()} simulated (affine costs fitted to traces)")
    for mode in DRAFTING_MODES:
        pts = [(r["k"], r["decode_throughput_tok_s"]) for r in rows
               if r["mode"] == mode and r["source"] == "measured" and r["decode_throughput_tok_s"]]
        if pts:
            ax.plot(*zip(*pts), linestyle="none", color=COLORS[mode], marker=MODE_MARKERS[mode],
                    mfc="none", ms=10, mew=2, label=f"{mode.upper()} measured (one trace each)")
    m = next((r["m"] for r in rows), "?")
    label = next((r["target"] for r in rows if r["source"] == "sim (calibrated)"), "")
    ax.set_title(f"Local pair (from traces) {label}, m = {m}:\nSD vs PSD iso-batch, "
                 "whole system, simulated runs of the measured size", fontsize=9)
    ax.set_xlabel("k (draft tokens per sequence per step)")
    ax.set_ylabel("decode throughput (tokens/s, whole system)")
    ax.set_xticks(list(simruns.KS))
    _headroom(ax, rows)
    ax.legend(fontsize=7.5, loc="best", framealpha=0.6)


def make(opts: FigOptions, tick: Tick) -> FigureOutput:
    out = FigureOutput(NAME)
    rows = setting_rows(opts, tick)
    local = local_rows(opts, tick, out.notes) if opts.traces else []
    if not opts.traces:
        out.notes.append("local pair panel skipped: no --traces given")
    fig, axes = new_figure(2, 2, width=6.2, height=4.4)
    for ax, st in zip(axes, simruns.SETTINGS):
        _plot_panel(ax, [r for r in rows if r["panel"] == f"setting {st.number}"],
                    f"{st.label} (assumed alpha = {st.alpha}), m = {M}\n4x L40 TP4 + 1 L40, "
                    f"{simruns.COST_LABEL} + {simruns.ENGINE_STEP} step, ShareGPT-like, 256 out")
    if local:
        _plot_local(axes[3], local)
    else:
        note_panel(axes[3], "Local pair (measured)", NO_TRACES if not opts.traces else
                   "no usable SD/PSD traces\n(see the notes printed by psdlab figs)")
    fig.suptitle("Throughput vs k: PSD vs SD at the same m verified per step (iso-batch) and "
                 f"SD at 2m (iso-concurrency); simulated, engine step model "
                 f"{simruns.ENGINE_STEP}", fontsize=11)
    out.csvs.append(write_csv(os.path.join(opts.outdir, "fig2_throughput_k.csv"), COLUMNS,
                              rows + local))
    out.pngs.append(save_png(fig, opts.outdir, "fig2_throughput_k"))
    return out
