"""What a plan's PSD (and SD) figures rest on, and how far each input is trusted.

A plan prices passes with cost models, draws acceptance from an acceptance model, adds an
engine step's host work, and (for PSD) overlaps the drafter's passes with the target's.  Each
of those is ``measured`` (fitted to this user's traces or bench results: a ``fitted`` cost
model file), ``probed`` (the co-run probe of ``analysis.contention``), ``preset`` (a cost or
engine preset fitted on public points, or borrowed from another part where it was not fitted),
``assumed`` (a number written in the config, fitted on nothing) or ``model`` (the simulator's
own mechanics).  ``plan_inputs`` lists them for ``psdlab plan``'s report, so a user sees how
far to trust a gain before building it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from psdlab.analysis.contention import DEFAULTS


@dataclass(frozen=True)
class PlanInput:
    """One input: what it is, its basis (module docstring) and its value in words."""
    term: str
    basis: str
    value: str


def _cost_input(role: str, cost: Mapping[str, Any]) -> PlanInput:
    name = str(cost.get("name", ""))
    if name == "gpu":
        from psdlab.sim.costs.catalog import get_hardware
        from psdlab.sim.costs.gpu import engine_presets
        from psdlab.sim.costs.public_check import borrowed_efficiencies
        engine, hw = cost.get("engine", "ideal"), cost.get("hardware")
        where = f"{engine} on {hw}"
        if isinstance(engine, str) and engine in engine_presets() and isinstance(hw, str):
            try:
                hw_name = get_hardware(hw, f"{role}.cost.hardware").name
            except ValueError:
                hw_name = hw
            borrowed = borrowed_efficiencies(engine_presets()[engine], hw_name)
            where += f" ({borrowed})" if borrowed else " (fitted on this part's public points)"
        return PlanInput(f"{role} passes", "preset", where)
    if name == "roofline":
        return PlanInput(f"{role} passes", "preset", f"the datasheet roofline of "
                                                     f"{cost.get('hardware')}")
    if name == "fitted":
        return PlanInput(f"{role} passes", "measured", f"fitted to traces ({cost.get('path')})")
    return PlanInput(f"{role} passes", "assumed", f"{name} cost model, coefficients as written")


def _acceptance_input(label: str, acceptance: Mapping[str, Any] | None) -> PlanInput:
    acc = dict(acceptance or {})
    name = str(acc.get("name", "none"))
    measured = name in ("fitted", "replay", "matches", "resampled") or "path" in acc
    shown = {k: v for k, v in acc.items() if k != "name"}
    return PlanInput(f"acceptance{label}", "measured" if measured else "assumed",
                     f"{name} {json.dumps(shown, sort_keys=True, default=str)}")


def _fitted_contention(target_cost: Mapping[str, Any]) -> PlanInput | None:
    """A fitted target's model file says what its PSD steps rest on (``meta.contention``: a
    probe or a default), or that PSD runs calibrated them."""
    if target_cost.get("name") != "fitted" or not isinstance(target_cost.get("path"), str):
        return None
    try:
        with open(target_cost["path"], encoding="utf-8") as fh:
            meta = json.load(fh).get("meta") or {}
    except (OSError, ValueError):
        return None
    c = meta.get("contention")
    if c is None:
        return PlanInput("contention of overlapped passes", "measured",
                         "the calibration's own PSD runs (overlapped phases)")
    basis = "probed" if c.get("source") == "probe" else "assumed"
    return PlanInput("contention of overlapped passes", basis,
                     f"c = {c.get('target', 0):.3f} / {c.get('drafter', 0):.3f} "
                     f"({c.get('source')}: {c.get('why')})")


def plan_inputs(cfg: Any, drafters: Sequence[tuple[Any, Mapping[str, Any] | None]],
                modes: Sequence[str]) -> tuple[PlanInput, ...]:
    """The inputs of a plan (module docstring): ``cfg`` its ``SimConfig``, ``drafters`` the
    plan's (drafter, acceptance) pairs (empty: the config's drafter and acceptance),
    ``modes`` the modes it compares."""
    out = [_cost_input("target", cfg.target.cost)]
    pairs = list(drafters) or ([(cfg.drafter, None)] if cfg.drafter is not None else [])
    drafting = [m for m in modes if m != "ar"]
    if drafting:
        for drafter, acceptance in pairs:
            out.append(_cost_input(f"drafter {drafter.name}", drafter.cost))
            out.append(_acceptance_input(f" ({drafter.name})", acceptance or cfg.acceptance))
    step = cfg.server.engine_step
    out.append(PlanInput("engine step (host work)", "assumed" if step == "none" else "preset",
                         "none: no engine-step model (only the cost preset's per-pass host time)"
                         if step == "none" else
                         f"{step if isinstance(step, str) else 'inline table'}"))
    if "psd" in modes:
        fitted = _fitted_contention(cfg.target.cost)
        if fitted is not None:
            out.append(fitted)
        else:
            layout = "gpus" if cfg.target.cost.get("name") in ("gpu", "roofline") else \
                "cpu-cores"
            d = DEFAULTS[layout]
            out.append(PlanInput("contention of overlapped passes", "assumed",
                                 f"c = {d.target:g} / {d.drafter:g} (stated default "
                                 f"'{layout}': {d.why})"))
        out.append(PlanInput("two batches, batch manager, tail, E[max(t, V)]", "model",
                             "simulated (2m held, the batch manager, the tail where one batch "
                             "empties; step-time spread only where a jitter table is given)"))
    return tuple(out)


def format_plan_inputs(inputs: Sequence[PlanInput]) -> str:
    """The report section's text: one line an input."""
    width = max(len(x.term) for x in inputs)
    return "\n".join(f"{x.term:<{width}}  {x.basis:<8}  {x.value}" for x in inputs)
