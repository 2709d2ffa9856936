"""The step-level trace's records (``analysis.trace``: the format, re-exported there): the
schema version, the record dataclasses and the error a malformed line raises."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .modes import Mode

SCHEMA_VERSION = 1
#: schema versions this reader understands (older ones are upgraded on read)
READABLE_VERSIONS = (1,)
PHASE_KINDS = ("draft", "verify", "prefill")


class TraceFormatError(ValueError):
    """A trace line that does not follow the schema; the message names line and field."""


@dataclass(frozen=True)
class RunInfo:
    mode: Mode
    k: int
    m: int
    source: str
    devices: dict[str, str] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)
    workload: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None
    versions: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    schema: int = SCHEMA_VERSION


@dataclass(frozen=True)
class Phase:
    kind: str          # "draft" | "verify" | "prefill"
    device: str        # e.g. "cpu:0", "cuda:0", "sim:target"
    start: float       # seconds since the run started
    end: float
    seqs: int          # sequences processed
    tokens: int        # tokens processed (drafted, verified or prefilled)
    context: int = 0   # context tokens: sum over the sequences of tokens already in the KV
                       # cache when the phase starts (optional; 0 = not recorded)
    chunks: int = 0    # prefill: the passes it fed its prompts in (`analysis.chunking`;
                       # optional, written only when set; 0 = not recorded)


@dataclass(frozen=True)
class Verified:
    req: int | str     # request id
    proposed: int      # draft tokens verified for this sequence this step
    accepted: int      # of those, accepted
    emitted: int       # tokens appended to the output this step (accepted + bonus, capped)


@dataclass(frozen=True)
class StepRecord:
    index: int
    start: float
    end: float
    phases: tuple[Phase, ...] = ()
    verified: tuple[Verified, ...] = ()
    verify_batch: int | None = None   # PSD: batch verified this step (0/1)
    draft_batch: int | None = None    # PSD: batch drafted this step (0/1)
    overlapped: bool = False          # drafting ran concurrently with verification
    preempted: tuple[int | str, ...] = ()


@dataclass(frozen=True)
class RequestRecord:
    id: int | str
    arrival: float
    admitted: float
    first_token: float
    finish: float
    prompt_len: int
    output_len: int
    batch: int | None = None
    preemptions: int = 0


@dataclass
class Trace:
    """A whole trace in memory."""
    run: RunInfo
    steps: list[StepRecord] = field(default_factory=list)
    requests: list[RequestRecord] = field(default_factory=list)
