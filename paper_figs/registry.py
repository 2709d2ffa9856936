"""The figures by name, and the runner that makes a selection of them with one progress bar.

Names (in order): theory, throughput_k, batch_ablation, lifespan, step_times, validation."""
from __future__ import annotations

import importlib
import os
import sys
from typing import Sequence

from psdlab.analysis.registry import Registry
from psdlab.paper_figs.common import FigOptions, FigureOutput

#: figure name -> its module (imported when the figure is made; docs/registries.md)
FIGURES: Registry[str] = Registry("figure")
for _name in ("theory", "throughput_k", "batch_ablation", "lifespan", "step_times",
              "validation"):
    FIGURES.add(_name, f"psdlab.paper_figs.fig_{_name}")


def parse_only(text: str | None) -> tuple[str, ...]:
    """'theory,lifespan' -> ('theory', 'lifespan'); None/'' -> all; unknown names -> ValueError."""
    if not text:
        return tuple(FIGURES)
    names = tuple(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    bad = [n for n in names if n not in FIGURES]
    if bad or not names:
        raise ValueError(f"--only: unknown figure {', '.join(bad) or repr(text)} "
                         f"(allowed: {', '.join(FIGURES)})")
    return names


def make_figures(opts: FigOptions, names: Sequence[str] | None = None, *,
                 progress: bool = False) -> list[FigureOutput]:
    """Make the named figures (all by default) into opts.outdir; returns what each wrote."""
    names = tuple(names) if names else tuple(FIGURES)
    parse_only(",".join(names))
    os.makedirs(opts.outdir, exist_ok=True)
    modules = [importlib.import_module(FIGURES.get(n, "--only")) for n in names]
    total = sum(mod.units(opts) for mod in modules)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=total, unit="run", desc="figures", file=sys.stderr,
                   disable=not sys.stderr.isatty())

    def tick(n: int = 1) -> None:
        if bar is not None:
            bar.update(n)

    outputs = []
    try:
        for name, mod in zip(names, modules):
            if bar is not None:
                bar.set_postfix_str(name)
            outputs.append(mod.make(opts, tick))
    finally:
        if bar is not None:
            bar.close()
    return outputs
