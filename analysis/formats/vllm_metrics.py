"""Reader for vLLM's speculative-decoding counters in its Prometheus ``/metrics`` text.

The counters (vLLM ``vllm/v1/spec_decode/metrics.py``, labelled ``model_name`` and
``engine``) are ``vllm:spec_decode_num_drafts_total``,
``vllm:spec_decode_num_draft_tokens_total``, ``vllm:spec_decode_num_accepted_tokens_total``
and ``vllm:spec_decode_num_accepted_tokens_per_pos_total{...,position="i"}``.  Samples are
summed over every label set but ``position`` (engines, models), as ``vllm bench serve``
does; ``_created`` samples and other families are ignored.  Take one snapshot before a run
and one after, and :meth:`SpecCounters.minus` gives the run's counts.  (The periodic
"SpecDecoding metrics:" log line is read by ``vllm_log``.)
"""
from __future__ import annotations

import math
import re

from .errors import fail, shown
from .parsing import PathLike, read_text
from .records import SpecCounters

NAME = "vllm_metrics"
KIND = "counters"
PREFIX = "vllm:spec_decode_"
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?\s*$")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


def sniff(head: str) -> bool:
    """Whether ``head`` (the start of a file) is Prometheus text with vLLM metrics."""
    for line in head.splitlines()[:2000]:
        s = line.strip()
        if s.startswith(("vllm:", "# HELP vllm:", "# TYPE vllm:")):
            return True
    return False


def _labels(text: str, path: PathLike, line: int, name: str) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    while pos < len(text.strip()):
        m = _LABEL.match(text, pos)
        if m is None:
            raise fail(path, f"malformed labels {shown(text)}", line=line, field=name)
        out[m.group(1)] = m.group(2)
        pos = m.end()
    return out


def parse(text: str, path: PathLike = "<metrics>") -> SpecCounters:
    """The counters in Prometheus exposition ``text`` (``path`` names it in errors)."""
    totals = {DRAFTS: 0, DRAFT_TOKENS: 0, ACCEPTED: 0}
    seen: set[str] = set()
    per_pos: dict[int, int] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line.startswith(PREFIX):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            raise fail(path, f"not a metric sample ({shown(line)})", line=lineno)
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        if name not in totals and name != PER_POS:
            seen.add(name)
            continue
        try:
            number = float(value)
        except ValueError:
            raise fail(path, f"not a number ({shown(value)})", line=lineno,
                       field=name) from None
        if not math.isfinite(number) or number < 0 or not number.is_integer():
            raise fail(path, f"not a counter value ({shown(value)})", line=lineno, field=name)
        seen.add(name)
        if name == PER_POS:
            position = _labels(labels, path, lineno, name).get("position")
            if position is None or not position.isdigit():
                raise fail(path, f"needs a position=\"i\" label ({shown(labels)})",
                           line=lineno, field=name)
            per_pos[int(position)] = per_pos.get(int(position), 0) + int(number)
        else:
            _labels(labels, path, lineno, name)
            totals[name] += int(number)
    for name in (DRAFTS, DRAFT_TOKENS, ACCEPTED):
        if name not in seen:
            found = ", ".join(sorted(seen)) or "none"
            raise fail(path, f"not found (speculative decoding off?; {PREFIX}* samples found: "
                       f"{found})", field=name)
    n = max(per_pos) + 1 if per_pos else 0
    return SpecCounters(totals[DRAFTS], totals[DRAFT_TOKENS], totals[ACCEPTED],
                        tuple(per_pos.get(i, 0) for i in range(n)))


def read(path: PathLike) -> SpecCounters:
    """The counters in a saved ``/metrics`` scrape."""
    return parse(read_text(path), path)


def read_delta(before: PathLike, after: PathLike) -> SpecCounters:
    """The counts between two scrapes (before and after a run)."""
    return read(after).minus(read(before))


def label_sets(path: PathLike) -> dict[str, frozenset[tuple[tuple[str, str], ...]]]:
    """Per spec-decode counter, the label sets its samples carry (``position`` left out):
    two snapshots of one server have the same ones (a different model name or engine count
    means another server)."""
    out: dict[str, set[tuple[tuple[str, str], ...]]] = {}
    for lineno, raw in enumerate(read_text(path).splitlines(), 1):
        line = raw.strip()
        m = _SAMPLE.match(line) if line.startswith(PREFIX) else None
        if m is None or m.group(1) not in (DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POS):
            continue
        labels = _labels(m.group(2) or "", path, lineno, m.group(1))
        labels.pop("position", None)
        out.setdefault(m.group(1), set()).add(tuple(sorted(labels.items())))
    return {k: frozenset(v) for k, v in out.items()}


def check_same_server(before: PathLike, after: PathLike) -> None:
    """A one-line error when two snapshots do not come from the same server (different
    label sets on a counter)."""
    a, b = label_sets(after), label_sets(before)
    for name in (DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POS):
        if a.get(name, frozenset()) != b.get(name, frozenset()):
            only = sorted(a.get(name, frozenset()) ^ b.get(name, frozenset()))
            shown_labels = ",".join(f'{k}="{v}"' for k, v in only[0]) if only else ""
            raise fail(after, f"labels differ from {before}'s ({{{shown_labels}}} in one "
                       f"snapshot only): not the same server", field=name)
