"""What `psdlab frontier` does once its arguments are parsed: the measurement plan from the
options, the run (``run_frontier``) and the text it prints.  The command module only parses and
prints."""
from __future__ import annotations

import json
from dataclasses import replace


def parse_depths(text: str) -> tuple[int, ...]:
    """'2,30' -> (2, 30) (one-line error naming --depths)."""
    out = []
    for item in str(text).split(","):
        try:
            out.append(int(item.strip()))
        except ValueError:
            raise ValueError(f"--depths: expected comma-separated integers >= 1, got {item!r}") \
                from None
    return tuple(out)


def frontier_command(output: str, *, k: int = 4, batch: int = 4, depths: str | None = None,
                     prompts: int | None = None, max_new_tokens: int | None = None,
                     rounds: int | None = None, prompts_file: str | None = None,
                     backend: str = "process", quick: bool = False, target: str | None = None,
                     draft: str | None = None, as_json: bool = False) -> str:
    """Measure the frontier the options describe into ``output``; the text to print (the
    results as one JSON object with ``as_json``)."""
    from psdlab.validation.frontier.outputs import finite
    from psdlab.validation.frontier.frontier_results import FrontierPlan
    from psdlab.validation.frontier.run_frontier import quick_plan, run_frontier
    from psdlab.validation.frontier.summary import terminal_summary
    if (target is None) != (draft is None):
        raise ValueError("--target/--draft: give both (model directories) or neither (the "
                         "real pair)")
    plan = quick_plan(k, batch) if quick else FrontierPlan(k=k, m=batch)
    changes: dict = {key: value for key, value in (("num_prompts", prompts),
                                                   ("max_new_tokens", max_new_tokens),
                                                   ("rounds", rounds)) if value is not None}
    changes["backend"] = backend
    if depths is not None:
        changes["depths"] = parse_depths(depths)
    plan = replace(plan, **changes)
    result = run_frontier(output, plan, target, draft, quiet=as_json, prompts_file=prompts_file)
    return json.dumps(finite(result.to_dict())) if as_json else terminal_summary(result)
