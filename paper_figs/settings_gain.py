"""The paper's Settings 1-3 and 5 through the simulator WITH the engine step model: predicted
best-k PSD/SD gains beside the paper's claims, and what separates the per-step ratio from the
system ratio (``psdlab systems gain``; results/engine/settings_gain.json and .md).

Setups (PAPER_FACTS.md section 3): Settings 1-3: Qwen3-32B (bf16, TP 4 on four L40) with a
Qwen3-0.6B / 1.7B / 4B drafter on a fifth L40, m = 16; Setting 5: Llama-3.3-70B-Instruct AWQ
int4 (w4a16, TP 4 on four H100 SXM) with a Llama-3.1-8B drafter on a fifth H100, m = 64.  In
the SD baseline the drafter shares GPU 0 with a target shard (mode "sd").  GPU passes: the
``vllm-eager`` preset (vLLM 0.9.2 V0 with --enforce-eager, the paper's engine); the engine
step: ``vllm-v0`` (sim/costs/engine_steps.toml).  ShareGPT-like prompts, 256 output tokens, all
requests at t = 0.  Acceptance: geometric with ASSUMED alphas (paper_figs.simruns for 1-3;
0.75 for Setting 5), never fitted to the paper's results.

Comparison (the paper's): iso-batch, PSD verifying m per step (2m held, 5 GPUs) against SD at
the same m (4 GPUs), same k.  Gain = PSD / SD decode throughput - 1 (tokens / decode time);
latency reduction = 1 - PSD / SD of the paper's latency (makespan / requests) and of the mean
end-to-end latency; "best k" maximises the gain over k = 1..5.

Decomposition at each setting's best k: the per-step ratio (t + V) / max(t, V) of the GPU
phases alone; the simulated ratio without an engine step (adds start-up, prefill, the tail);
the full model; and the full model with each engine-step term turned off in turn.

``run_settings_gain`` returns a ``SettingsGainResult`` (frozen dataclasses, one per setting, k
row and decomposition row); its ``to_dict()`` is the JSON document ``-o`` writes.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from psdlab.analysis.atomic_write import write_json_and_markdown
from psdlab.paper_figs import simruns
from psdlab.sim.costs.engine_step import DRAFT_TERMS, HOST_TERMS, TRANSFER_TERMS
from psdlab.sim.system_check_results import RunStamp, stamp

COMMAND = "psdlab systems gain -o results/engine/settings_gain.json"
ENGINE = simruns.ENGINE            # GPU cost preset of the paper's engine (vllm-eager)
ENGINE_STEP = simruns.ENGINE_STEP   # vllm-v0


@dataclass(frozen=True)
class PaperClaims:
    """The paper's headline gains of PSD over SD, and where it states them."""
    throughput_gain: float
    latency_reduction: float
    source: str


PAPER_CLAIMS = PaperClaims(throughput_gain=0.75, latency_reduction=0.39,
                           source="arXiv 2603.18016 abstract: 'up to 75%' throughput, 'up to "
                                  "39%' end-to-end latency vs standard SD")
#: each engine-step term and the fields that turn it off
TERMS: dict[str, dict[str, float | bool]] = {
    "host (scheduler, output processing)": dict.fromkeys(HOST_TERMS, 0.0),
    "SD-only step work (scorer, rejection sampler, outputs)": dict.fromkeys(DRAFT_TERMS, 0.0),
    "cross-device transfer": dict.fromkeys(TRANSFER_TERMS, 0.0),
    "single driver (PSD halves' host work serialised)": {"single_driver": False},
    "step-time variability": {"cv_verify": 0.0, "cv_draft": 0.0, "cv_prefill": 0.0},
}


#: a what-if, not a fit: V0's host terms at the scale of the HELD-OUT earlier Vidur profile
#: (0633efa: 11.24 ms vs 2.177 ms per step at Llama-2-70B TP 4, batch 64; public_systems.toml
#: vidur0633-*), to show how much the prediction depends on that scale
HOST_SCALE = 11.238 / 2.177


def _scaled_host(scale: float) -> dict[str, str | float]:
    from psdlab.sim.costs.engine_step import engine_step_presets
    v0 = engine_step_presets()[ENGINE_STEP]
    return {"base": ENGINE_STEP, **{k: scale * getattr(v0, k) for k in (
        "host_fixed_s", "host_per_tp_rank_s", "host_per_seq_s", "host_per_token_s")}}


@dataclass(frozen=True)
class Setup:
    number: int
    target: str
    dtype: str
    drafter: str
    hardware: str
    m: int
    alpha: float          # ASSUMED geometric acceptance rate

    @property
    def label(self) -> str:
        return f"setting {self.number}: {self.target} ({self.dtype}) + {self.drafter}"


