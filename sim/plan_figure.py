"""The figure of ``psdlab plan`` (a PNG beside its CSV): sustainable request rate against
devices, one point per row (configuration x replicas; the marker tells the mode) with its
interval over seeds, the Pareto set (fewest devices, highest rate:
``sim.capacity.mark_pareto``) circled and joined; the title names the SLO and the workload.

``figure_data`` is what is drawn (tests check it, and the artists carry it: gid ``mode:<m>``
for each mode's points, ``pareto`` for the joined set, ``intervals`` for the bars);
matplotlib (Agg) is imported only when a figure is made."""
from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from psdlab.analysis.figure_style import FIGURE_DPI, MODE_MARKERS


def figure_data(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """{"modes": {mode: [[devices, rate], ...]}, "pareto": [[devices, rate], ...],
    "intervals": [[devices, lo, hi], ...]} (the Pareto points by devices, then rate; an
    interval over seeds for each row that has one), rates in requests per second over all
    replicas."""
    modes: dict[str, list[list[float]]] = {}
    intervals: list[list[float]] = []
    for r in rows:
        modes.setdefault(str(r["mode"]), []).append(
            [float(r["devices"]), float(r["total_rate_req_s"])])
        lo, hi = r.get("max_rate_lo_req_s"), r.get("max_rate_hi_req_s")
        if lo is not None and hi is not None:
            intervals.append([float(r["devices"]), float(lo) * r["replicas"],
                              float(hi) * r["replicas"]])
    pareto = sorted({(float(r["devices"]), float(r["total_rate_req_s"]))
                     for r in rows if r["pareto"]})
    return {"modes": modes, "pareto": [list(p) for p in pareto], "intervals": intervals}


def _lengths(spec: Any) -> str:
    if not isinstance(spec, Mapping):
        return str(spec)
    name = str(spec.get("name", "?"))
    for key in ("mean", "value"):
        if key in spec:
            return f"{name} {key} {spec[key]:g}"
    return name


def workload_label(workload: Mapping[str, Any], requests: int) -> str:
    """The workload as the plan serves it: Poisson arrivals with the config's lengths, or a
    file's requests scaled in rate."""
    if workload.get("name") == "file":
        head = f"requests of {os.path.basename(str(workload.get('path', '?')))}"
    else:
        parts = [f"{key} {_lengths(workload[key])}" for key in ("prompt", "output")
                 if key in workload]
        head = "Poisson" + (f" ({', '.join(parts)})" if parts else "")
    return f"{head}, {requests} requests per trial"


def make_figure(rows: Sequence[Mapping[str, Any]], slo: str, workload: str):
    """The figure (matplotlib Figure, Agg canvas): call ``save`` to write it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    data = figure_data(rows)
    fig = Figure(figsize=(7.5, 5.0), dpi=FIGURE_DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    spare = iter("vp*hX<>")
    for mode, pts in data["modes"].items():
        marker = MODE_MARKERS.get(mode) or next(spare, "x")
        xs, ys = zip(*pts)
        ax.scatter(xs, ys, marker=marker, s=28, alpha=0.75, label=mode, gid=f"mode:{mode}")
    if data["intervals"]:
        xs, lo, hi = zip(*data["intervals"])
        ax.vlines(xs, lo, hi, color="grey", lw=0.8, alpha=0.6, gid="intervals",
                  label="95% over seeds")
    if data["pareto"]:
        px, py = zip(*data["pareto"])
        ax.plot(px, py, "-o", color="black", mfc="none", ms=11, lw=1.2,
                label="Pareto set", gid="pareto")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("devices")
    ax.set_ylabel("sustainable request rate (req/s)")
    ax.set_title(f"SLO: {slo}\nworkload: {workload}", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def save(fig: Any, path: str) -> None:
    fig.savefig(path, format="png")
