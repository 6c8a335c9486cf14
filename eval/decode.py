"""Batched sampling with a preallocated KV cache, for the decoder-only models the CPU default trains.

transformers' ``generate`` spends much of a small model's time on bookkeeping, not arithmetic: its
dynamic cache concatenates the whole key/value cache at every layer and step, and rows stay in the
batch until the longest has finished (docs/experiments.md has the profile). This loop does the same
sampling with less of it:

- **prefill**: the model's own forward pass over the left-padded prompts (``attention_mask`` and
  ``position_ids`` as ``generate`` builds them), whose keys and values are copied once into a cache
  preallocated for ``prompt + max_new_tokens`` positions. When the rows share a long prefix (the R1-Zero
  template's instructions are most of a tiny prompt), the prefix is computed once and its keys and
  values are shared by every row; each row's rest is computed after it with the same positions
  (:func:`_shared_prefix`). The same arithmetic as the padded batch, on fewer tokens;
- **decode**: one token per active row per step, computed with the model's own weights (embedding,
  RMSNorms, rotary embedding, head; each layer's query, key and value projections fused into one matmul,
  and the MLP's gate and up projections into another: :class:`_Fused`), attention written out as two
  matmuls over the filled part of the cache (for one query per row SDPA's kernel costs more than the
  arithmetic), the padding masked, the new key and value written in place;
- **finished rows leave the batch**: rows that emitted a stop token (or ran out of tokens) are
  dropped from the computation, and the cache is compacted once a quarter of the rows has finished;
- **sampling** as ``generate``'s warpers do it: temperature, then top-p (the smallest set of tokens
  whose probability reaches ``top_p``, at least one kept), then a draw from a generator seeded per call
  (temperature 0: greedy); :func:`_next_tokens` says how it is made cheap.

Greedy outputs equal ``generate``'s (``tests/test_decode.py``); sampled outputs follow the same
distribution but not the same random draws. Supported: the Qwen2/Llama family of architectures
(pre-norm decoder layers with ``self_attn.{q,k,v,o}_proj`` and ``mlp``, rotary embeddings computed by
``model.model.rotary_emb``); anything else raises ``NotImplementedError``, and callers use
``generate`` (``eval.generate.sample`` picks).

:func:`in_processes` shares such work out between forked single-threaded processes (docs/speed.md:
on the CPU they sample faster than one process with as many threads, and a busy neighbour slows them
in proportion); ``eval.generate.sample`` and :func:`fast_generate` use it.
"""

from __future__ import annotations

import math
import os

import torch
import torch.nn.functional as F

__all__ = ["decode", "fast_generate", "in_processes", "loop_can_sample", "sample_processes", "set_sample_processes",
           "supports"]

_COMPACT_SHARE = 0.25  # compact the cache once this share of the batch has finished

_sample_processes: int | None = None


def set_sample_processes(count: int | None) -> int:
    """Fix how many single-threaded processes the CPU sampler shares its batches out between (a stage sets
    the recipe's ``sample_processes`` before its body: ``stages/pipeline/threads.py``); None: one per torch thread.
    Returns the count now in force."""
    global _sample_processes
    if count is not None and count < 1:
        raise ValueError(f"sample_processes must be at least 1, got {count}")
    _sample_processes = count
    return sample_processes()


def sample_processes() -> int:
    """The CPU sampler's process count: the one fixed by :func:`set_sample_processes`, else one per torch
    thread. :func:`fast_generate`'s draws depend on it (one generator per process), eval's do not."""
    return _sample_processes or torch.get_num_threads()


SUPPORTED = ("qwen2", "llama")  # model types whose layers are exactly the ones this loop computes