SETUPS = tuple(Setup(s.number, simruns.TARGET, "bf16", s.drafter, simruns.HARDWARE, 16, s.alpha)
               for s in simruns.SETTINGS) + (
    Setup(5, "llama-3.3-70b", "w4a16", "llama-3.1-8b", "h100-sxm", 64, 0.75),)


def config(st: Setup, mode: str, k: int, requests: int, seed: int, engine_step: Any) -> Any:
    """The setup as a simulator config (one engine step spec)."""
    from psdlab.sim.lengths import sharegpt_like_lengths
    from psdlab.sim.sim_config import config_from_dict

    prompt, _ = sharegpt_like_lengths()

    def cost(model: str, tp: int, dtype: str) -> dict[str, str | int]:
        return {"name": "gpu", "model": model, "hardware": st.hardware, "tp": tp,
                "dtype": dtype, "engine": ENGINE}
    return config_from_dict({
        "seed": seed, "requests": requests,
        "server": {"mode": mode, "k": k, "m": st.m, "engine_step": engine_step},
        "target": {"name": st.target, "cost": cost(st.target, 4, st.dtype)},
        "drafter": {"name": st.drafter, "cost": cost(st.drafter, 1, "bf16")},
        "acceptance": {"name": "geometric", "alpha": st.alpha},
        "workload": {"name": "offline", "prompt": prompt,
                     "output": {"name": "fixed", "value": simruns.OUTPUT_TOKENS}},
        "trace": {"level": "step"},
    })


@dataclass(frozen=True)
class GainModeRun:
    """One mode's simulated run (SD or PSD) at one k."""
    decode_throughput_tok_s: float
    latency_per_request_s: float
    mean_e2e_s: float
    mean_draft_time_s: float
    mean_verify_time_s: float


@dataclass(frozen=True)
class GainKRow:
    """SD and PSD at one k, and PSD's ratios over SD."""
    k: int
    sd: GainModeRun
    psd: GainModeRun
    throughput_ratio: float
    throughput_gain: float
    latency_reduction: float
    e2e_reduction: float


@dataclass(frozen=True)
class GainPart:
    """One model of the PSD/SD throughput ratio in a setting's decomposition; a term's row
    has the effect of turning that term off (``effect_on_gain``)."""
    model: str
    ratio: float
    effect_on_gain: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, str | float] = {"model": self.model, "ratio": self.ratio}
        if self.effect_on_gain is not None:
            out["effect_on_gain"] = self.effect_on_gain
        return out


@dataclass(frozen=True)
class GainSensitivity:
    """A what-if at best k (not fitted)."""
    model: str
    k: int
    throughput_gain: float
    latency_reduction: float


@dataclass(frozen=True)
class GpuPhaseMs:
    """SD's mean GPU phase times (ms) at best k without an engine step."""
    draft: float
    verify: float


@dataclass(frozen=True)
class GainInput:
    """One input a setting's predicted PSD gain rests on and how far it is trusted:
    ``basis`` is ``measured`` (this machine's or a public measurement of this setup),
    ``probed`` (a co-run probe), ``preset`` (a cost or engine preset fitted on other public
    points, or borrowed from another part), ``assumed`` (a stated value, fitted on nothing)
    or ``model`` (the simulator's own mechanics)."""
    term: str
    basis: str
    value: str


def gain_inputs(st: Setup) -> tuple[GainInput, ...]:
    """What a setting's PSD/SD gain rests on (``GainInput``), from the presets it uses."""
    from psdlab.analysis.contention import DEFAULTS
    from psdlab.sim.costs.gpu import engine_presets
    from psdlab.sim.costs.public_check import borrowed_efficiencies
    engine = engine_presets()[ENGINE]
    borrowed = borrowed_efficiencies(engine, st.hardware)
    gpus = DEFAULTS["gpus"]
    return (
        GainInput("GPU passes (t, V)", "preset",
                  f"{ENGINE} on {st.hardware}" + (f" ({borrowed})" if borrowed else
                                                  " (fitted on this part's public points)")),
        GainInput("acceptance", "assumed", f"geometric alpha {st.alpha} (none published)"),
        GainInput("engine step (host, SD-only work, single driver)", "preset",
                  f"{ENGINE_STEP}: vLLM 0.9.2's V0 step measured on CPU, scaled to a GPU "
                  f"server's host by Vidur's A100 profile"),
        GainInput("contention of overlapped passes", "assumed",
                  f"c = {gpus.target:g} / {gpus.drafter:g} (analysis.contention default "
                  f"'gpus': {gpus.why})"),
        GainInput("drafts' transfer", "preset", f"the link of {st.hardware} in "
                                                "sim/costs/hardware.toml"),
        GainInput("two batches, batch manager, tail, E[max(t, V)]", "model",
                  "simulated (2m held, the paper's batch manager, step-time spread of the "
                  "engine-step preset)"),
    )


