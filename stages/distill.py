"""Distillation (DeepSeek-R1, section 2.4): SFT of small students on stage 4's curated set, and the
RL-only control the paper compares them with (its Table 6).

    r1 distill    --recipe tiny       # or: make distill      every student of distill.students
    r1 distill_rl --recipe tiny       # or: make distill-rl   the control: RL on a student's base

**distill** evaluates each student's base, fine-tunes it on stage 4's ``sft_mix.jsonl`` and evaluates the
result; **distill_rl** trains the same base with GRPO instead. Equal terms: same base, same evaluation
(:data:`EVAL_TEMPLATE`), same budget in optimizer steps (``distill.budget_steps``; ``metrics.budget``).

Where this deviates from the paper: its students are Qwen2.5 and Llama models distilled from DeepSeek-R1;
here the teacher is the tiny stage-4 model and the students smaller still. Like the paper, no RL on the
distilled students. The paper's control (Qwen-32B-Zero) gets far more compute than its distillation; here
the arms get equal optimizer steps. docs/architecture.md, stages/distill.py.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
import sys
from pathlib import Path

import torch

from data.datasets import load_rows
from data.jsonl import atomic_write_json, read_jsonl, read_jsonl_tolerant
from data.templates import chat_user_message, training_chat_template
from eval.decode import set_sample_processes
from stages.pipeline import prebuilt
from stages.pipeline.common import is_main, load_tokenizer, run_once, save_model_atomically, world_size
from stages.pipeline.manifest import Manifest, ManifestError, hash_checkpoint, sha256_file
from stages.pipeline.recipe import load_recipe
from stages.pipeline.runner import model_ref, stage_part, stage_sample_processes, stage_threads
from stages.pipeline.threads import SideJob, fix_threads, fixed_threads
from stages.release import register_release, release_path
from stages.release import student_recipe as _student_recipe
from stages.training.evaluation import held_out
from stages.training.grpo import run_rl
from stages.training.pretrain import pretrain_tiny
from stages.training.records import METRICS_NAME
from stages.training.sft import run_sft

log = logging.getLogger("r1")

EVAL_TEMPLATE = "chat"  # the distilled student speaks the chat template; the base and the control are judged in it too
BUDGET_UNIT = "optimizer_steps"


def chat_prompt(row: dict) -> list[dict]:
    """The control's training prompt: the user turn every chat-template stage and evaluation uses."""
    return [{"role": "user", "content": chat_user_message(row["problem"])}]


def run(ctx) -> Path:
    recipe, m, cfg = ctx.recipe, ctx.manifest, ctx.recipe.distill
    if not cfg.students:
        raise ValueError("distill: the recipe lists no students (distill.students)")
    source = Path(ctx.parent.path).parent / "sft_mix.jsonl"
    rows = curated_rows(cfg, source)
    m.add_input_data("stage4_curated", str(source), rows_used=len(rows))
    eval_rows, _, _ = load_rows(recipe.data.test, recipe)
    m.update_metrics(eval_template=EVAL_TEMPLATE, budget_steps=cfg.budget_steps)
    students = m.data["metrics"].setdefault("students", {})
    first = None
    for student in cfg.students:
        base = student_base(ctx, student)
        record = students.setdefault(student.name, {})
        if "eval_base" not in record:
            record["eval_base"] = run_once(held_out, recipe, eval_rows, model_path=base,
                                           out_dir=ctx.dir / student.name / "eval_base", template=EVAL_TEMPLATE)
            record["eval_base_samples"] = f"{student.name}/eval_base/samples.jsonl"
            m.save()
        sft_cfg = budget_sft(cfg, len(rows))
        if f"sft_{student.name}/sft" not in m.data["metrics"] and world_size() == 1:
            run_once(_adopt_student_sft, ctx, student, base, source)
        sft = run_sft(ctx, sft_cfg, rows=rows, model_ref=base, name=f"{student.name}/sft")
        if "eval" not in record:
            record["eval"] = run_once(held_out, recipe, eval_rows, model_path=str(sft),
                                      out_dir=ctx.dir / student.name / "eval", template=EVAL_TEMPLATE)
            record["eval_samples"] = f"{student.name}/eval/samples.jsonl"
            m.save()
        if "budget" not in record:
            record["sft"] = m.data["metrics"][f"sft_{student.name}/sft"]
            record["budget"] = sft_budget(sft, rows, sft_cfg, record["sft"]["steps"],
                                          max_length=sft_cfg.max_length)
            m.save()
        log.info("student %s: held-out pass@1 %.3f (base) → %.3f (distilled, %d optimizer steps)", student.name,
                 record["eval_base"]["pass@1"], record["eval"]["pass@1"], record["budget"]["optimizer_steps"])
        first = first or sft
    return first


