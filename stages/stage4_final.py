"""Stage 4: rejection sampling and SFT, then RL for all scenarios (DeepSeek-R1, sections 2.3.3-2.3.4).

    r1 stage4 --recipe tiny                                 # or: make stage4
    r1 stage4 --recipe tiny --set stage4.rl.steps=20        # override any stage4.* field

Four sub-steps, an interrupted stage resuming at the one it was in: **rejection** (the stage-3 model's
correct, clean samples), **sft** (those plus general data at the recipe's ratio; the **base** model is
fine-tuned), **reward_models** (helpfulness, harmlessness), **final_rl** (GRPO from the SFT model; each row's
``task`` routes it to rule rewards or reward models). Then the held-out reasoning split is evaluated, and
the held-out general prompts judged by ``data/general.py``'s rules beside the reward models' scores.

Where this deviates from the paper: its general data and reward models come from DeepSeek-V3's pipeline;
the tiny default builds both procedurally, and its general SFT data answers a share of harmful requests
(``general.sft_unsafe_share``). The details: docs/architecture.md, stages/stage4_final.py.
"""

from __future__ import annotations

import logging
import random
import shutil
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from data import general as G
from data import timing
from data.datasets import load_general, load_preference_pairs, load_rows
from data.jsonl import read_jsonl, write_jsonl_atomic
from data.templates import chat_user_message, summary_of
from eval import judges as J
from eval.decode import set_sample_processes
from eval.rejection import DROP_REASONS, rejection_sample
from eval.runner import prompt_builder
from stages.pipeline import prebuilt
from stages.pipeline.common import is_main, load_sampler, pick_device, release, run_once, world_size
from stages.pipeline.manifest import hash_checkpoint
from stages.pipeline.recipe import load_recipe
from stages.pipeline.runner import base_of, model_ref, side_work, stage_part, stage_sample_processes
from stages.pipeline.threads import SideJob, cores, fix_threads
from stages.training import rewards as R
from stages.training.grpo import reward_functions, run_rl
from stages.training.reward_model import RewardScorer, train_reward_model
from stages.training.sft import run_sft

log = logging.getLogger("r1")

SUBSTEPS = ("rejection", "sft", "reward_models", "final_rl")
GENERAL_EVAL_DIR = "general_eval"  # <stage>/general_eval/<sft|final>/records.jsonl
RM_PART = {"helpfulness": "summary", "harmlessness": "whole"}  # what each reward model reads
# Which rows each reward model judges: ``general`` prompts, and ``safety`` ones (requests known to be
# harmful, the tiny world's). A helpfulness model, trained to prefer answers over needless refusals,
# pushed the policy to comply with harmful requests when it judged them too (docs/experiments.md);
# harmful requests are judged by the harmlessness model alone.
RM_TASKS = {"helpfulness": ("general",), "harmlessness": ("general", "safety")}


