"""`psdlab timeline TRACE -o OUT.json`: turn a trace into a Chrome-trace / Perfetto timeline
(one lane per device, step markers, request lifetimes); open it in ui.perfetto.dev."""
from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "timeline", help="export a trace as a Chrome-trace/Perfetto timeline (JSON)",
        description="Write a Trace Event Format JSON file with one lane per device, a lane of "
                    "steps and one lane per request; open it in https://ui.perfetto.dev.")
    p.add_argument("trace", help="trace file (.jsonl)")
    p.add_argument("-o", "--output", required=True, metavar="OUT.json",
                   help="where to write the timeline")
    p.add_argument("--json", action="store_true",
                   help="print a one-object JSON report (output path, event count)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from psdlab.analysis.perfetto import write_chrome_trace
    from psdlab.analysis.trace import read_trace

    count = write_chrome_trace(read_trace(args.trace), args.output)
    if args.json:
        print(json.dumps({"output": args.output, "events": count}))
    else:
        print(f"wrote {count} events to {args.output} (open in https://ui.perfetto.dev)")
    return 0
