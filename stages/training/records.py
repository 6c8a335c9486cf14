"""What an RL run records besides its model: :class:`RolloutRecorder` (every scored batch: accuracy, format,
think, language-mix and re-check rates as TRL metrics, ``samples/step_NNNNN.jsonl``, the cold-start candidates),
:class:`MetricsCallback` (``metrics.jsonl``, one row per logging step), the held-out evaluations by RL step
(``eval_before/``, ``eval_step_NNNNN/``, ``eval_after/``), the manifest's training summary and the curves.
On resume from step N, what the steps after N recorded is forgotten (they run again): docs/training.md "grpo.py".
"""

from __future__ import annotations

import logging
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from transformers import TrainerCallback

from data.faults import fault_point
from data.jsonl import append_jsonl, read_jsonl_tolerant
from data.templates import is_readable_response, is_well_formed, think_text, with_prefill
from eval.language import is_mixed
from eval.recheck import label as recheck_label
from stages.pipeline.common import rank
from stages.training import rewards as R
from stages.training.skeleton import truncate_jsonl

log = logging.getLogger("r1")

METRICS_NAME = "metrics.jsonl"
EVAL_STEP_PREFIX = "eval_step_"
POOL_DIR = "pass_rate_pool"  # the pass-rate filter's samples (``filter_by_pass_rate``)
CANDIDATES_NAME = "cold_start_candidates.jsonl"
PLOT_NAME = "training_curves.png"


class RolloutRecorder:
    """Sees every scored batch (through :meth:`wrap`) and records what the rewards alone do not:
    accuracy/format/think/language-mix rates as TRL metrics, sample files, cold-start candidates."""

    def __init__(self, out_dir: Path, names: Sequence[str], *, sample_every: int, samples_per_step: int,
                 language_target: str = "en"):
        self.out_dir = Path(out_dir)
        self.names = list(names)
        self.sample_every = sample_every
        self.samples_per_step = samples_per_step
        self.language_target = language_target
        self.rank = rank()
        suffix = "" if self.rank == 0 else f".rank{self.rank}"
        self.candidates_path = self.out_dir / CANDIDATES_NAME.replace(".jsonl", f"{suffix}.jsonl")
        self.samples_dir = self.out_dir / "samples"
        self.candidates_written = 0
        self.prompts_seen: set[tuple[int, str]] = set()  # (step, prompt id) scored on this process
        self._batch: dict[str, list] = {}
        self._sampled_step: int | None = None  # the step whose sample file this run has written
        self.prefill = ""  # what the chat template writes of each response (data.templates.assistant_prefill)

    def wrap(self, name: str, func: Callable) -> Callable:
        """``func`` under the name TRL will log it as (``rewards/<name>/mean``), reporting here. Under a
        template that opens the think block itself, ``func`` sees each completion with that opening in
        front (TRL passes only the generated text): the response as the model's user reads it."""

        def reward(completions, **kwargs):
            completions = [with_prefill(c, self.prefill) for c in completions] if self.prefill else completions
            if name == self.names[0]:
                self._batch = {}  # a new batch (also after a reward that raised mid-batch)
                fault_point("reward")
            values = func(completions, **kwargs)
            self._batch[name] = list(values)
            if len(self._batch) == len(self.names):  # every reward of this batch is in
                batch, self._batch = self._batch, {}
                self.record(completions, batch, kwargs)
            return values

        reward.__name__ = reward.__qualname__ = name
        return reward

    def record(self, completions, rewards: dict[str, list], kwargs: dict) -> None:
        n = len(completions)
        texts = [R.completion_text(c) for c in completions]
        state = kwargs.get("trainer_state")
        step = state.global_step + 1 if state is not None else 0
        if "accuracy" in rewards:
            acc = rewards["accuracy"]
        elif kwargs.get("answer") is not None:  # not a training reward here, but still measured
            acc = R.accuracy_reward(completions, **{k: v for k, v in kwargs.items() if k != "log_metric"})
        else:
            acc = [None] * n
        well = [is_well_formed(t) for t in texts]
        readable = [is_readable_response(t) for t in texts]
        thinks = [think_text(t) for t in texts]
        tasks = kwargs.get("task") or ["reasoning"] * n
        general = [i for i in range(n) if tasks[i] in ("general", "safety")]
        langs = kwargs.get("lang") or [None] * n
        mixed = [bool(th and is_mixed(th, target=lang or self.language_target)) for th, lang in zip(thinks, langs, strict=True)]
        lengths = [len(ids) for ids in kwargs.get("completion_ids") or [[]] * n]

        def column(name, i):
            values = kwargs.get(name)
            return None if values is None else values[i]

        self.prompts_seen.update((step, str(i)) for i in kwargs.get("id") or [])

        log_metric = kwargs.get("log_metric")
        if log_metric is not None:
            scored = [a for a in acc if a is not None]
            if scored:
                log_metric("accuracy", sum(scored) / len(scored))
            log_metric("format_rate", sum(well) / n)
            log_metric("readable_rate", sum(readable) / n)
            if general:  # stage 4: the general rows, judged by the rules (never a reward)
                from eval.judges import is_helpful_response

                judged = [is_helpful_response({"harmful": bool(column("harmful", i)),
                                               "reference": column("answer", i) or ""}, texts[i]) for i in general]
                log_metric("general_helpful_rate", sum(judged) / len(judged))
            log_metric("think_rate", sum(th is not None for th in thinks) / n)
            log_metric("language_mix_rate", sum(mixed) / n)
            reasoned = [recheck_label(th) for th in thinks if th is not None]
            if reasoned:  # re-checks among the chains of thought (eval/recheck.py; finding F0)
                log_metric("recheck_rate", sum(x != "plain" for x in reasoned) / len(reasoned))
                log_metric("corrected_rate", sum(x == "corrected" for x in reasoned) / len(reasoned))

        def row(i: int) -> dict:
            return {"step": step, "id": column("id", i), "problem": column("problem", i),
                    "answer": column("answer", i), "lang": column("lang", i), "verifier": column("verifier", i),
                    "completion": texts[i], "num_tokens": lengths[i]}

        candidates = [dict(row(i), rewards={k: v[i] for k, v in rewards.items()})
                      for i in range(n) if acc[i] is not None and acc[i] >= 1.0 and well[i]]
        append_jsonl(self.candidates_path, candidates)
        self.candidates_written += len(candidates)

        if self.rank == 0 and (step == 1 or step % self.sample_every == 0):
            samples = [dict(row(i), rewards={k: v[i] for k, v in rewards.items()}, accuracy=acc[i],
                            well_formed=well[i], has_think=thinks[i] is not None, mixed_language=mixed[i])
                       for i in range(min(n, self.samples_per_step))]
            path = self.samples_dir / f"step_{step:05d}.jsonl"
            if step != self._sampled_step:  # a step that runs again (resume) rewrites its file; the extra
                path.unlink(missing_ok=True)  # generations of one step (dynamic sampling) add to it
                self._sampled_step = step
            append_jsonl(path, samples)

    def truncate(self, max_step: int) -> None:
        """Forget everything recorded after ``max_step`` (those steps run again on resume)."""
        for p in self.out_dir.glob(CANDIDATES_NAME.replace(".jsonl", "*.jsonl")):
            truncate_jsonl(p, max_step)
        if self.samples_dir.is_dir():
            for p in self.samples_dir.glob("step_*.jsonl"):
                if int(p.stem.split("_")[1]) > max_step:
                    p.unlink()