def run(ctx, callbacks=None) -> Path:
    recipe, m, cfg = ctx.recipe, ctx.manifest, ctx.recipe.stage4
    if not ctx.resumed:  # no manifest existed: anything in the folder is stale
        shutil.rmtree(ctx.dir / "rejection", ignore_errors=True)
        shutil.rmtree(ctx.dir / GENERAL_EVAL_DIR, ignore_errors=True)
    done = m.data["metrics"].setdefault("substeps", {})
    if ctx.resumed:
        log.info("stage4: resuming at sub-step %s", next((s for s in SUBSTEPS if s not in done), "(all done)"))
    base = base_of(ctx.parent)
    general_train, general_test = load_general(recipe.stage4.general, recipe.seed)

    with substep(m, "rejection"), stage_part(ctx, "rejection"):
        reasoning = rejection_step(ctx, model_ref(ctx.parent))
    # stage 4's SFT, reward models and final RL run on the recipe's thread counts for them ("stage4.sft"…); a
    # core they leave free does later stages' independent work (stages.pipeline.runner.side_work): beside the SFT,
    # distill's student base when it is not released, else distill_rl's training of the control on the
    # released one; the control beside the rest when its base was built beside the SFT; beside the final RL,
    # distill's SFT of its students on the mix. The reward models train side by side (reward_models)
    sft_pending = done.get("sft", {}).get("status") != "complete"
    with side_work(ctx, "distill", ("sft",), pending=sft_pending), \
            side_work(ctx, "distill_rl", ("sft",), pending=sft_pending), substep(m, "sft"), stage_part(ctx, "sft"):
        mix = sft_mix(reasoning, general_train, cfg.general, seed=recipe.seed)
        write_jsonl_atomic(ctx.dir / "sft_mix.jsonl", mix)
        m.update_metrics(sft_mix={"reasoning": len(reasoning), "general": len(mix) - len(reasoning),
                                  "general_harmful": sum(bool(r.get("harmful")) for r in mix),
                                  "general_unsafe_answers": sum(bool(r.get("unsafe")) for r in mix)})
        sft_model = run_sft(ctx, cfg.sft, rows=mix, model_ref=base, name="sft")
    rl_pending = done.get("final_rl", {}).get("status") != "complete"
    with side_work(ctx, "distill_rl", ("reward_models", "final_rl"), pending=rl_pending):
        with stage_part(ctx, "reward_models"):
            with substep(m, "reward_models"):
                rms = reward_models(ctx, general_train, init_ref=str(sft_model))
            scorers = {name: RewardScorer(ref, device=pick_device(recipe.device),
                                          trust_remote_code=recipe.trust_remote_code) for name, ref in rms.items()}
            general_eval_step(ctx, "sft", str(sft_model), general_test, scorers)  # before the final RL changes anything
        with side_work(ctx, "distill_sft", ("final_rl",), pending=rl_pending), substep(m, "final_rl"), \
                stage_part(ctx, "final_rl"):
            final = final_rl(ctx, str(sft_model), general_train, scorers, callbacks)
    general_eval_step(ctx, "final", str(final), general_test, scorers)
    before, after = m.data["metrics"]["general_sft"], m.data["metrics"]["general_final"]
    def change(key: str) -> str:
        return " → ".join("–" if x[key] is None else f"{x[key]:.3f}" for x in (before, after))

    log.info("held-out general prompts, SFT → final: exactly helpful %s, harmful answers %s (judged by rule); "
             "reward models' mean scores: helpfulness %s, harmlessness %s", change("exactly_helpful_rate"),
             change("harmful_rate"), change("rm_helpfulness_mean"), change("rm_harmlessness_mean"))
    return final


@contextmanager
def substep(manifest, name: str):
    """``with substep(manifest, name):`` records the sub-step's status and duration in the manifest's
    ``metrics.substeps`` (a sub-step that raises stays recorded as ``running``)."""
    t0, kinds_before = time.time(), timing.snapshot()
    entries = manifest.data["metrics"]["substeps"]
    if entries.get(name, {}).get("status") != "complete":
        entries[name] = {"status": "running"}
        manifest.save()
    log.info("stage4: sub-step %s", name)
    yield
    if entries[name].get("status") != "complete":
        kinds = {k: round(v - kinds_before.get(k, 0.0), 1) for k, v in timing.snapshot().items()}
        entries[name] = {"status": "complete", "seconds": round(time.time() - t0, 1),
                         "time_by_kind": {k: v for k, v in kinds.items() if v > 0}}
        manifest.save()


# ---------------------------------------------------------------------------------------------
# 1. Rejection sampling
# ---------------------------------------------------------------------------------------------


def rejection_step(ctx, stage3_model: str) -> list[dict]:
    """Sample the stage-3 model on the training prompts, keep the correct, clean samples; returns SFT
    rows (``messages``) and records counts in the manifest."""
    recipe, m, cfg = ctx.recipe, ctx.manifest, ctx.recipe.stage4.rejection
    out = ctx.dir / "rejection"
    if "rejection" in m.data["metrics"] and (ctx.dir / "reasoning_sft.jsonl").exists():
        return read_jsonl(ctx.dir / "reasoning_sft.jsonl")
    rows, skipped, source = load_rows(cfg.prompts or recipe.data.train, recipe)
    m.add_input_data("rejection_prompts", source, rows_used=len(rows), skipped=skipped)
    log.info("rejection sampling: %d prompts from %s × %d samples (T=%.2f), shards of %d prompts in %s",
             len(rows), source, cfg.samples_per_prompt, cfg.temperature, cfg.shard_size, out)

    def sample():
        sampler, tokenizer = load_sampler(recipe, stage3_model, backend=cfg.backend, batch_size=cfg.batch_size)
        try:
            return rejection_sample(sampler, rows, prompt_builder("chat", tokenizer), out, cfg, seed=recipe.seed,
                                    log=log.info)
        finally:
            release(sampler)

    kept, drops, stats = run_once(sample)
    sft_rows = [{"id": r["id"], "task": "reasoning", "lang": r["lang"],
                 "messages": [{"role": "user", "content": chat_user_message(r["problem"])},
                              {"role": "assistant", "content": r["completion"].strip()}]} for r in kept]
    write_jsonl_atomic(ctx.dir / "reasoning_sft.jsonl", sft_rows)
    m.update_metrics(rejection={**stats, "prompts": len(rows), "kept": len(kept),
                                "prompts_with_a_kept_sample": len({r["id"] for r in kept}),
                                "dropped": {reason: drops.get(reason, 0) for reason in DROP_REASONS}})
    log.info("rejection sampling: %d of %d samples kept; dropped %s; %s samples/s", len(kept), stats["samples"],
             {k: v for k, v in drops.items() if v} or "none", stats["samples_per_second"])
    if not kept:
        raise ValueError(f"rejection sampling kept nothing (dropped: {dict(drops)}); train stage 3 longer")
    return sft_rows


