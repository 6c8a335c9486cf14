"""GRPO for every RL stage (1, 3, 4's final RL, distillation's control): TRL's ``GRPOTrainer``, configured by
:class:`GRPOJob` from an RLConfig section and run by ``skeleton.train_section``. One step, in TRL 1.16:

1. ``Trainer.training_step`` → ``GRPOTrainer._prepare_inputs``: a new generation every
   ``steps_per_generation × num_iterations`` micro-steps, else the buffered one (GRPO's μ);
2. ``_generate_and_score_completions``: ``_generate`` (``model.generate``, here the KV-cache loop
   ``eval.decode.fast_generate``; or vLLM), ``_calculate_rewards`` (the recipe's rewards, seen by
   :class:`RolloutRecorder`), group-normalised advantages. **Overridden** for DAPO's dynamic sampling;
3. ``compute_loss`` → ``_compute_loss``: ``_get_per_token_logps_and_entropies`` (**overridden**: length
   buckets, less padding on a CPU), the clipped ratio (``epsilon``, ``epsilon_high``) and the loss line
   ``per_token_loss = -torch.min(per_token_loss1, per_token_loss2)``, normalised by ``loss_type``;
4. the optimizer step; with ``beta`` > 0, ``sync_ref_model`` replaces the reference every ``ref_model_sync_steps``.

The overrides are of private methods, safe while ``trl==1.16.0`` is pinned (tests/test_trainer.py checks them).
Deviations from the paper and from DAPO, the recorder's files, resume: docs/training.md "grpo.py".
"""

from __future__ import annotations

import inspect
import json
import logging
import random
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from data.jsonl import read_jsonl_tolerant
from data.templates import assistant_prefill
from eval.decode import fast_generate, supports
from stages.pipeline.common import (
    barrier,
    is_main,
    load_model_and_tokenizer,
    processes_summary,
    run_once,
    set_seed,
    world_size,
)
from stages.pipeline.plan import rl_micro_batch
from stages.training import rewards as R
from stages.training.evaluation import DuringTraining, held_out, pass_at_1_monitor
from stages.training.records import (
    CANDIDATES_NAME,
    EVAL_STEP_PREFIX,
    METRICS_NAME,
    PLOT_NAME,
    MetricsCallback,
    RolloutRecorder,
    drop_step_evaluations,
    eval_step_dir,
    plot_curves,
    train_summary,
)
from stages.training.skeleton import (
    TrainingJob,
    lora_config,
    seed_of,
    set_attention,
    train_section,
    trl_args,
)

log = logging.getLogger("r1")

POOL_DIR = "pass_rate_pool"  # the pass-rate filter's samples (``filter_by_pass_rate``)


# ---------------------------------------------------------------------------------------------
# Rewards and what they record
# ---------------------------------------------------------------------------------------------


def reward_functions(cfg) -> tuple[list[str], list[Callable], list[float]]:
    """(names, functions, weights) for the recipe's ``rewards`` mapping, in its order."""
    names = list(cfg.rewards)
    funcs = [R.get_reward(n, language_target=cfg.language_target,
                          overlong_max_length=cfg.overlong_max_length or cfg.max_completion_length,
                          overlong_buffer=cfg.overlong_buffer) for n in names]
    for name, func in zip(names, funcs, strict=True):
        if inspect.iscoroutinefunction(func):  # RolloutRecorder.wrap calls it and needs its list back
            raise ValueError(f"reward {name!r} is an async function: the RL runner's recorder calls rewards "
                             "synchronously; give a plain function (TRL's signature f(completions, **kwargs))")
    return names, funcs, [float(cfg.rewards[n]) for n in names]


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------


def check_vllm(cfg, device: torch.device) -> None:
    """Refuse vLLM generation (``trl.use_vllm``) that cannot run here: vllm not installed, or a vLLM build
    for another device than the run's (the CUDA build on a CPU run, or vLLM's CPU build on a CUDA run)."""
    if not cfg.setting("use_vllm"):
        return
    try:
        from vllm.platforms import current_platform
    except ImportError:
        raise ValueError("trl.use_vllm is true but vllm is not installed (GPU machines: make setup-gpu; "
                         "vLLM's CPU build: make setup-vllm), or set use_vllm: false") from None
    if (device.type == "cpu") != current_platform.is_cpu():
        build = "its CPU build" if current_platform.is_cpu() else f"a {current_platform.device_type} build"
        raise ValueError(f"trl.use_vllm is true and the run is on {device.type}, but the installed vLLM is {build}: "
                         "set use_vllm: false, or install the vLLM of this machine (make setup-gpu, make setup-vllm)")


