"""Training data for the drafter: prompts the target writes itself, and its own answers to them.

The shipped prompt set is small (and its held-out part must stay unseen), so the distillation
data come from the target itself. ``synth_prompts`` opens a user turn in the chat template with a
style opener ("Write a Python function that", "Summarise the following paragraph ...", ...) and
lets the target finish the user's request by sampling; ``answer`` then generates the target's
greedy answer to each request. Both run batched, in bf16 (several times faster than fp32 on CPUs
with AMX): the texts only need to be on the target's own distribution, the teacher signal for
training (``features``) is computed separately. ``features`` runs the target teacher-forced over
right-padded batches (no mask needed: a causal model never looks at the padding after a sequence)
and keeps, per sequence, the kept layers' output (the drafter's input) and the final normed hidden
state (the target's next-token distribution, through the shared head).
"""

from __future__ import annotations

import random
from typing import Any, Sequence

import torch

from psdlab.runtime.distill import Features, TokenSeq

# User-turn openers per style; the target completes the request.  They cover the shipped styles
# (chat, code, math, summarise, creative) without copying any shipped prompt.
OPENERS: dict[str, tuple[str, ...]] = {
    "chat": ("What", "How do", "How can I", "Why do", "Why is", "Can you explain", "What are some",
             "Give me three", "What is the difference between", "I'm", "Is it", "Which", "Tell me"),
    "code": ("Write a Python function that", "Write a Python class", "Write a Python program that",
             "Explain what", "Write a JavaScript function that", "Write a SQL query that",
             "How do I", "Explain how a Python", "Write a function that", "Fix this Python code:"),
    "math": ("What is", "A rectangle", "If a", "Solve", "Calculate", "Explain how to find",
             "A shop sells", "How many", "A car travels", "Convert"),
    "summarise": ("Summarise the following paragraph in two sentences:\n\n",
                  "Summarize this text:\n\n", "Give a one-sentence summary of the following:\n\n"),
    "creative": ("Write a short poem about", "Write a short story about", "Write a friendly email",
                 "Write a short message to", "Describe", "Write a haiku about",
                 "Write a thank-you note", "Write a limerick about"),
}


def _user_prefix(tok: Any) -> str:
    """The chat template's text up to where the user's request starts."""
    marker = "\u2063PSDLAB\u2063"
    text = tok.apply_chat_template([{"role": "user", "content": marker}], tokenize=False,
                                   add_generation_prompt=False)
    return text[:text.index(marker)]


def _batched_generate(model: Any, tok: Any, texts: Sequence[str], max_new_tokens: int,
                      sample: bool, seed: int, batch: int) -> list[list[int]]:
    """Left-padded batched generation; returns each text's new tokens (cut after EOS)."""
    from tqdm import tqdm

    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    eos = tok.eos_token_id
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # similar lengths together
    out: list[list[int]] = [[] for _ in texts]
    side, tok.padding_side = tok.padding_side, "left"
    kw = (dict(do_sample=True, temperature=1.0, top_p=0.95, top_k=0) if sample
          else dict(do_sample=False))
    try:
        for b in tqdm(range(0, len(order), batch), desc="generate", leave=False):
            idx = order[b:b + batch]
            enc = tok([texts[i] for i in idx], return_tensors="pt", padding=True,
                      add_special_tokens=False)
            torch.manual_seed(seed + b)
            with torch.no_grad():
                res = model.generate(**enc, max_new_tokens=max_new_tokens, pad_token_id=pad, **kw)
            for row, i in zip(res[:, enc["input_ids"].shape[1]:].tolist(), idx):
                out[i] = row[:row.index(eos) + 1] if eos in row else row
    finally:
        tok.padding_side = side
    return out


def synth_prompts(model: Any, tok: Any, n: int, *, seed: int = 0, batch: int = 64,
                  exclude: Sequence[str] = ()) -> list[str]:
    """``n`` user requests written by the model itself, spread evenly over the styles' openers.

    Requests that did not finish within their token budget are kept (they read as long
    requests); exact copies of ``exclude`` (the held-out prompts) and duplicates are dropped.
    """
    rng = random.Random(seed)
    styles = sorted(OPENERS)
    openers = [rng.choice(OPENERS[styles[i % len(styles)]]) for i in range(n)]
    prefix = _user_prefix(tok)
    texts = [prefix + o for o in openers]
    gen_short = _batched_generate(model, tok, texts, 64, True, seed, batch)
    eos = tok.eos_token_id
    seen, banned, out = set(), {e.strip() for e in exclude}, []
    for opener, new in zip(openers, gen_short):
        body = tok.decode([t for t in new if t != eos], skip_special_tokens=True)
        request = (opener + body).strip()
        if request in banned or request in seen or len(body.strip()) < 3:
            continue
        seen.add(request)
        out.append(request)
    return out