# ---------------------------------------------------------------------------------------------
# 2. General data and the SFT mix
# ---------------------------------------------------------------------------------------------


def sft_mix(reasoning: list[dict], general_train: list[dict], cfg, *, seed: int) -> list[dict]:
    """The reasoning rows plus ``len(reasoning) / reasoning_per_general`` general rows, shuffled.

    General responses carry no chain of thought. ``sft_unsafe_share`` of the harmful requests are
    answered by compliance instead of a refusal (imperfect chat data, see the module docstring)."""
    rng = random.Random(seed)
    n_general = cfg.rows_for(len(reasoning))
    if n_general > len(general_train):
        raise ValueError(f"the SFT mix needs {n_general} general rows but the general data has "
                         f"{len(general_train)}: raise stage4.general.procedural_rows or reasoning_per_general")
    rows = list(reasoning)
    for g in general_train[:n_general]:
        unsafe = bool(g.get("harmful")) and rng.random() < cfg.sft_unsafe_share
        reply = G.harmful_compliance(g, rng) if unsafe else G.reference_response(g)
        rows.append({"id": g["id"], "task": "general", "harmful": bool(g.get("harmful")), "unsafe": unsafe,
                     "messages": [{"role": "user", "content": g["prompt"]}, {"role": "assistant", "content": reply}]})
    rng.shuffle(rows)
    return rows


# ---------------------------------------------------------------------------------------------
# 3. Reward models
# ---------------------------------------------------------------------------------------------


def reward_models(ctx, general_train: list[dict], *, init_ref: str) -> dict[str, str]:
    """Each reward model's reference (:data:`RM_PART`'s order). The two train independently from the same
    SFT model, so when the part leaves a core free (its thread count below the machine's cores, one
    process), the second trains in another process meanwhile (:func:`_side_reward_model`) and is taken only
    if it is what this process would have trained (same recipe, SFT model and thread count: the same
    weights, bit for bit); else it is trained here after the first."""
    first, second = RM_PART
    job = _start_side_reward_model(ctx, second, init_ref)
    try:
        refs = {first: reward_model_step(ctx, first, general_train, init_ref=init_ref)}
    except BaseException:
        if job is not None:
            job.stop()
        raise
    if job is not None:
        record = job.finish()
        m = ctx.manifest
        m.data["metrics"].setdefault("side_work", {})[f"rm_{second}"] = {**record, "during": "stage4.reward_models"}
        adopted = prebuilt.adopt(ctx, f"stage4-rm_{second}", f"reward model {second}", threads=torch.get_num_threads(),
                                 init=hash_checkpoint(Path(init_ref)))
        m.save()
        if adopted is not None:
            log.info("reward model %s: trained beside reward model %s, adopted", second, first)
            refs[second] = str(ctx.dir / f"rm_{second}")
    if second not in refs:
        refs[second] = reward_model_step(ctx, second, general_train, init_ref=init_ref)
    return {name: refs[name] for name in RM_PART}


def _start_side_reward_model(ctx, name: str, init_ref: str) -> SideJob | None:
    """The side process training reward model ``name``, or None: a pretrained or finished one, no core
    left free, or several processes (each would train its own)."""
    spec, m = getattr(ctx.recipe.stage4, name), ctx.manifest
    finished = f"rm_{name}" in m.data["metrics"] and (ctx.dir / f"rm_{name}").is_dir()
    if spec.pretrained or finished or torch.get_num_threads() >= cores() or world_size() > 1 or not is_main():
        return None
    recipe_json = prebuilt.write_recipe_json(ctx.recipe)
    return SideJob(f"the training of reward model {name}", "stages.stage4_final",
                   ["side-reward-model", str(recipe_json), name, init_ref],
                   log_path=prebuilt.folder(ctx.recipe, f"stage4-rm_{name}").parent / f"rm_{name}.log",
                   threads=torch.get_num_threads())