def sync_through_reload(generation) -> None:
    """Make TRL's colocated engine (``trainer.vllm_generation``) take the policy's weights through vLLM's
    reload path; used on vLLM's CPU build only (the CUDA path is TRL's, unchanged).

    TRL's colocate sync loads each parameter into the engine's live model (``model.load_weights``). vLLM's
    CPU backend repacks every linear weight for its GEMM kernels after loading and drops the original
    (``vllm/model_executor/layers/utils.py``, ``dispatch_cpu_unquantized_gemm``), so that load fails
    (``'Parameter' object has no attribute 'weight_loader'``) and would leave the packed copy stale if it
    did not. ``GPUModelRunner.reload_weights`` restores the checkpoint layout layer by layer, loads the
    given weights and packs them again. One layer it does not pack again: an output head tied to the
    embeddings (the tiny model's) has no weight of its own among those loaded, so its packed copy would
    keep the old embeddings; every layer that keeps its weight beside the packed copy is packed again
    here. tests/test_vllm.py checks the engine's log-probabilities against the policy's after a sync,
    and that they differ without one."""
    import types

    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    def sync_weights(self):
        runner = self.llm.llm_engine.model_executor.driver_worker.model_runner
        runner.reload_weights(weights_iterator=self._iter_named_params())
        for module in runner.get_model().modules():  # embeddings and output heads (remove_weight=False)
            weight = getattr(module, "weight", None)
            if hasattr(module, "cpu_linear") and weight is not None and weight.dim() == 2 and weight.numel():
                dispatch_cpu_unquantized_gemm(module, remove_weight=False)
        self.llm.reset_prefix_cache()

    generation.sync_weights = types.MethodType(sync_weights, generation)


def close_colocated_engine(trainer) -> None:
    """Shut down the vLLM engine TRL colocated with the policy (``use_vllm``, ``vllm_mode: colocate``) once
    training is over, and free its KV cache: the evaluation after training starts its own engine, and two
    would not fit. (On vLLM's CPU build, the weights of an engine that took them through vLLM's reload
    path stay referenced inside vLLM, one copy of the model's weights in host memory.)"""
    from eval.generate import free_memory, shutdown_engine

    generation = getattr(trainer, "vllm_generation", None)
    if getattr(generation, "llm", None) is None:
        return
    shutdown_engine(generation.llm)
    generation.llm = None
    free_memory()


def grpo_config(cfg, *, output_dir: Path, seed: int, device: torch.device, bf16: bool, reward_weights: list[float],
                section: str, tracked: dict | None = None):
    """(TRL's GRPOConfig, the settings given to it) for an RLConfig section (``section`` names it in errors;
    ``tracked``: the tracking settings, ``stages.training.skeleton.tracking``)."""
    micro = rl_micro_batch(section, cfg, world_size())  # PlanError, with the numbers to change, if TRL cannot split
    return trl_args(
        cfg, output_dir=output_dir, seed=seed, device=device, bf16=bf16,
        max_steps=cfg.steps,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        num_generations=cfg.num_generations,
        max_completion_length=cfg.max_completion_length,
        reward_weights=reward_weights,
        # R1: with a KL term, the reference model is *replaced* by the policy every ref_model_sync_steps
        sync_ref_model=cfg.setting("beta") > 0 and cfg.ref_model_sync_steps is not None,
        ref_model_sync_steps=cfg.ref_model_sync_steps or 1,
        ref_model_mixup_alpha=1.0,
        **(tracked or {}),
    )


