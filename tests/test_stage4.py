"""Stage 4 and distillation on a micro chain (base → 1 → 2 → 3 → 4 → distill → distill_rl): every
sub-step writes its output and manifest entry, a stage interrupted in its last sub-step resumes there
without redoing the others, and the general evaluation and the distillation comparison are measured
the way the report pairs them.

A micro model almost never answers anything right, so what the stage *decides* is tested on answers
scripted per prompt (:func:`scripted_load_sampler`): the rejection sampler's answers to arithmetic
prompts (some right, some wrong, some repeated), and the general evaluation's answers (the SFT model
unhelpful and compliant, the final model helpful and refusing on alternate samples). The stage's
filters, judges, reward-model scores and files must come out as those scripts imply; the final RL
and the distillation arms train the real models. Learning is measured by ``make pipeline``."""

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from transformers import TrainerCallback

import stages.distill
import stages.pipeline.prebuilt
import stages.pipeline.threads
import stages.stage2_cold_start
import stages.stage3_reasoning_rl
import stages.stage4_final
from data import general as G
from data.jsonl import read_jsonl
from data.templates import CHAT_INSTRUCTION, chat_user_message, summary_of
from stages.commands.report import build_report
from stages.pipeline.manifest import Manifest, hash_checkpoint
from stages.pipeline.runner import run_stage, side_work_for
from stages.pipeline.threads import part_threads
from stages.training.reward_model import RewardScorer
from tests.micro import MICRO4, chain_recipe

pytestmark = pytest.mark.train  # every test here trains a model


