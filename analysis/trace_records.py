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


@dataclass(frozen=True)
class LeftOut:
    """What the reader of a partial trace left out (a run interrupted, a file cut short): the
    requests that did not finish, the verified and preempted rows of theirs it dropped from the
    steps (the steps themselves, measured, are kept whole), and a last line cut mid-record."""
    name: str                       # the file (or stream) read
    declared: int | None            # requests the run record declares (None: it does not say)
    finished: int                   # request records read
    unfinished: int                 # requests left out (declared - finished, or those seen
                                    # in steps without a request record)
    dropped_rows: int = 0           # verified + preempted rows of unfinished requests dropped
    cut_line: int | None = None     # the last line, cut mid-record and ignored
    cut_byte: int | None = None     # the byte offset it starts at

    def message(self) -> str:
        """One line naming what was left out, e.g. ``t.jsonl: 3 of 12 declared requests
        finished; 9 left out; last line cut at byte 4711 ignored``."""
        parts = []
        if self.declared is not None:
            parts.append(f"{self.finished} of {self.declared} declared requests finished")
        else:
            parts.append(f"{self.finished} request{'' if self.finished == 1 else 's'} "
                         f"finished")
        if self.unfinished:
            rows = (f" (their {self.dropped_rows} verified/preempted rows dropped from the "
                    f"steps)" if self.dropped_rows else "")
            parts.append(f"{self.unfinished} left out{rows}")
        if self.cut_line is not None:
            parts.append(f"last line (line {self.cut_line}) cut at byte {self.cut_byte} "
                         f"ignored")
        return f"{self.name}: " + "; ".join(parts)


def declared_requests(run: RunInfo) -> int | None:
    """The number of requests a run record declares: the simulator's ``extra.requests``, the
    runtime's ``workload.requests``; None when neither says."""
    for table in (run.extra, run.workload):
        value = (table or {}).get("requests")
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


@dataclass
class Trace:
    """A whole trace in memory; ``left_out`` says what a partial one's reader left out (None:
    the trace is whole)."""
    run: RunInfo
    steps: list[StepRecord] = field(default_factory=list)
    requests: list[RequestRecord] = field(default_factory=list)
    left_out: LeftOut | None = None
