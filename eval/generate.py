"""Batched sampling: :func:`sample` on the CPU path, :class:`VLLMSampler` through vLLM (GPUs, or vLLM's CPU build).

One function, :func:`sample`, used by every evaluation, probe, cold-start and rejection sampler and the
reward models' pairs, so that all of them sample the same way. It runs :func:`eval.decode.decode` (a
KV-cache loop that drops finished rows) on the models it supports, the CPU default's among them, and
transformers' ``generate`` on any other.
"""

from __future__ import annotations

import torch
from tqdm.auto import tqdm

from data.faults import fault_point
from data.templates import prefilled_think
from data.timing import timed_as


@timed_as("sampling")
@torch.inference_mode()
def sample(
    model,
    tokenizer,
    prompts: list[str],
    *,
    n: int,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    batch_size: int,
    seed: int,
    desc: str = "sampling",
    progress: bool = True,
    use_decode: bool | None = None,
    processes: int | None = None,
    logits_processor: list | None = None,
) -> list[list[dict]]:
    """``n`` completions per prompt: ``[[{"text", "num_tokens", "truncated"}, …n], …prompts]``.

    Prompts are repeated ``n`` times and generated in batches of ``batch_size`` sequences, left-padded
    (a decoder-only model continues from the last position, so padding must be on the left).
    ``temperature == 0`` means greedy decoding. Special tokens are skipped in the text (as TRL does);
    the reasoning tags are ordinary tokens and survive. Batch ``b`` draws from a generator seeded with
    ``(seed, b)`` (the global torch RNG is left alone), so a call's samples depend on its seed and batch
    size alone, not on which process sampled which batch.
    ``use_decode``: force the KV-cache loop (True) or ``generate`` (False); None picks the loop when
    the model is one it supports.
    ``processes``: with the loop on the CPU, the batches are shared out between this many processes of
    one thread each (this one and forked copies, which share the weights); None = the recipe's
    ``sample_processes`` (``eval.decode.sample_processes``). Single-threaded processes sample
    faster than one process with as many threads, and a neighbour slows them in proportion
    (docs/speed.md).
    ``logits_processor``: transformers logits processors applied at every step (``eval.intervene``); they
    need ``generate``, one process.
    """
    from eval.decode import in_processes, sample_processes, supports

    if logits_processor and use_decode:
        raise ValueError("logits processors run in transformers' generate, not the KV-cache loop (use_decode)")
    fast = (supports(model) if use_decode is None else use_decode) and not logits_processor
    tokenizer.padding_side = "left"
    flat = [p for p in prompts for _ in range(n)]
    batches = [flat[start : start + batch_size] for start in range(0, len(flat), batch_size)]
    if processes is None:
        processes = sample_processes() if fast and model.device.type == "cpu" else 1
    processes = max(1, min(processes, len(batches)))
    stop_ids = stop_token_ids(model.generation_config, tokenizer)
    was_training = model.training
    model.eval()

    def one_batch(b: int) -> list[dict]:
        chunk = batches[b]
        batch_seed = (seed * 1_000_003 + b) % 2**63
        enc = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
        if fast:
            from eval.decode import decode

            generator = torch.Generator(device=model.device).manual_seed(batch_seed)
            return [{"text": tokenizer.decode(tokens, skip_special_tokens=True), "num_tokens": len(tokens),
                     "truncated": not stopped}
                    for tokens, stopped in decode(model, enc["input_ids"], enc["attention_mask"],
                                                  max_new_tokens=max_new_tokens, temperature=temperature,
                                                  top_p=top_p, stop_ids=stop_ids, generator=generator)]
        torch.manual_seed(batch_seed)  # generate draws from the global generator
        gen = model.generate(
            **enc,
            do_sample=temperature > 0,
            temperature=temperature if temperature > 0 else None,
            top_p=top_p if temperature > 0 else None,
            top_k=0 if temperature > 0 else None,  # transformers defaults top_k to 50: the protocol has none
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=stop_ids,
            **({"logits_processor": _processors(logits_processor)} if logits_processor else {}),
        )
        out = []
        for row in gen[:, enc["input_ids"].shape[1] :]:  # (batch, ≤ max_new_tokens): completion tokens only
            ended = torch.isin(row, torch.tensor(stop_ids, device=row.device)).nonzero()
            length = int(ended[0]) + 1 if len(ended) else len(row)
            out.append({"text": tokenizer.decode(row[:length], skip_special_tokens=True), "num_tokens": length,
                        "truncated": not len(ended)})
        return out

    results: list[list[dict] | None] = [None] * len(batches)
    bar = tqdm(total=len(flat), desc=desc, disable=not progress, unit="seq")

    def done(b: int, rows: list[dict]) -> None:
        fault_point("generate")
        results[b] = rows
        bar.update(len(rows))

    try:
        if processes == 1:
            for b in range(len(batches)):
                done(b, one_batch(b))
        else:
            in_processes(one_batch, len(batches), processes, done)
    finally:
        bar.close()
        model.train(was_training)
    out = [row for rows in results for row in rows]
    return [out[i * n : (i + 1) * n] for i in range(len(prompts))]