def fit_prompts(rows: list[dict], build_prompt: Callable[[dict], str | list], tokenizer, limit: int,
                where: str) -> tuple[list[dict], int]:
    """The rows whose prompt leaves ``max_completion_length`` tokens in the model's context (``limit``
    prompt tokens at most), and how many were dropped; none left is an error naming the data."""
    def length(prompt) -> int:
        if isinstance(prompt, str):
            return len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        # the template's text, tokenized as TRL tokenizes it (transformers 5 returns a BatchEncoding for
        # tokenize=True, whose len() is its number of fields, not of tokens)
        text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    kept = [r for r in rows if length(build_prompt(r)) <= limit]
    if rows and not kept:
        raise ValueError(f"{where}: every prompt is longer than {limit} tokens (the context minus "
                         "max_completion_length); shorten them or lower max_completion_length")
    return kept, len(rows) - len(kept)


def prompt_dataset(rows: list[dict], build_prompt: Callable[[dict], str | list]):
    """A ``datasets.Dataset`` with a ``prompt`` column (``build_prompt(row)``); every other column is
    kept for the rewards."""
    from datasets import Dataset

    if not rows:
        raise ValueError("no training rows")
    return Dataset.from_list([{**r, "prompt": build_prompt(r)} for r in rows])


# ---------------------------------------------------------------------------------------------
# The trainer: TRL's, with the training forward pass in length buckets and dynamic sampling
# ---------------------------------------------------------------------------------------------


def grpo_trainer_class(length_buckets: int = 1, dynamic_sampling: int = 0):
    """TRL's ``GRPOTrainer``, extended (a subclass; TRL's loop itself is not forked) where the section asks:

    - ``length_buckets`` > 1: the per-token log-probabilities of a micro-batch are computed in that many
      groups of rows of similar completion length, each padded only to its own longest row. TRL pads
      every completion to the batch's longest, and a CPU spends its time on the padding too. The
      arithmetic is the same: a group drops the columns that are padding in all of its rows (left padding
      of the prompts, right padding of the completions); rotary attention depends only on the distance
      between tokens, so dropping leading columns moves no score. Rows come back in their order, the
      dropped columns as zeros (TRL masks them); gradients flow as through TRL's own pass
      (``tests/test_trainer.py``).
    - ``dynamic_sampling`` > 0: DAPO's dynamic sampling. A group whose rewards are all equal has zero
      advantage and adds no gradient; after each generation the groups with all-equal rewards are
      replaced by groups of fresh prompts (drawn from the training set, seeded by step), generated and
      scored the same way, for at most ``dynamic_sampling`` more rounds; what is still missing after
      them is filled with the dropped groups. The batch keeps its size, so TRL's loss and its
      normalisation see an ordinary batch. Logged: ``dynamic_sampling/zero_std_before`` (the share in
      the first generation), ``…/zero_std_after`` (in the batch trained on), ``…/extra_groups``.
      One process only (groups may span processes otherwise)."""
    from trl import GRPOTrainer

    if length_buckets <= 1 and dynamic_sampling <= 0:
        return GRPOTrainer

    class ExtendedGRPOTrainer(GRPOTrainer):
        def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep,
                                               batch_size=None, compute_entropy=False, compute_aux_loss=False,
                                               **extra):
            whole = super()._get_per_token_logps_and_entropies
            rows = input_ids.shape[0]
            if (length_buckets <= 1 or rows < 2 * length_buckets or compute_aux_loss
                    or any(v is not None for v in extra.values())):
                return whole(model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy,
                             compute_aux_loss, **extra)
            return _bucketed_logps(whole, length_buckets, model, input_ids, attention_mask, logits_to_keep,
                                   batch_size, compute_entropy)

        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            if dynamic_sampling <= 0 or not self.model.training:
                return out
            return _dynamic_sampling(self, super()._generate_and_score_completions, inputs, out, dynamic_sampling)

    return ExtendedGRPOTrainer


