"""Figure 3 (batch-size ablation): simulated SD and PSD decode throughput for m in
{8, 16, 32, 64} in the paper's setting 2 (Qwen3-32B on 4x L40 TP 4, Qwen3-1.7B drafter on a
fifth L40, vllm-eager preset costs, ShareGPT-like prompts, 256 output tokens, offline, *assumed*
alpha = 0.70), each at its best k in 1..5 (every k is in the CSV).

Left: throughput vs m.  Right: the PSD/SD gain at the same m (iso-batch, the paper's
comparison) and against SD holding the same number of requests, 2m (iso-concurrency)."""
from __future__ import annotations

import os
from typing import Any

from psdlab.analysis.figure_style import MODE_MARKERS
from psdlab.paper_figs import simruns
from psdlab.paper_figs.common import COLORS, FigOptions, FigureOutput, Tick, new_figure, \
    save_png, write_csv

NAME = "batch_ablation"
TITLE = "batch-size ablation, SD vs PSD (setting 2)"
MS = (8, 16, 32, 64)
SETTING = simruns.SETTINGS[1]
COLUMNS = ("setting", "drafter", "alpha", "alpha_source", "mode", "m", "concurrent", "k",
           "best_k", "requests", "decode_throughput_tok_s", "throughput_tok_s",
           "acceptance_rate", "cost_model")
GAIN_COLUMNS = ("m", "psd_k", "psd_decode_throughput_tok_s", "sd_k", "sd_decode_throughput_tok_s",
                "gain_iso_batch", "sd_2m_k", "sd_2m_decode_throughput_tok_s",
                "gain_iso_concurrency")


def _sd_ms() -> tuple[int, ...]:
    return tuple(sorted(set(MS) | {2 * m for m in MS}))


def units(opts: FigOptions) -> int:
    return len(simruns.KS) * (len(MS) + len(_sd_ms()))


def sweep(opts: FigOptions, tick: Tick) -> list[dict[str, Any]]:
    rows = []
    for mode, ms in (("psd", MS), ("sd", _sd_ms())):
        for m in ms:
            n = simruns.requests_for(opts.quick, m)
            group = []
            for k in simruns.KS:
                met = simruns.run_metrics(simruns.paper_config(SETTING, mode, k, m, n, opts.seed))
                group.append({"setting": SETTING.number, "drafter": SETTING.drafter,
                              "alpha": SETTING.alpha, "alpha_source": "assumed", "mode": mode,
                              "m": m, "concurrent": 2 * m if mode == "psd" else m, "k": k,
                              "requests": n,
                              "decode_throughput_tok_s": met["decode_throughput_tok_s"],
                              "throughput_tok_s": met["throughput_tok_s"],
                              "acceptance_rate": met["acceptance_rate"],
                              "cost_model": simruns.ENGINE})
                tick(1)
            best = max(group, key=lambda r: r["decode_throughput_tok_s"] or 0.0)
            for r in group:
                r["best_k"] = r is best
            rows.extend(group)
    return rows


def ablation_gains(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    best = {(r["mode"], r["m"]): r for r in rows if r["best_k"]}
    out = []
    for m in MS:
        p, s, s2 = best[("psd", m)], best[("sd", m)], best[("sd", 2 * m)]
        tp, ts, ts2 = (r["decode_throughput_tok_s"] for r in (p, s, s2))
        out.append({"m": m, "psd_k": p["k"], "psd_decode_throughput_tok_s": tp, "sd_k": s["k"],
                    "sd_decode_throughput_tok_s": ts, "gain_iso_batch": tp / ts,
                    "sd_2m_k": s2["k"], "sd_2m_decode_throughput_tok_s": ts2,
                    "gain_iso_concurrency": tp / ts2})
    return out


def _plot(rows: list[dict[str, Any]], gain: list[dict[str, Any]], outdir: str) -> str:
    fig, (ax, ax2) = new_figure(2, 1, width=6.2, height=4.8)
    for mode, label in (("psd", "PSD: m per batch, 2m held (5 GPUs)"),
                        ("sd", "SD: m (4 GPUs)")):
        pts = sorted((r["m"], r["decode_throughput_tok_s"], r["k"]) for r in rows
                     if r["mode"] == mode and r["best_k"])
        ms, tp, ks = zip(*pts)
        ax.plot(ms, tp, "-", color=COLORS[mode], marker=MODE_MARKERS[mode], label=label)
        for m, t, k in pts:
            ax.annotate(f"k={k}", (m, t), textcoords="offset points", xytext=(4, -11),
                        fontsize=7, color=COLORS[mode])
    ax.set_xscale("log", base=2)
    ax.set_xlim(min(MS) / 1.3, 2 * max(MS) * 1.4)
    ax.set_xticks(list(_sd_ms()), [str(m) for m in _sd_ms()])
    ax.set_xlabel("m (sequences verified per step)")
    ax.set_ylabel("decode throughput at best k (tokens/s, whole system)")
    ax.set_ylim(bottom=0)
    ax.set_title("Throughput vs m, each at its best k in 1..5\n(PSD at m vs SD at m: "
                 "iso-batch; SD at 2m: iso-concurrency)", fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    gain_ms = [g["m"] for g in gain]
    ax2.plot(gain_ms, [g["gain_iso_batch"] for g in gain], "-o", color=COLORS["psd"],
             label="PSD(m) / SD(m)  (iso-batch)")
    ax2.plot(gain_ms, [g["gain_iso_concurrency"] for g in gain], "--s", color=COLORS["sd-iso"],
             label="PSD(m) / SD(2m)  (iso-concurrency)")
    ax2.axhline(1.0, color="k", lw=1, ls=":", label="no gain")
    ax2.set_xscale("log", base=2)
    ax2.set_xticks(gain_ms, [str(m) for m in gain_ms])
    ax2.set_xlabel("m (sequences verified per step)")
    ax2.set_ylabel("throughput ratio PSD / SD (x)")
    ax2.set_title("PSD gain over SD, best k each (whole system, not per device;\n"
                  "PSD uses 5 GPUs, SD 4)", fontsize=9)
    ax2.legend(fontsize=8)
    fig.suptitle(f"Batch-size ablation, simulated: {SETTING.label}, assumed alpha = "
                 f"{SETTING.alpha}; 4x L40 TP4 + 1 L40, "
                 f"{simruns.COST_LABEL}, 256 output tokens",
                 fontsize=10)
    return save_png(fig, outdir, "fig3_batch_ablation")


def make(opts: FigOptions, tick: Tick) -> FigureOutput:
    out = FigureOutput(NAME)
    rows = sweep(opts, tick)
    gain = ablation_gains(rows)
    out.csvs.append(write_csv(os.path.join(opts.outdir, "fig3_batch_ablation.csv"), COLUMNS,
                              rows))
    out.csvs.append(write_csv(os.path.join(opts.outdir, "fig3_batch_gain.csv"), GAIN_COLUMNS,
                              gain))
    out.pngs.append(_plot(rows, gain, opts.outdir))
    return out
