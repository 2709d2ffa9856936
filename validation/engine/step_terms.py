"""Engine-step terms derived from the host-time measurements made here (issue 45).

Two presets of ``sim/costs/engine_steps.toml`` take numbers from measurements on this
project's CPU, and this module is the one place that says how:

- ``vllm-v0`` SD-only terms, from vLLM 0.9.2's V0 engine (``results/engine/
  vllm_v0_step_host.json``): the work of a speculative step outside both phases' passes --
  the scorer's own host work (batch expansion and contraction, the target's sampler over the
  expanded batch), the rejection sampler and the output list -- fitted per step as
  ``fixed + per_seq x batch + per_draft_token x batch k`` (the scorer and the sampler work on
  every draft token; R^2 0.99 against 0.87 for a line in batch and k).  The proposer's
  per-pass work stays inside the drafter's passes, which ``vllm-eager`` prices whole
  (fitted on MineDraft's drafting medians).
- ``hf-assisted``, from Hugging Face assisted generation (``results/engine/
  hf_assisted_step_host.json``, batch 1): what a step's host time adds beyond one AR step's
  host work per pass (which the torch GPU presets' ``step_host_s`` already charges per pass):
  ``host(k) - (k + 1) x host(AR) = fixed + per_pass x k``.

- the API server's terms (``api_per_request_s``, ``api_per_token_s``) of the vLLM presets, from
  ``vllm serve`` measured here (``results/engine/vllm_served_share.json``): the API process's
  CPU time while ``vllm bench serve`` streams N prompts x L tokens, a plane in requests and
  tokens.

Every fit reads CPU time (thread or process; what other jobs on a shared core do not stretch).
Both are scaled from this CPU to a GPU server's host by one factor, the ratio of Vidur's
published A100-host per-sequence scheduling + output-processing time ([V] in engine_steps.toml,
0.0301 ms) to the same slope measured here on vLLM 0.9.2 V0 (schedule + process_outputs per
AR sequence): the same public source that scales the ``vllm-v0`` preset's host terms.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from .host_steps import fit_line

#: [V] Vidur A100 host (Sarathi-Serve, vLLM scheduler): schedule + output processing per
#: sequence per decode step, ms (the slope engine_steps.toml's vllm-v0 preset is built on)
VIDUR_A100_PER_SEQ_MS = 0.0301
#: which statistic of a cell the fits use (the median of the repeats' medians)
STAT = "repeat_median"


def host_scale(v0: Mapping[str, Any], stat: str = STAT) -> dict[str, float]:
    """GPU-host / this-CPU factor: Vidur's per-sequence slope over the V0 AR slope of
    schedule + process_outputs measured here."""
    ar = [c for c in v0["cells"] if c["mode"] == "ar"]
    fit = fit_line(ar, "sched_out_cpu", ("one", "batch"), stat)
    here = fit["coef_ms"]["batch"]
    if here <= 1e-6:
        raise ValueError(f"vLLM V0 AR schedule + process_outputs slope {here:.4f} ms per "
                         f"sequence: must be > 0 to scale")
    return {"here_per_seq_ms": here, "vidur_per_seq_ms": VIDUR_A100_PER_SEQ_MS,
            "factor": VIDUR_A100_PER_SEQ_MS / here, "r2": fit["r2"]}


def v0_sd_terms(v0: Mapping[str, Any], stat: str = STAT) -> dict[str, Any]:
    """vllm-v0's SD-only terms (seconds, GPU host) and the fit they come from."""
    sd = [dict(c, draft_tokens=c["batch"] * c["k"]) for c in v0["cells"] if c["mode"] == "sd"]
    if len({c["k"] for c in sd}) < 2:
        raise ValueError("vLLM V0 measurement: SD cells at two or more k are needed")
    fit = fit_line(sd, "sd_only_cpu", ("one", "batch", "draft_tokens"), stat)
    scale = host_scale(v0, stat)
    c = fit["coef_ms"]
    f = scale["factor"] * 1e-3
    return {"draft_fixed_s": max(0.0, c["one"]) * f, "draft_per_seq_s": max(0.0, c["batch"]) * f,
            "draft_per_token_s": max(0.0, c["draft_tokens"]) * f, "draft_per_pass_s": 0.0,
            "fit_here_ms": c, "r2": fit["r2"], "scale": scale}


def _hf_extra(cells: Sequence[Mapping[str, Any]], layers: int, stat: str) -> list[dict]:
    """Per assisted cell of one target depth: host(k) - (k + 1) host(AR), ms."""
    ar = [c for c in cells if c["layers"] == layers and c["k"] == 0]
    if len(ar) != 1:
        raise ValueError(f"HF measurement: one AR cell per layer count, got {len(ar)} at "
                         f"{layers} layers")
    h_ar = ar[0]["host_cpu"][stat]
    return [{"k": c["k"], "extra": {stat: c["host_cpu"][stat] - (c["k"] + 1) * h_ar}}
            for c in cells if c["layers"] == layers and c["k"]]


def hf_assisted_terms(hf: Mapping[str, Any], v0: Mapping[str, Any],
                      stat: str = STAT) -> dict[str, Any]:
    """hf-assisted's SD terms (seconds, GPU host): the shallowest target measured (its passes'
    own host work is smallest, so the least of it leaks into the difference)."""
    layers = min(c["layers"] for c in hf["cells"])
    rows = _hf_extra(hf["cells"], layers, stat)
    fit = fit_line(rows, "extra", ("one", "k"), stat)
    scale = host_scale(v0, stat)
    c = fit["coef_ms"]
    f = scale["factor"] * 1e-3
    return {"draft_fixed_s": max(0.0, c["one"]) * f, "draft_per_pass_s": max(0.0, c["k"]) * f,
            "layers": layers, "fit_here_ms": c, "r2": fit["r2"], "scale": scale}


def api_terms(served: Mapping[str, Any], v0: Mapping[str, Any]) -> dict[str, Any]:
    """The API server's CPU per request and per output token (``vllm serve`` measured here,
    ``results/engine/vllm_served_share.json``: its API process while ``vllm bench serve``
    streams N prompts x L tokens), scaled to the GPU host like every term here."""
    rows = [r for r in served["runs"] if r["way"] == "served"]
    fit = fit_line([{"requests": r["requests"], "tokens": r["requests"] * r["output_len"],
                     "api_ms": {STAT: 1e3 * r["cpu_s"]["api"]}} for r in rows],
                   "api_ms", ("requests", "tokens"))
    scale = host_scale(v0)
    c = fit["coef_ms"]
    f = scale["factor"] * 1e-3
    return {"api_per_request_s": max(0.0, c["requests"]) * f,
            "api_per_token_s": max(0.0, c["tokens"]) * f, "fit_here_ms": c, "r2": fit["r2"],
            "scale": scale}