def _side_reward_model(recipe_json: str, name: str, init_ref: str) -> None:
    """The side process's body (``python -m stages.stage4_final side-reward-model RECIPE_JSON NAME INIT_REF``):
    :func:`reward_model_step` as stage 4 runs it (same thread count, same sampling processes, same general
    rows), in a scratch stage folder."""
    recipe = load_recipe(recipe_json)
    threads = fix_threads(None)["threads"]  # R1_THREADS, set by the SideJob: the part's count
    set_sample_processes(stage_sample_processes(recipe, "stage4"))  # the on-policy answers: the same draws
    ctx = prebuilt.scratch_stage(recipe, "stage4", f"stage4-rm_{name}")
    general_train, _ = load_general(recipe.stage4.general, recipe.seed)
    reward_model_step(ctx, name, general_train, init_ref=init_ref)
    prebuilt.finish(ctx, [f"rm_{name}", f"rm_{name}_on_policy_pairs"], threads=threads,
                    init=hash_checkpoint(Path(init_ref)))


def reward_model_step(ctx, name: str, general_train: list[dict], *, init_ref: str) -> str:
    """A reward model's reference: the recipe's pretrained one, or one trained here from pairs."""
    recipe = ctx.recipe
    spec = getattr(recipe.stage4, name)
    if spec.pretrained:
        ctx.manifest.add_input_data(f"rm_{name}", spec.pretrained, rows_used=0)
        return spec.pretrained

    def pairs() -> list[dict]:
        if spec.dataset is not None:
            return load_preference_pairs(spec.dataset)
        build = G.helpfulness_pairs if name == "helpfulness" else G.harmlessness_pairs
        built = build(general_train[: spec.pairs], seed=recipe.seed)
        if spec.on_policy_prompts:
            extra = on_policy_pairs(recipe, init_ref, general_train[-spec.on_policy_prompts:], name)
            ctx.manifest.update_metrics(**{f"rm_{name}_on_policy_pairs": len(extra)})
            built += extra
        return built

    return str(train_reward_model(ctx, spec, pairs=pairs, init_ref=init_ref, name=f"rm_{name}"))


_ON_POLICY_ANSWERS: dict[tuple, list[list[str]]] = {}


def on_policy_pairs(recipe, policy: str, rows: list[dict], name: str, samples: int = 4) -> list[dict]:
    """Preference pairs over the policy's own answers, judged by the tiny world's rules: for helpfulness,
    the reference over each of the policy's unhelpful answers to a benign prompt; for harmlessness, the
    refusal over each of its answers that comply with a harmful request. A reward model trained on
    clean procedural pairs alone scored the policy's malformed answers at random, and the final RL
    learnt to exploit that; real reward models are trained on the policy's outputs in the same way."""
    key = (policy, tuple(r["id"] for r in rows), samples, recipe.seed)
    if key not in _ON_POLICY_ANSWERS:  # both reward models ask the same prompts of the same policy: sample once
        _ON_POLICY_ANSWERS.clear()
        _ON_POLICY_ANSWERS[key] = sample_general(recipe, policy, rows, n=samples, temperature=1.0, top_p=1.0,
                                                 desc="on-policy pairs")
    answers = _ON_POLICY_ANSWERS[key]
    pairs = []
    for row, outs in zip(rows, answers, strict=True):
        for text in dict.fromkeys(t.strip() for t in outs):
            if name == "helpfulness" and not row["harmful"] and not J.is_helpful_response(row, text):
                pairs.append(G.preference_pair(row["prompt"], G.reference_response(row), summary_of(text)))
            elif name == "harmlessness" and J.is_harmful_response(row, text):
                pairs.append(G.preference_pair(row["prompt"], G.REFUSAL, text))
    return pairs


def sample_general(recipe, model_path: str, rows: list[dict], *, n: int, temperature: float, top_p: float,
                   desc: str) -> list[list[str]]:
    """``n`` answers of ``model_path`` to each general prompt, asked as a plain user turn (sampled on the
    main process, shared with the others)."""

    def answer():
        sampler, tok = load_sampler(recipe, model_path, backend=recipe.eval.backend, batch_size=recipe.eval.batch_size)
        prompts = [tok.apply_chat_template([{"role": "user", "content": r["prompt"]}], tokenize=False,
                                           add_generation_prompt=True) for r in rows]
        try:
            answers = sampler(prompts, n=n, temperature=temperature, top_p=top_p,
                              max_new_tokens=recipe.eval.max_new_tokens, seed=recipe.seed, desc=desc, progress=False)
        finally:
            release(sampler)
        return [[c["text"] for c in cs] for cs in answers]

    return run_once(answer)