def _bucketed_logps(whole, buckets: int, model, input_ids, attention_mask, logits_to_keep, batch_size,
                    compute_entropy):
    """TRL's ``_get_per_token_logps_and_entropies`` (``whole``) on ``buckets`` groups of rows of similar
    completion length, each cut to the columns one of its rows uses. input_ids, attention_mask: (rows,
    width), the last ``logits_to_keep`` columns the completions; returns (logps, entropies or None, None),
    each (rows, logits_to_keep), rows in their order and the cut columns as zeros."""
    width = input_ids.shape[1]
    prompt = width - logits_to_keep
    columns = torch.arange(width, device=attention_mask.device)
    real = attention_mask.bool()
    first = torch.where(real, columns, width).min(dim=1).values  # each row's first real column
    last = torch.where(real[:, prompt:], columns[prompt:], prompt - 1).max(dim=1).values  # its last
    order = torch.argsort(last, stable=True)
    logps, entropies = [], []
    for group in torch.tensor_split(order, buckets):
        start, end = int(first[group].min()), max(int(last[group].max()), prompt) + 1
        lp, ent, _ = whole(model, input_ids[group, start:end], attention_mask[group, start:end],
                           end - prompt, batch_size, compute_entropy, False)
        pad = (0, logits_to_keep - (end - prompt))  # the columns no row of the group uses
        logps.append(torch.nn.functional.pad(lp, pad))
        if compute_entropy:
            entropies.append(torch.nn.functional.pad(ent, pad))
    back = torch.argsort(order)  # rows in their original order
    return torch.cat(logps)[back], torch.cat(entropies)[back] if compute_entropy else None, None


def _dynamic_sampling(trainer, generate_and_score, inputs, out: dict, rounds: int) -> dict:
    """DAPO's dynamic sampling on one generation ``out`` of ``inputs`` (``generate_and_score``: TRL's
    ``_generate_and_score_completions``): the groups with all-equal rewards replaced by groups of fresh
    prompts for at most ``rounds`` more generations, the rest filled with the dropped groups."""
    if trainer.accelerator.num_processes > 1:
        raise NotImplementedError("dynamic_sampling needs one process (a group may span processes)")
    g = trainer.num_generations
    wanted = len(inputs) // g
    zero = _zero_variance_groups(out["advantages"], g)
    before = float(zero.float().mean())
    pieces = [(out, [i for i in range(wanted) if not zero[i]])]  # (output, kept group indices)
    spare = [(out, i) for i in range(wanted) if zero[i]]  # the all-equal groups, kept for filling
    have, extra_groups = len(pieces[0][1]), 0
    # TRL (and the recorder) log each generation's metrics as one entry, averaged per entry: the
    # extra rounds' would count as much as the step's own generation, so they are dropped below
    metrics = trainer._metrics["train"]
    logged = {key: len(values) for key, values in metrics.items()}
    for round_ in range(rounds):
        if have >= wanted:
            break
        rng = random.Random(f"{trainer.args.seed}|{trainer.state.global_step}|{round_}")
        rows = [trainer.train_dataset[rng.randrange(len(trainer.train_dataset))] for _ in range(wanted - have)]
        more = generate_and_score([row for row in rows for _ in range(g)])
        extra_groups += len(rows)
        zero = _zero_variance_groups(more["advantages"], g)
        kept = [i for i in range(len(rows)) if not zero[i]][: wanted - have]
        pieces.append((more, kept))
        have += len(kept)
    pieces += [(o, [i]) for o, i in spare[: wanted - have]]
    for key in list(metrics):  # the step's own generation's metrics only
        del metrics[key][logged.get(key, 0):]
    batch = _concat_groups(pieces, g, trainer._tokenizer.pad_token_id)
    batch["num_items_in_batch"] = batch["completion_mask"].sum()
    after = float(_zero_variance_groups(batch["advantages"], g).float().mean())
    for name, value in (("zero_std_before", before), ("zero_std_after", after), ("extra_groups", extra_groups)):
        metrics[f"dynamic_sampling/{name}"].append(value)
    return batch


def _zero_variance_groups(advantages: torch.Tensor, group: int) -> torch.Tensor:
    """(groups,) bool: the groups whose advantages are all (nearly) zero: all-equal rewards under group
    normalisation (a group mean of equal rewards may miss them by an ulp). advantages: (rows,) or
    (rows, tokens)."""
    flat = advantages.reshape(advantages.shape[0], -1).abs().amax(dim=1)
    return flat.view(-1, group).amax(dim=1) < 1e-6


