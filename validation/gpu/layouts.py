"""The layouts of `psdlab bench-gpu` (`validation.gpu.bench_gpu`): AR, SD-separate and PSD on a
device layout of the machine, then the simulator calibrated on the first round of traces and
validated on the second.

Layouts (`layouts`): ``two-devices`` (drafter on the second GPU, one process per GPU: no shared
GIL) when there are two GPUs, and ``two-streams`` (both on the first GPU, one process, a CUDA
stream each).  A dry run (``device="cpu"``) runs the same layouts on CPU with tiny models --
``two-devices`` as two pinned processes on cores 0 and 1, ``two-streams`` as two threads -- so
every line but the CUDA-only ones runs in CI.  Each layout runs
`runtime.overlap_bench.bench_runtime`
(AR for the reference output, then SD-sep at m, PSD at 2 x m and PSD at 2 x m/2, ``rounds``
times interleaved), then `psdlab calibrate` on round 1 and `psdlab validate` on round 2 (with
one round, on round 1 itself: a consistency check, not held out; the summary says which).
"""
from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping


@dataclass(frozen=True)
class DeviceLayout:
    name: str
    backend: str
    device: str
    drafter_device: str | None


def layouts(device: str, gpus: int) -> list[DeviceLayout]:
    """The layouts to run: on CUDA, ``two-devices`` needs a second GPU; the dry run has both."""
    if device == "cpu":
        return [DeviceLayout("two-devices", "process", "cpu", None),
                DeviceLayout("two-streams", "thread", "cpu", None)]
    index = int(device.split(":")[1]) if ":" in device else 0
    out = []
    if gpus >= 2:
        other = (index + 1) % gpus
        out.append(DeviceLayout("two-devices", "process", f"cuda:{index}", f"cuda:{other}"))
    out.append(DeviceLayout("two-streams", "thread", f"cuda:{index}", None))
    return out


@dataclass(frozen=True)
class SimulatorCheck:
    """The simulator calibrated on ``calibrated_on`` and validated on ``validated_on`` (held
    out, or with one round the same traces): each fit's held-out error and `validate`'s
    summary rows (its worst error per target) and notes."""
    calibrated_on: tuple[str, ...]
    validated_on: tuple[str, ...]
    held_out: bool
    model: str
    fit_heldout_errors: Mapping[str, float | None]
    summary: tuple[Mapping[str, Any], ...]      # `validation.validate`'s rows, as it gives them
    notes: tuple[str, ...]


@dataclass(frozen=True)
class LayoutRun:
    """`run_layout`'s result: `runtime.overlap_bench.bench_runtime`'s figures (as it gives
    them, without the outputs), its wall time, the layout and the simulator's check; every
    run's token ids (not in the JSON)."""
    figures: Mapping[str, Any]
    bench_wall_s: float
    layout: DeviceLayout
    simulator: SimulatorCheck
    outputs: Mapping[str, list] | None


def calibrate_and_validate(trace_dir: Path, rounds: int) -> SimulatorCheck:
    """Calibrate on AR + round 1, validate on round 2 (round 1 when there is one round): what
    ``psdlab calibrate`` and ``psdlab validate`` do, called directly."""
    from psdlab.validation.calibrate import calibrate
    from psdlab.validation.importers import load_traces
    from psdlab.sim.costs.fitted import write_fit
    from psdlab.validation.model_file import model_parts
    from psdlab.validation.validate import trace_name, validate
    fit_on = [trace_dir / "ar.jsonl"] + sorted(trace_dir.glob("*_r1.jsonl"))
    held = sorted(trace_dir.glob("*_r2.jsonl")) if rounds >= 2 else sorted(
        trace_dir.glob("*_r1.jsonl"))
    model = trace_dir / "model.json"
    cal = calibrate([t for p in fit_on for t in load_traces(str(p))])
    doc = write_fit(str(model), *model_parts(cal, traces=[str(p) for p in fit_on]))
    named: list[tuple[str, Any]] = []
    used: set[str] = set()
    for p in held:
        for tr in load_traces(str(p)):
            named.append((trace_name(str(p), tr, used), tr))
    result = validate(str(model), named, seeds=range(2))
    return SimulatorCheck(
        calibrated_on=tuple(p.name for p in fit_on), validated_on=tuple(p.name for p in held),
        held_out=rounds >= 2, model=str(model),
        fit_heldout_errors={name: f.get("heldout_error")
                            for name, f in doc.get("meta", {}).get("fits", {}).items()},
        summary=tuple(result.summary()), notes=tuple(result.notes))


def run_layout(layout: DeviceLayout, target: Any, drafter: Any, requests: list, base: Any,
               out: Path, rounds: int, keep_outputs: bool = False) -> LayoutRun:
    from psdlab.runtime.overlap_bench import bench_runtime
    cfg = replace(base, backend=layout.backend, device=layout.device,
                  drafter_device=layout.drafter_device)
    trace_dir = out / layout.name
    t0 = time.perf_counter()
    fig = bench_runtime(target, drafter, requests, cfg, trace_dir=str(trace_dir), rounds=rounds,
                        quiet=True, keep_outputs=keep_outputs)
    wall_s = time.perf_counter() - t0
    outputs = fig.pop("outputs", None)
    return LayoutRun(figures=fig, bench_wall_s=wall_s, layout=layout,
                     simulator=calibrate_and_validate(trace_dir, rounds), outputs=outputs)


def machine(device: str, load_before: list[float] | None = None) -> dict[str, Any]:
    """`validation.results_file`'s machine and commit record, the date, and on CUDA the GPUs."""
    from psdlab.validation.results_file import git_info, machine_info
    info: dict[str, Any] = {**machine_info(load_before), **git_info(),
                            "host": platform.node(),
                            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if os.environ.get("PSDLAB_COMMIT"):    # a copied tree whose .git is not the run's commit
        info.update(commit=os.environ["PSDLAB_COMMIT"], short=os.environ["PSDLAB_COMMIT"][:7],
                    tree="the commit named by the caller (PSDLAB_COMMIT)")
    if device != "cpu":
        import torch
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        info["cuda"] = torch.version.cuda
        info["torch"] = torch.__version__
    return info
