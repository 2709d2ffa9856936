"""Neutral records the foreign-format readers produce, whatever file they came from.

- :class:`WorkloadRequest`: one request of a workload: arrival (seconds after the first
  request), prompt and output lengths, the prompt text when the file has it, and, for files
  written by a benchmark client, what was measured (TTFT, inter-token latencies, end-to-end).
- :class:`FileWorkload`: the requests of one file, sorted by arrival, with the operations a
  what-if study needs (rate scaling, a time window, the first n requests).
- :class:`BenchSummary`: a vLLM / SGLang serving-benchmark result: run settings, totals,
  latency statistics, per-request lists and speculative-decoding figures when present.
- :class:`SpecCounters`: vLLM's speculative-decoding counters (``/metrics``), with the
  before/after difference and the acceptance figures computed from them.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

STAT_KINDS = ("mean", "median", "std")  # plus "pNN" percentiles
STAT_METRICS = ("ttft", "tpot", "itl", "e2el")


@dataclass(frozen=True)
class WorkloadRequest:
    arrival_s: float                  # seconds after the workload's first request (>= 0)
    input_len: int                    # prompt tokens (>= 0)
    output_len: int                   # output tokens (>= 0; 0 where the file has none)
    text: str | None = None           # the prompt text, when the file has it
    ttft_s: float | None = None       # measured time to first token
    itl_s: tuple[float, ...] = ()     # measured inter-token latencies
    e2el_s: float | None = None       # measured end-to-end latency
    source: str = ""                  # where it came from, e.g. "azure:trace.csv:7"
    model: str | None = None          # the model the trace names (BurstGPT), if any
    session: str | None = None        # conversation / session id, if any
    hash_ids: tuple[int, ...] = ()    # prefix-block hashes (Mooncake), if any
    error: str | None = None          # the client's error for a failed request, if any

    def __post_init__(self) -> None:
        if not (self.arrival_s >= 0 and math.isfinite(self.arrival_s)):
            raise ValueError(f"arrival_s must be finite and >= 0, got {self.arrival_s}")
        if self.input_len < 0 or self.output_len < 0:
            raise ValueError(f"lengths must be >= 0, got {self.input_len}, {self.output_len}")


@dataclass(frozen=True)
class FileWorkload:
    records: tuple[WorkloadRequest, ...]
    format: str                       # the reader's name, e.g. "azure"
    path: str                         # the file it was read from
    notes: tuple[str, ...] = ()       # what the reader assumed (e.g. arrivals from the rate)

    def __post_init__(self) -> None:
        last = 0.0
        for i, rec in enumerate(self.records):
            if rec.arrival_s < last:
                raise ValueError(f"records must be sorted by arrival (record {i})")
            last = rec.arrival_s

    def __len__(self) -> int:
        return len(self.records)

    @property
    def arrivals_s(self) -> tuple[float, ...]:
        return tuple(r.arrival_s for r in self.records)

    @property
    def duration_s(self) -> float:
        """Time from the first arrival to the last (0 for fewer than two requests)."""
        return self.records[-1].arrival_s - self.records[0].arrival_s if self.records else 0.0

    def mean_rate(self) -> float:
        """Requests per second over the arrival span (inf when all arrive at once)."""
        if len(self.records) < 2:
            return math.inf
        span = self.duration_s
        return (len(self.records) - 1) / span if span > 0 else math.inf

    def _with(self, records: tuple[WorkloadRequest, ...], note: str) -> FileWorkload:
        return FileWorkload(records, self.format, self.path, self.notes + (note,))

    def scaled(self, rate_scale: float) -> FileWorkload:
        """The same requests arriving ``rate_scale`` times as fast (arrivals divided by it)."""
        if not (rate_scale > 0 and math.isfinite(rate_scale)):
            raise ValueError(f"rate_scale must be finite and > 0, got {rate_scale}")
        recs = tuple(replace(r, arrival_s=r.arrival_s / rate_scale) for r in self.records)
        return self._with(recs, f"rate scaled by {rate_scale:g}")

    def window(self, start_s: float, end_s: float) -> FileWorkload:
        """The requests arriving in ``[start_s, end_s)``, re-based so the first arrives at 0."""
        if not end_s >= start_s:
            raise ValueError(f"window end {end_s} is before its start {start_s}")
        kept = [r for r in self.records if start_s <= r.arrival_s < end_s]
        base = kept[0].arrival_s if kept else 0.0
        recs = tuple(replace(r, arrival_s=max(0.0, r.arrival_s - base)) for r in kept)
        return self._with(recs, f"window [{start_s:g}, {end_s:g}) s")

    def head(self, n: int) -> FileWorkload:
        """The first ``n`` requests by arrival."""
        if n < 0:
            raise ValueError(f"head(n) needs n >= 0, got {n}")
        return self._with(self.records[:n], f"first {n} requests")


@dataclass(frozen=True)
class BenchSummary:
    """One serving-benchmark result (vLLM ``bench serve`` or SGLang ``bench_serving``).

    Times in the per-request lists are seconds, as the tools write them; the statistics
    keep the tools' milliseconds.  ``stats_ms`` maps ``{mean,median,std,pNN}_{metric}_ms``
    (metric one of ttft, tpot, itl, e2el; SGLang's ``e2e_latency`` is stored as ``e2el``) to
    its value.  Fields the file does not have are None (or empty)."""
    format: str
    path: str
    backend: str | None = None
    model_id: str | None = None
    request_rate: float | None = None      # inf: all sent at once; None: not a rate ("trace")
    burstiness: float | None = None
    max_concurrency: int | None = None
    num_prompts: int | None = None
    duration_s: float | None = None
    completed: int | None = None
    failed: int | None = None
    total_input_tokens: int | None = None
    total_output_tokens: int | None = None
    request_throughput: float | None = None
    output_throughput: float | None = None
    total_token_throughput: float | None = None
    stats_ms: Mapping[str, float] = field(default_factory=dict)
    # per-request lists (present in detailed results)
    input_lens: tuple[int, ...] | None = None
    output_lens: tuple[int, ...] | None = None
    ttfts_s: tuple[float, ...] | None = None
    itls_s: tuple[tuple[float, ...], ...] | None = None
    e2els_s: tuple[float, ...] | None = None
    start_times_s: tuple[float, ...] | None = None
    queue_times_s: tuple[float, ...] | None = None
    errors: tuple[str, ...] | None = None
    # speculative decoding (vLLM: counter deltas over the run; SGLang: accept_length only)
    acceptance_length: float | None = None
    acceptance_rate_pct: float | None = None
    num_drafts: int | None = None
    draft_tokens: int | None = None
    accepted_tokens: int | None = None
    per_position_acceptance: tuple[float, ...] | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def stat(self, kind: str, metric: str) -> float | None:
        """``stat("p99", "itl")`` is ``p99_itl_ms``; None when the file has no such key."""
        return self.stats_ms.get(f"{kind}_{metric}_ms")

    @property
    def detailed(self) -> bool:
        """Whether the per-request lists are present (``--save-detailed``/``--output-details``)."""
        return self.input_lens is not None and self.output_lens is not None


@dataclass(frozen=True)
class SpecCounters:
    """vLLM's cumulative speculative-decoding counters (summed over engines)."""
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_pos: tuple[int, ...] = ()

    def minus(self, before: SpecCounters) -> SpecCounters:
        """The counts between snapshot ``before`` and this one."""
        n = max(len(self.accepted_per_pos), len(before.accepted_per_pos))
        after_pos = self.accepted_per_pos + (0,) * (n - len(self.accepted_per_pos))
        before_pos = before.accepted_per_pos + (0,) * (n - len(before.accepted_per_pos))
        diff = SpecCounters(self.num_drafts - before.num_drafts,
                            self.num_draft_tokens - before.num_draft_tokens,
                            self.num_accepted_tokens - before.num_accepted_tokens,
                            tuple(a - b for a, b in zip(after_pos, before_pos)))
        if min((diff.num_drafts, diff.num_draft_tokens, diff.num_accepted_tokens)
               + diff.accepted_per_pos) < 0:
            raise ValueError("a counter went down between the snapshots (server restarted? "
                             "or the snapshots swapped?)")
        return diff

    def acceptance_per_position(self) -> tuple[float, ...]:
        """Per draft position i, the share of drafts whose token i was accepted."""
        if self.num_drafts <= 0:
            raise ValueError("no drafts counted: acceptance is undefined")
        return tuple(a / self.num_drafts for a in self.accepted_per_pos)

    def mean_acceptance_length(self) -> float:
        """Tokens emitted per draft, the bonus token included: 1 + accepted / drafts."""
        if self.num_drafts <= 0:
            raise ValueError("no drafts counted: acceptance length is undefined")
        return 1.0 + self.num_accepted_tokens / self.num_drafts

    def acceptance_rate(self) -> float:
        """Accepted draft tokens over proposed draft tokens."""
        if self.num_draft_tokens <= 0:
            raise ValueError("no draft tokens counted: acceptance rate is undefined")
        return self.num_accepted_tokens / self.num_draft_tokens
