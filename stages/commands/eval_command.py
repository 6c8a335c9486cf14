"""``r1 eval``: evaluate a model on the task world's test (or ``--split val``) split and/or real benchmarks.

Writes ``results.json`` (one summary per benchmark, with the protocol) and ``samples.jsonl`` (every
graded sample) into the output folder; a crashed run resumes from the samples already written.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

from data.benchmarks import load_benchmark
from data.datasets import load_rows
from data.jsonl import atomic_write_json
from eval.budget import budget_sampler
from eval.runner import evaluate_rows
from stages.pipeline.common import load_sampler, release
from stages.pipeline.manifest import MANIFEST_NAME, Manifest, now
from stages.pipeline.recipe import load_recipe

log = logging.getLogger("r1")


def latest_model(recipe) -> str:
    """The checkpoint of the furthest complete stage of the recipe's run."""
    from stages.pipeline.runner import PIPELINE_ORDER, model_ref

    for stage in reversed(PIPELINE_ORDER):
        path = recipe.stage_dir(stage) / MANIFEST_NAME
        if path.exists():
            m = Manifest.load(path)
            if m.status == "complete":
                return model_ref(m)
    raise FileNotFoundError(f"no complete stage under {recipe.stage_dir('base').parent}; run `make base` "
                            "first or pass --model")


# Stages whose models were trained to answer in the chat template (the cold start onwards).
CHAT_STAGES = ("stage2", "stage3", "stage4", "distill")


def template_for(ref: str, default: str) -> str:
    """The prompt format a model was trained in: ``chat`` for a checkpoint of a stage from the cold start
    on (read from the manifest beside it), else ``default``."""
    manifest = Path(ref).parent / MANIFEST_NAME
    if Path(ref).is_dir() and manifest.is_file() and Manifest.load(manifest).stage in CHAT_STAGES:
        return "chat"
    return default


MODEL_FILES = ("config.json", "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


def check_model(ref: str) -> None:
    """Refuse, before anything loads, a ``--model`` that is a file, or a hub id while the hub cannot be
    reached (huggingface_hub would retry for most of a minute, then raise): named, with what to give."""
    import os
    import socket
    from urllib.parse import urlparse

    path = Path(ref)
    if path.is_file():
        raise ValueError(f"--model {ref}: a file, not a model folder (give the folder with config.json)")
    if path.exists() or ref.startswith((".", "/", "~")):
        return
    offline = os.environ.get("HF_HUB_OFFLINE") == "1"
    if not offline:
        host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
        try:
            socket.create_connection((host, 443), timeout=3).close()
            return
        except OSError:
            pass
    raise ValueError(f"--model {ref}: no such local folder, and the hub is "
                     f"{'off (HF_HUB_OFFLINE=1)' if offline else 'unreachable from here'}: give a checkpoint folder")


def check_out(out: Path) -> None:
    """Refuse an ``--out`` that is a file or a model's folder (results written into a checkpoint would change
    what its manifest hashed), before any sampling."""
    if out.is_file():
        raise ValueError(f"--out {out}: a file; give a folder for results.json and samples.jsonl")
    if out.is_dir() and any((out / f).exists() for f in MODEL_FILES):
        raise ValueError(f"--out {out}: a model's folder (it holds {next(f for f in MODEL_FILES if (out / f).exists())}); "
                         "writing results into a checkpoint would change it: give another folder")


def benchmark_rows(name: str, recipe, limit: int | None, data_dir: str | None, split: str = "test") -> list[dict]:
    if name == "task":  # the recipe's held-out split: test for reported figures, val for choosing settings
        rows = load_rows(recipe.data.val if split == "val" else recipe.data.test, recipe)[0]
        return rows[:limit] if limit else rows
    return load_benchmark(name, data_dir=data_dir, limit=limit)


def run_eval(args) -> int:
    from stages.pipeline.runner import setup_logging

    setup_logging()
    recipe = load_recipe(args.recipe, args.overrides)
    cfg = recipe.eval
    if args.k:
        cfg.k = args.k
    if args.backend:
        cfg.backend = args.backend
    ref = args.model or latest_model(recipe)
    check_model(ref)
    cfg.prompt_template = args.template or template_for(ref, cfg.prompt_template)
    local = Path(ref).is_dir()
    folder = f"eval_budget{args.think_budget}" if args.think_budget else "eval"
    out = Path(args.out) if args.out else (
        Path(ref) / folder if local else recipe.stage_dir("eval") / re.sub(r"[^A-Za-z0-9_.-]+", "_", ref))
    check_out(out)
    benches = [b.strip() for b in args.bench.split(",") if b.strip()]
    if not benches:
        raise ValueError("--bench names no benchmark: give e.g. task or task,gsm8k")
    data_dir = args.benchmarks_dir or recipe.data.benchmarks_dir
    split = getattr(args, "split", "test")
    rows_by_bench = {("task_val" if b == "task" and split == "val" else b):
                     benchmark_rows(b, recipe, args.limit or (cfg.benchmark_limit if b != "task" else None), data_dir, split)
                     for b in benches}  # load all first: fail before the model

    engine, tokenizer = load_sampler(recipe, ref, backend=cfg.backend, batch_size=cfg.batch_size)
    sampler = engine
    if args.think_budget:
        sampler = budget_sampler(sampler, tokenizer, think_budget=args.think_budget, min_think=args.min_think,
                                 template=cfg.prompt_template)
    results = {"model": ref, "protocol": {"k": cfg.k, "temperature": cfg.temperature, "top_p": cfg.top_p,
                                          "max_new_tokens": cfg.max_new_tokens,
                                          "prompt_template": cfg.prompt_template,
                                          "think_budget": args.think_budget, "min_think": args.min_think},
               "benchmarks": {}, "written_at": None}
    previous = out / "results.json"
    if previous.exists():  # keep the other benchmarks of an earlier run into the same folder
        old = json.loads(previous.read_text(encoding="utf-8"))
        if old.get("protocol") == results["protocol"]:
            results["benchmarks"] = old.get("benchmarks", {})
    try:
        for bench, rows in rows_by_bench.items():
            log.info("eval: %s, %d problems × %d samples", bench, len(rows), cfg.k)
            summary = evaluate_rows(sampler, tokenizer, rows, cfg=cfg, seed=recipe.seed, out_dir=out, name=bench)
            results["benchmarks"][bench] = summary
            log.info("eval: %s pass@1 %.3f cons@%d %.3f pass@%d %.3f", bench, summary["pass@1"], cfg.k,
                     summary[f"cons@{cfg.k}"], cfg.k, summary[f"pass@{cfg.k}"])
    finally:
        release(engine)
    results["written_at"] = now()
    atomic_write_json(out / "results.json", results)
    print(f"results: {out / 'results.json'}\nsamples: {out / 'samples.jsonl'}")
    return 0