_LEFT_PADDED = {"prompt_ids", "prompt_mask"}
_PER_ROW = {"advantages"}
_PER_TOKEN = {"completion_ids", "completion_mask", "old_per_token_logps", "ref_per_token_logps",
              "sampling_per_token_logps", "tool_mask",
              # vLLM generation (TRL's default vllm_importance_sampling_correction): the policy's probability of
              # each sampled token over the engine's, (rows, tokens), or (rows, 1) at the sequence level
              "importance_sampling_ratio"}
_PADDING = {"prompt_ids": None, "completion_ids": None, "importance_sampling_ratio": 1.0}  # None: the pad token


def _concat_groups(pieces: list[tuple[dict, list[int]]], group: int, pad_id: int) -> dict:
    """One batch from the chosen groups of several outputs of ``_generate_and_score_completions``:
    prompts left-padded and completions right-padded again to the widest, rows group by group."""
    keys = set(pieces[0][0]) - {"num_items_in_batch"}
    unknown = keys - _LEFT_PADDED - _PER_ROW - _PER_TOKEN
    if unknown:
        raise NotImplementedError(f"dynamic_sampling: cannot combine generation outputs with {sorted(unknown)}")
    batch = {}
    for key in keys:
        parts = []
        for out, groups in pieces:
            if groups:
                rows = torch.cat([torch.arange(i * group, (i + 1) * group) for i in groups]).to(out[key].device)
                parts.append(out[key][rows])
        width = max(p.shape[1] for p in parts) if parts[0].dim() > 1 else None
        value = _PADDING.get(key, 0)
        value = pad_id if value is None else value
        if key in _LEFT_PADDED:
            parts = [torch.nn.functional.pad(p, (width - p.shape[1], 0), value=value) for p in parts]
        elif width is not None:
            parts = [torch.nn.functional.pad(p, (0, width - p.shape[1]), value=value) for p in parts]
        batch[key] = torch.cat(parts)
    return batch


# ---------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------


def filter_by_pass_rate(recipe, cfg, model, tokenizer, rows: list[dict], out_dir: Path, prompt_template: str,
                        seed: int) -> tuple[list[dict], dict]:
    """The training rows ``cfg.pass_rate_filter`` keeps, and a summary for the manifest.

    The first ``pool`` reasoning rows (those with an answer and no other ``task``) are sampled
    ``samples`` times each by ``model`` at the section's rollout temperature, top-p and completion
    length, in ``prompt_template`` (the format the section trains in), and graded as the evaluation
    grades; rows whose pass rate lies in [``min_pass_rate``, ``max_pass_rate``] are kept, in their
    order. Rows beyond the pool are not trained on; rows without a verifiable answer are kept
    unscored. The samples go to ``out_dir/samples.jsonl`` chunk by chunk, so a resumed run scores no
    prompt twice and keeps the same rows.
    """
    from eval.stats import per_problem

    f = cfg.pass_rate_filter

    def is_gradable(row: dict) -> bool:
        return (row.get("task") or "reasoning") == "reasoning" and row.get("answer") is not None

    gradable = [r for r in rows if is_gradable(r)]
    pool = gradable[: f.pool] if f.pool is not None else gradable
    t0 = time.time()
    summary = held_out(recipe, pool, model=model, tokenizer=tokenizer, out_dir=out_dir, template=prompt_template,
                       name="pool", progress=True, temperature=cfg.setting("temperature"), seed=seed, k=f.samples,
                       top_p=cfg.setting("top_p"), max_new_tokens=cfg.max_completion_length, backend="transformers")
    by_id = per_problem(read_jsonl_tolerant(Path(out_dir) / "samples.jsonl"))  # id → pass rate
    rate = [by_id[str(r["id"])] for r in pool]
    kept_ids = {r["id"] for r, x in zip(pool, rate, strict=True) if f.min_pass_rate <= x <= f.max_pass_rate}
    kept = [r for r in rows if not is_gradable(r) or r["id"] in kept_ids]
    record = {"scored": len(pool), "kept": len(kept_ids), "unscored_kept": len(rows) - len(gradable),
              "too_easy": sum(x > f.max_pass_rate for x in rate), "too_hard": sum(x < f.min_pass_rate for x in rate),
              "not_in_pool": len(gradable) - len(pool), "pool_pass@1": summary.get("pass@1"),
              "samples": f.samples, "temperature": cfg.setting("temperature"), "seconds": time.time() - t0}
    if pool and not kept_ids:
        raise ValueError(f"pass_rate_filter kept no prompt of {len(pool)} (pass rates outside "
                         f"[{f.min_pass_rate}, {f.max_pass_rate}]; pool pass@1 {summary.get('pass@1')})")
    return kept, record


