"""Figure 6 (validation): predicted vs measured, with the identity line and +-10% / +-25% bands,
and the relative error of each comparison.

Inputs, in order of preference:

- ``--validation FILE``: a JSON file of predicted-vs-measured pairs (what ``psdlab validate``
  writes).  Accepted shapes: a list of objects, or an object with such lists anywhere inside
  it; every object that has a number under ``predicted`` (aliases ``pred``, ``simulated``,
  ``sim``) and under ``measured`` (aliases ``meas``, ``actual``, ``real``) is one pair, named by
  its ``metric`` (or ``name``, ``key``) and ``run`` (or ``label``, ``trace``) fields when
  present, else by its JSON path.
- else ``--traces`` (two or more SD/PSD traces): a held-out check done here -- each trace is
  predicted by the simulator calibrated on the *other* traces (affine costs and geometric
  acceptance, validation.calibrate), at the trace's mode, k, m, request count and lengths.
- else the figure is skipped with a note.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import numpy as np

from psdlab.analysis.modes import DRAFTING_MODES
from psdlab.paper_figs import simruns
from psdlab.paper_figs.common import (FigOptions, FigureOutput, Tick, load_figure_traces,
                                      new_figure, save_png, write_csv)

NAME = "validation"
TITLE = "predicted vs measured"
COLUMNS = ("source", "run", "metric", "unit", "predicted", "measured", "rel_error")
PRED_KEYS = ("predicted", "pred", "simulated", "sim")
MEAS_KEYS = ("measured", "meas", "actual", "real")
#: metrics compared in the held-out check: (metric key of analysis.metrics, unit)
HELDOUT_METRICS = (("decode_throughput_tok_s", "tok/s"), ("mean_draft_time_s", "s"),
                   ("mean_verify_time_s", "s"), ("makespan_s", "s"), ("e2e.mean", "s"))
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")


def units(opts: FigOptions) -> int:
    return 1


def _number(obj: dict[str, Any], keys: tuple[str, ...]) -> float | None:
    for key in keys:
        v = obj.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v):
            return float(v)
    return None


def _first(obj: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        if isinstance(obj.get(key), (str, int)) and not isinstance(obj.get(key), bool):
            return str(obj[key])
    return None


def pairs_from_json(doc: Any, path: str = "$") -> list[dict[str, Any]]:
    """Every predicted/measured pair in a JSON document (see the module docstring)."""
    out: list[dict[str, Any]] = []
    if isinstance(doc, dict):
        pred, meas = _number(doc, PRED_KEYS), _number(doc, MEAS_KEYS)
        if pred is not None and meas is not None:
            out.append({"source": "validation file",
                        "run": _first(doc, ("run", "label", "trace")) or "",
                        "metric": _first(doc, ("metric", "name", "key")) or path,
                        "unit": _first(doc, ("unit", "units")) or "", "predicted": pred,
                        "measured": meas})
            return out
        for key, value in doc.items():
            out.extend(pairs_from_json(value, f"{path}.{key}"))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            out.extend(pairs_from_json(value, f"{path}[{i}]"))
    return out


def read_validation(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        try:
            doc = json.load(fh)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--validation: {path}: invalid JSON ({exc})") from None
    pairs = pairs_from_json(doc)
    if not pairs:
        raise ValueError(f"--validation: {path}: no objects with numeric 'predicted' and "
                         f"'measured' fields")
    return pairs


def _metric(met: dict[str, Any], key: str) -> float | None:
    value: Any = met
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return float(value) if isinstance(value, (int, float)) else None


def heldout_pairs(traces: list[tuple[str, Any]], seed: int, notes: list[str]) -> list[dict]:
    """Leave-one-trace-out: calibrate on the others, simulate this one, compare metrics."""
    from psdlab.analysis.metrics import summarize

    usable = [(p, t) for p, t in traces if t.run.mode in DRAFTING_MODES and t.steps
              and t.requests]
    if len(usable) < 2:
        notes.append("validation: need --validation FILE or at least two SD/PSD traces, "
                     "figure skipped")
        return []
    out = []
    for i, (path, tr) in enumerate(usable):
        others = [t for j, (_, t) in enumerate(usable) if j != i]
        try:
            cal = simruns.calibrate_from(others)
        except ValueError as exc:
            notes.append(f"validation: {os.path.basename(path)}: {exc}")
            continue
        cal = dataclasses.replace(cal, m=tr.run.m,
                                  prompt_lens=tuple(r.prompt_len for r in tr.requests),
                                  output_lens=tuple(r.output_len for r in tr.requests))
        mode = "sd" if tr.run.mode == "sd-sep" else tr.run.mode
        pred = simruns.run_metrics(simruns.calibrated_config(cal, mode, tr.run.k,
                                                             len(tr.requests), seed))
        meas = summarize(tr)
        for key, unit in HELDOUT_METRICS:
            p, m = _metric(pred, key), _metric(meas, key)
            if p is not None and m is not None:
                out.append({"source": "held-out (calibrated on the other traces)",
                            "run": os.path.basename(path), "metric": key, "unit": unit,
                            "predicted": p, "measured": m})
    return out


def _plot(rows: list[dict[str, Any]], outdir: str, subtitle: str) -> str:
    fig, (ax, ax2) = new_figure(2, 1, width=6.2, height=5.4)
    metrics = list(dict.fromkeys(r["metric"] for r in rows))
    colors = {m: PALETTE[i % len(PALETTE)] for i, m in enumerate(metrics)}
    pos = [v for r in rows for v in (r["predicted"], r["measured"]) if v > 0]
    lo, hi = (min(pos) / 1.6, max(pos) * 1.6) if pos else (1e-3, 1.0)
    x = np.geomspace(lo, hi, 50)
    ax.fill_between(x, x / 1.25, x * 1.25, color="#ccc", alpha=0.35, label="+-25%")
    ax.fill_between(x, x / 1.10, x * 1.10, color="#999", alpha=0.35, label="+-10%")
    ax.plot(x, x, "k-", lw=1, label="identity (predicted = measured)")
    for m in metrics:
        pts = [(r["measured"], r["predicted"]) for r in rows if r["metric"] == m
               and r["measured"] > 0 and r["predicted"] > 0]
        if pts:
            unit = next((r["unit"] for r in rows if r["metric"] == m and r["unit"]), "")
            ax.plot(*zip(*pts), "o", color=colors[m], ms=6, alpha=0.85,
                    label=f"{m} [{unit}]" if unit else m)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured (metric's own unit: s or tokens/s, log scale)")
    ax.set_ylabel("predicted (same unit, log scale)")
    ax.set_title("Predicted vs measured, one point per run and metric", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    errs = [(m, [100 * r["rel_error"] for r in rows if r["metric"] == m]) for m in metrics]
    for i, (m, e) in enumerate(errs):
        ax2.plot(np.full(len(e), i) + np.linspace(-0.15, 0.15, len(e)), e, "o",
                 color=colors[m], alpha=0.85)
        ax2.plot([i - 0.3, i + 0.3], [np.mean(e)] * 2, "-", color=colors[m], lw=2)
    ax2.axhspan(-25, 25, color="#ccc", alpha=0.35, label="+-25%")
    ax2.axhspan(-10, 10, color="#999", alpha=0.35, label="+-10%")
    ax2.axhline(0, color="k", lw=1)
    ax2.plot([], [], "k-", lw=2, label="mean per metric")
    ax2.set_xticks(range(len(metrics)), metrics, rotation=30, ha="right", fontsize=7)
    ax2.set_ylabel("relative error, predicted / measured - 1 (%)")
    ax2.set_xlabel("metric")
    ax2.set_title("Relative error per metric (points: runs)", fontsize=9)
    ax2.legend(fontsize=7)
    fig.suptitle(f"Validation: simulator prediction vs measurement, per run, whole system "
                 f"({subtitle})", fontsize=10)
    return save_png(fig, outdir, "fig6_validation")


def make(opts: FigOptions, tick: Tick) -> FigureOutput:
    out = FigureOutput(NAME)
    if opts.validation:
        rows, subtitle = read_validation(opts.validation), os.path.basename(opts.validation)
    elif opts.traces:
        loaded, bad = load_figure_traces(opts.traces)
        out.notes.extend(bad)
        rows = heldout_pairs(loaded, opts.seed, out.notes)
        subtitle = "held out: each trace predicted from the others' calibration"
    else:
        rows, subtitle = [], ""
        out.notes.append("validation: figure skipped: no --validation FILE and no --traces")
    tick(1)
    if not rows:
        out.skipped = True
        return out
    for r in rows:
        r["rel_error"] = (r["predicted"] / r["measured"] - 1) if r["measured"] else None
    out.csvs.append(write_csv(os.path.join(opts.outdir, "fig6_validation.csv"), COLUMNS, rows))
    out.pngs.append(_plot([r for r in rows if r["rel_error"] is not None], opts.outdir,
                          subtitle))
    return out
