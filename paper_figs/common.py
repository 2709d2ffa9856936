"""Shared plumbing for the figure modules: options, the result record, CSV and PNG writing,
styling (matplotlib with the Agg backend, so no display is needed), trace loading, progress.

Every figure module exposes ``NAME``, ``TITLE``, ``units(opts) -> int`` (how many progress
ticks it will make) and ``make(opts, tick) -> FigureOutput``.
"""
from __future__ import annotations

import csv
import glob
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from psdlab.analysis.figure_style import FIGURE_DPI, MODE_COLORS  # noqa: E402

Tick = Callable[[int], None]

#: one colour per mode (the registry's, ``analysis.figure_style.MODE_COLORS``) / batch / phase,
#: used by every figure
COLORS = {**MODE_COLORS, "sd-iso": "#ff9896", "batch0": "#1f77b4", "batch1": "#ff7f0e",
          "draft": "#2ca02c", "verify": "#8c564b"}


@dataclass(frozen=True)
class FigOptions:
    """What every figure gets: where to write, how big a grid, the optional measured inputs."""
    outdir: str
    quick: bool = False
    traces: tuple[str, ...] = ()          # trace files (psdlab JSONL) for the measured panels
    validation: str | None = None         # a validation JSON (predicted vs measured)
    seed: int = 0


@dataclass
class FigureOutput:
    """What one figure wrote, and what it had to leave out (one line per note)."""
    name: str
    pngs: list[str] = field(default_factory=list)
    csvs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "pngs": self.pngs, "csvs": self.csvs, "notes": self.notes,
                "skipped": self.skipped}


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float):
        return "" if not math.isfinite(value) else repr(round(value, 10))
    return value


def write_csv(path: str, columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> str:
    """Write rows (dicts) with exactly these columns, in this order; None/NaN -> empty cell."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(columns)
        for row in rows:
            missing = [c for c in columns if c not in row]
            if missing:
                raise KeyError(f"{os.path.basename(path)}: row lacks columns {missing}")
            writer.writerow([_cell(row[c]) for c in columns])
    return path


def read_csv(path: str) -> list[dict[str, str]]:
    """Rows of a CSV written by write_csv, as dicts of strings (for tests and reports)."""
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def new_figure(ncols: int = 1, nrows: int = 1, *, width: float = 6.4,
               height: float = 4.6) -> tuple[Any, list[Any]]:
    """A figure with a flat list of axes, each with a light grid."""
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows),
                             squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat:
        ax.grid(True, alpha=0.3)
    return fig, flat


def save_png(fig: Any, outdir: str, name: str) -> str:
    path = os.path.join(outdir, f"{name}.png")
    fig.tight_layout()
    fig.savefig(path, dpi=FIGURE_DPI)
    plt.close(fig)
    return path


def note_panel(ax: Any, title: str, text: str) -> None:
    """An empty panel that says why it is empty (a skipped measured panel)."""
    ax.set_title(title, fontsize=10)
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, fontsize=9,
            transform=ax.transAxes, bbox={"boxstyle": "round", "fc": "#f5f5f5", "ec": "#999"})
    ax.set_xticks([])
    ax.set_yticks([])
    ax.grid(False)


def trace_files(paths: Iterable[str]) -> tuple[str, ...]:
    """Expand directories into their *.jsonl files (sorted); files are kept as given."""
    out: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            out.extend(sorted(glob.glob(os.path.join(p, "*.jsonl"))))
        elif os.path.exists(p):
            out.append(p)
        else:
            raise FileNotFoundError(2, "No such file or directory", p)
    return tuple(out)


def load_figure_traces(paths: Sequence[str]) -> tuple[list[tuple[str, Any]], list[str]]:
    """Read psdlab traces; returns ([(path, Trace)], notes for files that are not traces)."""
    from psdlab.analysis.trace import TraceFormatError, read_trace

    good, notes = [], []
    for path in paths:
        try:
            good.append((path, read_trace(path)))
        except (TraceFormatError, ValueError, OSError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            notes.append(f"{os.path.basename(path)}: not a psdlab trace, ignored ({first})")
    return good, notes


def label_of(trace: Any) -> str:
    """A short label for a trace: its models, or its source."""
    models = trace.run.models or {}
    names = [os.path.basename(str(models[r]).rstrip("/")) for r in ("target", "drafter")
             if models.get(r)]
    return " + ".join(names) if names else str(trace.run.source)


NO_TRACES = "no measured traces given\n(pass --traces DIR with psdlab run traces)"
