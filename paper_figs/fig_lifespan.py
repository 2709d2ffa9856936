"""Figure 4 (request lifespan, in the style of the paper's Figure 7): a Gantt chart of PSD with
m = 4 and 12 requests, one bar per request interval coloured by its batch (0 or 1), finished
requests marked, and the SD-fallback steps (one batch empty, so drafting no longer overlaps
verification) shaded.  Left: simulated (setting 2 costs, assumed alpha = 0.70, mixed output
lengths so that requests finish at different times); right: the first PSD trace given.

Intervals come from the step records: a request's interval runs from its admission (or its
first verification after a preemption or a batch change) to its finish (or its last
verification before the break); its batch is the step's ``verify_batch``.  A request that
finished at prefill (one output token) was never verified: one interval with the request
record's batch (None, drawn grey)."""
from __future__ import annotations

import os
from typing import Any

from psdlab.paper_figs import simruns
from psdlab.paper_figs.common import (COLORS, NO_TRACES, FigOptions, FigureOutput, Tick,
                                      load_figure_traces, new_figure, note_panel, save_png,
                                      write_csv)

NAME = "lifespan"
TITLE = "request lifespan Gantt (PSD, m = 4, 12 requests)"
M, REQUESTS, K = 4, 12, 4
MAX_MEASURED = 40
COLUMNS = ("source", "request", "interval", "batch", "start_s", "end_s", "finished",
           "steps_verified", "arrival_s")
STEP_COLUMNS = ("source", "step", "start_s", "end_s", "verify_batch", "draft_batch",
                "overlapped", "sd_fallback")


def units(opts: FigOptions) -> int:
    return 2


def simulated_trace(seed: int = 0) -> Any:
    from psdlab.sim.sim_config import config_from_dict
    from psdlab.sim.simulation import simulate

    st = simruns.SETTINGS[1]
    cfg = config_from_dict({
        "seed": seed, "requests": REQUESTS, "server": {"mode": "psd", "k": K, "m": M},
        "target": {"name": simruns.TARGET, "cost": simruns.cost_spec(simruns.TARGET, 4)},
        "drafter": {"name": st.drafter, "cost": simruns.cost_spec(st.drafter, 1)},
        "acceptance": {"name": "geometric", "alpha": st.alpha},
        "workload": {"name": "offline", "prompt": {"name": "uniform", "low": 64, "high": 512},
                     "output": {"name": "uniform", "low": 24, "high": 160}},
        "trace": {"level": "step"}})
    return simulate(cfg).trace


def is_fallback(step: Any) -> bool:
    """A PSD step that verified a batch without overlapping drafting (the other batch empty)."""
    return step.verify_batch is not None and not step.overlapped


def step_rows(trace: Any, source: str) -> list[dict[str, Any]]:
    return [{"source": source, "step": s.index, "start_s": s.start, "end_s": s.end,
             "verify_batch": s.verify_batch, "draft_batch": s.draft_batch,
             "overlapped": s.overlapped, "sd_fallback": is_fallback(s)} for s in trace.steps]


def interval_rows(trace: Any, source: str, limit: int | None = None) -> list[dict[str, Any]]:
    """One row per request interval (see the module docstring), requests in admission order."""
    visits: dict[Any, list[tuple[Any, float, float, bool]]] = {}
    for s in trace.steps:
        pre = set(s.preempted)
        for v in s.verified:
            visits.setdefault(v.req, []).append((s.verify_batch, s.start, s.end, False))
        for r in pre:
            visits.setdefault(r, []).append((None, s.start, s.end, True))
    reqs = sorted(trace.requests, key=lambda r: (r.admitted, str(r.id)))
    if limit is not None:
        reqs = reqs[:limit]
    rows: list[dict[str, Any]] = []
    for rec in reqs:
        segs: list[list[Any]] = []   # [batch, start, end, steps]
        broken = True
        for batch, start, end, preempted in visits.get(rec.id, []):
            if preempted:
                broken = True
                continue
            if broken or batch != segs[-1][0]:
                segs.append([batch, start, end, 0])
                broken = False
            segs[-1][2] = end
            segs[-1][3] += 1
        if not segs:      # finished at prefill (one output token): never in a verified batch
            segs = [[rec.batch, rec.admitted, rec.finish, 0]]
        segs[0][1] = min(segs[0][1], rec.admitted)
        segs[-1][2] = max(segs[-1][2], rec.finish)
        for i, (batch, start, end, n) in enumerate(segs):
            rows.append({"source": source, "request": rec.id, "interval": i, "batch": batch,
                         "start_s": start, "end_s": end, "finished": i == len(segs) - 1,
                         "steps_verified": n, "arrival_s": rec.arrival})
    return rows


