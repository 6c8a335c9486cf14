"""Pretraining of a tiny base model from scratch: what the tiny CPU default's base stage runs, and
distillation's tiny students too.

A Qwen2 architecture (``base.architecture``), a byte-level BPE tokenizer with single-digit tokens
(``data/tokenizer.py``), pretrained for a few minutes on the synthetic corpus of ``data/corpus.py``.

Deviation from a real pretraining run: the loss is on the document's completion only, summed over
tokens and divided by a constant (not averaged per batch, see :func:`pretrain_tiny`). Documents are
packed into rows of ``pack_length`` tokens as in real pretraining, but each document sees only itself
(its positions restart at 0 and the attention mask is block-diagonal, see :func:`_packed_batch`): plain
packing, where documents attend to the ones before them, biased the model towards reasoning in an
earlier experiment. Pretraining runs with eager attention, under bf16 autocast where the CPU has native
bf16 (``base.pretrain.bf16_autocast``, :func:`use_bf16_autocast`); the
checkpoint is saved with the default attention for the stages that load it. The batching modes and
their measured effects: docs/experiments.md.
"""

from __future__ import annotations

import logging
import math
import random
import time

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from data.corpus import DOC_TYPES, corpus_documents
from data.faults import fault_point
from data.packing import first_fit_rows
from data.taskworld import TaskWorld
from data.timing import timed_as
from data.tokenizer import add_summary_tokens, build_tokenizer
from stages.pipeline.common import set_seed

log = logging.getLogger("r1")


def use_bf16_autocast(setting) -> bool:
    """``base.pretrain.bf16_autocast``: true, false, or ``auto`` = on where oneDNN has bf16 kernels for the
    CPU (its check: AVX-512 or Arm bf16); elsewhere (AVX2 only) autocast emulates bf16, many times slower
    than fp32."""
    if setting == "auto":
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return bool(setting)


def build_tiny_model(arch, vocab_size: int, eos_id: int) -> Qwen2ForCausalLM:
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=arch.hidden_size,
        num_hidden_layers=arch.num_hidden_layers,
        num_attention_heads=arch.num_attention_heads,
        num_key_value_heads=arch.num_key_value_heads,
        intermediate_size=arch.intermediate_size,
        max_position_embeddings=arch.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
    )
    return Qwen2ForCausalLM(config)


def _batch(docs_ids: list[tuple[list[int], list[int]]], pad_id: int):
    """Right-pad a batch of (prompt_ids, completion_ids) rows; labels are -100 outside completions.

    Returns the model's keyword arguments: input_ids, labels and attention_mask, each (B, T)."""
    width = max(len(p) + len(c) for p, c in docs_ids)
    width = -(-width // 16) * 16  # a few distinct shapes, not one per batch: kernel caches stay small
    input_ids = torch.full((len(docs_ids), width), pad_id, dtype=torch.long)      # (B, T)
    labels = torch.full((len(docs_ids), width), -100, dtype=torch.long)           # (B, T)
    attention = torch.zeros((len(docs_ids), width), dtype=torch.long)             # (B, T)
    for i, (p, c) in enumerate(docs_ids):
        ids = p + c
        input_ids[i, : len(ids)] = torch.tensor(ids)
        labels[i, len(p) : len(ids)] = torch.tensor(c)  # loss on the completion (and its EOS) only
        attention[i, : len(ids)] = 1
    return {"input_ids": input_ids, "labels": labels, "attention_mask": attention}


def _packed_batch(docs_ids: list[tuple[list[int], list[int]]], pad_id: int, length: int):
    """Pack a batch of (prompt_ids, completion_ids) documents into rows of ``length`` tokens.

    First-fit by decreasing length; a document longer than ``length`` gets a row of its own, and every
    row then has the longest document's width. Each document's ``position_ids`` restart at 0, and no
    attention mask is passed: transformers then reads the packing from the position ids and builds a
    block-diagonal causal mask (``masking_utils.find_packed_sequence_indices``), so every document sees
    only itself, with the same positions as in a padded row: the same logits as ``_batch``, on far
    fewer padding tokens. The padding at a row's end is one more "document" with
    labels -100. Returns the model's keyword arguments, each (rows, width).
    """
    sizes = [len(p) + len(c) for p, c in docs_ids]
    width = max(length, max(sizes))
    rows = first_fit_rows(sizes, width)  # document indices per row
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)      # (R, W)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)           # (R, W)
    position_ids = torch.zeros((len(rows), width), dtype=torch.long)          # (R, W)
    for r, members in enumerate(rows):
        at = 0
        for i in members:
            p, c = docs_ids[i]
            input_ids[r, at : at + sizes[i]] = torch.tensor(p + c)
            labels[r, at + len(p) : at + sizes[i]] = torch.tensor(c)
            position_ids[r, at : at + sizes[i]] = torch.arange(sizes[i])
            at += sizes[i]
        position_ids[r, at:] = torch.arange(width - at)  # the padding: a document of its own
    return {"input_ids": input_ids, "labels": labels, "position_ids": position_ids, "use_cache": False}


