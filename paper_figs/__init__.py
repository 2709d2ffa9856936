"""Figures regenerated from code: PNG plus the CSV behind each.

``psdlab figs OUTDIR`` or ``python -m psdlab.paper_figs OUTDIR`` (options in ``paper_figs.cli``);
from Python: ``paper_figs.registry.make_figures(FigOptions(outdir, quick=..., traces=...,
validation=...), names)``.  One module per figure: ``fig_theory`` (1), ``fig_throughput_k``
(2), ``fig_batch_ablation`` (3), ``fig_lifespan`` (4), ``fig_step_times`` (5),
``fig_validation`` (6); shared runs and the *assumed* Qwen3 acceptance rates in ``simruns``;
plumbing in ``common``; stand-in measured traces in ``demo_traces``.  Imports analysis, sim
and validation, never runtime (no torch).
"""
