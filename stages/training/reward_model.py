"""Stage 4's reward models: TRL's ``RewardTrainer`` (Bradley-Terry, ``-log σ(r(chosen) - r(rejected))``) on
conversational preference pairs, configured by :class:`RewardModelJob` and run by ``skeleton.train_section``;
:class:`RewardScorer` scores ``(user, response)`` pairs as the trainer saw them (the same chat template).

Deviation from the paper: DeepSeek-R1 reuses DeepSeek-V3's reward models and preference data; here the tiny
world builds its own pairs (``data/general.py``), and real recipes name a dataset or a reward model.
An interrupted training starts over (no checkpoints). Outputs: docs/training.md "reward_model.py".
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from pathlib import Path

import torch

from data.jsonl import write_jsonl_atomic
from data.templates import training_chat_template
from stages.pipeline.common import is_main, load_tokenizer
from stages.training import skeleton
from stages.training.skeleton import TrainingJob

log = logging.getLogger("r1")


class RewardScorer:
    """``scorer(user_texts, responses) -> list[float]``: a reward model's scores, batched."""

    def __init__(self, model_ref: str, *, device: torch.device, batch_size: int = 32, max_length: int = 2048,
                 trust_remote_code: bool = False):
        from transformers import AutoModelForSequenceClassification

        self.tokenizer = load_tokenizer(model_ref, trust_remote_code=trust_remote_code)
        self.model = AutoModelForSequenceClassification.from_pretrained(
            model_ref, num_labels=1, trust_remote_code=trust_remote_code).to(device).eval()
        if self.model.config.pad_token_id is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.device, self.batch_size, self.max_length = device, batch_size, max_length

    @torch.inference_mode()
    def __call__(self, users: list[str], responses: list[str]) -> list[float]:
        texts = [self.tokenizer.apply_chat_template([{"role": "user", "content": u},
                                                     {"role": "assistant", "content": r}], tokenize=False)
                 for u, r in zip(users, responses, strict=True)]
        self.tokenizer.padding_side = "right"
        scores: list[float] = []
        for start in range(0, len(texts), self.batch_size):
            enc = self.tokenizer(texts[start : start + self.batch_size], return_tensors="pt", padding=True,
                                 truncation=True, max_length=self.max_length, add_special_tokens=False).to(self.device)
            logits = self.model(**enc).logits  # (batch, 1): the score at each row's last real token
            scores.extend(logits[:, 0].float().tolist())
        return scores


def pairwise_accuracy(scorer: RewardScorer, pairs: list[dict]) -> float | None:
    """Share of pairs whose chosen response outscores the rejected one."""
    if not pairs:
        return None
    users = [p["chosen"][0]["content"] for p in pairs]
    chosen = scorer(users, [p["chosen"][-1]["content"] for p in pairs])
    rejected = scorer(users, [p["rejected"][-1]["content"] for p in pairs])
    return sum(c > r for c, r in zip(chosen, rejected, strict=True)) / len(pairs)


def reward_config(spec, *, output_dir: Path, seed: int, device: torch.device, bf16: bool, steps: int,
                  tracked: dict | None = None):
    """(TRL's RewardConfig, the settings given to it) for a RewardModelSpec section (``tracked``: the
    tracking settings, ``stages.training.skeleton.tracking``). No checkpoints: an interrupted run starts over."""
    return skeleton.trl_args(spec, output_dir=output_dir, seed=seed, device=device, bf16=bf16, max_steps=steps,
                    per_device_train_batch_size=spec.batch_size,
                    gradient_accumulation_steps=spec.gradient_accumulation_steps, max_length=spec.max_length,
                    save_strategy="no", **(tracked or {}))


