"""`psdlab frontier`: the paper's theory against a measured drafting Pareto frontier.

A family of drafters of one target (early exits of the target at several depths, built from
its own weights, plus the committed distilled drafter) is run on this machine's two cores
(drafter on core 0, target on core 1) on the held-out prompts.  Per drafter, one set of
workers runs, ``rounds`` times interleaved: SD-separate with batch m and PSD with 2 x m
(iso-batch, as the paper), in the first ``iso_c_rounds`` also PSD with 2 x m/2
(iso-concurrency); the first and the last drafter's workers also run target-only AR at m and
2m (the reference at the same concurrency, and a check of the machine's drift).  Every run
serves more requests than it has slots and stops once the last one is admitted: what it
measures is the steady state (full batches, requests waiting), not the drain.  From the traces
(``analysis.metrics.summarize``, steady-state decode steps as in ``validation.gains``): t, V,
per-step overhead, VSR, mean acceptance length and the measured time per generated token
(1 / steady-state decode throughput) of every run.  ``validation.frontier.theory`` turns the
SD-separate measurements into the envelope, the exponential fit and the predicted optima;
`judge` sets them against the measured ones; ``validation.frontier.outputs`` writes the figure,
the CSV and the markdown summary.
"""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from psdlab.analysis.checks import check_int
from psdlab.analysis.metrics import decode_steps, is_decode_step, summarize
from psdlab.analysis.trace import Trace
from psdlab.validation.frontier.frontier_results import (QUICK_DEPTHS, FrontierFiles,
                                                         FrontierMachine, FrontierPlan,
                                                         FrontierResult, FrontierRun,
                                                         FrontierWorkload, Member)
from psdlab.validation.frontier.theory import FrontierPoint, predict_optima
from psdlab.validation.frontier.verdicts import judge, measured_table


def quick_plan(k: int = 4, m: int = 4) -> FrontierPlan:
    """A smoke run: two exits and the committed drafter, few prompts and tokens, one round."""
    return FrontierPlan(k=k, m=m, depths=QUICK_DEPTHS, num_prompts=3 * m, max_new_tokens=8,
                        rounds=1, quick=True)


def _say(msg: str, quiet: bool) -> None:
    if not quiet:
        print(f"frontier: {msg}", file=sys.stderr, flush=True)


def build_family(target_dir: str, depths: Sequence[int], committed_dir: str | None,
                 quiet: bool = True) -> list[Member]:
    """Early exits of the target at ``depths`` (built once into the cache) plus the committed
    drafter, ordered by layer count."""
    from psdlab.runtime.drafter_build import early_exit_spec
    from psdlab.runtime.model_pair import prepare_drafter
    n_target = int(json.loads((Path(target_dir) / "config.json").read_text())
                   ["num_hidden_layers"])
    members = []
    for d in sorted(set(depths)):
        check_int("depths[]", d, minimum=1, maximum=n_target)
        path = prepare_drafter(Path(target_dir), early_exit_spec(d, n_target=n_target),
                               progress=not quiet)
        members.append(Member(f"exit-{d}", d, False, str(path), d))
    if committed_dir is not None:
        cfg = json.loads((Path(committed_dir) / "config.json").read_text())
        info = cfg.get("psdlab_drafter", {})
        distilled = bool(info.get("new_layers")) if isinstance(info, dict) else False
        layers = int(cfg["num_hidden_layers"])
        members.append(Member(f"committed-{layers}", None, distilled, str(committed_dir),
                              layers))
    return sorted(members, key=lambda mb: (mb.layers, mb.depth is None))


def _stop_when_all_admitted(loop: Any, index: int) -> bool:
    """The engine's ``on_step`` hook: ends the run (True) after the first step with nobody
    waiting -- the steady state is over; the drain that follows is not measured."""
    return not loop.waiting


def prefix_equal(a: Sequence[Sequence[int]], b: Sequence[Sequence[int]]) -> bool:
    """Outputs agree token for token wherever both have tokens (runs stopped early hold
    prefixes of the full outputs)."""
    return len(a) == len(b) and all(list(x[:min(len(x), len(y))]) == list(y[:min(len(x), len(y))])
                                    for x, y in zip(a, b))


def steady_window(trace: Trace) -> tuple[list, bool]:
    """The steady-state decode steps: those that start before the last admission (as
    ``analysis.metrics.steady_steps``; the admission is read from the last prefill step, since
    a run stopped after it has no records of its unfinished requests), without the start-up
    steps that verified nothing (PSD's first, unoverlapped draft).  Without a steady state (no
    request ever waited): every decode step.  Returns (steps, whether steady)."""
    prefills = [s.start for s in trace.steps if not is_decode_step(s)]
    last = max(prefills) if prefills else None
    steps = [s for s in decode_steps(trace) if last is not None and s.start < last]
    steady = any(s.verified for s in steps)
    if not steady:
        steps = decode_steps(trace)
    while steps and not steps[0].verified:
        steps = steps[1:]
    return steps, steady


