"""What `psdlab plan CONFIG.toml` (or the one-command form, `sim.quick_plan`) does once its
arguments are parsed: the plan of the config's [plan] table (with the command line's
overrides), its run on a sweep backend, the files (CSV, PNG, vLLM k table; written only when
every configuration ran and the adaptive policy's thresholds were found) and the text it
prints.  The command module only parses and prints."""
from __future__ import annotations

import dataclasses
import json
import os
import sys
from dataclasses import dataclass
from typing import Callable, Sequence

from psdlab.analysis.json_out import finite_json
from psdlab.sim.plan_rows import PlanRow
from psdlab.sim.quick_plan import QuickPlan


@dataclass(frozen=True)
class PlanOptions:
    """The command's options (None: the config's [plan] value or the default); ``config``
    None: the one-command plan ``quick`` describes."""
    config: str | None
    jobs: int | None = None
    csv: str | None = None
    requests: int | None = None
    workload: str | None = None
    format: str | None = None
    max_model_len: int | None = None
    show_all: bool = False
    as_json: bool = False
    backend: str = "local"
    address: str | None = None
    no_png: bool = False
    vllm_k_table: str | None = None
    k_table_drafter: str | None = None
    k_table_by: str = "rate"
    quick: QuickPlan | None = None


def _write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def capped_note(rows: Sequence[PlanRow], per_trial: int) -> list[str]:
    """The line that says how many rows rest on the capacity cap (none: no line)."""
    capped = sum(1 for r in rows if r.replicas == rows[0].replicas
                 and r.result.bound in ("capacity", "mixed"))
    if not capped:
        return []
    return [f"capped: {capped} configuration{'s' if capped > 1 else ''} met the SLO at "
            f"the capacity itself (bound capacity or mixed) in trials of {per_trial} requests; "
            f"longer trials (--requests) may find a lower rate"]


def plan_command(opts: PlanOptions) -> str:
    """Run the capacity plan the options describe, write its files; the text to print.
    A configuration that failed raises `sweep_backends.SweepTaskError` (nothing written)."""
    from psdlab.analysis.atomic_write import write_all
    from psdlab.analysis.checks import check_int
    from psdlab.sim.capacity import (parse_plan, run_capacity_plan, steady_requests,
                                     trial_requests, write_plan_csv)
    from psdlab.sim.plan_figure import make_figure, save, workload_label
    from psdlab.sim.plan_report import (PlanContext, best_per_load, build_report, check_slo_met,
                                        format_plan_report, slo_text)
    from psdlab.sim.policy_search import format_policy_report as policy_text
    from psdlab.sim.policy_search import plan_thresholds, policy_agreement
    from psdlab.sim.sim_config import config_from_dict, read_toml
    from psdlab.sim.quick_plan import option_error, quick_config
    from psdlab.sim.simulate_command import file_workload
    from psdlab.sim.vllm_k_table import k_table

    defaults: tuple[str, ...] = ()
    workload = opts.workload
    if opts.config is not None:
        raw = read_toml(opts.config)
        cfg = config_from_dict(raw, os.path.dirname(os.path.abspath(opts.config)))
    else:
        if opts.quick is None:
            raise ValueError("plan: a config file, or --target and --gpu")
        qc = quick_config(opts.quick)
        raw, defaults = qc.raw, qc.defaults
        try:
            cfg = config_from_dict(raw, os.getcwd())
            parse_plan(raw["plan"], cfg)
        except ValueError as exc:
            raise ValueError(option_error(str(exc))) from None
        if qc.traffic_file is not None:
            if workload is not None:
                raise ValueError("--workload: the one-command plan takes --traffic FILE")
            workload = qc.traffic_file
    spec_file = file_workload(workload, opts.format, opts.max_model_len)
    if spec_file is not None:
        cfg = cfg.replace(workload=spec_file)
    spec = parse_plan(raw.get("plan"), cfg)
    if opts.requests is not None:
        spec = dataclasses.replace(spec, requests=check_int("--requests", opts.requests, 10))
    jobs = check_int("--jobs", opts.jobs, 1, 256) if opts.jobs is not None else spec.jobs
    if opts.address is not None and opts.backend != "ray":
        raise ValueError("--address: only with --backend ray")
    if opts.k_table_drafter is not None and opts.vllm_k_table is None:
        raise ValueError("--k-table-drafter: only with --vllm-k-table")
    rows = run_capacity_plan(cfg, spec, jobs, progress=sys.stderr.isatty() and not opts.as_json,
                             backend=opts.backend, address=opts.address)
    check_slo_met(spec, rows)         # nothing meets the SLO: one line, exit 2, no file
    per_trial = trial_requests(cfg, spec)
    ctx = PlanContext(cfg, spec, rows, show_all=opts.show_all,
                      k_table_drafter=opts.k_table_drafter, k_table_by=opts.k_table_by,
                      rate=None if opts.quick is None else opts.quick.rate)
    sections = build_report(ctx)
    csv_path = opts.csv or spec.csv
    png_path = (os.path.splitext(csv_path)[0] + ".png") if csv_path and not opts.no_png else None
    writers: dict[str, Callable[[str], None]] = {}
    if csv_path:
        writers[csv_path] = lambda tmp: write_plan_csv(rows, tmp)
    if png_path:
        fig = make_figure(rows, slo_text(spec), workload_label(cfg.workload, per_trial))
        writers[png_path] = lambda tmp: save(fig, tmp)
    if opts.vllm_k_table:
        k_conf = k_table(rows, opts.k_table_drafter, opts.k_table_by).speculative_config()
        text = json.dumps(k_conf) + "\n"
        writers[opts.vllm_k_table] = lambda tmp: _write_text(tmp, text)
    # the adaptive policy's thresholds; computed before anything is written, so that a failure
    # here leaves no file behind
    policy = plan_thresholds(cfg.replace(server_m=max(spec.ms)), spec.modes, spec.ks)
    agreement = None if policy is None else policy_agreement(policy, best_per_load(rows))
    write_all(writers)
    if opts.as_json:
        return finite_json({"rows": [r.to_csv_row() for r in rows], "csv": csv_path,
                           "png": png_path,
                           "adaptive_policy": None if policy is None else policy.to_dict(),
                           "adaptive_agreement": None if agreement is None
                           else agreement.strip(),
                           "vllm_k_table": opts.vllm_k_table,
                           "defaults": list(defaults),
                           "sections": [{"name": s.name, "title": s.title, "data": s.data}
                                        for s in sections]}, sort_keys=True)
    first, stop = steady_requests(per_trial)
    lines = [*(f"default: {d}" for d in defaults),
             f"SLO: {slo_text(spec)}; {per_trial} requests per trial, {spec.iterations} "
             f"bisection steps; backend {opts.backend}",
             f"steady state: the SLO judged on requests {first + 1}..{stop} of each trial by "
             f"arrival (warm-up and drain left out); rates never above the offline steady "
             f"capacity (bound 'capacity': capped there, the SLO did not bind); mean and 95% "
             f"interval over {spec.seeds} seed{'s' if spec.seeds > 1 else ''}",
             *capped_note(rows, per_trial),
             format_plan_report([s for s in sections if s.name != "answer"])]
    if policy is not None and agreement is not None:
        lines += [policy_text(policy), agreement]
    # the answer last, after the adaptive policy's thresholds
    lines += ["", format_plan_report([s for s in sections if s.name == "answer"])]
    for label, path in (("csv", csv_path), ("png", png_path),
                        ("vllm k table", opts.vllm_k_table)):
        if path:
            lines.append(f"{label}: {path}")
    return "\n".join(lines)
