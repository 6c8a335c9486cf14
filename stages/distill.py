"""Distillation (DeepSeek-R1, section 2.4): SFT of small students on stage 4's curated set, and the
RL-only control the paper compares them with (its Table 6).

    r1 distill    --recipe tiny       # or: make distill      every student of distill.students
    r1 distill_rl --recipe tiny       # or: make distill-rl   the control: stage-1 RL on a student's base

**distill** reads stage 4's ``sft_mix.jsonl`` (the rejection-sampled reasoning samples and the general
data; ``distill.data: reasoning`` keeps only the former) and, for each student, fine-tunes its base
with the shared SFT runner, then evaluates the held-out split in the chat template. A student is a
small pretrained model (real recipes), or on the tiny default a smaller base built the same way as
the tiny base (same corpus and tokenizer recipe, its own width and depth, ``<student>/base``).
Outputs per student in ``runs/<recipe>/distill/<student>/``; manifest metrics ``students.<name>``.
The stage's checkpoint is the first student's.

**distill_rl** is the control: the same student base trained with stage-1 RL (R1-Zero template,
format + accuracy rewards, ``distill.control``) instead of distillation, evaluated the same way, so the
report can set distillation against RL on the same small model.

Where this deviates from the paper: the paper's students are Qwen2.5 and Llama models distilled from
800k samples of DeepSeek-R1; here the teacher is the tiny stage-4 model and the students are smaller
still. The paper trains no RL stage on its distilled students; neither does this stage.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from data.datasets import load_rows
from data.jsonl import read_jsonl
from data.templates import r1_zero_prompt
from stages.base import pretrain_tiny
from stages.common import save_model_atomically
from stages.rl import evaluate, run_rl
from stages.runner import model_ref
from stages.sft import run_sft

log = logging.getLogger("r1")


def run(ctx) -> Path:
    recipe, m, cfg = ctx.recipe, ctx.manifest, ctx.recipe.distill
    if ctx.parent is None or ctx.parent.stage != "stage4":
        raise ValueError("distill builds on stage 4 (its curated set): run it with parent_stage='stage4'")
    if not cfg.students:
        raise ValueError("distill: the recipe lists no students (distill.students)")
    source = Path(ctx.parent.path).parent / "sft_mix.jsonl"
    rows = read_jsonl(source)
    if cfg.data == "reasoning":
        rows = [r for r in rows if r.get("task") == "reasoning"]
    m.add_input_data("stage4_curated", str(source), rows_used=len(rows))
    eval_rows, _, _ = load_rows(recipe.data.test, recipe)
    students = m.data["metrics"].setdefault("students", {})
    first = None
    for student in cfg.students:
        base = student_base(ctx, student)
        sft = run_sft(ctx, cfg.sft, rows=rows, model_ref=base, name=f"{student.name}/sft")
        if "eval" not in students.get(student.name, {}):
            summary = evaluate(recipe, None, None, eval_rows, ctx.dir / student.name / "eval", str(sft),
                               prompt_template="chat")
            students[student.name] = {**students.get(student.name, {}), "eval": summary,
                                      "sft": m.data["metrics"][f"sft_{student.name}/sft"]}
            m.save()
        log.info("student %s: held-out pass@1 %.3f after distillation", student.name,
                 students[student.name]["eval"]["pass@1"])
        first = first or sft
    return first


def student_base(ctx, student) -> str:
    """The student's base model: its pretrained reference, or a tiny base built and saved here."""
    if student.pretrained:
        return student.pretrained
    target = ctx.dir / student.name / "base"
    record = ctx.manifest.data["metrics"].setdefault("students", {}).setdefault(student.name, {})
    if "pretrain" in record and target.is_dir():
        return str(target)
    recipe = ctx.recipe
    base = recipe.base
    arch = student.architecture or base.architecture
    pretrain = dataclasses.replace(base.pretrain, steps=student.pretrain_steps or base.pretrain.steps)
    student_recipe = dataclasses.replace(recipe, base=dataclasses.replace(base, architecture=arch, pretrain=pretrain))
    log.info("student %s: building a tiny base (hidden %d, %d layers, %d steps)", student.name, arch.hidden_size,
             arch.num_hidden_layers, pretrain.steps)
    model, tokenizer, stats = pretrain_tiny(student_recipe, log=log.info)
    save_model_atomically(model, tokenizer, target)
    record["pretrain"] = {k: stats[k] for k in ("parameters", "pretrain_seconds", "loss_last_avg")}
    ctx.manifest.save()
    return str(target)


def control_student(recipe) -> str:
    cfg = recipe.distill
    return cfg.control_student or cfg.students[0].name


def run_control(ctx) -> Path:
    """``distill_rl``: stage-1 RL (R1-Zero template, rule rewards) on a student's base."""
    recipe = ctx.recipe
    if ctx.parent is None or ctx.parent.stage != "distill":
        raise ValueError("distill_rl builds on distill (the student bases): run it with parent_stage='distill'")
    name = control_student(recipe)
    spec = next(s for s in recipe.distill.students if s.name == name)
    base = spec.pretrained or str(Path(ctx.parent.path).parent / name / "base")
    if not spec.pretrained and not Path(base).is_dir():
        raise ValueError(f"{base}: student {name!r} has no base checkpoint; run `r1 distill` first")
    train_rows, _, source = load_rows(recipe.data.train, recipe)
    eval_rows, _, _ = load_rows(recipe.data.test, recipe)
    ctx.manifest.update_metrics(student=name, parent_checkpoint=model_ref(ctx.parent))
    log.info("distill_rl: stage-1 RL on student %s's base (%s)", name, base)
    return run_rl(ctx, recipe.distill.control, train_rows=train_rows, eval_rows=eval_rows,
                  build_prompt=lambda row: r1_zero_prompt(row["problem"]), model_ref=base, data_name=source,
                  data_source=source)
