"""What ``psdlab demo`` does with its arguments and prints: ``demo_command`` checks them, builds
the plan (``validation.demo.measurement_plan.default_plan`` and the overrides), runs the demo
or re-analyses an earlier demo's traces (``validation.demo.run_demo``) and returns the lines
to print."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace

from psdlab.validation.demo.run_demo import DemoResult


@dataclass(frozen=True)
class DemoOptions:
    """``psdlab demo``'s options (None: the default)."""
    output: str = "psdlab-demo"
    quick: bool = False
    prompts: int | None = None
    max_new_tokens: int | None = None
    controlled_alpha: float | None = None
    target: str | None = None
    draft: str | None = None
    repeats: int | None = None
    seed: int | None = None
    time_budget: float | None = None
    traces: str | None = None
    diagnostics: bool = False
    as_json: bool = False


def result_lines(result: DemoResult, as_json: bool) -> list[str]:
    """The demo's printout: the report and results files and the headline, or one JSON
    object."""
    if as_json:
        return [json.dumps(result.to_dict(), default=str)]
    lines = [f"report: {result.files['report']}"]
    if "results" in result.files:
        lines.append(f"results: {result.files['results']}")
    return lines + list(result.headline)


def demo_command(opts: DemoOptions) -> list[str]:
    """Check the options, run the demo (or re-analyse ``opts.traces``), the lines to print."""
    from psdlab.analysis.checks import check_int, check_output_path, check_range
    from psdlab.validation.demo.measurement_plan import default_plan
    from psdlab.validation.demo.run_demo import BUDGET_S, demo, reanalyse
    if (opts.target is None) != (opts.draft is None):
        raise ValueError("--target/--draft: give both (model directories) or neither (the "
                         "real pair)")
    check_output_path("--output", opts.output, folder=True)     # before any model loads
    if opts.traces is not None:
        if not os.path.isdir(opts.traces):
            raise FileNotFoundError(f"--traces: no such directory: {opts.traces}")
        return result_lines(reanalyse(opts.traces, opts.output, quiet=True,
                                      diagnostics=opts.diagnostics), opts.as_json)
    repeats = None if opts.repeats is None else check_int("--repeats", opts.repeats, 1, 20)
    seed = 0 if opts.seed is None else check_int("--seed", opts.seed, 0)
    plan = default_plan(opts.quick, repeats=repeats, seed=seed)
    if opts.prompts is not None:
        plan = replace(plan, num_prompts=check_int("--prompts", opts.prompts, 1, 256))
    if opts.max_new_tokens is not None:
        plan = replace(plan, max_new_tokens=check_int("--max-new-tokens", opts.max_new_tokens,
                                                      2, 512))
    if opts.controlled_alpha is not None:
        plan = replace(plan, controlled_alpha=opts.controlled_alpha)
    budget = (BUDGET_S if opts.time_budget is None else
              check_range("--time-budget", opts.time_budget, 0.0, 86400.0))
    result = demo(opts.output, plan=plan, target=opts.target, draft=opts.draft,
                  quiet=opts.as_json, budget_s=budget or None, diagnostics=opts.diagnostics)
    return result_lines(result, opts.as_json)
