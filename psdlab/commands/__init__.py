"""One module per `psdlab` subcommand.  Each module defines `register(subparsers)`, which adds
its parser and sets `func` (a callable taking the parsed args and returning an exit code).
Add a new command by adding its module name to COMMANDS."""

COMMANDS: list[str] = [
    "run",
    "bench-runtime",
    "bench-gpu",
    "metrics",
    "timeline",
    "calibrate",
    "probe",
    "theory",
    "simulate",
    "bench-sim",
    "plan",
    "figs",
    "validate",
    "demo",
    "cost",
    "frontier",
    "policy",
    "bench-adaptive",
    "systems",
    "check-vllm",
]
