"""`psdlab policy CONFIG`: where the adaptive policy (analysis.adaptive_policy) switches between
AR, SD(k) and PSD(k) -- by running-batch size (its thresholds) and, with --rates, by request
rate (the simulator's adaptive server against every fixed configuration, sim.policy_search)."""
from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "policy", help="where the adaptive policy switches AR / SD / PSD and k, by batch and load",
        description="Read a simulator config (its [adaptive] table: the policy's settings; "
                    "server.m: most running sequences), print the policy's choice for each "
                    "running-batch size and, with --rates, simulate the adaptive server and "
                    "each fixed configuration (AR, SD k, PSD k on the same server) at each "
                    "Poisson rate and offline: throughput, TPOT p99, winner, switch points.")
    p.add_argument("config", help="simulator config (.toml)")
    p.add_argument("--rates", default=None, metavar="R[,R...]",
                   help="Poisson rates (req/s) to simulate (default: thresholds only)")
    p.add_argument("--max-n", type=int, default=None,
                   help="thresholds up to this many running sequences (default server.m)")
    p.add_argument("--m", type=int, default=None,
                   help="most running sequences (overrides server.m; PSD: two batches of m/2)")
    p.add_argument("--requests", type=int, default=None, help="requests per simulation")
    p.add_argument("-o", "--output", default=None, metavar="FILE",
                   help="write the report as JSON (with machine, date, commit)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def parse_rates(text: str) -> list[float]:
    from psdlab.analysis.checks import check_positive
    out = []
    for item in text.split(","):
        try:
            out.append(check_positive("--rates[]", float(item)))
        except ValueError:
            raise ValueError(f"--rates: expected comma-separated rates > 0, got {item!r}") \
                from None
    return out


def run(args: argparse.Namespace) -> int:
    import datetime as dt
    import os
    import tempfile

    from psdlab.analysis.checks import check_int
    from psdlab.sim.policy_search import format_report, policy_report, thresholds
    from psdlab.sim.sim_config import load_config
    from psdlab.validation.results_file import git_info, machine_info

    cfg = load_config(args.config)
    if cfg.adaptive is None:
        cfg = cfg.replace(adaptive={}, server_mode="adaptive")
    if args.m is not None:
        cfg = cfg.replace(server_m=check_int("--m", args.m, 1, 4096))
    if args.requests is not None:
        cfg = cfg.replace(requests=check_int("--requests", args.requests, 10, 100_000))
    rates = parse_rates(args.rates) if args.rates else None
    load0 = list(os.getloadavg())
    report = policy_report(cfg, rates)
    if args.max_n is not None:
        big = cfg.replace(server_m=check_int("--max-n", args.max_n, 1, 4096))
        report["thresholds"] = thresholds(big)
    report["config"] = args.config
    report["requests"] = cfg.requests
    report["machine"] = machine_info(load0)
    report["date_utc"] = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    report["git"] = git_info()
    if args.output:
        folder = os.path.dirname(os.path.abspath(args.output))
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=1, sort_keys=True)
        os.chmod(tmp, 0o644)
        os.replace(tmp, args.output)
    print(json.dumps(report, sort_keys=True) if args.json else format_report(report))
    return 0