def _plot(ax: Any, rows: list[dict[str, Any]], steps: list[dict[str, Any]], title: str) -> None:
    order = list(dict.fromkeys(r["request"] for r in rows))
    ypos = {req: i for i, req in enumerate(order)}
    seen = set()
    for r in rows:
        color = {0: COLORS["batch0"], 1: COLORS["batch1"]}.get(r["batch"], "#bbb")
        name = f"batch {r['batch']}" if r["batch"] in (0, 1) else "no batch (prefill only)"
        label = name if r["batch"] not in seen else None
        seen.add(r["batch"])
        ax.barh(ypos[r["request"]], r["end_s"] - r["start_s"], left=r["start_s"], height=0.6,
                color=color, edgecolor="k", lw=0.4, label=label)
    done = [(r["end_s"], ypos[r["request"]]) for r in rows if r["finished"]]
    if done:
        ax.plot(*zip(*done), "k|", ms=12, mew=2, label="request finished")
    fb = [s for s in steps if s["sd_fallback"]]
    for i, s in enumerate(fb):
        ax.axvspan(s["start_s"], s["end_s"], color="#d62728", alpha=0.18, lw=0,
                   label="SD-fallback step (one batch empty)" if i == 0 else None)
    if fb:
        ax.axvline(fb[0]["start_s"], color="#d62728", ls="--", lw=1.2,
                   label=f"first SD-fallback step ({fb[0]['step']})")
    ax.set_yticks(range(len(order)), [str(r) for r in order], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time since run start (s)")
    ax.set_ylabel("request id (admission order)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3,
              frameon=False)


def _measured(opts: FigOptions, notes: list[str]) -> tuple[Any, str] | None:
    loaded, bad = load_figure_traces(opts.traces)
    notes.extend(bad)
    psd = [(p, t) for p, t in loaded if t.run.mode == "psd" and t.steps and t.requests]
    if not psd:
        notes.append("lifespan: no PSD trace with steps and requests among --traces, measured "
                     "panel skipped")
        return None
    psd.sort(key=lambda pt: (pt[1].run.source != "runtime", pt[1].run.m != M))
    return psd[0][1], os.path.basename(psd[0][0])


def make(opts: FigOptions, tick: Tick) -> FigureOutput:
    out = FigureOutput(NAME)
    sim = simulated_trace(opts.seed)
    rows, steps = interval_rows(sim, "sim"), step_rows(sim, "sim")
    tick(1)
    fig, (ax, ax2) = new_figure(2, 1, width=6.6, height=5.6)
    _plot(ax, rows, steps, f"Simulated: Qwen3-32B + Qwen3-1.7B (assumed alpha = 0.7), m = {M}, "
                           f"k = {K},\n{REQUESTS} requests, 24-160 output tokens")
    measured = _measured(opts, out.notes) if opts.traces else None
    if not opts.traces:
        out.notes.append("lifespan: measured panel skipped: no --traces given")
    if measured is not None:
        tr, name = measured
        mrows = interval_rows(tr, "measured", MAX_MEASURED)
        shown = {r["request"] for r in mrows}
        msteps = step_rows(tr, "measured")
        rows += mrows
        steps += msteps
        _plot(ax2, mrows, msteps, f"Measured: {name}\nm = {tr.run.m}, k = {tr.run.k}, "
                                  f"{len(shown)} of {len(tr.requests)} requests shown")
    else:
        note_panel(ax2, "Measured PSD trace", NO_TRACES if not opts.traces else
                   "no PSD trace among the given files")
    tick(1)
    fig.suptitle("Request lifespan under PSD (two batches of m alternate; batch 0 vs batch 1), "
                 "whole system", fontsize=10)
    out.csvs.append(write_csv(os.path.join(opts.outdir, "fig4_lifespan.csv"), COLUMNS, rows))
    out.csvs.append(write_csv(os.path.join(opts.outdir, "fig4_lifespan_steps.csv"),
                              STEP_COLUMNS, steps))
    out.pngs.append(save_png(fig, opts.outdir, "fig4_lifespan"))
    return out