def time_per_token(trace: Trace) -> tuple[float | None, bool]:
    """Measured time per generated token: wall time / tokens emitted over `steady_window`.
    Returns (seconds per token, whether it is the steady state)."""
    steps, steady = steady_window(trace)
    tokens = sum(v.emitted for s in steps for v in s.verified)
    wall = sum(s.end - s.start for s in steps)
    return (wall / tokens if tokens else None), steady


def overlapped_phases(traces: Sequence[Trace]) -> tuple[float | None, float | None]:
    """Mean drafting and verification time over the overlapped steps of PSD traces."""
    t, v = [], []
    for tr in traces:
        for s in tr.steps:
            if s.overlapped:
                t.append(sum(p.end - p.start for p in s.phases if p.kind == "draft"))
                v.append(sum(p.end - p.start for p in s.phases if p.kind == "verify"))
    return (float(np.mean(t)) if t else None), (float(np.mean(v)) if v else None)


def _run_record(drafter: str, trace: Trace, mode: str, rnd: int,
                wall: float) -> FrontierRun:
    s = summarize(trace)
    dec = s.get("decode_throughput_tok_s")
    tpt, steady = time_per_token(trace)
    return FrontierRun(drafter=drafter, mode=mode, round=rnd, wall_s=wall,
                       time_per_token_s=tpt, steady=steady,
                       decode_time_per_token_s=1.0 / dec if dec else None,
                       t_s=s.get("mean_draft_time_s"), V_s=s.get("mean_verify_time_s"),
                       vsr=s.get("vsr"), mean_acceptance_length=s.get("mean_acceptance_length"),
                       accepted=s.get("accepted_tokens"), proposed=s.get("proposed_tokens"),
                       draft_hidden_fraction=s.get("draft_hidden_fraction"))


