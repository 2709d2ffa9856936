"""Llama-family decoder in plain torch (gpt-fast style), with a slot-based KV cache.

Covers Llama 2/3 (incl. llama3 RoPE scaling), SmolLM2, Qwen2 (q/k/v bias) and Qwen3 (q/k
RMSNorm) through the switches of `ModelConfig`: RMSNorm, RoPE in Hugging Face's rotate_half
convention, SwiGLU MLP, grouped-query attention via `scaled_dot_product_attention` with an
explicit boolean mask, optionally tied embeddings.  Numerics follow transformers' own
implementation (RMSNorm in fp32, RoPE angles in fp32) so logits match it to ~1e-6 in fp32.

Parameter names equal the Hugging Face ones without the leading "model.", except that q/k/v are
fused into `self_attn.wqkv` and gate/up into `mlp.w13` (see `runtime.weights`).
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from psdlab.runtime.model_config import ModelConfig
from psdlab.runtime.kv_cache import KVCache

KVHook = Callable[[int, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


class RMSNorm(nn.Module):
    """RMSNorm computed in fp32 and cast back, as transformers does."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def rope_inv_freq(cfg: ModelConfig) -> torch.Tensor:
    """Inverse RoPE frequencies [head_dim/2] in fp32 (default or llama3-scaled)."""
    d = cfg.head_dim
    steps = torch.arange(0, d, 2, dtype=torch.int64, device="cpu").float()
    inv = 1.0 / (cfg.rope_theta ** (steps / d))
    sc = cfg.rope_scaling
    if sc is None:
        return inv
    low_wavelen = sc.original_max_position_embeddings / sc.low_freq_factor
    high_wavelen = sc.original_max_position_embeddings / sc.high_freq_factor
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wavelen, inv / sc.factor, inv)
    smooth = ((sc.original_max_position_embeddings / wavelen - sc.low_freq_factor)
              / (sc.high_freq_factor - sc.low_freq_factor))
    smoothed = (1 - smooth) * scaled / sc.factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    """GQA self-attention with fused qkv; the KV hook decides where keys/values come from."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        qkv_out = (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim
        self.wqkv = nn.Linear(cfg.hidden_size, qkv_out, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(cfg.num_heads * cfg.head_dim, cfg.hidden_size,
                                bias=cfg.o_proj_bias)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: torch.Tensor, layer: int, kv_hook: KVHook) -> torch.Tensor:
        b, t, _ = x.shape
        d = self.head_dim
        q, k, v = self.wqkv(x).split([self.n_heads * d, self.n_kv * d, self.n_kv * d], dim=-1)
        q, k, v = q.view(b, t, -1, d), k.view(b, t, -1, d), v.view(b, t, -1, d)
        if self.q_norm is not None and self.k_norm is not None:     # both or neither (qk_norm)
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        keys, values = kv_hook(layer, k, v)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask,
                                             enable_gqa=self.n_heads != self.n_kv)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.n_heads * d))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x)), gate and up fused into w13."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.w13 = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=cfg.mlp_bias)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=cfg.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w13(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: torch.Tensor, layer: int, kv_hook: KVHook) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, layer, kv_hook)
        return x + self.mlp(self.post_attention_layernorm(x))


class Transformer(nn.Module):
    """Decoder-only LM; `forward` appends ragged per-row tokens to cache slots."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.tie_weights()
        self._inv_freq_cpu = rope_inv_freq(cfg)
        self._inv_freq: dict[torch.device, torch.Tensor] = {}

    def tie_weights(self) -> None:
        if self.cfg.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def _rope(self, pos: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [B, 1, T, head_dim] for integer positions pos [B, T]."""
        inv = self._inv_freq.get(pos.device)
        if inv is None:
            inv = self._inv_freq.setdefault(pos.device, self._inv_freq_cpu.to(pos.device))
        freqs = pos[..., None].float() * inv
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(x))

    def _run(self, tokens: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor,
             kv_hook: KVHook) -> torch.Tensor:
        x = self.embed_tokens(tokens)
        cos, sin = self._rope(pos, x.dtype)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, mask, i, kv_hook)
        return x

    @torch.no_grad()
    def forward_no_cache(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits [B, T, vocab] of full sequences (causal, no padding, no cache)."""
        b, t = tokens.shape
        pos = torch.arange(t, device=tokens.device).expand(b, t)
        mask = torch.ones(t, t, dtype=torch.bool, device=tokens.device).tril()[None, None]
        return self._head(self._run(tokens, pos, mask, lambda _i, k, v: (k, v)))

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, cache: KVCache, slots: torch.Tensor,
                num_new: torch.Tensor | None = None, only_last: bool = False) -> torch.Tensor:
        """Append tokens[b, :num_new[b]] to slot slots[b] and return logits [B, T, vocab].

        Positions t >= num_new[b] are padding (any value; their logits are meaningless).
        With only_last=True, returns [B, 1, vocab]: the logits at position num_new[b] - 1.
        Slots in one call must be distinct.  Advances cache.lengths[slots] by num_new.
        The generic entry point: it reads its arguments back to the host to check them (the
        runner calls `forward_rows` / `forward_planned`, which need no device-to-host copy).
        """
        dev = cache.device
        tokens = tokens.to(dev)
        b, t = tokens.shape
        host_slots = [int(x) for x in torch.as_tensor(slots).reshape(-1).tolist()]
        new = ([t] * b if num_new is None else
               [int(x) for x in torch.as_tensor(num_new).reshape(-1).tolist()])
        if len(new) != b or any(n < 0 or n > t for n in new):
            raise ValueError(f"num_new: expected {b} values in [0, {t}], got {new}")
        self._check_rows(cache, host_slots, b, new)
        if b == 0:
            return torch.empty(0, 1 if only_last else t, self.cfg.vocab_size, device=dev)
        steps = torch.arange(t, device=dev)
        real = tokens[steps[None] < torch.tensor(new, device=dev)[:, None]]
        if real.numel() and (int(real.min()) < 0 or int(real.max()) >= self.cfg.vocab_size):
            raise ValueError(f"tokens: ids must be in [0, {self.cfg.vocab_size - 1}], got "
                             f"{int(real.min())}..{int(real.max())}")
        return self.forward_planned(tokens, cache, host_slots, new, only_last)

    @torch.no_grad()
    def forward_rows(self, rows: list[list[int]], cache: KVCache, slots: list[int],
                     width: int | None = None, only_last: bool = False,
                     span: int | None = None) -> torch.Tensor:
        """`forward` for ragged token rows given as host lists (padded to ``width``): checked
        on the host, then one host-to-device copy of the tokens.  ``span``: attend over at
        least this many key places (masked past each row's length: a fixed attention shape)."""
        b = len(rows)
        width = max([len(r) for r in rows] + [width or 0, 1])
        self.check_host_rows(cache, slots, rows)
        flat = [0] * (b * width)
        for i, r in enumerate(rows):
            flat[i * width:i * width + len(r)] = r
        tokens = host_to_device(torch.tensor(flat, dtype=torch.long), cache.device).view(b, width)
        return self.forward_planned(tokens, cache, slots, [len(r) for r in rows], only_last,
                                    span)

    def check_host_rows(self, cache: KVCache, slots: list[int],
                        rows: list[list[int]] | None) -> None:
        """The host checks of a pass over ``rows`` (None: one device token per slot)."""
        lens = [len(r) for r in rows] if rows is not None else [1] * len(slots)
        self._check_rows(cache, slots, len(slots), lens)
        for r in rows or []:
            if r and (min(r) < 0 or max(r) >= self.cfg.vocab_size):
                raise ValueError(f"tokens: ids must be in [0, {self.cfg.vocab_size - 1}], "
                                 f"got {min(r)}..{max(r)}")

    def _check_rows(self, cache: KVCache, slots: list[int], b: int, num_new: list[int]) -> None:
        cache.check_slots(slots)
        if len(slots) != b or len(set(slots)) != b:
            raise ValueError(f"slots: expected {b} distinct slots (one per row), got {slots}")
        cache.check_append(slots, num_new)

    @torch.no_grad()
    def forward_planned(self, tokens: torch.Tensor, cache: KVCache, slots: list[int],
                        num_new: list[int], only_last: bool = False,
                        span: int | None = None) -> torch.Tensor:
        """The forward itself, planned on the host: ``tokens`` [B, T] is on the device (it may
        be the previous pass's argmax), ``slots`` and ``num_new`` are host ints already checked
        (`forward`, `forward_rows`).  Every shape and index comes from the host lists and
        ``cache.host_lengths``; the device gets them in one copy, so nothing here waits for the
        device (no ``.item()``, ``.tolist()``, boolean indexing or ``nonzero``)."""
        dev = cache.device
        b, t = tokens.shape
        if b == 0:
            return torch.empty(0, 1 if only_last else t, self.cfg.vocab_size, device=dev)
        start = [cache.host_lengths[x] for x in slots]
        new_len = [a + n for a, n in zip(start, num_new)]
        span = min(max(max(new_len), 1, span or 0), cache.max_len)
        rows = [i for i, n in enumerate(num_new) for _ in range(n)]
        cols = [j for n in num_new for j in range(n)]
        last = [max(n - 1, 0) for n in num_new]
        meta = host_to_device(torch.tensor(slots + start + num_new + last + rows + cols,
                                       dtype=torch.long), dev)
        slots_t, start_t, num_t, last_t = (meta[i * b:(i + 1) * b] for i in range(4))
        n_rows = len(rows)
        rows_t, cols_t = meta[4 * b:4 * b + n_rows], meta[4 * b + n_rows:]
        steps = torch.arange(t, device=dev)
        pos = start_t[:, None] + steps                         # [B, T]
        valid = steps[None] < num_t[:, None]                   # [B, T]
        new_len_t = start_t + num_t
        keys = torch.arange(span, device=dev)
        # causal within the slot; key 0 always visible so empty/padding rows never go NaN
        mask = ((keys <= pos[:, :, None]) & (keys < new_len_t[:, None, None])) | (keys == 0)
        contiguous = slots == list(range(slots[0], slots[0] + b))
        hook = _cache_hook(cache, slots_t, pos, rows_t, cols_t, span,
                           slots[0] if contiguous else None)
        x = self._run(torch.where(valid, tokens, 0), pos, mask[:, None], hook)
        cache.advance(slots, slots_t, new_len, new_len_t)
        if only_last:
            x = x[torch.arange(b, device=dev), last_t][:, None]
        return self._head(x)


