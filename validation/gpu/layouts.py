"""The layouts of `psdlab bench-gpu` (`validation.gpu.bench_gpu`): AR, SD-separate and PSD on a
device layout of the machine, then the simulator calibrated on AR, SD-sep and a co-run probe
and validated on every PSD run.

Layouts (`layouts`): ``two-devices`` (drafter on the second GPU, one process per GPU: no shared
GIL) when there are two GPUs, and ``two-streams`` (both on the first GPU, one process, a CUDA
stream each).  A dry run (``device="cpu"``) runs the same layouts on CPU with tiny models --
``two-devices`` as two pinned processes on cores 0 and 1, ``two-streams`` as two threads -- so
every line but the CUDA-only ones runs in CI.  Each layout runs
`runtime.overlap_bench.bench_runtime`
(AR for the reference output, the co-run probe on the layout's workers, then SD-sep at m, PSD
at 2 x m and PSD at 2 x m/2, ``rounds`` times interleaved), then `psdlab calibrate` on AR, the
SD-sep rounds and the probe, and `psdlab validate` on every PSD run: PSD predicted before it
ran, on two streams as on two devices.
"""
from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from psdlab.analysis.contention import CorunProbe


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
    psd_inputs: str = ""        # what PSD's contention rests on: "probe" or "default:<layout>"


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


def calibrate_and_validate(trace_dir: Path, rounds: int,
                           corun: CorunProbe | None = None) -> SimulatorCheck:
    """PSD predicted before it runs: calibrate on AR and every round of SD-sep, plus the
    co-run probe the layout's workers ran (``corun``: on two streams of one GPU, on two GPUs,
    or on two CPU cores in the dry run; none: the layout's stated default), and validate on
    every PSD run, none of which the calibration read (held out whatever the rounds): what
    ``psdlab calibrate --corun-probe`` and ``psdlab validate`` do, called directly."""
    from psdlab.validation.calibrate import calibrate
    from psdlab.validation.importers import load_traces
    from psdlab.sim.costs.fitted import write_fit
    from psdlab.validation.model_file import model_parts
    from psdlab.validation.validate import trace_name, validate
    fit_on = [trace_dir / "ar.jsonl"] + sorted(trace_dir.glob("sd_r*.jsonl"))
    held = sorted(trace_dir.glob("psd*_r*.jsonl"))
    model = trace_dir / "model.json"
    cal = calibrate([t for p in fit_on for t in load_traces(str(p))], corun=corun)
    doc = write_fit(str(model), *model_parts(cal, traces=[str(p) for p in fit_on]))
    named: list[tuple[str, Any]] = []
    used: set[str] = set()
    for p in held:
        for tr in load_traces(str(p)):
            named.append((trace_name(str(p), tr, used), tr))
    result = validate(doc_file(str(model), doc), named, seeds=range(2))
    contention = doc.get("meta", {}).get("contention") or {}
    return SimulatorCheck(
        calibrated_on=tuple(p.name for p in fit_on), validated_on=tuple(p.name for p in held),
        held_out=True, model=str(model),
        fit_heldout_errors={name: f.get("heldout_error")
                            for name, f in doc.get("meta", {}).get("fits", {}).items()},
        summary=tuple(result.summary()), notes=tuple(result.notes),
        psd_inputs=str(contention.get("source", "its own PSD runs")))


def doc_file(path: str, doc: Mapping[str, Any]) -> Any:
    """The model file as written (``sim.costs.fitted.FitFile``), not read back."""
    from psdlab.sim.costs.fitted import FitFile
    return FitFile(path, dict(doc))


def run_layout(layout: DeviceLayout, target: Any, drafter: Any, requests: list, base: Any,
               out: Path, rounds: int, keep_outputs: bool = False) -> LayoutRun:
    from psdlab.runtime.overlap_bench import bench_runtime
    cfg = replace(base, backend=layout.backend, device=layout.device,
                  drafter_device=layout.drafter_device)
    trace_dir = out / layout.name
    t0 = time.perf_counter()
    fig = bench_runtime(target, drafter, requests, cfg, trace_dir=str(trace_dir), rounds=rounds,
                        quiet=True, keep_outputs=keep_outputs, corun=True)
    wall_s = time.perf_counter() - t0
    outputs = fig.pop("outputs", None)
    probe = fig.pop("corun_probe", None)
    return LayoutRun(figures=fig, bench_wall_s=wall_s, layout=layout,
                     simulator=calibrate_and_validate(trace_dir, rounds, probe),
                     outputs=outputs)


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