# ---------------------------------------------------------------------------------------------
# Held-out evaluation during training
# ---------------------------------------------------------------------------------------------


def eval_step_dir(out: Path, step: int) -> Path:
    return Path(out) / f"{EVAL_STEP_PREFIX}{step:05d}"


def held_out_by_step(stage_dir: Path, steps: int | None) -> dict[int, list[dict]]:
    """A run's graded held-out samples by RL step: 0 (before training), every step evaluation, and
    ``steps`` (after training, when given). Steps without samples are left out."""
    stage_dir = Path(stage_dir)
    folders = {0: stage_dir / "eval_before"}
    folders.update({int(d.name[len(EVAL_STEP_PREFIX):]): d for d in stage_dir.glob(f"{EVAL_STEP_PREFIX}*")})
    if steps:
        folders[int(steps)] = stage_dir / "eval_after"
    out = {step: read_jsonl_tolerant(d / "samples.jsonl") for step, d in sorted(folders.items())
           if (d / "samples.jsonl").exists()}
    return {step: rows for step, rows in out.items() if rows}


def drop_step_evaluations(out: Path, metrics: dict, max_step: int) -> None:
    """Forget the step evaluations after ``max_step`` (those steps run again on resume)."""
    for d in Path(out).glob(f"{EVAL_STEP_PREFIX}*"):
        if int(d.name[len(EVAL_STEP_PREFIX):]) > max_step:
            shutil.rmtree(d, ignore_errors=True)
    for step in [s for s in metrics.get("eval_steps", {}) if int(s) > max_step]:
        del metrics["eval_steps"][step]


# ---------------------------------------------------------------------------------------------
# metrics.jsonl
# ---------------------------------------------------------------------------------------------