def supports(model) -> bool:
    """Whether :func:`decode` can run ``model``: a Qwen2 or Llama decoder, without sliding-window
    attention, as a plain (not LoRA-wrapped) transformers model whose weights this process holds whole
    (not FSDP's DTensor shards nor ZeRO-3's placeholders: the model's own ``generate`` gathers those)."""
    config = getattr(model, "config", None)
    inner = getattr(model, "model", None)
    return (config is not None and getattr(config, "model_type", "") in SUPPORTED
            and not getattr(config, "use_sliding_window", False)
            and hasattr(inner, "layers") and hasattr(inner, "rotary_emb") and hasattr(model, "lm_head")
            and not _sharded(model))


def _sharded(model) -> bool:
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) or hasattr(p, "ds_id") for p in model.parameters())


MIN_SHARED_PREFIX = 32  # tokens: below this, one padded forward pass costs about as much


def _shared_prefix(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> int:
    """The number of leading tokens that every row's prompt (its real tokens, after the left padding)
    shares, less one (each row keeps at least one token of its own, whose logits start its sampling);
    0 when fewer than ``MIN_SHARED_PREFIX`` or only one row."""
    batch, width = input_ids.shape
    if batch < 2:
        return 0
    lengths = attention_mask.long().sum(-1)
    shortest = int(lengths.min())
    if shortest <= MIN_SHARED_PREFIX:
        return 0
    # the first `shortest` real tokens of every row, side by side: (batch, shortest)
    starts = width - lengths
    index = starts[:, None] + torch.arange(shortest, device=input_ids.device)[None]
    heads = input_ids.gather(1, index)
    same = (heads == heads[:1]).all(dim=0)  # (shortest,)
    differ = (~same).nonzero()
    common = int(differ[0]) if len(differ) else shortest
    common = min(common, shortest - 1)
    return common if common >= MIN_SHARED_PREFIX else 0


def _cache_argument(model) -> str:
    """The name under which ``model.forward`` takes a cache (transformers ≥ 5.2x: ``cache``; before:
    ``past_key_values``)."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _rest_after(input_ids: torch.Tensor, attention_mask: torch.Tensor, shared: int
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's prompt without its first ``shared`` real tokens, left-padded again to the longest rest:
    (ids, mask), (batch, longest rest)."""
    batch, width = input_ids.shape
    lengths = attention_mask.long().sum(-1)
    rest = lengths - shared
    longest = int(rest.max())
    # slot j of the rest of row r is slot width - longest + j of the original row (left padding kept aligned)
    index = (width - longest + torch.arange(longest, device=input_ids.device))[None].expand(batch, -1)
    ids = input_ids.gather(1, index)
    mask = (torch.arange(longest, device=input_ids.device)[None] >= (longest - rest)[:, None]).to(attention_mask.dtype)
    return ids.masked_fill(mask == 0, 0), mask


NUCLEUS_CANDIDATES = 64  # top-p looks among this many most likely tokens first (a full sort if they fall short)


def _next_tokens(logits: torch.Tensor, temperature: float, top_p: float, generator) -> torch.Tensor:
    """One token per row from the last position's logits (rows, vocab) → (rows,), as ``generate``'s
    warpers sample: temperature, then top-p (the most likely tokens until their probability reaches
    ``top_p``, the one that reaches it included: the nucleus), then a draw in proportion to the kept
    probabilities. Temperature 0: greedy.

    The draw inverts the cumulative distribution of one uniform number per row (``generate`` calls
    ``torch.multinomial``: the same distribution, other random numbers), and the nucleus is looked for
    among the ``NUCLEUS_CANDIDATES`` most likely tokens before sorting the whole vocabulary: a tiny
    model's step spends more on sorting 640 logits and on multinomial's set-up than on its matmuls."""
    if not bool(torch.isfinite(logits).all()):  # diverged weights (an infinite learning rate, say)
        raise FloatingPointError("the model's logits are NaN or infinite: its weights diverged (look at the "
                                 "learning rate and max_grad_norm of the run that trained it)")
    if temperature <= 0:
        return logits.argmax(dim=-1)
    probs = (logits / temperature).softmax(dim=-1)  # (rows, vocab)
    uniform = torch.rand(probs.shape[0], 1, generator=generator, device=probs.device)
    if top_p >= 1.0:
        cumulative = probs.cumsum(dim=-1)
        pick = torch.searchsorted(cumulative, uniform * cumulative[:, -1:], right=True)
        # u · total may round up to total: the last token with any probability, never one past it
        last = probs.shape[1] - 1 - (probs > 0).flip(-1).int().argmax(dim=-1, keepdim=True)
        return torch.minimum(pick, last).squeeze(1)
    k = min(NUCLEUS_CANDIDATES, probs.shape[1])
    top, order = probs.topk(k, dim=-1)  # descending
    cumulative = top.cumsum(dim=-1)
    if k < probs.shape[1] and bool((cumulative[:, -1] < top_p).any()):  # a nucleus wider than the candidates
        top, order = probs.sort(dim=-1, descending=True)
        cumulative = top.cumsum(dim=-1)
    # keep a token while the tokens more likely than it hold less than top_p
    kept = torch.where(cumulative - top < top_p, top, torch.zeros_like(top))
    kept_cumulative = kept.cumsum(dim=-1)
    pick = torch.searchsorted(kept_cumulative, uniform * kept_cumulative[:, -1:], right=True)
    pick = torch.minimum(pick, (kept > 0).sum(dim=-1, keepdim=True) - 1)  # never past the nucleus
    return order.gather(1, pick).squeeze(1)


@torch.inference_mode()
def decode(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, *, max_new_tokens: int,
           temperature: float, top_p: float, stop_ids: list[int], generator: torch.Generator | None = None
           ) -> list[tuple[list[int], bool]]:
    """Sample up to ``max_new_tokens`` tokens after each row of ``input_ids`` (left-padded, with its
    ``attention_mask``). Returns, per row, (the new token ids, the stop token included if there was one;
    whether it stopped before the limit)."""
    if not supports(model):
        raise NotImplementedError(f"{type(model).__name__}: no KV-cache decoder for this architecture")
    config, inner = model.config, model.model
    batch, prompt_len = input_ids.shape
    device = input_ids.device
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", heads)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    groups = heads // kv_heads
    total = prompt_len + max_new_tokens
    stops = torch.tensor(sorted(set(stop_ids)), device=device)

    # -- prefill: the model's own forward pass, its cache copied into preallocated buffers -----------
    shared = _shared_prefix(input_ids, attention_mask)
    if shared:
        # slots: [the shared prefix, once | each row's rest, left-padded]; positions count real tokens
        prefix_ids = input_ids[0, prompt_len - int(attention_mask[0].sum()):][:shared]
        input_ids, attention_mask = _rest_after(input_ids, attention_mask, shared)
        prompt_len = shared + input_ids.shape[1]
        total = prompt_len + max_new_tokens
        pre = model(input_ids=prefix_ids[None], position_ids=torch.arange(shared, device=device)[None], use_cache=True)
        past = pre.cache if "cache" in pre else pre.past_key_values  # transformers ≥ 5.2x renamed it
        del pre
        for layer in past.layers:  # (1, kv_heads, shared, head_dim) → every row, without copying
            layer.keys, layer.values = layer.keys.expand(batch, -1, -1, -1), layer.values.expand(batch, -1, -1, -1)
        full_mask = torch.cat([attention_mask.new_ones(batch, shared), attention_mask], dim=1)
        positions = shared + (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        out = model(input_ids=input_ids, attention_mask=full_mask, position_ids=positions, use_cache=True,
                    **{_cache_argument(model): past})
        attention_mask = full_mask
    else:
        positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # as generate: left padding → 0
        out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions, use_cache=True)
    cache = out.cache if "cache" in out else out.past_key_values  # transformers ≥ 5.2x renamed it
    first_logits = out.logits[:, -1, :].float()
    del out
    dtype = cache.layers[0].keys.dtype
    keys = [torch.zeros(batch, kv_heads, total, head_dim, dtype=dtype, device=device) for _ in inner.layers]
    values = [torch.zeros_like(k) for k in keys]
    for i, layer in enumerate(cache.layers):
        keys[i][:, :, :prompt_len] = layer.keys  # (batch, kv_heads, prompt_len, head_dim)
        values[i][:, :, :prompt_len] = layer.values
    del cache
    # valid[r, s]: slot s of row r holds a real token (the left padding does not)
    valid = torch.zeros(batch, total, dtype=torch.bool, device=device)
    valid[:, :prompt_len] = attention_mask.bool()
    next_position = attention_mask.long().sum(-1)  # (batch,) the position of each row's next token

    rows = torch.arange(batch, device=device)  # which original row each batch slot holds
    live = torch.ones(batch, dtype=torch.bool, device=device)  # slots whose row has not finished
    new_tokens: list[list[int]] = [[] for _ in range(batch)]
    stopped = [False] * batch
    token = _next_tokens(first_logits, temperature, top_p, generator)
    fused = [_Fused(layer) for layer in inner.layers]  # each layer's weights, fused for one-row steps
    half = head_dim // 2
    scale = 1 / math.sqrt(head_dim)
    # rotate_half(x) · sin = roll(x, half) · (sin with its first half negated)
    sign = torch.cat([-torch.ones(half), torch.ones(head_dim - half)]).to(device=device, dtype=keys[0].dtype)

    for step in range(max_new_tokens):
        # -- record the token each live row just produced; retire the rows that stopped -------------
        done = torch.isin(token, stops) & live
        for row, tok, is_live, is_done in zip(rows.tolist(), token.tolist(), live.tolist(), done.tolist(), strict=True):
            if is_live:
                new_tokens[row].append(tok)
                stopped[row] = is_done
        live = live & ~done
        if step == max_new_tokens - 1 or not bool(live.any()):
            break
        if float((~live).float().mean()) >= _COMPACT_SHARE:  # drop finished rows from the computation
            keep = live.nonzero().squeeze(1)
            rows, token, next_position, valid, live = rows[keep], token[keep], next_position[keep], valid[keep], live[keep]
            keys = [k[keep] for k in keys]
            values = [v[keep] for v in values]

        # -- one decode step for the active rows: (rows, 1, hidden) through every layer -------------
        slot = prompt_len + step  # the cache slot of this step's token, the same for every row
        valid[:, slot] = True
        position = next_position.unsqueeze(1)  # (rows, 1)
        hidden = inner.embed_tokens(token.unsqueeze(1))
        cos, sin = inner.rotary_emb(hidden, position)  # (rows, 1, head_dim)
        cos, sin = cos.unsqueeze(1), sin * sign  # (rows, 1, 1, head_dim): broadcast over heads
        sin = sin.unsqueeze(1)
        blocked = ~valid[:, None, None, : slot + 1]  # (rows, 1, 1, filled): the padding, never attended to
        n = hidden.shape[0]
        for i, w in enumerate(fused):
            h = F.rms_norm(hidden, (hidden.shape[-1],), w.norm1, w.eps1)
            qkv = F.linear(h, w.qkv, w.qkv_bias)  # (rows, 1, (heads + 2 kv_heads) · head_dim)
            qk = qkv[..., : w.split].view(n, 1, heads + kv_heads, head_dim).transpose(1, 2)
            qk = qk * cos + qk.roll(half, dims=-1) * sin  # rotary, on queries and keys at once
            q, k = qk[:, :heads], qk[:, heads:]  # (rows, heads, 1, head_dim), (rows, kv_heads, 1, head_dim)
            v = qkv[..., w.split :].view(n, 1, kv_heads, head_dim).transpose(1, 2)
            keys[i][:, :, slot : slot + 1] = k
            values[i][:, :, slot : slot + 1] = v
            # attention of one query per row, written out: for these sizes SDPA's kernel costs more
            # than the arithmetic. Query heads sharing a key/value head (GQA) sit side by side.
            q = q.reshape(n, kv_heads, groups, head_dim)
            scores = q @ keys[i][:, :, : slot + 1].transpose(-1, -2) * scale  # (rows, kv_heads, groups, filled)
            weights = scores.masked_fill(blocked, float("-inf")).softmax(dim=-1)
            a = (weights @ values[i][:, :, : slot + 1]).reshape(n, 1, heads * head_dim)
            hidden = hidden + F.linear(a, w.o, w.o_bias)
            h = F.rms_norm(hidden, (hidden.shape[-1],), w.norm2, w.eps2)
            gate, up = F.linear(h, w.gate_up, w.gate_up_bias).chunk(2, dim=-1)
            hidden = hidden + F.linear(w.act(gate) * up, w.down, w.down_bias)
        logits = model.lm_head(inner.norm(hidden))[:, -1, :].float()  # (rows, vocab)
        token = _next_tokens(logits, temperature, top_p, generator)
        next_position = next_position + 1
    return [(new_tokens[r], stopped[r]) for r in range(batch)]


class _Fused:
    """One decoder layer's weights as a decode step uses them: the query, key and value projections as
    one matrix, the MLP's gate and up projections as one (fewer, larger matmuls: a tiny model's step
    is dominated by the number of operators, not their size). The same arithmetic as the layer's own
    modules, biases included. Built once per :func:`decode` call, a copy of those weights: this loop is
    for the CPU default's small models (GPUs sample with vLLM)."""

    def __init__(self, layer):
        attn, mlp = layer.self_attn, layer.mlp
        projections = (attn.q_proj, attn.k_proj, attn.v_proj)
        self.qkv = torch.cat([p.weight for p in projections])
        biases = [p.bias for p in projections]
        self.qkv_bias = None if any(b is None for b in biases) else torch.cat(biases)
        self.split = attn.q_proj.weight.shape[0] + attn.k_proj.weight.shape[0]  # queries and keys | values
        self.o, self.o_bias = attn.o_proj.weight, attn.o_proj.bias
        self.gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
        gate_up_bias = [mlp.gate_proj.bias, mlp.up_proj.bias]
        self.gate_up_bias = None if any(b is None for b in gate_up_bias) else torch.cat(gate_up_bias)
        self.down, self.down_bias, self.act = mlp.down_proj.weight, mlp.down_proj.bias, mlp.act_fn
        self.norm1, self.eps1 = layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon
        self.norm2, self.eps2 = layer.post_attention_layernorm.weight, layer.post_attention_layernorm.variance_epsilon


def loop_can_sample(config) -> bool:
    """Whether :func:`decode` samples what the generation config asks for: one beam, no top-k, min-p or
    repetition penalty. transformers 5 leaves unset fields ``None`` (``num_beams`` included, as in the
    config GRPOTrainer builds), which means their neutral value."""
    return ((getattr(config, "num_beams", None) or 1) == 1 and not (getattr(config, "top_k", None) or 0)
            and getattr(config, "min_p", None) is None and (getattr(config, "repetition_penalty", None) or 1.0) == 1.0)


def fast_generate(model):
    """A ``generate`` for ``model`` that runs :func:`decode` when the generation config asks for what it
    does (sampling with temperature and top-p, or greedy; no top-k, min-p, repetition penalty, beams),
    and the model's own ``generate`` otherwise. It returns what ``generate`` returns: the prompt and
    completion ids, (rows, prompt + longest completion), right-padded with the pad token; draws come from
    the global torch generator, as ``generate``'s do (on the CPU, the rows are shared between one forked
    single-threaded process per :func:`sample_processes`, each drawing from a generator seeded from the
    global one: :func:`in_processes`). Set it as the model's ``generate`` so that a trainer
    that samples through ``model.generate`` (TRL's GRPOTrainer without vLLM) samples through this loop."""
    original = model.generate

    def generate(input_ids=None, attention_mask=None, generation_config=None, **kwargs):
        config = generation_config or model.generation_config
        if input_ids is None or kwargs.get("inputs_embeds") is not None or not loop_can_sample(config) \
                or not supports(model):
            return original(input_ids=input_ids, attention_mask=attention_mask, generation_config=generation_config,
                            **kwargs)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        eos = config.eos_token_id
        stop_ids = [eos] if isinstance(eos, int) else list(eos or [])
        pad = config.pad_token_id if config.pad_token_id is not None else (stop_ids[0] if stop_ids else 0)
        settings = dict(max_new_tokens=config.max_new_tokens, temperature=config.temperature if config.do_sample else 0.0,
                        top_p=config.top_p if config.do_sample and config.top_p is not None else 1.0, stop_ids=stop_ids)
        processes = min(sample_processes(), len(input_ids)) if input_ids.device.type == "cpu" else 1
        if processes == 1:
            rows = decode(model, input_ids, attention_mask, **settings)
        else:  # contiguous shares of the rows, each with a generator seeded from the global one
            seeds = torch.randint(0, 2**62, (processes,)).tolist()
            bounds = [len(input_ids) * i // processes for i in range(processes + 1)]
            parts: list = [None] * processes

            def share(i: int) -> list:
                rows_i = slice(bounds[i], bounds[i + 1])
                return decode(model, input_ids[rows_i], attention_mask[rows_i], **settings,
                              generator=torch.Generator(device=input_ids.device).manual_seed(seeds[i]))

            in_processes(share, processes, processes, lambda i, part: parts.__setitem__(i, part))
            rows = [row for part in parts for row in part]
        width = max((len(tokens) for tokens, _ in rows), default=0)
        completions = torch.full((len(rows), width), pad, dtype=input_ids.dtype, device=input_ids.device)
        for i, (tokens, _) in enumerate(rows):
            completions[i, : len(tokens)] = torch.tensor(tokens, dtype=input_ids.dtype)
        return torch.cat([input_ids, completions], dim=1)

    return generate


def die_with_parent() -> None:
    """Linux: the kernel SIGKILLs this (forked or starting) process when its parent dies: a killed stage
    leaves no sampler or side work (``stages.pipeline.threads.SideJob``) running on."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def in_processes(one_batch, n_batches: int, processes: int, done) -> None:
    """``done(b, one_batch(b))`` for every batch ``b < n_batches``, batches ``rank, rank + processes, …``
    computed in process ``rank``: 0 is this one, the others are forked (they inherit the model without
    copying it, send each batch's result back through a pipe, and exit); ``done`` runs here. Every
    process runs one thread; this one's thread count is restored afterwards. For sampling only: the
    children's changes to the model never come back."""
    import multiprocessing as mp
    from multiprocessing.connection import wait

    def child(rank: int, conn) -> None:
        die_with_parent()
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # the Rust tokenizer's pool did not fork
        torch.set_num_threads(1)
        with torch.inference_mode():
            for b in range(rank, n_batches, processes):
                conn.send((b, one_batch(b)))
        conn.close()

    fork = mp.get_context("fork")
    children, pipes = [], []
    threads = torch.get_num_threads()
    try:
        for rank in range(1, processes):
            receive, send = fork.Pipe(duplex=False)
            p = fork.Process(target=child, args=(rank, send), daemon=True)
            p.start()
            send.close()
            children.append(p)
            pipes.append(receive)
        torch.set_num_threads(1)
        expected = n_batches - len(range(0, n_batches, processes))  # the children's batches
        received = 0

        def collect(timeout: float | None) -> None:
            nonlocal received
            for conn in wait(pipes, timeout):
                try:
                    b, rows = conn.recv()
                except EOFError:
                    pipes.remove(conn)
                    continue
                done(b, rows)
                received += 1

        for b in range(0, n_batches, processes):
            done(b, one_batch(b))
            collect(0)
        while received < expected:
            if not pipes:
                raise RuntimeError(f"sampling: a forked sampling process died before returning its batches "
                                   f"({received} of {expected} received; exit codes "
                                   f"{[p.exitcode for p in children]})")
            collect(None)
    finally:
        torch.set_num_threads(threads)
        for p in children:
            if p.is_alive():
                p.terminate()
            p.join()
