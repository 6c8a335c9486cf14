"""Small helpers every stage shares: seeding, device choice, model loading, resource figures."""

from __future__ import annotations

import os
import random
import resource
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch

from data.faults import fault_point
from data.timing import timed_as

T = TypeVar("T")


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def pick_device(setting: str) -> torch.device:
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if setting == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("recipe asks for device 'cuda' but no CUDA device is visible")
    return torch.device(setting)


# -- Several processes (torchrun / accelerate launch) -------------------------------------------
# Every process runs the whole stage body (the trainers need all of them); only the main process
# writes manifests, checkpoints, evaluations and figures. The others wait for it at barriers.


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main() -> bool:
    return rank() == 0


def init_distributed(timeout_minutes: float) -> None:
    """Join the process group of a multi-process launch (gloo on CPU, NCCL on GPU) through
    accelerate, before the stage body runs, so that its barriers work; a no-op for one process.

    ``timeout_minutes`` (``launch.timeout_minutes``) bounds every collective, barriers included: while
    the main process alone evaluates or writes, the others wait at a barrier, and NCCL's default of
    10 minutes would kill a run whose evaluation takes longer. The process group is created here,
    first, so the trainers' accelerators (and their ``ddp_timeout``) reuse it as it is."""
    if world_size() > 1:
        from datetime import timedelta

        from accelerate import PartialState

        PartialState(timeout=timedelta(minutes=timeout_minutes))


def barrier() -> None:
    """Wait for every process (no-op for one process)."""
    if world_size() > 1 and torch.distributed.is_initialized():
        torch.distributed.barrier()


def run_once(fn: Callable[..., T], *args, **kwargs) -> T:
    """``fn(*args, **kwargs)`` on the main process only; every process gets its result (pickled and broadcast), or
    the error it raised. Sampling and evaluation go through it: on 8 GPUs, 8 processes sampling the same
    prompts would put 8 engines on the machine and do the work 8 times; the others wait (within
    ``launch.timeout_minutes``)."""
    if world_size() == 1 or not torch.distributed.is_initialized():
        return fn(*args, **kwargs)
    box: list = [None]
    if is_main():
        try:
            box = [("ok", fn(*args, **kwargs))]
        except Exception as e:  # noqa: BLE001 - re-raised on every process below
            box = [("error", e)]
    torch.distributed.broadcast_object_list(box, src=0)
    status, value = box[0]
    if status == "error":
        raise value
    return value


def release(sampler) -> None:
    """Free a sampler's engine (vLLM's GPU memory) before the next phase loads a model; a no-op for the
    transformers sampler."""
    close = getattr(sampler, "close", None)
    if close is not None:
        close()


def gather(obj) -> list:
    """``obj`` from every process, in rank order (``[obj]`` for one process)."""
    if world_size() == 1 or not torch.distributed.is_initialized():
        return [obj]
    out = [None] * world_size()
    torch.distributed.all_gather_object(out, obj)
    return out


def processes_summary(model, seen, seen_name: str) -> dict:
    """Gather, from every process, its weights' digest and the set ``seen`` of what it trained on; the
    summary that the main process records: the digests (all equal after a synchronous data-parallel
    run; None for a process that holds no whole model after sharded training), ``<seen_name>`` per
    process, and how many items every process saw (0: each had its own data)."""
    ranks = gather({"digest": weights_digest(model) if model is not None else None, "seen": sorted(seen)})
    sets = [set(map(str, r["seen"])) for r in ranks]
    digests = [r["digest"] for r in ranks]
    return {"count": len(ranks), "weight_digests": digests,
            # sharded training (ZeRO-3, FSDP): the weights were gathered on the main process only
            "weights_agree": len(set(digests)) == 1 if None not in digests else None,
            seen_name: [len(x) for x in sets],
            f"{seen_name}_by_every_process": len(set.intersection(*sets))}