def pinned(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``host`` in pinned memory when it goes to a CUDA device (so the copy does not make the
    host wait), else as it is."""
    return host.pin_memory() if device.type == "cuda" else host


def host_to_device(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """One host-to-device copy that does not make the host wait (pinned memory on CUDA)."""
    if device.type == "cuda":
        return pinned(host, device).to(device, non_blocking=True)
    return host


def _cache_hook(cache: KVCache, slots: torch.Tensor, pos: torch.Tensor, rows: torch.Tensor,
                cols: torch.Tensor, span: int, first: int | None) -> KVHook:
    """KV hook that writes the valid new K/V (positions ``rows``, ``cols``) into the cache and
    reads each row's slot back (a slice when the slots are ``first``, ``first + 1``, ...)."""
    w_slot, w_pos = slots[rows], pos[rows, cols]
    b = slots.numel()

    def hook(layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        kc, vc = cache.k[layer], cache.v[layer]
        kc[w_slot, :, w_pos] = k.transpose(1, 2)[rows, cols].to(kc.dtype)
        vc[w_slot, :, w_pos] = v.transpose(1, 2)[rows, cols].to(vc.dtype)
        if first is not None:
            keys, values = kc[first:first + b, :, :span], vc[first:first + b, :, :span]
        else:
            keys, values = kc[slots, :, :span], vc[slots, :, :span]
        return keys.to(k.dtype), values.to(v.dtype)        # no-op unless cache dtype differs

    return hook