def _processors(processors: list):
    from transformers import LogitsProcessorList

    return LogitsProcessorList(processors)


def stop_token_ids(generation_config, tokenizer) -> list[int]:
    """The tokenizer's end-of-text and every end token of the model's generation config (a chat model
    ends its turn with ``<|im_end|>``), as TRL's GRPOTrainer collects them."""
    ids = generation_config.eos_token_id if generation_config is not None else None
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    return list(dict.fromkeys([tokenizer.eos_token_id, *ids]))


class VLLMSampler:
    """The same contract as :func:`sample`, through vLLM's offline engine (GPUs; vLLM's CPU build too).

    The engine never tokenizes: prompts go to it as token ids of ``tokenizer`` (the project's), and
    completions come back as ids that ``tokenizer`` decodes. vLLM would build its own tokenizer with
    ``AutoTokenizer``, which can split text differently from the one the model was trained with (the
    tiny model's comes back as a ``Qwen2Tokenizer``: ``data/tokenizer.py``), and sampling from other
    token ids is sampling another model. It stops at :func:`stop_token_ids`, as :func:`sample` does.

    Seeds: on CUDA each prompt's request carries its own seed, derived from the call's ``seed`` and the
    prompt's index, so a call's samples depend on its seed alone. vLLM's CPU backend refuses per-request
    seeds (``CPU Generator does not use offset``): there the engine's ``seed`` is set once when it
    starts, and a call's samples depend on the calls the engine served before it.

    ``tensor_parallel_size`` shards one model over GPUs; ``gpu_memory_utilization`` is the share of the
    GPU the engine may take (weights + KV cache; on the CPU backend, the share of host memory); what is
    already on the GPU (a policy mid-stage) must fit in the rest, or vLLM refuses to start.
    ``enforce_eager``: no CUDA graphs or compilation (a quicker start, slower decoding). The engine computes
    in the dtype the checkpoint was saved in, as transformers loads it (vLLM would cast fp32 to bf16).
    """

    def __init__(self, model_path: str, tokenizer, *, seed: int, tensor_parallel_size: int = 1,
                 gpu_memory_utilization: float = 0.9, max_model_len: int | None = None,
                 enforce_eager: bool = False, trust_remote_code: bool = False):
        try:
            from vllm import LLM
            from vllm.platforms import current_platform
        except ImportError:
            raise RuntimeError("the vLLM backend was requested but vllm is not installed; on a GPU machine "
                               "`make setup-gpu`, on a CPU `make setup-vllm` (vLLM's CPU build)") from None
        from transformers import AutoConfig, GenerationConfig

        self.tokenizer = tokenizer
        self.per_request_seeds = not current_platform.is_cpu()
        try:
            generation_config = GenerationConfig.from_pretrained(model_path)
        except OSError:  # a checkpoint without generation_config.json
            generation_config = None
        self.stop_ids = stop_token_ids(generation_config, tokenizer)
        # the dtype the checkpoint was saved in, as transformers loads it (vLLM's "auto" casts fp32 weights to bf16)
        dtype = getattr(AutoConfig.from_pretrained(model_path, trust_remote_code=trust_remote_code), "dtype", None)
        self.llm = LLM(model=model_path, tensor_parallel_size=tensor_parallel_size, seed=seed,
                       dtype=str(dtype).removeprefix("torch.") if dtype else "auto",
                       gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len,
                       enforce_eager=enforce_eager, skip_tokenizer_init=True, trust_remote_code=trust_remote_code)

    def close(self) -> None:
        """Shut the engine down and give its memory back (the next phase loads a model)."""
        shutdown_engine(getattr(self, "llm", None))
        self.llm = None
        free_memory()

    @timed_as("sampling")
    def __call__(self, prompts: list[str], *, n: int, temperature: float, top_p: float, max_new_tokens: int,
                 seed: int, **_) -> list[list[dict]]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if self.llm is None:
            raise RuntimeError("this vLLM sampler was closed")
        ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]

        def params(i: int) -> SamplingParams:
            return SamplingParams(n=n, temperature=temperature, top_p=top_p, max_tokens=max_new_tokens,
                                  stop_token_ids=self.stop_ids, detokenize=False,
                                  seed=(seed * 1_000_003 + i) % 2**31 if self.per_request_seeds else None)

        requests = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in ids],
                                     [params(i) for i in range(len(ids))], use_tqdm=False)
        return [
            [{"text": self.tokenizer.decode(c.token_ids, skip_special_tokens=True), "num_tokens": len(c.token_ids),
              "truncated": c.finish_reason == "length"} for c in request.outputs]
            for request in requests
        ]