def answer(model: Any, tok: Any, requests: Sequence[str], max_new_tokens: int, *,
           batch: int = 64, seed: int = 0, sample: bool = False) -> list[TokenSeq]:
    """The model's answers (greedy unless ``sample``) to chat requests, as prompt + answer
    tokens."""
    texts = [tok.apply_chat_template([{"role": "user", "content": r}], tokenize=False,
                                     add_generation_prompt=True) for r in requests]
    gens = _batched_generate(model, tok, texts, max_new_tokens, sample, seed, batch)
    out = []
    for text, gen in zip(texts, gens):
        prompt = tok(text, add_special_tokens=False).input_ids
        if gen:
            out.append(TokenSeq(tuple(prompt), tuple(gen)))
    return out


@torch.no_grad()
def features(target: Any, seqs: Sequence[TokenSeq], n_kept: int, *,
             batch: int = 16) -> Features:
    """Kept-layer output and final normed hidden state per sequence (fp32 copies, CPU).

    Runs ``target`` (in whatever dtype it is loaded) over right-padded batches of similar length.
    """
    from tqdm import tqdm

    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i].ids))
    hidden: list[Any] = [None] * len(seqs)
    final: list[Any] = [None] * len(seqs)
    for b in tqdm(range(0, len(order), batch), desc="features", leave=False):
        idx = order[b:b + batch]
        width = max(len(seqs[i].ids) for i in idx)
        ids = torch.zeros((len(idx), width), dtype=torch.long)
        for r, i in enumerate(idx):
            ids[r, :len(seqs[i].ids)] = torch.tensor(seqs[i].ids)
        res = target.model(input_ids=ids, output_hidden_states=True)
        for r, i in enumerate(idx):
            n = len(seqs[i].ids)
            hidden[i] = res.hidden_states[n_kept][r, :n].float().clone()
            final[i] = res.last_hidden_state[r, :n].float().clone()
    return Features(hidden, final, [len(s.prompt) - 1 for s in seqs])


def _shard_worker(job: tuple[str, int, int, int, int, int, tuple[str, ...], tuple[str, ...]]
                  ) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """One process's share of ``generate_data`` (pinned to one core, one torch thread)."""
    import os

    from transformers import AutoModelForCausalLM, AutoTokenizer

    target_dir, shard, shards, n_prompts, max_new_tokens, seed, shipped, held = job
    if hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[shard % len(cores)]})
    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(target_dir)
    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.bfloat16).eval()
    n_own = n_prompts // shards + (1 if shard < n_prompts % shards else 0)
    requests = synth_prompts(model, tok, n_own, seed=seed + 7919 * shard, exclude=held)
    mine = [t for i, t in enumerate(shipped) if i % shards == shard]
    seqs = answer(model, tok, mine + requests, max_new_tokens, seed=seed + shard)
    return [(s.prompt, s.gen) for s in seqs]


def generate_data(target_dir: str, n_prompts: int, max_new_tokens: int, *, seed: int = 0,
                  shipped: Sequence[str] = (), held: Sequence[str] = (),
                  workers: int = 2) -> list[TokenSeq]:
    """Requests written by the target and its greedy answers (plus answers to ``shipped``),
    split over ``workers`` processes, one per core.  Deterministic for a given ``workers``."""
    import multiprocessing as mp

    jobs = [(str(target_dir), w, workers, n_prompts, max_new_tokens, seed, tuple(shipped),
             tuple(held)) for w in range(workers)]
    if workers == 1:
        parts = [_shard_worker(jobs[0])]
    else:
        with mp.get_context("spawn").Pool(workers) as pool:
            parts = pool.map(_shard_worker, jobs)
    return [TokenSeq(tuple(p), tuple(g)) for part in parts for p, g in part]
