"""System-level public points priced THROUGH THE SIMULATOR (``psdlab systems check``).

``psdlab cost --check`` compares one forward pass with published phase times.  A serving
system is judged on what it delivers: tokens/s, TPOT/ITL, SD speedups, host time per step.
Each ``[[point]]`` of sim/costs/public_systems.toml names a real run's setup (model, drafter,
GPU, TP, mode, k, batch or request rate, lengths, acceptance), the engine's GPU cost preset
(engines.toml) and engine step preset (engine_steps.toml), the quantity and the published
value, and whether it was used to set a parameter (``role = "fit"``) or not (``"held_out"``).
The checker builds a simulator config for the point, simulates it and reads the quantity:

- ``output_tokens_per_s``: output tokens / makespan; ``tpot_ms``: mean TPOT;
- ``itl_ms``: mean TPOT x mean tokens per step (vLLM streams one chunk per engine step);
- ``sd_speedup_over_ar``: output throughput of the point's SD run over the same setup in AR;
- ``cpu_overhead_ms_per_step``: mean decode step time with the point's engine step minus
  the same run with none (the host time the model adds per step).

Batch points are ``batch`` requests all at t = 0 with fixed lengths (a constant batch);
request-rate points are Poisson arrivals.  ``acceptance`` is the mean number of accepted DRAFT
tokens EMITTED per SD step (bonus included; vLLM's mean acceptance length), turned into the
geometric alpha whose mean accepted drafts at k is acceptance - 1.  Where the source publishes
none, alpha is fitted on the series' fit point at the smallest batch (same model, drafter, k
and lengths; a fit point's own acceptance is then fitted, not predicted) or, for a series of
held-out points only, ASSUMED (``ASSUMED_ALPHA``); the table says which.
``sd_speedup_over_ar`` with ``basis = "latency"`` is mean end-to-end latency without SD over
with SD at the same request rate; otherwise output throughput with over without.
``check`` returns a ``SystemCheckResult`` (sim.system_check_results); its ``to_dict()`` is the
JSON document ``-o`` writes.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

from psdlab.analysis.atomic_write import write_json_and_markdown
from psdlab.analysis.checks import (check_choice, check_fields, check_int, check_nonnegative,
                                    check_positive)
from psdlab.sim.system_check_results import (SystemCheckResult, SystemCheckSummary,
                                             SystemPointResult, stamp)

POINTS_TOML = os.path.join(os.path.dirname(os.path.abspath(__file__)), "costs",
                           "public_systems.toml")
COMMAND = "psdlab systems check -o results/engine/system_check.json"
QUANTITIES = ("cpu_overhead_ms_per_step", "tpot_ms", "itl_ms", "output_tokens_per_s",
              "sd_speedup_over_ar")
#: "judge": a figure an issue names as the judge of the model (Spec-Bench's speedup tables):
#: never fitted on, kept in its own file (sim/costs/judge_points.toml), reported apart
ROLES = ("fit", "held_out", "judge")
FIT_TOLERANCE = 0.10
_REQUIRED = ("id", "source", "engine_step", "gpu_preset", "model", "hardware", "tp", "mode",
             "input_len", "output_len", "quantity", "published", "role")
_OPTIONAL = ("figure", "engine_used", "drafter", "k", "batch", "request_rate", "acceptance",
             "derived", "note", "dtype", "drafter_tp", "drafter_dtype", "requests",
             "components_ms", "basis", "api_server")
BASES = ("throughput", "latency")
#: how a served point's requests reached the engine: through an API server in its own process
#: (vLLM 0.5.4 and later, vllm-project/vllm PR #6883) or in the engine's process (up to
#: 0.5.3); absent: offline (no API server)
API_SERVERS = {"own-process": 1.0, "engine-process": 0.0}
#: geometric alpha of an SD point whose source publishes no acceptance and whose series has no
#: fit point to set it on: an ASSUMED round value, flagged in the table
ASSUMED_ALPHA = 0.7


@dataclass(frozen=True)
class Point:
    id: str
    raw: Mapping[str, Any]
    mode: str
    k: int
    quantity: str
    published: float
    role: str


def _point(raw: Mapping[str, Any], where: str) -> Point:
    check_fields(raw, where, _REQUIRED, _OPTIONAL, named=False)
    mode = check_choice(f"{where}.mode", raw["mode"], ("ar", "sd"))
    k = check_int(f"{where}.k", raw.get("k", 0), 0 if mode == "ar" else 1, 64)
    if mode == "sd" and not raw.get("drafter"):
        raise ValueError(f"{where}.drafter: required for mode 'sd'")
    if ("batch" in raw) == ("request_rate" in raw):
        raise ValueError(f"{where}: give exactly one of batch and request_rate")
    if "batch" in raw:
        check_int(f"{where}.batch", raw["batch"], 1, 4096)
    else:
        check_positive(f"{where}.request_rate", raw["request_rate"])
    check_nonnegative(f"{where}.acceptance", raw.get("acceptance", 0.0))
    check_choice(f"{where}.basis", raw.get("basis", "throughput"), BASES)
    if "api_server" in raw:
        check_choice(f"{where}.api_server", raw["api_server"], tuple(API_SERVERS))
    return Point(id=str(raw["id"]), raw=raw, mode=mode, k=k,
                 quantity=check_choice(f"{where}.quantity", raw["quantity"], QUANTITIES),
                 published=check_positive(f"{where}.published", raw["published"]),
                 role=check_choice(f"{where}.role", raw["role"], ROLES))


def load_points(path: str | None = None) -> list[Point]:
    """The points of a public_systems.toml (default: the package's)."""
    from psdlab.sim.sim_config import read_toml

    path = path or POINTS_TOML
    if not os.path.exists(path):
        raise ValueError(f"{path}: no such points file (sim/costs/public_systems.toml)")
    raw = read_toml(path).get("point")
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{path}: expected [[point]] tables")
    return [_point(p, f"point[{i}]") for i, p in enumerate(raw)]


def alpha_for_accepted(accepted: float, k: int) -> float:
    """The alpha whose geometric acceptance gives ``accepted`` accepted drafts per step at k:
    sum_{i=1..k} alpha^i = accepted (bisection; clipped to [0.01, 0.995])."""
    target = min(float(accepted), 0.995 * k)
    lo, hi = 0.0, 0.995
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if sum(mid ** i for i in range(1, k + 1)) < target:
            lo = mid
        else:
            hi = mid
    return max(0.01, 0.5 * (lo + hi))


def point_sim_config(p: Point, mode: str, engine_step: Any, seed: int = 0,
               alpha: float | None = None) -> Any:
    """The point's setup as a simulator config (``mode`` ar or sd; ``engine_step`` a spec)."""
    from psdlab.sim.sim_config import config_from_dict

    r = p.raw
    batch = r.get("batch")
    requests = int(r.get("requests", batch if batch else 200))

    def cost(model: str, tp: int, dtype: str) -> dict[str, str | int]:
        return {"name": "gpu", "model": model, "hardware": r["hardware"], "tp": tp,
                "dtype": dtype, "engine": r["gpu_preset"]}
    lengths = {"prompt": {"name": "fixed", "value": int(r["input_len"])},
               "output": {"name": "fixed", "value": int(r["output_len"])}}
    workload = ({"name": "offline", **lengths} if batch else
                {"name": "poisson", "rate": float(r["request_rate"]), **lengths})
    doc: dict[str, Any] = {
        "seed": seed, "requests": requests,
        "server": {"mode": mode, "k": p.k if mode != "ar" else 0, "m": int(batch or 256),
                   "engine_step": engine_step},
        "target": {"name": r["model"], "cost": cost(r["model"], int(r["tp"]),
                                                    str(r.get("dtype", "bf16")))},
        "workload": workload, "trace": {"level": "step"}}
    if mode != "ar":
        doc["drafter"] = {"name": r["drafter"], "cost": cost(
            str(r["drafter"]), int(r.get("drafter_tp", 1)), str(r.get("drafter_dtype", "bf16")))}
        if alpha is None:
            alpha = alpha_for_accepted(max(0.0, float(r["acceptance"]) - 1.0), p.k)
        doc["acceptance"] = {"name": "geometric", "alpha": alpha}
    return config_from_dict(doc)


def _metrics(p: Point, mode: str, step: Any, seed: int, alpha: float | None) -> dict[str, Any]:
    from psdlab.sim.simulation import simulate
    return simulate(point_sim_config(p, mode, step, seed, alpha)).metrics


def _step_s(met: Mapping[str, Any]) -> float:
    return float(met["decode_time_s"]) / max(1, int(met["decode_steps"]))


def _no_host(step: Any) -> dict[str, Any]:
    """The engine step with its host terms off (same jitter): the baseline of a host time."""
    from psdlab.sim.costs.engine_step import API_TERMS, DRAFT_TERMS, HOST_TERMS, TRANSFER_TERMS
    zero = {k: 0.0 for k in HOST_TERMS + DRAFT_TERMS + TRANSFER_TERMS + API_TERMS}
    return {**(dict(step) if isinstance(step, Mapping) else {"base": step}), **zero}


def _speedup(p: Point, step: Any, seed: int, alpha: float | None) -> float:
    sd, ar = _metrics(p, "sd", step, seed, alpha), _metrics(p, "ar", step, seed, alpha)
    if p.raw.get("basis", "throughput") == "latency":
        return float(ar["e2e"]["mean"]) / float(sd["e2e"]["mean"])
    return float(sd["throughput_tok_s"]) / float(ar["throughput_tok_s"])


def engine_step_of(p: Point) -> Any:
    """The point's engine step spec: its preset, served through its API server if it was."""
    step = p.raw["engine_step"]
    if "api_server" not in p.raw:
        return step
    return {"base": step, "served": True, "api_overlap": API_SERVERS[p.raw["api_server"]]}


def predict_point(p: Point, seed: int = 0, alpha: float | None = None) -> float:
    """The point's quantity as the simulator predicts it (``alpha``: the SD acceptance when
    the point has none).  A served point's output rate is capped by what its API server's own
    process can stream (``api_bound_tok_s``)."""
    from psdlab.sim.costs.engine_step import api_bound_tok_s, get_engine_step
    step = engine_step_of(p)
    q = p.quantity
    if q == "sd_speedup_over_ar":
        if p.mode != "sd":
            raise ValueError(f"point {p.id}: sd_speedup_over_ar needs mode 'sd'")
        return _speedup(p, step, seed, alpha)
    met = _metrics(p, p.mode, step, seed, alpha)
    if q == "output_tokens_per_s":
        bound = api_bound_tok_s(get_engine_step(step), float(p.raw["output_len"]))
        return min(float(met["throughput_tok_s"]), bound)
    if q == "tpot_ms":
        return 1e3 * float(met["tpot"]["mean"])
    if q == "itl_ms":
        return 1e3 * float(met["tpot"]["mean"]) * float(met.get("mean_acceptance_length") or 1.0)
    base = _metrics(p, p.mode, _no_host(step), seed, alpha)
    return 1e3 * (_step_s(met) - _step_s(base))


def _series(p: Point) -> tuple:
    r = p.raw
    return (r["model"], r.get("drafter"), p.k, r["input_len"], r["output_len"], r["hardware"],
            r["engine_step"], r["gpu_preset"])


def fit_alpha(p: Point, seed: int = 0) -> float:
    """The alpha at which the simulator reproduces a fit point's published SD speedup
    (bisection; the speedup grows with alpha)."""
    lo, hi = 0.05, 0.98
    for _ in range(14):
        mid = 0.5 * (lo + hi)
        if _speedup(p, engine_step_of(p), seed, mid) < p.published:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def acceptance_plan(points: list[Point], seed: int = 0) -> dict[str, tuple[float | None, str]]:
    """Per SD point without a published acceptance: (alpha, how it was set)."""
    out: dict[str, tuple[float | None, str]] = {}
    fitted: dict[tuple, tuple[float, str]] = {}
    for p in points:
        if p.mode != "sd" or "acceptance" in p.raw:
            continue
        key = _series(p)
        if key not in fitted:
            fits = [q for q in points if _series(q) == key and q.role == "fit"
                    and q.quantity == "sd_speedup_over_ar" and "acceptance" not in q.raw]
            if fits:
                anchor = min(fits, key=lambda q: int(q.raw.get("batch") or 0))
                fitted[key] = (fit_alpha(anchor, seed), f"alpha fitted on {anchor.id}")
            else:
                fitted[key] = (ASSUMED_ALPHA, "alpha ASSUMED (no acceptance published)")
        out[p.id] = fitted[key]
    return out


def check(points: list[Point], seed: int = 0, command: str = COMMAND) -> SystemCheckResult:
    """Every point predicted vs published; fitted ones must be within FIT_TOLERANCE."""
    plan = acceptance_plan(points, seed)
    rows = []
    for p in points:
        alpha, how = plan.get(p.id, (None, "published" if p.mode == "sd" else ""))
        rows.append(_point_result(p, seed, alpha, how))
    return SystemCheckResult(command=command, seed=seed, points=tuple(rows),
                             summary=SystemCheckSummary.of(tuple(rows)), stamp=stamp())


def _point_result(p: Point, seed: int, alpha: float | None, how: str) -> SystemPointResult:
    pred = predict_point(p, seed, alpha)
    err = pred / p.published - 1.0
    return SystemPointResult(
        id=p.id, role=p.role, quantity=p.quantity,
        engine_step=p.raw["engine_step"]
        + (f" served ({p.raw['api_server']})" if "api_server" in p.raw else ""),
        gpu_preset=p.raw["gpu_preset"], published=p.published, predicted=pred, error=err,
        within_10pct=abs(err) <= FIT_TOLERANCE, acceptance=how, alpha=alpha,
        source=p.raw["source"], figure=p.raw.get("figure", ""), setup=_setup(p))


def _setup(p: Point) -> str:
    r = p.raw
    load = f"batch {r['batch']}" if "batch" in r else f"{r['request_rate']} req/s"
    spec = f", {r['drafter']} k={p.k} acc={r.get('acceptance', '?')}" if p.mode == "sd" else ""
    return (f"{r['model']} TP{r['tp']} {r['hardware']} {p.mode}{spec}, {load}, "
            f"{r['input_len']}/{r['output_len']}")


def system_check_markdown(res: SystemCheckResult) -> str:
    s, st, j = res.summary, res.stamp, res.summary.judged
    lines = ["# System-level public points through the simulator", "",
             f"Written by `{res.command}` on {st.date_utc}, {st.machine}, commit "
             f"{st.commit}; seed {res.seed}.  Fitted: {s.fitted_within_10pct} of "
             f"{s.fitted} within 10%; held out: {s.held_out}"
             + (f", median |error| {s.held_out_median_abs_error:.1%}, mean "
                f"{s.held_out_mean_abs_error:.1%}, {s.held_out_within_15pct} within 15%"
                if s.held_out_mean_abs_error is not None
                and s.held_out_median_abs_error is not None else "")
             + (f"; judged: {j.judge}, median |error| {j.judge_median_abs_error:.1%}, "
                f"{j.judge_within_15pct} within 15%" if j else "") + ".", "",
             "| id | role | quantity | engine step | published | predicted | error | setup "
             "| acceptance |", "|---|---|---|---|---|---|---|---|---|"]
    for r in res.points:
        lines.append(f"| {r.id} | {r.role} | {r.quantity} | {r.engine_step} | "
                     f"{r.published:.4g} | {r.predicted:.4g} | {r.error:+.1%} | "
                     f"{r.setup} | {r.acceptance} |")
    return "\n".join(lines) + "\n"


def write_system_check(res: SystemCheckResult, path: str) -> tuple[str, str]:
    """JSON at ``path`` and the markdown beside it (.md), nothing half-written."""
    return write_json_and_markdown(res.to_dict(), path, system_check_markdown(res))