class RewardModelJob(TrainingJob):
    """A reward model trained from ``init_ref`` on preference pairs: :func:`train_reward_model`."""

    resumable = False  # no checkpoints (save_strategy "no"): an interrupted run starts over

    def __init__(self, ctx, spec, *, pairs: Callable[[], list[dict]], init_ref: str, name: str, held_out: float):
        out = Path(ctx.dir)
        self.ctx, self.spec, self.make_pairs, self.init_ref, self.held_out = ctx, spec, pairs, init_ref, held_out
        self.key, self.part, self.what = name, f"reward_model_{name}", f"{ctx.stage} reward model {name}"
        self.final, self.trainer_dir, self.metrics_path = out / name, out / f"{name}_trainer", out / f"{name}_metrics.jsonl"
        self.logs = [self.metrics_path]

    def started(self, start) -> None:
        """The pairs, built only now (a finished model is not redone) and before the seed, then split."""
        if start.done:
            return
        recipe, name, out = self.ctx.recipe, self.key, Path(self.ctx.dir)
        pairs = self.make_pairs()
        if len(pairs) < 10:
            raise ValueError(f"reward model {name}: {len(pairs)} preference pairs; need at least 10")
        order = list(pairs)
        random.Random(recipe.seed).shuffle(order)
        n_eval = max(1, int(len(order) * self.held_out))
        self.eval_pairs, self.train_pairs = order[:n_eval], order[n_eval:]
        if is_main():  # the curated set, published with the stage (stages/pipeline/cards.py)
            write_jsonl_atomic(out / f"{name}_pairs.jsonl", [{**p, "split": "held_out"} for p in self.eval_pairs]
                               + [{**p, "split": "train"} for p in self.train_pairs])

    def load(self, precision):
        """The tokenizer and the model (its scalar head initialised at random, after the seed)."""
        from transformers import AutoModelForSequenceClassification

        recipe = self.ctx.recipe
        self.precision = precision
        tokenizer = load_tokenizer(self.init_ref, trust_remote_code=recipe.trust_remote_code)
        # the template that renders the whole response: DeepSeek-R1-Distill's own drops everything before
        # </think>, so a harmlessness model would never see the reasoning (saved with the reward model, the
        # scorer renders the same way)
        tokenizer.chat_template = training_chat_template(tokenizer).template
        model = AutoModelForSequenceClassification.from_pretrained(self.init_ref, num_labels=1, dtype=precision.dtype,
                                                                   trust_remote_code=recipe.trust_remote_code)
        return model, tokenizer

    def prepare(self, model, tokenizer) -> None:
        if model.config.pad_token_id is None:
            model.config.pad_token_id = tokenizer.pad_token_id
        self.steps = skeleton.steps_for_epochs(self.spec.epochs, len(self.train_pairs), self.spec)

    def config(self, *, tracked, **common):
        return reward_config(self.spec, steps=self.steps, tracked=tracked, **common)

    def callbacks(self) -> list:
        return [skeleton.LossLog(self.metrics_path)]

    def trainer(self, model, tokenizer, args, callbacks):
        from datasets import Dataset
        from trl import RewardTrainer

        log.info("reward model %s: %d pairs (%d held out), %d steps from %s", self.key, len(self.train_pairs),
                 len(self.eval_pairs), self.steps, self.init_ref)
        return RewardTrainer(model=model, args=args, train_dataset=Dataset.from_list(self.train_pairs),
                             processing_class=tokenizer, callbacks=callbacks,
                             peft_config=skeleton.lora_config(self.spec.lora, task_type="SEQ_CLS", modules_to_save=["score"]))

    def metrics(self, model, tokenizer, global_step, start, seconds) -> dict:
        scorer = RewardScorer(str(self.final), device=self.precision.device, max_length=self.spec.max_length,
                              trust_remote_code=self.ctx.recipe.trust_remote_code)
        accuracy = pairwise_accuracy(scorer, self.eval_pairs)
        log.info("reward model %s: held-out pair accuracy %.3f (%.0fs)", self.key, accuracy or 0.0, seconds)
        return {"pairs_train": len(self.train_pairs), "pairs_held_out": len(self.eval_pairs), "steps": self.steps,
                **skeleton.losses(self.metrics_path), "held_out_pair_accuracy": accuracy, "train_seconds": round(seconds, 1)}


def train_reward_model(ctx, spec, *, pairs: Callable[[], list[dict]], init_ref: str, name: str,
                       held_out: float = 0.1) -> Path:
    """Train a reward model from ``init_ref`` on the preference pairs ``pairs()`` builds (called only when
    there is a model to train: a finished one is not redone) inside a stage; returns ``<stage dir>/<name>``.

    ``held_out`` of the pairs (shuffled under the recipe's seed) are kept out of training and measure
    the pairwise accuracy after it."""
    return skeleton.train_section(ctx, spec, RewardModelJob(ctx, spec, pairs=pairs, init_ref=init_ref, name=name,
                                                   held_out=held_out))
