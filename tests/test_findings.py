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
