"""Simulator runs shared by the figures: the paper's settings 1-3 as simulator configs, a
calibrated (affine, from traces) config for the local pair, and a memo so that figures that
need the same run (throughput vs k and step times) simulate it once.

**Assumed acceptance rates.**  The per-token acceptance rate of each drafter is not known from
first principles and psdlab has no measurement for the Qwen3 pairs, so the figures use these
*assumptions* (geometric acceptance, one alpha per drafter): Qwen3-0.6B 0.60, Qwen3-1.7B 0.70,
Qwen3-4B 0.78.  They are round numbers that grow with drafter size, in the range usually
reported for same-family drafters at temperature 1; every CSV and title that uses them says
"assumed alpha".  Replace them with measured rates (``psdlab calibrate``) when available.

**Costs.**  GPU passes are priced with the ``vllm-eager`` engine preset (sim/costs/engines.toml:
eager vLLM, as the paper's runs used ``--enforce-eager`` on vLLM 0.9.2), fitted on the paper's
own Nsight medians; ``cost_spec(model, tp, engine="ideal")`` gives the ideal roofline instead.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from psdlab.analysis.modes import DRAFTING_MODES
from psdlab.analysis.checks import check_int

from psdlab.paper_figs.common import label_of


@dataclass(frozen=True)
class Setting:
    number: int
    drafter: str
    alpha: float           # ASSUMED per-token acceptance rate (see the module docstring)

    @property
    def label(self) -> str:
        return f"setting {self.number}: Qwen3-32B + {pretty(self.drafter)}"


def pretty(name: str) -> str:
    """'qwen3-1.7b' -> 'Qwen3-1.7B' (catalog names as the model cards spell them)."""
    return name.replace("qwen3", "Qwen3").replace("b", "B") if name.startswith("qwen3") else name


TARGET = "qwen3-32b"
HARDWARE = "l40"
OUTPUT_TOKENS = 256
SETTINGS = (Setting(1, "qwen3-0.6b", 0.60), Setting(2, "qwen3-1.7b", 0.70),
            Setting(3, "qwen3-4b", 0.78))
KS = (1, 2, 3, 4, 5)
#: the engine preset of the paper's runs (eager vLLM) and how titles and CSVs name it
ENGINE = "vllm-eager"
COST_LABEL = "vllm-eager costs"
#: the engine step model (sim/costs/engine_steps.toml) of figures that predict whole systems
#: (throughput vs k): vLLM V0's host work around the passes; phase-time figures use none
ENGINE_STEP = "vllm-v0"


def cost_spec(model: str, tp: int, engine: str = ENGINE) -> dict[str, Any]:
    """The cost spec of one model on `tp` L40s under an engine preset ("ideal": roofline)."""
    return {"name": "gpu", "model": model, "hardware": HARDWARE, "tp": tp, "engine": engine}


def requests_for(quick: bool, m: int) -> int:
    """Offline batch size: the paper's 1000 prompts (at least 12m), 4m (at least 64) quick."""
    return max(64, 4 * m) if quick else max(1000, 12 * m)


def paper_config(setting: Setting, mode: str, k: int, m: int, requests: int,
                 seed: int = 0, engine_step: Any = "none") -> Any:
    """The paper's setup in the simulator: Qwen3-32B on 4x L40 (TP 4), drafter on a fifth L40
    (TP 1; for mode "sd" it shares a target GPU), costs of the eager-vLLM preset (ENGINE),
    ShareGPT-like prompts, 256 output tokens, all requests at t = 0; ``engine_step``: the
    server's engine step model (``sim.costs.engine_step``; "none": GPU phases only)."""
    from psdlab.sim.sim_config import config_from_dict
    from psdlab.sim.lengths import sharegpt_like_lengths

    prompt, _ = sharegpt_like_lengths()
    return config_from_dict({
        "seed": seed, "requests": requests,
        "server": {"mode": mode, "k": k, "m": m, "engine_step": engine_step},
        "target": {"name": TARGET, "cost": cost_spec(TARGET, 4)},
        "drafter": {"name": setting.drafter, "cost": cost_spec(setting.drafter, 1)},
        "acceptance": {"name": "geometric", "alpha": setting.alpha},
        "workload": {"name": "offline", "prompt": prompt,
                     "output": {"name": "fixed", "value": OUTPUT_TOKENS}},
        "trace": {"level": "step"},
    })