def shutdown_engine(llm) -> None:
    """Stop a ``vllm.LLM``'s engine (its process, or its in-process core); None: nothing to stop."""
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is not None and hasattr(core, "shutdown"):
        core.shutdown()


def free_memory() -> None:
    """Collect what nothing refers to any more, and give CUDA's cached blocks back."""
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def make_sampler(backend: str, *, model=None, tokenizer=None, model_path: str | None = None, seed: int = 0,
                 batch_size: int = 64, tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.9,
                 max_model_len: int | None = None, enforce_eager: bool = False, trust_remote_code: bool = False,
                 logits_processor: list | None = None):
    """A function ``(prompts, n=, temperature=, top_p=, max_new_tokens=, seed=, desc=) -> completions``:
    ``model`` sampled by :func:`sample` (``transformers``), or the checkpoint ``model_path`` by vLLM's
    engine (``vllm``: :class:`VLLMSampler`, ``tokenizer`` the checkpoint's own). ``logits_processor``:
    transformers only (:func:`sample`).

    A prompt that ends inside an opened think block (a chat template that prefills ``<think>``,
    ``data.templates.prefilled_think``) gets that opening put back in front of each of its completions'
    texts, so every reader sees ``<think> … </think> …``; ``num_tokens`` still counts generated tokens."""
    if backend == "vllm" and logits_processor:
        raise ValueError("logits processors are for the transformers backend")
    if backend == "vllm":
        engine_sample = VLLMSampler(model_path, tokenizer, seed=seed, tensor_parallel_size=tensor_parallel_size,
                                    gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len,
                                    enforce_eager=enforce_eager, trust_remote_code=trust_remote_code)
    elif backend == "transformers":
        def engine_sample(prompts, **kw):
            return sample(model, tokenizer, prompts, batch_size=batch_size, logits_processor=logits_processor, **kw)
    else:
        raise ValueError(f"unknown generation backend {backend!r} (transformers or vllm)")

    def sampler(prompts, **kw):
        completions = engine_sample(prompts, **kw)
        for prompt, group in zip(prompts, completions, strict=True):
            prefill = prefilled_think(prompt)
            for c in group if prefill else ():
                c["text"] = prefill + c["text"]
        return completions

    sampler.close = getattr(engine_sample, "close", lambda: None)  # vLLM's engine frees its GPU memory
    return sampler