class MetricsCallback(TrainerCallback):
    """One ``metrics.jsonl`` row per logging step, from TRL's logs (names as of TRL 1.16) plus
    the recorder's metrics."""

    def __init__(self, path: Path, reward_names: Sequence[str]):
        self.path = Path(path)
        self.reward_names = list(reward_names)
        self.t_last = time.time()
        self.last_step = 0

    def on_train_begin(self, args, state, control, **kwargs):
        self.t_last, self.last_step = time.time(), state.global_step

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs or "loss" not in logs or "train_runtime" in logs:
            return  # the end-of-training summary and evaluation logs have no loss, or are the summary
        # (with several optimizer steps per generation, TRL logs the generation's metrics, reward included,
        # only on the steps that generated; the others still log their loss, entropy and clipping)
        now = time.time()
        steps = state.global_step - self.last_step
        g = logs.get
        row = {
            "step": state.global_step,
            "reward": g("reward"),
            "reward_std": g("reward_std"),
            "rewards": {n: g(f"rewards/{n}/mean") for n in self.reward_names},
            "accuracy": g("accuracy"),
            "format_rate": g("format_rate"),
            "readable_rate": g("readable_rate"),
            "general_helpful_rate": g("general_helpful_rate"),
            "think_rate": g("think_rate"),
            "language_mix_rate": g("language_mix_rate"),
            "recheck_rate": g("recheck_rate"),
            "corrected_rate": g("corrected_rate"),
            "mean_length": g("completions/mean_length"),
            "truncated_rate": g("completions/clipped_ratio"),
            "kl": g("kl"),
            "entropy": g("entropy"),
            "clip_ratio": g("clip_ratio/region_mean"),
            "clip_ratio_low": g("clip_ratio/low_mean"),
            "clip_ratio_high": g("clip_ratio/high_mean"),
            "frac_reward_zero_std": g("frac_reward_zero_std"),
            # vLLM generation: the policy's probability of the sampled tokens over the engine's (1: the engine
            # holds the policy's weights; TRL corrects the loss by it)
            "is_ratio_mean": g("sampling/importance_sampling_ratio/mean"),
            "is_ratio_min": g("sampling/importance_sampling_ratio/min"),
            "is_ratio_max": g("sampling/importance_sampling_ratio/max"),
            "eval_pass@1": g("eval_pass@1"),  # eval_every: held-out pass@1 while training (a monitor)
            "zero_std_before": g("dynamic_sampling/zero_std_before"),  # with dynamic sampling: the first
            "zero_std_after": g("dynamic_sampling/zero_std_after"),  # generation's share, and the trained batch's
            "dynamic_extra_groups": g("dynamic_sampling/extra_groups"),
            "loss": g("loss"),
            "grad_norm": g("grad_norm"),
            "learning_rate": g("learning_rate"),
            "gold_unparseable": g("accuracy/gold_unparseable"),
            "sandbox_errors": g("accuracy/sandbox_error"),
            "seconds_per_step": round((now - self.t_last) / steps, 4) if steps > 0 else None,
            "time": round(now, 1),
        }
        append_jsonl(self.path, [row])
        self.t_last, self.last_step = now, state.global_step


def train_summary(rows: list[dict], global_step: int, from_step: int, train_seconds: float,
                   candidates_this_run: int) -> dict:
    tail = rows[-max(1, len(rows) // 10):] if rows else []

    def mean(key, source=tail):
        values = [r[key] for r in source if r.get(key) is not None]
        return round(sum(values) / len(values), 4) if values else None

    seconds = [r["seconds_per_step"] for r in rows if r.get("seconds_per_step") is not None]
    return {
        "steps": global_step,
        "resumed_from_step": from_step,
        "logged_rows": len(rows),
        "final_accuracy": mean("accuracy"),
        "final_format_rate": mean("format_rate"),
        "final_mean_length": mean("mean_length"),
        "final_language_mix_rate": mean("language_mix_rate"),
        "first_accuracy": rows[0].get("accuracy") if rows else None,
        "first_mean_length": rows[0].get("mean_length") if rows else None,
        "mean_frac_reward_zero_std": mean("frac_reward_zero_std", rows),
        "seconds_per_step": round(statistics.median(seconds), 4) if seconds else None,
        "train_seconds_this_run": round(train_seconds, 1),
        "cold_start_candidates_this_run": candidates_this_run,
        "reward_stats": dict(R.STATS),
    }


def plot_curves(metrics_path: Path, png: Path, evals: dict[int, float | None], format_key: str) -> None:
    try:
        from eval.plots import plot_training

        plot_training(metrics_path, png, evals={k: v for k, v in evals.items() if v is not None},
                      format_key=format_key)
    except Exception as e:  # a plot is never worth failing a stage for
        log.warning("could not plot %s: %s", metrics_path, e)
