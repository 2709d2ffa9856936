"""vLLM's own server and benchmark client, driven from psdlab: the harness of `psdlab check-vllm`.

- `VllmServer`: ``vllm serve`` (vLLM's OpenAI-compatible server, through `vllm_cli`) as a
  subprocess on a free port, its log captured to a file, ready when ``/health`` answers; a
  server that exits or does not answer within the timeout is stopped and reported in one line
  naming the port and the log file.  The target's compute threads are bound to one core with
  vLLM's own ``VLLM_CPU_OMP_THREADS_BIND``; the frontend and the client share the other cores.
- `ServerSpec.args`: AR, or vLLM's draft-model speculative decoding
  (``--speculative-config {"method": "draft_model", "model": DRAFT, "num_speculative_tokens": k}``).
- `bench_command`: ``vllm bench serve --backend openai --save-result --save-detailed`` on a
  ShareGPT-format prompt file (vLLM's ``custom`` dataset needs pandas, which the CPU wheel does
  not install; its ShareGPT reader needs nothing), the output length fixed and EOS ignored, so
  every configuration serves the same requests.
- `prompt_file`: the committed prompt set (``runtime/data/vllm_bench_prompts.json``: 48
  held-out prompts of ``runtime/data/prompts.jsonl``, round-robin over the five styles), or for
  the tiny random model (`tiny`) prompts of its own words.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from psdlab.analysis.atomic_write import write_text
from psdlab.analysis.modes import Mode

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
PROMPTS = DATA_DIR / "vllm_bench_prompts.json"
SERVED_NAME = "psdlab-target"
LAUNCHER = ("-m", "psdlab.runtime.vllm_ext.vllm_cli")


class ServerError(ValueError):
    """The server did not come up (one line: port, reason, log file)."""


def free_port() -> int:
    """A TCP port nothing listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class ServerSpec:
    """One vLLM server: the target, and a draft model with k for speculative decoding."""

    name: str
    target: str
    draft: str | None = None
    k: int = 0
    max_model_len: int = 1024
    max_num_seqs: int = 64
    seed: int = 0
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if (self.draft is None) != (self.k == 0):
            raise ValueError(f"k: a draft model needs k >= 1 and AR needs k = 0, got k={self.k}")

    @property
    def mode(self) -> Mode:
        return "sd" if self.draft else "ar"

    def args(self, port: int) -> list[str]:
        """``vllm serve`` arguments."""
        out = ["serve", self.target, "--port", str(port), "--host", "127.0.0.1",
               "--served-model-name", SERVED_NAME, "--dtype", self.dtype,
               "--max-model-len", str(self.max_model_len),
               "--max-num-seqs", str(self.max_num_seqs), "--seed", str(self.seed),
               "--enforce-eager", "--no-enable-prefix-caching",
               "--disable-uvicorn-access-log"]
        if self.draft:
            spec = {"method": "draft_model", "model": self.draft,
                    "num_speculative_tokens": self.k}
            out += ["--speculative-config", json.dumps(spec)]
        return out


def _get(url: str, timeout: float) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, ""


