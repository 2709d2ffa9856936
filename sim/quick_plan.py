"""A plan (or a simulation) in one command: ``psdlab plan --target NAME --gpu NAME --tp N
--drafter NAME ...`` (``psdlab simulate --target ... --gpu ...``).

The command line's few answers (which target on which GPUs, which drafter, what traffic, which
SLO) become the same config a ``[plan]`` TOML file would hold (``quick_config``), every other
field defaulted here and listed (``QuickConfig.defaults``) so the user sees what the answer
assumed.  Models are catalog names, Hugging Face ids or ``config.json`` paths
(``sim.costs.catalog.get_model``); GPUs are hardware presets (``sim.costs.catalog``); passes
are priced by the GPU cost preset of ``engine``.  The plan itself runs as a TOML plan does
(``sim.plan_command``); its report ends in one answer (``plan_report.answer_section``).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

from psdlab.analysis.checks import check_int, check_positive

#: the unit suffixes ``--slo`` takes, in seconds
SLO_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
DEFAULT_SLO = "ttft_p99=3s,tpot_p50=50ms"
DEFAULT_ENGINE = "vllm-cudagraph"
DEFAULT_KS = (2, 4)
DEFAULT_MS = (8, 16, 32, 64)
DEFAULT_ALPHA = 0.8
DEFAULT_REQUESTS = 300
DEFAULT_ITERATIONS = 6
#: the built-in traffic: Poisson arrivals (the planner searches the rate) with psdlab's
#: ShareGPT-like lengths (``sim.lengths.sharegpt_like_lengths``); anything else is a file
BUILTIN_TRAFFIC = "sharegpt"


@dataclass(frozen=True)
class Deployment:
    """What runs where: the target on ``tp`` GPUs of kind ``gpu``, the drafter (None: none) on
    its own; the acceptance rate assumed; the GPU cost preset and dtype that price the passes."""
    target: str
    gpu: str
    tp: int = 1
    drafter: str | None = None
    drafter_gpu: str | None = None
    drafter_tp: int = 1
    alpha: float | None = None
    engine: str = DEFAULT_ENGINE
    dtype: str = "bf16"


@dataclass(frozen=True)
class QuickPlan(Deployment):
    """The one-command plan's options: a deployment, its traffic and SLO, the rate to serve
    (None: the answer is for one replica)."""
    traffic: str = BUILTIN_TRAFFIC
    slo: str = DEFAULT_SLO
    rate: float | None = None


@dataclass(frozen=True)
class QuickConfig:
    """A one-command plan as a config: ``raw`` (what a TOML plan file would parse to), the
    traffic file to plan on (None: the built-in traffic) and the defaults it took, in words."""
    raw: dict[str, Any]
    traffic_file: str | None
    defaults: tuple[str, ...] = field(default=())


def parse_slo_text(text: str, where: str = "--slo") -> dict[str, float]:
    """``"tpot_p50=50ms,ttft_p99=3s"`` -> ``{"tpot_p50": 0.05, "ttft_p99": 3.0}`` (seconds;
    units us, ms or s, none: seconds); the names are checked by ``capacity.parse_slo``."""
    out: dict[str, float] = {}
    for part in (p.strip() for p in str(text).split(",")):
        key, eq, value = part.partition("=")
        key, value = key.strip(), value.strip().lower()
        if not eq or not key or not value:
            raise ValueError(f"{where}: expected name=value[,name=value] like {DEFAULT_SLO}, "
                             f"got {part!r}")
        unit = next((u for u in sorted(SLO_UNITS, key=len, reverse=True)
                     if value.endswith(u)), "")
        number = value[:len(value) - len(unit)] if unit else value
        try:
            seconds = float(number) * SLO_UNITS.get(unit, 1.0)
        except ValueError:
            raise ValueError(f"{where}.{key}: expected a time like 50ms or 3s, got "
                             f"{value!r}") from None
        out[key] = check_positive(f"{where}.{key}", seconds)
    return out


def _model_name(value: str) -> str:
    """A short name for a model given by name or by a config.json path."""
    if value.endswith(".json") or os.path.isdir(value):
        path = os.path.dirname(os.path.abspath(value)) if value.endswith(".json") else value
        return os.path.basename(os.path.normpath(path)) or value
    return value


def _cost(model: str, gpu: str, tp: int, engine: str, dtype: str) -> dict[str, Any]:
    return {"name": "gpu", "model": model, "hardware": gpu, "tp": tp, "dtype": dtype,
            "engine": engine}


def deployment_config(q: Deployment, mode: str = "ar", k: int = DEFAULT_KS[-1],
                      m: int = DEFAULT_MS[0]) -> tuple[dict[str, Any], list[str]]:
    """The config tables of a deployment (seed, server, target, drafter, acceptance) and the
    defaults they took, in words; every model, GPU and preset name checked here so that a bad
    one is a one-line error before anything runs."""
    from psdlab.sim.costs.catalog import get_hardware, get_model
    from psdlab.sim.costs.gpu import engine_presets

    tp = check_int("--tp", q.tp, 1, 64)
    drafter_tp = check_int("--drafter-tp", q.drafter_tp, 1, 64)
    get_model(q.target, "--target")
    get_hardware(q.gpu, "--gpu")
    if q.engine not in engine_presets():
        raise ValueError(f"--engine: unknown preset {q.engine!r}; known: "
                         f"{', '.join(sorted(engine_presets()))}")
    defaults: list[str] = []
    raw: dict[str, Any] = {
        "seed": 0,
        "server": {"mode": mode, "k": k, "m": m, "engine_step": "preset"},
        "target": {"name": _model_name(q.target),
                   "cost": _cost(q.target, q.gpu, tp, q.engine, q.dtype)},
    }
    if q.drafter is not None:
        get_model(q.drafter, "--drafter")
        d_gpu = q.drafter_gpu or q.gpu
        get_hardware(d_gpu, "--drafter-gpu")
        if q.drafter_gpu is None:
            defaults.append(f"drafter on one more {q.gpu} (--drafter-gpu), tp {drafter_tp}")
        raw["drafter"] = {"name": _model_name(q.drafter),
                          "cost": _cost(q.drafter, d_gpu, drafter_tp, q.engine, q.dtype)}
        alpha = DEFAULT_ALPHA if q.alpha is None else q.alpha
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"--alpha: the per-token acceptance rate, in (0, 1); got {alpha}")
        if q.alpha is None:
            defaults.append(f"acceptance geometric, alpha {DEFAULT_ALPHA} per token, assumed "
                            f"(--alpha; measure it with psdlab calibrate)")
        raw["acceptance"] = {"name": "geometric", "alpha": alpha}
    elif q.drafter_gpu is not None or q.alpha is not None:
        raise ValueError("--drafter-gpu/--alpha: only with --drafter")
    defaults.append(f"passes priced by the {q.engine} preset in {q.dtype}, its engine's host "
                    f"work per step (--engine, --dtype)")
    return raw, defaults


def builtin_workload(rate: float | None) -> dict[str, Any]:
    """The built-in traffic: ShareGPT-like lengths, Poisson at ``rate`` (None: all at once)."""
    prompt, output = _sharegpt_lengths()
    if rate is None:
        return {"name": "offline", "prompt": prompt, "output": output}
    return {"name": "poisson", "rate": rate, "prompt": prompt, "output": output}


def quick_config(q: QuickPlan) -> QuickConfig:
    """The config of a one-command plan (``deployment_config`` and a ``[plan]`` table)."""
    raw, defaults = deployment_config(q, "psd" if q.drafter is not None else "ar")
    slo = parse_slo_text(q.slo)
    if q.rate is not None:
        check_positive("--rate", q.rate)
    if q.slo == DEFAULT_SLO:
        defaults.insert(0, f"SLO {DEFAULT_SLO} (--slo)")
    modes = ["ar", "sd", "psd"] if q.drafter is not None else ["ar"]
    if q.drafter is None:
        defaults.append("AR only: no --drafter given")
    traffic_file = None
    if q.traffic == BUILTIN_TRAFFIC:
        raw["workload"] = builtin_workload(1.0)
        defaults.append("traffic: Poisson arrivals, ShareGPT-like lengths (prompt mean 300, "
                        "output mean 250 tokens; --traffic FILE for yours)")
    else:
        if not os.path.isfile(q.traffic):
            raise ValueError(f"--traffic: {BUILTIN_TRAFFIC!r} or a bench result / trace file; "
                             f"no file {q.traffic!r}")
        traffic_file = q.traffic
        raw["workload"] = {"name": "poisson", "rate": 1.0, "prompt": 200, "output": 200}
    raw["plan"] = {"modes": modes, "k": list(DEFAULT_KS), "m": list(DEFAULT_MS), "slo": slo,
                   "requests": DEFAULT_REQUESTS, "iterations": DEFAULT_ITERATIONS}
    defaults.append(f"k {list(DEFAULT_KS)}, m {list(DEFAULT_MS)}, {DEFAULT_REQUESTS} requests a "
                    f"trial, {DEFAULT_ITERATIONS} bisection steps, 3 seeds")
    if q.rate is None:
        defaults.append("replicas: for one replica (--rate R: how many R req/s needs)")
    return QuickConfig(raw=raw, traffic_file=traffic_file, defaults=tuple(defaults))


def _sharegpt_lengths() -> tuple[dict[str, Any], dict[str, Any]]:
    from psdlab.sim.lengths import sharegpt_like_lengths
    return sharegpt_like_lengths()


#: a config field the one-command plan filled -> the option that set it
OPTION_OF_FIELD = (("target.cost.tp", "--tp"), ("drafter.cost.tp", "--drafter-tp"),
                   ("target.cost.hardware", "--gpu"), ("drafter.cost.hardware", "--drafter-gpu"),
                   ("target.cost.model", "--target"), ("drafter.cost.model", "--drafter"),
                   ("target.cost.dtype", "--dtype"), ("drafter.cost.dtype", "--dtype"),
                   ("plan.slo", "--slo"))


def option_error(message: str) -> str:
    """A config error of a one-command plan in the user's terms: the field it names led by the
    option that set it (``target.cost.tp: ...`` -> ``--tp (target.cost.tp): ...``)."""
    head, sep, rest = message.partition(":")
    for field_name, option in OPTION_OF_FIELD:
        if head == field_name or head.startswith(field_name + "."):
            return f"{option} ({head}){sep}{rest}"
    return message


def replicas_for(rate: float, per_replica: float) -> int | None:
    """Replicas of a configuration that sustains ``per_replica`` req/s needed to serve ``rate``
    (None: it sustains nothing)."""
    if per_replica <= 0:
        return None
    return max(1, math.ceil(rate / per_replica - 1e-9))