def _describe(summary: dict) -> str:
    return (f"pass@1 {summary.get('pass@1', 0):.3f}, think {summary.get('think_rate', 0):.2f}, "
            f"format {summary.get('format_rate', 0):.2f}, mean length {summary.get('mean_length_tokens', 0):.1f} tokens")


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------


class GRPOJob(TrainingJob):
    """GRPO under an RLConfig section (:func:`run_rl`): the rewards and their recorder, the held-out
    evaluations around and during training, the pass-rate filter, and TRL's trainer (extended where the
    section asks: :func:`grpo_trainer_class`)."""

    key, part = "train", "grpo"

    def __init__(self, ctx, cfg, *, train_rows, eval_rows, build_prompt, model_ref, data_name, data_source,
                 eval_template, callbacks, rewards, held_out):
        out = self.out = Path(ctx.dir)
        self.ctx, self.cfg, self.recipe, self.m = ctx, cfg, ctx.recipe, ctx.manifest
        self.train_rows, self.eval_rows, self.build_prompt, self.model_ref = train_rows, eval_rows, build_prompt, model_ref
        self.data_name, self.data_source, self.template, self.extra = data_name, data_source, eval_template, callbacks
        self.measure = held_out  # evaluate before and after (False: training only, distill_rl's side work)
        self.what, self.seed = ctx.stage, seed_of(ctx.recipe, cfg)
        self.names, self.funcs, self.weights = rewards or reward_functions(cfg)
        self.trainer_dir, self.metrics_path, self.final = out / "trainer", out / METRICS_NAME, out / "checkpoint"
        self.logs = [self.metrics_path]
        self.stale = [out / "eval_before", out / "eval_after", out / "samples", out / POOL_DIR,
                      *out.glob(f"{EVAL_STEP_PREFIX}*"), *out.glob(CANDIDATES_NAME.replace(".jsonl", "*.jsonl"))]
        self.recorder = RolloutRecorder(out, self.names, sample_every=cfg.sample_every,
                                        samples_per_step=cfg.samples_per_step, language_target=cfg.language_target)
        self.steps = cfg.steps

    # -- before training: where it starts, the model and data, the "before" evaluation -----------
    def check(self, precision) -> None:
        self.precision = precision
        check_vllm(self.cfg, precision.device)

    def forget_after(self, step: int) -> None:
        self.recorder.truncate(step)
        drop_step_evaluations(self.out, self.m.data["metrics"], step)
        self.m.save()

    def started(self, start) -> None:
        if self.ctx.resumed and self.m.data.get("resumes"):
            self.m.data["resumes"][-1]["from_step"] = self.cfg.steps if start.done else start.from_step
            self.m.save()

    def load(self, precision):
        return load_model_and_tokenizer(self.model_ref, device=precision.device, dtype=precision.dtype,
                                        trust_remote_code=self.recipe.trust_remote_code)

    def when_done(self) -> Path:
        """Trained in an earlier run (or adopted from side work): the evaluations that are missing."""
        if self.measure and "eval_before" not in self.m.data["metrics"]:
            set_seed(self.seed)
            model, tokenizer = self.load(self.precision)
            set_attention(model, self.cfg)
            self.inputs(model, tokenizer)
        log.info("training already finished (%s); evaluating it", self.final)
        model, tokenizer = load_model_and_tokenizer(str(self.final), device=self.precision.device, dtype=self.precision.dtype,
                                                    trust_remote_code=self.recipe.trust_remote_code)
        self.after(model, tokenizer)
        return self.final

    def inputs(self, model, tokenizer) -> None:
        """The prompts that fit the context (recorded as the stage's input data), and the held-out
        evaluation of the starting model (or the same measurement another run made: ``ctx.reuse``)."""
        cfg, m, out = self.cfg, self.m, self.out
        if self.train_rows and not isinstance(self.build_prompt(self.train_rows[0]), str):  # chat prompts
            self.recorder.prefill = assistant_prefill(tokenizer)
        if m.data["inputs"]["model"] is None:
            m.set_input_model(self.model_ref)
        context = getattr(model.config, "max_position_embeddings", None)
        skipped = {}
        if context:
            self.train_rows, too_long = fit_prompts(self.train_rows, self.build_prompt, tokenizer,
                                                    context - cfg.max_completion_length, self.data_source)
            if too_long:
                skipped["prompt longer than the context"] = too_long
                log.warning("%d prompts of %s do not fit the context with room for the completion: skipped",
                            too_long, self.data_source)
        m.add_input_data(self.data_name, self.data_source, rows_used=len(self.train_rows), skipped=skipped)
        reused = self.ctx.reuse.get("eval_before")  # the same model, rows and protocol, measured by another run
        if self.measure and "eval_before" not in m.data["metrics"] and is_main():
            if reused is not None and (Path(reused) / "results.json").is_file():
                shutil.copytree(reused, out / "eval_before", dirs_exist_ok=True)
                summary = json.loads((out / "eval_before" / "results.json").read_text(encoding="utf-8"))
                m.update_metrics(eval_before=summary, eval_before_from=m.record(reused))
            else:
                log.info("evaluating %d held-out problems before training", len(self.eval_rows))
                m.update_metrics(eval_before=held_out(self.recipe, self.eval_rows, model=model, tokenizer=tokenizer,
                                                      out_dir=out / "eval_before", model_path=self.model_ref,
                                                      template=self.template))
            log.info("before: %s", _describe(m.data["metrics"]["eval_before"]))
        barrier()

    def prepare(self, model, tokenizer) -> None:
        cfg = self.cfg
        self.inputs(model, tokenizer)
        self.tokenizer = tokenizer
        if cfg.pass_rate_filter is not None:  # the prompts the starting policy solves sometimes, not always
            self.train_rows, pool = run_once(filter_by_pass_rate, self.recipe, cfg, model, tokenizer, self.train_rows,
                                             self.out / POOL_DIR, self.template, self.seed)
            log.info("pass-rate filter: %d of %d prompts kept (%d solved too often, %d too rarely; %.0f s)",
                     pool["kept"], pool["scored"], pool["too_easy"], pool["too_hard"], pool["seconds"])
            if is_main():
                self.m.update_metrics(pool_filter=pool)
            if len(self.train_rows) < cfg.steps * cfg.prompts_per_step:
                log.warning("pass-rate filter: %d prompts for %d steps × %d prompts: the trainer goes through "
                            "them more than once", len(self.train_rows), cfg.steps, cfg.prompts_per_step)
        if self.precision.device.type == "cpu" and cfg.lora is None and not cfg.setting("use_vllm") and supports(model):
            # GRPO's rollouts go through model.generate: on the CPU default, the KV-cache loop instead
            model.generate = fast_generate(model)

    # -- training: TRL's GRPOTrainer ------------------------------------------------------------
    def config(self, *, tracked, **common):
        return grpo_config(self.cfg, reward_weights=self.weights, section=self.ctx.stage, tracked=tracked, **common)

    def callbacks(self) -> list:
        return [MetricsCallback(self.metrics_path, self.names), *(self.extra or [])]

    def evaluate_during(self, model, step: int) -> dict | None:
        """At ``eval_steps``: the full held-out evaluation (``eval_step_NNNNN/``); every ``eval_every``
        steps: the pass@1 monitor, logged with the step."""
        if step in self.step_evaluations:
            summary = held_out(self.recipe, self.eval_rows, model=model, tokenizer=self.tokenizer,
                               out_dir=eval_step_dir(self.out, step), template=self.template)
            self.m.data["metrics"].setdefault("eval_steps", {})[str(step)] = summary
            self.m.save()
            log.info("step %d: %s", step, _describe(summary))
        if self.cfg.eval_every and step % self.cfg.eval_every == 0:
            return self.monitor(model, step)
        return None

    def trainer(self, model, tokenizer, args, callbacks):
        cfg = self.cfg
        log.info("GRPO: %d steps × %d prompts × %d samples, loss %s, lr %.1e, beta %g, %s, %s", cfg.steps,
                 cfg.prompts_per_step, cfg.num_generations, args.loss_type, args.learning_rate, args.beta,
                 self.precision.device.type, self.precision.name)
        trainer = grpo_trainer_class(cfg.length_buckets, cfg.dynamic_sampling)(
            model=model, args=args, processing_class=tokenizer, callbacks=callbacks, peft_config=lora_config(cfg.lora),
            reward_funcs=[self.recorder.wrap(n, f) for n, f in zip(self.names, self.funcs, strict=True)],
            train_dataset=prompt_dataset(self.train_rows, self.build_prompt))
        self.step_evaluations = [s for s in cfg.eval_steps if s < cfg.steps]
        if self.step_evaluations or cfg.eval_every:
            self.monitor = pass_at_1_monitor(self.recipe, tokenizer, self.eval_rows[: cfg.eval_problems], self.template)
            DuringTraining(self.evaluate_during, steps=self.step_evaluations, every=cfg.eval_every).install(trainer)
        if self.precision.device.type == "cpu" and getattr(getattr(trainer, "vllm_generation", None), "mode", None) == "colocate":
            sync_through_reload(trainer.vllm_generation)  # vLLM's CPU build (check_vllm)
        return trainer

    def trained(self, model, tokenizer, trainer) -> None:
        close_colocated_engine(trainer)
        self.processes = processes_summary(model, self.recorder.prompts_seen, "prompts_scored")

    def metrics(self, model, tokenizer, global_step, start, seconds) -> dict:
        rows = read_jsonl_tolerant(self.metrics_path)
        return {**train_summary(rows, global_step, start.from_step, seconds, self.recorder.candidates_written),
                "processes": self.processes}

    # -- after training: the "after" evaluation and the curves ----------------------------------
    def after(self, model, tokenizer) -> None:
        if is_main() and self.measure:
            log.info("evaluating %d held-out problems after training", len(self.eval_rows))
            after = held_out(self.recipe, self.eval_rows, model=model, tokenizer=tokenizer, out_dir=self.out / "eval_after",
                             model_path=str(self.final), template=self.template)
            self.m.update_metrics(eval_after=after)
            log.info("after:  %s", _describe(after))
            curve = {0: self.m.data["metrics"]["eval_before"].get("pass@1"), self.cfg.steps: after.get("pass@1")}
            curve.update({int(s): e.get("pass@1") for s, e in self.m.data["metrics"].get("eval_steps", {}).items()})
            plot_curves(self.metrics_path, self.out / PLOT_NAME, curve,
                  "format_rate" if self.template == "r1_zero" else "readable_rate")
        barrier()


