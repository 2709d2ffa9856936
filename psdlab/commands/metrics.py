"""`psdlab metrics TRACE`: the metrics of a trace file (throughput, latency percentiles,
acceptance, overlap, idle time), as a readable summary or, with --json, one JSON object."""
from __future__ import annotations

import argparse
import json
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "metrics", help="compute throughput, TTFT/TPOT/e2e, acceptance and overlap from a trace",
        description="Read a psdlab JSONL trace (runtime or simulator) and print its metrics.")
    p.add_argument("trace", help="trace file (.jsonl)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--steps-fraction", type=float, default=1.0, metavar="F",
                   help="decode throughput over the first F of the steps, 0 < F <= 1 "
                        "(the paper uses 0.7/0.8/1.0 to cut the drain tail; default 1.0)")
    p.set_defaults(func=run)


def _num(x: Any, scale: float = 1.0, fmt: str = ".4g") -> str:
    return "-" if x is None else format(x * scale, fmt)


def format_summary(s: dict[str, Any]) -> str:
    """The summary dict as aligned text (times of distributions in milliseconds)."""
    lines = [f"run: mode={s['mode']} k={s['k']} m={s['m']} source={s['source']}",
             f"requests {s['requests']}   output tokens {s['output_tokens']}   "
             f"steps {s['steps']} (with prefill {s['prefill_steps']}; decode steps in the "
             f"first {s['steps_fraction']:g}: {s['decode_steps']})",
             f"makespan {_num(s['makespan_s'])} s   throughput {_num(s['throughput_tok_s'])} "
             f"tok/s   makespan/requests {_num(s['latency_per_request_s'])} s",
             f"decode throughput {_num(s['decode_throughput_tok_s'])} tok/s "
             f"({s['decode_tokens']} tokens in {_num(s['decode_time_s'])} s of decode steps)",
             "", f"{'ms':<6}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}"]
    for key in ("ttft", "tpot", "e2e"):
        d = s[key]
        lines.append(f"{key:<6}" + "".join(f"{_num(d[q], 1e3, '.3f'):>10}"
                                          for q in ("mean", "p50", "p90", "p99")))
    lines += ["",
              f"acceptance rate (VSR) {_num(s['acceptance_rate'])}   mean acceptance length "
              f"{_num(s['mean_acceptance_length'])}   "
              f"({s['accepted_tokens']}/{s['proposed_tokens']} draft tokens accepted)",
              f"overlapped steps {_num(s['overlap_fraction'])}   draft time hidden "
              f"{_num(s['draft_hidden_fraction'])}   mean draft {_num(s['mean_draft_time_s'], 1e3)}"
              f" ms   mean verify {_num(s['mean_verify_time_s'], 1e3)} ms"]
    idle = s["idle_fraction"]
    if idle:
        lines.append("idle: " + "   ".join(f"{d} {_num(v)}" for d, v in idle.items()))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from psdlab.analysis.checks import check_range
    from psdlab.analysis.metrics import summarize
    from psdlab.analysis.trace import read_trace

    check_range("--steps-fraction", args.steps_fraction, 0.0, 1.0, lo_open=True)
    summary = summarize(read_trace(args.trace), steps_fraction=args.steps_fraction)
    if args.json:
        print(json.dumps(summary, allow_nan=False))
    else:
        print(format_summary(summary))
    return 0