def make_batches(docs, rows, batch_size: int, how: str, rng: random.Random) -> list[list[int]]:
    """Document indices per step; each document is seen once.

    packed:    plain i.i.d. batches, packed into rows by ``_packed_batch`` (no padding to speak of).
    by_type:   each batch holds documents of one type, drawn at random within the type (padding stays
               moderate: a type's documents have similar lengths; batches stay i.i.d. within a type).
    by_length: documents sorted by length and cut into batches (least padding, least i.i.d.).
    random:    plain i.i.d. padded batches.
    """
    order = list(range(len(rows)))
    rng.shuffle(order)
    if how in ("random", "packed"):
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    if how == "by_length":
        order.sort(key=lambda i: len(rows[i][0]) + len(rows[i][1]))
        batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    else:
        by_type: dict[str, list[int]] = {}
        for i in order:
            by_type.setdefault(docs[i].get("group", docs[i]["type"]), []).append(i)
        batches = [ids[i : i + batch_size] for ids in by_type.values() for i in range(0, len(ids), batch_size)]
    rng.shuffle(batches)
    return batches


def lr_at(pt, step: int) -> float:
    """The pretraining learning rate at ``step``: linear warmup, then cosine decay to ``min_lr_ratio``."""
    if step < pt.warmup_steps:
        return pt.learning_rate * (step + 1) / pt.warmup_steps
    progress = (step - pt.warmup_steps) / max(1, pt.steps - pt.warmup_steps)
    return pt.learning_rate * (pt.min_lr_ratio + (1 - pt.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def corpus_and_tokenizer(recipe):
    """The pretraining corpus (``steps × batch_size`` documents of ``data/corpus.py``) and the tokenizer
    trained on its first 20,000 documents: everything a tiny base is built from besides its settings."""
    cfg = recipe.base
    world = TaskWorld.from_recipe(recipe)
    docs = corpus_documents(world, cfg.corpus, cfg.pretrain.steps * cfg.pretrain.batch_size, seed=base_seed(recipe))
    tokenizer = build_tokenizer((d["prompt"] + d["completion"] for d in docs[:20_000]),
                                vocab_size=cfg.architecture.tokenizer_vocab_size)
    return docs, tokenizer


def base_seed(recipe) -> int:
    """The seed of the base's corpus, initialisation and batch order: ``base.pretrain.seed``, else the recipe's."""
    return recipe.seed if recipe.base.pretrain.seed is None else recipe.base.pretrain.seed


def build_settings(recipe) -> dict:
    """The recipe fields a tiny base's weights depend on (besides the machine: threads, bf16 kernels)."""
    import dataclasses

    corpus = dataclasses.asdict(recipe.base.corpus)
    if corpus["check_form"] == "plain":  # added after the release was built, plain there: kept out so its key stands
        del corpus["check_form"]
    return {"seed": base_seed(recipe), "task_world": dataclasses.asdict(recipe.task_world),
            "base.architecture": dataclasses.asdict(recipe.base.architecture),
            "base.corpus": corpus,
            "base.pretrain": {k: v for k, v in dataclasses.asdict(recipe.base.pretrain).items() if k not in ("log_every", "seed")}}


def build_key(recipe, docs, tokenizer) -> dict:
    """What decides a tiny base, as hashes: the generated corpus (every document, in order), the tokenizer
    trained on it (its ``tokenizer.json`` before the summary tokens), and the settings
    (:func:`build_settings`). A released base records the key it was built with (``stages/release.py``);
    this code and recipe giving another key means the release is stale."""
    import hashlib
    import json

    corpus = hashlib.sha256()
    for d in docs:
        corpus.update(json.dumps(d, sort_keys=True, ensure_ascii=False).encode() + b"\n")
    settings = json.dumps(build_settings(recipe), sort_keys=True, ensure_ascii=False).encode()
    return {"corpus_sha256": corpus.hexdigest(),
            "tokenizer_sha256": hashlib.sha256(tokenizer.backend_tokenizer.to_str().encode()).hexdigest(),
            "settings_sha256": hashlib.sha256(settings).hexdigest()}


@timed_as("pretraining")
def pretrain_tiny(recipe, log=print):
    """Build tokenizer + model and pretrain them; returns (model, tokenizer, stats). ``stats["build_key"]``
    is :func:`build_key`, ``stats["threads"]`` the torch threads it summed on."""
    cfg = recipe.base
    set_seed(base_seed(recipe))
    n_docs = cfg.pretrain.steps * cfg.pretrain.batch_size
    t0 = time.time()
    docs, tokenizer = corpus_and_tokenizer(recipe)
    key = build_key(recipe, docs, tokenizer)
    eos = tokenizer.eos_token_id
    prompts = tokenizer([d["prompt"] for d in docs], add_special_tokens=False)["input_ids"]
    completions = tokenizer([d["completion"] for d in docs], add_special_tokens=False)["input_ids"]
    rows = [(p, c + [eos]) for p, c in zip(prompts, completions, strict=True)]
    longest = max(len(p) + len(c) for p, c in rows)
    if longest > cfg.architecture.max_position_embeddings:
        raise ValueError(f"a corpus document has {longest} tokens, more than "
                         f"base.architecture.max_position_embeddings={cfg.architecture.max_position_embeddings}")
    log(f"corpus: {n_docs} documents, {sum(len(p) + len(c) for p, c in rows) / n_docs:.1f} tokens each, "
        f"vocab {len(tokenizer)}, built in {time.time() - t0:.1f}s")

    embedding_rows = cfg.architecture.embedding_rows
    if embedding_rows is not None and embedding_rows < len(tokenizer):
        raise ValueError(f"base.architecture.embedding_rows: {embedding_rows} is fewer than the tokenizer's "
                         f"{len(tokenizer)} tokens")
    model = build_tiny_model(cfg.architecture, embedding_rows or len(tokenizer), eos)
    model.set_attn_implementation(cfg.pretrain.attn_implementation)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: Qwen2 {n_params / 1e6:.2f}M parameters")
    pt = cfg.pretrain
    opt = torch.optim.AdamW(model.parameters(), lr=pt.learning_rate, weight_decay=pt.weight_decay,
                            betas=(0.9, 0.95))

    batches = make_batches(docs, rows, pt.batch_size, pt.batching, random.Random(base_seed(recipe)))
    # Loss = sum over completion tokens / a constant (the corpus's mean completion tokens per batch), not
    # the per-batch token mean: with batches of one document type, a per-batch mean gives a short answer's
    # tokens several times the weight of a long trace's, which biased the model's first choice (answer
    # directly or think) far from the corpus's shares (docs/experiments.md).
    tokens_per_batch = pt.batch_size * sum(len(c) for _, c in rows) / len(rows)
    bf16 = use_bf16_autocast(pt.bf16_autocast)
    log(f"pretraining {'under bf16 autocast' if bf16 else 'in fp32'} (base.pretrain.bf16_autocast: {pt.bf16_autocast})")
    losses = []
    model.train()
    t_train = time.time()
    for step in range(min(pt.steps, len(batches))):
        fault_point("pretrain_step")
        docs_ids = [rows[i] for i in batches[step]]
        inputs = _packed_batch(docs_ids, eos, pt.pack_length) if pt.batching == "packed" else _batch(docs_ids, eos)
        for g in opt.param_groups:
            g["lr"] = lr_at(pt, step)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(**inputs, num_items_in_batch=tokens_per_batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if (step + 1) % pt.log_every == 0 or step == 0:
            log(f"step {step + 1}/{pt.steps} loss {loss.item():.4f} lr {lr_at(pt, step):.2e} "
                f"({time.time() - t_train:.0f}s)")
    stats = {
        "parameters": n_params,
        "vocab_size": len(tokenizer),
        "corpus_documents": n_docs,
        "corpus_doc_types": {t: sum(d["type"] == t for d in docs) for t in DOC_TYPES},
        "loss_first": losses[0],
        "loss_last_avg": sum(losses[-20:]) / len(losses[-20:]),
        "loss_curve": losses[:: max(1, len(losses) // 50)],
        "pretrain_seconds": time.time() - t_train,
        "bf16_autocast": bf16,
        "threads": torch.get_num_threads(),
        "build_key": key,
    }
    add_summary_tokens(tokenizer, model)  # after pretraining: see data/tokenizer.py
    stats["vocab_size"] = len(tokenizer)
    model.set_attn_implementation("sdpa")
    return model, tokenizer, stats
