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