class VllmServer:
    """``vllm serve`` as a subprocess (its own process group, so stopping it stops the engine
    core it spawned too)."""

    def __init__(self, spec: ServerSpec, log_path: str | Path, *, port: int | None = None,
                 target_core: int | None = None, kv_cache_gib: int = 1,
                 command: Sequence[str] | None = None) -> None:
        self.spec = spec
        self.log_path = Path(log_path)
        self.port = port or free_port()
        self.target_core = target_core
        self.kv_cache_gib = kv_cache_gib
        self.command = list(command) if command else [sys.executable, *LAUNCHER]
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready_s: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        return [*self.command, *self.spec.args(self.port)]

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["VLLM_CPU_KVCACHE_SPACE"] = str(self.kv_cache_gib)
        env.setdefault("VLLM_TARGET_DEVICE", "cpu")
        env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)   # the server spawns its engine core
        if self.target_core is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = str(self.target_core)
        return env

    def start(self, timeout_s: float) -> float:
        """Start and wait for ``/health``; the seconds it took.  ServerError if it exits or
        does not answer within ``timeout_s`` (the server is stopped first)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        with open(self.log_path, "wb") as log:
            log.write(f"$ {shlex.join(self.argv())}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env(),
                                         start_new_session=True)
        while time.monotonic() - t0 < timeout_s:
            code = self.proc.poll()
            if code is not None:
                self.stop()
                raise ServerError(f"server: '{self.spec.name}' exited with code {code} before "
                                  f"answering on port {self.port} (log: {self.log_path})")
            try:
                if _get(self.url + "/health", 2.0)[0] == 200:
                    self.ready_s = time.monotonic() - t0
                    return self.ready_s
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(1.0)
        self.stop()
        raise ServerError(f"server: '{self.spec.name}' did not answer /health on port "
                          f"{self.port} within {timeout_s:g} s (log: {self.log_path})")

    def metrics(self) -> str:
        """The Prometheus text of ``/metrics`` now."""
        status, text = _get(self.url + "/metrics", 30.0)
        if status != 200:
            raise ServerError(f"server: /metrics on port {self.port} answered {status}")
        return text

    def warm_up(self, max_tokens: int = 8) -> None:
        """One short completion, so the first measured request does not pay first-call costs."""
        body = json.dumps({"model": SERVED_NAME, "prompt": "Hello", "max_tokens": max_tokens,
                           "temperature": 0}).encode()
        req = urllib.request.Request(self.url + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as resp:
            resp.read()

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM the server's process group, SIGKILL after ``grace_s``."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def __enter__(self) -> "VllmServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass(frozen=True)
class ServeRun:
    """One ``vllm bench serve`` run: its rate, the prompt file, the output files."""

    name: str
    request_rate: float
    num_prompts: int
    output_len: int
    seed: int = 0

    def command(self, url: str, tokenizer: str, dataset: str, result_dir: str,
                client_core: int | None) -> list[str]:
        cmd = [sys.executable, *LAUNCHER, "bench", "serve", "--backend", "openai",
               "--base-url", url, "--model", SERVED_NAME, "--tokenizer", tokenizer,
               "--dataset-name", "sharegpt", "--dataset-path", dataset,
               "--sharegpt-output-len", str(self.output_len), "--disable-shuffle",
               "--num-prompts", str(self.num_prompts), "--request-rate", str(self.request_rate),
               "--seed", str(self.seed), "--ignore-eos", "--temperature", "0",
               "--save-result", "--save-detailed", "--result-dir", result_dir,
               "--result-filename", f"{self.name}.json", "--disable-tqdm"]
        if client_core is not None and shutil.which("taskset"):
            cmd = ["taskset", "-c", str(client_core), *cmd]
        return cmd


def run_serve_bench(run: ServeRun, server: VllmServer, *, tokenizer: str, dataset: str,
                    out_dir: str | Path, client_core: int | None,
                    timeout_s: float) -> dict[str, str]:
    """Snapshot /metrics, run vLLM's client, snapshot again; the paths written."""
    out = Path(out_dir)
    (out / "bench").mkdir(parents=True, exist_ok=True)
    (out / "metrics").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    before = out / "metrics" / f"{run.name}-before.txt"
    after = out / "metrics" / f"{run.name}-after.txt"
    log = out / "logs" / f"bench-{run.name}.log"
    before.write_text(server.metrics())
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    cmd = run.command(server.url, tokenizer, dataset, str(out / "bench"), client_core)
    with open(log, "wb") as fh:
        fh.write(f"$ {shlex.join(cmd)}\n".encode())
        fh.flush()
        try:
            code = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, timeout=timeout_s).returncode
        except subprocess.TimeoutExpired:
            raise ServerError(f"bench: run '{run.name}' took over {timeout_s:g} s "
                              f"(log: {log})") from None
    result = out / "bench" / f"{run.name}.json"
    if code != 0 or not result.is_file():
        raise ServerError(f"bench: run '{run.name}' failed with code {code} (log: {log})")
    after.write_text(server.metrics())
    return {"result": str(result), "metrics_before": str(before),
            "metrics_after": str(after), "log": str(log),
            "load_before": json.dumps(list(load) if load else None)}


def write_sharegpt(texts: Sequence[str], path: str | Path) -> Path:
    """``texts`` as a ShareGPT file (one human turn each; the answer is unused since the
    output length is fixed)."""
    rows = [{"id": f"p{i:03d}", "conversations": [{"from": "human", "value": t},
                                                  {"from": "gpt", "value": "-"}]}
            for i, t in enumerate(texts)]
    path = Path(path)
    write_text(str(path), json.dumps(rows, indent=1) + "\n", make_folders=False)
    return path


def committed_prompts(n: int) -> list[str]:
    """The first ``n`` prompts of the committed set (at most its 48)."""
    rows = json.loads(PROMPTS.read_text())
    if not 1 <= n <= len(rows):
        raise ValueError(f"num_prompts: must be in [1, {len(rows)}] for the committed prompt "
                         f"set, got {n}")
    return [r["conversations"][0]["value"] for r in rows[:n]]


def tiny_texts(n: int, seed: int = 0) -> list[str]:
    """``n`` prompts in the tiny model's own words."""
    from psdlab.runtime.vllm_ext.tiny import tiny_prompts, words
    vocab = words()
    return [" ".join(vocab[t] for t in ids) for ids in tiny_prompts(n, length=12, seed=seed)]