_MEMO: dict[str, dict[str, Any]] = {}


def run_metrics(config: Any) -> dict[str, Any]:
    """psdlab.analysis.metrics.summarize of one simulation, memoised on the config."""
    from psdlab.sim.simulation import simulate

    key = repr(config)
    if key not in _MEMO:
        _MEMO[key] = simulate(config).metrics
    return _MEMO[key]


def clear_memo() -> None:
    _MEMO.clear()


# ---------------------------------------------------------------------------- local pair

@dataclass(frozen=True)
class Calibrated:
    """Affine cost models and an acceptance model fitted to measured traces."""
    label: str
    target_cost: dict[str, Any]
    drafter_cost: dict[str, Any]
    acceptance: dict[str, Any]
    prompt_lens: tuple[int, ...]
    output_lens: tuple[int, ...]
    m: int
    requests: int          # median requests per trace: simulate runs of the measured size
    notes: tuple[str, ...] = ()


def calibrate_from(traces: Sequence[Any]) -> Calibrated:
    """Fit the simulator to SD/PSD traces (validation.calibrate); ValueError if it cannot."""
    from collections import Counter

    from psdlab.validation.phase_model import forward_coefficients
    from psdlab.validation.calibrate import calibrate

    spec = [t for t in traces if t.run.mode in DRAFTING_MODES and t.steps]
    if not spec:
        raise ValueError("traces: need SD or PSD traces with steps to calibrate the local pair")
    cal = calibrate(spec)
    if "verify" not in cal.costs or "draft" not in cal.costs:
        raise ValueError("traces: calibration found no verify or no draft phases")
    if cal.acceptance is None or not cal.acceptance.specs():
        raise ValueError("traces: calibration could not fit an acceptance model")
    specs = cal.acceptance.specs()
    acc = dict(specs.get("geometric") or specs[cal.acceptance.default])
    prompts = tuple(int(r.prompt_len) for t in spec for r in t.requests)
    outputs = tuple(int(r.output_len) for t in spec for r in t.requests)
    if not prompts:
        raise ValueError("traces: no request records (prompt and output lengths) to replay")
    m = Counter(t.run.m for t in spec).most_common(1)[0][0]
    sizes = sorted(len(t.requests) for t in spec)
    return Calibrated(label=label_of(spec[0]),
                      target_cost={"name": "affine", **forward_coefficients(cal.costs["verify"])},
                      drafter_cost={"name": "affine", **forward_coefficients(cal.costs["draft"])},
                      acceptance=acc, prompt_lens=prompts, output_lens=outputs, m=m,
                      requests=max(1, sizes[len(sizes) // 2]),
                      notes=tuple(cal.warnings))


def calibrated_config(cal: Calibrated, mode: str, k: int, requests: int, seed: int = 0) -> Any:
    from psdlab.sim.sim_config import config_from_dict

    check_int("k", k, 1, 64)
    return config_from_dict({
        "seed": seed, "requests": requests,
        "server": {"mode": mode, "k": k, "m": cal.m},
        "target": {"name": "target", "cost": cal.target_cost},
        "drafter": {"name": "drafter", "cost": cal.drafter_cost},
        "acceptance": cal.acceptance,
        "workload": {"name": "offline",
                     "prompt": {"name": "empirical", "values": list(cal.prompt_lens)},
                     "output": {"name": "empirical", "values": list(cal.output_lens)}},
        "trace": {"level": "step"},
    })
