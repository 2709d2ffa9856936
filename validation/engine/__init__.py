"""Serving engines' host time per engine step (issue 45): per-cell statistics and fitted lines
from instrumented runs (``host_steps``), and the engine-step preset terms of
``sim/costs/engine_steps.toml`` derived from those measurements (``step_terms``)."""