def weights_digest(model) -> str:
    """A short sha256 of a model's parameters (in name order): equal digests, equal weights."""
    import hashlib

    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def peak_rss_mb() -> float:
    """Peak resident memory of this process (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@timed_as("loading")
def load_tokenizer(path_or_id: str, *, trust_remote_code: bool = False):
    """``AutoTokenizer``, except for a local tokenizer saved as a plain ``TokenizersBackend`` (the tiny
    default's): transformers 5 maps every ``qwen2`` checkpoint to ``Qwen2Tokenizer``, which rebuilds the
    pre-tokenizer from Qwen2's regex and so tokenizes differently from training, silently (the text still
    round-trips). Such a tokenizer is loaded as saved."""
    import json

    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    config = Path(path_or_id) / "tokenizer_config.json"
    if config.is_file() and json.loads(config.read_text()).get("tokenizer_class") == "TokenizersBackend":
        tokenizer = PreTrainedTokenizerFast.from_pretrained(path_or_id)
    else:
        tokenizer = AutoTokenizer.from_pretrained(path_or_id, trust_remote_code=trust_remote_code)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def check_model_ref(ref: str) -> None:
    """Refuse a local model path that does not exist (absolute, ``./…``, or inside an existing folder),
    instead of letting the hub client fail on it as if it were a repository id."""
    p = Path(ref)
    if not p.exists() and (p.is_absolute() or ref.startswith(".") or (str(p.parent) != "." and p.parent.is_dir())):
        raise FileNotFoundError(f"model {ref!r}: no such folder")


@timed_as("loading")
def load_model_and_tokenizer(path_or_id: str, *, device: torch.device, trust_remote_code: bool, dtype=None):
    """Load a causal LM and its tokenizer from a local checkpoint or hub id (never fetches remote code
    unless the recipe sets ``trust_remote_code``)."""
    from transformers import AutoModelForCausalLM

    check_model_ref(path_or_id)
    if not Path(path_or_id).exists() and os.environ.get("HF_HUB_OFFLINE") == "1":
        raise FileNotFoundError(f"model {path_or_id!r}: no such local path, and the hub is offline")
    tokenizer = load_tokenizer(path_or_id, trust_remote_code=trust_remote_code)
    model = AutoModelForCausalLM.from_pretrained(
        path_or_id, trust_remote_code=trust_remote_code, dtype=dtype or "auto"
    ).to(device)
    return model, tokenizer


def load_sampler(recipe, model_path: str | None, *, backend: str = "transformers", batch_size: int = 64,
                 loaded: tuple | None = None):
    """``(sampler, tokenizer)`` for ``model_path`` (``eval.generate.make_sampler``'s sampler): vLLM's
    offline engine (``launch.vllm_*``: its share of the GPU, tensor parallelism, context; free it with
    :func:`release`), or the model loaded on the recipe's device (``loaded``: the ``(model, tokenizer)``
    already in memory, sampled as they are). Call it inside :func:`run_once`: one engine, on the main
    process."""
    from eval.generate import make_sampler

    if backend == "vllm":
        if model_path is None:
            raise ValueError("the vLLM backend samples a saved checkpoint; this model has no path")
        launch = recipe.launch
        tokenizer = load_tokenizer(model_path, trust_remote_code=recipe.trust_remote_code)
        sampler = make_sampler("vllm", model_path=model_path, tokenizer=tokenizer, seed=recipe.seed,
                               trust_remote_code=recipe.trust_remote_code, tensor_parallel_size=launch.vllm_tensor_parallel,
                               gpu_memory_utilization=launch.vllm_memory_fraction, max_model_len=launch.vllm_max_model_len,
                               enforce_eager=launch.vllm_enforce_eager)
        return sampler, tokenizer
    if backend != "transformers":
        raise ValueError(f"unknown generation backend {backend!r} (transformers or vllm)")
    model, tokenizer = loaded or load_model_and_tokenizer(model_path, device=pick_device(recipe.device),
                                                          trust_remote_code=recipe.trust_remote_code)
    return make_sampler("transformers", model=model, tokenizer=tokenizer, batch_size=batch_size), tokenizer


@timed_as("saving")
def save_model_atomically(model, tokenizer, target: Path) -> Path:
    """save_pretrained into ``.<name>.tmp`` beside ``target``, then rename it into place. A save that
    fails (a full disk) removes its partial folder and leaves ``target`` as it was."""
    target = Path(target)
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model.save_pretrained(tmp)
        fault_point(f"save:{target.name}")
        tokenizer.save_pretrained(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target