@dataclass(frozen=True)
class SettingGain:
    """One setting: its setup, the k sweep, the best gains and the decomposition at best k."""
    setting: int
    label: str
    target: str
    dtype: str
    drafter: str
    hardware: str
    m: int
    requests: int
    alpha_assumed: float
    rows: tuple[GainKRow, ...]
    best_k: int
    best_throughput_gain: float
    best_latency_reduction: float
    best_e2e_reduction: float
    gpu_phase_ms: GpuPhaseMs
    decomposition: tuple[GainPart, ...]
    sensitivity: tuple[GainSensitivity, ...]
    inputs: tuple[GainInput, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {**out, "rows": [dataclasses.asdict(r) for r in self.rows],
                "gpu_phase_ms": dataclasses.asdict(self.gpu_phase_ms),
                "decomposition": [p.to_dict() for p in self.decomposition],
                "sensitivity": [dataclasses.asdict(x) for x in self.sensitivity],
                "inputs": [dataclasses.asdict(x) for x in self.inputs]}


@dataclass(frozen=True)
class SettingsGainResult:
    """``psdlab systems gain``: every setting, with the paper's claims and the run's stamp."""
    command: str
    engine: str
    engine_step: str
    quick: bool
    seed: int
    paper_claims: PaperClaims
    settings: tuple[SettingGain, ...]
    stamp: RunStamp

    def to_dict(self) -> dict[str, Any]:
        return {"command": self.command, "engine": self.engine, "engine_step": self.engine_step,
                "quick": self.quick, "seed": self.seed,
                "paper_claims": dataclasses.asdict(self.paper_claims),
                "settings": [s.to_dict() for s in self.settings], **self.stamp.to_dict()}


def _pair(st: Setup, k: int, requests: int, seed: int, step: Any) -> GainKRow:
    """SD and PSD at k: throughputs, latencies, phase means and the ratios."""
    from psdlab.sim.simulation import simulate

    runs = {}
    for mode in ("sd", "psd"):
        met = simulate(config(st, mode, k, requests, seed, step)).metrics
        runs[mode] = GainModeRun(decode_throughput_tok_s=met["decode_throughput_tok_s"],
                                 latency_per_request_s=met["latency_per_request_s"],
                                 mean_e2e_s=met["e2e"]["mean"],
                                 mean_draft_time_s=met["mean_draft_time_s"],
                                 mean_verify_time_s=met["mean_verify_time_s"])
    sd, psd = runs["sd"], runs["psd"]
    ratio = psd.decode_throughput_tok_s / sd.decode_throughput_tok_s
    return GainKRow(k=k, sd=sd, psd=psd, throughput_ratio=ratio, throughput_gain=ratio - 1.0,
                    latency_reduction=1.0 - psd.latency_per_request_s / sd.latency_per_request_s,
                    e2e_reduction=1.0 - psd.mean_e2e_s / sd.mean_e2e_s)


def _without(term: str) -> dict[str, str | float | bool]:
    return {"base": ENGINE_STEP, **TERMS[term]}


def _decomposition(st: Setup, best: GainKRow, none: GainKRow, requests: int, seed: int,
                   tick: Callable[[int], None]) -> tuple[GainPart, ...]:
    """The PSD/SD ratio at best k: per step, without an engine step (``none``), full, and full
    without each engine-step term."""
    t, v = none.sd.mean_draft_time_s, none.sd.mean_verify_time_s
    parts = [GainPart("per-step ratio (t + V) / max(t, V), GPU phases only", (t + v) / max(t, v)),
             GainPart("simulated, engine step none (start-up, prefill, tail)",
                      none.throughput_ratio),
             GainPart(f"simulated, engine step {ENGINE_STEP} (full)", best.throughput_ratio)]
    for term in TERMS:
        r = _pair(st, best.k, requests, seed, _without(term))
        parts.append(GainPart(f"full without {term}", r.throughput_ratio,
                              best.throughput_ratio - r.throughput_ratio))
        tick(1)
    return tuple(parts)


def run_settings_gain(quick: bool = False, seed: int = 0,
                      tick: Callable[[int], None] | None = None,
                      setups: tuple[Setup, ...] = SETUPS,
                      ks: tuple[int, ...] = simruns.KS) -> SettingsGainResult:
    """Every setting: the k sweep with the engine step, then the decomposition at best k."""
    tick = tick or (lambda _n: None)
    settings = []
    for st in setups:
        n = simruns.requests_for(quick, st.m)
        rows = []
        for k in ks:
            rows.append(_pair(st, k, n, seed, ENGINE_STEP))
            tick(1)
        best = max(rows, key=lambda r: r.throughput_gain)
        k = best.k
        none = _pair(st, k, n, seed, "none")
        parts = _decomposition(st, best, none, n, seed, tick)
        scaled = _pair(st, k, n, seed, _scaled_host(HOST_SCALE))
        settings.append(SettingGain(
            setting=st.number, label=st.label, target=st.target, dtype=st.dtype,
            drafter=st.drafter, hardware=st.hardware, m=st.m, requests=n,
            alpha_assumed=st.alpha, rows=tuple(rows), best_k=k,
            best_throughput_gain=best.throughput_gain,
            best_latency_reduction=max(r.latency_reduction for r in rows),
            best_e2e_reduction=max(r.e2e_reduction for r in rows),
            gpu_phase_ms=GpuPhaseMs(draft=1e3 * none.sd.mean_draft_time_s,
                                    verify=1e3 * none.sd.mean_verify_time_s),
            decomposition=parts,
            sensitivity=(GainSensitivity(
                model=f"host terms x{HOST_SCALE:.2f} (the held-out Vidur 0633efa scale; a "
                      "what-if, not a fit)",
                k=k, throughput_gain=scaled.throughput_gain,
                latency_reduction=scaled.latency_reduction),),
            inputs=gain_inputs(st)))
    return SettingsGainResult(command=COMMAND, engine=ENGINE, engine_step=ENGINE_STEP,
                              quick=quick, seed=seed, paper_claims=PAPER_CLAIMS,
                              settings=tuple(settings), stamp=stamp())


def settings_gain_markdown(res: SettingsGainResult) -> str:
    c, st = res.paper_claims, res.stamp
    lines = [f"# Settings 1-3 and 5: PSD vs SD with the engine step model ({res.engine_step})",
             "", f"Written by `{res.command}`{' --quick' if res.quick else ''} on "
             f"{st.date_utc}, {st.machine}, commit {st.commit}; seed {res.seed}. "
             f"GPU passes: `{res.engine}` preset; acceptance: ASSUMED alphas.", "",
             f"Paper: up to {c.throughput_gain:.0%} throughput, up to "
             f"{c.latency_reduction:.0%} latency ({c.source}).", "",
             "| setting | m | best k | PSD/SD throughput gain | latency reduction "
             "(makespan/req) | mean e2e reduction | per-step ratio | system ratio |",
             "|---|---|---|---|---|---|---|---|"]
    for s in res.settings:
        d = s.decomposition
        lines.append(f"| {s.label} | {s.m} | {s.best_k} | "
                     f"{s.best_throughput_gain:+.1%} | {s.best_latency_reduction:.1%} | "
                     f"{s.best_e2e_reduction:.1%} | {d[0].ratio:.3f} | {d[2].ratio:.3f} |")
    lines += ["", "What each gain rests on (measured, probed, preset, assumed, or the "
              "simulator's model); nothing here was measured on the paper's machines:", ""]
    for s in res.settings:
        lines += [f"**{s.label}**", "", "| input | basis | value |", "|---|---|---|",
                  *(f"| {x.term} | {x.basis} | {x.value} |" for x in s.inputs), ""]
    lines += ["Decomposition at each setting's best k (PSD/SD throughput ratio):", ""]
    for s in res.settings:
        lines += [f"**{s.label}**, k = {s.best_k} (GPU phases: draft "
                  f"{s.gpu_phase_ms.draft:.1f} ms, verify {s.gpu_phase_ms.verify:.1f}"
                  " ms)", "", "| model | ratio | full minus this |", "|---|---|---|"]
        for p in s.decomposition:
            eff = p.effect_on_gain
            lines.append(f"| {p.model} | {p.ratio:.3f} | "
                         f"{'' if eff is None else f'{eff:+.3f}'} |")
        lines.append("")
    lines += ["Sensitivity at best k (not fitted; the held-out host scale):", ""]
    for s in res.settings:
        for x in s.sensitivity:
            lines.append(f"- setting {s.setting}, {x.model}: gain "
                         f"{x.throughput_gain:+.1%}, latency reduction "
                         f"{x.latency_reduction:.1%}")
    lines += ["", "Per k (gain, latency reduction):", ""]
    for s in res.settings:
        cells = ", ".join(f"k={r.k}: {r.throughput_gain:+.1%} / "
                          f"{r.latency_reduction:.1%}" for r in s.rows)
        lines.append(f"- setting {s.setting}: {cells}")
    return "\n".join(lines) + "\n"


def write_settings_gain(res: SettingsGainResult, path: str) -> tuple[str, str]:
    """JSON at ``path`` and the markdown beside it (.md), each via a temp file and rename."""
    return write_json_and_markdown(res.to_dict(), path, settings_gain_markdown(res))
