"""Reader for vLLM's periodic speculative-decoding log line.

vLLM (``vllm/v1/spec_decode/metrics.py``, ``SpecDecodingLogging.log``) logs, each interval:
``SpecDecoding metrics: Mean acceptance length: 2.87, Accepted throughput: 101.60 tokens/s,
Drafted throughput: 162.40 tokens/s, Accepted: 1016 tokens, Drafted: 1624 tokens,
Per-position acceptance rate: 0.805, 0.633, 0.438, 0.300, Avg Draft acceptance rate: 62.6%``
(older versions: ``Draft acceptance rate: 62.6%, Accepted: 1016 tokens, Drafted: 1624
tokens``).  Counts are for the interval, not cumulative.  The line may sit anywhere in a
server log, after any prefix.  :meth:`SpecLogEntry.counters` rebuilds the interval's
counters: drafts = drafted / k (exact when every draft proposes k tokens), accepted per
position = rate x drafts (rounded; the log keeps three decimals).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import fail, warn_truncated
from .parsing import PathLike, read_text
from .records import SpecCounters

NAME = "vllm_log"
KIND = "log"
MARK = "SpecDecoding metrics:"
_NUM = r"(-?\d+(?:\.\d+)?|nan)"
_FIELDS = {
    "Mean acceptance length": re.compile(rf"Mean acceptance length: {_NUM}"),
    "Accepted throughput": re.compile(rf"Accepted throughput: {_NUM} tokens/s"),
    "Drafted throughput": re.compile(rf"Drafted throughput: {_NUM} tokens/s"),
    "Accepted": re.compile(r"(?:^|, )Accepted: (\d+) tokens"),
    "Drafted": re.compile(r"(?:^|, )Drafted: (\d+) tokens"),
    "Per-position acceptance rate": re.compile(
        r"Per-position acceptance rate: (\d+(?:\.\d+)?(?:, \d+(?:\.\d+)?)*)"),
    "Draft acceptance rate": re.compile(rf"(?:Avg )?Draft acceptance rate: {_NUM}%"),
}


@dataclass(frozen=True)
class SpecLogEntry:
    line: int
    accepted: int
    drafted: int
    mean_acceptance_length: float | None = None
    accepted_throughput: float | None = None
    drafted_throughput: float | None = None
    per_position: tuple[float, ...] = ()
    acceptance_rate_pct: float | None = None

    def counters(self) -> SpecCounters:
        """The interval's counters, rebuilt as the module docstring says."""
        k = len(self.per_position)
        if k:
            drafts = round(self.drafted / k)
        elif self.mean_acceptance_length and self.mean_acceptance_length > 1:
            drafts = round(self.accepted / (self.mean_acceptance_length - 1))
        else:
            raise ValueError(f"log line {self.line} gives no way to count the drafts")
        return SpecCounters(drafts, self.drafted, self.accepted,
                            tuple(round(r * drafts) for r in self.per_position))


def sniff(head: str) -> bool:
    """Whether ``head`` (the start of a file) holds a "SpecDecoding metrics:" line."""
    return MARK in head


def _entry(text: str, path: PathLike, line: int) -> SpecLogEntry:
    found: dict[str, str] = {}
    for name, rx in _FIELDS.items():
        m = rx.search(text)
        if m is not None:
            found[name] = m.group(1)
    for name in ("Accepted", "Drafted"):
        if name not in found:
            raise fail(path, "missing from the SpecDecoding line", line=line, field=name)

    def num(name: str) -> float | None:
        return float(found[name]) if name in found else None

    rates = found.get("Per-position acceptance rate")
    return SpecLogEntry(
        line=line, accepted=int(found["Accepted"]), drafted=int(found["Drafted"]),
        mean_acceptance_length=num("Mean acceptance length"),
        accepted_throughput=num("Accepted throughput"),
        drafted_throughput=num("Drafted throughput"),
        per_position=tuple(float(r) for r in rates.split(", ")) if rates else (),
        acceptance_rate_pct=num("Draft acceptance rate"))


def read_log(path: PathLike) -> tuple[SpecLogEntry, ...]:
    """Every "SpecDecoding metrics:" line of a log, in order.  A malformed one is an error,
    except on the file's last line (cut short): a warning, and the end."""
    lines = read_text(path).splitlines()
    last = max(i for i, s in enumerate(lines, 1) if s.strip())
    out: list[SpecLogEntry] = []
    for lineno, text in enumerate(lines, 1):
        at = text.find(MARK)
        if at < 0:
            continue
        try:
            out.append(_entry(text[at:], path, lineno))
        except ValueError:
            if lineno == last and out:
                warn_truncated(path, lineno, len(out))
                break
            raise
    if not out:
        raise fail(path, f"no '{MARK}' line (speculative decoding off, or another log?)")
    return tuple(out)


def read(path: PathLike) -> SpecCounters:
    """The counters summed over every logged interval (rebuilt per line, see above)."""
    total = SpecCounters(0, 0, 0)
    for entry in read_log(path):
        c = entry.counters()
        n = max(len(total.accepted_per_pos), len(c.accepted_per_pos))
        a = total.accepted_per_pos + (0,) * (n - len(total.accepted_per_pos))
        b = c.accepted_per_pos + (0,) * (n - len(c.accepted_per_pos))
        total = SpecCounters(total.num_drafts + c.num_drafts,
                             total.num_draft_tokens + c.num_draft_tokens,
                             total.num_accepted_tokens + c.num_accepted_tokens,
                             tuple(x + y for x, y in zip(a, b)))
    return total
