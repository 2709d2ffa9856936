"""Self-distillation of the drafter from the target, and the exact greedy-SD acceptance measure.

Training data are the target's own continuations of the training prompts (greedy plus a few
sampled ones). The drafter keeps the target's first layers frozen, so their output is computed
once (``Features.hidden``) together with the target's final hidden state (``Features.final``,
after the final norm); training then only runs the new layers and the shared LM head, with the
KL divergence from the target's next-token distribution as the loss.

``acceptance_walk`` turns per-position agreement into greedy speculative decoding: with greedy
drafting and greedy verification, draft token j is only looked at if drafts 1..j-1 matched the
target, and then the drafter's context equals the target's own sequence. So the number accepted
at a step starting at position p is the run of consecutive positions p, p+1, ... (at most k) at
which the drafter's teacher-forced argmax equals the target's token. This is exactly what a
draft-k-then-verify loop produces (``literal_greedy_sd`` runs that loop, for the tests).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from psdlab.analysis.checks import check_int


@dataclass(frozen=True)
class TokenSeq:
    """One training or evaluation sequence: prompt token ids and the target's continuation."""

    prompt: tuple[int, ...]
    gen: tuple[int, ...]

    @property
    def ids(self) -> list[int]:
        return list(self.prompt) + list(self.gen)


@dataclass
class Features:
    """Per sequence: kept-layer output [T, H], target final normed hidden [T, H], first scored
    pos."""

    hidden: list[torch.Tensor]
    final: list[torch.Tensor]
    start: list[int]


def generate(model: Any, tok: Any, texts: Sequence[str], max_new_tokens: int, *,
             greedy: bool = True, temperature: float = 1.0, top_p: float = 0.95, batch: int = 8,
             seed: int = 0) -> list[TokenSeq]:
    """The model's continuations of chat-formatted texts (left-padded batches, stops at EOS)."""
    out: list[TokenSeq] = []
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    side, tok.padding_side = tok.padding_side, "left"
    try:
        for b in range(0, len(texts), batch):
            out += _generate_batch(model, tok, list(texts[b:b + batch]), max_new_tokens, pad,
                                   greedy, temperature, top_p, seed + b)
    finally:
        tok.padding_side = side
    return out