def run_rl(ctx, cfg, *, train_rows: list[dict], eval_rows: list[dict], build_prompt: Callable[[dict], str | list],
           model_ref: str, data_name: str = "task_world_train", data_source: str = "data/taskworld.py",
           eval_template: str = "r1_zero", callbacks: Sequence | None = None,
           rewards: tuple[list[str], list[Callable], list[float]] | None = None, held_out: bool = True) -> Path:
    """Train ``model_ref`` with GRPO under ``cfg`` inside a stage (``ctx``: stages.pipeline.runner.StageContext).

    Evaluates ``eval_rows`` before and after, with prompts in ``eval_template`` (``r1_zero`` or
    ``chat``: the format ``build_prompt(row)`` trains in); returns the final checkpoint folder.
    ``callbacks`` are extra ``transformers.TrainerCallback`` objects. ``rewards``: (names, functions,
    weights) instead of the rule rewards ``cfg.rewards`` names (stage 4 routes rows and adds reward models).
    ``held_out=False``: training only, no evaluation before or after (distill_rl's training done as side
    work: the stage that adopts it evaluates).
    """
    return train_section(ctx, cfg, GRPOJob(
        ctx, cfg, train_rows=train_rows, eval_rows=eval_rows, build_prompt=build_prompt, model_ref=model_ref,
        data_name=data_name, data_source=data_source, eval_template=eval_template, callbacks=callbacks,
        rewards=rewards, held_out=held_out))