def curated_rows(cfg, source: Path) -> list[dict]:
    """The rows each student is fine-tuned on: stage 4's SFT mix, or its reasoning rows (``distill.data``)."""
    rows = read_jsonl(source)
    return [r for r in rows if r.get("task") == "reasoning"] if cfg.data == "reasoning" else rows


def budget_sft(cfg, n_rows: int):
    """The SFT section to run: with ``budget_steps``, epochs set so that the shared SFT runner (which
    runs ``ceil(epochs × steps per epoch)`` steps) runs exactly the budget's steps."""
    if cfg.budget_steps is None:
        return cfg.sft
    per_epoch = math.ceil(n_rows / (cfg.sft.batch_size * cfg.sft.gradient_accumulation_steps * world_size()))
    epochs = (cfg.budget_steps - 0.5) / per_epoch  # ceil(epochs × per_epoch) = budget_steps, whatever the rounding
    return dataclasses.replace(cfg.sft, epochs=epochs)


# ---------------------------------------------------------------------------------------------
# The budget each arm spent
# ---------------------------------------------------------------------------------------------


def count_parameters(model_dir: str | Path) -> int | None:
    """Parameters stored in a checkpoint folder's safetensors files (headers only); None if it has none."""
    from safetensors import safe_open

    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for f in files:
        with safe_open(str(f), framework="pt") as st:
            for key in st.keys():  # noqa: SIM118 (safe_open is not a mapping)
                total += math.prod(st.get_slice(key).get_shape())
    return total


def _mean_tokens(model_dir: str | Path, conversations: list[list[dict]], *, generation_prompt: bool,
                 max_length: int | None = None) -> float:
    """Mean token count of ``conversations`` rendered as SFT trains on them (the training template:
    ``data.templates.training_chat_template``), or as prompts (``generation_prompt``)."""
    if not conversations:
        return 0.0
    tok = load_tokenizer(str(model_dir))
    template = None if generation_prompt else training_chat_template(tok).template
    texts = [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=generation_prompt, chat_template=template)
             for c in conversations]
    lengths = [len(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]]
    if max_length:
        lengths = [min(n, max_length) for n in lengths]
    return sum(lengths) / len(lengths)


def _budget(steps: int, sequences_per_step: int, train_tokens: float, generated_tokens: float,
            parameters: int | None) -> dict:
    flops = (6 * parameters * train_tokens + 2 * parameters * generated_tokens) if parameters else None
    return {"unit": BUDGET_UNIT, "optimizer_steps": steps, "tolerance_steps": 0,
            "sequences_per_step": sequences_per_step, "train_tokens": round(train_tokens),
            "generated_tokens": round(generated_tokens), "parameters": parameters,
            "flops": float(f"{flops:.4g}") if flops is not None else None}


def sft_budget(model_dir: Path, rows: list[dict], cfg, steps: int, *, max_length: int) -> dict:
    """The distillation arm's budget: ``steps`` optimizer steps of ``batch × accumulation × processes``
    sequences; trained tokens = steps × sequences per step × the rows' mean length (truncated at
    ``max_length``); nothing generated."""
    per_step = cfg.batch_size * cfg.gradient_accumulation_steps * world_size()
    mean = _mean_tokens(model_dir, [r["messages"] for r in rows], generation_prompt=False, max_length=max_length)
    return _budget(steps, per_step, steps * per_step * mean, 0.0, count_parameters(model_dir))