def measure_member(member: Member, target_dir: str, requests: list, plan: FrontierPlan,
                   tokenizer: Any = None, trace_dir: str | None = None, quiet: bool = True,
                   with_ar: bool = True
                   ) -> tuple[list[FrontierRun], dict[str, list], dict[str, list]]:
    """All runs of one drafter on one set of workers (AR at m and 2m too ``with_ar``);
    returns the run records, the traces by mode and the outputs by run."""
    from psdlab.runtime.controller import Engine, EngineConfig
    from psdlab.runtime.runner import ModelSpec
    m = plan.m
    base = EngineConfig(mode="psd", k=plan.k, batch=m, max_new_tokens=plan.max_new_tokens,
                        ignore_eos=True, max_len=1024, backend=plan.backend)
    runs = {"sd": replace(base, mode="sd-sep"), "psd": base}
    if m >= 2:
        runs["psd_iso_c"] = replace(base, batch=m // 2)
    refs = {"ar": replace(base, mode="ar"), "ar_2m": replace(base, mode="ar", batch=2 * m)}
    records: list[FrontierRun] = []
    traces: dict[str, list] = {}
    outputs: dict[str, list] = {}
    with Engine(base, ModelSpec(target_dir), ModelSpec(member.path), tokenizer) as eng:
        eng.run(requests[:2], None, config=replace(runs["sd"], max_new_tokens=4))

        def one(mode: str, cfg: Any, rnd: int) -> Trace:
            path = (str(Path(trace_dir) / f"{member.name}_{mode}_r{rnd}.jsonl")
                    if trace_dir else None)
            start = time.perf_counter()
            hook = _stop_when_all_admitted if len(requests) > cfg.slots else None
            res = eng.run(requests, path, config=cfg, on_step=hook,
                          run_extra={"frontier": member.name, "round": rnd,
                                     "stopped_after_last_admission": hook is not None})
            if res.interrupted:
                raise KeyboardInterrupt
            records.append(_run_record(member.name, res.trace, mode, rnd,
                                       time.perf_counter() - start))
            outputs[f"{mode}_{rnd}"] = [o.token_ids for o in res.outputs]
            traces.setdefault(mode, []).append(res.trace)
            return res.trace

        for rnd in range(1, plan.rounds + 1):
            _say(f"{member.name}: round {rnd}/{plan.rounds}", quiet)
            for mode, cfg in runs.items():
                if mode != "psd_iso_c" or rnd <= plan.iso_c_rounds:
                    one(mode, cfg, rnd)
        for mode, cfg in refs.items() if with_ar else ():
            one(mode, cfg, 1)
    return records, traces, outputs


def frontier_point(name: str, traces: Sequence[Trace],
                   psd_traces: Sequence[Trace] = ()) -> FrontierPoint:
    """t, V, overhead, CVs and tokens per step over the steady-state steps of the SD-separate
    runs of one drafter (pooled over rounds); VSR over all their verified draft tokens; the
    overlapped phase times of its PSD runs (for the contention of the others' predictions)."""
    t, v, step, tokens = [], [], [], []
    acc = prop = 0
    for tr in traces:
        for s in steady_window(tr)[0]:
            kinds = {p.kind for p in s.phases}
            if not s.verified or not {"draft", "verify"} <= kinds:
                continue
            t.append(sum(p.end - p.start for p in s.phases if p.kind == "draft"))
            v.append(sum(p.end - p.start for p in s.phases if p.kind == "verify"))
            step.append(s.end - s.start)
            tokens.append(sum(r.emitted for r in s.verified))
        for s in tr.steps:
            for r in s.verified:
                acc += r.accepted
                prop += r.proposed
    if not t:
        raise ValueError(f"{name}: the SD-separate runs have no decode steps that drafted")
    ta, va, sa = np.array(t), np.array(v), np.array(step)
    t_ov, v_ov = overlapped_phases(psd_traces)
    return FrontierPoint(t_overlapped=t_ov, V_overlapped=v_ov, name=name, t=float(ta.mean()),
                         V=float(va.mean()),
                         vsr=acc / prop if prop else 0.0,
                         tokens_per_step=float(np.mean(tokens)),
                         overhead=max(0.0, float(sa.mean() - ta.mean() - va.mean())),
                         t_cv=float(ta.std() / ta.mean()) if ta.mean() > 0 else 0.0,
                         V_cv=float(va.std() / va.mean()) if va.mean() > 0 else 0.0)


def frontier_machine() -> FrontierMachine:
    """CPU model, its vector flags, cores, load average, date, git commit
    (`validation.results_file`'s record, under this file's keys)."""
    from psdlab.validation.results_file import git_info
    from psdlab.validation.results_file import machine_info as machine
    m, git = machine(), git_info()
    load = m["load_after"]
    return FrontierMachine(cpu_model=m["cpu_model"], flags=tuple(m["cpu_flags"]),
                           cores=m["cpus"], cores_usable=m["cpus_usable"],
                           load_average=None if load is None else tuple(load),
                           date_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                           git_commit=git["commit"] or "", git_dirty=git["tree"] != "clean",
                           python=platform.python_version())


def run_frontier(out_dir: str, plan: FrontierPlan, target_dir: str | None = None,
                 draft_dir: str | None = None, quiet: bool = False,
                 prompts_file: str | None = None) -> FrontierResult:
    """The whole experiment: build the family, measure it, predict, judge, write files.
    Prompts: ``prompts_file`` (text or ``prompt_ids`` lines), default the shipped held-out
    split (never the split the committed drafter was distilled on)."""
    from psdlab.runtime import run_setup as session
    from psdlab.runtime.overlap_bench import cycle_requests
    from psdlab.validation.frontier.outputs import write_outputs
    start = time.perf_counter()
    started = frontier_machine()
    models = session.resolve_models(target_dir, draft_dir, True, progress=not quiet)
    tokenizer = session.load_tokenizer(models.tokenizer)
    requests = cycle_requests(session.load_requests(prompts_file, tokenizer, "offline"),
                              plan.num_prompts)
    members = build_family(models.target, plan.depths, models.drafter, quiet)
    out = Path(out_dir)
    trace_dir = out / "traces"
    trace_dir.mkdir(parents=True, exist_ok=True)
    records: list[FrontierRun] = []
    points: list[FrontierPoint] = []
    reference: list | None = None
    for i, mb in enumerate(members):
        _say(f"measuring {mb.name} ({mb.layers} layers)", quiet)
        with_ar = i in (0, len(members) - 1)    # AR, the drift reference: first and last
        recs, traces, outputs = measure_member(mb, models.target, requests, plan, tokenizer,
                                               str(trace_dir), quiet, with_ar)
        reference = reference or outputs.get("ar_1")
        assert reference is not None            # the first member measures AR
        records += [replace(rec, lossless=prefix_equal(outputs[f"{rec.mode}_{rec.round}"],
                                                       reference)) for rec in recs]
        points.append(frontier_point(mb.name, traces["sd"], traces.get("psd", ())))
    pred = predict_optima(points, plan.k, plan.m)
    table = measured_table(members, records)
    judgement = judge(table, points, pred, records)
    result = FrontierResult(
        plan=plan, machine=started, load_average_end=tuple(os.getloadavg()),
        workload=FrontierWorkload(prompts=prompts_file or "shipped, split heldout",
                                  requests=len(requests), max_new_tokens=plan.max_new_tokens,
                                  greedy=True),
        family=tuple(members), points=tuple(points), measured=tuple(table), prediction=pred,
        judgement=judgement, runs=tuple(records), wall_s=time.perf_counter() - start,
        files=FrontierFiles.in_folder(out))
    write_outputs(result)
    return result