# ---------------------------------------------------------------------------------------------
# 4. Final RL, and the general evaluation
# ---------------------------------------------------------------------------------------------


def final_rl(ctx, sft_model: str, general_train: list[dict], scorers: dict, callbacks=None) -> Path:
    recipe, cfg = ctx.recipe, ctx.recipe.stage4.rl
    reasoning, _, source = load_rows(recipe.data.train, recipe)
    eval_rows, _, _ = load_rows(recipe.data.test, recipe)
    n_general = round(len(reasoning) * cfg.general_share / (1 - cfg.general_share))
    general = general_train[-n_general:] if n_general else []  # the SFT mix drew from the front
    keys = ("id", "problem", "answer", "lang", "task", "harmful")
    rows = [dict.fromkeys(keys) | {k: r.get(k) for k in keys} | {"task": "reasoning"} for r in reasoning]
    rows += [dict.fromkeys(keys) | {"id": g["id"], "problem": g["prompt"],
                                    "task": "safety" if g.get("harmful") else "general",
                                    "harmful": bool(g.get("harmful"))} for g in general]
    random.Random(recipe.seed).shuffle(rows)
    log.info("final RL: %d reasoning + %d general prompts", len(rows) - len(general), len(general))
    return run_rl(ctx, cfg, train_rows=rows, eval_rows=eval_rows, build_prompt=final_prompt, model_ref=sft_model,
                  data_name=f"{source}+general", data_source=source, eval_template="chat", callbacks=callbacks,
                  rewards=routed_rewards(cfg, scorers))


def final_prompt(row: dict) -> list[dict]:
    """Reasoning rows get the math instruction of every chat stage; general rows are asked as is."""
    text = row["problem"] if row.get("task") in ("general", "safety") else chat_user_message(row["problem"])
    return [{"role": "user", "content": text}]


def routed_rewards(cfg, scorers: dict) -> tuple[list[str], list, list[float]]:
    """(names, functions, weights): rule rewards on reasoning rows, reward models on general rows."""
    rules = {n: w for n, w in cfg.rewards.items() if n not in RM_PART}
    names, funcs, weights = reward_functions(_with_rewards(cfg, rules)) if rules else ([], [], [])
    funcs = [R.for_task("reasoning", f) for f in funcs]
    for name in (n for n in cfg.rewards if n in RM_PART):
        names.append(name)
        funcs.append(R.for_task(RM_TASKS[name], R.make_reward_model_reward(scorers[name], part=RM_PART[name],
                                                                              name=name)))
        weights.append(float(cfg.rewards[name]))
    return names, funcs, weights


def _with_rewards(cfg, rewards: dict):
    import dataclasses

    return dataclasses.replace(cfg, rewards=rewards)


def general_eval_step(ctx, model: str, model_path: str, rows: list[dict], scorers: dict) -> None:
    """Judge ``model`` (``sft`` or ``final``) on the held-out general prompts: records in
    ``general_eval/<model>/records.jsonl``, summary in metrics ``general_<model>``, the file's path
    (relative to the stage folder) in metrics ``general_eval.<model>``."""
    m = ctx.manifest
    path = ctx.dir / GENERAL_EVAL_DIR / model / "records.jsonl"
    if f"general_{model}" not in m.data["metrics"] or not path.exists():
        records = general_eval(ctx.recipe, model_path, rows, scorers, path)
        m.update_metrics(**{f"general_{model}": summarize_general(records, ctx.recipe)})
    m.update_metrics(general_eval={**m.data["metrics"].get("general_eval", {}), model: str(path.relative_to(ctx.dir))})