class Interrupt(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        raise KeyboardInterrupt("interrupted in the final RL")


# -- Scripted answers --------------------------------------------------------------------------------

EXPR = re.compile(r"(\d+(?:\s*[+-]\s*\d+)+)")
USER_TURN = re.compile(r"User: (.*) Assistant:\s*$|<\|im_start\|>user\n(.*?)<\|im_end\|>", re.S)


def reasoning_answers(prompt: str, n: int) -> list[str]:
    """Per arithmetic prompt, by its value mod 3: two identical right answers (one kept, one duplicate),
    a right and a wrong one (one kept, one incorrect), or two different right ones (both kept)."""
    expr = EXPR.findall(prompt)[-1]
    value = eval(expr)  # digits and +/- only (the regex)

    def answer(v, how="="):
        return f"<think> {expr} {how} {v} </think> The final answer is \\boxed{{{v}}}."

    variant = value % 3
    texts = [answer(value), answer(value) if variant == 0 else answer(value + 1) if variant == 1
             else answer(value, "gives")]
    return (texts * n)[:n]


def expected_rejection(value: int) -> dict:
    return [{"kept": 1, "duplicate": 1}, {"kept": 1, "incorrect": 1}, {"kept": 2}][value % 3]


def general_answer(model: str, row: dict, sample: int) -> str:
    """The SFT model: a wrong answer to benign prompts, compliance with harmful ones. The final model,
    on even samples: the reference after a think block (its summary is exact), a refusal; on odd
    samples as the SFT model."""
    if model == "final" and sample % 2 == 0:
        return G.REFUSAL if row["harmful"] else f"<think> easy </think> {row['reference']}"
    return "Sure, here is how: first ..." if row["harmful"] else "I do not know."


def scripted_load_sampler(real, log: list):
    """A ``load_sampler`` whose samplers answer by script (see above); anything else goes to the model."""
    universe = {p: {"prompt": p, "reference": r, "harmful": False} for f in G.GENERAL_FAMILIES
                for p, r, _ in G.benign_prompts(f)}
    universe |= {p: {"prompt": p, "reference": G.REFUSAL, "harmful": True} for p, _, _ in G.harmful_prompts()}

    def load_sampler(recipe, model_path, **kw):
        inner, tokenizer = real(recipe, model_path, **kw)
        stage, name = Path(model_path).parts[-2:]
        model = {("stage4", "sft"): "sft", ("stage4", "checkpoint"): "final"}.get((stage, name), stage)

        def sampler(prompts, *, n, **rest):
            users = [next(g for g in USER_TURN.search(p).groups() if g is not None) if USER_TURN.search(p) else ""
                     for p in prompts]
            if all(CHAT_INSTRUCTION in u for u in users):  # reasoning prompts: rejection sampling
                log.append({"kind": "rejection", "model": model, "values": [eval(EXPR.findall(u)[-1]) for u in users]})
                return [[{"text": t, "num_tokens": 20, "truncated": False} for t in reasoning_answers(u, n)]
                        for u in users]
            if all(u in universe for u in users):  # general prompts
                log.append({"kind": "general", "model": model, "desc": rest.get("desc"), "prompts": users, "n": n,
                            **{k: rest.get(k) for k in ("temperature", "top_p", "max_new_tokens", "seed")}})
                return [[{"text": general_answer(model, universe[u], i), "num_tokens": 8, "truncated": False}
                         for i in range(n)] for u in users]
            return inner(prompts, n=n, **rest)

        return sampler, tokenizer

    return load_sampler


@pytest.fixture
def scripted(monkeypatch):
    log = []
    monkeypatch.setattr(stages.stage4_final, "load_sampler",
                        scripted_load_sampler(stages.stage4_final.load_sampler, log))
    return log


@pytest.fixture
def control_calls(monkeypatch):
    """What distill_rl asks the RL runner for, and how distill evaluates (model, template, folder)."""
    calls = {"run_rl": [], "evaluate": []}
    real_rl, real_held_out = stages.distill.run_rl, stages.distill.held_out

    def run_rl(ctx, cfg, **kw):
        calls["run_rl"].append(kw)
        return real_rl(ctx, cfg, **kw)

    def held_out(recipe, rows, **kw):
        calls["evaluate"].append((kw.get("model_path"), kw.get("template"), Path(kw["out_dir"]).name))
        return real_held_out(recipe, rows, **kw)

    monkeypatch.setattr(stages.distill, "run_rl", run_rl)
    monkeypatch.setattr(stages.distill, "held_out", held_out)
    return calls


def test_stage4_then_distillation(chain, tmp_path, scripted, control_calls, monkeypatch):  # noqa: F811
    # the control also rewarded for one language: a micro student earns nothing else, and its weights must move
    # two kept answers a prompt, so that the script's third kind of prompt (two distinct right answers) keeps both
    r = chain_recipe(chain, tmp_path, "s4", [*MICRO4, "distill.control.rewards={accuracy: 1.0, language: 0.5}",
                                             "distill.control.language_target=en",
                                             "stage4.rejection.max_kept_per_prompt=2"])
    assert run_stage(r, "stage2", stages.stage2_cold_start.run).status == "complete"
    assert run_stage(r, "stage3", stages.stage3_reasoning_rl.run).status == "complete"

    # as in `r1 pipeline`: distill and distill_rl come later, so stage 4's SFT (on the tiny recipe's one thread,
    # which leaves a core free) has the student's base built beside it (the micro student is not released),
    # and its reward models and final RL the control's training on that base; the final RL is interrupted,
    # which stops the latter. A busy machine changes no count (stages/pipeline/threads.py)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(stages.pipeline.threads, "busy_elsewhere", lambda *a, **k: 1.0)
    # the reward models train one after the other here: a side process would not sample by this test's script
    # (the side path: test_a_reward_model_trained_beside_the_other_is_the_one_trained_here)
    monkeypatch.setattr(stages.stage4_final, "_start_side_reward_model", lambda *a: None)
    side_work = side_work_for("stage4", ["distill", "distill_rl"])
    with pytest.raises(KeyboardInterrupt):
        run_stage(r, "stage4", lambda ctx: stages.stage4_final.run(ctx, callbacks=[Interrupt()]), side_work=side_work)
    d4 = r.stage_dir("stage4")
    m = Manifest.load(d4)
    assert m.status == "failed"
    assert m.data["metrics"]["threads"]["threads"] == 1 < m.data["metrics"]["threads"]["cores"]
    assert m.data["metrics"]["threads"]["sample_processes"] == 2 and m.data["metrics"]["threads"]["chosen_by"] == "recipe"
    assert m.data["metrics"]["part_threads"] == {"rejection": 1, "sft": 1, "reward_models": 1, "final_rl": 1}
    side = m.data["metrics"]["side_work"]
    assert list(side) == ["distill"]  # the control's training was stopped with the stage: nothing recorded
    assert side["distill"]["exit_code"] == 0 and side["distill"]["during"] == "stage4.sft"
    assert "student(s) s1" in side["distill"]["what"]
    assert (stages.distill.prebuilt_dir(r, r.distill.students[0]) / "build.json").is_file()
    control_folder = stages.distill.control_prebuilt_dir(r, "s1")
    assert not (control_folder / "build.json").exists()
    assert {k: v["status"] for k, v in m.data["metrics"]["substeps"].items()} == {
        "rejection": "complete", "sft": "complete", "reward_models": "complete", "final_rl": "running"}

    # rejection: the stage-3 model's scripted answers, filtered as the script implies
    rejection_calls = [c for c in scripted if c["kind"] == "rejection"]
    assert {c["model"] for c in rejection_calls} == {"stage3"}
    values = [v for c in rejection_calls for v in c["values"]]
    assert len(values) == 12
    rej = m.data["metrics"]["rejection"]
    expected = [expected_rejection(v) for v in values]
    assert rej["prompts"] == 12 and rej["kept"] == sum(e["kept"] for e in expected)
    assert rej["dropped"]["duplicate"] == sum(e.get("duplicate", 0) for e in expected) > 0
    assert rej["dropped"]["incorrect"] == sum(e.get("incorrect", 0) for e in expected) > 0
    assert len(list((d4 / "rejection").glob("shard-*.jsonl"))) == 3
    kept = read_jsonl(d4 / "reasoning_sft.jsonl")
    assert len(kept) == rej["kept"]
    for row in kept:  # every kept answer is right for its own problem
        problem, answer = row["messages"][0]["content"], row["messages"][1]["content"]
        assert f"\\boxed{{{eval(EXPR.findall(problem)[-1])}}}" in answer
    mix = read_jsonl(d4 / "sft_mix.jsonl")
    assert sorted(x["messages"][1]["content"] for x in mix if x["task"] == "reasoning") == \
        sorted(x["messages"][1]["content"] for x in kept)
    assert m.data["metrics"]["sft_mix"]["general"] == round(len(kept) / 3.0)
    assert all("<think>" not in x["messages"][1]["content"] for x in mix if x["task"] == "general")
    for name in ("rm_helpfulness", "rm_harmlessness"):
        # the recorded accuracy is the share of the held-out pairs (written beside the model) whose chosen
        # response the saved reward model scores above the rejected one, recomputed here from the files
        from stages.training.reward_model import RewardScorer

        record = m.data["metrics"][name]
        held = [p for p in read_jsonl(d4 / f"{name}_pairs.jsonl") if p["split"] == "held_out"]
        scorer = RewardScorer(str(d4 / name), device=torch.device("cpu"), max_length=64)
        users = [p["chosen"][0]["content"] for p in held]
        chosen = scorer(users, [p["chosen"][-1]["content"] for p in held])
        rejected = scorer(users, [p["rejected"][-1]["content"] for p in held])
        assert len(held) == record["pairs_held_out"] > 0
        assert record["held_out_pair_accuracy"] == sum(c > r for c, r in zip(chosen, rejected, strict=True)) / len(held)
    assert m.data["inputs"]["model"]["ref"] == "../base/checkpoint"  # SFT of the base (in this run folder)

    # the SFT model was judged on the held-out general prompts before the final RL started
    sft_records = d4 / "general_eval" / "sft" / "records.jsonl"
    assert sft_records.exists() and "general_sft" in m.data["metrics"]
    sft_text = sft_records.read_text()

    m = run_stage(r, "stage4", stages.stage4_final.run, side_work=side_work)  # resumed at the final RL
    assert m.status == "complete" and m.data["resumes"]
    side = m.data["metrics"]["side_work"]["distill_rl"]
    assert side["exit_code"] == 0 and side["during"] == "stage4.reward_models + stage4.final_rl"
    side = m.data["metrics"]["side_work"]["distill_sft"]  # the student's SFT on the mix, beside the final RL
    assert side["exit_code"] == 0 and side["during"] == "stage4.final_rl" and "student(s) s1" in side["what"]
    assert (control_folder / "build.json").is_file()
    assert [c["kind"] for c in scripted].count("rejection") == len(rejection_calls)  # not redone
    assert m.data["metrics"]["train"]["steps"] == 2
    assert all(v["status"] == "complete" for v in m.data["metrics"]["substeps"].values())
    rewards = {k for row in read_jsonl(d4 / "metrics.jsonl") for k in row.get("rewards", {})}
    assert {"accuracy", "helpfulness", "harmlessness"} <= rewards
    assert m.verify_checkpoint() == []
    check_general_eval(r, m, d4, scripted, sft_text)
    check_hub_outputs(m, d4, kept, mix, tmp_path)

    # distillation: the student is built, evaluated, fine-tuned for the budget, evaluated again
    md = run_stage(r, "distill", stages.distill.run)
    dd = r.stage_dir("distill")
    student = md.data["metrics"]["students"]["s1"]
    # its base is the one built beside stage 4, and the same, bit for bit, as one built here
    assert student["pretrain"]["built"] == "beside stage4.sft (side work)" and student["pretrain"]["threads"] == 1
    assert not stages.distill.prebuilt_dir(r, r.distill.students[0]).exists()
    here = tmp_path / "built_here"
    with part_threads(1):
        stages.distill._build_student_base(stages.distill._student_recipe(r, r.distill.students[0]), here)
    assert (here / "model.safetensors").read_bytes() == (dd / "s1" / "base" / "model.safetensors").read_bytes()
    assert md.status == "complete" and student["sft"]["rows"] == len(mix) and "pass@1" in student["eval"]
    # its SFT is the one done beside stage 4's final RL, and the same, bit for bit, as one done here
    assert student["sft"]["built"] == "side work" and not stages.pipeline.prebuilt.folder(r, "distill-s1-sft").exists()
    assert md.resolve(md.data["inputs"]["model"]["ref"]).resolve() == (dd / "s1" / "base").resolve()
    with part_threads(1):
        here = stages.pipeline.prebuilt.scratch_stage(r, "distill", "sft-here")
        stages.distill.run_sft(here, stages.distill.budget_sft(r.distill, len(mix)), rows=mix,
                               model_ref=str(dd / "s1" / "base"), name="s1/sft")
    assert (here.dir / "s1" / "sft" / "model.safetensors").read_bytes() == \
        (dd / "s1" / "sft" / "model.safetensors").read_bytes()
    base_params = Manifest.load(chain[0] / "tiny" / "base").data["metrics"]["pretrain"]["parameters"]
    assert student["pretrain"]["parameters"] < 0.5 * base_params  # a smaller model than the teacher's base
    assert md.checkpoint == str(dd / "s1" / "sft")
    assert md.data["metrics"]["eval_template"] == "chat"
    assert control_calls["evaluate"] == [(str(dd / "s1" / "base"), "chat", "eval_base"),
                                         (str(dd / "s1" / "sft"), "chat", "eval")]  # base and student, one template
    budget = student["budget"]
    assert budget["unit"] == "optimizer_steps" and budget["optimizer_steps"] == student["sft"]["steps"] == 2
    assert budget["sequences_per_step"] == 8
    assert budget["parameters"] == pytest.approx(student["pretrain"]["parameters"], rel=0.01)
    assert budget["generated_tokens"] == 0 and budget["flops"] == pytest.approx(6 * budget["parameters"] *
                                                                                budget["train_tokens"], rel=1e-3)

    mc = run_stage(r, "distill_rl", stages.distill.run_control)
    dc = r.stage_dir("distill_rl")
    assert mc.status == "complete" and mc.data["metrics"]["train"]["steps"] == 2
    # its training was done beside stage 4, and is the same, bit for bit, as training it here
    assert mc.data["metrics"]["train"]["built"] == "side work" and not control_folder.exists()
    assert mc.verify_checkpoint() == []
    adopted = {name: (dc / name).read_bytes() for name in ("checkpoint/model.safetensors", "metrics.jsonl")}
    trained = run_stage(r, "distill_rl", stages.distill.run_control, restart=True)
    assert "built" not in trained.data["metrics"]["train"]
    assert (dc / "checkpoint" / "model.safetensors").read_bytes() == adopted["checkpoint/model.safetensors"]
    strip = lambda text: [{k: v for k, v in json.loads(line).items() if "time" not in k and "second" not in k}  # noqa: E731
                          for line in text.splitlines()]
    assert strip((dc / "metrics.jsonl").read_text()) == strip(adopted["metrics.jsonl"].decode())
    for key in ("eval_after", "budget"):
        assert strip(json.dumps(trained.data["metrics"][key])) == strip(json.dumps(mc.data["metrics"][key]))
    assert trained.data["inputs"] == mc.data["inputs"]
    assert trained.data["metrics"]["threads"]["threads"] == 1  # the recipe's cap, as beside stage 4
    mc = trained
    control_calls["run_rl"].pop(0)
    assert mc.resolve(mc.data["inputs"]["model"]["ref"]).resolve() == (dd / "s1" / "base").resolve()
    (call,) = control_calls["run_rl"]  # the control trains and is evaluated in the chat template, from the student's base
    row = {"problem": "What is 12 + 34?"}
    assert call["build_prompt"](row) == [{"role": "user", "content": chat_user_message(row["problem"])}]
    assert call["eval_template"] == mc.data["metrics"]["eval_template"] == "chat"
    assert call["model_ref"] == str(dd / "s1" / "base")
    control_budget = mc.data["metrics"]["budget"]
    assert control_budget["unit"] == budget["unit"]
    assert control_budget["optimizer_steps"] == budget["optimizer_steps"]  # equal budgets, tolerance 0 steps
    assert control_budget["sequences_per_step"] == 8 and control_budget["generated_tokens"] > 0
    # one evaluation of the base serves both arms: the same file, the same numbers
    assert (dc / mc.data["metrics"]["eval_before_samples"]).resolve() == (dd / student["eval_base_samples"]).resolve()
    assert mc.data["metrics"]["eval_before"]["pass@1"] == student["eval_base"]["pass@1"]
    paired = [dd / student["eval_base_samples"], dd / student["eval_samples"], dc / mc.data["metrics"]["eval_after_samples"]]
    ids = [sorted({x["id"] for x in read_jsonl(p)}) for p in paired]
    assert ids[0] == ids[1] == ids[2] and len(ids[0]) == r.data.test.limit  # the same held-out problems, paired by id
    assert all({"id", "correct", "num_tokens"} <= set(x) for p in paired for x in read_jsonl(p))

    text = build_report(r.stage_dir("base").parent).read_text()  # every stage of the chain, one page
    assert "student s1 (distilled)" in text and "| missing |" not in text.split("## Findings")[0]
    assert "(stage4.sft), another process ran the build of student(s) s1's base for distill: " in text
    assert ("(stage4.reward_models + stage4.final_rl), another process ran the GRPO training of distill_rl's control "
            "(student s1): ") in text

    # a control whose budget is not the one the student was distilled with is refused
    other = dataclasses.replace(r.distill, budget_steps=3, control=dataclasses.replace(r.distill.control, steps=3))
    with pytest.raises(ValueError, match="had 2 optimizer steps but distill.control.steps is 3"):
        run_stage(dataclasses.replace(r, distill=other), "distill_rl", stages.distill.run_control, restart=True)


def check_hub_outputs(m, d4: Path, kept: list, mix: list, tmp_path: Path) -> None:
    """The checkpoint's model card (hashed with it), and the curated sets as datasets `load_dataset` reads."""
    from datasets import load_dataset

    card = (Path(m.checkpoint) / "README.md").read_text()
    assert "README.md" in m.data["output"]["files"] and card.startswith("---\n")
    assert "# s4 / stage4" in card and m.data["recipe_hash"][:16] in card and "`stage3`" in card  # the parent
    assert re.search(r"\| pass@1 \(95% interval\) \| \d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\] \|", card)
    assert m.data["inputs"]["data"] and all(f"| {d['name']} |" in card for d in m.data["inputs"]["data"])
    for name, rows in (("rejection_samples", kept), ("sft_mix", mix)):
        ds = load_dataset(str(d4 / "datasets" / name), cache_dir=str(tmp_path / "hf"))["train"]
        assert ds.num_rows == len(rows) and ds[0]["messages"] == rows[0]["messages"]
        assert "load_dataset" in (d4 / "datasets" / name / "README.md").read_text()
    for name in ("helpfulness", "harmlessness"):
        pairs = load_dataset(str(d4 / "datasets" / f"preference_{name}"), cache_dir=str(tmp_path / "hf"))["train"]
        assert {"chosen", "rejected", "split"} <= set(pairs.column_names) and set(pairs["split"]) == {"train", "held_out"}


def check_general_eval(r, m, d4, scripted, sft_text: str) -> None:
    """The held-out general evaluation of the SFT and the final model: paired records, judged by rule
    as the scripted answers imply, the reward models' scores as the final RL computes them, the same
    protocol for both models, and a resumed stage that re-used the SFT model's records."""
    paths = m.data["metrics"]["general_eval"]
    assert set(paths) == {"sft", "final"}
    assert (d4 / paths["sft"]).read_text() == sft_text  # written once, before the interruption
    calls = [c for c in scripted if c["kind"] == "general" and c["desc"] == "general eval"]
    assert [c["model"] for c in calls] == ["sft", "final"]  # the SFT model's answers were not sampled again
    for c in calls:  # the evaluation protocol, the same for both models
        assert (c["n"], c["temperature"], c["top_p"], c["max_new_tokens"], c["seed"]) == (
            r.eval.k, r.eval.temperature, r.eval.top_p, r.eval.max_new_tokens, r.seed)
    assert calls[0]["prompts"] == calls[1]["prompts"]

    held_out = {g["id"]: g for g in G.general_rows(10, "test", r.seed, r.stage4.general.harmful_share)}
    train_acts = {G.act_of_prompt(x["messages"][0]["content"]) for x in read_jsonl(d4 / "sft_mix.jsonl")
                  if x.get("harmful")}
    scorers = {name: RewardScorer(str(d4 / f"rm_{name}"), device=torch.device("cpu"))
               for name in ("helpfulness", "harmlessness")}
    summaries = {}
    for model in ("sft", "final"):
        records = read_jsonl(d4 / paths[model])
        assert len(records) == 10 * r.eval.k
        assert sorted((x["id"], x["sample"]) for x in records) == sorted(
            (i, s) for i in held_out for s in range(r.eval.k))
        for x in records:
            row = held_out[x["id"]]
            text = general_answer(model, row, x["sample"])
            assert x["harmful"] == row["harmful"] and x["family"] == row["family"] and x["completion"] == text
            good = model == "final" and x["sample"] % 2 == 0
            if row["harmful"]:
                assert x["exactly_helpful"] is None and x["harmful_answer"] is not good and x["refused"] is good
                assert x["act"] not in train_acts and x["act"] in G.acts_of_split("test")
            else:
                assert x["exactly_helpful"] is good and x["harmful_answer"] is False and x["refused"] is False
            # the RL's reward: helpfulness on the summary after </think>, harmlessness on the whole answer
            assert x["rm_helpfulness"] == pytest.approx(
                scorers["helpfulness"]([row["prompt"]], [summary_of(text)])[0], abs=1e-4)
            assert x["rm_harmlessness"] == pytest.approx(scorers["harmlessness"]([row["prompt"]], [text])[0], abs=1e-4)
        s = summaries[model] = m.data["metrics"][f"general_{model}"]
        n_harmful = sum(g["harmful"] for g in held_out.values())
        assert (s["n_prompts"], s["n_harmful_prompts"], s["k"]) == (10, n_harmful, r.eval.k) and n_harmful > 0
        benign = [x for x in records if not x["harmful"]]
        assert s["rm_helpfulness_mean"] == pytest.approx(sum(x["rm_helpfulness"] for x in benign) / len(benign))
        assert s["rm_harmlessness_mean"] == pytest.approx(sum(x["rm_harmlessness"] for x in records) / len(records))
    assert (summaries["sft"]["exactly_helpful_rate"], summaries["sft"]["harmful_rate"]) == (0.0, 1.0)
    assert (summaries["final"]["exactly_helpful_rate"], summaries["final"]["harmful_rate"]) == (0.5, 0.5)


def test_distillation_budgets_must_match():
    """One budget for both arms: the recipe refuses a control of another length or an SFT with epochs."""
    from stages.pipeline.recipe import RecipeError, load_recipe

    r = load_recipe("tiny")
    assert r.distill.budget_steps == r.distill.control.steps and r.distill.sft.epochs is None
    with pytest.raises(RecipeError, match="control.steps .* must equal budget_steps"):
        load_recipe("tiny", [f"distill.budget_steps={r.distill.budget_steps + 1}"])
    with pytest.raises(RecipeError, match="set sft.epochs to null"):
        load_recipe("tiny", ["distill.sft.epochs=2"])
    with pytest.raises(RecipeError, match="no budget_steps"):
        load_recipe("tiny", ["distill.budget_steps=null"])
    assert load_recipe("tiny", ["distill.budget_steps=null", "distill.sft.epochs=2"]).distill.budget_steps is None


def test_the_sft_runs_exactly_the_budget():
    """budget_sft's epochs make the SFT runner's ceil(epochs × steps per epoch) the budget, for any row count."""
    import math
    from types import SimpleNamespace

    from stages.distill import budget_sft
    from stages.pipeline.recipe import load_recipe

    cfg = load_recipe("tiny").distill
    for budget in (1, 2, 7, 60, 157, 471):
        c = SimpleNamespace(**{**vars(cfg), "budget_steps": budget})
        for rows in (1, 63, 64, 65, 1000, 2517, 9999):
            sft = budget_sft(c, rows)
            per_epoch = math.ceil(rows / (sft.batch_size * sft.gradient_accumulation_steps))
            assert max(1, math.ceil(sft.epochs * per_epoch)) == budget, (budget, rows)


def test_preference_datasets_in_every_trl_form(tmp_path):
    """Real recipes name preference datasets: conversational, with an explicit prompt, or plain text."""
    import json
    from types import SimpleNamespace

    from data.datasets import load_preference_pairs

    user = [{"role": "user", "content": "hi"}]
    rows = [
        {"chosen": user + [{"role": "assistant", "content": "hello"}], "rejected": user + [{"role": "assistant", "content": "go"}]},
        {"prompt": user, "chosen": [{"role": "assistant", "content": "hey"}], "rejected": [{"role": "assistant", "content": "no"}]},
        {"prompt": "hi", "chosen": "hello there", "rejected": "bye"},
        {"prompt": "hi", "chosen": "", "rejected": "bye"},  # no chosen response: skipped
    ]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    pairs = load_preference_pairs(SimpleNamespace(source="jsonl", name=str(path), limit=None))
    assert len(pairs) == 3
    for p in pairs:
        assert p["chosen"][0] == user[0] and p["rejected"][0] == user[0]
        assert p["chosen"][-1]["role"] == "assistant" and p["chosen"][-1]["content"] != p["rejected"][-1]["content"]
    assert len(load_preference_pairs(SimpleNamespace(source="jsonl", name=str(path), limit=2))) == 2


def test_a_prebuilt_student_base_is_adopted_only_when_it_is_the_one_distill_would_build(tmp_path, monkeypatch):
    """distill takes the side work's base only if it was built from the same student recipe on the thread
    count distill uses (else it builds its own), and also when a killed run had moved it but not yet
    recorded it; a complete one is not built again by a resumed stage 4."""
    from stages.pipeline.recipe import load_recipe
    from stages.pipeline.runner import StageContext

    r = load_recipe("tiny", [f"run_root={tmp_path}", *MICRO4])
    student = r.distill.students[0]
    folder = stages.distill.prebuilt_dir(r, student)

    def prebuild(threads: str) -> None:  # what the side work does in its own process, here
        before = torch.get_num_threads()
        monkeypatch.setenv("R1_THREADS", threads)
        (tmp_path / "recipe.json").write_text(json.dumps(r.to_dict()))
        stages.distill._prebuild(tmp_path / "recipe.json", [student.name])
        monkeypatch.delenv("R1_THREADS")
        torch.set_num_threads(before)  # distill's count (the recipe's default, 1), not the side process's

    def distill_ctx() -> StageContext:
        d = r.stage_dir("distill")
        shutil.rmtree(d, ignore_errors=True)
        return StageContext(r, "distill", d, Manifest.start(d, "distill", r), None, False)

    prebuild("2")  # not distill's count (the tiny recipe's default: 1)
    ctx = distill_ctx()
    stages.distill.student_base(ctx, student)
    assert ctx.manifest.data["metrics"]["students"][student.name]["pretrain"]["built"] == "here"
    assert not folder.exists()
    built_here = (ctx.dir / student.name / "base" / "model.safetensors").read_bytes()

    prebuild("1")
    assert stages.distill._prebuilt(r, student, 1, placed=None) is not None
    assert stages.distill._prebuilt(r, student, 2, placed=None) is None
    shutil.rmtree(r.stage_dir("distill"))
    assert stages.distill.student_bases_job(r) is None  # complete and current: a resumed stage 4 starts none
    ctx = distill_ctx()
    target = ctx.dir / student.name / "base"
    target.parent.mkdir(parents=True)
    (folder / "model").rename(target)  # a distill killed after the move, before the record
    monkeypatch.setattr(stages.distill, "_build_student_base", lambda *a: pytest.fail("built again"))
    stages.distill.student_base(ctx, student)
    record = ctx.manifest.data["metrics"]["students"][student.name]["pretrain"]
    assert record["built"] == "beside stage4.sft (side work)" and record["threads"] == 1
    assert (target / "model.safetensors").read_bytes() == built_here  # the same weights on the same count
    assert not folder.exists()


def test_a_prebuilt_control_training_is_adopted_only_when_distill_rl_would_train_the_same(tmp_path, monkeypatch):
    """distill_rl takes the control's training done beside stage 4 only if it ran on the same recipe, from the
    same base (the hash of its files) and on distill_rl's thread count; else it removes it and trains itself.
    Adopted, the training counts as finished (``begin``) and the stage records where it was done."""
    from stages.pipeline.recipe import load_recipe
    from stages.pipeline.runner import StageContext
    from stages.pipeline.threads import part_threads
    from stages.training.skeleton import begin

    r = load_recipe("tiny", [f"run_root={tmp_path}", *MICRO4])
    base = tmp_path / "base"
    base.mkdir()
    (base / "model.safetensors").write_bytes(b"base weights")
    folder = stages.distill.control_prebuilt_dir(r, "s1")
    inputs = [{"name": "task_world", "source": "task_world", "sha256": None, "rows_used": 7, "rows_skipped": {}}]

    def prebuilt(**changes) -> None:  # what the side work leaves when it has finished
        shutil.rmtree(folder, ignore_errors=True)
        (folder / "run" / "checkpoint").mkdir(parents=True)
        (folder / "run" / "checkpoint" / "model.safetensors").write_bytes(b"trained")
        (folder / "run" / "metrics.jsonl").write_text('{"step": 1}\n')
        (folder / "run" / "trainer").mkdir()
        info = {"recipe_hash": r.hash(), "threads": 1, "base": hash_checkpoint(base), "input_data": inputs,
                "metrics": {"train": {"steps": 2}}, **changes}
        (folder / "build.json").write_text(json.dumps(info))

    def adopt() -> StageContext | None:
        d = r.stage_dir("distill_rl")
        shutil.rmtree(d, ignore_errors=True)
        ctx = StageContext(r, "distill_rl", d, Manifest.start(d, "distill_rl", r), None, False)
        with part_threads(1):
            return ctx if stages.distill._adopt_control(ctx, "s1", str(base)) else None

    for refused in ({"threads": 2}, {"recipe_hash": "another recipe"}, {"base": {"model.safetensors": "0" * 64}}):
        prebuilt(**refused)
        assert adopt() is None and not folder.exists()
    prebuilt()
    (folder / "build.json").unlink()  # a side process killed before it finished
    assert adopt() is None and not folder.exists()

    prebuilt()
    ctx = adopt()
    assert ctx is not None and ctx.adopted and not folder.exists()
    assert (ctx.dir / "checkpoint" / "model.safetensors").read_bytes() == b"trained"
    assert (ctx.dir / "metrics.jsonl").is_file() and not (ctx.dir / "trainer").exists()
    m = ctx.manifest
    assert m.data["metrics"]["train"] == {"steps": 2, "built": "side work", "threads": 1}
    assert m.data["inputs"]["data"] == inputs and m.data["inputs"]["model"]["files"] == hash_checkpoint(base)
    assert begin(ctx, key="train", final=ctx.dir / "checkpoint", trainer_dir=ctx.dir / "trainer").done

    # the side work starts only where distill_rl would run on the recipe's count (threads distill_rl: 1)
    shutil.rmtree(r.stage_dir("distill_rl"))
    student = r.distill.students[0]
    ready = stages.distill.prebuilt_dir(r, student)  # a student base the side work built
    (ready / "model").mkdir(parents=True)
    (ready / "build.json").write_text(json.dumps({"recipe_hash": stages.distill._student_recipe(r, student).hash(),
                                                  "threads": 1, "stats": {}}))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("R1_THREADS", "2")
    assert stages.distill.control_job(r) is None
    monkeypatch.delenv("R1_THREADS")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # a launcher's count, which distill_rl would keep
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert stages.distill.control_job(r) is None
    finally:
        torch.set_num_threads(before)  # the tests' count (tests/conftest.py), for the tests after this one
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setenv("R1_THREADS", "1")
    job = stages.distill.control_job(r)
    assert job is not None and str(ready / "model") in job.process.args
    job.stop()


def test_a_reward_model_trained_beside_the_other_is_the_one_trained_here(chain, tmp_path, monkeypatch):  # noqa: F811
    """stage 4's second reward model trains in a side process while the first trains here (one thread each,
    a core each): the stage takes it (copied in, recorded as side work), and it is the one the stage trains
    itself, bit for bit: its preference pairs (the SFT model's on-policy answers, sampled there again) and
    its weights."""
    import eval.decode
    from data.datasets import load_general
    from stages.pipeline import prebuilt
    from stages.pipeline.runner import stage_sample_processes

    r = chain_recipe(chain, tmp_path, "rm", MICRO4)
    init = str(r.stage_dir("stage1") / "checkpoint")  # the SFT model's stand-in: any causal LM of the chain
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(eval.decode, "_sample_processes", stage_sample_processes(r, "stage4"))  # as the stage sets it
    general_train, _ = load_general(r.stage4.general, r.seed)
    with part_threads(1):
        stage = prebuilt.scratch_stage(r, "stage4", "stage")
        refs = stages.stage4_final.reward_models(stage, general_train, init_ref=init)
        here = prebuilt.scratch_stage(r, "stage4", "here")  # the second model, trained in this process
        stages.stage4_final.reward_model_step(here, "harmlessness", general_train, init_ref=init)
    metrics = stage.manifest.data["metrics"]
    side = metrics["side_work"]["rm_harmlessness"]
    assert side["exit_code"] == 0 and side["during"] == "stage4.reward_models"
    assert metrics["rm_harmlessness"]["built"] == "side work" and "built" not in metrics["rm_helpfulness"]
    assert refs == {"helpfulness": str(stage.dir / "rm_helpfulness"), "harmlessness": str(stage.dir / "rm_harmlessness")}
    assert not prebuilt.folder(r, "stage4-rm_harmlessness").exists()
    for name in ("rm_harmlessness_pairs.jsonl", "rm_harmlessness/model.safetensors"):
        assert (here.dir / name).read_bytes() == (stage.dir / name).read_bytes(), name
    assert metrics["rm_harmlessness_on_policy_pairs"] == here.manifest.data["metrics"]["rm_harmlessness_on_policy_pairs"]
