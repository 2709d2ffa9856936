"""vLLM's dynamic speculative decoding table from a plan: ``num_speculative_tokens_per_batch_size``.

vLLM schedules the draft length k by the running batch size from a hand-written table
(Dynamic SD, vllm-project/vllm PR #32374, https://github.com/vllm-project/vllm/pull/32374).
The form its config takes (vLLM 0.32, ``vllm/config/speculative.py`` and
``vllm/v1/spec_decode/dynamic/utils.py::validate_and_normalize_dynamic_sd_schedule``): a list
of inclusive ranges ``[[range_start, range_end, k], ...]``, sorted, not overlapping, the first
starting at 1; batch sizes past the last range keep its k; k = 0 turns speculation off; the
scheduled k is clamped to ``num_speculative_tokens`` (the startup maximum, > 0).  (The PR's
description shows an earlier dict form, ``{"1-16": 3, ...}``; the released code takes the list.)

What a plan says about it: for each batch size m of the sweep, among the colocated-SD
configurations (mode ``sd``: vLLM's drafter shares the target's devices) of one drafter and,
when the sweep has it, AR at the same m (k = 0), the k with the highest figure of merit:
``rate`` (default), the highest request rate sustained under the plan's SLO, or ``capacity``,
the saturated (offline) request throughput; ties go to the smaller k.  Batch sizes between
two swept m take the k of the next larger one: range (m_prev, m] gets m's k.  A plan's m is
the batch cap; near the sustainable rate the batch runs close to it, which is what makes the
cap a stand-in for the running batch size.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

#: figure of merit -> the row column it reads (higher is better)
CRITERIA = {"rate": "max_rate_req_s", "capacity": "capacity_req_s"}


@dataclass(frozen=True)
class KChoice:
    m: int
    k: int                 # 0: AR beats every SD configuration at this m
    mode: str              # "sd" or "ar"
    value: float           # the criterion's value of the chosen configuration
    values: tuple[tuple[int, float], ...]   # (k, value) of every candidate


@dataclass(frozen=True)
class KTable:
    drafter: str
    by: str
    choices: tuple[KChoice, ...]      # by m, ascending
    swept_ks: tuple[int, ...]

    def schedule(self) -> list[list[int]]:
        """``num_speculative_tokens_per_batch_size``: equal neighbouring k merged."""
        out: list[list[int]] = []
        lo = 1
        for c in self.choices:
            if out and out[-1][2] == c.k:
                out[-1][1] = c.m
            else:
                out.append([lo, c.m, c.k])
            lo = c.m + 1
        return out

    def speculative_config(self) -> dict[str, Any]:
        """The keys to merge into vLLM's ``speculative_config`` (with its method and model)."""
        top = max(c.k for c in self.choices)
        return {"num_speculative_tokens": top if top > 0 else min(self.swept_ks),
                "num_speculative_tokens_per_batch_size": self.schedule()}


def _per_config(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """One row per configuration (replica rows repeat the per-replica figures)."""
    seen: dict[tuple, Mapping[str, Any]] = {}
    for r in rows:
        seen.setdefault((r["mode"], r["k"], r["m"], r["drafter"]), r)
    return list(seen.values())


def _best_drafter(sd: Sequence[Mapping[str, Any]], col: str) -> str:
    best = max(sd, key=lambda r: (r[col], -r["k"]))
    return str(best["drafter"])


def k_table(rows: Sequence[Mapping[str, Any]], drafter: str | None = None,
            by: str = "rate") -> KTable:
    """The k per swept batch size (see the module docstring).  ``drafter`` None: the drafter
    of the best SD configuration of the sweep."""
    if by not in CRITERIA:
        raise ValueError(f"--k-table-by: must be one of {', '.join(CRITERIA)}, got {by!r}")
    col = CRITERIA[by]
    configs = _per_config(rows)
    sd = [r for r in configs if r["mode"] == "sd"]
    if not sd:
        raise ValueError("--vllm-k-table: the plan has no sd configurations (plan.modes)")
    names = sorted({str(r["drafter"]) for r in sd})
    if drafter is None:
        drafter = _best_drafter(sd, col)
    elif drafter not in names:
        raise ValueError(f"--k-table-drafter: must be one of {', '.join(names)}, got "
                         f"{drafter!r}")
    ar = {r["m"]: r for r in configs if r["mode"] == "ar"}
    choices = []
    for m in sorted({r["m"] for r in sd if r["drafter"] == drafter}):
        cands = [(int(r["k"]), float(r[col]), "sd") for r in sd
                 if r["drafter"] == drafter and r["m"] == m]
        if m in ar:
            cands.append((0, float(ar[m][col]), "ar"))
        k, value, mode = max(cands, key=lambda c: (c[1], -c[0]))
        choices.append(KChoice(m=int(m), k=k, mode=mode, value=value,
                               values=tuple(sorted((c[0], c[1]) for c in cands))))
    return KTable(drafter=drafter, by=by, choices=tuple(choices),
                  swept_ks=tuple(sorted({int(r["k"]) for r in sd})))


def format_k_table(table: KTable) -> str:
    lines = [f"{'m':>5}{'k':>4}  {'by ' + table.by:>14}   candidates (k: value)"]
    for c in table.choices:
        cands = ", ".join(f"{k}: {v:.4g}" for k, v in c.values)
        lines.append(f"{c.m:>5}{c.k:>4}  {c.value:>14.4g}   {cands}")
    lines.append(f"num_speculative_tokens_per_batch_size = {table.schedule()}")
    return "\n".join(lines)