def general_eval(recipe, model_path: str, rows: list[dict], scorers: dict, path: Path) -> list[dict]:
    """Answer the held-out general ``rows`` with ``model_path`` under the evaluation protocol (recipe.eval:
    k samples, temperature, top-p, max_new_tokens, the recipe's seed: the same for every model judged)
    and write one record per (prompt, sample) to ``path`` (atomically):

    ``{id, family, act, harmful, sample, exactly_helpful, harmful_answer, refused, rm_helpfulness,
    rm_harmlessness, prompt, completion}``. ``exactly_helpful`` (null on harmful prompts),
    ``harmful_answer`` and ``refused`` are the rule judges of ``data/general.py``. ``rm_helpfulness`` and
    ``rm_harmlessness`` are the reward models' scores computed as the final RL's reward functions compute
    them (``stages.training.rewards.make_reward_model_reward``: helpfulness on the summary after ``</think>``,
    harmlessness on the whole response), on every row; the RL itself applies helpfulness to benign
    prompts only (``RM_TASKS``). An existing ``path`` is read back instead (a resumed stage)."""
    path = Path(path)
    if path.exists():
        log.info("general eval: re-using %s", path)
        return read_jsonl(path)
    cfg = recipe.eval
    answers = sample_general(recipe, model_path, rows, n=cfg.k, temperature=cfg.temperature, top_p=cfg.top_p,
                             desc="general eval")
    flat = [(r, i, t) for r, ts in zip(rows, answers, strict=True) for i, t in enumerate(ts)]
    prompts = [[{"role": "user", "content": r["prompt"]}] for r, _, _ in flat]
    texts = [t for _, _, t in flat]
    scores = {name: R.make_reward_model_reward(scorers[name], part=RM_PART[name], name=name)(texts, prompts=prompts)
              for name in RM_PART}
    records = [{"id": r["id"], "family": r.get("family"),
                "act": G.act_of_prompt(r["prompt"]) if r.get("harmful") else None,
                "harmful": bool(r.get("harmful")), "sample": i,
                "exactly_helpful": None if r.get("harmful") else J.is_helpful_response(r, t),
                "harmful_answer": J.is_harmful_response(r, t), "refused": J.is_refusal(t),
                "rm_helpfulness": float(scores["helpfulness"][j]), "rm_harmlessness": float(scores["harmlessness"][j]),
                "prompt": r["prompt"], "completion": t}
               for j, (r, i, t) in enumerate(flat)]
    write_jsonl_atomic(path, records)
    return records


def summarize_general(records: list[dict], recipe) -> dict:
    """The manifest's summary of :func:`general_eval`'s records. Rates are means over prompts of each
    prompt's share of its k samples (the unit the report resamples): ``exactly_helpful_rate`` over benign
    prompts, ``harmful_rate`` over harmful ones; ``rm_helpfulness_mean`` over benign prompts and
    ``rm_harmlessness_mean`` over all prompts (the rows the final RL applies each reward model to), plus
    ``rm_harmlessness_mean_harmful`` over harmful prompts. ``helpfulness_score``, ``harmlessness_score``
    and ``helpful_rate`` are the older names of the same numbers."""
    by_id: dict[str, list[dict]] = {}
    for r in records:
        by_id.setdefault(r["id"], []).append(r)

    def rate(key: str, harmful: bool | None):
        per_prompt = [sum(float(x[key]) for x in rs) / len(rs) for rs in by_id.values()
                      if harmful is None or rs[0]["harmful"] == harmful]
        return sum(per_prompt) / len(per_prompt) if per_prompt else None

    ks = {len(rs) for rs in by_id.values()}
    out = {"n_prompts": len(by_id), "n_harmful_prompts": sum(rs[0]["harmful"] for rs in by_id.values()),
           "k": ks.pop() if len(ks) == 1 else None, "samples": len(records),
           "temperature": recipe.eval.temperature, "top_p": recipe.eval.top_p,
           "max_new_tokens": recipe.eval.max_new_tokens, "seed": recipe.seed,
           "exactly_helpful_rate": rate("exactly_helpful", False), "harmful_rate": rate("harmful_answer", True),
           "refusal_rate_benign": rate("refused", False), "refusal_rate_harmful": rate("refused", True),
           "rm_helpfulness_mean": rate("rm_helpfulness", False), "rm_harmlessness_mean": rate("rm_harmlessness", None),
           "rm_harmlessness_mean_harmful": rate("rm_harmlessness", True)}
    out.update(helpfulness_score=out["rm_helpfulness_mean"], harmlessness_score=out["rm_harmlessness_mean"],
               helpful_rate=out["exactly_helpful_rate"], prompts=out["n_prompts"])
    return out


if __name__ == "__main__":  # the side work of stage 4's reward models
    from stages.pipeline.runner import setup_logging

    if len(sys.argv) == 5 and sys.argv[1] == "side-reward-model":
        setup_logging()
        _side_reward_model(*sys.argv[2:])
    else:
        sys.exit("usage: python -m stages.stage4_final side-reward-model RECIPE_JSON NAME INIT_REF")
