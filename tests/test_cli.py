"""The r1 command: clear errors, not tracebacks."""

import os
import sys

from tests import zygote


def r1(*args, cwd=None):  # in a fork of tests/zygote.py: the CLI's errors, without its imports each time
    return zygote.run([sys.executable, "-m", "stages.commands.cli", *args], cwd=cwd, env={**os.environ, "OMP_NUM_THREADS": zygote.THREADS},
                      timeout=300)


def test_unknown_recipe_key_is_a_clear_error(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("name: bad\nbase:\n  pretrian: {}\n")
    res = r1("base", "--recipe", str(p))
    assert res.returncode == 2
    assert "unknown key 'base.pretrian'" in res.stderr and str(p) in res.stderr
    assert "Traceback" not in res.stderr


def test_bad_override_is_a_clear_error():
    res = r1("base", "--set", "base.pretrain.steps=many")
    assert res.returncode == 2 and "base.pretrain.steps" in res.stderr and "Traceback" not in res.stderr


def test_child_stage_without_parent_says_what_to_run(tmp_path):
    res = r1("stage1", "--set", f"run_root={tmp_path}")
    assert res.returncode == 2, res.stderr
    assert "make base" in res.stderr and "Traceback" not in res.stderr


def test_status_of_missing_run(tmp_path):
    res = r1("status", str(tmp_path / "nothing"))
    assert res.returncode == 1 and "no such run folder" in res.stderr


def test_pipeline_runs_every_stage_in_order_in_one_process_then_status_and_report(monkeypatch, tmp_path):
    """`r1 pipeline` (what `make pipeline` runs): each stage of the stage table, in its order, with its own
    body and the command's --restart, then the status and the report of the run folder."""
    import stages.distill
    import stages.pipeline.runner
    from stages.commands import cli

    calls, side = [], {}

    def run_stage(recipe, stage, body, restart, side_work, rebuild):
        calls.append((stage, body, restart))
        side[stage] = side_work
        assert rebuild is False  # only `r1 base --rebuild` pretrains the base again

    monkeypatch.setattr(stages.pipeline.runner, "run_stage", run_stage)
    monkeypatch.setattr(cli, "cmd_status", lambda a: calls.append(("status", a.run_dir)))
    monkeypatch.setattr(cli, "cmd_report", lambda a: calls.append(("report", a.run_dir)))
    assert cli.main(["pipeline", "--restart", "--set", f"run_root={tmp_path}"]) == 0
    assert [c[0] for c in calls] == [*stages.pipeline.runner.STAGES, "status", "report"]
    assert calls[-4][1] is stages.distill.run and calls[-3][1] is stages.distill.run_control
    assert all(c[2] is True for c in calls[:-2])
    assert calls[-1][1] == str(tmp_path / "tiny")
    # the distillation student's base and SFT, and the control's training, are done beside stage 4 (distill
    # and distill_rl run later in the same command)
    assert side == {**{s: {} for s in stages.pipeline.runner.STAGES},
                    "stage4": {"distill": stages.distill.student_bases_job, "distill_rl": stages.distill.control_job,
                               "distill_sft": stages.distill.student_sft_job}}


def test_pipeline_dry_run_plans_every_stage(capsys):
    from stages.commands import cli
    from stages.pipeline.runner import STAGES

    assert cli.main(["pipeline", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert all(f"stage {s}:" in out for s in STAGES)