def _generate_batch(model: Any, tok: Any, chunk: list[str], max_new_tokens: int, pad: int,
                    greedy: bool, temperature: float, top_p: float, seed: int) -> list[TokenSeq]:
    """One left-padded ``generate`` call; prompts without padding, continuations up to EOS."""
    out: list[TokenSeq] = []
    enc = tok(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
    torch.manual_seed(seed)
    kw = dict(do_sample=False) if greedy else dict(do_sample=True, temperature=temperature,
                                                   top_p=top_p, top_k=0)
    with torch.no_grad():
        res = model.generate(**enc, max_new_tokens=max_new_tokens, pad_token_id=pad, **kw)
    width = enc["input_ids"].shape[1]
    for i in range(len(chunk)):
        mask = enc["attention_mask"][i].bool()
        prompt = enc["input_ids"][i][mask].tolist()
        gen = res[i, width:].tolist()
        if tok.eos_token_id in gen:
            gen = gen[:gen.index(tok.eos_token_id) + 1]
        out.append(TokenSeq(tuple(prompt), tuple(gen)))
    return out


def new_layers_hidden(drafter: Any, hidden: torch.Tensor, n_kept: int) -> torch.Tensor:
    """Drafter's final normed hidden [T, H] from the kept-layer output [T, H] (one sequence)."""
    h = hidden.unsqueeze(0)
    pos = torch.arange(h.shape[1]).unsqueeze(0)
    pe = drafter.model.rotary_emb(h, pos)
    for layer in drafter.model.layers[n_kept:]:
        h = layer(h, attention_mask=None, position_ids=pos, position_embeddings=pe)
        h = h[0] if isinstance(h, tuple) else h
    return drafter.model.norm(h)[0]


def new_layers_forward(drafter: Any, hidden: torch.Tensor, n_kept: int) -> torch.Tensor:
    """Drafter logits [T, V] from the kept-layer output [T, H]: new layers, final norm, LM head."""
    return drafter.lm_head(new_layers_hidden(drafter, hidden, n_kept))


def _head_bf16(drafter: Any, x: torch.Tensor) -> torch.Tensor:
    """The frozen tied LM head in bf16 (several times faster on CPUs with AMX), fp32 logits out."""
    w = getattr(drafter, "_psdlab_head_bf16", None)
    if w is None:
        w = drafter.lm_head.weight.detach().to(torch.bfloat16)
        drafter._psdlab_head_bf16 = w
    return F.linear(x.to(torch.bfloat16), w).float()


def distill_loss(drafter: Any, hidden: torch.Tensor, final: torch.Tensor, start: int,
                 n_kept: int, ce_weight: float = 0.0,
                 feat_weight: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Training loss over the scored positions, and the drafter's top-1 agreement.

    The loss is KL(target || drafter), plus ``ce_weight`` times the cross-entropy of the target's
    top-1 token (what greedy verification accepts), plus ``feat_weight`` times the smooth-L1
    distance between the drafter's and the target's final normed hidden states (EAGLE's
    feature loss: a dense signal per position).
    """
    h = new_layers_hidden(drafter, hidden, n_kept)[start:-1]
    logits = _head_bf16(drafter, h)
    with torch.no_grad():
        target_logits = _head_bf16(drafter, final[start:-1])
        target_logp = F.log_softmax(target_logits, dim=-1)
        target_top = target_logits.argmax(-1)
    logp = F.log_softmax(logits, dim=-1)
    loss = F.kl_div(logp, target_logp, log_target=True, reduction="batchmean")
    if ce_weight:
        loss = loss + ce_weight * F.nll_loss(logp, target_top)
    if feat_weight:
        loss = loss + feat_weight * F.smooth_l1_loss(h, final[start:-1])
    agree = (logits.argmax(-1) == target_top).float().mean()
    return loss, agree


def acceptance_walk(match: Sequence[bool], k: int) -> list[int]:
    """Accepted counts per greedy-SD step over a sequence whose per-position draft match is given.

    ``match[i]`` says whether the drafter, fed the target's tokens up to position i, predicts the
    target's token i. A step at position p accepts the run of matches from p (at most k, and at
    most the tokens left), emits that many plus one target token, and moves on.
    """
    check_int("k", k, minimum=1)
    counts: list[int] = []
    p, n = 0, len(match)
    while p < n:
        a = 0
        while a < k and p + a < n - 1 and match[p + a]:
            a += 1
        counts.append(a)
        p += a + 1
    return counts


def mean_acceptance_length(counts: Sequence[int]) -> float:
    """vLLM's mean acceptance length: 1 + accepted draft tokens / steps."""
    return 1.0 + sum(counts) / len(counts) if counts else float("nan")


@torch.no_grad()
def greedy_match(model: Any, target_tokens: torch.Tensor, ids: Sequence[int],
                 start: int) -> list[bool]:
    """Per generated position: does ``model``'s teacher-forced argmax equal ``target_tokens``?"""
    out = model(input_ids=torch.tensor([list(ids)]), use_cache=False)
    logits = out.logits[0, start:len(ids) - 1]
    return (logits.argmax(-1) == target_tokens).tolist()


@torch.no_grad()
def literal_greedy_sd(target: Any, drafter: Any, prompt: Sequence[int], n_new: int,
                      k: int) -> tuple[list[int], list[int]]:
    """Plain draft-k-then-verify greedy loop (no cache; slow; for tests).
    Returns (tokens, counts)."""
    seq, counts = list(prompt), []
    while len(seq) - len(prompt) < n_new:
        budget = min(k, n_new - (len(seq) - len(prompt)) - 1)
        draft = list(seq)
        for _ in range(budget):
            draft.append(int(drafter(input_ids=torch.tensor([draft])).logits[0, -1].argmax()))
        logits = target(input_ids=torch.tensor([draft])).logits[0, len(seq) - 1:]
        best = logits.argmax(-1).tolist()
        a = 0
        while a < budget and draft[len(seq) + a] == best[a]:
            a += 1
        seq.extend(draft[len(seq):len(seq) + a] + [best[a]])
        counts.append(a)
    return seq[len(prompt):], counts


def build_drafter_model(target: Any, spec: Any, mlp_width: int | None = None) -> Any:
    """In-memory drafter (LlamaForCausalLM) from a loaded target; new layers start as copies of
    the target layers named in ``spec.init_from`` (or of the last target layer), pruned to
    ``mlp_width`` MLP neurons when given (`prune_mlp`)."""
    from psdlab.runtime.drafter_build import drafter_config, drafter_state_from_target

    cfg = type(target.config).from_dict(drafter_config(target.config.to_dict(), spec))
    n_target = target.config.num_hidden_layers
    init = list(spec.init_from) or [n_target - 1] * spec.new_layers
    state = {k: v for k, v in target.state_dict().items() if k != "lm_head.weight"}
    extra = {}
    for j, src in enumerate(init[:spec.new_layers]):
        prefix = f"model.layers.{src}."
        for key, value in state.items():
            if key.startswith(prefix):
                layer = len(spec.kept_layers) + j
                extra[f"model.layers.{layer}.{key[len(prefix):]}"] = value.clone()
    drafter = type(target)(cfg)
    missing, _ = drafter.load_state_dict(drafter_state_from_target(state, spec, extra),
                                         strict=False)
    if [m for m in missing if m != "lm_head.weight"]:
        raise ValueError(f"drafter tensors not initialised: {missing[:4]}")
    drafter.tie_weights()
    if mlp_width is not None:
        for j in range(spec.new_layers):
            prune_mlp(drafter.model.layers[len(spec.kept_layers) + j].mlp, mlp_width)
    return drafter.eval()


@torch.no_grad()
def prune_mlp(mlp: Any, width: int) -> None:
    """Keep the ``width`` neurons of a SwiGLU MLP with the largest ||up row|| x ||down column||,
    moved to the front, and zero the others.  Zero neurons stay zero under training (their
    gradients are zero), so the layer can be stored slim
    (`runtime.drafter_build.slim_mlp_state`)."""
    n = mlp.down_proj.weight.shape[1]
    if not 1 <= width <= n:
        raise ValueError(f"mlp_width: must be in [1, {n}], got {width}")
    score = mlp.up_proj.weight.norm(dim=1) * mlp.down_proj.weight.norm(dim=0)
    order = torch.argsort(score, descending=True)
    for lin, axis in ((mlp.gate_proj, 0), (mlp.up_proj, 0), (mlp.down_proj, 1)):
        w = lin.weight.index_select(axis, order)
        w.narrow(axis, width, n - width).zero_()
        lin.weight.copy_(w)


def trainable_state(drafter: Any, n_kept: int, train_norm: bool) -> dict[str, torch.Tensor]:
    """The tensors the drafter adds beyond the target's: new layers (and the final norm)."""
    keys = {k for k in drafter.state_dict() if k.startswith("model.layers.")
            and int(k.split(".")[2]) >= n_kept}
    if train_norm:
        keys.add("model.norm.weight")
    return {k: v for k, v in drafter.state_dict().items() if k in keys}


def train_new_layers(drafter: Any, feats: Features, n_kept: int, *, epochs: int = 4,
                     lr: float = 3e-4, accum: int = 4, seed: int = 0, train_norm: bool = True,
                     progress: bool = True, ce_weight: float = 0.0,
                     feat_weight: float = 0.0) -> dict[str, float]:
    """AdamW on the new layers (and final norm) to minimise KL to the target; cosine schedule."""
    import math

    from tqdm import tqdm

    torch.manual_seed(seed)
    names = set(trainable_state(drafter, n_kept, train_norm))
    params = []
    for name, p in drafter.named_parameters():
        p.requires_grad_(name in names)
        if name in names:
            params.append(p)
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0, betas=(0.9, 0.98))
    n = len(feats.hidden)
    total = epochs * math.ceil(n / accum)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (min(1.0, (s + 1) / max(1, total // 20))
                        * 0.5 * (1 + math.cos(math.pi * s / total))))
    gen = torch.Generator().manual_seed(seed)
    drafter.train()
    bar = tqdm(total=epochs * n, desc="distil", disable=not progress)
    stats = {"kl": 0.0, "agree": 0.0}
    for _epoch in range(epochs):
        order = torch.randperm(n, generator=gen).tolist()
        kl_sum = agree_sum = 0.0
        for i, idx in enumerate(order):
            kl, agree = distill_loss(drafter, feats.hidden[idx], feats.final[idx],
                                     feats.start[idx], n_kept, ce_weight, feat_weight)
            (kl / accum).backward()
            kl_sum, agree_sum = kl_sum + kl.item(), agree_sum + agree.item()
            if (i + 1) % accum == 0 or i == n - 1:
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                opt.step()
                sched.step()
                opt.zero_grad(set_to_none=True)
            bar.update(1)
            bar.set_postfix(kl=f"{kl_sum / (i + 1):.3f}", agree=f"{agree_sum / (i + 1):.3f}")
        stats = {"kl": kl_sum / n, "agree": agree_sum / n}
    bar.close()
    drafter.eval()
    for p in drafter.parameters():
        p.requires_grad_(False)
    return stats


@torch.no_grad()
def feature_acceptance(drafter: Any, feats: Features, n_kept: int, k: int) -> tuple[float, float]:
    """Mean acceptance length and top-1 agreement on precomputed features (teacher-forced)."""
    counts: list[int] = []
    agree = total = 0
    for h, f, s in zip(feats.hidden, feats.final, feats.start):
        draft = new_layers_forward(drafter, h, n_kept)[s:-1].argmax(-1)
        ref = drafter.lm_head(f[s:-1]).argmax(-1)
        match = (draft == ref).tolist()
        counts += acceptance_walk(match, k)
        agree, total = agree + sum(match), total + len(match)
    return mean_acceptance_length(counts), agree / max(1, total)


def corpus_texts(seed: int = 0, n_code_files: int = 60) -> list[tuple[str, str]]:
    """Extra distillation text found on every Python install: (user request, assistant text).

    Prose from ``pydoc_data.topics`` (the Python reference manual) and code from standard-library
    modules. Only the target's predictions on this text are used, so any text teaches the drafter
    to imitate the target; the target's own continuations stay the main, on-style part.
    """
    import random
    import sysconfig

    from pydoc_data.topics import topics

    out = [("Explain this part of the Python language.", text)
           for _, text in sorted(topics.items())]
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.glob("*.py") if p.stat().st_size > 4000)
    for path in random.Random(seed).sample(files, min(n_code_files, len(files))):
        out.append(("Show me some Python code.",
                    path.read_text(encoding="utf-8", errors="replace")))
    return out


def corpus_sequences(tok: Any, n_chunks: int, chunk_tokens: int = 192,
                     seed: int = 0) -> list[TokenSeq]:
    """``n_chunks`` chat-formatted chunks of ``corpus_texts`` (a seeded choice), as sequences."""
    import random

    from psdlab.runtime.prompts import Prompt

    chunks: list[TokenSeq] = []
    for request, text in corpus_texts(seed):
        prompt = tok(Prompt("c", "corpus", request).chat_text(tok),
                     add_special_tokens=False).input_ids
        ids = tok(text, add_special_tokens=False).input_ids
        for i in range(0, len(ids) - chunk_tokens // 2, chunk_tokens):
            chunks.append(TokenSeq(tuple(prompt), tuple(ids[i:i + chunk_tokens])))
    random.Random(seed).shuffle(chunks)
    return chunks[:n_chunks]