def rl_budget(stage_dir: Path, model_dir: Path, cfg, train_rows: list[dict], steps: int) -> dict:
    """The control's budget: ``steps`` optimizer steps of ``prompts_per_step × num_generations``
    completions; generated tokens from ``metrics.jsonl``'s mean completion length per step; trained
    tokens = generated + prompt tokens of every completion (the prompts' mean length)."""
    per_step = cfg.prompts_per_step * cfg.num_generations
    rows = [r for r in read_jsonl_tolerant(Path(stage_dir) / METRICS_NAME) if r.get("mean_length") is not None]
    generated = sum(r["mean_length"] * per_step for r in rows[:steps])
    prompt = _mean_tokens(model_dir, [chat_prompt(r) for r in train_rows[:1000]], generation_prompt=True)
    return _budget(steps, per_step, generated + steps * per_step * prompt, generated, count_parameters(model_dir))


# ---------------------------------------------------------------------------------------------
# Student bases, and the RL control
# ---------------------------------------------------------------------------------------------


def student_base(ctx, student) -> str:
    """The student's base model: its pretrained reference, or a tiny base built and saved here (or adopted
    from the side work that built it beside stage 4's SFT: :func:`student_bases_job`)."""
    if student.pretrained:
        return student.pretrained
    target = ctx.dir / student.name / "base"
    record = ctx.manifest.data["metrics"].setdefault("students", {}).setdefault(student.name, {})
    if "pretrain" in record and target.is_dir():
        return str(target)
    student_recipe = _student_recipe(ctx.recipe, student)
    if student.release:  # a released base, as the tiny base's (stages/release.py)
        registered = run_once(register_release, release_path(student.release), student_recipe, target,
                              field=f"distill.students[{student.name}].release")
        record["pretrain"] = {"registered": registered, "parameters": registered["built"].get("parameters")}
        ctx.manifest.save()
        return str(target)
    with stage_part(ctx, "student_base"):  # on the recipe's count for it: the same as the side work's
        threads = torch.get_num_threads()
        prebuilt = run_once(_adopt_prebuilt, ctx.recipe, student, threads, target)
        if prebuilt is not None:
            record["pretrain"] = prebuilt
            ctx.manifest.save()
            if is_main():  # only now: until the manifest records the base, build.json vouches for it
                shutil.rmtree(prebuilt_dir(ctx.recipe, student), ignore_errors=True)
            return str(target)
        arch, steps = student_recipe.base.architecture, student_recipe.base.pretrain.steps
        log.info("student %s: building a tiny base (hidden %d, %d layers, %d steps, %d thread(s))", student.name,
                 arch.hidden_size, arch.num_hidden_layers, steps, threads)

        def build():  # on the main process; the others wait and load what it saved
            stats = _build_student_base(student_recipe, target)
            return {**stats, "threads": threads, "built": "here"}

        record["pretrain"] = run_once(build)
    ctx.manifest.save()
    return str(target)


def _build_student_base(student_recipe, target: Path) -> dict:
    model, tokenizer, stats = pretrain_tiny(student_recipe, log=log.info)
    save_model_atomically(model, tokenizer, target)
    return {k: stats[k] for k in ("parameters", "pretrain_seconds", "loss_last_avg")}


# -- Side work: the students' bases, built beside stage 4's SFT ------------------------------------------
# A tiny student's base depends on the corpus, the tokenizer recipe and its own size, not on stage 4, so
# `r1 pipeline` builds it in a single-threaded process while stage 4's SFT (which gains nothing from a
# second thread) runs on one (stages.pipeline.runner.SIDE_WORK). distill adopts it only when it was built from the
# same student recipe (its hash) on the thread count distill would build it with: the same weights, bit
# for bit, as building it here.

PREBUILT_INFO = "build.json"


def prebuilt_dir(recipe, student) -> Path:
    return recipe.stage_dir("distill").parent / ".prebuilt" / f"distill-{student.name}-base"


def _needs_base(recipe, student) -> bool:
    if student.pretrained or student.release:
        return False
    distill_dir = recipe.stage_dir("distill")
    try:
        record = Manifest.load(distill_dir).data["metrics"].get("students", {}).get(student.name, {})
    except ManifestError:  # no distill run yet
        record = {}
    return not ("pretrain" in record and (distill_dir / student.name / "base").is_dir())


