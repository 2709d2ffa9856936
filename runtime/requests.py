"""Requests, the engine's per-sequence state, outputs, and arrival schedules.

A `Request` is what a user submits (token ids, arrival time in seconds after the run starts).
A `Seq` is the engine's running state for one request: committed tokens, the drafts waiting
for verification, and for each worker which prefix of its KV cache is still valid.  Cache
validity is computed, never stored: a worker last appended ``spec`` tokens after ``base``
committed ones, so its valid length is ``base + lcp(spec, tokens[base:])`` (capped so the last
committed token is always fed again, since its logits are needed).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable, Sequence

import numpy as np

from psdlab.analysis.checks import check_int, check_nonnegative, check_positive


@dataclass(frozen=True)
class Request:
    id: Hashable
    prompt_ids: tuple[int, ...]
    arrival: float = 0.0
    prompt_text: str | None = None
    max_new_tokens: int | None = None     # None: the engine's max_new_tokens

    def __post_init__(self) -> None:
        check_nonnegative("arrival", self.arrival)
        if self.max_new_tokens is not None:
            check_int("max_new_tokens", self.max_new_tokens, minimum=1)


@dataclass
class RequestOutput:
    id: Hashable
    prompt_ids: list[int]
    token_ids: list[int]
    text: str | None = None
    finish_reason: str | None = None      # "length" | "stop" | "context" | "error" | None
    error: str | None = None
    prompt_text: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "prompt": self.prompt_text, "prompt_len": len(self.prompt_ids),
                "token_ids": self.token_ids, "text": self.text,
                "finish_reason": self.finish_reason, "error": self.error}


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@dataclass
class Seq:
    req: Request
    slot: int
    max_new: int
    max_len: int
    eos: int | None
    tokens: list[int] = field(default_factory=list)
    out: list[int] = field(default_factory=list)
    drafts: list[int] = field(default_factory=list)
    draft_probs: np.ndarray | None = None
    state: dict[str, tuple[int, list[int]]] = field(default_factory=dict)
    admitted: float = 0.0
    first_token: float = 0.0
    finish: float = 0.0
    batch: int | None = None
    done: bool = False
    reason: str | None = None

    def __post_init__(self) -> None:
        self.tokens = list(self.req.prompt_ids)
        self.state = {"target": (0, []), "drafter": (0, [])}

    @property
    def id(self) -> Hashable:
        return self.req.id

    def valid_len(self, role: str) -> int:
        base, spec = self.state[role]
        return min(base + _lcp(spec, self.tokens[base:]), len(self.tokens) - 1)

    def num_draft(self, k: int) -> int:
        """Draft tokens worth proposing: never more than the output budget or context allow."""
        return max(0, min(k, self.max_new - len(self.out) - 1,
                          self.max_len - len(self.tokens) - 1))

    def append(self, toks: Sequence[int]) -> int:
        """Commit emitted tokens up to the stop conditions; returns how many were kept."""
        n = 0
        for t in toks:
            if self.done:
                break
            self.tokens.append(int(t))
            self.out.append(int(t))
            n += 1
            if self.eos is not None and int(t) == self.eos:
                self.done, self.reason = True, "stop"
            elif len(self.out) >= self.max_new:
                self.done, self.reason = True, "length"
            elif len(self.tokens) >= self.max_len:
                self.done, self.reason = True, "context"
        return n


def arrival_times(spec: str, n: int, seed: int = 0) -> list[float]:
    """Arrival schedule for n requests: ``offline`` (all at 0), ``poisson:RATE`` (requests per
    second, seeded), ``gap:SECONDS`` (evenly spaced), or ``times:T1,T2,...`` (explicit)."""
    check_int("requests", n, minimum=0)
    kind, _, arg = spec.partition(":")
    if kind == "offline" and not arg:
        return [0.0] * n
    if kind == "poisson":
        rate = check_positive("arrivals rate", _num(arg, "poisson:RATE"))
        rng = np.random.default_rng(seed)
        return [float(x) for x in np.cumsum(rng.exponential(1.0 / rate, size=n))]
    if kind == "gap":
        gap = check_nonnegative("arrivals gap", _num(arg, "gap:SECONDS"))
        return [i * gap for i in range(n)]
    if kind == "times":
        times = [check_nonnegative("arrivals time", _num(x, "times:T1,T2,..."))
                 for x in arg.split(",") if x.strip()]
        if len(times) < n:
            raise ValueError(f"arrivals: {len(times)} times given for {n} requests")
        return times[:n]
    raise ValueError(f"arrivals: must be offline, poisson:RATE, gap:SECONDS or times:T1,T2,..., "
                     f"got {spec!r}")


def _num(text: str, form: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"arrivals: expected {form}, got {text!r}") from None
