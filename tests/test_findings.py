"""``make findings``: the recipe of each extra run (stages/commands/findings.py)."""

from stages.commands.findings import variant_dir, variant_recipe
from stages.pipeline.recipe import load_recipe


def test_each_variant_changes_only_what_its_finding_compares():
    r = load_recipe("tiny")
    s1 = variant_recipe(r, 1, "stage1")
    assert s1.stage1.seed == 1 and s1.stage1.trl == r.stage1.trl and s1.stage3 == r.stage3
    nolang = variant_recipe(r, 2, "stage3_nolang").stage3
    assert "language" not in nolang.rewards and nolang.seed == 2
    higher, symmetric = variant_recipe(r, 0, "stage1_clip").stage1, variant_recipe(r, 0, "stage1_clip_sym").stage1
    assert higher.trl["num_iterations"] == symmetric.trl["num_iterations"] == r.findings.clip_iterations >= 2
    assert higher.setting("epsilon_high") == r.stage1.setting("epsilon_high") > r.stage1.setting("epsilon")
    assert symmetric.setting("epsilon_high") == symmetric.setting("epsilon")
    assert higher.eval_steps == [] and r.stage1.eval_steps  # the recipe itself is untouched
    assert variant_dir("runs/tiny", 0, "stage1").as_posix() == "runs/tiny/stage1"
    assert variant_dir("runs/tiny", 0, "stage1_clip").as_posix() == "runs/tiny/findings/seed0/stage1_clip"


def test_the_check_intervention_runs_only_on_a_base_whose_corpus_writes_checks(tmp_path, caplog):
    """eval/intervene.py reads the tiny world's check syntax: for a base whose corpus has no checks, or a
    pretrained model from the hub, make findings leaves the intervention out, saying so, before loading any
    model; the tiny recipe's corpus writes checks, so it goes on (here to a run folder with no stages)."""
    import logging

    from stages.commands.findings import run_check_intervention

    caplog.set_level(logging.INFO, logger="r1")
    for sets, skipped in ((["base.corpus.recheck=0", "base.corpus.template_recheck=0"], True),
                          (["base.pretrained=Qwen/Qwen2.5-1.5B"], True), ([], False)):
        caplog.clear()
        assert run_check_intervention(load_recipe("tiny", [f"run_root={tmp_path}", *sets])) == []
        assert ("no check intervention" in caplog.text) == skipped, (sets, caplog.text)


def test_the_verifying_world_is_the_tiny_recipe_with_its_five_corpus_settings_and_counts_own_slips(tmp_path):
    """scripts/verifying_world.py (`make verifying-world`): its settings are recipe fields (a renamed field
    fails to load), its base is built, not registered, and its table counts the model's own slips caught by
    the checks each seed's stage 1 writes, the base's row from stage 1's evaluation before training."""
    import json

    from scripts.verifying_world import recipe_for, table

    recipe = recipe_for(tmp_path, [])
    corpus = recipe.base.corpus
    assert recipe.base.release is None
    assert (corpus.chat_direct, corpus.direct, corpus.template_direct, corpus.slip, corpus.check_form) == \
        (0.08, 0.05, 0.19, 0.6, "compare_first")
    run = recipe.stage_dir("base").parent
    samples = {
        run / "stage1" / "eval_before": [{"id": "p1", "correct": False, "recheck": "plain", "completion": " <think> 8+4=13 write 3 </think>"}],
        run / "stage1" / "eval_after": [
            {"id": "p1", "correct": True, "recheck": "corrected", "completion": " <think> 8+4=13 (check 13-4=9 vs 8 not; wait, 8+4=12) write 2 </think>"},
            {"id": "p2", "correct": False, "recheck": "rechecked", "completion": " <think> 18-6=9 (check 9+6=15 vs 18 ok) write 9 </think>"}],
    }
    for folder, records in samples.items():
        folder.mkdir(parents=True)
        (folder / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    text, data = table(run, [0, 1])
    base, seed0, seed1 = text.splitlines()[2:]
    assert "| 0 of 1 | none read |" in base
    assert "| 2 of 2 | 1 of 2, 50.0%" in seed0, seed0
    assert data["stage 1, training seed 0"]["verification"]["own caught"]["hits"] == 1
    assert "not run" in seed1