def student_bases_job(recipe) -> SideJob | None:
    """Start building the tiny students' bases that distill will need, in another process on the
    thread count of ``distill.student_base``; None when there is none to build (a resumed stage 4 does
    not build a complete one again)."""
    threads = side_base_threads(recipe)
    names = [s.name for s in recipe.distill.students
             if _needs_base(recipe, s) and _prebuilt(recipe, s, threads, placed=None) is None]
    if not names:
        return None
    folder = prebuilt.write_recipe_json(recipe).parent
    return SideJob(f"the build of student(s) {', '.join(names)}'s base for distill", "stages.distill",
                   ["prebuild", str(folder / "recipe.json"), *names], log_path=folder / "build.log", threads=threads)


def side_base_threads(recipe) -> int:
    """The thread count the side work builds the students' bases on: distill's for them (else 1)."""
    return recipe.threads.get("distill.student_base") or stage_threads(recipe, "distill") or 1


def _prebuild(recipe_json: Path, names: list[str]) -> None:
    """The side work's body (``python -m stages.distill prebuild RECIPE_JSON NAME…``)."""
    recipe = load_recipe(str(recipe_json))  # the resolved recipe, as JSON (which YAML reads)
    threads = fix_threads(None)["threads"]  # R1_THREADS, set by the SideJob
    for student in (s for s in recipe.distill.students if s.name in names):
        folder = prebuilt_dir(recipe, student)
        shutil.rmtree(folder, ignore_errors=True)  # a stale or half-written one
        student_recipe = _student_recipe(recipe, student)
        stats = _build_student_base(student_recipe, folder / "model")
        atomic_write_json(folder / PREBUILT_INFO, {"recipe_hash": student_recipe.hash(), "threads": threads,
                                                   "stats": stats})  # last: the build is complete


def _prebuilt(recipe, student, threads: int, placed: Path | None) -> dict | None:
    """The ``build.json`` of a complete prebuilt base of this student recipe on ``threads`` threads, else
    None. ``placed``: where distill moves it; a base found there counts when a killed run moved it but
    did not record it (``build.json`` stays until distill's manifest has the record)."""
    folder = prebuilt_dir(recipe, student)
    if not (folder / PREBUILT_INFO).is_file():
        return None
    info = json.loads((folder / PREBUILT_INFO).read_text(encoding="utf-8"))
    there = (folder / "model").is_dir() or (placed is not None and placed.is_dir())
    current = info.get("recipe_hash") == _student_recipe(recipe, student).hash() and info.get("threads") == threads
    return info if there and current else None


