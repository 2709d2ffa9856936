"""The compute a worker does on its device: one model, its KV cache and its sampler.

A `ModelRunner` is built inside a worker (a process pinned to a core, or a thread that owns a
CUDA device or stream) and answers the controller's commands:

- ``feed``: roll a slot's cache back to a kept length and append tokens (the drafter's prefill).
- ``draft``: roll back, catch up on the tokens the drafter has not seen, propose ``k_i`` tokens
  per sequence (and their probabilities when sampling).
- ``verify``: roll back, append the pending tokens and the drafts, and decide per sequence how
  many drafts to accept plus one bonus / correction token (rejection sampling; exact argmax
  matching when greedy).  With no drafts this is a prefill or a plain autoregressive step.
- ``release``: free slots.

Everything in and out is plain Python lists / numpy arrays, so the same runner works in-process,
in a thread, or behind a pipe.  The controller owns the bookkeeping of which prefix of each
slot's cache is still valid; a runner only truncates to the lengths it is told.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
import torch

from psdlab.analysis.chunking import Chunking
from psdlab.runtime.devices import COMPILE_MODES
from psdlab.runtime.model import host_to_device
from psdlab.runtime.pass_modes import CUDA_DEFAULT_PASSES, PASS_MODES, PASSES
from psdlab.runtime.static_pass import span_buckets

if TYPE_CHECKING:
    from psdlab.runtime.sampling import SamplingParams

#: prompt tokens are fed in chunks of this many (bounds the [1, T, V] logits of a prefill)
PREFILL_CHUNK = 128
#: how a prefill feeds its prompts, by role (`analysis.chunking`): the target's (``verify``
#: with no drafts) leaves each row's last token to one batched pass, the drafter's (``feed``)
#: leaves none; traces record the rule (``run.extra["prefill_chunking"]``) and the count
PREFILL_RULES = {"target": Chunking(PREFILL_CHUNK, leave=1),
                 "drafter": Chunking(PREFILL_CHUNK, leave=0)}
#: a drafting pass takes up to this many unseen tokens per sequence in one batched ragged
#: forward (padded to the longest row); longer rows are caught up slot by slot first (with
#: static passes: up to the widest drafting shape, so the pass is a graph replay)
RAGGED_TAIL = 16
#: with static passes, eager prefill chunks are padded to one of these widths, each run once
#: when the runner starts: a new GEMM shape's first run can stall the host ~1 s on a GPU
PREFILL_BUCKETS = (8, 16, 32, 64, PREFILL_CHUNK)
#: fp32 matrix products on CPU with 9..15 rows (tokens in a forward) are markedly slower than
#: with 16 (a verification of 3 x 5 tokens: ~195 ms against ~140 ms for 3 x 6 on this machine's
#: MKL/oneDNN): such forwards are padded to 16 rows (padding positions are ignored)
SLOW_GEMM_ROWS = range(9, 16)


@dataclass(frozen=True)
class ModelSpec:
    """How a worker obtains its model: a directory of HF-format weights, or a picklable
    factory ``factory(device, dtype) -> (model, cfg)`` (tests use tiny in-memory models)."""
    path: str | None = None
    factory: Callable[..., Any] | None = None
    label: str = ""

    def load(self, device: torch.device, dtype: torch.dtype) -> tuple[Any, Any]:
        if self.factory is not None:
            return self.factory(device, dtype)
        from psdlab.runtime.weights import load_model
        assert self.path is not None, "ModelSpec: a path or a factory"
        return load_model(self.path, device, dtype)

    def name(self) -> str:
        return self.label or self.path or str(getattr(self.factory, "__name__", "model"))


@dataclass(frozen=True)
class RunnerConfig:
    """Everything a worker needs to build its runner (picklable)."""
    spec: ModelSpec
    device: str = "cpu"
    dtype: str = "float32"
    max_slots: int = 8
    max_len: int = 2048
    seed: int = 0
    temperature: float = 0.0
    top_p: float = 1.0
    host_outputs: bool = True   # draft probabilities as numpy (they cross a pipe); False:
                                # a tensor left on the device (thread / inline workers)
    compile: str = "off"        # the layers' pass through torch.compile: "off", "default"
                                # (inductor), "reduce-overhead" (inductor + CUDA graphs),
                                # "eager" (dynamo tracing only: what CPU tests can afford)
    pack_weights: bool = True   # CPU, compile off: linear weights in oneDNN's packed layout
                                # (`runtime.cpu_linear`); False: plain nn.Linear
    passes: str = "auto"        # a `runtime.pass_modes.PASS_MODES` name: "dynamic"
                                # (host-planned shapes, eager), "static" (bucketed static
                                # passes, eager), "graphs" (captured as CUDA graphs at start),
                                # "fused" (compiled once per pass kind, then graphs on CUDA),
                                # "-k": the drafter's k passes in one graph; "auto": fused-k on
                                # CUDA (graphs with compile default), else dynamic
                                # (`resolve_passes`)
    static_widths: tuple[tuple[int, bool], ...] = ((1, False),)   # (tokens per row,
                                # only_last) of the static passes: the controller sets them
                                # per role (target: 1 and k + 1; drafter: 1 and k + 1, last only)
    uniform: bool = False       # static passes: every pass one shape (batch-invariant numerics)
    draft_k: int = 0            # the drafter's k (the controller sets it): with a "-k" pass
                                # mode, a greedy drafting phase of k proposals is one callable


def resolve_passes(passes: str, device_type: str, compile_mode: str) -> str:
    """``auto``: on CUDA the fused passes with the drafter's k passes in one graph
    (`pass_modes.CUDA_DEFAULT_PASSES`; with ``--compile default``, graphs of passes compiled
    per shape, as asked), dynamic on CPU; graphs need CUDA, and reduce-overhead makes graphs
    of its own (one-line errors)."""
    if passes not in PASSES:
        raise ValueError(f"passes: must be one of {', '.join(PASSES)}, got {passes!r}")
    if passes == "auto":
        if device_type != "cuda" or compile_mode not in ("off", "default"):
            return "dynamic"
        return CUDA_DEFAULT_PASSES if compile_mode == "off" else "graphs"
    if PASS_MODES[passes].needs_cuda and device_type != "cuda":
        raise ValueError(f"passes: {passes} need a CUDA device, got {device_type}")
    if PASS_MODES[passes].static and compile_mode == "reduce-overhead":
        raise ValueError(f"passes: {passes} makes its own CUDA graphs; --compile "
                         f"reduce-overhead would make others (use default: inductor's fused "
                         f"kernels inside psdlab's graphs)")
    return passes


def fused_backend(fused: bool, compile_mode: str) -> str | None:
    """The torch.compile backend of fused passes: inductor (its fused kernels), or dynamo's
    tracing alone with ``--compile eager``; None when the mode is not fused."""
    if not fused:
        return None
    return "eager" if compile_mode == "eager" else "inductor"


def _dtype(name: str) -> torch.dtype:
    return {"float32": torch.float32, "float16": torch.float16,
            "bfloat16": torch.bfloat16}[name]


def padded_width(batch: int, width: int, pad_slow_gemm: bool) -> int:
    """Row width of a forward over ``batch`` ragged rows of at most ``width`` tokens: widened
    so that batch x width leaves `SLOW_GEMM_ROWS` when ``pad_slow_gemm``."""
    if pad_slow_gemm and batch * width in SLOW_GEMM_ROWS:
        return -(-SLOW_GEMM_ROWS.stop // batch)
    return width


class ModelRunner:
    """One model + KV cache + seeded generator on one device."""

    def __init__(self, cfg: RunnerConfig):
        self.cfg = cfg
        self.device = torch.device(cfg.device)
        dtype = _dtype(cfg.dtype)
        self.model, self.model_cfg = cfg.spec.load(self.device, dtype)
        self.model.eval()
        self.packed_linears = 0
        self.passes = resolve_passes(cfg.passes, self.device.type, cfg.compile)
        mode = PASS_MODES[self.passes]
        if (self.device.type == "cpu" and cfg.compile == "off" and cfg.pack_weights
                and not mode.fused):                # the compiler traces plain nn.Linear
            from psdlab.runtime.cpu_linear import pack_linears
            self.packed_linears = pack_linears(self.model)
        if hasattr(self.model, "make_cache"):
            if mode.static:
                raise ValueError("passes: static passes need psdlab's own model; use dynamic")
            self.cache = self.model.make_cache(cfg.max_slots, cfg.max_len, self.device, dtype)
        else:
            from psdlab.runtime.kv_cache import KVCache
            self.cache = KVCache(self.model_cfg, cfg.max_slots, cfg.max_len, self.device, dtype,
                                 scratch=mode.static)
        self.vocab_size = int(self.model_cfg.vocab_size)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(int(cfg.seed))
        self.greedy = float(cfg.temperature) == 0.0
        self._params: SamplingParams | None = None
        # MKL's slow row counts; packed (oneDNN) products have none
        self.pad_slow_gemm = (self.device.type == "cpu" and dtype == torch.float32
                              and not self.packed_linears)
        if cfg.compile != "off" and not mode.static:
            self._compile(cfg.compile)
        self.static: Any = None
        #: unseen tokens a drafting pass takes at once (the rest is caught up first)
        self.draft_tail = RAGGED_TAIL
        if mode.static:
            self.draft_tail = max(w for w, _last in cfg.static_widths)
            from psdlab.runtime.pass_graphs import (PassPlan, StaticPasses, capture_cuda,
                                                    capture_eager)
            capture = (capture_cuda() if mode.graphs and self.device.type == "cuda"
                       else capture_eager)
            self.static = StaticPasses(self.model, self.cache,
                                       PassPlan(cfg.static_widths, cfg.max_slots, cfg.uniform,
                                                cfg.compile, fused=fused_backend(
                                                    mode.fused, cfg.compile),
                                                draft_k=cfg.draft_k if mode.draft_loop else 0),
                                       capture)
            self._warm_prefill()

    def _warm_prefill(self) -> None:
        """Run every eager prefill shape once (width x key span bucket; slot 0, then freed),
        before any timed step: a new attention shape can build a new kernel plan."""
        for w in PREFILL_BUCKETS:
            for span in span_buckets(self.cfg.max_len):
                if w <= span:
                    with torch.inference_mode():
                        self.model.forward_rows([[0] * w], self.cache, [0], width=w, span=span)
                    self.cache.reset([0])

    def _compile(self, mode: str) -> None:
        """Run the model's layer stack (`Transformer._run`: embeddings, blocks, no host logic)
        through torch.compile; shapes vary with every step, so ``dynamic=True``.  With
        "reduce-overhead" on CUDA each new shape is captured once as a CUDA graph and replayed
        after: one launch per pass instead of one per kernel."""
        if mode not in COMPILE_MODES:
            raise ValueError(f"compile: must be one of {', '.join(COMPILE_MODES)}, got {mode!r}")
        kw: dict[str, Any] = {"backend": "eager"} if mode == "eager" else (
            {} if mode == "default" else {"mode": mode})
        self.model._run = torch.compile(self.model._run, dynamic=True, **kw)

    # ------------------------------------------------------------------ helpers
    @property
    def params(self):
        if self._params is None:
            from psdlab.runtime.sampling import SamplingParams
            self._params = SamplingParams(temperature=float(self.cfg.temperature),
                                          top_p=float(self.cfg.top_p))
        return self._params

    def info(self) -> dict[str, Any]:
        return {"vocab_size": self.vocab_size, "device": str(self.device),
                "max_len": int(self.cfg.max_len), "packed_linears": self.packed_linears,
                "passes": self.passes,
                **(self.static.info() if self.static is not None else {})}

    def _slots(self, slots: Sequence[int]) -> torch.Tensor:
        return host_to_device(torch.tensor(list(slots), dtype=torch.long), self.device)

    def _rollback(self, slots: Sequence[int], keep: Sequence[int]) -> None:
        lengths = [self.cache.host_lengths[s] for s in slots]
        if any(k > cur for k, cur in zip(keep, lengths)):
            raise RuntimeError("rollback asked to grow a cache; controller bookkeeping is off")
        rows = [(s, k) for s, k, cur in zip(slots, keep, lengths) if k != cur]
        if rows:
            self.cache.truncate([s for s, _ in rows], [k for _, k in rows])

    def _forward(self, slots: Sequence[int], rows: Sequence[Sequence[int]],
                 only_last: bool = False) -> torch.Tensor:
        """Append ragged token rows to their slots; logits [B, Tmax, V] (or [B, 1, V] at each
        row's last token with only_last)."""
        if self.static is not None:
            host_rows = [list(r) for r in rows]
            self.model.check_host_rows(self.cache, list(slots), host_rows)
            out = self.static.forward(list(slots), host_rows, only_last)
            if out is not None:
                return out
        width = padded_width(len(rows), max(len(r) for r in rows), self.pad_slow_gemm)
        span = None
        if self.static is not None:         # eager with static passes: a warmed shape
            width = next((b for b in PREFILL_BUCKETS if b >= width), width)
            need = max(self.cache.host_lengths[s] + len(r) for s, r in zip(slots, rows))
            span = next(b for b in span_buckets(self.cfg.max_len) if b >= min(
                need, self.cfg.max_len))
        with torch.inference_mode():
            return self.model.forward_rows([list(r) for r in rows], self.cache, list(slots),
                                           width=width, only_last=only_last, span=span)

    def _forward_next(self, slots: list[int], tokens: torch.Tensor) -> torch.Tensor:
        """One token per row, already on the device (the last pass's picks): no host copy."""
        if self.static is not None:
            self.model.check_host_rows(self.cache, slots, None)
            out = self.static.forward(slots, None, True, tokens=tokens)
            if out is not None:
                return out
        with torch.inference_mode():
            return self.model.forward_planned(tokens, self.cache, slots, [1] * len(slots),
                                              only_last=True)

    def _catch_up(self, slots: Sequence[int], rows: Sequence[Sequence[int]],
                  leave: int) -> list[list[int]]:
        """Feed all but the last ``leave`` tokens of each row, one slot at a time in chunks;
        return the tails still to feed."""
        tails = []
        for slot, row in zip(slots, rows):
            head = len(row) - leave
            for start in range(0, max(head, 0), PREFILL_CHUNK):
                self._forward([slot], [row[start:min(start + PREFILL_CHUNK, head)]], only_last=True)
            tails.append(list(row[max(head, 0):]))
        return tails

    def _probs(self, logits: torch.Tensor) -> torch.Tensor:
        from psdlab.runtime.sampling import logits_to_probs
        return logits_to_probs(logits.float(), self.params)

    def _pick(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Next token per row from logits [B, V] (argmax when greedy); probs when sampling."""
        if self.greedy:
            return logits.argmax(dim=-1), None
        from psdlab.runtime.sampling import sample
        probs = self._probs(logits)
        return sample(probs, self.generator).reshape(-1), probs

    # ------------------------------------------------------------------ commands
    def feed(self, slots: Sequence[int], keep: Sequence[int],
             rows: Sequence[Sequence[int]]) -> int:
        """Roll back to ``keep`` and append ``rows`` (no sampling); returns tokens fed."""
        self._rollback(slots, keep)
        self._catch_up(slots, rows, leave=PREFILL_RULES["drafter"].leave)
        return sum(len(r) for r in rows)

    def draft(self, slots: Sequence[int], keep: Sequence[int], rows: Sequence[Sequence[int]],
              ks: Sequence[int]) -> tuple[list[list[int]], np.ndarray | torch.Tensor | None]:
        """Propose ks[i] >= 1 tokens for each slot after appending rows[i] (>= 1 token).
        The cache ends holding rows + drafts[:k_i - 1].  Returns drafts and, when sampling,
        their probabilities [B, max k, V] (float32)."""
        self._rollback(slots, keep)
        # the unseen tokens (the bonus token, plus the last draft when all were accepted) go in
        # one batched ragged pass; only long rows (a rebuilt cache) are fed ahead slot by slot
        tails = self._catch_up(slots, rows, leave=self.draft_tail)
        looped = self._draft_loop(slots, tails, ks)
        if looped is not None:
            return looped
        logits = self._forward(slots, tails, only_last=True)[:, 0, :]
        B, kmax = len(slots), max(ks)
        picks = torch.zeros((B, kmax), dtype=torch.long, device=self.device)
        probs_out = (torch.zeros((B, kmax, self.vocab_size), dtype=torch.float32,
                                 device=self.device) if not self.greedy else None)
        active = list(range(B))
        for j in range(kmax):
            # the picks stay on the device: the next pass reads them there, and the host
            # reads all of them once, after the loop
            tok, probs = self._pick(logits)
            idx = self._slots(active) if len(active) < B else slice(None)
            picks[idx, j] = tok
            if probs_out is not None:
                assert probs is not None                   # sampling: _pick gives them
                probs_out[idx, j] = probs.float()
            active_next = [i for i in active if ks[i] > j + 1]
            if not active_next:
                break
            keep_rows = [active.index(i) for i in active_next]
            nxt = tok if len(keep_rows) == len(active) else tok[self._slots(keep_rows)]
            logits = self._forward_next([slots[i] for i in active_next], nxt[:, None])[:, 0, :]
            active = active_next
        host = picks.tolist()
        out = [[int(x) for x in row[:k]] for row, k in zip(host, ks)]
        if probs_out is not None and self.cfg.host_outputs:
            return out, probs_out.cpu().numpy()
        return out, probs_out

    def _draft_loop(self, slots: Sequence[int], tails: list[list[int]], ks: Sequence[int]
                    ) -> tuple[list[list[int]], None] | None:
        """A greedy drafting phase of one k for every row as one replay of the k-pass
        callable (`StaticPasses.draft`); None where there is none (sampling, rows of other
        k, no shape that fits): the caller runs the k passes one by one."""
        k = ks[0] if ks else 0
        if (self.static is None or not self.greedy or not self.static.loops
                or any(x != k for x in ks) or k != self.cfg.draft_k):
            return None
        self.model.check_host_rows(self.cache, list(slots), tails)
        self.cache.check_append(list(slots), [len(t) + k - 1 for t in tails])
        done = self.static.draft(list(slots), tails, k)
        if done is None:
            return None
        host = done[0].tolist()                 # the one device read, after the k passes
        return [[int(x) for x in row] for row in host], None

    def verify(self, slots: Sequence[int], keep: Sequence[int], rows: Sequence[Sequence[int]],
               drafts: Sequence[Sequence[int]], draft_probs: np.ndarray | torch.Tensor | None
               ) -> tuple[list[int], list[list[int]]]:
        """Append rows[i] (>= 1 pending token) and drafts[i] to each slot; return per sequence
        the accepted draft count and the emitted tokens (accepted drafts + bonus/correction).
        The cache ends holding rows + all drafts; the controller rolls back next time."""
        self._rollback(slots, keep)
        tails = self._catch_up(slots, rows, leave=PREFILL_RULES["target"].leave)
        ks = [len(d) for d in drafts]
        kmax = max(ks)
        logits = self._forward(slots, [t + list(d) for t, d in zip(tails, drafts)])
        # positions of the K+1 distributions: last pending token, then each draft
        idx = host_to_device(torch.tensor([[min(len(t) - 1 + j, len(t) - 1 + k)
                                        for j in range(kmax + 1)] for t, k in zip(tails, ks)],
                                      dtype=torch.long), logits.device)
        picked = torch.gather(logits, 1, idx.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
        if self.greedy:
            return self._verify_greedy(picked, drafts)
        return self._verify_sampled(picked, drafts, ks, draft_probs)

    def _verify_greedy(self, picked: torch.Tensor, drafts: Sequence[Sequence[int]]
                       ) -> tuple[list[int], list[list[int]]]:
        best = picked.argmax(dim=-1).tolist()          # the command's one device-to-host copy
        accepted, emitted = [], []
        for row, d in zip(best, drafts):
            a = 0
            while a < len(d) and d[a] == row[a]:
                a += 1
            accepted.append(a)
            emitted.append([int(x) for x in row[:a + 1]])
        return accepted, emitted

    def _verify_sampled(self, picked: torch.Tensor, drafts: Sequence[Sequence[int]],
                        ks: Sequence[int], draft_probs: np.ndarray | torch.Tensor | None
                        ) -> tuple[list[int], list[list[int]]]:
        B, kmax = len(drafts), max(ks)
        target_probs = self._probs(picked)
        if kmax == 0:
            from psdlab.runtime.sampling import sample
            toks = sample(target_probs[:, 0, :], self.generator).reshape(-1).tolist()
            return [0] * B, [[int(t)] for t in toks]
        from psdlab.runtime.rejection import rejection_sample
        draft_t = host_to_device(torch.tensor([list(d) + [0] * (kmax - len(d)) for d in drafts],
                                              dtype=torch.long), self.device)
        q = None
        if draft_probs is not None:      # numpy from a pipe, or a tensor on either device
            q = torch.as_tensor(draft_probs[:, :kmax]).to(self.device).float()
        num = host_to_device(torch.tensor(list(ks), dtype=torch.long), self.device)
        res = rejection_sample(draft_t, q, target_probs, num, self.generator)
        acc = res.accepted.tolist()
        toks = res.tokens.tolist()
        n_em = res.num_emitted.tolist()
        return [int(a) for a in acc], [[int(x) for x in toks[i][:n_em[i]]] for i in range(B)]

    def release(self, slots: Sequence[int]) -> None:
        if slots:
            self.cache.reset(list(slots))