def _adopt_prebuilt(recipe, student, threads: int, target: Path) -> dict | None:
    """Move the prebuilt base into ``target`` if it is the one this stage would build; its pretraining
    record, or None (a missing, partial or different one is removed)."""
    folder = prebuilt_dir(recipe, student)
    info = _prebuilt(recipe, student, threads, placed=target)
    if info is None:
        if folder.exists():
            log.info("student %s: %s holds no complete base of this recipe on %d thread(s); building it here",
                     student.name, folder, threads)
        shutil.rmtree(folder, ignore_errors=True)
        return None
    if (folder / "model").is_dir():
        shutil.rmtree(target, ignore_errors=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        (folder / "model").rename(target)
    log.info("student %s: base built beside stage 4's SFT (%s, %d thread(s)), adopted", student.name, folder, threads)
    return {**info["stats"], "threads": threads, "built": "beside stage4.sft (side work)"}


# -- Side work: the control's training, beside stage 4 -------------------------------------------------
# distill_rl's GRPO needs only the student's base and the training prompts, not stage 4 or distill's
# student; its "before" is distill's evaluation of the base. So `r1 pipeline` trains it beside the first
# part of stage 4 that leaves a core free once the student's base exists (the SFT, for a released base), in a
# process on distill_rl's own thread count (the recipe's cap for it), into .prebuilt/distill_rl-<student>/run
# (stages/pipeline/prebuilt.py). distill_rl adopts it only when it was trained from the same recipe (its
# hash), the same base (the hash of its files) and on the thread count distill_rl runs on: the same
# weights, bit for bit, as training it in the stage; then it only evaluates. Otherwise it trains as it
# always did.


def control_prebuilt_dir(recipe, name: str) -> Path:
    return prebuilt.folder(recipe, f"distill_rl-{name}")


def control_job(recipe) -> SideJob | None:
    """Start the control's GRPO training in another process; None when distill_rl could not adopt it (no
    thread count for distill_rl in the recipe, a pretrained student, evaluations during training, no
    student base ready) or has trained already (in its stage, or beside an earlier part of stage 4)."""
    cfg, threads = recipe.distill.control, stage_threads(recipe, "distill_rl")
    if not recipe.distill.students or threads is None or cfg.eval_steps or cfg.eval_every:
        return None  # without the recipe's count, distill_rl runs on torch's default, not known here
    fixed = fixed_threads()
    if fixed is not None and fixed[0] != threads:
        return None  # distill_rl will run on the count fixed there (stages.pipeline.threads.fixed_threads), not the recipe's
    name = control_student(recipe)
    spec = next(s for s in recipe.distill.students if s.name == name)
    if spec.pretrained or _control_trained(recipe):
        return None
    done = control_prebuilt_dir(recipe, name) / prebuilt.INFO
    if done.is_file() and json.loads(done.read_text(encoding="utf-8")).get("recipe_hash") == recipe.hash():
        return None  # trained beside an earlier part of the stage already
    base = side_student_base(recipe, spec)
    if base is None:
        return None
    folder = prebuilt.write_recipe_json(recipe).parent
    return SideJob(f"the GRPO training of distill_rl's control (student {name})", "stages.distill",
                   ["prebuild-control", str(folder / "recipe.json"), str(base)], log_path=folder / "control.log",
                   threads=threads)


def side_student_base(recipe, spec) -> Path | None:
    """The base a side process trains student ``spec`` from, with the same files (hashes) as the one distill
    registers or adopts: the released one, the side work's prebuilt one, or distill's recorded one; None for
    a pretrained student or a base not built yet."""
    if spec.pretrained:
        return None
    if spec.release:
        return release_path(spec.release)  # the released base, whose files distill registers (the same hashes)
    if _prebuilt(recipe, spec, side_base_threads(recipe), placed=None) is not None:
        return prebuilt_dir(recipe, spec) / "model"  # the side work's, which distill will adopt
    if not _needs_base(recipe, spec):
        return recipe.stage_dir("distill") / spec.name / "base"  # distill's, recorded
    return None


def _control_trained(recipe) -> bool:
    try:
        return "train" in Manifest.load(recipe.stage_dir("distill_rl")).data["metrics"]
    except ManifestError:  # no distill_rl run yet
        return False


def _prebuild_control(recipe_json: Path, base: str) -> None:
    """The side work's body (``python -m stages.distill prebuild-control RECIPE_JSON BASE``): run_rl as
    distill_rl runs it, without its evaluations, in a scratch stage folder."""
    recipe = load_recipe(str(recipe_json))
    threads = fix_threads(None)["threads"]  # R1_THREADS, set by the SideJob
    set_sample_processes(stage_sample_processes(recipe, "distill_rl"))  # as distill_rl samples: the same draws
    name = control_student(recipe)
    ctx = prebuilt.scratch_stage(recipe, "distill_rl", f"distill_rl-{name}")  # a stale or half-trained one removed
    train_rows, _, source = load_rows(recipe.data.train, recipe)
    run_rl(ctx, recipe.distill.control, train_rows=train_rows, eval_rows=[], build_prompt=chat_prompt,
           model_ref=base, data_name=source, data_source=source, eval_template=EVAL_TEMPLATE, held_out=False)
    prebuilt.finish(ctx, ["train"], threads=threads, base=hash_checkpoint(Path(base)),  # last: the training is complete
                    input_data=ctx.manifest.data["inputs"]["data"])


def _adopt_control(ctx, name: str, base: str) -> bool:
    """Take the control's training done beside stage 4, if it is the one this stage would do
    (``prebuilt.adopt``: same recipe, thread count and base): its files copied in, its record and inputs in
    the manifest, ``ctx.adopted``. False (and the prebuilt folder removed) if there is none, or a partial or
    different one."""
    threads = torch.get_num_threads()
    info = prebuilt.adopt(ctx, f"distill_rl-{name}", "distill_rl: the control's training", threads=threads,
                          base=hash_checkpoint(Path(base)))
    if info is None:
        return False
    m = ctx.manifest
    for d in info["input_data"]:
        m.add_input_data(d["name"], d["source"], d["rows_used"], d["rows_skipped"], d["sha256"])
    m.set_input_model(base)
    m.update_metrics(train={**m.data["metrics"]["train"], "threads": threads})
    ctx.adopted = True
    log.info("distill_rl: the control's training done beside stage 4 (%d thread(s)), adopted", threads)
    return True


# -- Side work: the students' SFT, beside stage 4's final RL -------------------------------------------
# A student is fine-tuned on stage 4's curated set (sft_mix.jsonl, written before stage 4's SFT), not on stage
# 4's models, so `r1 pipeline` trains it in a process on distill's thread count while stage 4's final RL (on
# one thread) runs (stages.pipeline.runner.SIDE_WORK). distill takes it (stages.pipeline.prebuilt.adopt) only
# when it is the training distill would do: the same recipe, base (its files' hashes), curated set (its hash)
# and thread count; then it only evaluates.


def _sft_name(student) -> str:
    return f"distill-{student.name}-sft"


def student_sft_job(recipe) -> SideJob | None:
    """Start the students' SFT in another process; None when distill could not take it (no thread count for
    distill in the recipe, no curated set yet, pretrained students, bases not built) or has it already."""
    threads = stage_threads(recipe, "distill")
    fixed = fixed_threads()
    source = recipe.stage_dir("stage4") / "sft_mix.jsonl"
    if threads is None or (fixed is not None and fixed[0] != threads) or not source.is_file():
        return None
    try:
        trained = Manifest.load(recipe.stage_dir("distill")).data["metrics"]
    except ManifestError:  # no distill run yet
        trained = {}
    data = sha256_file(source)
    names = [s.name for s in recipe.distill.students
             if f"sft_{s.name}/sft" not in trained and (base := side_student_base(recipe, s)) is not None
             and prebuilt.done(recipe, _sft_name(s), threads=threads, base=hash_checkpoint(base), data=data) is None]
    if not names:
        return None
    folder = prebuilt.write_recipe_json(recipe).parent
    return SideJob(f"the SFT of student(s) {', '.join(names)} for distill", "stages.distill",
                   ["prebuild-sft", str(folder / "recipe.json"), *names], log_path=folder / "students_sft.log",
                   threads=threads)


def _prebuild_sft(recipe_json: Path, names: list[str]) -> None:
    """The side work's body (``python -m stages.distill prebuild-sft RECIPE_JSON NAME…``): each student's
    SFT as distill runs it, in a scratch stage folder of its own."""
    recipe = load_recipe(str(recipe_json))
    threads = fix_threads(None)["threads"]  # R1_THREADS, set by the SideJob
    source = recipe.stage_dir("stage4") / "sft_mix.jsonl"
    rows = curated_rows(recipe.distill, source)
    for student in (s for s in recipe.distill.students if s.name in names):
        base = side_student_base(recipe, student)
        ctx = prebuilt.scratch_stage(recipe, "distill", _sft_name(student))
        run_sft(ctx, budget_sft(recipe.distill, len(rows)), rows=rows, model_ref=str(base), name=f"{student.name}/sft")
        prebuilt.finish(ctx, [f"sft_{student.name}/sft"], threads=threads, base=hash_checkpoint(base),
                        data=sha256_file(source))


def _adopt_student_sft(ctx, student, base: str, source: Path) -> None:
    """Take the student's SFT done beside stage 4 if it is the one distill would do (then ``run_sft``
    finds it done: ``ctx.adopted``)."""
    if prebuilt.adopt(ctx, _sft_name(student), f"student {student.name}'s SFT", threads=torch.get_num_threads(),
                      base=hash_checkpoint(Path(base)), data=sha256_file(source)) is None:
        return
    ctx.adopted = True
    if ctx.manifest.data["inputs"]["model"] is None:  # as the SFT's loading records it
        ctx.manifest.set_input_model(base)
    ctx.manifest.save()
    log.info("student %s: its SFT done beside stage 4 (%d thread(s)), adopted", student.name, torch.get_num_threads())


def control_student(recipe) -> str:
    cfg = recipe.distill
    return cfg.control_student or cfg.students[0].name


def run_control(ctx) -> Path:
    """``distill_rl``: GRPO in the chat template on a student's base, for the budget the student's
    distillation had; its "before" is the distill stage's evaluation of the same base."""
    recipe, m, cfg = ctx.recipe, ctx.manifest, ctx.recipe.distill.control
    name = control_student(recipe)
    spec = next(s for s in recipe.distill.students if s.name == name)
    distill_dir = Path(ctx.parent.path).parent
    base = spec.pretrained or str(distill_dir / name / "base")
    if not spec.pretrained and not Path(base).is_dir():
        raise ValueError(f"{base}: student {name!r} has no base checkpoint; run `r1 distill` first")
    distilled = ((ctx.parent.data.get("metrics") or {}).get("students") or {}).get(name) or {}
    if "eval_base" not in distilled or "budget" not in distilled:
        raise ValueError(f"distill_rl: the distill manifest has no base evaluation or budget for {name!r}; "
                         "run `r1 distill` to completion first")
    if recipe.distill.budget_steps is not None and distilled["budget"]["optimizer_steps"] != cfg.steps:
        raise ValueError(f"distill_rl: the distilled student {name!r} had {distilled['budget']['optimizer_steps']} "
                         f"optimizer steps but distill.control.steps is {cfg.steps}: rerun distill with this recipe")
    train_rows, _, source = load_rows(recipe.data.train, recipe)
    eval_rows, _, _ = load_rows(recipe.data.test, recipe)
    base_samples = Path("..") / distill_dir.name / distilled["eval_base_samples"]
    m.update_metrics(student=name, parent_checkpoint=m.record(model_ref(ctx.parent)), eval_template=EVAL_TEMPLATE,
                     train_template=EVAL_TEMPLATE, eval_before_samples=str(base_samples))
    if "eval_before" not in m.data["metrics"]:  # the base, already evaluated under this protocol by distill
        m.update_metrics(eval_before={**distilled["eval_base"], "from": str(base_samples.parent)})
    if "train" in m.data["metrics"]:  # trained (or adopted) before a crash: the prebuilt folder is spent
        shutil.rmtree(control_prebuilt_dir(recipe, name), ignore_errors=True)
    elif world_size() == 1:
        _adopt_control(ctx, name, base)
    log.info("distill_rl: GRPO in the %s template on student %s's base (%s), %d optimizer steps", EVAL_TEMPLATE,
             name, base, cfg.steps)
    final = run_rl(ctx, cfg, train_rows=train_rows, eval_rows=eval_rows, build_prompt=chat_prompt, model_ref=base,
                   data_name=source, data_source=source, eval_template=EVAL_TEMPLATE)
    steps = m.data["metrics"]["train"]["steps"]
    m.update_metrics(eval_after_samples="eval_after/samples.jsonl",
                     budget=rl_budget(ctx.dir, final, cfg, train_rows, steps))
    log.info("distill_rl: held-out pass@1 %.3f (base) → %.3f (RL, %d optimizer steps)",
             m.data["metrics"]["eval_before"]["pass@1"], m.data["metrics"]["eval_after"]["pass@1"], steps)
    return final


if __name__ == "__main__":  # the side work of r1 pipeline
    from stages.pipeline.runner import setup_logging

    if len(sys.argv) >= 4 and sys.argv[1] == "prebuild":
        setup_logging()
        _prebuild(Path(sys.argv[2]), sys.argv[3:])
    elif len(sys.argv) == 4 and sys.argv[1] == "prebuild-control":
        setup_logging()
        _prebuild_control(Path(sys.argv[2]), sys.argv[3])
    elif len(sys.argv) >= 4 and sys.argv[1] == "prebuild-sft":
        setup_logging()
        _prebuild_sft(Path(sys.argv[2]), sys.argv[3:])
    else:
        sys.exit("usage: python -m stages.distill prebuild RECIPE_JSON STUDENT… | prebuild-control RECIPE_JSON BASE"
                 " | prebuild-sft RECIPE_JSON STUDENT…")
